"""The run store's tables: every column, its type and what it means, in one place.

`SCHEMA_VERSION` names this layout. Bump it when a column is added, renamed or
retyped, and add the step that upgrades an older workspace to
`appliance/store/migrations.py`.

Column kinds and how they look in SQL:
  str, int, float, bool   VARCHAR, BIGINT, DOUBLE, BOOLEAN
  ts                      TIMESTAMP WITH TIME ZONE (UTC); accepts datetime, epoch seconds or ISO text
  json                    JSON; pass Python values (dict, list, str, number), the store encodes them
  components              MAP(VARCHAR, DOUBLE), reward component by name: `components['right_tool']`
  list                    VARCHAR[], names: `list_contains(failure_modes, 'hallucinated_api')`

Tables that describe a thing whose state changes (runs, evals, checkpoints) are
"versioned": an update is a new partial row with the key and the changed
columns, and the view shows, per key, the newest non-NULL value of each column.

VIEWS are computed from the tables (they have no parts of their own), e.g.
`failure_modes_by_adapter`: the flywheel's failure modes per adapter version.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

SCHEMA_VERSION = 4

# A hidden ordering column on versioned tables: nanoseconds since the epoch at append time.
VERSION_COLUMN = "_version"

_ARROW_TYPES = {
    "str": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "ts": pa.timestamp("us", tz="UTC"),
    "json": pa.string(),  # JSON text on disk; the view casts it to DuckDB's JSON type
    "components": pa.map_(pa.string(), pa.float64()),
    "list": pa.list_(pa.string()),
}

# Columns filled with the append time when a row leaves them out.
NOW_DEFAULT_COLUMNS = frozenset({"created_at", "updated_at", "ts"})


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    doc: str
    required: bool = False

    @property
    def arrow_type(self) -> pa.DataType:
        return _ARROW_TYPES[self.kind]


@dataclass(frozen=True)
class Table:
    """One logical table: parquet parts under data/<name>/<partition value>/, one view in DuckDB."""

    name: str
    doc: str
    partition_by: str  # the column whose value names the part folder (a run or an eval)
    columns: tuple[Column, ...]
    key: str | None = None  # set for versioned tables
    column_names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "column_names", tuple(c.name for c in self.columns))

    @property
    def versioned(self) -> bool:
        return self.key is not None

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def arrow_schema(self) -> pa.Schema:
        fields = [pa.field(c.name, c.arrow_type) for c in self.columns]
        if self.versioned:
            fields.append(pa.field(VERSION_COLUMN, pa.int64()))
        return pa.schema(fields, metadata={b"appliance.table": self.name.encode(),
                                           b"appliance.schema_version": str(SCHEMA_VERSION).encode()})


def _verdict_columns() -> tuple[Column, ...]:
    """The flat Verdict.to_row() fields (appliance/task.py), with the same names."""
    return (
        Column("v_parse_ok", "bool", "the output parsed as a tool call (or a plain answer)"),
        Column("v_schema_ok", "bool", "the call matches the tool's JSON schema"),
        Column("v_tool_ok", "bool", "the right tool was called"),
        Column("v_arguments_ok", "bool", "every expected argument matched"),
        Column("v_arguments_fraction", "float", "fraction of expected arguments that matched"),
        Column("v_executed_ok", "bool", "the call executed without error in the world"),
        Column("v_state_match", "bool", "the world state after execution matches the expected state"),
        Column("v_unsafe", "bool", "an unsafe-action rule fired"),
        Column("v_unsafe_rule", "str", "name of the unsafe rule that fired"),
        Column("v_bucket", "str", "failure bucket (appliance.task.BUCKETS)"),
        Column("v_reason", "str", "one human line explaining the verdict"),
        Column("v_n_calls", "int", "number of tool calls in the output"),
    )


def _scored_output_columns() -> tuple[Column, ...]:
    """Columns shared by rollouts and eval samples: reward, its components and the verdict."""
    return (
        Column("reward", "float", "total reward"),
        Column("components", "components", "reward components by name, e.g. components['right_tool']"),
        *_verdict_columns(),
        Column("bucket", "str", "failure bucket; defaults to v_bucket"),
    )


_RUN_LIFECYCLE = (
    Column("owner", "str", "process writing it while running, host:pid:start (appliance/store/owner.py)"),
    Column("started_at", "ts", "when it started"),
    Column("finished_at", "ts", "when it finished (NULL while running)"),
    Column("updated_at", "ts", "time of the newest version of this row"),
)

TABLES: dict[str, Table] = {t.name: t for t in (
    Table("runs", "One row per run (eval, sft, grpo, pipeline); status updates are new versions.",
          partition_by="run_id", key="run_id", columns=(
              Column("run_id", "str", "run id (Workspace.new_id)", required=True),
              Column("kind", "str", "eval | sft | grpo | pipeline"),
              Column("status", "str", "running | finished | failed | stopped"),
              Column("model", "str", "base model name or path"),
              Column("adapter", "str", "adapter the run started from, if any"),
              Column("pack", "str", "task pack name"),
              Column("config", "json", "the typed run config"),
              Column("output_dir", "str", "folder with the run's config, adapters and trainer state"),
              Column("error", "str", "one-sentence error when status is failed"),
              *_RUN_LIFECYCLE,
          )),
    Table("rollouts", "One row per sampled completion during training (GRPO), with its reward and verdict.",
          partition_by="run_id", columns=(
              Column("run_id", "str", "run id", required=True),
              Column("step", "int", "training step", required=True),
              Column("task_id", "str", "task id in the pack"),
              Column("sample_index", "int", "index of the completion within its group"),
              Column("prompt", "str", "rendered prompt text"),
              Column("completion", "str", "model output text"),
              Column("prompt_tokens", "int", "prompt length in tokens"),
              Column("completion_tokens", "int", "completion length in tokens"),
              Column("latency_s", "float", "generation latency in seconds"),
              *_scored_output_columns(),
              Column("guided", "bool", "the task's reference answer, standing in for a sample of a group where no "
                     "sample succeeded (guide_failed_groups)"),
              Column("advantage", "float", "group-relative advantage used in the update"),
              Column("created_at", "ts", "when the row was written"),
          )),
    Table("evals", "One row per evaluation of a model (+ adapter) on a pack split; finishing is a new version.",
          partition_by="id", key="id", columns=(
              Column("id", "str", "eval id (Workspace.new_id)", required=True),
              Column("run_id", "str", "run that produced it, if any"),
              Column("model", "str", "base model name or path"),
              Column("adapter", "str", "adapter folder or checkpoint id (NULL for the base model)"),
              Column("pack", "str", "task pack name"),
              Column("split", "str", "pack split, e.g. heldout"),
              Column("k", "int", "samples per task"),
              Column("backend", "str", "generation backend: hf | vllm"),
              Column("status", "str", "running | finished | interrupted | failed"),
              Column("n_samples", "int", "number of scored samples"),
              Column("success_rate", "float", "fraction of samples in the success bucket"),
              Column("metrics", "json", "all metrics by name (success, invalid, unsafe, latency, buckets...)"),
              *_RUN_LIFECYCLE,
          )),
    Table("eval_samples", "One row per (task, sample) of an eval, with its trajectory, reward and verdict.",
          partition_by="eval_id", columns=(
              Column("eval_id", "str", "eval id", required=True),
              Column("task_id", "str", "task id in the pack"),
              Column("sample_index", "int", "sample number for this task (0..k-1)"),
              Column("trajectory", "json", "turn-by-turn messages and tool results"),
              Column("completion", "str", "final model output text"),
              *_scored_output_columns(),
              Column("latency_s", "float", "generation latency in seconds"),
              Column("prompt_tokens", "int", "prompt length in tokens"),
              Column("completion_tokens", "int", "completion length in tokens"),
              Column("created_at", "ts", "when the row was written"),
          )),
    Table("checkpoints", "One row per saved adapter; promotion and rollback are new versions.",
          partition_by="run_id", key="id", columns=(
              Column("id", "str", "checkpoint id", required=True),
              Column("run_id", "str", "run that saved it", required=True),
              Column("step", "int", "training step"),
              Column("path", "str", "adapter folder (PEFT format)"),
              Column("base_model", "str", "base model the adapter belongs to"),
              Column("status", "str", "saved | promoted | rolled_back | deleted"),
              Column("promoted", "bool", "true while this is the promoted adapter"),
              Column("metrics", "json", "held-out metrics at save or promotion time"),
              Column("note", "str", "why it was promoted or rolled back"),
              Column("created_at", "ts", "when it was saved"),
              Column("updated_at", "ts", "time of the newest version of this row"),
          )),
    Table("audits", "Human judgements of verifier verdicts (reward audit).",
          partition_by="eval_id", columns=(
              Column("eval_id", "str", "eval whose sample was judged", required=True),
              Column("task_id", "str", "sample key: task id"),
              Column("sample_index", "int", "sample key: sample number"),
              Column("label", "str", "agree | disagree (with the verifier)"),
              Column("note", "str", "free text"),
              Column("auditor", "str", "who judged"),
              Column("created_at", "ts", "when it was judged"),
          )),
    Table("events", "Every engine event of a run, in order (appliance/events.py).",
          partition_by="run_id", columns=(
              Column("run_id", "str", "run id", required=True),
              Column("seq", "int", "event number within the run"),
              Column("type", "str", "event type, e.g. step_metrics"),
              Column("payload", "json", "the event's fields"),
              Column("ts", "ts", "when it happened"),
          )),
    Table("alarms", "Warnings raised during a run (reward hacking, zero-variance groups, regressions).",
          partition_by="run_id", columns=(
              Column("run_id", "str", "run id", required=True),
              Column("step", "int", "training step, if any"),
              Column("kind", "str", "alarm name"),
              Column("severity", "str", "info | warning | critical"),
              Column("message", "str", "one human line"),
              Column("created_at", "ts", "when it was raised"),
          )),
    Table("trajectories", "One row per agent trajectory: a request served by `appliance serve` (its messages "
          "and the answer) or one line of an imported OpenAI chat-format JSONL file (appliance/flywheel).",
          partition_by="source_id", columns=(
              Column("id", "str", "trajectory id: the chat completion id when served, the line's id (or a hash "
                     "of the line) when imported", required=True),
              Column("source_id", "str", "the serve session (serve-...) or import (import-...) that stored it",
                     required=True),
              Column("source", "str", "served | imported"),
              Column("conversation_id", "str", "requests that continue one conversation share it; triage "
                     "judges the longest"),
              Column("file", "str", "imported: the file it came from"),
              Column("line", "int", "imported: its line number in that file"),
              Column("model", "str", "base model served, or the model an imported trajectory names"),
              Column("adapter", "str", "adapter folder served (NULL: the base model, or not known)"),
              Column("adapter_version", "str", "checkpoint id of the adapter (<run>/step-NNNNN), 'base' for the "
                     "base model alone, NULL when not known"),
              Column("pack", "str", "task pack it was served for or belongs to"),
              Column("task_id", "str", "pack task it attempts, when known (triage also matches the request text)"),
              Column("messages", "json", "OpenAI chat messages, the final assistant message included"),
              Column("tools", "json", "OpenAI tools offered to the model"),
              Column("completion", "str", "served: the model's raw output text"),
              Column("finish_reason", "str", "stop | length | tool_calls"),
              Column("outcome", "str", "reported outcome: success | failure | partial | unknown"),
              Column("feedback", "json", "human feedback as given (a rating, a comment, an object)"),
              Column("human_intervention", "bool", "a person stepped in during the trajectory"),
              Column("intervention", "json", "what the person did, when the file says"),
              Column("latency_s", "float", "seconds from receiving the request to answering it (served)"),
              Column("prompt_tokens", "int", "prompt length in tokens"),
              Column("completion_tokens", "int", "completion length in tokens"),
              Column("metadata", "json", "request parameters (served); the line's other fields (imported)"),
              Column("created_at", "ts", "when it was served or imported"),
          )),
    Table("trajectory_triage", "One row per trajectory per `appliance trajectories triage`: its failure "
          "modes, and the verifier's verdict when it matched a pack task.",
          partition_by="triage_id", columns=(
              Column("triage_id", "str", "the triage run (triage-...)", required=True),
              Column("trajectory_id", "str", "trajectories.id of the row judged", required=True),
              Column("conversation_id", "str", "its conversation (the trajectory id when it has none)"),
              Column("pack", "str", "pack it was judged against"),
              Column("task_id", "str", "pack task matched (NULL: none, so no verifier buckets)"),
              Column("replayed", "bool", "its calls were executed in the pack's world"),
              Column("n_calls", "int", "tool calls the trajectory made"),
              Column("failure_modes", "list", "every failure mode found (appliance.flywheel.triage.FAILURE_MODES)"),
              Column("primary_mode", "str", "the first failure mode, else success (verified) or unverified"),
              Column("reasons", "json", "failure mode -> one human line"),
              *_verdict_columns(),
              Column("created_at", "ts", "when it was judged"),
          )),
)}


@dataclass(frozen=True)
class View:
    """A view computed from the tables: `sql` is its SELECT; `columns` documents its columns, in order."""

    name: str
    doc: str
    sql: str
    columns: tuple[tuple[str, str], ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)


_TRAJECTORY_FAILURES_SQL = """
WITH latest AS (
    SELECT * FROM trajectory_triage
    QUALIFY row_number() OVER (PARTITION BY conversation_id ORDER BY created_at DESC, triage_id DESC) = 1
)
SELECT l.trajectory_id, t.source, coalesce(t.model, 'unknown') AS model,
       coalesce(t.adapter_version, 'unknown') AS adapter_version, coalesce(l.pack, t.pack, '') AS pack,
       l.task_id, mode AS failure_mode, mode = l.primary_mode AS is_primary,
       json_extract_string(l.reasons, '$.' || mode) AS reason, t.outcome, l.triage_id, l.created_at AS triaged_at
FROM latest l JOIN trajectories t ON t.id = l.trajectory_id,
     unnest(CASE WHEN len(l.failure_modes) = 0 THEN [l.primary_mode] ELSE l.failure_modes END) AS modes(mode)
"""

_FAILURE_MODES_BY_ADAPTER_SQL = """
WITH per_mode AS (
    SELECT model, adapter_version, pack, failure_mode, count(DISTINCT trajectory_id) AS trajectories
    FROM trajectory_failures GROUP BY ALL
), totals AS (
    SELECT model, adapter_version, pack, count(DISTINCT trajectory_id) AS judged
    FROM trajectory_failures GROUP BY ALL
)
SELECT p.model, p.adapter_version, p.pack, p.failure_mode, p.trajectories, t.judged,
       p.trajectories / t.judged AS share
FROM per_mode p JOIN totals t USING (model, adapter_version, pack)
ORDER BY p.model, p.adapter_version, p.pack, p.trajectories DESC, p.failure_mode
"""

# In dependency order: a view may read the ones before it.
VIEWS: dict[str, View] = {v.name: v for v in (
    View("trajectory_failures", "One row per failure mode of each conversation's latest triage (a trajectory "
         "with none has one row: success or unverified).", _TRAJECTORY_FAILURES_SQL, columns=(
             ("trajectory_id", "trajectories.id"),
             ("source", "served | imported"),
             ("model", "base model ('unknown' when not known)"),
             ("adapter_version", "adapter checkpoint id, 'base', or 'unknown'"),
             ("pack", "pack it was judged against"),
             ("task_id", "pack task matched, if any"),
             ("failure_mode", "one failure mode (or success / unverified)"),
             ("is_primary", "it is the trajectory's primary mode"),
             ("reason", "one human line"),
             ("outcome", "the outcome the trajectory reported"),
             ("triage_id", "the triage run that judged it"),
             ("triaged_at", "when it was judged"),
         )),
    View("failure_modes_by_adapter", "Failure modes per adapter version: how many judged trajectories show each.",
         _FAILURE_MODES_BY_ADAPTER_SQL, columns=(
             ("model", "base model"),
             ("adapter_version", "adapter checkpoint id, 'base', or 'unknown'"),
             ("pack", "pack judged against"),
             ("failure_mode", "failure mode (or success / unverified)"),
             ("trajectories", "trajectories showing it"),
             ("judged", "trajectories judged for this model, adapter version and pack"),
             ("share", "trajectories / judged"),
         )),
)}


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return f'"{name}"'


def _as_sql(column: Column, value: str) -> str:
    return f"CAST({value} AS JSON)" if column.kind == "json" else value


def view_sql(table: Table, parts_glob: str) -> str:
    """CREATE VIEW over every part file; versioned tables collapse to the newest value per key."""
    # Hive folders (run_id=...) let DuckDB skip other runs' files unopened. Every part carries every
    # column (migrations rewrite old parts), so union_by_name and its per-file schema reads are not needed.
    source = (f"read_parquet({_quote(parts_glob)}, hive_partitioning = true, "
              f"hive_types = {{{_quote(table.partition_by)}: VARCHAR}})")
    if not table.versioned:
        columns = [f"{_as_sql(c, _ident(c.name))} AS {_ident(c.name)}" for c in table.columns]
        return f"CREATE OR REPLACE VIEW {_ident(table.name)} AS SELECT {', '.join(columns)} FROM {source}"
    # arg_max skips NULL values, so a partial update keeps the older values of the columns it leaves out.
    columns = [_ident(c.name) if c.name == table.key
               else f"{_as_sql(c, f'arg_max({_ident(c.name)}, {VERSION_COLUMN})')} AS {_ident(c.name)}"
               for c in table.columns]
    return (f"CREATE OR REPLACE VIEW {_ident(table.name)} AS SELECT {', '.join(columns)} "
            f"FROM {source} GROUP BY {_ident(table.key)}")


def derived_view_sql(view: View) -> str:
    return f"CREATE OR REPLACE VIEW {_ident(view.name)} AS {view.sql.strip()}"


def comment_sql(table: Table | View) -> list[str]:
    """COMMENT ON statements so `duckdb_views()` / `duckdb_columns()` document the tables and views."""
    columns = table.columns if isinstance(table, View) else [(c.name, c.doc) for c in table.columns]
    statements = [f"COMMENT ON VIEW {_ident(table.name)} IS {_quote(table.doc)}"]
    statements += [f"COMMENT ON COLUMN {_ident(table.name)}.{_ident(name)} IS {_quote(doc)}"
                   for name, doc in columns]
    return statements
