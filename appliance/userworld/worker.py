"""The child process that runs a pack's Python functions: `python -m appliance.userworld.worker`.

It speaks JSON lines on stdin/stdout with the parent (appliance.userworld.sandbox):

    parent -> {"module": path, "state": "make_state" | null, "tools": [names], "memory_mb": 1024}
    child  -> {"ready": true}  or  {"ready": false, "error": "tracker.py failed to import: ..."}
    parent -> {"setup": [calls], "calls": [calls]}            one episode, a fresh state
    child  -> {"started": 0}, {"started": 1}, ...             before each call, so a hang can be named
    child  -> {"results": [{"value": json} | {"error": text}], "start": json, "state": json}
              or {"error": text} when the fixture's setup calls fail

Before the user's module is imported the process limits its address space
(`resource.setrlimit(RLIMIT_AS)`) and leaves the network: it moves into a new
network namespace where one is allowed (no interface but loopback, which is
down), and in any case refuses socket connections at the Python level. The
protocol has its own copy of stdout; file descriptor 1 points at stderr, and
`sys.stdout` is swapped for a buffer during each call, so a tool that prints
is named rather than corrupting the protocol.

The limits guard against accidents in one's own code (a runaway loop, an
unbounded list, a forgotten HTTP call), not against hostile code.
"""
from __future__ import annotations

import ctypes
import dataclasses
import enum
import io
import json
import os
import resource
import socket
import sys
import typing
from typing import Any, Callable

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
MAX_OUTPUT_CHARS = 120


def main() -> None:
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything written to fd 1 from here on (C code, subprocesses) lands on stderr

    def send(message: dict[str, Any]) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    config = json.loads(sys.stdin.readline() or "{}")
    limit_memory(int(config.get("memory_mb", 1024)))
    leave_network()
    try:
        from appliance.userworld.schema import load_module

        module = load_module(config["module"])
    except Exception as err:  # noqa: BLE001 - PackError or anything the import raised
        send({"ready": False, "error": str(err)})
        return
    tools = {name: getattr(module, name, None) for name in config.get("tools", ())}
    factory = getattr(module, config["state"], None) if config.get("state") else None
    if config.get("state") and not callable(factory):
        send({"ready": False, "error": f"the module has no function '{config['state']}' to make the state"})
        return
    send({"ready": True})
    for line in sys.stdin:
        if line.strip():
            request = json.loads(line)
            send(run_episode(tools, factory, request.get("setup", ()), request.get("calls", ()), send))


def run_episode(tools: dict[str, Callable | None], factory: Callable | None, setup: Any, calls: Any,
                send: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    state = None
    if factory is not None:
        try:
            state = factory()
        except BaseException as err:  # noqa: BLE001
            return {"error": f"{factory.__name__}() raised {type(err).__name__}: {_short(err)}"}
    for index, call in enumerate(setup):
        outcome = run_call(tools, state, call)
        if "error" in outcome:
            return {"error": f"fixture setup call {index} ({call.get('name')}) failed: {outcome['error']}"}
    start = snapshot(state) if factory is not None else {}
    if "error" in start:
        return start
    results = []
    for index, call in enumerate(calls):
        send({"started": index})
        results.append(run_call(tools, state, call))
    reply: dict[str, Any] = {"results": results}
    if factory is not None:
        end = snapshot(state)
        if "error" in end:
            return end
        reply.update(start=start["value"], state=end["value"])
    return reply


def run_call(tools: dict[str, Callable | None], state: Any, call: dict[str, Any]) -> dict[str, Any]:
    name = call.get("name")
    function = tools.get(name)
    if not callable(function):
        return {"error": f"{name} is not a function of the module"}
    parameters, hints = _signature(function)
    arguments = _with_enums(hints, dict(call.get("arguments") or {}))
    if "state" in parameters:
        arguments["state"] = state
    captured, previous = io.StringIO(), sys.stdout
    sys.stdout = captured
    try:
        value = function(**arguments)
    except MemoryError:
        return {"error": f"{name} ran out of memory (over the sandbox's limit)"}
    except SystemExit as err:
        return {"error": f"{name} called exit({err.code})"}
    except BaseException as err:  # noqa: BLE001 - a tool raising is the model's execution error
        return {"error": f"{name} raised {type(err).__name__}: {_short(err)}"}
    finally:
        sys.stdout = previous
    printed = captured.getvalue()
    if printed:
        return {"error": f"{name} printed to stdout ({printed.strip()[:MAX_OUTPUT_CHARS]!r}); "
                         "a tool must return its result, not print it"}
    try:
        return {"value": canonical(value)}
    except (TypeError, ValueError) as err:
        return {"error": f"{name} returned a {type(value).__name__}, which is not JSON ({_short(err)})"}


def snapshot(state: Any) -> dict[str, Any]:
    try:
        return {"value": canonical(state)}
    except (TypeError, ValueError) as err:
        return {"error": f"the state ({type(state).__name__}) cannot be compared: it is not JSON ({_short(err)})"}


def canonical(value: Any) -> str:
    """Canonical JSON text; dataclasses, enums and plain objects' attributes are unwrapped first."""
    return json.dumps(_plain(value, 0), sort_keys=True, allow_nan=False, ensure_ascii=False)


def _plain(value: Any, depth: int) -> Any:
    if depth > 64:
        raise ValueError("nested more than 64 levels deep")
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value, depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        if not all(isinstance(k, (str, int, float, bool)) or k is None for k in value):
            raise TypeError("a dict has keys that are not text or numbers")
        return {str(k) if not isinstance(k, str) else k: _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value]
    raise TypeError(f"{type(value).__name__} is not a JSON type")


def limit_memory(megabytes: int) -> None:
    limit = megabytes * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def leave_network() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET)  # fails quietly where user namespaces are off
    except (OSError, AttributeError):
        pass

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise PermissionError("network access is disabled for a pack's functions")

    original_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            refuse()
        return original_connect(self, address)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect  # type: ignore[method-assign]
    socket.create_connection = refuse  # type: ignore[assignment]
    socket.getaddrinfo = refuse  # type: ignore[assignment]


_SIGNATURES: dict[Callable, tuple[tuple[str, ...], dict[str, Any]]] = {}


def _signature(function: Callable) -> tuple[tuple[str, ...], dict[str, Any]]:
    """(parameter names, type hints) of a tool, read once per process."""
    if function not in _SIGNATURES:
        import inspect

        try:
            hints = typing.get_type_hints(function)
        except Exception:  # noqa: BLE001 - the call itself will say what is wrong
            hints = {}
        try:
            parameters = tuple(inspect.signature(function).parameters)
        except (TypeError, ValueError):  # a builtin without a signature: called without the state
            parameters = ()
        _SIGNATURES[function] = (parameters, hints)
    return _SIGNATURES[function]


def _with_enums(hints: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """An Enum-typed parameter gets its member, not the member's JSON value."""
    for key, value in arguments.items():
        hint = hints.get(key)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            try:
                arguments[key] = hint(value)
            except ValueError:
                pass
    return arguments


def _short(err: BaseException) -> str:
    return " ".join(str(err).split())[:MAX_OUTPUT_CHARS]


if __name__ == "__main__":
    main()
