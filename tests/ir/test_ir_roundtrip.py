"""load_onnx → to_onnx keeps meaning: the exported model matches onnxruntime on the ORIGINAL.

Light models with shipped (0.02 fill) and seeded random weights; the builder blocks at
three concrete (batch, seq / height, width) bindings, exported with symbolic dims kept.
"""

from __future__ import annotations

import onnx
import pytest

from egraph_compiler.ir import check_graph, load_onnx, to_onnx
from tests.modelzoo import (
    BLOCKS,
    LIGHT_MODELS,
    assert_close,
    light_model,
    random_inputs,
    randomize_weights,
    run_ort,
)

# Random-weight variants of all nine models go through import and export in
# tests/e2e/test_light_models.py (with the optimiser in between); here the large
# ones (vgg19 is 574 MB of weights) would only repeat that at the suite's cost.
ROUND_TRIPS = [(name, "shipped") for name in LIGHT_MODELS] + [
    (name, "random") for name in ("squeezenet", "shufflenet", "inception_v1")]


@pytest.mark.parametrize(("name", "weights"), ROUND_TRIPS)
def test_light_model_round_trip_matches_onnxruntime(name: str, weights: str) -> None:
    model = light_model(name)
    if weights == "random":
        model = randomize_weights(model, seed=3)
    original = model.SerializeToString()  # serialised once: big random weights are slow to copy
    graph = load_onnx(original)
    check_graph(graph, require_types=False)
    assert not {"Dropout", "Identity", "ConstantOfShape", "Constant"} & set(graph.op_counts())
    raw = to_onnx(graph).SerializeToString()
    onnx.checker.check_model(raw, full_check=True)
    inputs = random_inputs(model, seed=5)
    assert_close(run_ort(raw, inputs), run_ort(original, inputs), rtol=1e-4, atol=1e-5)


BINDINGS = ({"batch": 1, "seq": 3, "height": 5, "width": 6},
            {"batch": 2, "seq": 8, "height": 8, "width": 8},
            {"batch": 5, "seq": 17, "height": 3, "width": 11})


def _symbolic_dims(model: onnx.ModelProto) -> list[list[str | int]]:
    return [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(model.graph.input) + list(model.graph.output)]


@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_block_round_trip_at_three_shapes(block: str) -> None:
    model = BLOCKS[block]()
    exported = to_onnx(load_onnx(model))
    onnx.checker.check_model(exported, full_check=True)
    assert _symbolic_dims(exported) == _symbolic_dims(model)
    assert any(isinstance(d, str) for dims in _symbolic_dims(exported) for d in dims)
    for dims in BINDINGS:
        inputs = random_inputs(model, seed=1, dims=dims)
        assert_close(run_ort(exported, inputs), run_ort(model, inputs), rtol=1e-4, atol=1e-5)


def test_identity_output_keeps_its_name() -> None:
    """A removed Identity that produced a graph output renames its source, not the output."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"]),
             helper.make_node("Identity", ["x"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    imported = load_onnx(model)
    assert [o.name for o in imported.outputs] == ["y", "z"]
    assert imported.op_counts() == {"Identity": 1, "Relu": 1}
    inputs = random_inputs(model, seed=0)
    assert_close(run_ort(to_onnx(imported), inputs), run_ort(model, inputs))
