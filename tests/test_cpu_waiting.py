"""A pipeline stage spins its CPU threads only when the machine is the run's own and the user chose nothing."""
import pytest

from appliance import cpu_waiting
from appliance.cpu_waiting import SPIN_COUNT, machine_is_ours, stage_environment, waiting_line


def readings(*values):
    it = iter(values)
    return lambda: next(it)


def test_the_least_of_the_readings_decides_whether_the_machine_is_ours():
    assert machine_is_ours(readings(3, 2, 1), samples=3, interval_s=0)  # a passing process, then only us
    assert not machine_is_ours(readings(2, 2, 2), samples=3, interval_s=0)  # a process that keeps a core busy
    assert 1 <= cpu_waiting.running_processes() < 1 << 30  # read from /proc/stat: this test is running


@pytest.mark.parametrize("user_env, alone, spins", [
    ({}, True, True),
    ({}, False, False),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, True, False),
    ({"GOMP_SPINCOUNT": "0"}, True, False),
])
def test_a_stage_spins_only_alone_and_never_over_the_users_setting(monkeypatch, user_env, alone, spins):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    for name, value in user_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(cpu_waiting, "_user_set", None)
    cpu_waiting.wait_passively()  # what `appliance` does first
    env = stage_environment(alone=lambda: alone)
    assert (env.get("GOMP_SPINCOUNT") == str(SPIN_COUNT)) == spins
    assert env.get("OMP_WAIT_POLICY") == user_env.get("OMP_WAIT_POLICY", "PASSIVE")
    assert env.get("GOMP_SPINCOUNT", "unset") == user_env.get("GOMP_SPINCOUNT", str(SPIN_COUNT) if spins else "unset")
    said = waiting_line(env)
    assert ("set" in said) if user_env else (("spin" in said) == spins and ("passively" in said) != spins)
