"""Reading the pinned wheels' source without importing it, and finding what our code passes to it.

Unsloth, unsloth_zoo and vLLM do not import without CUDA, so the contract parses
their files with `ast` straight out of the wheel (a zip). The other half is our
own source: the keyword arguments we pass to their functions are read from it,
so a new argument is checked the day it is written, without a list kept here.
"""
from __future__ import annotations

import ast
import functools
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEELS = Path(sys.prefix) / "wheels"  # where make_venv.py downloads them, inside the contract venv


@functools.lru_cache(maxsize=None)
def _wheel(package: str) -> zipfile.ZipFile:
    from .make_venv import gpu_pins, wheel_path

    version = gpu_pins()[package]
    path = wheel_path(WHEELS, package, version)
    if path is None:
        raise FileNotFoundError(f"no {package}=={version} wheel in {WHEELS}; run `make contract` to download it")
    return zipfile.ZipFile(path)


@functools.lru_cache(maxsize=None)
def wheel_source(package: str, member: str) -> str:
    """The text of one file inside a pinned wheel, e.g. ("vllm", "vllm/sampling_params.py")."""
    return _wheel(package).read(member).decode()


@functools.lru_cache(maxsize=None)
def wheel_tree(package: str, member: str) -> ast.Module:
    return ast.parse(wheel_source(package, member), filename=f"{package}:{member}")


def find_class(tree: ast.AST, name: str) -> ast.ClassDef:
    found = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == name]
    assert found, f"class {name} is gone"
    return found[0]


def find_function(scope: ast.AST, name: str) -> ast.FunctionDef:
    body = scope.body if isinstance(scope, (ast.ClassDef, ast.Module)) else list(ast.walk(scope))
    found = [node for node in body if isinstance(node, ast.FunctionDef) and node.name == name]
    assert found, f"function {name} is gone from {getattr(scope, 'name', 'the module')}"
    return found[0]


@dataclass(frozen=True)
class Parameters:
    """A function's parameters as the signature spells them."""

    positional: tuple[str, ...]  # positional-or-keyword, in order
    keyword: frozenset[str]  # every name a keyword argument may use
    var_keyword: bool  # has **kwargs (which would swallow a misspelt keyword silently)


def parameters(function: ast.FunctionDef, *, bound: bool = False) -> Parameters:
    """`bound`: drop the first positional parameter (self, or a model bound with functools.partial)."""
    args = function.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    if bound:
        positional = positional[1:]
    keyword = [a.arg for a in args.args + args.kwonlyargs]
    return Parameters(tuple(positional), frozenset(keyword) - ({function.args.args[0].arg} if bound else set()),
                      args.kwarg is not None)


def class_fields(cls: ast.ClassDef) -> tuple[str, ...]:
    """Annotated class attributes in order: a dataclass's or msgspec Struct's fields."""
    return tuple(node.target.id for node in cls.body
                 if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name))


# --- our side ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OurCall:
    where: str  # file:line
    positional: int
    keywords: frozenset[str]


def our_calls(relative_path: str, callee: str, receivers: tuple[str, ...] | None = None) -> list[OurCall]:
    """Every call to `callee` (a bare name or the last attribute) in one of our files.

    `receivers` limits attribute calls to those on an object with one of these
    names (`engine.generate`, `llm.generate`), so an HF `generate` is not taken
    for vLLM's. Keywords spread from a literal dict (`**{"a": x}` or
    `**({"a": x} if c else {})`) count as passed.
    """
    path = ROOT / relative_path
    calls = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call) or _callee_name(node.func) != callee:
            continue
        if receivers is not None and _receiver_name(node.func) not in receivers:
            continue
        keywords = set()
        for keyword in node.keywords:
            if keyword.arg is not None:
                keywords.add(keyword.arg)
            else:
                keywords |= _spread_keys(keyword.value)
        calls.append(OurCall(f"{relative_path}:{node.lineno}", len(node.args), frozenset(keywords)))
    return calls


def _callee_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _receiver_name(func: ast.expr) -> str | None:
    if not isinstance(func, ast.Attribute):
        return None
    value = func.value
    if isinstance(value, ast.Attribute):
        return value.attr  # self.engine.generate -> engine
    return value.id if isinstance(value, ast.Name) else None


def _spread_keys(value: ast.expr) -> set[str]:
    keys = set()
    for node in ast.walk(value):
        if isinstance(node, ast.Dict):
            keys |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return keys


def check_call_fits(call: OurCall, params: Parameters, label: str, *, also_accepted: frozenset[str] = frozenset(),
                    allow_swallowed: bool = False) -> list[str]:
    """Problems with one of our calls against a signature (empty when it fits).

    A keyword must be a named parameter (or in `also_accepted`, e.g. the fields
    a **kwargs is forwarded to); one that only **kwargs would take is reported
    unless `allow_swallowed`, because it would be ignored without a word.
    """
    problems = []
    if call.positional > len(params.positional):
        problems.append(f"{call.where}: {call.positional} positional arguments, {label} takes "
                        f"{len(params.positional)} ({', '.join(params.positional)})")
    for name in sorted(call.keywords):
        if name in params.keyword or name in also_accepted:
            continue
        if params.var_keyword and allow_swallowed:
            continue
        problems.append(f"{call.where}: {label} has no parameter {name!r}")
    return problems


# --- Unsloth's generated trainer configs ------------------------------------------------------

UNSLOTH_RL = "unsloth/models/rl.py"
UNSLOTH_RL_PATCHER = "_patch_trl_rl_trainers_impl"  # writes Unsloth{GRPO,SFT}Config from TRL's source


def parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def unsloth_patcher() -> ast.FunctionDef:
    return find_function(wheel_tree("unsloth", UNSLOTH_RL), UNSLOTH_RL_PATCHER)


def unsloth_default_replacements(trainer_file: str) -> dict[str, object]:
    """The config defaults Unsloth rewrites for one TRL trainer (e.g. "grpo_trainer"), as in its source.

    rl.py builds a `replacements` dict for every trainer, one more inside
    `if trainer_file == "<name>":`, and sets `warmup_steps` (transformers >= 5)
    beside them; each entry becomes the default of that field in the generated
    config class. Read with literal_eval, so a change of value shows here.
    """
    function = unsloth_patcher()
    up = parents(function)
    merged: dict[str, object] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            enclosing = up.get(node)
            condition = ast.unparse(enclosing.test) if isinstance(enclosing, ast.If) else ""
            if isinstance(target, ast.Name) and target.id == "replacements" and isinstance(node.value, ast.Dict):
                if enclosing is function or condition == f"trainer_file == {trainer_file!r}":
                    merged.update(ast.literal_eval(node.value))
            elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                  and target.value.id == "replacements" and "transformers_version >= Version('5.0.0')" == condition
                  and node in enclosing.body):
                merged[ast.literal_eval(target.slice)] = ast.literal_eval(node.value)
    assert merged, f"no `replacements` found in {UNSLOTH_RL}:{UNSLOTH_RL_PATCHER}"
    return merged
