"""Two-output row kernels (`fusion.epilogues`): a residual sum stored by the LayerNorm that
reads it, where the sum is also needed later (pre-LN transformers, GPT-2's embedding);
numerics on PoCL against onnxruntime in every row-kernel form, and the cases where the
planner must not form one (the CPU class, a sum cheaper in a MatMul's epilogue, a
stored value that is not the LayerNorm's input)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.planning import execution_plan
from egraph_compiler.backends.opencl.rows import RowSplit
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.fusion.structure import analyse
from egraph_compiler.fusion.view import GraphView
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import assert_close, run_ort

WIDTH, ROWS = 100, 6  # a ragged row: not a whole number of work-groups or lanes
_rng = np.random.default_rng(3)


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, list[int]]],
           constants: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, ROWS, WIDTH])],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _layer_norm(x: str, out: str) -> onnx.NodeProto:
    return helper.make_node("LayerNormalization", [x, "g", "b"], [out], axis=-1, epsilon=1e-5)


def _norm_constants() -> dict[str, np.ndarray]:
    return {"g": _rng.uniform(0.5, 1.5, WIDTH).astype(np.float32),
            "b": _rng.standard_normal(WIDTH).astype(np.float32),
            "W": (_rng.standard_normal((WIDTH, WIDTH)) * 0.1).astype(np.float32)}


def _pre_ln_block() -> onnx.ModelProto:
    """``s = x + tanh(x)``; ``y = s + LN(s)·W``: the sum feeds the LayerNorm and, past a
    MatMul, the residual Add (no anchor produces it: the LayerNorm stores it)."""
    nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Add", ["x", "t"], ["s"]),
             _layer_norm("s", "n"), helper.make_node("MatMul", ["n", "W"], ["m"]),
             helper.make_node("Add", ["s", "m"], ["y"])]
    return _model(nodes, {"x": (TensorProto.FLOAT, [2, ROWS, WIDTH])}, _norm_constants())


def _embedding() -> onnx.ModelProto:
    """GPT-2's embedding: ``h = wte[ids] + wpe[pos]`` feeds ln_1 and the first residual."""
    nodes = [helper.make_node("Gather", ["wte", "ids"], ["e"]),
             helper.make_node("Gather", ["wpe", "pos"], ["p"]),
             helper.make_node("Add", ["e", "p"], ["s"]), _layer_norm("s", "n"),
             helper.make_node("MatMul", ["n", "W"], ["m"]), helper.make_node("Add", ["s", "m"], ["y"])]
    constants = {**_norm_constants(), "wte": _rng.standard_normal((50, WIDTH)).astype(np.float32),
                 "wpe": _rng.standard_normal((ROWS, WIDTH)).astype(np.float32),
                 "pos": np.arange(ROWS, dtype=np.int64)}
    return _model(nodes, {"ids": (TensorProto.INT64, [2, ROWS])}, constants)


def _epilogue_residual() -> onnx.ModelProto:
    """``s = x·W + x``: the sum is cheaper in the MatMul's epilogue than stored by the
    LayerNorm (priced out); ``y = s + LN(s)·W``."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"]), helper.make_node("Add", ["a", "x"], ["s"]),
             _layer_norm("s", "n"), helper.make_node("MatMul", ["n", "W"], ["m"]),
             helper.make_node("Add", ["s", "m"], ["y"])]
    return _model(nodes, {"x": (TensorProto.FLOAT, [2, ROWS, WIDTH])}, _norm_constants())


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    if model.graph.input[0].name == "ids":
        return {"ids": np.random.default_rng(4).integers(0, 50, (2, ROWS)).astype(np.int64)}
    return {"x": np.random.default_rng(4).standard_normal((2, ROWS, WIDTH)).astype(np.float32)}


def _blocks(model: onnx.ModelProto, device: str) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(operators, outputs) of each block of ``model``'s plan for ``device``."""
    plan, _ = execution_plan(static_graph(model, _feeds(model)),
                             params=KernelParams.for_device(device))
    return [(b.ops, b.outputs) for b in plan.fusion.blocks]


def _stored_block(blocks: list[tuple[tuple[str, ...], tuple[str, ...]]]
                  ) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    return next((b for b in blocks if "LayerNormalization" in b[0] and "s" in b[1]), None)


@pytest.mark.parametrize("case", ["pre-ln", "embedding"])
def test_gpu_plan_stores_the_sum_in_the_layer_norm(case: str) -> None:
    """GPU class: the sum's producers and the LayerNorm are one block with two outputs,
    the sum and the normalised rows; the CPU class keeps them apart (its plans unchanged)."""
    model = _pre_ln_block() if case == "pre-ln" else _embedding()
    gpu = _stored_block(_blocks(model, "gpu"))
    assert gpu is not None and set(gpu[1]) == {"s", "n"} and "Add" in gpu[0], gpu
    cpu = _blocks(model, "cpu")
    assert _stored_block(cpu) is None
    assert any(ops[-1] == "LayerNormalization" and outputs == ("n",) for ops, outputs in cpu)


def test_a_sum_cheaper_in_a_matmul_epilogue_is_not_stored() -> None:
    """``x·W + x``: storing the sum in the LayerNorm would have the MatMul write its product
    and the LayerNorm read it back; the planner keeps the Add in the MatMul's epilogue."""
    blocks = _blocks(_epilogue_residual(), "gpu")
    assert _stored_block(blocks) is None
    assert ("MatMul", "Add") in [ops for ops, _ in blocks], blocks
    plan, _ = execution_plan(static_graph(_epilogue_residual(), _feeds(_epilogue_residual())),
                             params=KernelParams.for_device("gpu"))
    assert any("epilogue" in d.reason for d in plan.fusion.decisions)


def test_only_the_row_kernels_own_input_is_stored() -> None:
    """A prologue value needed outside that is not the LayerNorm's input (``s`` under a
    Relu) is no legal block: the kernel reads it only through the Relu."""
    nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Add", ["x", "t"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]), _layer_norm("r", "n"),
             helper.make_node("MatMul", ["n", "W"], ["m"]), helper.make_node("Add", ["s", "m"], ["y"])]
    model = _model(nodes, {"x": (TensorProto.FLOAT, [2, ROWS, WIDTH])}, _norm_constants())
    view = GraphView(static_graph(model, _feeds(model)))
    index = {node.op if node.op != "Add" else node.outputs[0]: k for k, node in enumerate(view.nodes)}
    members = frozenset({index["Tanh"], index["s"], index["Relu"], index["LayerNormalization"]})
    assert analyse(view, members) == "a prologue value is needed outside the block"
    assert _stored_block(_blocks(model, "gpu")) is None
    # without the Relu the sum is the LayerNorm's input: legal, stored
    plain = _pre_ln_block()
    view = GraphView(static_graph(plain, _feeds(plain)))
    legal = analyse(view, frozenset(k for k, node in enumerate(view.nodes)
                                    if "s" in node.outputs or node.op in ("Tanh", "LayerNormalization")))
    assert not isinstance(legal, str) and legal.stored == ("s",) and set(legal.outputs) == {"s", "n"}


FORMS = {  # every form of `kernels.rownorm`
    "row-cache": {},
    "strided": {"row_cache": 0},
    "row-split": {"row_split": RowSplit(3)},
    "serial": {"row_serial_below": 1 << 20},
}


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("case", ["pre-ln", "embedding"])
def test_stored_sum_matches_onnxruntime(case: str, form: str, tmp_path: Path) -> None:
    model = _pre_ln_block() if case == "pre-ln" else _embedding()
    feeds = _feeds(model)
    params = replace(KernelParams.for_device("gpu"), **FORMS[form])
    plan, selection = execution_plan(static_graph(model, feeds), params=params)
    assert _stored_block([(b.ops, b.outputs) for b in plan.fusion.blocks]) is not None
    build(plan, tmp_path, params, selection=selection)
    assert_close(load(tmp_path).run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_plan_fusion_without_a_backend_never_stores() -> None:
    """`plan_fusion`'s default cost model (no backend) keeps the old constraint."""
    model = _pre_ln_block()
    plan = plan_fusion(static_graph(model, _feeds(model)))
    assert _stored_block([(b.ops, b.outputs) for b in plan.blocks]) is None
    assert any(d.reason == "a prologue value is needed outside the block" for d in plan.decisions)


def _masked_scores(t: int) -> onnx.ModelProto:
    """``softmax(q·k + (1 - m)·-1e4)`` with the mask ``[2, 1, T, T]`` broadcast over 4 heads,
    as BERT's and GPT-2's first attention layer: the mask chain is seeded first, and its
    output is needed again (the next layer's scores there; a graph output here)."""
    nodes = [helper.make_node("Sub", ["one", "m"], ["c"]),
             helper.make_node("Mul", ["c", "big"], ["mask"]),
             helper.make_node("MatMul", ["q", "k"], ["scores"]),
             helper.make_node("Add", ["scores", "mask"], ["a"]),
             helper.make_node("Softmax", ["a"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 4, t, 8]),
                     helper.make_tensor_value_info("k", TensorProto.FLOAT, [2, 4, 8, t]),
                     helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 1, t, t])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, t, t]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [2, 1, t, t])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.array(-1e4, np.float32), "big")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_broadcast_score_add_is_left_to_the_matmul_epilogue(tmp_path: Path) -> None:
    """GPU class: the mask block stops before the score Add (it would re-read the whole
    score tensor) and the MatMul takes it as epilogue, reading the 4× smaller mask; the
    same cost model without `anchor_epilogues_priced` keeps the Add in the mask block.
    Numerics on PoCL against onnxruntime."""
    t = 384  # 2·4·384² scores: the bytes saved outweigh a launch
    model = _masked_scores(t)
    rng = np.random.default_rng(6)
    feeds = {"q": rng.standard_normal((2, 4, t, 8)).astype(np.float32),
             "k": rng.standard_normal((2, 4, 8, t)).astype(np.float32),
             "m": (rng.uniform(size=(2, 1, t, t)) > 0.3).astype(np.float32)}
    graph = static_graph(model, feeds)
    gpu = cost.fusion_cost(cost.DEVICES["gpu"])
    unpriced = plan_fusion(graph, cost=replace(gpu, anchor_epilogues_priced=False))
    assert ("MatMul",) in [b.ops for b in unpriced.blocks]
    params = KernelParams.for_device("gpu")
    plan, selection = execution_plan(graph, params=params)
    assert ("MatMul", "Add") in [b.ops for b in plan.fusion.blocks]
    assert any("epilogue reads the broadcast operand" in d.reason for d in plan.fusion.decisions)
    build(plan, tmp_path, params, selection=selection)
    assert_close(load(tmp_path).run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_small_scores_keep_the_add_in_the_mask_block() -> None:
    """2·4·16² scores: the bytes saved are worth less than a launch, the plan stays."""
    model = _masked_scores(16)
    feeds = {"q": np.zeros((2, 4, 16, 8), np.float32), "k": np.zeros((2, 4, 8, 16), np.float32),
             "m": np.zeros((2, 1, 16, 16), np.float32)}
    plan, _ = execution_plan(static_graph(model, feeds), params=KernelParams.for_device("gpu"))
    assert ("MatMul",) in [b.ops for b in plan.fusion.blocks]
