"""Acceptance on whole models: the selection is proved optimal (gap 0), never worse than
the local or chain-DP choice, and solved in under a second, for the OpenCL layout
problem of the nine light models and the Hexagon instruction problem of QDQ-quantised
models; and a 1,000-node residual-shaped graph reduces completely in under a second."""

from __future__ import annotations

import random

import onnx
import pytest

from egraph_compiler.backends.hexagon import _choose_families
from egraph_compiler.backends.hexagon.lower import lower_qdq
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.select import Problem, Selection, edge, node, select_layouts, solve
from tests.backends.hexagon.test_models import _quantise, _static, _through_quant_rules
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import (
    LIGHT_MODELS,
    conv_pointwise_block,
    depthwise_separable_block,
    light_model,
    random_inputs,
    randomize_weights,
    residual_block,
    transformer_encoder_block,
)


def _certified(selection: Selection) -> None:
    assert selection.gap == 0, selection.to_json(decisions=False)
    assert selection.objective <= selection.local_objective
    if selection.chain_objective is not None:
        assert selection.objective <= selection.chain_objective
    assert selection.seconds < 1.0


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_opencl_layouts_of_light_models(name: str) -> None:
    model = light_model(name)
    feeds = random_inputs(model, 0)
    graph = static_graph(with_static_inputs(model, feeds), feeds)
    fusion_plan = plan_fusion(graph, layouts=False)
    assert sum(len(b.nodes) for b in fusion_plan.blocks) <= 1000
    _, selection = select_layouts(fusion_plan)
    _certified(selection)
    assert selection.solver == "reductions"  # CNN-shaped graphs reduce completely


QUANTISED = {
    "conv_pointwise": lambda: conv_pointwise_block(channels=11, out_channels=13, seed=4),
    "residual": lambda: residual_block(channels=16, seed=2),
    "depthwise_separable": lambda: depthwise_separable_block(channels=16, out_channels=32, seed=3),
    "transformer_encoder": lambda: transformer_encoder_block(),
    "squeezenet": lambda: randomize_weights(light_model("squeezenet"), 0),
}


@pytest.mark.parametrize("name", sorted(QUANTISED))
def test_hexagon_instruction_choice_of_quantised_models(name: str, tmp_path) -> None:
    model = _static(QUANTISED[name](), {"batch": 1, "height": 9, "width": 7, "seq": 8})
    path = _quantise(model, tmp_path, seed=2)
    lowered = lower_qdq(_through_quant_rules(path))
    _, choices, selection = _choose_families(lowered)
    assert set(choices) == {n.name for n in selection.problem.nodes} and choices
    assert len(onnx.load(path).graph.node) <= 1000
    _certified(selection)


def test_thousand_node_residual_graph_reduces_in_under_a_second() -> None:
    """A chain with skip edges every third node (ResNet/Transformer-shaped), 6 options
    per node, conversions free only between equal layouts: R0/R1/R2 alone solve it."""
    rng = random.Random(1)
    n, k = 1000, 6
    pairs = [(i, i + 1) for i in range(n - 1)] + [(i, i + rng.randint(2, 4)) for i in range(0, n - 5, 3)]
    nodes = [node(f"n{i}", [str(a) for a in range(k)], [rng.randint(0, 100) for _ in range(k)])
             for i in range(n)]
    edges = [edge(f"n{a}", f"n{b}", [[0 if x == y else rng.randint(1, 60) for y in range(k)]
                                     for x in range(k)]) for a, b in pairs]
    selection = solve(Problem(tuple(nodes), tuple(edges)))
    assert selection.solver == "reductions" and selection.reductions["core"] == 0
    _certified(selection)
    assert selection.objective < selection.chain_objective < selection.local_objective
