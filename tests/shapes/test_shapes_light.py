"""Shapes of every value in every light model, against onnx.shape_inference."""

from __future__ import annotations

import onnx
import pytest

from egraph_compiler.ir import check_graph, load_onnx
from egraph_compiler.shapes import infer_shapes
from tests.modelzoo import LIGHT_MODELS, light_model


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_model_shapes_agree_with_onnx(name: str) -> None:
    model = light_model(name)
    graph = infer_shapes(load_onnx(model))
    check_graph(graph)  # every value typed, names unique, topological order
    reference = onnx.shape_inference.infer_shapes(model).graph
    compared = 0
    for info in list(reference.value_info) + list(reference.output):
        tensor_type = info.type.tensor_type
        if info.name not in graph.types or not tensor_type.HasField("shape"):
            continue
        expected = tuple(d.dim_value for d in tensor_type.shape.dim)
        assert graph.types[info.name].shape == expected, info.name
        assert graph.types[info.name].dtype == onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
        compared += 1
    computed = {o for n in graph.nodes for o in n.outputs}
    assert compared >= 0.9 * len(computed), f"only {compared} of {len(computed)} values compared"
    assert all(isinstance(d, int) for t in graph.types.values() for d in t.shape)
