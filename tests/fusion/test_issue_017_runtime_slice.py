"""Issue 17: a Slice whose bounds are computed from a symbolic shape (LLaMA's rotate_half,
``x[..., x.shape[-1] // 2:]``) keeps them as run-time inputs in the IR; bound by --bind
they become constants, and the OpenCL kernels read bounds from attributes only — they
sliced the whole axis (a silent wrong answer). The planner now moves them to attributes.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import compile as dnnr_compile


def test_slice_bounds_from_a_bound_shape(tmp_path) -> None:
    const = lambda name, v: numpy_helper.from_array(np.asarray(v, dtype=np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "minus_one"], ["last"], axis=0),
        helper.make_node("Div", ["last", "two"], ["half"]),
        helper.make_node("Unsqueeze", ["half", "zero"], ["start"]),
        helper.make_node("Slice", ["x", "start", "big", "minus_one_1d"], ["upper"]),
        helper.make_node("Neg", ["upper"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "rotate_half",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        [const("minus_one", -1), const("two", 2), const("zero", [0]), const("big", [2**62]),
         const("minus_one_1d", [-1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    compiled = dnnr_compile(model, target="opencl", out_dir=tmp_path, bind={"batch": 2, "seq": 3})
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], expected)
