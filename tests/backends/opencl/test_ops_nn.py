"""backends/opencl/ops_nn.py and the OpenCL decompositions of issue 17 item 6 on PoCL:
ConvTranspose, TopK (values and indices), DepthToSpace, SpaceToDepth, ConstantOfShape
(folded), LpPool, AveragePool's dilations, integer Pow, LayerNormalization's Mean/InvStdDev
outputs, MaxPool of int8 / float16 and its Indices output, MeanVarianceNormalization,
DynamicQuantizeLinear, float16 tensors (halves computed in float), a scalar constant output
(Size) and a model whose only output is a constant.

onnx's node tests feed TopK's k and ConstantOfShape's shape at run time (OpenCL then
refuses them: the output shape is not static); real models hold them as constants, which
these cases do. Each case is compared with onnxruntime, every output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from egraph_compiler import ops
from egraph_compiler.backends.opencl import compile_graph, load, ops_nn
from egraph_compiler.ir import conv_transpose
from egraph_compiler.ir.graph import Node
from tests.backends.opencl.helpers import static_graph

RNG = np.random.default_rng(17)


def _image(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], constants: dict[str, np.ndarray],
           outputs: list[str], opset: int) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    graph = helper.make_graph(nodes, "nn", inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model)  # the outputs' types
    del model.graph.output[:]
    model.graph.output.extend(o for o in inferred.graph.output)
    return model


def _run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
              tmp_path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    graph = static_graph(model, feeds)
    with ops.using(ops.shipped()):
        compile_graph(graph, tmp_path)
    results = load(tmp_path).run(feeds)
    return [results[o.name] for o in graph.outputs], want


def _conv_transpose(name: str, x: np.ndarray, w: np.ndarray, bias: bool, **attrs: object) -> tuple:
    constants = {"w": w} | ({"b": _image(w.shape[1] * int(attrs.get("group", 1)))} if bias else {})
    node = helper.make_node("ConvTranspose", ["x", "w", *(["b"] if bias else [])], ["y"], **attrs)
    return (name, 17, [node], {"x": x}, constants, ["y"])


def _top_k(name: str, x: np.ndarray, k: int, **attrs: object) -> tuple:
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], **attrs)
    return (name, 17, [node], {"x": x}, {"k": np.asarray([k], np.int64)}, ["values", "indices"])


_TIES = RNG.integers(0, 4, (3, 9)).astype(np.float32)  # many equal values: the order of ties

CASES = [
    _conv_transpose("conv_transpose_stride2_pads_bias", _image(1, 3, 4, 5), _image(3, 2, 3, 3), True,
                    strides=[2, 2], pads=[1, 0, 1, 1]),
    _conv_transpose("conv_transpose_groups_dilations_output_padding", _image(2, 4, 3, 3),
                    _image(4, 3, 2, 3), True, group=2, dilations=[2, 1], strides=[3, 2],
                    output_padding=[1, 1]),
    _conv_transpose("conv_transpose_same_upper_1d", _image(1, 2, 7), _image(2, 3, 4), False,
                    strides=[2], auto_pad="SAME_UPPER"),
    _conv_transpose("conv_transpose_output_shape", _image(1, 1, 3, 3), _image(1, 2, 3, 3), False,
                    strides=[3, 2], output_shape=[10, 8]),
    # kernel 1 under stride 2: a phase no tap reaches (bias only): the gather kernel
    _conv_transpose("conv_transpose_phase_without_taps", _image(1, 3, 4, 4), _image(3, 2, 1, 1), True,
                    strides=[2, 2], output_padding=[1, 1]),
    # a weight given at run time: the gather kernel (the phase Convs need a constant weight)
    ("conv_transpose_runtime_weight", 17,
     [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 1], pads=[1, 0, 0, 1])],
     {"x": _image(1, 3, 4, 5), "w": _image(3, 2, 3, 2)}, {}, ["y"]),
    _top_k("top_k_largest_last_axis_ties", _TIES, 4),
    _top_k("top_k_smallest_axis0_ties", _TIES, 2, axis=0, largest=0),
    _top_k("top_k_int64_whole_line", RNG.integers(-5, 5, (2, 3, 6)).astype(np.int64), 6, axis=-1),
    ("top_k_values_only", 17, [helper.make_node("TopK", ["x", "k"], ["values", "unused"], axis=1)],
     {"x": _image(2, 5, 3)}, {"k": np.asarray([2], np.int64)}, ["values"]),
    ("depth_to_space_dcr", 17, [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2)],
     {"x": _image(2, 8, 3, 2)}, {}, ["y"]),
    ("depth_to_space_crd", 17, [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD")],
     {"x": _image(1, 12, 2, 3)}, {}, ["y"]),
    ("space_to_depth", 17, [helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=3)],
     {"x": _image(2, 2, 6, 3)}, {}, ["y"]),
    # a constant shape: folded to the fill at compile time (no kernel needed)
    ("constant_of_shape_int32_then_add", 17,
     [helper.make_node("ConstantOfShape", ["shape"], ["fill"],
                       value=numpy_helper.from_array(np.asarray([7], np.int32))),
      helper.make_node("Add", ["fill", "x"], ["y"])],
     {"x": RNG.integers(-3, 3, (1, 300, 300)).astype(np.int32)},
     {"shape": np.asarray([1, 300, 300], np.int64)}, ["y"]),
    ("layer_norm_mean_inv_std_dev", 17,
     [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y", "mean", "inv"], axis=1,
                       epsilon=1e-3)],
     {"x": _image(2, 3, 4)}, {"scale": _image(3, 4), "bias": _image(3, 4)}, ["y", "mean", "inv"]),
    ("layer_norm_inv_std_dev_only", 17,
     [helper.make_node("LayerNormalization", ["x", "scale"], ["y", "", "inv"])],
     {"x": _image(3, 5)}, {"scale": _image(5)}, ["y", "inv"]),
    ("mean_variance_normalization", 13,
     [helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2])],
     {"x": _image(3, 2, 4)}, {}, ["y"]),
    ("max_pool_int8_with_indices_column_major", 12,
     [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 1],
                       pads=[1, 0, 1, 1], storage_order=1)],
     {"x": RNG.integers(-128, 128, (2, 3, 5, 4)).astype(np.int8)}, {}, ["y", "i"]),
    ("max_pool_indices_same_upper_1d", 12,
     [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[4], strides=[2], auto_pad="SAME_UPPER")],
     {"x": _image(1, 2, 9)}, {}, ["y", "i"]),
    ("max_pool_indices_dilations_3d", 12,
     [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2, 2], dilations=[1, 2, 1],
                       pads=[0, 1, 0, 1, 1, 0])],
     {"x": _image(1, 2, 3, 4, 3)}, {}, ["y", "i"]),
    ("lp_pool_p3_pads_strides", 17,
     [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 3], p=3, pads=[1, 1, 0, 1], strides=[2, 1])],
     {"x": _image(1, 2, 5, 4)}, {}, ["y"]),
    ("pow_int64_int64_exact", 17, [helper.make_node("Pow", ["x", "e"], ["y"])],
     {"x": np.asarray([[3, -7, 2], [11, 5, -2]], np.int64)},
     {"e": np.asarray([20, 15, 40], np.int64)}, ["y"]),  # 3^20, (-7)^15, 2^40: past float32
    ("pow_int32_float_exponent_truncates", 17, [helper.make_node("Pow", ["x", "e"], ["y"])],
     {"x": np.asarray([2, 3, 10, 7], np.int32)}, {"e": np.asarray([2.5, 0.5, 3.0, -1.0], np.float32)}, ["y"]),
    ("average_pool_dilations_count_include_pad", 19,
     [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], dilations=[2, 2], pads=[1, 2, 2, 1],
                       count_include_pad=1, ceil_mode=1, strides=[2, 1])],
     {"x": _image(1, 2, 7, 6)}, {}, ["y"]),
    ("float16_elementwise_halves", 17,
     [helper.make_node("Max", ["x", "y"], ["m"]), helper.make_node("Mod", ["m", "y"], ["c"], fmod=1),
      helper.make_node("IsNaN", ["z"], ["nan"])],
     {"x": np.asarray([[1.5, 0.3, -3.0, 65504.0], [-0.1, 2.0, 5.5, -np.inf]], np.float16),
      "y": np.asarray([0.25, -1.0, 7.0, 1e-3], np.float16),
      "z": np.asarray([np.nan, 1.0, -np.inf, 0.0], np.float16)}, {}, ["c", "nan"]),
    ("max_pool_float16_with_indices", 12,
     [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2])],
     {"x": _image(1, 2, 4, 6).astype(np.float16)}, {}, ["y", "i"]),
    ("float16_reduce_max", 17, [helper.make_node("ReduceMax", ["x"], ["y"], axes=[1], keepdims=1)],
     {"x": _image(3, 5, 2).astype(np.float16)}, {}, ["y"]),
    ("dynamic_quantize_linear", 17,
     [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"])],
     {"x": _image(3, 4)}, {}, ["y", "scale", "zero"]),
    ("size_scalar_output", 17, [helper.make_node("Size", ["x"], ["n"]), helper.make_node("Neg", ["x"], ["y"])],
     {"x": _image(3, 4)}, {}, ["n", "y"]),
    ("constant_only_output", 17,
     [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(_image(2, 3)))],
     {}, {}, ["c"]),
]


def test_every_generator_is_an_indexed_operator_with_a_case() -> None:
    declared = {name for name, kind in ops.shipped().anchors().items() if kind == "indexed"}
    assert set(ops_nn.GENERATORS) <= declared
    covered = {n.op_type for c in CASES for n in c[2]} | {"TopKIndices", "MaxPoolIndices"}  # split off
    assert set(ops_nn.GENERATORS) <= covered


@pytest.mark.parametrize(("name", "opset", "nodes", "feeds", "constants", "outputs"), CASES,
                         ids=[c[0] for c in CASES])
def test_kernel_matches_onnxruntime(name: str, opset: int, nodes: list[onnx.NodeProto],
                                    feeds: dict[str, np.ndarray], constants: dict[str, np.ndarray],
                                    outputs: list[str], tmp_path: Path) -> None:
    got, want = _run_both(_model(nodes, feeds, constants, outputs, opset), feeds, tmp_path)
    assert len(got) == len(want), name
    for mine, theirs in zip(got, want, strict=True):
        assert mine.shape == theirs.shape and mine.dtype == theirs.dtype, (name, mine.shape, theirs.shape)
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5, err_msg=name)


def test_conv_transpose_pads_follow_onnx_reference() -> None:
    """The leading pad of SAME_UPPER / SAME_LOWER / output_shape (onnx's reference formula)."""
    def node(**attrs: object) -> Node:
        return Node("ConvTranspose", ("x", "w"), ("y",), tuple(sorted(attrs.items())))
    # total padding 2*(5-1) + 4 - 10 = 2 when the output is 10: split evenly either way
    assert conv_transpose.pad_begin(node(strides=(2,), auto_pad="SAME_UPPER"), [5], [10], [4]) == [1]
    # total 3 (kernel 5): SAME_UPPER puts the odd one at the end, SAME_LOWER at the start
    assert conv_transpose.pad_begin(node(strides=(2,), auto_pad="SAME_UPPER"), [5], [10], [5]) == [1]
    assert conv_transpose.pad_begin(node(strides=(2,), auto_pad="SAME_LOWER"), [5], [10], [5]) == [2]
    assert conv_transpose.pad_begin(node(pads=(2, 0)), [5], [10], [4]) == [2]


def test_conv_transpose_runs_as_one_conv_per_stride_phase(tmp_path: Path) -> None:
    """A constant-weight ConvTranspose is lowered to stride_h x stride_w Convs whose
    outputs interleave (`ir.conv_transpose`); the result matches onnxruntime."""
    import json

    name, opset, nodes, feeds, constants, outputs = _conv_transpose(
        "phases", _image(1, 8, 6, 6), _image(8, 4, 4, 4), True, strides=[2, 2], pads=[1, 1, 1, 1])
    model = _model(nodes, feeds, constants, outputs, opset)
    graph = static_graph(model, feeds)
    phases = conv_transpose.plan(graph, graph.nodes[0])
    assert phases is not None and [len(p.taps) for p in phases.phases[0]] == [2, 2]
    got, want = _run_both(model, feeds, tmp_path)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    launched = [op for launch in json.loads((tmp_path / "plan.json").read_text())["launches"]
                for op in launch["ops"]]
    assert launched.count("Conv") == 4 and "ConvTranspose" not in launched
