"""Issue 17 item 6: If / Loop / Scan with a static trip structure are inlined at import
(ir/control_flow.py); anything else is refused naming the node, operator and opset.

Each inlined model is compared with onnxruntime running the original (with its
control flow) on the same inputs.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler.ir import ModelError, load_onnx, to_onnx

F = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto], opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "control_flow", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _const(name: str, value: object, dtype: int) -> onnx.NodeProto:
    array = np.asarray(value)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, dtype, list(array.shape), array.reshape(-1).tolist()))


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _same_as_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    written = to_onnx(load_onnx(model))
    assert not any(n.op_type in ("If", "Loop", "Scan") for n in written.graph.node)
    for got, want in zip(_run(written, feeds), _run(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    return written


def _relu_branch(name: str, op: str) -> onnx.GraphProto:
    return helper.make_graph([helper.make_node(op, ["x"], [f"{name}_out"])], name, [],
                             [helper.make_tensor_value_info(f"{name}_out", F, [2, 3])])


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_constant_condition_inlines_the_taken_branch(cond: bool) -> None:
    node = helper.make_node("If", ["c"], ["y"], name="pick", then_branch=_relu_branch("t", "Relu"),
                            else_branch=_relu_branch("e", "Neg"))
    model = _model([_const("c", cond, TensorProto.BOOL), node],
                   [helper.make_tensor_value_info("x", F, [2, 3])],
                   [helper.make_tensor_value_info("y", F, [2, 3])])
    written = _same_as_onnxruntime(model, {"x": np.random.default_rng(0).standard_normal((2, 3),
                                                                                        np.float32)})
    assert [n.op_type for n in written.graph.node] == ["Relu" if cond else "Neg"]


def test_if_whose_condition_folds_from_shapes_inlines() -> None:
    """The condition is Shape → Gather → Equal on a static input: it folds at import."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), _const("zero", 0, TensorProto.INT64),
             helper.make_node("Gather", ["s", "zero"], ["rows"]), _const("two", 2, TensorProto.INT64),
             helper.make_node("Equal", ["rows", "two"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=_relu_branch("t", "Relu"),
                              else_branch=_relu_branch("e", "Neg"))]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3])],
                   [helper.make_tensor_value_info("y", F, [2, 3])])
    _same_as_onnxruntime(model, {"x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)})


def _accumulate_body() -> onnx.GraphProto:
    """Loop body: acc += x * (i + 1); scan output: acc after the step."""
    nodes = [helper.make_node("Cast", ["i"], ["i_f"], to=F), _const("one", 1.0, F),
             helper.make_node("Add", ["i_f", "one"], ["k"]),
             helper.make_node("Mul", ["x", "k"], ["step"]),
             helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Identity", ["acc_out"], ["scan_out"])]
    return helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [3]),
         helper.make_tensor_value_info("scan_out", F, [3])])


@pytest.mark.parametrize("opset", [11, 17])
def test_loop_with_a_constant_trip_count_is_unrolled(opset: int) -> None:
    nodes = [_const("trips", 4, TensorProto.INT64), _const("go", True, TensorProto.BOOL),
             _const("zeros", np.zeros(3), F),
             helper.make_node("Loop", ["trips", "go", "zeros"], ["acc", "history"], name="accumulate",
                              body=_accumulate_body())]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3])],
                   [helper.make_tensor_value_info("acc", F, [3]),
                    helper.make_tensor_value_info("history", F, [4, 3])], opset)
    written = _same_as_onnxruntime(model, {"x": np.asarray([1, -2, 0.5], np.float32)})
    assert sum(n.op_type == "Mul" for n in written.graph.node) == 4


def test_loop_whose_condition_depends_on_data_is_refused() -> None:
    body = _accumulate_body()
    cond_node = next(n for n in body.node if n.output[0] == "cond_out")
    body.node.remove(cond_node)
    body.node.extend([helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
                      _const("limit", 10.0, F),
                      helper.make_node("Less", ["total", "limit"], ["cond_out"])])
    nodes = [_const("trips", 4, TensorProto.INT64), _const("go", True, TensorProto.BOOL),
             _const("zeros", np.zeros(3), F),
             helper.make_node("Loop", ["trips", "go", "zeros"], ["acc", "history"], name="while_small",
                              body=body)]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3])],
                   [helper.make_tensor_value_info("acc", F, [3])])
    with pytest.raises(ModelError, match=r"node 'while_small' \(Loop, opset 17\): Loop's condition "
                                         r".*computed from data.*\n  hint:"):
        load_onnx(model)


def test_loop_with_a_run_time_trip_count_is_refused() -> None:
    nodes = [_const("go", True, TensorProto.BOOL), _const("zeros", np.zeros(3), F),
             helper.make_node("Loop", ["n", "go", "zeros"], ["acc", "history"], name="count",
                              body=_accumulate_body())]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3]),
                           helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                   [helper.make_tensor_value_info("acc", F, [3])])
    with pytest.raises(ModelError, match=r"node 'count' \(Loop, opset 17\): Loop's trip count 'n' "
                                         r"is computed at run time.*\n  hint:"):
        load_onnx(model)


def _scan_model(directions: list[int], axis: int) -> onnx.ModelProto:
    """Running sum over rows (state) and the per-step sum as a scan output."""
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "row"], ["sum_out"]),
         helper.make_node("Mul", ["sum_out", "row"], ["scan_out"])], "body",
        [helper.make_tensor_value_info("sum_in", F, [2]), helper.make_tensor_value_info("row", F, [2])],
        [helper.make_tensor_value_info("sum_out", F, [2]), helper.make_tensor_value_info("scan_out", F, [2])])
    node = helper.make_node("Scan", ["init", "seq"], ["total", "steps"], name="running", body=body,
                            num_scan_inputs=1, scan_input_directions=directions,
                            scan_input_axes=[axis], scan_output_directions=directions,
                            scan_output_axes=[axis])
    seq_shape = [5, 2] if axis == 0 else [2, 5]
    return _model([node], [helper.make_tensor_value_info("init", F, [2]),
                           helper.make_tensor_value_info("seq", F, seq_shape)],
                  [helper.make_tensor_value_info("total", F, [2]),
                   helper.make_tensor_value_info("steps", F, seq_shape)])


@pytest.mark.parametrize(("direction", "axis"), [(0, 0), (1, 0), (0, 1), (1, -1)])
def test_scan_with_a_static_length_is_unrolled(direction: int, axis: int) -> None:
    model = _scan_model([direction], axis)
    seq = np.arange(10, dtype=np.float32).reshape([5, 2] if axis == 0 else [2, 5])
    _same_as_onnxruntime(model, {"init": np.asarray([1, -1], np.float32), "seq": seq})


def test_scan_over_a_symbolic_length_is_refused() -> None:
    model = _scan_model([0], 0)
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "steps"
    with pytest.raises(ModelError, match=r"node 'running' \(Scan, opset 17\): the scanned axis 0 "
                                         r"of Scan input 'seq' has no static length.*\n  hint:"):
        load_onnx(model)


def test_nested_if_inside_a_loop_sees_the_iteration() -> None:
    """An If in the body whose condition folds from the (constant) iteration number."""
    inner = helper.make_node("If", ["is_first"], ["delta"],
                             then_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["a"])], "t", [],
                                                           [helper.make_tensor_value_info("a", F, [3])]),
                             else_branch=helper.make_graph([helper.make_node("Abs", ["x"], ["b"])], "e", [],
                                                           [helper.make_tensor_value_info("b", F, [3])]))
    body = helper.make_graph(
        [_const("zero", 0, TensorProto.INT64), helper.make_node("Equal", ["i", "zero"], ["is_first"]),
         inner, helper.make_node("Add", ["acc_in", "delta"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [3])])
    nodes = [_const("trips", 3, TensorProto.INT64), _const("zeros", np.zeros(3), F),
             helper.make_node("Loop", ["trips", "", "zeros"], ["acc"], body=body)]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [3])],
                   [helper.make_tensor_value_info("acc", F, [3])])
    _same_as_onnxruntime(model, {"x": np.asarray([1, -2, 3], np.float32)})
