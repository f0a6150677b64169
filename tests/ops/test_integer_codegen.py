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


def _run(tmp: Path, nodes: list, inputs: dict[str, np.ndarray], outputs: dict[str, int]) -> dict[str, np.ndarray]:
    graph = helper.make_graph(
        nodes, "builtins",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape) for n, x in inputs.items()],
        [helper.make_tensor_value_info(n, t, SHAPE) for n, t in outputs.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp / "model.onnx")
    result = pipeline.compile_model(tmp / "model.onnx", target="opencl")
    pipeline.write_artefact(result, "opencl", tmp / "out")
    return opencl.load(tmp / "out").run(inputs)


def test_bitwise_and_variadic_builtins_are_spelled_by_builtin_name(tmp_path: Path) -> None:
    """The OpenCL spellings of ``= builtin bitwise_*`` and ``sum|max|min|mean`` (integer and float)."""
    rng = np.random.default_rng(1)
    a, b, c = (rng.integers(-1000, 1000, SHAPE).astype(np.int32) for _ in range(3))
    f, g, h = (rng.uniform(-4, 4, SHAPE).astype(np.float32) for _ in range(3))
    nodes = [helper.make_node("BitwiseAnd", ["a", "b"], ["and_"]), helper.make_node("BitwiseOr", ["and_", "c"], ["or_"]),
             helper.make_node("BitwiseXor", ["or_", "a"], ["xor_"]), helper.make_node("BitwiseNot", ["xor_"], ["bits"]),
             helper.make_node("Max", ["a", "b", "c"], ["imax"]), helper.make_node("Min", ["a", "b", "c"], ["imin"]),
             helper.make_node("Sum", ["f", "g", "h"], ["fsum"]), helper.make_node("Mean", ["f", "g", "h"], ["fmean"]),
             helper.make_node("Max", ["f", "g", "h"], ["fmax"])]
    ints, floats = TensorProto.INT32, TensorProto.FLOAT
    got = _run(tmp_path, nodes, {"a": a, "b": b, "c": c, "f": f, "g": g, "h": h},
               {"bits": ints, "imax": ints, "imin": ints, "fsum": floats, "fmean": floats, "fmax": floats})
    np.testing.assert_array_equal(got["bits"], ~(((a & b) | c) ^ a))
    np.testing.assert_array_equal(got["imax"], np.maximum(np.maximum(a, b), c))
    np.testing.assert_array_equal(got["imin"], np.minimum(np.minimum(a, b), c))
    np.testing.assert_allclose(got["fsum"], f + g + h, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["fmean"], (f + g + h) / 3, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["fmax"], np.maximum(np.maximum(f, g), h))
