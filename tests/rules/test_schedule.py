"""rules/schedule.dnnr: the library loads as one, the schedule bounds the symmetric and
algebraic rulesets, and the shipped schedule optimises a real block (ResNet basic
block: Conv-BN-ReLU, Conv-BN, Add, ReLU) to the cost its rules imply."""

from __future__ import annotations

import dataclasses

import pytest

from egraph_compiler import dsl, egraph, extract, ir, shapes
from egraph_compiler.dsl.ast import Limits, Repeat, RunTimes, Saturate, ScheduleStep
from egraph_compiler.extract.cost import numel
from tests.modelzoo import assert_close, random_inputs, residual_block, run_ort
from tests.rules.support import RULES, run_graph

LIBRARY = dsl.load_rules([RULES])


def test_library_is_clean() -> None:
    assert dsl.check([RULES]) == []


def _steps(steps: tuple[ScheduleStep, ...], times: int = 1):  # noqa: ANN202 - generator
    for step in steps:
        if isinstance(step, Repeat):
            yield from _steps(step.body, times * step.times)
        else:
            yield step, times


def test_schedule_saturates_only_terminating_rulesets() -> None:
    declared = {r.name for r in LIBRARY.rulesets}
    steps = list(_steps(LIBRARY.schedule))
    assert steps
    for step, _ in steps:
        assert set(step.rulesets) <= declared
        if isinstance(step, Saturate):
            # exports: each rule replaces a chain by one operator no rule expands again
            assert set(step.rulesets) <= {"fold", "layout", "exports"}, step
    # commutativity once; algebra a few bounded iterations (DESIGN §3)
    runs = {name: 0 for name in ("commute", "algebra")}
    for step, times in steps:
        if isinstance(step, RunTimes):
            for name in set(step.rulesets) & set(runs):
                runs[name] += step.times * times
    assert runs["commute"] == 1
    assert 1 <= runs["algebra"] <= 4
    assert LIBRARY.limits.nodes <= 50_000


@pytest.fixture(scope="module")
def residual():  # noqa: ANN201 - (model, before, saturation, after)
    model = residual_block(channels=4)
    before = shapes.infer_shapes(ir.load_onnx(model))
    rules = dataclasses.replace(LIBRARY, limits=Limits(nodes=50_000, iterations=30, seconds=240.0))
    saturation = egraph.saturate(before, rules)
    return model, before, saturation, extract.extract(saturation).graph


def test_shipped_schedule_folds_both_batch_norms(residual) -> None:  # noqa: ANN001
    _, before, saturation, after = residual
    assert not saturation.stats.stop_reason.startswith("limit:"), saturation.stats.stop_reason
    assert sorted(after.op_counts().items()) == [("Add", 1), ("Conv", 2), ("Relu", 2)]
    bn_outputs = [n.outputs[0] for n in before.nodes if n.op == "BatchNormalization"]
    bn_flops = sum(2 * numel(before.types[o].shape, before.symbols, 64) for o in bn_outputs)
    saved = extract.graph_cost(before).flops - extract.graph_cost(after).flops
    assert saved == bn_flops


def test_shipped_schedule_matches_onnxruntime(residual) -> None:  # noqa: ANN001
    model, _, _, after = residual
    feeds = random_inputs(model, seed=3, dims={"batch": 2, "height": 5, "width": 6})
    assert_close(run_graph(after, feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)
