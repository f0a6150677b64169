"""Yellow cases: the profile database decides when it has an entry; versions are checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from egraph_compiler.fusion import ProfileDb, plan_fusion
from egraph_compiler.fusion.profile_db import ProfileDbError
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import BLOCKS, random_inputs


def _swin():  # noqa: ANN202
    model = BLOCKS["swin_window"]()
    return static_graph(model, random_inputs(model, 0, dims={"batch": 2, "height": 8,
                                                            "width": 8}))


def test_profile_entries_override_the_cost_model(tmp_path: Path) -> None:
    graph = _swin()
    plan = plan_fusion(graph)
    yellow = [d for d in plan.decisions if d.verdict == "profile"]
    assert yellow, "the Swin window block has yellow (profile) fusion decisions"
    # say every yellow pair is slower fused: the planner must split the block
    entries = {}
    view_plan = plan_fusion(graph, fuse=False)
    ops = {b.ops[0] for b in view_plan.blocks}
    for first in ops:
        for second in ops:
            for size in range(0, 24):
                entries[f"{first}>{second}@s{size}"] = {"fused_us": 2.0, "separate_us": 1.0}
    db = ProfileDb(entries, "test")
    db.save(tmp_path / "db.json")
    slower = plan_fusion(graph, profile_db=ProfileDb.load(tmp_path / "db.json"))
    assert slower.kernel_count > plan.kernel_count


def test_profile_db_version_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"version": 0, "entries": {}}))
    with pytest.raises(ProfileDbError, match="version"):
        ProfileDb.load(path)
