"""rules/exports.dnnr: the exporters' spelled-out GELU folds back into one operator.

Each case is the node sequence torch 2.13's TorchScript exporter writes (constants as
float32 initializers, in the exporter's operand order), with a symbolic batch; the
compiled graph must hold the folded operator, and the written model (opset 17: spelled
out again; opset 20: Gelu) must match onnxruntime on the original.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import ir, pipeline

F32 = TensorProto.FLOAT


def _scalar(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def _gelu_erf() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    return nodes, [_scalar("sqrt2", math.sqrt(2)), _scalar("one", 1), _scalar("half", 0.5)]


def _gelu_tanh() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Pow", ["x", "three"], ["p"]),
             helper.make_node("Mul", ["p", "c"], ["pc"]), helper.make_node("Add", ["x", "pc"], ["s"]),
             helper.make_node("Mul", ["s", "k"], ["sk"]), helper.make_node("Tanh", ["sk"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["a"]), helper.make_node("Mul", ["h", "a"], ["y"])]
    return nodes, [_scalar("half", 0.5), _scalar("three", 3), _scalar("c", 0.044715),
                   _scalar("k", math.sqrt(2 / math.pi)), _scalar("one", 1)]


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize(("spelled", "folded", "rule"), [
    (_gelu_erf, "Gelu", "gelu-erf-fold"), (_gelu_tanh, "GeluTanh", "gelu-tanh-fold")])
def test_gelu_spelled_out_folds(spelled, folded: str, rule: str, opset: int) -> None:
    nodes, inits = spelled()
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", F32, ["batch", 16])],
                              [helper.make_tensor_value_info("y", F32, ["batch", 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    result = pipeline.compile_model(model.SerializeToString())
    assert [n.op for n in result.graph.nodes] == [folded]
    assert result.report.rules_fired.get(rule) == 1
    written = ir.to_onnx(result.graph)
    assert written.opset_import[0].version == opset
    assert ("Gelu" in [n.op_type for n in written.graph.node]) == (opset >= 20)
    x = {"x": np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32) * 3}
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]  # noqa: E731
    np.testing.assert_allclose(run(written), run(model), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- LayerNorm folds
HIDDEN = 16


def _layer_norm(square: str, eps: float) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """LayerNorm over the last axis spelled out: the exporter's Pow 2 or a hand-written
    x·x for the square, then ε, Sqrt, Div, Mul γ, Add β (γ, β initializers)."""
    rng = np.random.default_rng(3)
    squared = ([helper.make_node("Pow", ["d", "two"], ["sq"])] if square == "pow"
               else [helper.make_node("Mul", ["d", "d"], ["sq"])])
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1]),
             helper.make_node("Sub", ["x", "mu"], ["d"]), *squared,
             helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]), helper.make_node("Mul", ["n", "gamma"], ["s"]),
             helper.make_node("Add", ["s", "beta"], ["y"])]
    return nodes, [_scalar("two", 2), _scalar("eps", eps),
                   numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), "gamma"),
                   numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), "beta")]


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize(("square", "eps", "rule"), [
    ("pow", 1e-5, "layer-norm-fold-eps-1e-5"), ("mul", 1e-12, "layer-norm-fold-eps-1e-12")])
def test_layer_norm_spelled_out_folds(square: str, eps: float, rule: str, tmp_path) -> None:
    """The decomposition (opset 13 ReduceMean with axes as an attribute, a symbolic
    batch and sequence) becomes one LayerNormalization; the written model (opset 17) and
    (for the Pow form) the OpenCL artefact match onnxruntime on the original."""
    from egraph_compiler import compile as compile_model

    nodes, inits = _layer_norm(square, eps)
    graph = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", F32, ["batch", "seq", HIDDEN])],
                              [helper.make_tensor_value_info("y", F32, ["batch", "seq", HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    result = pipeline.compile_model(model.SerializeToString())
    assert [n.op for n in result.graph.nodes] == ["LayerNormalization"]
    assert result.report.rules_fired.get(rule) == 1
    written = ir.to_onnx(result.graph)
    assert [n.op_type for n in written.graph.node] == ["LayerNormalization"]
    x = {"x": (np.random.default_rng(4).standard_normal((2, 5, HIDDEN)) * 3 + 1).astype(np.float32)}
    reference = _run(model, x)
    np.testing.assert_allclose(_run(written, x), reference, rtol=1e-4, atol=1e-5)
    if square == "pow":  # one OpenCL compile (the rownorm kernel) is enough for both forms
        artefact = compile_model(model.SerializeToString(), target="opencl", out_dir=tmp_path / "cl",
                                 bind={"batch": 2, "seq": 5})
        np.testing.assert_allclose(artefact.run(x)["y"], reference, rtol=1e-4, atol=1e-4)


def test_layer_norm_of_a_wrong_shaped_gamma_is_not_folded() -> None:
    """γ of shape [seq, hidden] scales per position: LayerNormalization's scale covers
    the normalised axis only, so the guard keeps the spelled-out form."""
    nodes, inits = _layer_norm("pow", 1e-5)
    inits[2] = numpy_helper.from_array(np.ones((5, HIDDEN), np.float32), "gamma")
    graph = helper.make_graph(nodes, "ln", [helper.make_tensor_value_info("x", F32, ["batch", 5, HIDDEN])],
                              [helper.make_tensor_value_info("y", F32, ["batch", 5, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    result = pipeline.compile_model(model.SerializeToString())
    assert "LayerNormalization" not in [n.op for n in result.graph.nodes]


def test_torch_opset_14_layer_norm_export_folds() -> None:
    """torch's TorchScript exporter at opset 14 (before LayerNormalization existed)
    spells nn.LayerNorm out; the compiled graph holds LayerNormalization again."""
    import io

    import torch

    torch.manual_seed(0)
    module = torch.nn.LayerNorm(HIDDEN).eval()
    torch.nn.init.normal_(module.weight)
    torch.nn.init.normal_(module.bias)
    buffer = io.BytesIO()
    torch.onnx.export(module, (torch.randn(2, 3, HIDDEN),), buffer, opset_version=14, dynamo=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b", 1: "s"}})
    model = onnx.load_from_string(buffer.getvalue())
    assert "LayerNormalization" not in [n.op_type for n in model.graph.node]
    assert "Pow" in [n.op_type for n in model.graph.node]
    result = pipeline.compile_model(model.SerializeToString())
    assert [n.op for n in result.graph.nodes] == ["LayerNormalization"]
    assert result.report.rules_fired.get("layer-norm-fold-eps-1e-5") == 1
    x = {"x": np.random.default_rng(6).standard_normal((3, 4, HIDDEN)).astype(np.float32)}
    with torch.no_grad():
        expected = module(torch.from_numpy(x["x"])).numpy()
    np.testing.assert_allclose(_run(ir.to_onnx(result.graph), x), expected, rtol=1e-4, atol=1e-5)


def test_gpt2_conv1d_folds_to_matmul_under_symbolic_dims() -> None:
    """GPT-2's Conv1D as the TorchScript exporter writes it: x.view(-1, k), Gemm, then a
    view back to [batch, seq, n] computed from Shape(x). With batch and seq symbolic the
    whole chain becomes MatMul + Add (flattened-gemm-fold), matching onnxruntime."""
    rng = np.random.default_rng(7)
    k, n = 8, 12

    def ints(name: str, values: list[int]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(values, np.int64), name)

    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "one"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
             helper.make_node("Unsqueeze", ["s", "axes"], ["s1"]),
             helper.make_node("Concat", ["b1", "s1", "width"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "flat"], ["x2"]),
             helper.make_node("Gemm", ["x2", "w", "c"], ["g"]),
             helper.make_node("Reshape", ["g", "target"], ["y"])]
    inits = [numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
             numpy_helper.from_array(np.asarray(1, np.int64), "one"), ints("axes", [0]),
             ints("width", [n]), ints("flat", [-1, k]),
             numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c")]
    graph = helper.make_graph(nodes, "conv1d", [helper.make_tensor_value_info("x", F32, ["batch", "seq", k])],
                              [helper.make_tensor_value_info("y", F32, ["batch", "seq", n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = pipeline.compile_model(model.SerializeToString())
    assert sorted(n.op for n in result.graph.nodes) == ["Add", "MatMul"]
    assert result.report.rules_fired.get("flattened-gemm-fold") == 1
    written = ir.to_onnx(result.graph)
    for shape in ((2, 5, k), (1, 1, k)):
        x = {"x": rng.standard_normal(shape).astype(np.float32)}
        np.testing.assert_allclose(_run(written, x), _run(model, x), rtol=1e-5, atol=1e-5)
