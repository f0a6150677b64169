"""Issue 10 item 6: Gather on Hexagon. A quantize_static model with symbolic dims
computes its Reshape targets at run time (Shape → Gather → Unsqueeze → Concat, as the
README's example encoder does). `--target hexagon` runs only the quant rules, so that
arithmetic reaches the backend; with the dims bound it is constant and must be
evaluated at compile time, not refused ("Gather: no integer kernel"). A Gather of
device data at constant indices moves elements and runs as a table gather."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from egraph_compiler.cli import main
from tests.modelzoo import run_ort

from .conftest import needs_toolchain

WIDTH, HEADS = 16, 4


def _split_heads_model() -> onnx.ModelProto:
    """x[batch, seq, 16] · W, reshaped to [batch, seq, 4, 4] through Shape/Gather, then transposed."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) * 0.3, "w")
    tail = numpy_helper.from_array(np.array([HEADS, WIDTH // HEADS], np.int64), "tail")
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="project"),
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="gather_batch", axis=0),
        helper.make_node("Gather", ["shape", "one"], ["seq"], name="gather_seq", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"], name="unsqueeze_batch"),
        helper.make_node("Unsqueeze", ["seq", "axes"], ["seq1"], name="unsqueeze_seq"),
        helper.make_node("Concat", ["batch1", "seq1", "tail"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["h", "target"], ["heads"], name="split_heads"),
        helper.make_node("Transpose", ["heads"], ["y"], name="heads_first", perm=[0, 2, 1, 3]),
    ]
    graph = helper.make_graph(
        nodes, "split_heads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", HEADS, "seq", WIDTH // HEADS])],
        [weight, tail, zero, one, axes],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _quantise(model: onnx.ModelProto, tmp_path, shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    onnx.save(model, tmp_path / "float.onnx")
    rng = np.random.default_rng(1)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = 4

        def get_next(self):  # type: ignore[no-untyped-def]
            self.left -= 1
            return {"x": rng.standard_normal(shape).astype(np.float32)} if self.left >= 0 else None

    quantised = tmp_path / "qdq.onnx"
    quantize_static(str(tmp_path / "float.onnx"), str(quantised), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return quantised


def _run_and_compare(quantised, tmp_path, binds: list[str], shape: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    artefact = tmp_path / "artefact"
    assert main(["compile", str(quantised), "--target", "hexagon", *binds, "-o", str(artefact), "-q"]) == 0
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(artefact), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out")]) == 0
    ours = np.load(tmp_path / "out" / "y.npy")
    expected = run_ort(onnx.load(quantised), {"x": x})["y"]
    model = onnx.load(quantised)
    y_dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    scale = float(next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == y_dq.input[1]))
    assert ours.shape == expected.shape
    assert np.abs(ours.astype(np.float64) - expected).max() <= 1.01 * scale  # within 1 LSB of onnxruntime


@needs_toolchain
def test_shape_arithmetic_of_a_dynamic_quantised_model_compiles_and_matches(tmp_path) -> None:
    quantised = _quantise(_split_heads_model(), tmp_path, (1, 5, WIDTH))
    ops = {n.op_type for n in onnx.load(quantised).graph.node}
    assert {"Shape", "Gather", "Concat"} <= ops  # the arithmetic the backend used to refuse
    _run_and_compare(quantised, tmp_path, ["--bind", "batch=1", "--bind", "seq=5"], (1, 5, WIDTH))


@needs_toolchain
def test_gather_of_quantised_data_at_constant_indices_matches(tmp_path) -> None:
    """Rows 4, 0 and -1 (the last) of (x · W)[1, 6, 4], as a 2-D index tensor."""
    indices = numpy_helper.from_array(np.array([[4, 0], [-1, 4]], np.int64), "rows")
    weight = numpy_helper.from_array(np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="project"),
         helper.make_node("Gather", ["h", "rows"], ["y"], name="pick_rows", axis=1)], "pick",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 4])], [indices, weight])
    quantised = _quantise(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path, (1, 6, 4))
    assert "Gather" in {n.op_type for n in onnx.load(quantised).graph.node}
    _run_and_compare(quantised, tmp_path, [], (1, 6, 4))
