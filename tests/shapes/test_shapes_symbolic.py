"""Symbolic shapes: blocks with run-time Shape→Gather→Concat→Reshape chains, windows, convs.

Every symbolic shape is also evaluated at concrete bindings and compared with the
shape onnxruntime produces for that value.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from egraph_compiler.dsl import load_rules, rules_dir
from egraph_compiler.ir import (
    DimExpr,
    Graph,
    Node,
    TensorType,
    Value,
    check_graph,
    load_onnx,
    to_onnx,
)
from egraph_compiler.shapes import infer_shapes
from egraph_compiler.shapes.rdp import declared_classes
from tests.modelzoo import (
    BLOCKS,
    assert_close,
    mha_block,
    random_inputs,
    run_ort,
    swin_window_block,
)

SHIPPED_CLASSES = declared_classes(load_rules([rules_dir()]).ops)
B, S = DimExpr.symbol("batch"), DimExpr.symbol("seq")
BINDINGS = ({"batch": 1, "seq": 3, "height": 5, "width": 6, "H": 7, "W": 9},
            {"batch": 3, "seq": 8, "height": 8, "width": 8, "H": 16, "W": 10},
            {"batch": 2, "seq": 13, "height": 3, "width": 11, "H": 23, "W": 31})


def _concrete(dim, env: dict[str, int]) -> int:
    return dim if isinstance(dim, int) else dim.evaluate(env)


def _check_against_onnxruntime(model: onnx.ModelProto, graph: Graph) -> None:
    """Every typed value's symbolic shape, evaluated, equals the shape onnxruntime computes."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = [o for n in graph.nodes for o in n.outputs if o and o not in {v.name for v in probe.graph.output}]
    probe.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    for env in BINDINGS:
        results = run_ort(probe, random_inputs(model, seed=0, dims=env))
        for name, array in results.items():
            shape = graph.types[name].shape
            assert tuple(_concrete(d, env) for d in shape) == array.shape, (name, shape, env)
            if name in graph.shape_values:
                values = tuple(_concrete(v, env) for v in graph.shape_values[name])
                assert values == tuple(array.reshape(-1).tolist()), (name, graph.shape_values[name])


@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_block_shapes_are_symbolic_and_right(block: str) -> None:
    model = BLOCKS[block]()
    graph = infer_shapes(load_onnx(model))
    check_graph(graph)
    out = graph.types[graph.outputs[0].name].shape
    assert out[0] == DimExpr.symbol("batch")
    _check_against_onnxruntime(model, graph)
    # Exported after inference, the outputs carry the inferred symbolic dims as dim_params.
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    declared = [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output]
    assert [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in exported.graph.output] == declared
    inputs = random_inputs(model, seed=3, dims=BINDINGS[1])
    assert_close(run_ort(exported, inputs), run_ort(model, inputs))


def test_mha_reshape_target_is_batch_seq_heads_head_dim() -> None:
    graph = infer_shapes(load_onnx(mha_block(d_model=32, heads=4)))
    reshapes = [n for n in graph.nodes if n.op == "Reshape"]
    targets = {graph.shape_values[n.inputs[1]] for n in reshapes}
    assert targets == {(B, S, 4, 8), (B, S, 32)}
    split = next(n for n in reshapes if graph.shape_values[n.inputs[1]] == (B, S, 4, 8))
    assert graph.types[split.outputs[0]].shape == (B, S, 4, 8)
    scores = next(n for n in graph.nodes if n.op == "Softmax")
    assert graph.types[scores.outputs[0]].shape == (B, 4, S, S)


def test_swin_windows_multiply_the_batch_and_divide_back() -> None:
    graph = infer_shapes(load_onnx(swin_window_block(height=8, width=8, channels=8, window=4)))
    shapes = {graph.types[n.outputs[0]].shape for n in graph.nodes if n.op == "Reshape"}
    assert (B * 4, 16, 8) in shapes  # four 4x4 windows per image
    assert graph.types[graph.outputs[0].name].shape == (B, 64, 8)


def _conv_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"], pads=[1, 2, 1, 0], strides=[2, 3], dilations=[1, 2]),
        helper.make_node("MaxPool", ["c1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        helper.make_node("Conv", ["x", "w"], ["c2"], auto_pad="SAME_UPPER", strides=[2, 2]),
        helper.make_node("AveragePool", ["c2"], ["p2"], kernel_shape=[2, 2], auto_pad="VALID", strides=[2, 1]),
        helper.make_node("ConvTranspose", ["x", "wt"], ["t1"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 0]),
        helper.make_node("Resize", ["t1", "", "scales"], ["r1"], mode="nearest"),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "two"], ["h"], axis=0),
        helper.make_node("Range", ["zero", "h", "one"], ["rng"]),
        helper.make_node("Reshape", ["p2", "flat"], ["f"]),
    ]
    inits = [
        helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], [0.1] * 108),
        helper.make_tensor("wt", TensorProto.FLOAT, [3, 2, 3, 3], [0.1] * 54),
        helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 0.5, 2]),
        helper.make_tensor("two", TensorProto.INT64, [], [2]),
        helper.make_tensor("zero", TensorProto.INT64, [], [0]),
        helper.make_tensor("one", TensorProto.INT64, [], [1]),
        helper.make_tensor("flat", TensorProto.INT64, [3], [0, 4, -1]),
    ]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
                              [helper.make_empty_tensor_value_info(n) for n in ("p1", "p2", "r1", "rng", "f")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_conv_pool_resize_range_dims_are_formulas_of_the_input() -> None:
    model = _conv_model()
    graph = infer_shapes(load_onnx_typed(model), symbols={"H": (8, 64), "W": (8, 64)})
    h = DimExpr.symbol("H")
    assert graph.types["c1"].shape[2] == (h - 1) // 2 + 1
    assert graph.types["rng"].shape == (h,)
    assert graph.symbols["H"] == (8, 64)
    _check_against_onnxruntime(model, graph)


def load_onnx_typed(model: onnx.ModelProto) -> Graph:
    """The checker wants graph outputs typed: declare dtype and rank (dims unknown) from a run."""
    typed = onnx.ModelProto()
    typed.CopyFrom(model)
    results = run_ort(model, random_inputs(model, seed=0, dims=BINDINGS[0]))
    for output in typed.graph.output:
        array = results[output.name]
        output.CopyFrom(helper.make_tensor_value_info(
            output.name, helper.np_dtype_to_tensor_dtype(array.dtype), [None] * array.ndim))
    return load_onnx(typed)


def test_unnamed_dims_get_fresh_symbols() -> None:
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 5])
    graph = helper.make_graph([helper.make_node("Add", ["z", "z"], ["w"])], "g", [z],
                              [helper.make_tensor_value_info("w", TensorProto.FLOAT, [None, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    typed = infer_shapes(load_onnx(model))
    first = typed.types["w"].shape[0]
    assert isinstance(first, DimExpr) and first == typed.types["z"].shape[0]
    assert all(symbol in typed.symbols for symbol in first.symbols())


def test_backward_pass_fills_an_input_of_unknown_rank() -> None:
    """A Graph built by hand may leave an input's rank open; Relu and Transpose determine it."""
    nodes = (Node("Relu", ("x",), ("r",), name="relu"), Node("Transpose", ("r",), ("y",), (("perm", (2, 0, 1)),), "t"))
    graph = Graph("g", (Value("x", TensorType("float32", None)),), (Value("y", TensorType("float32", (4, 2, 3))),), nodes)
    typed = infer_shapes(graph, dynamism=SHIPPED_CLASSES)
    assert typed.types["x"].shape == (2, 3, 4)
    assert typed.types["r"].shape == (2, 3, 4)


def _typed_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[str],
                 inits: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "ops", inputs, [helper.make_empty_tensor_value_info(n) for n in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def test_transformer_ops_with_symbolic_dims() -> None:
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1),
        helper.make_node("Reshape", ["ln", "heads"], ["r4"]),                # (B, S, 4, -1)
        helper.make_node("Reshape", ["ln", "rows"], ["r2"]),                 # (-1, 32)
        helper.make_node("Split", ["x", "halves"], ["s1", "s2"], axis=2),
        helper.make_node("Slice", ["x", "st", "en", "ax"], ["tail"]),        # x[:, 1:]
        helper.make_node("Slice", ["x", "neg", "big", "ax"], ["last2"]),     # x[:, -2:]
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Slice", ["shp", "zero1", "two1"], ["bs"]),
        helper.make_node("Concat", ["bs", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["r2", "target"], ["back"]),             # (B, S, 32) again
        helper.make_node("ReduceSum", ["x", "ax"], ["rs"], keepdims=0),
        helper.make_node("ReduceMax", ["x"], ["rm"], axes=[-1], keepdims=1),
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("Sqrt", ["sq"], ["rt"]),
        helper.make_node("Erf", ["rt"], ["erf"]),
        helper.make_node("Cast", ["shp"], ["shpf"], to=TensorProto.FLOAT),
        helper.make_node("Gather", ["x", "idx2"], ["g"], axis=1),
        helper.make_node("Unsqueeze", ["rs", "ax"], ["us"]),
        helper.make_node("Squeeze", ["us", "ax"], ["sqz"]),
        helper.make_node("Concat", ["one1", "bs", "thirtytwo"], ["bs3"], axis=0),
        helper.make_node("Expand", ["gamma", "bs3"], ["ex"]),
        helper.make_node("Greater", ["x", "zero_f"], ["pos"]),
        helper.make_node("Where", ["pos", "x", "ex"], ["wh"]),
        helper.make_node("Flatten", ["x"], ["fl"], axis=2),
        helper.make_node("Gemm", ["fl", "wg"], ["gm"], transB=1),
        helper.make_node("MatMul", ["r4", "w4"], ["mm"]),
        helper.make_node("Transpose", ["r4"], ["tr"], perm=[0, 2, 1, 3]),
        helper.make_node("Softmax", ["tr"], ["sm"], axis=-1),
        helper.make_node("Gather", ["shp", "one0"], ["seq_scalar"], axis=0),
        helper.make_node("Range", ["zero0", "seq_scalar", "one0"], ["positions"]),
        helper.make_node("ConstantOfShape", ["bs"], ["zeros"]),
        helper.make_node("Einsum", ["r4", "w4"], ["es"], equation="bshd,de->bhse"),
    ]
    inits = [
        helper.make_tensor("gamma", TensorProto.FLOAT, [32], [1.0] * 32),
        helper.make_tensor("beta", TensorProto.FLOAT, [32], [0.0] * 32),
        helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        helper.make_tensor("zero_f", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("wg", TensorProto.FLOAT, [8, 32], [0.01] * 256),
        helper.make_tensor("w4", TensorProto.FLOAT, [8, 3], [0.1] * 24),
        helper.make_tensor("zero0", TensorProto.INT64, [], [0]),
        helper.make_tensor("one0", TensorProto.INT64, [], [1]),
        _i64("heads", [0, 0, 4, -1]), _i64("rows", [-1, 32]), _i64("halves", [8, 24]), _i64("st", [1]),
        _i64("en", [2**63 - 1]), _i64("ax", [1]), _i64("neg", [-2]), _i64("big", [2**63 - 1]),
        _i64("zero1", [0]), _i64("two1", [2]), _i64("minus1", [-1]), _i64("idx2", [0, -1]),
        _i64("one1", [1]), _i64("thirtytwo", [32]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 32])
    outputs = ["r4", "back", "s1", "s2", "tail", "last2", "rs", "rm", "erf", "shpf", "g", "sqz", "wh", "gm",
               "mm", "sm", "positions", "zeros", "es"]
    model = _typed_model(nodes, [x], outputs, inits)
    graph = infer_shapes(load_onnx_typed(model), symbols={"seq": (2, 512)})
    check_graph(graph)
    assert graph.types["r4"].shape == (B, S, 4, 8)
    assert graph.types["r2"].shape == (B * S, 32)
    assert graph.types["back"].shape == (B, S, 32)
    assert graph.types["tail"].shape == (B, S - 1, 32)
    assert graph.types["last2"].shape == (B, 2, 32), "seq >= 2 by its range, so x[:, -2:] has 2 rows"
    assert graph.types["positions"].shape == (S,)
    assert graph.shape_values["target"] == (B, S, -1)
    assert graph.types["wh"].shape == (1, B, S, 32)
    assert graph.types["es"].shape == (B, 4, S, 3)
    _check_against_onnxruntime(model, graph)


def test_quantized_ops_with_symbolic_dims() -> None:
    def scale(name: str) -> onnx.TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, [], [0.05])

    def zero(name: str, kind: int = TensorProto.UINT8) -> onnx.TensorProto:
        return helper.make_tensor(name, kind, [], [3])

    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xdq"]),
        helper.make_node("QLinearConv", ["xq", "sx", "zx", "wq", "sw", "zw", "sy", "zy"], ["yq"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("ConvInteger", ["xq", "wq", "zx", "zw"], ["ci"]),
        helper.make_node("Reshape", ["xq", "mat"], ["xm"]),
        helper.make_node("QLinearMatMul", ["xm", "sx", "zx", "bq", "sw", "zw", "sy", "zy"], ["mq"]),
        helper.make_node("MatMulInteger", ["xm", "bq", "zx", "zw"], ["mi"]),
    ]
    inits = [scale("sx"), zero("zx"), scale("sw"), zero("zw"), scale("sy"), zero("zy"),
             helper.make_tensor("wq", TensorProto.UINT8, [4, 3, 3, 3], [5] * 108),
             helper.make_tensor("bq", TensorProto.UINT8, [5, 6], [7] * 30), _i64("mat", [0, 3, -1, 5])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "H", 5])
    model = _typed_model(nodes, [x], ["xdq", "yq", "ci", "mq", "mi"], inits)
    graph = infer_shapes(load_onnx_typed(model))
    h = DimExpr.symbol("H")
    assert graph.types["yq"] == TensorType("uint8", (B, 4, (h - 1) // 2 + 1, 3))
    assert graph.types["mi"] == TensorType("int32", (B, 3, h, 6))
    _check_against_onnxruntime(model, graph)


def test_infer_node_types_one_node_with_values() -> None:
    from egraph_compiler.shapes import infer_node

    x = TensorType("float32", (B, S, 32))
    (out,), _ = infer_node("Reshape", {}, [x, TensorType("int64", (4,))], values={1: (0, 0, 4, -1)})
    assert out == TensorType("float32", (B, S, 4, 8))
    (shape,), value = infer_node("Shape", {"start": 1}, [x])
    assert shape == TensorType("int64", (2,)) and value == (S, 32)
