"""backends/opencl/ops_quant.py on PoCL: MatMulInteger, ConvInteger, QLinearMatMul,
QLinearConv, QuantizeLinear and DequantizeLinear compared exactly (integers: no tolerance) with a NumPy model of ONNX's integer
arithmetic written here, and with onnxruntime.

The NumPy model: operands minus zero points in int32, an int32 matmul / convolution (the
input padded with its zero point, i.e. zeros after the subtraction), for QLinear forms the
accumulator (plus the int32 bias) times ``a_scale * b_scale / y_scale`` (float32) in
float64, plus the output zero point, rounded half to even and saturated.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from egraph_compiler import ops
from egraph_compiler.backends.opencl import compile_graph, load, ops_quant
from tests.backends.opencl.helpers import static_graph

RNG = np.random.default_rng(23)


def _ints(dtype: type, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _requantise(acc: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    info = np.iinfo(zero.dtype)
    return np.clip(np.rint(acc * scale.astype(np.float64) + zero), info.min, info.max).astype(zero.dtype)


def _matmul(a: np.ndarray, b: np.ndarray, a_zero: np.ndarray, b_zero: np.ndarray) -> np.ndarray:
    a_rows = a_zero.reshape(-1, 1) if a_zero.size > 1 else a_zero  # per row of a
    return np.matmul(a.astype(np.int32) - a_rows.astype(np.int32), b.astype(np.int32) - b_zero.astype(np.int32))


def _conv(x: np.ndarray, w: np.ndarray, x_zero: np.ndarray, w_zero: np.ndarray, pads: list[int],
          strides: list[int], dilations: list[int], group: int) -> np.ndarray:
    """A direct 2-D convolution in int32 (explicit pads; zero point padding)."""
    xs = x.astype(np.int32) - x_zero.astype(np.int32)
    ws = w.astype(np.int32) - (w_zero.astype(np.int32).reshape(-1, 1, 1, 1) if w_zero.size > 1
                               else w_zero.astype(np.int32))
    xs = np.pad(xs, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    n, _, h, width = xs.shape
    oc, icg, kh, kw = ws.shape
    oh = (h - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (width - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, oc, oh, ow), np.int32)
    for o in range(oc):
        first = (o // (oc // group)) * icg
        for a in range(kh):
            for b in range(kw):
                patch = xs[:, first:first + icg, a * dilations[0]:a * dilations[0] + strides[0] * oh:strides[0],
                           b * dilations[1]:b * dilations[1] + strides[1] * ow:strides[1]]
                out[:, o] += np.einsum("nchw,c->nhw", patch, ws[o, :, a, b])
    return out


def _run(node: onnx.NodeProto, feeds: dict[str, np.ndarray], constants: dict[str, np.ndarray],
         tmp_path: Path, onnxruntime: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """dnnr's OpenCL result, and onnxruntime's (None where ``onnxruntime`` is off: a form
    onnxruntime's CPU kernels do not implement, which the NumPy model alone judges)."""
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    graph = helper.make_graph([node], "quant", inputs, [helper.make_empty_tensor_value_info(node.output[0])],
                              [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0] if onnxruntime else None
    static = static_graph(model, feeds)
    with ops.using(ops.shipped()):
        compile_graph(static, tmp_path)
    return load(tmp_path).run(feeds)[static.outputs[0].name], want


def test_every_generator_is_an_indexed_operator() -> None:
    declared = {name for name, kind in ops.shipped().anchors().items() if kind == "indexed"}
    assert set(ops_quant.GENERATORS) <= declared


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_row", [False, True], ids=["scalar_zero_points", "per_row_and_column"])
def test_matmul_integer(dtype: type, per_row: bool, tmp_path: Path) -> None:
    a, b = _ints(dtype, 2, 5, 7), _ints(dtype, 7, 4)  # a batch of a, one b (broadcast)
    a_zero, b_zero = (_ints(dtype, 5), _ints(dtype, 4)) if per_row else (_ints(dtype), _ints(dtype))
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    # onnxruntime's MatMulInteger takes scalar zero points only
    got, want = _run(node, {"a": a}, {"b": b, "az": a_zero, "bz": b_zero}, tmp_path, onnxruntime=not per_row)
    np.testing.assert_array_equal(got, _matmul(a, b, a_zero, b_zero))
    if want is not None:
        np.testing.assert_array_equal(got, want)


def test_qlinear_matmul_requantises_and_saturates(tmp_path: Path) -> None:
    a, b = _ints(np.uint8, 3, 6), _ints(np.uint8, 6, 5)
    scales = {"as": np.asarray(0.02, np.float32), "bs": np.asarray(0.03, np.float32),
              "ys": np.asarray(0.02, np.float32)}
    zeros = {"az": np.asarray(128, np.uint8), "bz": np.asarray(120, np.uint8), "yz": np.asarray(100, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    got, want = _run(node, {"a": a}, {"b": b} | scales | zeros, tmp_path)
    acc = _matmul(a, b, zeros["az"], zeros["bz"])
    model = _requantise(acc, scales["as"] * scales["bs"] / scales["ys"], zeros["yz"])
    assert np.any(model == 255) and np.any(model == 0) and np.any((model > 0) & (model < 255))
    np.testing.assert_array_equal(got, model)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("attrs", "pads"), [
    ({"pads": [1, 0, 2, 1], "strides": [2, 1], "group": 2}, [1, 0, 2, 1]),
    ({"auto_pad": "SAME_UPPER", "dilations": [2, 1]}, [2, 0, 2, 1]),  # totals 4 and 1
], ids=["pads_strides_groups", "same_upper_dilations"])
def test_conv_integer_and_qlinear_conv(attrs: dict, pads: list[int], tmp_path: Path) -> None:
    # onnxruntime's ConvInteger/QLinearConv refuse SAME_* padding with dilations
    checked = "dilations" not in attrs
    x, w = _ints(np.uint8, 1, 4, 5, 5), _ints(np.int8, 4, 4 // int(attrs.get("group", 1)), 3, 2)
    x_zero, w_zero = np.asarray(7, np.uint8), np.asarray(0, np.int8)
    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    acc = _conv(x, w, x_zero, w_zero, pads, strides, dilations, int(attrs.get("group", 1)))
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
    got, want = _run(node, {"x": x}, {"w": w, "xz": x_zero, "wz": w_zero}, tmp_path / "integer", checked)
    np.testing.assert_array_equal(got, acc)
    if want is not None:
        np.testing.assert_array_equal(got, want)
    bias = RNG.integers(-2000, 2000, 4).astype(np.int32)
    w_scale = RNG.uniform(0.001, 0.01, 4).astype(np.float32)  # per output channel
    scales = {"xs": np.asarray(0.05, np.float32), "ws": w_scale, "ys": np.asarray(0.2, np.float32)}
    y_zero = np.asarray(3, np.uint8)
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs)
    got, want = _run(node, {"x": x}, {"w": w, "xz": x_zero, "wz": w_zero, "yz": y_zero, "b": bias} | scales,
                     tmp_path / "qlinear", checked)
    model = _requantise(acc + bias.reshape(1, -1, 1, 1),
                        (scales["xs"] * w_scale / scales["ys"]).reshape(1, -1, 1, 1), y_zero)
    np.testing.assert_array_equal(got, model)
    if want is not None:
        np.testing.assert_array_equal(got, want)


def test_quantize_then_dequantize_per_channel(tmp_path: Path) -> None:
    """QuantizeLinear (int8, per channel along axis 1, ties rounded half to even) feeding
    DequantizeLinear, against the NumPy model and onnxruntime."""
    scale = np.asarray([0.5, 0.25, 2.0], np.float32)
    x = (RNG.integers(-600, 600, (2, 3, 4)).astype(np.float32) * 0.25)  # many exact .5 ties
    zero = np.asarray([3, -2, 0], np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)]
    graph = helper.make_graph(nodes, "qdq", inputs, [helper.make_empty_tensor_value_info("q"),
                                                     helper.make_empty_tensor_value_info("y")],
                              [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    static = static_graph(model, {"x": x})
    with ops.using(ops.shipped()):
        compile_graph(static, tmp_path)
    got = load(tmp_path).run({"x": x})
    per_channel = (1, 3, 1)
    quantised = np.clip(np.rint(x / scale.reshape(per_channel)) + zero.reshape(per_channel), -128, 127).astype(np.int8)
    assert np.any(quantised == 127) and np.any(quantised == -128)
    np.testing.assert_array_equal(got["q"], quantised)
    np.testing.assert_array_equal(got["q"], want[0])
    restored = (quantised.astype(np.float32) - zero.reshape(per_channel)) * scale.reshape(per_channel)
    np.testing.assert_array_equal(got["y"], restored)
    np.testing.assert_allclose(got["y"], want[1], rtol=0, atol=0)


def test_blocked_dequantize_linear_opset_21(tmp_path: Path) -> None:
    """block_size (opset 21): one scale and zero point per block of 3 along axis 1."""
    x = _ints(np.uint8, 2, 7, 3)
    scale = RNG.uniform(0.01, 1.0, (2, 3, 3)).astype(np.float32)  # ceil(7 / 3) blocks
    zero = _ints(np.uint8, 2, 3, 3)
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=3)
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, x.shape)]
    graph = helper.make_graph([node], "blocked", inputs, [helper.make_empty_tensor_value_info("y")],
                              [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")])
    model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    static = static_graph(model, {"x": x})
    with ops.using(ops.shipped()):
        compile_graph(static, tmp_path)
    got = load(tmp_path).run({"x": x})["y"]
    expand = np.repeat(np.arange(3), 3)[:7]  # the block of each position along axis 1
    model_y = (x.astype(np.float32) - zero[:, expand].astype(np.float32)) * scale[:, expand]
    np.testing.assert_array_equal(got, model_y)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
