"""`dnnr compile` on the nine light models shipped in the onnx wheel, shipped and random weights.

The optimised ONNX must match onnxruntime on the original model (rtol 1e-4, atol 1e-5).
The shipped weights are constant 0.02 fills, which make outputs near-uniform and hide
wrong arithmetic, so every model is also checked with seeded random weights.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from egraph_compiler import ir, pipeline
from tests.modelzoo import (
    LIGHT_MODELS,
    assert_close,
    light_model,
    random_inputs,
    randomize_weights,
    run_ort,
)

RULES = pipeline.load_rules()


@pytest.mark.parametrize("weights", ["shipped", "random"])
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_compiles_and_matches_onnxruntime(name: str, weights: str, tmp_path: Path) -> None:
    model = light_model(name)
    if weights == "random":
        model = randomize_weights(model, seed=7)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())

    graph = ir.load_onnx(path)
    optimised, report = pipeline.optimize(graph, RULES)
    exported = ir.to_onnx(optimised)
    onnx.checker.check_model(exported, full_check=True)

    inputs = random_inputs(model, seed=11)
    expected = run_ort(model, inputs)
    actual = run_ort(exported, inputs)
    assert set(actual) == set(expected)
    for key in expected:
        assert_close(actual[key], expected[key], rtol=1e-4, atol=1e-5)

    compute_before = sum(n for op, n in report.nodes_before.items())
    compute_after = sum(report.nodes_after.values())
    assert compute_after <= compute_before, report.nodes_after
    assert not report.limits_hit, report.limits_hit
