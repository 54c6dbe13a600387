"""The offline GPU self-check's CPU-testable half: wheels from a folder, skipped parts, time budgets, shapes.

No GPU here, so the parts themselves do not run; what is checked is everything around them:
the wheels land in a scratch folder that only the children see, a bad --wheels gets one
sentence and exit 2, a part whose library is missing says so in one line, a part that runs
past its budget is killed with everything it started, and the Qwen2.5-1.5B shape is the real one.
"""
from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from importlib.machinery import PathFinder
from pathlib import Path

import pytest

from appliance import doctor
from appliance import gpu_smoke as smoke

REPO = Path(__file__).resolve().parents[1]
PROBE = "smoke_probe"  # a package that exists nowhere but in the wheel these tests build


def build_wheel(folder: Path, name: str = PROBE, version: str = "0.3.1") -> Path:
    """A minimal real wheel (a zip with dist-info and a RECORD of hashes), as any build backend writes it."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 'from the wheel'\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: the test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def run_doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", "doctor", *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def one_line_rejection(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("error: "), lines
    return lines[0]


# ---------------------------------------------------------------- wheels from a folder

def test_wheels_install_into_a_scratch_folder_only_the_children_see(tmp_path):
    wheel = build_wheel(tmp_path / "wheels")
    site = tmp_path / "site"
    installed = doctor.install_wheels(doctor.wheel_files(wheel.parent), site)
    assert installed == [(PROBE, "0.3.1")]
    check = f"import {PROBE}, sys; sys.exit(0 if {PROBE}.VALUE == 'from the wheel' else 5)"
    assert doctor.run_part([sys.executable, "-c", check], doctor.child_env(site), budget_s=60) == 0
    # The user's environment is as it was: not importable here, not in this interpreter's packages,
    # and a child started without the scratch folder cannot import it either.
    assert PathFinder.find_spec(PROBE) is None
    assert PROBE not in {d.metadata["Name"] for d in metadata.distributions()}
    assert not list(Path(sys.prefix).glob(f"lib/python*/site-packages/{PROBE}*"))
    assert doctor.run_part([sys.executable, "-c", check], doctor.child_env(None), budget_s=60) == 1


def test_the_doctor_installs_the_wheels_then_skips_what_is_missing(tmp_path):
    if PathFinder.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here, so its part would not be skipped")
    wheels = build_wheel(tmp_path / "wheels").parent
    proc = run_doctor("--gpu-smoke", "--wheels", str(wheels))
    lines = proc.stdout.splitlines()
    assert f"installed: {PROBE} 0.3.1" in lines, proc.stdout
    assert lines.index(f"installed: {PROBE} 0.3.1") < lines.index(smoke.skip_line("vllm", "vllm")), proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("case", ["missing folder", "a file", "no wheels", "not a zip"])
def test_a_bad_wheels_folder_gets_one_sentence_and_exit_2(tmp_path, case):
    target = {"missing folder": tmp_path / "no-such-folder", "a file": tmp_path / "notes.txt",
              "no wheels": tmp_path / "empty", "not a zip": tmp_path / "broken"}[case]
    if case == "a file":
        target.write_text("not a folder")
    elif case == "no wheels":
        target.mkdir()
        (target / "README.txt").write_text("wheels go here")
    elif case == "not a zip":
        target.mkdir()
        (target / f"{PROBE}-0.3.1-py3-none-any.whl").write_bytes(b"this is not a zip archive")
    line = one_line_rejection(run_doctor("--gpu-smoke", "--wheels", str(target)))
    assert str(target) in line
    if case != "not a zip":
        assert "--wheels" in line and "pip download --no-deps" in line, line
    else:
        assert "pip could not install" in line, line


def test_wheels_without_the_gpu_smoke_is_refused(tmp_path):
    line = one_line_rejection(run_doctor("--wheels", str(tmp_path)))
    assert "--gpu-smoke" in line


def test_the_download_hint_names_our_pins():
    assert doctor.wheels_to_bring() == ("trl==1.15.0 peft==0.21.2 unsloth==2026.10.9 unsloth_zoo==2026.10.9 "
                                        "bitsandbytes==0.50.2")


# ---------------------------------------------------------------- parts whose library is missing

def test_a_missing_library_is_found_on_the_childrens_path(tmp_path):
    if PathFinder.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    assert smoke.missing_library("vllm") == "vllm"
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    assert smoke.missing_library("vllm", [str(tmp_path), *sys.path]) is None
    assert smoke.skip_line("vllm", "vllm").startswith("vllm: skipped (vllm not installed; ")


def test_a_part_run_directly_prints_its_skip_line_and_exits_skipped():
    if PathFinder.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    proc = subprocess.run([sys.executable, "-m", "appliance.gpu_smoke", "vllm"], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == smoke.EXIT_SKIPPED, proc.stderr
    assert proc.stdout.splitlines() == [smoke.skip_line("vllm", "vllm")]


def test_all_parts_skip_missing_libraries_but_a_part_asked_for_by_name_fails(monkeypatch, capsys):
    monkeypatch.setattr(smoke, "missing_library", lambda part, path=None: {"vllm": "vllm"}.get(part))
    ran = []
    monkeypatch.setattr(doctor, "run_part", lambda argv, env, budget_s: ran.append(argv[-3]) or 0)
    assert doctor.gpu_smoke("all") == 0
    out = capsys.readouterr().out.splitlines()
    assert ran == ["bnb", "unsloth"]
    assert smoke.skip_line("vllm", "vllm") in out and "gpu_smoke_skipped: 1" in out and "gpu_smoke_failed: 0" in out
    with pytest.raises(doctor.ApplianceError, match="the vllm part needs vllm"):
        doctor.gpu_smoke("vllm")


def test_asking_for_a_missing_part_by_name_is_one_sentence():
    if PathFinder.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    assert "vllm" in one_line_rejection(run_doctor("--gpu-smoke", "--part", "vllm"))


# ---------------------------------------------------------------- time budgets

def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_part_past_its_budget_is_killed_with_what_it_started(tmp_path, monkeypatch, capsys):
    pid_file = tmp_path / "grandchild.pid"
    sleeper = ("import subprocess, sys, time; "
               "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
               f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(120)")
    monkeypatch.setattr(doctor, "_part_command", lambda name, shape: [sys.executable, "-c", sleeper])
    started = time.monotonic()
    outcome = doctor._run_one("bnb", None, "tiny", doctor.child_env(None), {"bnb": 3}, time.monotonic() + 600)
    assert outcome == "failed"
    assert time.monotonic() - started < 30
    out = capsys.readouterr().out.splitlines()
    assert "bnb: timed out after 3 s" in out and "bnb_ok: 0" in out
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10  # the orphan is reaped by init a moment after the kill
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_the_budget_is_capped_by_what_is_left_of_the_whole_check(monkeypatch, capsys):
    budgets = []
    monkeypatch.setattr(doctor, "run_part", lambda argv, env, budget_s: budgets.append(budget_s))
    doctor._run_one("unsloth", None, "tiny", {}, doctor.PART_BUDGET_S, time.monotonic() + 40.5)
    assert budgets == [40]
    assert "unsloth: timed out after 40 s" in capsys.readouterr().out
    assert sum(doctor.PART_BUDGET_S.values()) <= doctor.TOTAL_BUDGET_S <= 600


# ---------------------------------------------------------------- the model shape

def test_the_qwen_shape_is_qwen2_5_1_5b():
    import torch
    from transformers import AutoModelForCausalLM

    config = smoke.qwen2_5_1_5b_config(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    assert config.model_type == "qwen2"
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads,
            config.intermediate_size, config.vocab_size) == (1536, 28, 12, 2, 8960, 151936)
    assert config.rope_parameters["rope_theta"] == 1e6 and config.tie_word_embeddings
    with torch.device("meta"):  # shapes only: no memory, no weights
        model = AutoModelForCausalLM.from_config(config)
    assert 1.50e9 < sum(p.numel() for p in model.parameters()) < 1.56e9  # Qwen2.5-1.5B: 1.54 B
    assert model.model.layers[0].self_attn.q_proj.bias is not None  # Qwen2's q/k/v biases


def test_the_cli_offers_the_shapes_and_parts_the_smoke_has():
    from appliance.cli import build_parser

    args = build_parser().parse_args(["doctor", "--gpu-smoke", "--shape", "qwen2.5-1.5b", "--part", "unsloth",
                                      "--wheels", "w"])
    assert (args.shape, args.part, args.wheels) == ("qwen2.5-1.5b", "unsloth", Path("w"))
    assert build_parser().parse_args(["doctor"]).shape == smoke.SHAPES[0] == "tiny"
