"""The planner never forms blocks that depend on each other both ways.

A bidirectional recurrence unrolled with one sequence-length mask per step shared by
both directions: the mask of step 0 is read by the first step of the forward chain
and by the last step of the reverse chain, so the block seeded at that mask spans the
whole graph. The block formed next (step 1's mask) is reached from it through the
forward chain and reaches it through the reverse chain — a cycle the old reachability
check pruned away (it stopped at the candidate's highest node index, but a path may
climb past it into a block that spans back below it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import ModelProto, NodeProto, TensorProto, helper

from egraph_compiler import ops
from egraph_compiler.backends.opencl import compile_graph, load
from tests.backends.opencl.helpers import static_graph

F = TensorProto.FLOAT
BATCH, HIDDEN = 3, 4


def _step(tag: str, x: str, h: str, mask: str) -> list[NodeProto]:
    """One recurrent step: h' = where(mask, tanh(x + h @ R), h)."""
    make = helper.make_node
    return [make("MatMul", [h, "R"], [f"{tag}_mm"]), make("Add", [x, f"{tag}_mm"], [f"{tag}_a"]),
            make("Tanh", [f"{tag}_a"], [f"{tag}_t"]),
            make("Where", [mask, f"{tag}_t", h], [f"{tag}_h"])]


def _shared_mask_recurrence(rng: np.random.Generator) -> ModelProto:
    make = helper.make_node
    nodes = [make("Less", ["t0", "lens"], ["l0"]), make("Unsqueeze", ["l0", "axis"], ["m0"]),
             make("Less", ["t1", "lens"], ["l1"]), make("Unsqueeze", ["l1", "axis"], ["m1"])]
    nodes += _step("f0", "x0", "h_init", "m0") + _step("f1", "x1", "f0_h", "m1")  # forward
    nodes += _step("r1", "x1", "h_init", "m1") + _step("r0", "x0", "r1_h", "m0")  # reverse
    nodes.append(make("Concat", ["f1_h", "r0_h"], ["y"], axis=1))
    constants = [
        helper.make_tensor("t0", TensorProto.INT32, [], [0]),
        helper.make_tensor("t1", TensorProto.INT32, [], [1]),
        helper.make_tensor("axis", TensorProto.INT64, [1], [1]),
        helper.make_tensor("R", F, [HIDDEN, HIDDEN], rng.normal(0, 0.5, HIDDEN * HIDDEN)),
        helper.make_tensor("h_init", F, [BATCH, HIDDEN], rng.normal(0, 0.5, BATCH * HIDDEN)),
    ]
    inputs = [helper.make_tensor_value_info("x0", F, [BATCH, HIDDEN]),
              helper.make_tensor_value_info("x1", F, [BATCH, HIDDEN]),
              helper.make_tensor_value_info("lens", TensorProto.INT32, [BATCH])]
    output = helper.make_tensor_value_info("y", F, [BATCH, 2 * HIDDEN])
    graph = helper.make_graph(nodes, "shared_mask_recurrence", inputs, [output], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_shared_mask_recurrence_compiles_for_opencl_and_matches_onnxruntime(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    model = _shared_mask_recurrence(rng)
    feeds = {"x0": rng.normal(size=(BATCH, HIDDEN)).astype(np.float32),
             "x1": rng.normal(size=(BATCH, HIDDEN)).astype(np.float32),
             "lens": np.asarray([1, 2, 0], dtype=np.int32)}  # every mask pattern once
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with ops.using(ops.shipped()):
        compile_graph(static_graph(model, feeds), tmp_path)
    got = load(tmp_path).run(feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
