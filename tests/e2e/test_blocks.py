"""Transformer and modern-CNN blocks, built the way exporters emit them.

Symbolic ``batch``/``seq`` dims with run-time shape computations
(Shape→Gather→Concat→Reshape): the compiled model keeps the dims symbolic and is
checked at three concrete shapes against onnxruntime on the original model.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
import pytest

from egraph_compiler import ir, pipeline
from tests import modelzoo
from tests.modelzoo import assert_close, random_inputs, run_ort

RULES = pipeline.load_rules()
LAYOUT_OPS = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten")
SHAPE_OPS = ("Shape", "Gather", "Concat", "Unsqueeze")

IMAGE_DIMS = [{"batch": 1, "height": 7, "width": 7}, {"batch": 2, "height": 13, "width": 9},
              {"batch": 3, "height": 16, "width": 16}]

# (builder, dims at which to check, whether SmartMem says layout ops can go at graph level)
BLOCKS: dict[str, tuple[Callable[[], onnx.ModelProto], list[dict[str, int]], bool]] = {
    "mha": (modelzoo.mha_block, [{"batch": 1, "seq": 5}, {"batch": 2, "seq": 7}, {"batch": 3, "seq": 16}], False),
    "layernorm": (modelzoo.layernorm_block, [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 9}, {"batch": 4, "seq": 3}], False),
    "gelu": (modelzoo.gelu_block, [{"batch": 1, "seq": 2}, {"batch": 3, "seq": 5}, {"batch": 2, "seq": 31}], False),
    "encoder": (modelzoo.transformer_encoder_block, [{"batch": 1, "seq": 4}, {"batch": 2, "seq": 13}, {"batch": 5, "seq": 8}], False),
    # Swin: Reshape∘Reshape of the partition merge (SmartMem Table 5: Reshape + Reshape → one).
    "swin": (modelzoo.swin_window_block, [{"batch": 1}, {"batch": 2}, {"batch": 3}], True),
    "conv_bn_relu": (modelzoo.conv_bn_relu_block, IMAGE_DIMS, False),
    "depthwise_separable": (modelzoo.depthwise_separable_block, IMAGE_DIMS, False),
    "residual": (modelzoo.residual_block, IMAGE_DIMS, False),
}


def count(graph_or_counts: dict[str, int], ops: tuple[str, ...]) -> int:
    return sum(graph_or_counts.get(op, 0) for op in ops)


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_block_compiles_symbolically_and_matches(name: str) -> None:
    build, shapes_to_check, layout_can_drop = BLOCKS[name]
    model = build()
    optimised, report = pipeline.optimize(ir.load_onnx(model), RULES)
    exported = ir.to_onnx(optimised)
    onnx.checker.check_model(exported, full_check=True)

    # Dims stay symbolic: the exported input keeps every dim_param of the original.
    original_params = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
    exported_params = [d.dim_param for d in exported.graph.input[0].type.tensor_type.shape.dim]
    assert exported_params == original_params

    for seed, dims in enumerate(shapes_to_check):
        inputs = random_inputs(model, seed=seed, dims=dims)
        assert_close(run_ort(exported, inputs), run_ort(model, inputs), rtol=1e-4, atol=1e-5)

    before, after = report.nodes_before, report.nodes_after
    assert sum(after.values()) <= sum(before.values())
    assert count(after, LAYOUT_OPS) <= count(before, LAYOUT_OPS)
    if layout_can_drop:
        assert count(after, LAYOUT_OPS) < count(before, LAYOUT_OPS), (before, after)
    if count(before, ("Shape",)):
        # Run-time shape arithmetic on known (symbolic) dims is folded away.
        assert count(after, SHAPE_OPS) < count(before, SHAPE_OPS), (before, after)
