"""Token ids and attention masks on the Hexagon device (`backends/hexagon/index_ops`), on a
small QDQ model written by hand with the text models' shapes of operators: the embedding
Gather of quantised rows at run-time ids, a bool mask (Cast, Unsqueeze, Equal, And), Where
between a quantised tensor and a real constant, a Tanh through its 256-entry table, and a
bool graph output. Checked in qemu against onnxruntime running the QDQ model in float
AND against an exact NumPy model of the integer arithmetic written here (the rows, the
mask logic and the picks are exact; the table is DQ → tanh → Q per byte)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import pipeline
from egraph_compiler.backends import hexagon
from egraph_compiler.backends.hexagon.lower import lower_qdq
from egraph_compiler.ir.errors import DnnrError, ModelError
from egraph_compiler.ir.graph import Graph

from .conftest import needs_toolchain

VOCAB, WIDTH, TOKENS = 10, 8, 6
TABLE_SCALE, Y_SCALE, Y_ZERO = 0.05, 0.02, 128  # the embedding's and the Tanh output's parameters
FILL = -1.0  # Where's real constant: a masked position's value
P_SCALE = 1 / 255  # the probabilities' scale


def _model(table: np.ndarray) -> onnx.ModelProto:
    init = [numpy_helper.from_array(table, "table_q"),
            numpy_helper.from_array(np.array(TABLE_SCALE, np.float32), "t_scale"),
            numpy_helper.from_array(np.array(0, np.int8), "t_zero"),
            numpy_helper.from_array(np.array(Y_SCALE, np.float32), "y_scale"),
            numpy_helper.from_array(np.array(Y_ZERO, np.uint8), "y_zero"),
            numpy_helper.from_array(np.array(FILL, np.float32), "fill"),
            numpy_helper.from_array(np.array([2], np.int64), "axis2"),
            numpy_helper.from_array(np.array(3, np.int64), "three"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
            numpy_helper.from_array(np.array(-np.inf, np.float32), "minus_inf"),
            numpy_helper.from_array(np.array(P_SCALE, np.float32), "p_scale"),
            numpy_helper.from_array(np.array(0, np.uint8), "p_zero")]
    nodes = [
        helper.make_node("DequantizeLinear", ["table_q", "t_scale", "t_zero"], ["table"]),
        helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
        helper.make_node("QuantizeLinear", ["rows", "t_scale", "t_zero"], ["rows_q"]),
        helper.make_node("DequantizeLinear", ["rows_q", "t_scale", "t_zero"], ["embedding"]),
        helper.make_node("Cast", ["mask"], ["keep"], to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["keep", "axis2"], ["keep3"]),
        helper.make_node("Where", ["keep3", "embedding", "fill"], ["masked"]),
        helper.make_node("QuantizeLinear", ["masked", "t_scale", "t_zero"], ["masked_q"]),
        helper.make_node("DequantizeLinear", ["masked_q", "t_scale", "t_zero"], ["masked_out"]),
        helper.make_node("Tanh", ["embedding"], ["tanh"]),
        helper.make_node("QuantizeLinear", ["tanh", "y_scale", "y_zero"], ["tanh_q"]),
        helper.make_node("DequantizeLinear", ["tanh_q", "y_scale", "y_zero"], ["tanh_out"]),
        # SDPA's guard of its Softmax: IsNaN of a dequantised value is known false, Where picks
        helper.make_node("IsNaN", ["embedding"], ["nan"]),
        helper.make_node("Where", ["nan", "fill", "embedding"], ["guarded"]),
        helper.make_node("QuantizeLinear", ["guarded", "t_scale", "t_zero"], ["guarded_q"]),
        helper.make_node("DequantizeLinear", ["guarded_q", "t_scale", "t_zero"], ["guarded_out"]),
        # a causal model's mask left in float (−inf): float Where, Add, Softmax, IsNaN of it, Where → Q
        helper.make_node("Where", ["keep3", "zero", "minus_inf"], ["bias"]),
        helper.make_node("Add", ["embedding", "bias"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("IsNaN", ["probs"], ["probs_nan"]),
        helper.make_node("Where", ["probs_nan", "zero", "probs"], ["probs_safe"]),
        helper.make_node("QuantizeLinear", ["probs_safe", "p_scale", "p_zero"], ["probs_q"]),
        helper.make_node("DequantizeLinear", ["probs_q", "p_scale", "p_zero"], ["probs_out"]),
        helper.make_node("Equal", ["ids", "three"], ["is_three"]),
        helper.make_node("And", ["is_three", "keep"], ["three_kept"]),
    ]
    graph = helper.make_graph(
        nodes, "text_inputs",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, TOKENS]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, [1, TOKENS])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, [1, TOKENS, WIDTH]),
         helper.make_tensor_value_info("masked_out", TensorProto.FLOAT, [1, TOKENS, WIDTH]),
         helper.make_tensor_value_info("tanh_out", TensorProto.FLOAT, [1, TOKENS, WIDTH]),
         helper.make_tensor_value_info("three_kept", TensorProto.BOOL, [1, TOKENS]),
         helper.make_tensor_value_info("guarded_out", TensorProto.FLOAT, [1, TOKENS, WIDTH]),
         helper.make_tensor_value_info("probs_out", TensorProto.FLOAT, [1, TOKENS, WIDTH])],
        init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _exact(table: np.ndarray, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """The integer model: ONNX-typed quantised outputs (int8 rows, uint8 Tanh) and the bool output."""
    rows = table[np.where(ids < 0, ids + VOCAB, ids)]  # int8 rows, exactly the table's
    fill_q = np.int8(np.clip(np.rint(np.float32(FILL) / np.float32(TABLE_SCALE)), -128, 127))
    masked = np.where(mask.astype(bool)[..., None], rows, fill_q).astype(np.int8)
    real = rows.astype(np.float32) * np.float32(TABLE_SCALE)
    tanh_q = np.clip(np.rint(np.tanh(real) / np.float32(Y_SCALE)) + Y_ZERO, 0, 255).astype(np.uint8)
    return {"embedding": rows, "masked_out": masked, "tanh_out": tanh_q,
            "three_kept": (ids == 3) & mask.astype(bool), "guarded_out": rows}


def _probabilities(table: np.ndarray, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The float part: softmax over each token's row; a masked token's row is all −inf,
    its softmax NaN (0 / 0), which the guard turns into 0."""
    real = table[np.where(ids < 0, ids + VOCAB, ids)].astype(np.float64) * TABLE_SCALE
    keep = mask.astype(bool)[..., None]
    weights = np.exp(real - real.max(axis=-1, keepdims=True))
    return np.where(keep, weights / weights.sum(axis=-1, keepdims=True), 0.0)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, Path, Graph]:
    tmp = tmp_path_factory.mktemp("text_inputs")
    table = np.random.default_rng(7).integers(-128, 128, (VOCAB, WIDTH)).astype(np.int8)
    path = tmp / "qdq.onnx"
    onnx.save(_model(table), path)
    graph = pipeline.compile_model(str(path), target="hexagon").graph
    hexagon.build(graph, tmp / "hx")
    return path, table, tmp / "hx", graph


@needs_toolchain
def test_ids_and_masks_run_exactly_on_the_device(built: tuple[Path, np.ndarray, Path, Graph]) -> None:
    path, table, out_dir, _ = built
    ids = np.array([[4, -1, 3, 0, 9, 3]], np.int64)  # −1 counts from the end, as ONNX's Gather does
    mask = np.array([[1, 1, 1, 0, 1, 0]], np.int64)
    runner = hexagon.load(out_dir)
    quantised = runner.run_quantized({"ids": ids, "mask": mask})
    for name, expected in _exact(table, ids, mask).items():
        np.testing.assert_array_equal(quantised[name], expected, err_msg=name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    reference = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"ids": ids, "mask": mask}),
                         strict=True))
    got = runner.run({"ids": ids, "mask": mask})
    np.testing.assert_array_equal(got["embedding"], reference["embedding"])
    np.testing.assert_array_equal(got["masked_out"], reference["masked_out"])
    np.testing.assert_array_equal(got["three_kept"], reference["three_kept"])
    # onnxruntime's tanh may round differently in the last float bit: at most one step apart
    assert np.abs(got["tanh_out"] - reference["tanh_out"]).max() <= Y_SCALE * 1.001
    np.testing.assert_array_equal(got["guarded_out"], reference["guarded_out"])
    # the float Softmax (the fallback's exp) within one step; masked tokens' rows exactly 0
    probabilities = _probabilities(table, ids, mask)
    assert np.abs(got["probs_out"] - reference["probs_out"]).max() <= P_SCALE * 1.001
    assert np.abs(got["probs_out"] - probabilities).max() <= P_SCALE * 0.501 + 1e-6
    assert np.all(quantised["probs_out"][mask == 0] == 0)


@needs_toolchain
def test_an_index_out_of_range_stops_the_program_naming_the_gather(built: tuple[Path, np.ndarray, Path, Graph]) -> None:
    _, _, out_dir, _ = built
    with pytest.raises(DnnrError, match=r"Gather .*: an index is out of range"):
        hexagon.load(out_dir).run({"ids": np.array([[0, 1, VOCAB, 2, 3, 4]]), "mask": np.ones((1, TOKENS), np.int64)})


def test_an_id_beyond_int32_is_refused_at_the_boundary() -> None:
    info = {"element_type": "int32", "shape": [1, TOKENS]}
    with pytest.raises(DnnrError, match=r"input ids holds 1099511627776, which does not fit the device's int32"):
        hexagon._to_device(np.array([[0, 1, 2**40, 2, 3, 4]]), info, "ids")


def test_an_infinite_scale_is_a_clear_error(built: tuple[Path, np.ndarray, Path, Graph]) -> None:
    graph = built[3]
    constants = dict(graph.constants)
    constants["y_scale"] = np.array(np.inf, np.float32)
    with pytest.raises(ModelError, match=r"quantisation scale y_scale is inf \(the quantiser calibrated a tensor"):
        lower_qdq(dataclasses.replace(graph, constants=constants))

