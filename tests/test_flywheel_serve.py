"""`appliance serve`: the official openai client against the endpoint, the rows it logs, an agent loop through it."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from appliance import checkpoints as registry
from appliance.flywheel.serve import ServeConfig, build_service, make_server
from appliance.generate.base import Generator, Sample
from appliance.store import Workspace

openai = pytest.importorskip("openai")

TASKS = Path(__file__).resolve().parents[1] / "tasks"
PACK = "workplace-multi"


@pytest.fixture(scope="module")
def promoted_root(tiny_model_dir, tmp_path_factory) -> tuple[Path, str]:
    """A registry holding one promoted LoRA checkpoint of the tiny model: (root, checkpoint id)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    adapter = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(str(adapter))
    root = tmp_path_factory.mktemp("checkpoints")
    manifest = {"run_id": "grpo-serve", "step": 7, "stage": "grpo",
                "base_model": {"id": "tiny", "path": str(tiny_model_dir)}, "pack": {"name": PACK}}
    ckpt = registry.save_checkpoint(root, adapter, manifest)
    registry.set_promoted(ckpt, {"why": "test"})
    return root, ckpt.id


@pytest.fixture
def ws(tmp_path):
    workspace = Workspace.open(tmp_path / "runs")
    yield workspace
    workspace.close()


class _Running:
    """A served endpoint on a free port, in a background thread."""

    def __init__(self, service):
        self.service = service
        self.server = make_server(service, "127.0.0.1", 0)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.client = openai.OpenAI(base_url=self.server.base_url, api_key="unused", max_retries=0, timeout=120)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.service.close()


@pytest.fixture
def running():
    started = []

    def start(service):
        started.append(_Running(service))
        return started[-1]

    yield start
    for endpoint in started:
        endpoint.stop()


def test_openai_client_talks_to_the_promoted_adapter_and_every_answer_is_a_stored_trajectory(
        promoted_root, ws, running):
    root, checkpoint_id = promoted_root
    service = build_service(ServeConfig(checkpoints=str(root), max_new_tokens=6), workspace=ws, tasks_root=TASKS)
    endpoint = running(service)
    client = endpoint.client

    [card] = client.models.list().data
    assert card.id == checkpoint_id  # no --adapter: the registry's promoted one, on its manifest's base model
    tools = [t for t in service.pack.tools if t["function"]["name"].startswith("email_")]
    messages = [{"role": "user", "content": "The newest email from kofi can go; please delete it."}]
    answer = client.chat.completions.create(model="anything", messages=messages, tools=tools, max_tokens=6)

    assert answer.id.startswith("chatcmpl-") and answer.object == "chat.completion"
    assert answer.model == checkpoint_id
    [choice] = answer.choices
    assert choice.index == 0 and choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert (choice.message.tool_calls is not None) == (choice.finish_reason == "tool_calls")
    assert answer.usage.prompt_tokens > 0 and 0 < answer.usage.completion_tokens <= 6
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens

    _, rows = ws.query("SELECT id, source, source_id, adapter_version, adapter, model, pack, latency_s, messages, "
                       "tools, completion_tokens, finish_reason FROM trajectories")
    [(row_id, source, source_id, version, adapter, model, pack, latency, stored, stored_tools, tokens,
      finish)] = rows
    assert (row_id, source, source_id) == (answer.id, "served", service.session_id)
    assert version == checkpoint_id and Path(adapter) == root / checkpoint_id
    assert model == str(service.served.model) and pack == PACK  # the pack the adapter was trained for
    assert latency > 0 and tokens == answer.usage.completion_tokens and finish == choice.finish_reason
    stored = json.loads(stored)
    assert stored[:-1] == messages and stored[-1]["role"] == "assistant"
    assert stored[-1].get("content") == choice.message.content
    assert [t["function"]["name"] for t in json.loads(stored_tools)] == [t["function"]["name"] for t in tools]

    # Streaming gives the same greedy answer as chunks, then a usage chunk when asked.
    chunks = list(client.chat.completions.create(model="x", messages=messages, tools=tools, max_tokens=6,
                                                 stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == (choice.message.content or "")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason
    assert chunks[-1].usage.completion_tokens == answer.usage.completion_tokens

    with pytest.raises(openai.BadRequestError, match="role 'robot'"):
        client.chat.completions.create(model="x", messages=[{"role": "robot", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model="x", messages=messages, max_tokens=0)
    assert ws.query("SELECT count(*) FROM trajectories")[1] == [(2,)]  # refused requests are not trajectories


class ScriptedGenerator(Generator):
    """Answers with the next scripted output and keeps every prompt it was given."""

    name = "scripted"

    def __init__(self, tokenizer, outputs):
        self.tokenizer, self.outputs, self.prompts, self.held_to = tokenizer, list(outputs), [], []

    def generate(self, prompts, *, n=1, temperature=0.0, top_p=1.0, max_new_tokens=128, stop=None, seed=None,
                 strict_tools=None):
        self.prompts.extend(prompts)
        self.held_to.append(strict_tools)
        text = self.outputs.pop(0)
        return [[Sample(text, len(text.split()), len(p.split()), 0.01, "stop")] * n for p in prompts]


@pytest.fixture
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _delete_kofi_script():
    return ['{"name": "email_search_emails", "arguments": {"query": "kofi"}}',
            '```json\n{"name": "email_delete_email", "arguments": {"email_id": "00000259"}}\n```',
            "Done: I deleted Kofi's newest email."]


def test_the_agent_loop_runs_against_the_workplace_world_through_the_endpoint(
        tiny_model_dir, tiny_tokenizer, ws, running, tmp_path):
    from appliance.evaluate.agent import Trajectory, run_trajectories
    from appliance.evaluate.scoring import make_scorer
    from appliance.flywheel.trajectories import import_trajectories
    from appliance.flywheel.triage import triage
    from appliance.prompting import render_completion
    from appliance.world import World

    generator = ScriptedGenerator(tiny_tokenizer, _delete_kofi_script())
    log = tmp_path / "served.jsonl"
    config = ServeConfig(model=str(tiny_model_dir), base_only=True, pack=PACK, log=str(log))
    service = build_service(config, workspace=ws, tasks_root=TASKS, generator=generator)
    endpoint = running(service)
    pack, task = service.pack, service.pack.task("wm-val-0001")

    def generate_turn(active):
        """The eval's agent loop, with the endpoint standing in for the generator."""
        samples = []
        for trajectory in active:
            answer = endpoint.client.chat.completions.create(
                model="appliance", messages=trajectory.messages, tools=pack.tools_for(trajectory.task))
            message = answer.choices[0].message
            calls = [{"name": c.function.name, "arguments": json.loads(c.function.arguments)}
                     for c in message.tool_calls or ()]
            text = render_completion(calls) if calls else message.content
            samples.append(SimpleNamespace(text=text, latency_s=0.0, prompt_tokens=answer.usage.prompt_tokens,
                                           completion_tokens=answer.usage.completion_tokens))
        return samples

    trajectory = Trajectory(task=task, sample_index=0, messages=list(task.messages), world=World.fresh())
    run_trajectories([trajectory], max_turns=pack.max_turns, generate_turn=generate_turn)

    assert [c.name for c in trajectory.calls] == ["email_search_emails", "email_delete_email"]
    assert trajectory.done and trajectory.final_text.startswith("Done")
    assert make_scorer(pack).score_calls(task, trajectory.calls, parse_ok=True, raised=False).success
    assert "00000259" in generator.prompts[1]  # the search result went back to the model as a tool message

    _, rows = ws.query("SELECT adapter_version, pack, count(DISTINCT conversation_id), count(*), "
                       "list(finish_reason ORDER BY created_at) FROM trajectories GROUP BY ALL")
    assert rows == [("base", PACK, 1, 3, ["tool_calls", "tool_calls", "stop"])]

    summary = triage(ws, tasks_root=TASKS)
    assert summary.judged == 1 and summary.modes == {"success": 1}  # one conversation, judged on its longest
    _, rows = ws.query("SELECT adapter_version, failure_mode, trajectories, share FROM failure_modes_by_adapter")
    assert rows == [("base", "success", 1, 1.0)]

    # The served log is the import format: it imports elsewhere, and here every id is already stored.
    assert len(log.read_text().splitlines()) == 3
    assert import_trajectories(log, ws).skipped == 3
    elsewhere = Workspace.open(tmp_path / "elsewhere")
    assert import_trajectories(log, elsewhere).imported == 3
    assert triage(elsewhere, tasks_root=TASKS).modes == {"success": 1}


def test_openai_shaped_tool_calls_and_results_reach_the_prompt(tiny_model_dir, tiny_tokenizer, ws, running):
    generator = ScriptedGenerator(tiny_tokenizer, _delete_kofi_script())
    config = ServeConfig(model=str(tiny_model_dir), base_only=True, pack=PACK)
    endpoint = running(build_service(config, workspace=ws, tasks_root=TASKS, generator=generator))
    tools = [t for t in endpoint.service.pack.tools if t["function"]["name"].startswith("email_")]
    messages = [{"role": "user", "content": "The newest email from kofi can go; please delete it."}]

    first = endpoint.client.chat.completions.create(model="m", messages=messages, tools=tools)
    [call] = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls" and first.choices[0].message.content is None
    assert call.type == "function" and call.id.startswith("call_")
    assert (call.function.name, json.loads(call.function.arguments)) == ("email_search_emails", {"query": "kofi"})

    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": '[{"email_id": "00000259"}]'}]
    second = endpoint.client.chat.completions.create(model="m", messages=messages, tools=tools)
    assert second.choices[0].message.tool_calls[0].function.name == "email_delete_email"  # read from a fence
    prompt = generator.prompts[1]
    assert '"email_search_emails"' in prompt and '[{"email_id": "00000259"}]' in prompt
    assert endpoint.service.pack.system_prompt.strip()[:40] in prompt  # the pack's system prompt comes first

    [card] = endpoint.client.models.list().data
    assert card.id == Path(tiny_model_dir).name  # the base model alone
    _, rows = ws.query("SELECT count(DISTINCT conversation_id), count(*) FROM trajectories")
    assert rows == [(1, 2)]


def test_a_strict_function_or_a_strict_server_holds_the_answer_to_the_offered_tools(
        tiny_model_dir, tiny_tokenizer, ws, running):
    """OpenAI's `"strict": true` on a function holds that request's answer; `--strict` holds every request."""
    answer = '{"name": "email_search_emails", "arguments": {"query": "kofi"}}'
    messages = [{"role": "user", "content": "Find kofi's emails."}]
    for server_strict in (False, True):
        generator = ScriptedGenerator(tiny_tokenizer, [answer] * 3)
        config = ServeConfig(model=str(tiny_model_dir), base_only=True, pack=PACK, strict=server_strict)
        endpoint = running(build_service(config, workspace=ws, tasks_root=TASKS, generator=generator))
        tools = [t for t in endpoint.service.pack.tools if t["function"]["name"].startswith("email_")]
        marked = [{**t, "function": {**t["function"], "strict": True}} for t in tools]
        endpoint.client.chat.completions.create(model="m", messages=messages, tools=tools)
        endpoint.client.chat.completions.create(model="m", messages=messages, tools=marked)
        endpoint.client.chat.completions.create(model="m", messages=messages)  # no tools: nothing to hold to
        assert generator.held_to == [[tools] if server_strict else None, [marked], None]
