"""Task packs: folders of a TOML manifest, an OpenAI tools list and JSONL splits.

    pack = load_pack("workplace-single")        # validated in full, or PackError
    for task in pack.tasks("val"): ...
    check_pack(pack)                             # deeper checks, e.g. replay on the world

The format is described in tasks/README.md; WorkBench import lives in
`appliance.packs.workbench`, the seeded generator in `appliance.packs.generate`
and the rebuild of the committed workplace packs in `appliance.packs.build`.
"""
from appliance.errors import PackError
from appliance.packs.check import check_pack
from appliance.packs.pack import Pack, list_packs, load_pack

__all__ = ["Pack", "PackError", "check_pack", "list_packs", "load_pack"]
