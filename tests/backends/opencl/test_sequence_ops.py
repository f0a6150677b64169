"""Issue 17 item 6 on PoCL: a recurrence the backend unrolls (ir/decompose.py, with run-time
sequence lengths that differ per batch entry, which onnx's node tests never feed) and the
ReverseSequence, Det and Col2Im kernels (ops_extra.py, Det with a fused consumer; Col2Im with
constant image and block shapes, strides, dilations and pads), side by side in
one model (one compile), compared with onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from egraph_compiler import ops
from egraph_compiler.backends.opencl import compile_graph, load
from tests.backends.opencl.helpers import static_graph

F = TensorProto.FLOAT


def test_recurrence_reverse_sequence_and_det_match_onnxruntime(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    steps, batch, size, hidden = 3, 3, 2, 3
    feeds = {
        "X": rng.normal(size=(steps, batch, size)).astype(np.float32),
        "W": rng.normal(0, 0.5, (2, hidden, size)).astype(np.float32),
        "R": rng.normal(0, 0.5, (2, hidden, hidden)).astype(np.float32),
        "B": rng.normal(0, 0.5, (2, 2 * hidden)).astype(np.float32),
        "lens": np.asarray([2, 3, 1], dtype=np.int32),
        "S": rng.normal(size=(5, 3)).astype(np.float32),
        "M": rng.normal(size=(2, 4, 4)).astype(np.float32),
        "C": rng.normal(size=(1, 8, 8)).astype(np.float32),
    }
    nodes = [
        helper.make_node("RNN", ["X", "W", "R", "B", "lens"], ["Y", "Y_h"], hidden_size=hidden,
                         direction="bidirectional"),
        helper.make_node("ReverseSequence", ["S", "lens64"], ["S_rev"], batch_axis=1, time_axis=0),
        helper.make_node("Det", ["M"], ["det"]),
        helper.make_node("Neg", ["det"], ["neg_det"]),
        helper.make_node("Col2Im", ["C", "image", "block"], ["image_out"], strides=[2, 1],
                         dilations=[1, 2], pads=[1, 0, 0, 1]),
    ]
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(name, F, shape) for name, shape in
               (("Y", [steps, 2, batch, hidden]), ("Y_h", [2, batch, hidden]), ("S_rev", [5, 3]),
                ("neg_det", [2]), ("image_out", [1, 2, 4, 5]))]
    constants = [helper.make_tensor("lens64", TensorProto.INT64, [3], [3, 5, 0]),
                 helper.make_tensor("image", TensorProto.INT64, [2], [4, 5]),
                 helper.make_tensor("block", TensorProto.INT64, [2], [2, 2])]
    model = helper.make_model(helper.make_graph(nodes, "sequence_ops", inputs, outputs, constants),
                              opset_imports=[helper.make_opsetid("", 21)])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    graph = static_graph(model, feeds)
    with ops.using(ops.shipped()):
        compile_graph(graph, tmp_path)
    got = load(tmp_path).run(feeds)
    for value, expected in zip(graph.outputs, want, strict=True):
        np.testing.assert_allclose(got[value.name], expected, rtol=1e-4, atol=1e-5, err_msg=value.name)
