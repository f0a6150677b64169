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
from egraph_compiler.fusion import plan_fusion
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


def _random_graph(seed: int) -> ModelProto:
    """A random DAG of pointwise operators, Where on comparisons, MatMuls and Softmaxes
    over two [3, 4] inputs: values read by several chains that meet again."""
    rng = np.random.default_rng(seed)
    make = helper.make_node
    values, nodes = ["x0", "x1"], []
    for i in range(int(rng.integers(6, 30))):
        a, b, out = values[rng.integers(len(values))], values[rng.integers(len(values))], f"v{i}"
        kind = int(rng.integers(0, 6))
        if kind == 5:
            nodes += [make("Less", [a, b], [f"{out}_c"]), make("Where", [f"{out}_c", a, b], [out])]
        else:
            nodes.append([make("Add", [a, b], [out]), make("Mul", [a, b], [out]),
                          make("Tanh", [a], [out]), make("MatMul", [a, "R"], [out]),
                          make("Softmax", [a], [out], axis=-1)][kind])
        values.append(out)
    read = {v for node in nodes for v in node.input}
    outputs = [v for v in values[2:] if v not in read]
    graph = helper.make_graph(
        nodes, f"random_{seed}", [helper.make_tensor_value_info(x, F, [3, 4]) for x in ("x0", "x1")],
        [helper.make_tensor_value_info(v, F, [3, 4]) for v in outputs],
        [helper.make_tensor("R", F, [4, 4], rng.normal(size=16))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_random_graphs_plan_without_a_cycle() -> None:
    """Seeds 0-179 hold two graphs (99 and 169; eight in 0-999) whose blocks formed a
    cycle under the old check; every node must land in exactly one block of a plan
    that orders (the planner raises when its blocks form a cycle)."""
    feeds = {"x0": np.zeros((3, 4), np.float32), "x1": np.zeros((3, 4), np.float32)}
    with ops.using(ops.shipped()):
        for seed in range(180):
            graph = static_graph(_random_graph(seed), feeds)
            plan = plan_fusion(graph)
            members = sorted(n for block in plan.blocks for n in block.nodes)
            assert members == list(range(len(plan.graph.nodes))), seed


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
