"""How a pipeline stage's CPU threads wait between kernels: spin briefly when the machine is the run's own.

`appliance` sets `OMP_WAIT_POLICY=PASSIVE` before torch loads (cli.py): with OpenMP's spin-waiting, two
threads on a 2-core machine that another process shares run many times slower. But a passive thread
sleeps after every parallel region, and a CPU training step is thousands of small kernels, each waking
it again. `bench/bench_omp_wait.py` (session 53, 2 cores, the pipeline's SFT stage; docs/learning.md):

* alone: 4.84 s a step passive, 3.46 s spinning up to 100,000 times before sleeping (x0.715), the
  same losses (the same kernels, only the waiting differs);
* beside one busy process: 5.98 s passive, 25.1 s spinning (x4.2), 9.2 s at 10,000 spins.

So `appliance run` lets a stage's child spin (libgomp's GOMP_SPINCOUNT, read before OMP_WAIT_POLICY) only
when no other process is running as the stage starts, and never when the user set either variable.
A process that starts beside a spinning stage slows it down until the stage ends: the pipeline is the
main job, meant to have the machine to itself.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

SPIN_COUNT = 100_000  # ~1 ms of spinning before a thread sleeps; bench_omp_wait.py's spin_100000
SAMPLES, SAMPLE_INTERVAL_S = 10, 0.05
_USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_user_set: set[str] | None = None  # which of them the user had set before `wait_passively` set its default


def wait_passively() -> None:
    """Passive waiting for this process, unless the user chose a policy; call before torch loads."""
    global _user_set
    _user_set = {name for name in _USER_SETTINGS if name in os.environ}
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def running_processes() -> int:
    """The kernel's count of runnable processes now (this one included), or a large number if unknown."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            for line in stat:
                if line.startswith("procs_running "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 1 << 30


def machine_is_ours(read: Callable[[], int] = running_processes, samples: int = SAMPLES,
                    interval_s: float = SAMPLE_INTERVAL_S) -> bool:
    """True when, at some moment of `samples` readings, this process was the only one running.

    The least of several readings, because a short-lived process (a shell, a monitor) shows up in one
    reading, while a process that keeps a core busy shows up in all of them."""
    least = read()
    for _ in range(samples - 1):
        if least <= 1:
            break
        time.sleep(interval_s)
        least = min(least, read())
    return least <= 1


def _chosen_by_user(env: Mapping[str, str]) -> set[str]:
    """Which waiting variables the user set: those seen by `wait_passively`, or without it (a caller other than
    `appliance`) whichever `env` holds."""
    return set(_user_set) if _user_set is not None else {name for name in _USER_SETTINGS if name in env}


def stage_environment(alone: Callable[[], bool] = machine_is_ours) -> dict[str, str]:
    """The environment for a stage's child: this process's, plus spinning threads when the machine is ours."""
    env = dict(os.environ)
    if not _chosen_by_user(env) and alone():
        env["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    return env


def waiting_line(env: Mapping[str, str]) -> str:
    """How the threads of a stage started with `env` wait, and why: one line for the run's log, since a stage
    that waits passively takes about 1.4 times as long (the module's bench)."""
    user_set = _chosen_by_user(env)
    if user_set:
        chosen = ", ".join(f"{name}={env.get(name, '')}" for name in sorted(user_set))
        return f"threads wait as you set ({chosen})"
    if "GOMP_SPINCOUNT" in env:
        return f"threads spin up to {env['GOMP_SPINCOUNT']} times before they sleep (no other process was running)"
    return "threads wait passively (another process was running as the stage started)"
