"""OpenCL code for integer operands from the declared scalar semantics (`spelling.INT_SPELLING`):
integer Add/Sub/Mul/Div/Neg run on PoCL and match ONNX's integer arithmetic (Div truncates
toward zero). The algebra rules turn ``s * s`` into Square, which had no integer spelling:
the model did not compile for OpenCL before ("cannot generate Square for int32")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from egraph_compiler import pipeline
from egraph_compiler.backends import opencl

SHAPE = [4, 6]


def _model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Mul", ["a", "b"], ["ab"]),
        helper.make_node("Sub", ["ab", "a"], ["d"]),
        helper.make_node("Div", ["d", "b"], ["q"]),
        helper.make_node("Neg", ["q"], ["n"]),
        helper.make_node("Add", ["n", "a"], ["s"]),
        helper.make_node("Mul", ["s", "s"], ["y"]),
    ]
    ints = [helper.make_tensor_value_info(n, TensorProto.INT32, SHAPE) for n in ("a", "b")]
    graph = helper.make_graph(nodes, "ints", ints, [helper.make_tensor_value_info("y", TensorProto.INT32, SHAPE)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_integer_elementwise_operators_are_generated_from_their_semantics(tmp_path: Path) -> None:
    onnx.save(_model(), tmp_path / "model.onnx")
    result = pipeline.compile_model(tmp_path / "model.onnx", target="opencl")
    pipeline.write_artefact(result, "opencl", tmp_path / "out")
    rng = np.random.default_rng(0)
    a = rng.integers(-50, 50, SHAPE).astype(np.int32)
    b = rng.choice(np.array([-7, -3, -1, 1, 2, 5, 9], np.int32), SHAPE)
    d = a * b - a
    q = np.trunc(d / b).astype(np.int32)  # ONNX integer Div truncates; NumPy's // floors
    s = -q + a
    y = opencl.load(tmp_path / "out").run({"a": a, "b": b})["y"]
    np.testing.assert_array_equal(y, s * s)
