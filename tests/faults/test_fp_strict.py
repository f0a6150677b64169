"""``--fp strict`` keeps onnxruntime's outputs bit for bit on inputs holding ±inf,
NaN, −0 and 1e38 (issue 16, item 3 and its acceptance); ``pow-half`` no longer adds
a NaN at −inf under the default policy."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import ir, pipeline
from tests.modelzoo import BLOCKS, LIGHT_MODELS, light_model, random_inputs, run_ort

DIMS = {"batch": 2, "seq": 5, "height": 8, "width": 8}
SPECIALS = np.array([np.inf, -np.inf, np.nan, -0.0, 1e38, -1e38, 0.0], np.float32)


def _with_specials(feeds: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, array in feeds.items():
        array = array.copy()
        if np.issubdtype(array.dtype, np.floating) and array.size:
            flat = array.reshape(-1)
            where = rng.choice(flat.size, size=max(len(SPECIALS), flat.size // 8), replace=flat.size < len(SPECIALS))
            flat[where] = rng.choice(SPECIALS, size=where.size)
            flat[where[: len(SPECIALS)]] = SPECIALS[: min(len(SPECIALS), where.size)]
        out[name] = array
    return out


def assert_bit_exact(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    if not np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan), f"{what}: NaN positions differ"
    bits = actual.view(f"u{actual.itemsize}")[~nan], expected.view(f"u{expected.itemsize}")[~nan]
    bad = np.flatnonzero(bits[0] != bits[1])
    assert bad.size == 0, f"{what}: {bad.size} values differ, e.g. {actual[~nan][bad[:3]]} vs {expected[~nan][bad[:3]]}"


def _strict_matches(model: onnx.ModelProto, seed: int) -> None:
    result = pipeline.compile_model(model.SerializeToString(), fp="strict")
    assert result.report.fp["mode"] == "strict" and result.report.fp["left_out"]
    assert all("exact" in rule.flags for rule in result.rules.rules)
    assert not result.report.fp["exact_but_changes"]  # no shipped [exact] rule changes special values
    exported = ir.to_onnx(result.graph)
    feeds = _with_specials(random_inputs(model, seed=seed, dims=DIMS), seed)
    expected, actual = run_ort(model, feeds), run_ort(exported, feeds)
    assert set(actual) == set(expected)
    for name in expected:
        assert_bit_exact(actual[name], expected[name], name)


@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_strict_blocks_keep_special_values_bit_for_bit(block: str) -> None:
    _strict_matches(BLOCKS[block](), seed=3)


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_strict_light_models_keep_special_values_bit_for_bit(name: str) -> None:
    _strict_matches(light_model(name), seed=5)


def test_pow_half_keeps_nan_free_results_under_reals() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    graph = helper.make_graph([helper.make_node("Pow", ["x", "half"], ["y"], name="pow")], "g", [x], [y], [half])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    result = pipeline.compile_model(model.SerializeToString())  # the default, reals
    assert result.report.fp["mode"] == "reals"
    feeds = {"x": np.array([-np.inf, -0.0, 4.0, np.inf], np.float32)}
    assert_bit_exact(run_ort(ir.to_onnx(result.graph), feeds)["y"], run_ort(model, feeds)["y"], "y")
