"""backends/opencl/ops_extra.py: the `anchor indexed` operators' kernels on PoCL.

onnx's node tests give CumSum's axis and Trilu's k as run-time inputs (the kernel reads
them: tests/backends/opencl/test_ops_vision.py); real models hold them as constants, which
these cases do.
Each is compared with onnxruntime, alone and with an elementwise consumer fused into
its epilogue.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import ops
from egraph_compiler.backends.opencl import compile_graph, load, ops_extra
from tests.backends.opencl.helpers import static_graph


def test_every_indexed_operator_has_a_generator() -> None:
    declared = {name for name, kind in ops.shipped().anchors().items() if kind == "indexed"}
    assert declared == set(ops_extra.GENERATORS)


def _model(node: onnx.NodeProto, x: np.ndarray, constants: dict[str, np.ndarray], out_dtype: int,
           epilogue: bool) -> onnx.ModelProto:
    nodes = [node]
    output = node.output[0]
    if epilogue:
        nodes.append(helper.make_node("Neg", [output], ["negated"]))
        output = "negated"
    graph = helper.make_graph(
        nodes, "indexed", [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info(output, out_dtype, list(x.shape))],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CASES = [
    ("cumsum_axis1", helper.make_node("CumSum", ["x", "axis"], ["y"]), {"axis": np.asarray(1)}),
    ("cumsum_reverse_exclusive", helper.make_node("CumSum", ["x", "axis"], ["y"], reverse=1, exclusive=1),
     {"axis": np.asarray(-1)}),
    ("tril_k1", helper.make_node("Trilu", ["x", "k"], ["y"], upper=0), {"k": np.asarray(1)}),
    ("triu_default", helper.make_node("Trilu", ["x"], ["y"]), {}),
    ("hardmax_axis0", helper.make_node("Hardmax", ["x"], ["y"], axis=0), {}),
    ("lp1_axis1", helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=1), {}),
    ("gather_elements", helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1),
     {"i": np.asarray([[0, -1, 2, 1, 0], [3, 3, 0, -5, 1], [4, 0, 1, 2, 3]], np.int64)}),
    ("scatter_add", helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0, reduction="add"),
     {"i": np.asarray([[1, 0, 2, 2, 1], [1, 1, 0, 2, 0]], np.int64),
      "u": np.arange(10, dtype=np.float32).reshape(2, 5)}),
]


@pytest.mark.parametrize("epilogue", [False, True])
@pytest.mark.parametrize(("name", "node", "constants"), CASES, ids=[c[0] for c in CASES])
def test_indexed_kernel_matches_onnxruntime(name: str, node: onnx.NodeProto,
                                            constants: dict[str, np.ndarray], epilogue: bool,
                                            tmp_path: Path) -> None:
    x = np.random.default_rng(7).standard_normal((3, 5)).astype(np.float32)
    model = _model(node, x, constants, TensorProto.FLOAT, epilogue)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    graph = static_graph(model, {"x": x})
    with ops.using(ops.shipped()):
        compile_graph(graph, tmp_path)
    got = load(tmp_path).run({"x": x})[graph.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
