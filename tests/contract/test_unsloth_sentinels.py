"""Unsloth behaviours our code depends on, read from the pinned wheels so an upgrade fails here first.

Unsloth and unsloth_zoo do not import without CUDA. Where the behaviour is
code Unsloth generates or runs on plain values, the test runs that very code
(the statements, taken out of the wheel with `ast`) on our values; where it is
structure (which branch sets what), the test checks the structure.

- The GRPO options our presets set survive Unsloth's generated config code,
  which fills only options left at None and overrides dr_grpo's reward scaling.
- Unsloth still rewrites weight_decay, warmup_steps and logging_nan_inf_filter
  (why common.FIXED_TRAINER_ARGS sets them) and the GRPO options presets set.
- Under standby, unsloth_zoo replaces gpu_memory_utilization with its own
  target, lower or higher (what the doctor and in_force.json report).
- `fast_generate` is set even without a vLLM engine; only `vllm_engine` tells.
- The patched GRPOTrainer drops TRL's frozen reference adapter, so with beta > 0
  the KL reference is the base model (UnslothBackend.kl_reference = "base").
- The patched DPOTrainer keeps TRL's frozen reference adapter, and Unsloth's
  LoRA kernels follow the active adapter, so DPO's reference is the starting
  adapter on both backends (UnslothBackend.make_dpo_trainer).
- Each generation step serves the live LoRA from a relative folder
  (./vllm_gen_lora) and writes its adapter_config.json there (why the backend
  roots those folders in the run folder); a path-based load reads the folder.
"""
from __future__ import annotations

import ast
from typing import Any

import pytest

from .sources import (UNSLOTH_RL, find_class, find_function, parents, unsloth_default_replacements,
                      unsloth_patcher, wheel_source, wheel_tree)

RESOLVED = ("loss_type", "beta", "scale_rewards", "mask_truncated_completions", "epsilon_high")


def _quiet(*_args: Any, **_kwargs: Any) -> None:
    """Stands in for print in the executed statements (they announce their overrides)."""


# --- the GRPO config code Unsloth generates -------------------------------------------------------


@pytest.fixture(scope="module")
def grpo_config_code() -> str:
    """The code Unsloth puts into UnslothGRPOConfig.__init__ to resolve loss_type, beta and friends.

    rl.py's patcher appends it to `extra_args` in three `if ... in call_args:`
    blocks; those blocks run here with TRL's own GRPOConfig fields as call_args.
    """
    import dataclasses

    import trl
    from packaging.version import Version

    blocks = [node for node in unsloth_patcher().body if isinstance(node, ast.If)
              and "in call_args" in ast.unparse(node.test)
              and any(name in ast.unparse(node.test) for name in ("'loss_type'", "'beta'"))]
    assert len(blocks) == 3, f"expected the loss_type, beta and dr_grpo blocks, found {len(blocks)}"
    namespace = {"trainer_file": "grpo_trainer", "extra_args": "", "Version": Version,
                 "trl_version": Version(trl.__version__),
                 "call_args": {field.name for field in dataclasses.fields(trl.GRPOConfig)}}
    exec(compile(ast.Module(body=blocks, type_ignores=[]), "unsloth/models/rl.py", "exec"), namespace)
    assert namespace["extra_args"].strip(), "Unsloth generated no GRPO option code"
    return namespace["extra_args"]


def _resolve(code: str, **values: Any) -> dict[str, Any]:
    namespace = {"print": _quiet, **values}
    exec(code, namespace)
    return {name: namespace[name] for name in values}


def _unset(**values: Any) -> dict[str, Any]:
    """The options as UnslothGRPOConfig sees them when the caller sets only `values`."""
    grpo = unsloth_default_replacements("grpo_trainer")
    return {"scale_rewards": "group", "epsilon_high": None,  # TRL's defaults
            **{name: grpo[name] for name in ("loss_type", "beta", "mask_truncated_completions")}, **values}


def test_unsloth_still_fills_unset_options_and_overrides_dr_grpo(grpo_config_code):
    # The controls: the behaviours the presets guard against are still there to guard against.
    assert _resolve(grpo_config_code, **_unset()) == {
        "loss_type": "dapo", "beta": 0.0, "scale_rewards": "group", "mask_truncated_completions": False,
        "epsilon_high": None}
    assert _resolve(grpo_config_code, **_unset(loss_type="grpo"))["beta"] == 0.001
    assert _resolve(grpo_config_code, **_unset(loss_type="dr_grpo"))["scale_rewards"] is False
    dapo = _resolve(grpo_config_code, **_unset(loss_type="dapo"))
    assert (dapo["mask_truncated_completions"], dapo["epsilon_high"]) == (True, 0.28)


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("preset", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_our_presets_pass_through_unsloths_option_code(grpo_config_code, preset, beta):
    from appliance.train.presets import PRESETS, grpo_options

    assert set(PRESETS) == {"grpo", "dr_grpo", "dapo", "gspo"}, "a preset was added: parametrize it here"
    ours = {name: value for name, value in grpo_options(preset, beta=beta).items() if name in RESOLVED}
    assert set(ours) == set(RESOLVED), f"the preset leaves {set(RESOLVED) - set(ours)} to Unsloth"
    assert _resolve(grpo_config_code, **ours) == ours


def test_unsloth_still_rewrites_the_defaults_we_set():
    grpo = unsloth_default_replacements("grpo_trainer")
    # TrainingArguments defaults, for every trainer (common.FIXED_TRAINER_ARGS sets them on every run).
    assert (grpo["weight_decay"], grpo["warmup_steps"], grpo["logging_nan_inf_filter"]) == (0.001, 0.1, False)
    # GRPO options (every preset sets them).
    assert grpo["vllm_importance_sampling_correction"] is False and grpo["router_aux_loss_coef"] == 0.0
    assert (grpo["loss_type"], grpo["beta"], grpo["mask_truncated_completions"]) == (None, None, None)
    assert unsloth_default_replacements("sft_trainer")["loss_type"] == "nll"


# --- unsloth_zoo: the standby memory target ---------------------------------------------------------


def _load_vllm() -> ast.FunctionDef:
    return find_function(wheel_tree("unsloth_zoo", "unsloth_zoo/vllm_utils.py"), "load_vllm")


def _same(node: ast.expr, expression: str) -> bool:
    return ast.dump(node) == ast.dump(ast.parse(expression, mode="eval").body)


def _standby_statements() -> tuple[list[ast.stmt], ast.If]:
    """load_vllm's statements from `total_gb = ...` to the standby override, and that override."""
    body = _load_vllm().body
    start = next(i for i, node in enumerate(body) if isinstance(node, ast.Assign)
                 and ast.unparse(node.targets[0]) == "total_gb")
    end = next(i for i, node in enumerate(body) if isinstance(node, ast.If)
               and _same(node.test, "unsloth_vllm_standby and not standby_util_override"))
    return body[start:end + 1], body[end]


def _in_force(configured: float, total_gib: float, *, override: bool = False) -> float:
    statements, _ = _standby_statements()
    namespace = {"total_memory": total_gib * 2**30, "gpu_memory_utilization": configured,
                 "unsloth_vllm_standby": True, "standby_util_override": override,
                 "UNSLOTH_ENABLE_LOGGING": False, "logger": None, "print": _quiet,
                 "vllm_version": wheel_version("vllm")}
    from packaging.version import Version

    namespace["Version"] = Version
    exec(compile(ast.Module(body=statements, type_ignores=[]), "unsloth_zoo/vllm_utils.py", "exec"), namespace)
    return namespace["gpu_memory_utilization"]


def wheel_version(package: str) -> str:
    from .make_venv import gpu_pins

    return gpu_pins()[package]


def test_standby_replaces_gpu_memory_utilization_both_ways():
    source = ast.unparse(_load_vllm())
    assert "unsloth_vllm_standby = unsloth_vllm_standby or os.getenv('UNSLOTH_VLLM_STANDBY', '0') != '0'" in source
    assert "os.getenv('UNSLOTH_VLLM_STANDBY_UTIL_OVERRIDE', '0') != '0'" in source
    low, high = _in_force(0.3, 24), _in_force(0.99, 24)
    assert low == high != 0.3, "standby no longer replaces a lower and a higher value alike"
    assert _in_force(0.3, 24, override=True) == 0.3


@pytest.mark.parametrize("total_gib", [8, 15, 16, 24, 40, 48, 80, 141])
def test_our_standby_target_is_unsloths(total_gib):
    from appliance.train import unsloth_backend

    ours = unsloth_backend.standby_gpu_memory_utilization(int(total_gib * 2**30))
    assert ours == pytest.approx(_in_force(0.6, total_gib))


# --- unsloth: fast_generate is no sign of a vLLM engine -----------------------------------------


def _assigned(nodes: list[ast.stmt], attribute: str) -> list[str]:
    """The right-hand sides assigned to `model.<attribute>` anywhere in these statements."""
    return [ast.unparse(node.value) for statement in nodes for node in ast.walk(statement)
            if isinstance(node, ast.Assign) and any(ast.unparse(t) == f"model.{attribute}" for t in node.targets)]


def test_fast_generate_is_set_without_an_engine():
    llama = find_class(wheel_tree("unsloth", "unsloth/models/llama.py"), "FastLlamaModel")
    loader = find_function(llama, "from_pretrained")
    branches = [node for node in ast.walk(loader) if isinstance(node, ast.If)
                and _same(node.test, "not fast_inference") and _assigned(node.body, "fast_generate")]
    assert len(branches) == 1, "FastLlamaModel.from_pretrained no longer branches on fast_inference as read here"
    branch = branches[0]
    # Without vLLM: fast_generate wraps transformers' generate and there is no engine.
    assert _assigned(branch.body, "fast_generate") == ["make_fast_generate_wrapper(model.generate)"]
    assert not _assigned(branch.body, "vllm_engine")
    # With vLLM: the engine is model.vllm_engine and fast_generate is its generate.
    assert _assigned(branch.orelse, "vllm_engine") == ["llm"]
    assert _assigned(branch.orelse, "fast_generate") == ["model.vllm_engine.generate"]


def test_load_lora_is_attached_only_with_an_engine():
    # unsloth models/_utils.py: the PEFT model gets vllm_engine and load_lora only when the base has an engine.
    tree = wheel_tree("unsloth", "unsloth/models/_utils.py")
    guards = [node for node in ast.walk(tree) if isinstance(node, ast.If) and _assigned(node.body, "load_lora")]
    assert guards, "unsloth no longer attaches load_lora where read here"
    assert all("vllm_engine" in ast.unparse(guard.test) for guard in guards), [ast.unparse(g.test) for g in guards]


# --- unsloth: with beta > 0 the KL reference is the base model --------------------------------------


def test_unsloth_removes_trls_reference_adapter():
    import inspect
    import re

    import trl

    from appliance.train.unsloth_backend import UnslothBackend

    patcher = unsloth_patcher()
    up = parents(patcher)
    branches = [up[node] for node in ast.walk(patcher) if isinstance(node, ast.Assign)
                and ast.unparse(node.targets[0]) == "peft_pattern" and isinstance(up.get(node), ast.If)
                and _same(up[node].test, "trl_version >= Version('1.4.0')")]
    assert len(branches) == 1, "rl.py no longer removes the reference adapter for trl >= 1.4 as read here"
    assert "re.sub(peft_pattern, replacement_comment, RLTrainer_source, flags=re.DOTALL)" in ast.unparse(branches[0])
    pattern = next(ast.literal_eval(node.value) for node in branches[0].body if isinstance(node, ast.Assign)
                   and ast.unparse(node.targets[0]) == "peft_pattern")
    # TRL keeps a frozen copy of a pretrained adapter as the KL reference (trl 1.15 grpo_trainer.py:455-483) ...
    source = inspect.getsource(trl.GRPOTrainer)
    assert source.count('model.add_adapter("ref", default_config)') == 1
    # ... and Unsloth's pattern still finds that block in the pinned trl and removes it.
    patched, removed = re.subn(pattern, "\n", source, flags=re.DOTALL)
    assert removed == 1 and 'add_adapter("ref"' not in patched
    assert UnslothBackend.kl_reference == "base"


# --- unsloth: DPO's reference is the starting adapter ------------------------------------------------


def _under(up: dict[ast.AST, ast.AST], node: ast.AST, test: str) -> bool:
    """Whether `node` sits in the body of an `if <test>:` somewhere above it."""
    while node in up:
        node = up[node]
        if isinstance(node, ast.If) and _same(node.test, test):
            return True
    return False


def test_unsloth_keeps_trls_dpo_reference_adapter():
    import inspect
    import re

    import trl

    # TRL copies the adapter it is given into a frozen "ref" adapter (trl 1.15 dpo_trainer.py:655-683)
    # and scores the reference with it (:1304-1312).
    source = inspect.getsource(trl.DPOTrainer)
    assert "elif is_peft_model(model) and ref_model is None:" in source
    assert source.count('model.add_adapter("ref", default_config)') == 1
    assert 'adapter_name="ref" if "ref" in ref_model_unwrapped.peft_config else None' in source
    # Unsloth's removals leave that block alone: rl.py's are GRPO-only ...
    patcher = unsloth_patcher()
    up = parents(patcher)
    removals = [node for node in ast.walk(patcher) if isinstance(node, ast.Assign)
                and ast.unparse(node.targets[0]) == "peft_pattern"]
    assert removals and all(_under(up, node, "RLTrainer_name == 'GRPOTrainer'") for node in removals)
    # ... and patch_functions' (run for every trainer) needs GRPO's `args.beta != 0.0`, which DPO's lacks.
    functions = find_function(wheel_tree("unsloth", UNSLOTH_RL), "patch_functions")
    patterns = [ast.literal_eval(node.value) for node in ast.walk(functions) if isinstance(node, ast.Assign)
                and ast.unparse(node.targets[0]) == "add_adapter_block_pattern"]
    assert len(patterns) == 1, "patch_functions no longer removes the reference adapter as read here"
    for pattern in patterns + [ast.literal_eval(node.value) for node in removals]:
        assert re.search(pattern, source, flags=re.DOTALL) is None, pattern
    # Unsloth's LoRA kernels take A and B from the active adapter, so use_adapter("ref") reaches them.
    lora = ast.unparse(find_function(wheel_tree("unsloth", "unsloth/kernels/utils.py"), "get_lora_parameters"))
    assert "adapter = getattr(proj, 'active_adapters', None)" in lora
    assert "lora_A_linear = proj.lora_A[adapter]" in lora and "proj.scaling[adapter]" in lora


# --- unsloth: the live LoRA's scratch folder ---------------------------------------------------------


def test_the_patched_trainer_writes_the_live_lora_config_into_a_relative_folder():
    replacements = wheel_source("unsloth", "unsloth/models/rl_replacements.py")
    assert 'lora_name = "vllm_gen_lora"' in replacements  # relative: the cwd, unless the backend roots it
    assert 'kwargs["lora_request"] = load_lora(lora_name, load_tensors = True)' in replacements
    zoo = wheel_tree("unsloth_zoo", "unsloth_zoo/vllm_utils.py")
    assert "config.save_pretrained(save_directory)" in ast.unparse(find_function(zoo, "_live_lora_config"))
    assert "return _build_lora_request(model, save_directory, load_tensors, lora_request_id)" in \
        ast.unparse(find_function(zoo, "load_lora"))
    build = ast.unparse(find_function(zoo, "_build_lora_request"))
    assert "peft_config = _live_lora_config(model, save_directory)" in build  # load_tensors=True
    # load_tensors=False (our evals): a path-based request, vLLM reads the folder's own files.
    assert "LoRARequest(str(lora_request_id), lora_request_id, save_directory)" in build
