"""SFT's missing-tool rows: the same request without the tools it calls, answered with a decline."""
from __future__ import annotations

from pathlib import Path

import pytest

from appliance.errors import ApplianceError
from appliance.packs import load_pack
from appliance.prompting import MISSING_TOOL_TEXT
from appliance.train import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pack():
    return load_pack(ROOT / "tasks" / "workplace-single")


def _rows(pack, tiny_model_dir, share):
    from transformers import AutoTokenizer

    from appliance.train.sft import sft_rows

    return sft_rows(pack, AutoTokenizer.from_pretrained(tiny_model_dir), "dev", missing_tool_share=share)


def _tools_left(pack, task):
    called = {call.name for call in task.expected}
    return [tool for tool in pack.tools_for(task) if tool["function"]["name"] not in called]


def test_off_by_default_and_at_zero(pack, tiny_model_dir):
    assert TrainConfig().missing_tool_share == 0
    rows = _rows(pack, tiny_model_dir, 0.0)
    assert [r["task_id"] for r in rows] == [t.id for t in pack.tasks("dev")]
    assert not any(r["completion"] == MISSING_TOOL_TEXT for r in rows)


def test_the_extra_rows_list_every_tool_but_the_ones_the_task_calls(pack, tiny_model_dir):
    plain = {r["task_id"]: r for r in _rows(pack, tiny_model_dir, 0.0)}
    rows = _rows(pack, tiny_model_dir, 1.0)
    extra = rows[len(plain):]
    calling = [t for t in pack.tasks("dev") if t.expected]
    kept = [t for t in calling if _tools_left(pack, t)]
    assert rows[:len(plain)] == list(plain.values())
    # at share 1 every calling task whose listing keeps a tool, and nothing else (a lone directory lookup has none)
    assert [r["task_id"] for r in extra] == [t.id for t in kept] and len(kept) > 0.8 * len(calling)
    for row, task in zip(extra, kept):
        assert row["completion"] == MISSING_TOOL_TEXT
        called = {call.name for call in task.expected}
        for tool in pack.tools_for(task):  # the listing lost exactly the called tools
            name = tool["function"]["name"]
            shown_before = f"- {name}(" in plain[task.id]["prompt"]
            assert shown_before and (f"- {name}(" in row["prompt"]) == (name not in called), (task.id, name)
        assert row["prompt"].endswith(plain[task.id]["prompt"][-200:])  # the same request, the same ending


def test_the_share_picks_a_stable_subset(pack, tiny_model_dir):
    half = [r["task_id"] for r in _rows(pack, tiny_model_dir, 0.5) if r["completion"] == MISSING_TOOL_TEXT]
    fifth = {r["task_id"] for r in _rows(pack, tiny_model_dir, 0.2) if r["completion"] == MISSING_TOOL_TEXT}
    calling = sum(bool(t.expected) for t in pack.tasks("dev"))
    # Pinned, not recomputed: a pick that depended on the process (hash(), an unseeded draw) would fail here.
    assert len(half) == 51 and half[:5] == ["ws-dev-0000", "ws-dev-0001", "ws-dev-0004", "ws-dev-0005", "ws-dev-0008"]
    assert fifth < set(half)
    assert 0.3 * calling < len(half) < 0.7 * calling


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_share_outside_0_to_1_is_one_sentence(share):
    with pytest.raises(ApplianceError, match="missing_tool_share must be a share from 0 to 1"):
        TrainConfig(stage="sft", missing_tool_share=share).validate()


def test_the_other_listing_shows_a_domain_the_request_does_not_use(pack, tiny_model_dir):
    from transformers import AutoTokenizer

    from appliance.train.sft import sft_rows

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    own = sft_rows(pack, tokenizer, "dev", missing_tool_share=0.5)
    other = sft_rows(pack, tokenizer, "dev", missing_tool_share=0.5, missing_tool_listing="other")
    own_extra = {r["task_id"] for r in own if r["completion"] == MISSING_TOOL_TEXT}
    other_extra = {r["task_id"] for r in other if r["completion"] == MISSING_TOOL_TEXT}
    # the same picks, another listing; a lone directory lookup keeps a listing here (another domain's)
    assert own_extra < other_extra and other[:len(own) - len(own_extra)] == own[:len(own) - len(own_extra)]
    by_id = {t.id: t for t in pack.tasks("dev")}
    extra = [r for r in other if r["completion"] == MISSING_TOOL_TEXT]
    assert len(extra) > 20
    for row in extra:
        task = by_id[row["task_id"]]
        own_names = {t["function"]["name"] for t in pack.tools_for(task)} - {"company_directory_find_email_address"}
        shown = {t["function"]["name"] for t in pack.other_domain_tools(task)}
        assert not own_names & shown, task.id  # nothing of the request's own domain is listed
        for name in shown - {call.name for call in task.expected}:
            assert f"- {name}(" in row["prompt"], (task.id, name)
        assert not any(f"- {call.name}(" in row["prompt"] for call in task.expected)


def test_the_other_listing_needs_a_pack_that_lists_tools_by_domain(tmp_path):
    from appliance.train.sft import run_sft

    config = TrainConfig(stage="sft", pack=str(ROOT / "tasks" / "bfcl"), missing_tool_share=0.2,
                         missing_tool_listing="other", workspace=str(tmp_path / "ws"))
    with pytest.raises(ApplianceError, match="does not list its tools by domain"):
        run_sft(config)
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").iterdir())  # refused before the run starts


def test_an_unknown_listing_is_one_sentence():
    with pytest.raises(ApplianceError, match="missing_tool_listing must be one of own, other"):
        TrainConfig(stage="sft", missing_tool_listing="foreign").validate()
