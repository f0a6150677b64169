"""The compile report's ``select`` object, for both backends, as `dnnr compile` writes it."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from egraph_compiler import pipeline
from egraph_compiler.report import render_report
from tests.backends.hexagon.conftest import needs_toolchain
from tests.backends.hexagon.test_models import _quantise, _static
from tests.backends.opencl.helpers import with_static_inputs
from tests.modelzoo import channel_attention_block, conv_pointwise_block, random_inputs

KEYS = {"solver", "nodes", "edges", "options", "objective", "lower_bound", "gap", "local_objective",
        "chain_dp_objective", "seconds", "decisions"}


def _check(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    chosen = report["select"]
    assert KEYS <= set(chosen), chosen
    assert chosen["gap"] == 0 and chosen["objective"] <= chosen["local_objective"]
    assert "select: solver reductions" in render_report(report)
    return chosen


def test_opencl_report_and_plan_record_the_selection(tmp_path: Path) -> None:
    model = channel_attention_block(channels=5, out_channels=48)
    model = with_static_inputs(model, random_inputs(model, 0, dims={"batch": 1, "height": 7, "width": 9}))
    onnx.save(model, tmp_path / "m.onnx")
    result = pipeline.compile_model(tmp_path / "m.onnx")
    pipeline.write_artefact(result, "opencl", tmp_path / "out")
    chosen = _check(tmp_path / "out")
    assert chosen["objective"] < chosen["local_objective"]  # channels innermost for the reduction
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["select"]["decisions"] == chosen["decisions"]
    assert any("[0, 2, 3, 1]" in d["option"] for d in chosen["decisions"].values())


@needs_toolchain
def test_hexagon_report_records_the_selection(tmp_path: Path) -> None:
    model = _static(conv_pointwise_block(channels=11, out_channels=13, seed=4), {"batch": 1, "height": 9, "width": 7})
    path = _quantise(model, tmp_path, seed=2)
    result = pipeline.compile_model(path, target="hexagon")
    pipeline.write_artefact(result, "hexagon", tmp_path / "out")
    chosen = _check(tmp_path / "out")
    # the 3×3 conv writes the 1×1 conv's packed panels: cheaper than the local choice
    assert chosen["objective"] < chosen["local_objective"]
    assert any(">" in d["option"] for d in chosen["decisions"].values())
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["select"]["decisions"] == chosen["decisions"]
    text = (tmp_path / "out" / "report.txt").read_text()
    assert f"# select: reductions, {chosen['nodes']} nodes" in text
