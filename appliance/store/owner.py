"""Who is writing a `running` row, and whether that process still exists.

A run or eval that is killed (SIGKILL, OOM, a closed laptop) never writes its
final status. Its `running` row names its owner, `host:pid:start`, where start
is the process's start time (Linux `/proc/<pid>/stat`, empty elsewhere) so a
recycled pid is not mistaken for the owner. A later process on the same host
can then tell an abandoned row from a live one; on another host it cannot, and
leaves the row alone.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path


def this_process() -> str:
    """The owner string of the calling process."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or ''}"


def has_ended(owner: str | None) -> bool:
    """True only when `owner` is a process on this host that has certainly ended."""
    try:
        host, pid_text, start = (owner or "").rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False  # no owner recorded (an older row), or not ours to judge
    if host != socket.gethostname() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, under another user
    stat = _stat_fields(pid)
    if stat is None:
        return False
    state, started = stat
    return state == "Z" or bool(start) and started != start  # a zombie, or the pid now belongs to another


def _start_time(pid: int) -> str | None:
    stat = _stat_fields(pid)
    return stat[1] if stat else None


def _stat_fields(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) from /proc, or None where there is no /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; the fields after its last ")" do not.
    fields = text.rpartition(")")[2].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None
