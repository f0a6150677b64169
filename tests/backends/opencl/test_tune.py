"""``dnnr tune`` fills the versioned profile database; ``dnnr compile --profile-db`` obeys it."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from egraph_compiler.backends.opencl.planning import execution_plan
from egraph_compiler.cli import main
from egraph_compiler.fusion import ProfileDb
from egraph_compiler.fusion.profile_db import PROFILE_DB_VERSION
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import BLOCKS, random_inputs

BIND = ["--bind", "batch=1,seq=5"]


@pytest.fixture(scope="module")
def mha(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tune") / "mha.onnx"
    onnx.save(BLOCKS["mha"](), path)
    return path


def _launches(out: Path) -> int:
    return len(json.loads((out / "plan.json").read_text())["launches"])


def test_tune_times_every_yellow_case_and_compile_reads_the_db(
        mha: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db_path = tmp_path / "db.json"
    assert main(["tune", str(mha), "--db", str(db_path), *BIND, "--repeats", "1"]) == 0
    data = json.loads(db_path.read_text())
    assert data["version"] == PROFILE_DB_VERSION and data["device"]
    model = BLOCKS["mha"]()
    # the backend's planning (its cost model prices prologues too), as compile plans
    graph = static_graph(model, random_inputs(model, 0, dims={"batch": 1, "seq": 5}))
    plan = execution_plan(graph)[0].fusion
    yellow = {d.key for d in plan.decisions if d.verdict == "profile"}
    assert yellow and yellow <= set(data["entries"]), (yellow, data["entries"])
    for entry in data["entries"].values():
        assert entry["fused_us"] > 0 and entry["separate_us"] > 0
    assert "entries" in capsys.readouterr().out

    # DB entries flip the yellow decisions the cost model took (fuse -> keep apart)
    fused_by_cost = {d.key for d in plan.decisions if d.verdict == "profile"
                     and d.reason.endswith("cost model says fuse")}
    data["entries"] = {key: {"fused_us": 9.0, "separate_us": 1.0} for key in fused_by_cost}
    db_path.write_text(json.dumps(data))
    flipped = execution_plan(graph, profile_db=ProfileDb.load(db_path))[0].fusion
    verdicts = [d.reason for d in flipped.decisions if d.key in fused_by_cost]
    assert verdicts and all(r.endswith("profile db says not profitable") for r in verdicts)
    assert main(["compile", str(mha), "--target", "opencl", "-o", str(tmp_path / "tuned"),
                 "--profile-db", str(db_path), *BIND, "-q"]) == 0
    assert _launches(tmp_path / "tuned") == flipped.kernel_count > plan.kernel_count


def test_profile_db_errors_are_clear(mha: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["compile", str(mha), "--target", "opencl", "-o", str(tmp_path / "o"),
                 "--profile-db", str(bad), *BIND, "-q"]) == 1
    assert "cannot read profile database" in capsys.readouterr().err
    assert main(["compile", str(mha), "-o", str(tmp_path / "o"), "--profile-db", str(bad),
                 "-q"]) == 1
    assert "only applies to --target opencl" in capsys.readouterr().err
