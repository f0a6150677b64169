"""Shared by the OpenCL backend tests: static-shape graphs from ONNX models."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from egraph_compiler.backends.opencl import build, load
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.ir import Graph, TensorType, load_onnx, to_onnx
from egraph_compiler.plan import plan_memory


def with_static_inputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs have the shapes of ``feeds``."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for info in model.graph.input:
        if info.name in feeds:
            dims = info.type.tensor_type.shape.dim
            for dim, size in zip(dims, feeds[info.name].shape, strict=False):
                dim.Clear()
                dim.dim_value = int(size)
    del model.graph.value_info[:]
    return model


def infer_types(graph: Graph) -> Graph:
    """`shapes.infer_shapes` when it exists; otherwise ONNX's own shape inference."""
    try:
        from egraph_compiler.shapes import infer_shapes  # type: ignore[attr-defined]
    except ImportError:
        infer_shapes = None
    if infer_shapes is not None:
        return infer_shapes(graph)
    model = onnx.shape_inference.infer_shapes(to_onnx(graph), strict_mode=True)
    types = dict(graph.types)
    for info in [*model.graph.value_info, *model.graph.output, *model.graph.input]:
        tensor = info.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        types[info.name] = TensorType(dtype, tuple(d.dim_value for d in tensor.shape.dim))
    return replace(graph, types=types)


def static_graph(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> Graph:
    return infer_types(load_onnx(with_static_inputs(model, feeds)))


def build_one_anchor_block(model: onnx.ModelProto, params: Any, out: Path
                           ) -> tuple[Any, dict[str, np.ndarray], list[dict[str, Any]]]:
    """``model`` fused, planned and built into ``out`` with ``params`` on random inputs
    (seed 3); asserts every launch belongs to one block (prologue and epilogue fused into
    the anchor). Returns the loaded artefact, its feeds and its launches."""
    rng = np.random.default_rng(3)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    build(plan_memory(plan_fusion(static_graph(model, feeds))), out, params)
    compiled = load(out)
    launches = compiled.plan["launches"]
    assert len({launch["block"] for launch in launches}) == 1, \
        "prologue and epilogue fuse into the anchor"
    return compiled, feeds, launches
