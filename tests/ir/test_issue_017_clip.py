"""Issue 17: Clip whose min/max arrive as graph inputs at run time.

The optimised model used to ignore such bounds (the e-graph's decoded Clip carries the
default ±inf attributes, and the exporter replaced the run-time inputs with them): seven
of onnx's node tests gave silent wrong answers. Int8 Clip with default bounds raised an
OverflowError (±inf cast to int8). Every case below runs the written model in
onnxruntime and compares with onnx's expected outputs.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.case import node as node_cases

from egraph_compiler import ir, pipeline
from egraph_compiler.ir.graph import Node

_CASES = {c.name: c for c in node_cases.collect_testcases("Clip")}
_RUNTIME_BOUNDS = (
    "test_clip", "test_clip_example", "test_clip_outbounds", "test_clip_splitbounds",
    "test_clip_default_min", "test_clip_default_max", "test_clip_min_greater_than_max",
    "test_clip_default_int8_min", "test_clip_default_int8_max",
)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {k: np.asarray(v) for k, v in feeds.items()})


@pytest.mark.parametrize("case", _RUNTIME_BOUNDS)
def test_runtime_clip_bounds_are_kept(case: str) -> None:
    test = _CASES[case]
    inputs, expected = test.data_sets[0]
    written = ir.to_onnx(pipeline.compile_model(test.model.SerializeToString()).graph)
    names = [i.name for i in test.model.graph.input]
    got = _run(written, dict(zip(names, inputs, strict=True)))
    for value, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(value, want, rtol=1e-6, atol=0)


def test_constant_and_runtime_bound_on_one_side_both_apply() -> None:
    """An IR Clip holding a constant bound (attribute) and a run-time one (input) on the
    same side clips by both: the exporter may drop neither."""
    graph = ir.Graph(
        name="clip", inputs=(ir.Value("x", ir.TensorType("float32", (6,))),
                             ir.Value("lo", ir.TensorType("float32", ()))),
        outputs=(ir.Value("y", ir.TensorType("float32", (6,))),),
        nodes=(Node("Clip", ("x", "lo"), ("y",), (("max", 0.25), ("min", -0.5)), "clip"),),
    )
    x = np.array([-2.0, -0.7, -0.1, 0.1, 0.3, 2.0], dtype=np.float32)
    for lo in (-1.0, -0.2):
        (got,) = _run(ir.to_onnx(graph), {"x": x, "lo": np.float32(lo)})
        np.testing.assert_array_equal(got, np.clip(np.clip(x, -0.5, 0.25), lo, None))


def test_runtime_bound_survives_a_layout_rewrite() -> None:
    """Clip(Transpose(x), lo, hi): the layout rule that moves Clip across Transpose
    matches constant bounds only; the run-time bounds must reach the written model."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("Clip", ["t", "lo", "hi"], ["y"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("lo", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("hi", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32),
             "lo": np.float32(-0.5), "hi": np.float32(0.1)}
    written = ir.to_onnx(pipeline.compile_model(model.SerializeToString()).graph)
    np.testing.assert_array_equal(_run(written, feeds)[0], _run(model, feeds)[0])
