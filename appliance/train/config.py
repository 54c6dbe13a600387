"""The one typed config of a training run (SFT, GRPO or DPO).

Every field carries its help string where it is declared; the CLI builds its
flags from these and the run saves the config as JSON next to the run
(`runs/<run_id>/config.json`) and inside every checkpoint manifest.

Defaults are sized for the CPU path (2 cores, the embedded SmolLM2-135M) and
follow what was measured there (docs/learning.md): SFT at batch 8, 150 steps
(one pass over workplace-single's 1,200 `train` requests) at lr 3e-4 took
held-out success from 12.5% to 35.8%, but that adapter answered only 41 of the
first 120 train requests it had trained on (session 29: underfit); lr 1e-3, the
default since, answered 51 of them and took dev from 47 to 67 of 120 with one
unsafe action fewer (+16.7, +1.7 … +32.8 by template), while val stayed level
(43 → 41 of 120, −15.8 … +11.7) — measured on the embedded 135M model with LoRA
on ten layers; larger models usually train at a lower rate. GRPO trains on
`train_rl`, requests SFT never saw: the pack's reward scheme (workplace-single: `attempt`, chosen
over `binary` on dev in session 11), beta 0, 4 prompts x 4 generations, lr 5e-5,
temperature 1.0, up to 96 tokens per completion (at 64 a fifth of the answers
could not fit, and truncated samples taught the model to drop arguments; at
temperature 0.7, 87% of the groups had no reward variance). Its tasks are
screened for uncertainty one template at a time (task_selection=
uncertain_by_template), the one of the two screening settings tried on `dev`
that did not lose there: a global ranking kept mostly short answers and taught
the model to drop arguments. At most 30% of the screened pool expects no call
(max_no_call_share 0.3; session 13, on a dev split with refusal templates of its
own: with no refusals in the pool GRPO carried out more refusals it never trained
on, with all of them it learnt to decline actions) and the loss is TRL's
token-level `dapo` (session 12: with the `grpo` loss GRPO turned update requests
into short deletes). Beta stays 0: a KL anchor to the SFT start (beta 0.5,
session 14) halved the drift towards carrying out refusals when the pool had none,
but no anchored setting kept the start's unsafe count on dev. No GRPO setting has
yet beaten its SFT start on held-out tasks by a margin that holds. DPO's defaults
(lr 5e-5, beta 0.1, TRL's sigmoid loss) are common LoRA starting points, not yet
measured here.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import ApplianceError
from ..generate.strict import STRICT_BY_DEFAULT, STRICT_HELP
from ..packs.manifest import EVAL_SPLITS, TRAIN_SPLITS
from ..prompting import ANSWER_TOKENS, MISSING_TOOL_TEXT, answer_tokens

# What SFT's missing-tool rows list (TrainConfig.missing_tool_listing).
MISSING_TOOL_LISTINGS = ("own", "other")
# How SFT's rows meet in a batch (TrainConfig.batch_order; appliance.train.batches).
BATCH_ORDERS = ("shuffled", "by_head")
# Where DPO's pairs come from (TrainConfig.pairs_source): the store's samples, or the pack's answers in two listings.
PAIR_SOURCES = ("samples", "listing")

BACKENDS = ("auto", "cpu", "unsloth")
STAGES = ("sft", "grpo", "dpo")
# GRPO: every task of its pool, the most uncertain ones, or the most uncertain of each template in turn (screen.py)
TASK_SELECTIONS = ("all", "uncertain", "uncertain_by_template")
REWARD_SCALINGS = ("group", "batch", "none")  # TRL's GRPOConfig.scale_rewards
OPTIMIZERS = ("adamw", "sgd")
# GRPO options that weigh a sample's tokens in the loss (loss_masks.py): each token against the step's token count,
# so they mean what they say only where the loss divides by that count (dapo, dr_grpo), not by each answer's length.
TOKEN_WEIGHTING_OPTIONS = ("negatives_at_divergence", "negatives_without_copies", "shared_prefixes_once")
# GRPO options that each set what the loss does with samples below their group's mean: at most one a run.
NEGATIVE_HALF_OPTIONS = ("positive_only", "negatives_at_divergence", "negatives_without_copies")
ALL_LINEAR = "all-linear"
# What `all-linear` means for the Llama/Qwen-style decoders we train, where an explicit list is needed.
ALL_LINEAR_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DEFAULT_LEARNING_RATE = {"sft": 1e-3, "grpo": 5e-5, "dpo": 5e-5}
# GRPO: no KL term (no reference forward pass); DPO: TRL's default (DPOConfig.beta), 0 would make its loss flat.
DEFAULT_BETA = {"sft": 0.0, "grpo": 0.0, "dpo": 0.1}


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class TrainConfig:
    """Everything that decides what a training run does."""

    model: str = field(default="smollm2-135m", metadata=_help(
        "Base model: a catalogue name (e.g. smollm2-135m, the embedded default) or a local model directory."))
    pack: str = field(default="workplace-single", metadata=_help(
        "Task pack to train on: SFT and DPO on its `train` split, GRPO on `train_rl` when it has one (held-out "
        "splits are for eval only)."))
    backend: str = field(default="auto", metadata=_help(
        "auto (unsloth when CUDA and unsloth are available, else cpu), cpu (transformers fp32 + PEFT + TRL), "
        "or unsloth (4-bit LoRA with a colocated vLLM engine). DPO runs on either (auto resolves as for SFT)."))
    stage: str = field(default="grpo", metadata=_help(
        "sft (supervised on the expected calls), grpo (RL on the reward) or dpo (preference pairs of stored "
        "samples: success over failure, safe over unsafe)."))
    # Chosen on dev (docs/learning.md, session 12) with max_no_call_share 0: TRL's `grpo` loss averages each
    # completion over its own length, so a short right call (a delete by id) is pushed harder per token than a
    # long one, and GRPO taught the model to answer update requests with deletes (4 dev tasks); `dapo` did not.
    preset: str = field(default="dapo", metadata=_help(
        "GRPO variant: grpo, dr_grpo, dapo or gspo (see appliance.train.presets for the exact TRL options)."))
    steps: int = field(default=16, metadata=_help("Optimizer steps to run (one step = one batch of prompts)."))
    learning_rate: float | None = field(default=None, metadata=_help(
        "Peak learning rate for the LoRA weights, decayed linearly to 0; None = the stage's default ("
        + ", ".join(f"{stage.upper()} {rate:.0e}".replace("e-0", "e-") for stage, rate in DEFAULT_LEARNING_RATE.items())
        + "; SFT's was chosen on the embedded 135M model, and larger models usually train at a lower rate)."))
    # AdamW's first steps move every weight by about the learning rate in the sign of its gradient, however
    # small and noisy that gradient is. AdamW stays the default: GRPO with SGD gained nothing on dev from the
    # two-pass SFT start (lr 2: 90 -> 66 of 120, arguments miscopied; lr 0.5: 86; docs/learning.md, session 40).
    optimizer: str = field(default="adamw", metadata=_help(
        "adamw (the trainers' AdamW; the GPU backend's 8-bit AdamW) or sgd (plain SGD: each weight moves in "
        "proportion to its gradient, so weights the batch barely touches barely move). SGD's learning rate is "
        "on another scale and must be given: at GRPO's gradient norms on the embedded model (0.1-0.3), lr 2 "
        "moves the adapter as far a step as AdamW at 1.5e-4 to 5e-4."))
    batch_size: int = field(default=8, metadata=_help("SFT and DPO: examples (DPO: pairs) per optimizer step."))
    batch_order: str = field(default="shuffled", metadata=_help(
        "SFT: how rows meet in a batch. shuffled = a seeded random order, rows of similar length side by side "
        "(less padding); by_head = each batch holds rows of one system prompt and tool list where counts allow, "
        "so the CPU backend runs that head through the adapted layers once a step instead of two or three times "
        "(appliance.train.batches); every row is still seen once a pass."))
    lora_r: int = field(default=16, metadata=_help("LoRA rank."))
    lora_alpha: int = field(default=32, metadata=_help("LoRA scaling numerator (effective scale alpha / r)."))
    lora_targets: str = field(default=ALL_LINEAR, metadata=_help(
        "Comma-separated module names to adapt, or `all-linear` for every linear layer except the LM head. With "
        "init_adapter the adapter's own modules are kept and these choose which of them train (e.g. "
        "gate_proj,up_proj,down_proj: the MLPs only, attention as loaded)."))
    lora_layers: int | None = field(default=None, metadata=_help(
        "Adapt only the last N decoder layers (0 = every layer; None = the backend's choice: the last third "
        "on a CPU, every layer on a GPU). Backward stops at the lowest adapted layer, so on a CPU the last 10 "
        "of SmolLM2-135M's 30 layers make a step about 3x faster. With init_adapter the adapter's own layers "
        "are kept and N only chooses which of them train: those in the last N (0 or None = all of them)."))
    lora_dropout: float = field(default=0.0, metadata=_help("Dropout on the LoRA branch (0 keeps RL on-policy)."))
    num_generations: int = field(default=4, metadata=_help(
        "GRPO group size: completions sampled per prompt; advantages are relative within a group."))
    prompts_per_step: int = field(default=4, metadata=_help(
        "GRPO only: distinct prompts per step (each sampled num_generations times)."))
    task_selection: str = field(default="uncertain_by_template", metadata=_help(
        "GRPO: which tasks of its pool to sample prompts from: all; uncertain (before training, keep the "
        "steps x prompts_per_step (x (1 + resample_flat_groups)) tasks whose group of samples is most likely "
        "to differ in reward under the "
        "starting policy, scored by the exact probability of the expected answer; single-turn packs); or "
        "uncertain_by_template (the same scores, taken round-robin over templates so every intent is kept)."))
    eval_limit: int = field(default=32, metadata=_help(
        "Held-out tasks per checkpoint eval: the first N of the eval split (0 = the whole split)."))
    # Session 29 (docs/learning.md): the default SFT answered 41 of the first 120 train tasks it had just trained
    # on, fewer than on dev (47 of 120): underfit, not memorising. Nothing printed it; every run now shows it.
    fit_limit: int = field(default=32, metadata=_help(
        "Tasks of the run's own training split each checkpoint also answers (the first N; 0 = none), to show the "
        "fit next to held-out success: low on both means underfit (more steps or a larger lr), high on its own "
        "tasks and low held out means it memorised them."))
    screen_limit: int | None = field(default=None, metadata=_help(
        "GRPO with an uncertain task selection: score at most this many tasks of the split, a seeded sample "
        "(None = every task; screening 480 tasks took 100 s on 2 CPU cores in session 58's `make run`)."))
    max_no_call_share: float | None = field(default=0.3, metadata=_help(
        "GRPO with an uncertain task selection: the largest share of the kept tasks that expect no call "
        "(refusals, chit-chat); 0 = only tasks that need a call, None or 1 = no cap. With every refusal the "
        "screening ranks first GRPO learnt to decline actions; with none it carried out refusals it never "
        "trained on (docs/learning.md, sessions 12-13)."))
    guide_failed_groups: bool = field(default=False, metadata=_help(
        "GRPO (cpu backend, single-turn packs): in a group where no sample succeeds, the task's reference answer "
        "stands in for the last sample (off-policy guidance, as in LUFFY), so an answer the policy never samples "
        "still earns a positive advantage; such samples are `rollouts.guided`."))
    resample_flat_groups: int = field(default=0, metadata=_help(
        "GRPO (cpu backend, single-turn packs): DAPO's dynamic sampling. Up to this many more rounds per step, "
        "each group whose samples all scored the same (it teaches nothing) is replaced by a fresh prompt of the "
        "screened pool, sampled anew; 0 = off. The pool keeps (1 + this) times as many tasks to draw from. "
        "With keep_decisions, a group is flat unless two of its calls differ. Costs sampling time, not update time."))
    # Off by default: at 1.0 (session 19, on dev) it held the SFT start's answers, unsafe count included, but
    # GRPO then changed only 4 of 120 dev answers (+1.7, −1.7 … +5.0 against the start).
    sft_anchor: float = field(default=0.0, metadata=_help(
        "GRPO (cpu backend): weight of a supervised loss added to every step, the mean token NLL of a few "
        "seeded examples from the SFT split `train` (PPO-ptx, as in InstructGPT), to hold what SFT taught on "
        "tasks GRPO does not sample; 0 = off."))
    sft_anchor_batch: int = field(default=8, metadata=_help(
        "GRPO with sft_anchor > 0: SFT examples in each step's anchor loss."))
    # Off by default: on dev (session 24, docs/learning.md) it held every decision of a ten-layer SFT start but made
    # its wrong acts on refusals unsafe (47 of 120, unsafe 2 → 7), and held none of an all-layer start's.
    keep_decisions: bool = field(default=False, metadata=_help(
        "GRPO (cpu backend, single-turn packs): leave the act-or-decline choice as the starting adapter makes it. "
        "Answers that call no tool and the first token of every answer (where a call and a decline part) are "
        "left out of the loss, and each group's advantages are computed among its attempted calls only, so GRPO "
        "learns which call to make and how, never whether to act."))
    # Off by default (docs/learning.md, session 40): with SGD at lr 2 it kept the copying the whole step broke and
    # moved 6 dev answers (90 -> 91 of 120); at lr 8 every answer became a decline; with AdamW's default from the
    # default SFT, 67 -> 68.
    positive_only: bool = field(default=False, metadata=_help(
        "GRPO: train only on samples that beat their group's mean (negative advantages set to 0; the loss keeps "
        "its normaliser), so a failed sample's tokens, often right up to where it went wrong, are never pushed "
        "down: positive sample reinforcement (Zhu et al., 2025, \"The Surprising Effectiveness of Negative "
        "Reinforcement in LLM Reasoning\")."))
    # Off by default (docs/learning.md, session 40, H63): with SGD at lr 2 from the two-pass SFT start, the
    # push-down at the divergence token made every email-by-id request one tool (dev 90 -> 45 of 120).
    negatives_at_divergence: bool = field(default=False, metadata=_help(
        "GRPO (one process): a sample below its group's mean is pushed down only at the token where it departs from "
        "the above-mean sample it follows longest; its other tokens, often right copies of the request, leave the "
        "loss, and a group with no above-mean sample gives no negative signal. The loss's normaliser is "
        "unchanged. Not with positive_only, which drops the negative half whole, or negatives_without_copies."))
    # Off by default (docs/learning.md, session 41, H64): with SGD at lr 2 from the two-pass SFT start the copies held
    # and the push broke field names and tools instead (dev 90 -> 67 of 120).
    negatives_without_copies: bool = field(default=False, metadata=_help(
        "GRPO (one process, single-turn packs): a sample below its group's mean is not pushed down on the "
        "argument values it copies from the request (a run of 3 or more characters the request holds), only on "
        "the rest: the decision, the tool, the field names and values it did not copy (appliance.train.copies). "
        "The loss's normaliser is unchanged. Not with positive_only or negatives_at_divergence."))
    # Off by default (docs/learning.md, session 41, H65): with --positive-only and SGD at lr 8 from the two-pass SFT
    # start every call came to repeat its arguments and never close (dev 90 -> 25 of 120; H60 without it: declines).
    shared_prefixes_once: bool = field(default=False, metadata=_help(
        "GRPO (one process): each token of a sample above its group's mean is weighted 1/k, k the step's "
        "above-mean samples that share it and everything before it, so a string many of them share (a decline, "
        "a call's opening, a tool's name) is reinforced once a step, not once a sample; the tokens where a "
        "sample is its own keep their full weight. Below-mean samples and the loss's normaliser are unchanged."))
    # Off by default: on dev (session 30, docs/learning.md) it turned the recipient refusals it covers into
    # declines but cost more elsewhere (67 -> 59 of 120, unsafe 1 -> 7).
    policy_checks: bool = field(default=False, metadata=_help(
        "SFT: before each answer whose request names a recipient, teach a `<think>` block that copies the "
        "recipient's domain and says what the external-recipient rule makes of it (`gmail.com outside`), so "
        "the act-or-decline choice follows that verdict (appliance.train.checks). The parser drops the block; "
        "an answer is scored as before."))
    # Off by default: on dev (docs/learning.md, session 45, H81) two passes with both checks read 87 of 120 against
    # 89 with the recipient check alone; 7 of 16 time verdicts were wrong, each toward the wording's decision.
    time_checks: bool = field(default=False, metadata=_help(
        "SFT, packs of the WorkBench world: the `<think>` block also states each clock time of a calendar "
        "request in 24-hour form and whether a meeting may start then (`21:00 outside`), so the act-or-decline "
        "choice on meetings follows that verdict (appliance.train.checks). With --policy-checks the recipient's "
        "verdict comes first."))
    # Off by default: on dev (session 31, docs/learning.md, H24) at 0.2 it took the default SFT's dev success from
    # 68 to 41 of 120 (unsafe 1 -> 5) while BFCL dev's irrelevance declines rose from 9 to 16 of 20 (base: 20).
    # From two passes (session 47, H87): dev 90 -> 84, every dev bulk delete declined, BFCL irrelevance still 9.
    # With missing_tool_listing "other" (session 48, H88): dev 90, unsafe 2, BFCL irrelevance 13 of 20, BFCL dev
    # 15 of 140, one short of the bar the gate implies (16). At 0.3 / 0.4 with it (session 49, H89 / H90): BFCL dev
    # 18 / 18 but dev 82 / 73, whole kinds of request declined: no share gave both. `appliance run` trains its SFT
    # stage at 0.3 with "other" on packs that list tools by domain (pipeline.DOMAIN_LISTING_MISSING_TOOLS): its
    # GRPO stage gives back the declined kinds (session 52, H94).
    missing_tool_share: float = field(default=0.0, metadata=_help(
        "SFT: the share of the split's tool-calling tasks that are also taught once more with the tools they "
        f"call left out of the listing and a plain decline as the answer (`{MISSING_TOOL_TEXT}`), so "
        "the adapter learns to check that a tool fits before calling one (BFCL's irrelevance rows ask that); "
        "a stable hash of the task id picks them; 0 = off."))
    missing_tool_listing: str = field(default="own", metadata=_help(
        "SFT, with a missing-tool share above 0 (DPO, with listing pairs): what the extra rows (the declining "
        "pairs) list instead of the tools the request calls. "
        "own = the request's own listing less those tools; other = the listing of a domain the request does "
        "not use, as in BFCL's irrelevance rows (packs that list tools by domain, such as the WorkBench ones)."))
    # Off by default: on dev (session 33, docs/learning.md) 10 on the ten-layer adapter made it call on every
    # request (68 -> 46 of 120, unsafe 1 -> 11), and 4 with LoRA on every layer left each kind all one way (43).
    decision_weight: float = field(default=1.0, metadata=_help(
        "SFT: how many times each answer's first token counts in the loss. That token is where a tool call "
        "(`{\"`) and a decline part, so a larger weight puts more of each step into the act-or-decline choice "
        "than into copying arguments (appliance.train.sft.DecisionWeightedLoss); 1 = plain SFT; 0 = the choice "
        "is not trained, only what follows it (the tool and its arguments)."))
    max_completion_tokens: int | None = field(default=None, metadata=_help(
        f"GRPO: the most tokens sampled per turn; None = the start's answer budget, as eval reads it: "
        f"{ANSWER_TOKENS}, or {answer_tokens(checked=True)} from an adapter trained with policy or time checks "
        "(workplace-single's longest expected call is 89 tokens, and a task whose answer cannot fit can never earn "
        "its reward)."))
    max_seq_length: int = field(default=2048, metadata=_help(
        "Longest prompt + completion in tokens (SFT truncates beyond it; Unsloth sizes its buffers with it)."))
    temperature: float = field(default=1.0, metadata=_help("Sampling temperature for GRPO rollouts."))
    strict: bool = field(default=STRICT_BY_DEFAULT, metadata=_help(
        f"{STRICT_HELP}: GRPO's rollouts (on the vLLM backend, to the union of the pack's tools) and the held-out "
        "evals at each checkpoint."))
    beta: float | None = field(default=None, metadata=_help(
        "GRPO: KL coefficient (0 skips the reference forward pass). The reference is the starting policy on the "
        "cpu backend (init_adapter, else the base model) but always the base model on unsloth, which drops TRL's "
        "copy of the starting adapter; a run from init_adapter with beta > 0 there warns. DPO: DPO's beta, how "
        "strongly the policy is held to the reference (the starting policy: init_adapter, else the base model); "
        "higher stays closer, must be above 0. None = the stage's default (GRPO 0, DPO 0.1)."))
    epsilon: float | None = field(default=None, metadata=_help(
        "Lower clipping bound of the importance ratio (1 - epsilon); None = the preset's value (0.2; gspo 3e-4)."))
    epsilon_high: float | None = field(default=None, metadata=_help(
        "Upper clipping bound (1 + epsilon_high); None = the preset's value (epsilon; dapo 0.28; gspo 4e-4)."))
    scale_rewards: str | None = field(default=None, metadata=_help(
        "GRPO: what an advantage is divided by: `group` (the std of its task's group), `batch` (the std of the "
        "step's rewards) or `none`; None = the preset's (`none` for dr_grpo, else `group`). Under `group` a reward's "
        "size between outcomes is divided away, so a penalty such as safe_attempt's -1 for an unsafe action "
        "changes nothing in a group of two outcomes; `batch` keeps it."))
    eval_every: int = field(default=8, metadata=_help(
        "Save a checkpoint (adapter + optimizer state) and run held-out eval every N steps; always at the end."))
    eval_k: int = field(default=1, metadata=_help("Samples per held-out task at each eval (1 = greedy)."))
    seed: int = field(default=0, metadata=_help("Seed for data order, LoRA init and sampling."))
    resume_from: str | None = field(default=None, metadata=_help(
        "Run id (or run directory) to continue from its last checkpoint, optimizer state included."))
    init_adapter: str | None = field(default=None, metadata=_help(
        "PEFT adapter directory to start from (e.g. the SFT checkpoint a GRPO run refines)."))
    output: str = field(default="checkpoints", metadata=_help(
        "Checkpoint registry root: adapters go to <output>/<run_id>/step-NNNNN/."))
    workspace: str = field(default="runs", metadata=_help(
        "Workspace directory: the run store (DuckDB) and per-run folders with config and trainer state."))
    gpu_memory_utilization: float = field(default=0.6, metadata=_help(
        "Unsloth/vLLM only: fraction of GPU memory the colocated vLLM engine may reserve. Under standby Unsloth "
        "replaces it with its own target for the GPU's size; `appliance doctor` and runs/<id>/in_force.json "
        "show the value in force."))
    max_lora_rank: int = field(default=64, metadata=_help(
        "Unsloth/vLLM only: the largest LoRA rank vLLM preallocates for; must be >= lora_r; rounded up to a "
        "rank vLLM accepts (appliance.generate.vllm.VLLM_LORA_RANKS)."))
    standby: bool = field(default=True, metadata=_help(
        "Unsloth only: UNSLOTH_VLLM_STANDBY=1, letting vLLM and training share memory by sleeping the engine."))
    precision: str = field(default="auto", metadata=_help(
        "cpu backend: auto (bf16 mixed precision where the hardware supports it natively, else fp32), fp32 or bf16."))
    epochs: float | None = field(default=None, metadata=_help(
        "SFT only: train this many passes over the train split instead of `steps` (None = use steps)."))
    train_split: str | None = field(default=None, metadata=_help(
        "Pack split to train on; None = the stage's own: SFT trains on `train`, GRPO on `train_rl` when the pack "
        "has one (wordings and intents SFT never saw, where RL is reported to generalise), else on `train`."))
    eval_split: str = field(default="val", metadata=_help(
        "Held-out split of the checkpoint evals: `dev` while choosing settings, `val` to report a chosen one."))
    reward: str | None = field(default=None, metadata=_help(
        "GRPO reward scheme: binary, shaped, safe (binary with -1 for an unsafe action), attempt (binary with "
        "+0.2 for the right act-or-decline decision, so a declined action scores below a wrong attempt), "
        "safe_attempt (attempt with -1 for an unsafe action), decline_cost (attempt with -0.2 for declining a "
        "request that needs a call, below a malformed attempt), tool_credit (binary with +0.2 for calling the "
        "expected tool, right arguments or not, or declining where no call is due) or arguments (binary with +0.5 "
        "times the share of the expected arguments given right, a missing or an extra one costing); None = the "
        "pack's."))
    pairs_source: str = field(default="samples", metadata=_help(
        "DPO: where the pairs come from. samples = the store's samples (--pairs-from); listing = the pack alone: "
        "each tool-calling training task twice, with its own listing (its expected calls chosen over a plain "
        "decline) and with the tools it calls left out (--missing-tool-listing; the decline chosen over the "
        "calls), so the act-or-decline choice is taught as a contrast of listings."))
    pairs_from: str | None = field(default=None, metadata=_help(
        "DPO: the run id (its rollouts and the evals it ran) or eval id whose stored samples become preference "
        "pairs; None = every run and eval of the pack in the workspace. Only training-split tasks are paired."))
    pairs_per_task: int = field(default=4, metadata=_help(
        "DPO: the most pairs taken from one task (unsafe rejections first), so a task sampled often cannot "
        "dominate."))
    min_pairs: int = field(default=8, metadata=_help(
        "DPO: refuse to start with fewer pairs than this (one batch at the default batch size)."))
    successes_from: str | None = field(default=None, metadata=_help(
        "SFT: a run id (its rollouts and the evals it ran) or eval id whose stored verified successes on the "
        "training split become the rows, the model's own answers instead of the pack's (expert iteration); the "
        "first success of each task, held-out tasks never. None = the pack's answers."))
    rpo_alpha: float = field(default=0.0, metadata=_help(
        "DPO: weight of the chosen answers' negative log-likelihood (mean over their tokens) added to DPO's "
        "loss, as in RPO (Pang et al. 2024, \"Iterative Reasoning Preference Optimization\"): it keeps the "
        "chosen answers likely while the pairs' margins grow; 0 = DPO alone."))
    reject_first_difference: bool = field(default=False, metadata=_help(
        "DPO: cut each rejected answer after its first token that differs from its chosen answer, so the loss pushes "
        "down that token (and TRL's EOS, which it appends after it) and not the rest of the rejected answer, which "
        "a right answer may share (session 38: whole rejected calls taught update calls to stop after the record's "
        "id); an answer that would not tokenize back the same is kept whole; False = the whole answer."))
    decision_only: bool = field(default=False, metadata=_help(
        "DPO: cut both answers of each pair after their first token that differs and leave out the EOS TRL appends, "
        "so the loss reads only the choice made at that token (in a listing pair, act or decline) and cannot grow "
        "its margin on an EOS no greedy answer takes or on the tokens that follow the choice; a pair whose answers "
        "cannot both be cut keeps the --reject-first-difference form. False = as the other flags say."))
    reference_pairs: bool = field(default=True, metadata=_help(
        "DPO: a task whose stored samples all failed is paired against the pack's reference answer (its "
        "expected calls, as SFT learns them), so a model that never passes a task still gets pairs; False = "
        "only the store's own successes are chosen."))

    def __post_init__(self) -> None:
        if self.beta is None and self.stage in DEFAULT_BETA:  # an unknown stage is refused by validate
            self.beta = DEFAULT_BETA[self.stage]
        self.validate()

    def validate(self) -> None:
        """Reject values that would fail deep inside a trainer, with one sentence a person can act on."""
        from .presets import PRESETS

        if self.backend not in BACKENDS:
            raise ApplianceError(f"Unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}.")
        if self.stage not in STAGES:
            raise ApplianceError(f"Unknown stage {self.stage!r}; choose one of {', '.join(STAGES)}.")
        if self.preset not in PRESETS:
            raise ApplianceError(f"Unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}.")
        if self.steps < 1:
            raise ApplianceError("steps must be at least 1.")
        if self.learning_rate is not None and not 0 < self.learning_rate < float("inf"):
            raise ApplianceError(f"learning_rate must be a positive number such as "
                                 f"{DEFAULT_LEARNING_RATE[self.stage]:g}, not {self.learning_rate!r}.")
        if self.optimizer not in OPTIMIZERS:
            raise ApplianceError(f"Unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}.")
        negative_half = [name for name in NEGATIVE_HALF_OPTIONS if getattr(self, name)]
        if len(negative_half) > 1:
            raise ApplianceError(f"{' and '.join(negative_half)} each set GRPO's negative half their own way; "
                                 f"choose one.")
        token_weighting = [name for name in TOKEN_WEIGHTING_OPTIONS if getattr(self, name)]
        if token_weighting and PRESETS[self.preset]["loss_type"] == "grpo":
            raise ApplianceError(f"{token_weighting[0]} weighs tokens against the step's token count, which preset "
                                 f"{self.preset}'s per-answer average does not use; choose preset dapo or dr_grpo.")
        if self.optimizer == "sgd" and self.learning_rate is None:
            raise ApplianceError("optimizer sgd needs a learning rate (--lr): its scale is not AdamW's, so the "
                                 "stage's default does not apply.")
        if self.lora_r < 1:
            raise ApplianceError(f"lora_r must be at least 1, not {self.lora_r!r}.")
        if self.stage in ("sft", "dpo"):
            if self.batch_size < 1:
                raise ApplianceError(f"batch_size must be at least 1, not {self.batch_size!r}.")
            if self.stage == "sft" and self.epochs is not None and not 0 < self.epochs < float("inf"):
                raise ApplianceError(f"epochs must be a positive number of passes, not {self.epochs!r}.")
            if not 0 <= self.decision_weight < float("inf"):
                raise ApplianceError(f"decision_weight must be 0 (the act-or-decline token is not trained) or a "
                                     f"positive number (1 = plain SFT), not {self.decision_weight!r}.")
            if not 0 <= self.missing_tool_share <= 1:
                raise ApplianceError(f"missing_tool_share must be a share from 0 to 1, "
                                     f"not {self.missing_tool_share!r}.")
            if self.batch_order not in BATCH_ORDERS:
                raise ApplianceError(f"batch_order must be one of {', '.join(BATCH_ORDERS)}, not {self.batch_order!r}.")
            if self.missing_tool_listing not in MISSING_TOOL_LISTINGS:
                raise ApplianceError(f"missing_tool_listing must be one of {', '.join(MISSING_TOOL_LISTINGS)}, "
                                     f"not {self.missing_tool_listing!r}.")
        if self.stage == "grpo":
            for name in ("prompts_per_step", "max_completion_tokens"):
                if getattr(self, name) is not None and getattr(self, name) < 1:
                    raise ApplianceError(f"{name} must be at least 1, not {getattr(self, name)!r}.")
            if not 0 < self.temperature < float("inf"):
                raise ApplianceError(f"temperature must be above 0 (GRPO samples), not {self.temperature!r}.")
            if not 0 <= self.beta < float("inf"):
                raise ApplianceError(f"beta must be 0 (no KL term) or more, not {self.beta!r}.")
        if self.stage == "dpo":
            if not 0 < self.beta < float("inf"):
                raise ApplianceError(f"beta must be above 0 for DPO (0 makes its loss flat), such as "
                                     f"{DEFAULT_BETA['dpo']:g}, not {self.beta!r}.")
            for name in ("pairs_per_task", "min_pairs"):
                if getattr(self, name) < 1:
                    raise ApplianceError(f"{name} must be at least 1, not {getattr(self, name)!r}.")
            if self.pairs_source not in PAIR_SOURCES:
                raise ApplianceError(f"pairs_source must be one of {', '.join(PAIR_SOURCES)}, "
                                     f"not {self.pairs_source!r}.")
            if self.pairs_source == "listing" and self.pairs_from is not None:
                raise ApplianceError("pairs_from names stored samples to pair; listing pairs are built from the "
                                     "pack's answers alone, so pass one of --pairs-from and --pairs-source listing.")
            if not 0 <= self.rpo_alpha < float("inf"):
                raise ApplianceError(f"rpo_alpha must be 0 (DPO alone) or a positive weight of the chosen answers' "
                                     f"log-likelihood, not {self.rpo_alpha!r}.")
        if self.successes_from is not None and (self.policy_checks or self.time_checks or self.missing_tool_share):
            raise ApplianceError("successes_from trains on the model's own answers as they are; it cannot add "
                                 "policy checks or rows without their tools (drop --policy-checks, --time-checks and "
                                 "--missing-tool-share).")
        if self.stage == "grpo" and self.num_generations < 2:
            raise ApplianceError("GRPO needs num_generations >= 2: advantages compare completions within a group.")
        if self.lora_r > self.max_lora_rank:
            raise ApplianceError(f"lora_r ({self.lora_r}) exceeds max_lora_rank ({self.max_lora_rank}); raise max_lora_rank.")
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ApplianceError(f"Unknown precision {self.precision!r}; choose auto, fp32 or bf16.")
        if self.lora_layers is not None and self.lora_layers < 0:
            raise ApplianceError("lora_layers must be 0 (every layer) or a positive number of last layers.")
        if self.task_selection not in TASK_SELECTIONS:
            raise ApplianceError(f"Unknown task selection {self.task_selection!r}; "
                                 f"choose one of {', '.join(TASK_SELECTIONS)}.")
        if self.eval_every < 1:
            raise ApplianceError("eval_every must be at least 1.")
        if self.eval_limit < 0:
            raise ApplianceError(f"eval_limit must be 0 (the whole split) or a number of tasks, not {self.eval_limit!r}.")
        if self.fit_limit < 0:
            raise ApplianceError(f"fit_limit must be 0 (no fit check) or a number of tasks, not {self.fit_limit!r}.")
        if self.screen_limit is not None and self.screen_limit < 1:
            raise ApplianceError("screen_limit must be at least 1 (or unset to screen every task).")
        if not isinstance(self.resample_flat_groups, int) or self.resample_flat_groups < 0:
            raise ApplianceError(f"resample_flat_groups must be 0 (off) or a number of rounds, "
                                 f"not {self.resample_flat_groups!r}.")
        if not 0 <= self.sft_anchor < float("inf"):
            raise ApplianceError(f"sft_anchor must be 0 (off) or more, not {self.sft_anchor!r}.")
        if self.sft_anchor_batch < 1:
            raise ApplianceError(f"sft_anchor_batch must be at least 1, not {self.sft_anchor_batch!r}.")
        if self.scale_rewards is not None and self.scale_rewards not in REWARD_SCALINGS:
            raise ApplianceError(f"Unknown reward scaling {self.scale_rewards!r}; "
                                 f"choose one of {', '.join(REWARD_SCALINGS)}.")
        if self.max_no_call_share is not None and not 0 <= self.max_no_call_share <= 1:
            raise ApplianceError(f"max_no_call_share must be between 0 and 1, not {self.max_no_call_share!r}.")
        if self.train_split is not None and self.train_split not in TRAIN_SPLITS:
            raise ApplianceError(f"Unknown train split {self.train_split!r}; choose {' or '.join(TRAIN_SPLITS)}.")
        if self.eval_split not in EVAL_SPLITS:
            raise ApplianceError(f"Unknown eval split {self.eval_split!r}; choose one of {', '.join(EVAL_SPLITS)}.")
        if self.reward is not None:
            from ..rewards import scheme_weights

            scheme_weights(self.reward)  # one sentence naming the schemes

    def training_split(self, pack: Any) -> str:
        """The split this run trains on in `pack` (see `train_split`)."""
        if self.train_split is not None:
            return self.train_split
        return "train_rl" if self.stage == "grpo" and "train_rl" in pack.splits else "train"

    @property
    def effective_learning_rate(self) -> float:
        if self.learning_rate is not None:
            return float(self.learning_rate)
        return DEFAULT_LEARNING_RATE[self.stage]

    @property
    def lists_other_domain(self) -> bool:
        """Whether SFT's missing-tool rows (DPO's listing pairs) are on and show another domain's tools
        (Pack.other_domain_tools)."""
        declines_taught = self.pairs_source == "listing" if self.stage == "dpo" else self.missing_tool_share > 0
        return declines_taught and self.missing_tool_listing == "other"

    @property
    def completion_tokens(self) -> int:
        """GRPO's sampling budget per turn: max_completion_tokens, else the start's answer budget."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.answer_budget()

    def answer_budget(self) -> int:
        """The generation budget this run's answers need: room for the `<think>` block SFT teaches with checks,
        else its start's budget (appliance.checkpoints.answer_tokens_for)."""
        from ..checkpoints import answer_tokens_for

        return answer_tokens_for(self.to_dict())

    @property
    def target_modules(self) -> str | list[str]:
        """The PEFT `target_modules` value for `lora_targets`."""
        if self.lora_targets.strip() == ALL_LINEAR:
            return ALL_LINEAR
        return [name.strip() for name in self.lora_targets.split(",") if name.strip()]

    def lora_layer_indices(self, num_layers: int, backend_default: int = 0) -> list[int] | None:
        """PEFT `layers_to_transform` for `lora_layers` in a model with `num_layers` decoder layers (None = all).

        `backend_default` is the backend's choice, used when `lora_layers` is None.
        """
        count = backend_default if self.lora_layers is None else self.lora_layers
        if not count or count >= num_layers:
            return None
        return list(range(num_layers - count, num_layers))

    def peft_targets(self, num_layers: int, backend_default: int = 0) -> dict[str, Any]:
        """`target_modules` and `layers_to_transform` for LoraConfig / get_peft_model.

        PEFT refuses a layer subset with the string `all-linear`, so a subset spells the modules out.
        """
        layers = self.lora_layer_indices(num_layers, backend_default)
        targets = self.target_modules
        if layers is None:
            return {"target_modules": targets}
        return {"target_modules": list(ALL_LINEAR_MODULES) if targets == ALL_LINEAR else targets,
                "layers_to_transform": layers}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ApplianceError(f"Unknown training config field(s) {', '.join(unknown)}; check the spelling.")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json() + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "TrainConfig":
        return cls.from_json(Path(path).read_text(encoding="utf-8"))


def field_help() -> dict[str, str]:
    """Help text per field, for CLI flags and the TUI's config form."""
    return {f.name: f.metadata["help"] for f in fields(TrainConfig)}
