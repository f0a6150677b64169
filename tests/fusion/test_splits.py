"""`fusion.splits`: a Split whose pieces go to different MatMul blocks becomes one Slice
per piece, each fused into its reader as a prologue (GPU class; kept only where the plan
has fewer kernels); numerics on PoCL against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.backends.opencl import KernelParams, build, load
from egraph_compiler.backends.opencl.planning import execution_plan
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import assert_close, run_ort

T, HEADS, DIM = 12, 2, 8


def _attention() -> onnx.ModelProto:
    """GPT-2's attention after c_attn: the ``[T, 3C]`` projection reshaped to ``[1, T, 3C]``
    (a layout operator only the Split reads), split into q, k, v, heads apart,
    softmax(q·kᵀ)·v."""
    width = HEADS * DIM
    heads = np.array([1, T, HEADS, DIM], np.int64)
    nodes = [helper.make_node("Reshape", ["x", "batched"], ["xb"]),
             helper.make_node("Split", ["xb", "sizes"], ["q", "k", "v"], axis=2)]
    for name in "qkv":
        nodes += [helper.make_node("Reshape", [name, "heads"], [f"{name}r"]),
                  helper.make_node("Transpose", [f"{name}r"], [f"{name}t"],
                                   perm=[0, 2, 3, 1] if name == "k" else [0, 2, 1, 3])]
    nodes += [helper.make_node("MatMul", ["qt", "kt"], ["s"]),
              helper.make_node("Softmax", ["s"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "vt"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, 3 * width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, HEADS, T, DIM])],
        [numpy_helper.from_array(np.array([width] * 3, np.int64), "sizes"),
         numpy_helper.from_array(np.array([1, T, 3 * width], np.int64), "batched"),
         numpy_helper.from_array(heads, "heads")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(8).standard_normal((T, 3 * HEADS * DIM)).astype(np.float32)}


def test_split_pieces_fuse_into_their_readers(tmp_path: Path) -> None:
    model, feeds = _attention(), _feeds()
    graph = static_graph(model, feeds)
    cpu, _ = execution_plan(graph, params=KernelParams.for_device("cpu"))
    assert any("Split" in b.ops for b in cpu.fusion.blocks)
    params = KernelParams.for_device("gpu")
    gpu, selection = execution_plan(graph, params=params)
    ops = [b.ops for b in gpu.fusion.blocks]
    assert not any("Split" in o for o in ops) and all(
        "Slice" in o and "Reshape" in o for o in ops if "MatMul" in o), ops
    assert gpu.fusion.kernel_count < cpu.fusion.kernel_count
    build(gpu, tmp_path, params, selection=selection)
    assert_close(load(tmp_path).run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_a_split_read_by_one_kernel_stays() -> None:
    """All pieces read by one pointwise block: slicing saves no kernel, the Split stays."""
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
             helper.make_node("Mul", ["a", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [numpy_helper.from_array(np.array([4, 4], np.int64), "sizes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    plan, _ = execution_plan(static_graph(model, {"x": np.zeros((3, 8), np.float32)}),
                             params=KernelParams.for_device("gpu"))
    assert [b.ops for b in plan.fusion.blocks] == [("Split", "Mul")]
