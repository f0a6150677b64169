"""Row kernels with several work-groups per row (`rows.py`, the ``row-split`` option)
on PoCL against onnxruntime: Softmax, LogSoftmax, LayerNormalization and reductions,
with a ragged last chunk and an epilogue fused; and the cost model's choice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.rows import RowSplit
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import assert_close, run_ort


def _model(node: onnx.NodeProto, shape: list[int], out: list[int],
           constants: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """``node`` on ``x`` (its output ``t``), then ``y = t * 3 - 1`` as an epilogue."""
    nodes = [node, helper.make_node("Mul", ["t", "three"], ["m"]),
             helper.make_node("Sub", ["m", "one"], ["y"])]
    consts = {"three": np.array(3.0, np.float32), "one": np.array(1.0, np.float32),
              **(constants or {})}
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


_rng = np.random.default_rng(11)
CASES = {
    "softmax": _model(helper.make_node("Softmax", ["x"], ["t"], axis=-1), [2, 1000], [2, 1000]),
    "logsoftmax": _model(helper.make_node("LogSoftmax", ["x"], ["t"], axis=1), [3, 517],
                         [3, 517]),
    "layernorm": _model(helper.make_node("LayerNormalization", ["x", "g", "b"], ["t"], axis=-1,
                                         epsilon=1e-3), [2, 3, 777], [2, 3, 777],
                        {"g": _rng.uniform(0.5, 1.5, 777).astype(np.float32),
                         "b": _rng.standard_normal(777).astype(np.float32)}),
    # per-channel scale and bias: the split form once read them as LayerNorm's (and
    # took InstanceNormalization for a Softmax)
    "instancenorm": _model(helper.make_node("InstanceNormalization", ["x", "g", "b"], ["t"],
                                            epsilon=1e-3), [1, 2, 40, 30], [1, 2, 40, 30],
                           {"g": _rng.uniform(0.5, 1.5, 2).astype(np.float32),
                            "b": _rng.standard_normal(2).astype(np.float32)}),
    "reduce-mean": _model(helper.make_node("ReduceMean", ["x", "axes"], ["t"], keepdims=1),
                          [1, 3, 41, 37], [1, 3, 1, 1], {"axes": np.array([2, 3], np.int64)}),
    "reduce-max": _model(helper.make_node("ReduceMax", ["x", "axes"], ["t"], keepdims=0),
                         [2, 1111], [2], {"axes": np.array([1], np.int64)}),
    "reduce-l2": _model(helper.make_node("ReduceL2", ["x", "axes"], ["t"], keepdims=0),
                        [1, 999], [1], {"axes": np.array([1], np.int64)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("groups", [3, 8])
def test_row_split_matches_onnxruntime(case: str, groups: int, tmp_path: Path) -> None:
    model = CASES[case]
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": np.random.default_rng(5).standard_normal(shape).astype(np.float32) * 4}
    params = KernelParams(row_serial_below=0, row_split=RowSplit(groups))
    build(plan_memory(plan_fusion(static_graph(model, feeds))), tmp_path, params)
    compiled = load(tmp_path)
    launches = compiled.plan["launches"]
    assert len({launch["block"] for launch in launches}) == 1, "the epilogue fuses"
    assert len(launches) == 2 and launches[0]["variant"].startswith("row-split")
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_cost_model_splits_only_few_long_rows() -> None:
    """On the GPU one 64k row is split, 4096 rows of 768 are not; on PoCL (two
    compute units) neither is."""
    gpu, cpu = cost.DEVICES["gpu"], cost.DEVICES["cpu"]
    long = cost.choose(cost.row_options(gpu, 1, 65536, 256))
    assert long.variant == "row-split" and long.params.groups >= 8
    assert cost.choose(cost.row_options(gpu, 4096, 768, 256)).variant == "row"
    assert cost.choose(cost.row_options(cpu, 1, 65536, 64)).variant == "row"


ROWNORMS = [c for c in sorted(CASES) if not c.startswith("reduce")]
CACHED = {**{c: CASES[c] for c in ROWNORMS},
          # rows a whole number of work-groups wide (no guard) with a prologue
          "softmax-512-prologue": helper.make_model(helper.make_graph(
              [helper.make_node("Add", ["x", "x"], ["a"]),
               helper.make_node("Softmax", ["a"], ["t"], axis=-1),
               helper.make_node("Mul", ["t", "t"], ["y"])], "g",
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 512])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 512])]),
              opset_imports=[helper.make_opsetid("", 18)])}


@pytest.mark.parametrize("case", sorted(CACHED))
def test_rows_in_registers_match_onnxruntime(case: str, tmp_path: Path) -> None:
    """`KernelParams.row_cache`: each work-item keeps its elements of the row in
    registers (ragged rows guarded); one launch, the epilogue fused."""
    model = CACHED[case]
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": np.random.default_rng(5).standard_normal(shape).astype(np.float32) * 4}
    params = KernelParams(row_serial_below=0, row_cache=8, reduce_work_group=256)
    build(plan_memory(plan_fusion(static_graph(model, feeds))), tmp_path, params)
    compiled = load(tmp_path)
    assert len(compiled.plan["launches"]) == 1
    assert "float xs[ROWC];" in (tmp_path / "kernels.cl").read_text()
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)
