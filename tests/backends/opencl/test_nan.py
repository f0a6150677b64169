"""NaN through the elementwise min/max family on PoCL: kept, as onnxruntime and NumPy keep it.

fmin/fmax and a `x > 0 ? x : 0` Relu drop a NaN operand; the folded value (`ops.scalar`:
NumPy's minimum/maximum) and onnxruntime keep it, so the compiled kernel must too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler import ops
from egraph_compiler.backends.opencl import compile_graph, load
from tests.backends.opencl.helpers import static_graph

NAN = np.float32(np.nan)
A = np.array([NAN, 1, -2, NAN, 3, -1, 0, 5], np.float32)
B = np.array([0, NAN, 5, NAN, -3, -1, 0, 4], np.float32)

CASES = [
    ("max", [helper.make_node("Max", ["a", "b"], ["y"])]),
    ("min", [helper.make_node("Min", ["a", "b"], ["y"])]),
    ("relu", [helper.make_node("Relu", ["a"], ["y"])]),
    ("clip", [helper.make_node("Clip", ["a", "lo", "hi"], ["y"])]),
    ("hardsigmoid", [helper.make_node("HardSigmoid", ["a"], ["y"])]),
    # IsNaN is spelled x != x (isnan is a slow call on PoCL): it must still see every NaN
    ("isnan_where", [helper.make_node("IsNaN", ["a"], ["m"]), helper.make_node("Where", ["m", "a", "b"], ["y"])]),
    ("hardswish_of_sum", [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("HardSwish", ["s"], ["y"])]),
]


@pytest.mark.parametrize(("name", "nodes"), CASES, ids=[c[0] for c in CASES])
def test_nan_is_kept_as_onnxruntime_keeps_it(name: str, nodes: list[onnx.NodeProto], tmp_path: Path) -> None:
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [8]) for n in ("a", "b")]
    bounds = [helper.make_tensor("lo", TensorProto.FLOAT, [], [-0.5]), helper.make_tensor("hi", TensorProto.FLOAT, [], [0.5])]
    graph = helper.make_graph(nodes, name, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])], bounds)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"a": A, "b": B}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.isnan(want).any(), "the case must carry a NaN to the output"
    ir = static_graph(model, feeds)
    with ops.using(ops.shipped()):
        compile_graph(ir, tmp_path)
    got = load(tmp_path).run(feeds)[ir.outputs[0].name]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)
