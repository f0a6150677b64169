"""The OpenCL layout PBQP: one node per block, every intermediate decided together; the
optimum is never worse than the local, chain-DP or per-tensor choices, and each
choice's artefact still matches onnxruntime on PoCL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from egraph_compiler.backends.opencl import KernelParams, compile_graph, load
from egraph_compiler.backends.opencl.pricing import pricing
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.select import Problem, layout_problem, select_layouts
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import BLOCKS, assert_close, channel_attention_block, random_inputs, run_ort

DIMS = {"batch": 2, "height": 7, "width": 9, "seq": 5}


def _per_tensor_picks(problem: Problem, columns: dict, perms: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """The per-tensor rule's decisions as picks of the PBQP (row-major where it decided nothing)."""
    picks = {}
    for n in problem.nodes:
        stored = columns[n.name].stored
        matching = [k for k in range(len(n.options))
                    if all(t.candidates[ks[k]] == perms.get(t.value, t.candidates[0]) for t, ks in stored)]
        picks[n.name] = matching[0]
    return picks


@pytest.mark.parametrize("name", [*sorted(BLOCKS), "channel_attention"])
def test_pbqp_is_certified_and_never_worse_than_the_baselines(name: str) -> None:
    model = channel_attention_block() if name == "channel_attention" else BLOCKS[name]()
    graph = static_graph(model, random_inputs(model, 0, dims=DIMS))
    plan, selection = select_layouts(plan_fusion(graph, layouts=False))
    assert selection.gap == 0 and selection.seconds < 1.0
    assert selection.objective <= selection.local_objective
    if selection.chain_objective is not None:
        assert selection.objective <= selection.chain_objective
    problem, columns = layout_problem(plan_fusion(graph, layouts=False))
    rule = {c.value: c.perm for c in plan_fusion(graph).layouts}
    assert selection.objective <= problem.evaluate(_per_tensor_picks(problem, columns, rule))
    # every intermediate some block reads got a recorded decision
    decided = {c.value for c in plan.layouts}
    assert decided == {t.value for cols in columns.values() for t, _ in cols.stored}


def test_channel_reduction_makes_global_beat_local_and_runs(tmp_path: Path) -> None:
    """A conv output reduced over channels: alone, the conv writes row-major (its cheapest
    store); together with its reader, channels go innermost. All three choices run on
    PoCL and match onnxruntime; plan.json records the PBQP."""
    model = channel_attention_block(channels=5, out_channels=48)
    feeds = random_inputs(model, 1, dims=DIMS)
    model = with_static_inputs(model, feeds)
    graph = static_graph(model, feeds)
    fusion_plan = plan_fusion(graph, layouts=False)
    _, selection = select_layouts(fusion_plan, pricing=pricing(fusion_plan, KernelParams()))
    assert selection.objective < selection.local_objective and selection.problem.unit.startswith("µs")
    expected = run_ort(model, feeds)
    for policy in ("pbqp", "local", "chain-dp"):
        artefact = compile_graph(graph, tmp_path / policy, layouts=policy)
        doc = json.loads((tmp_path / policy / "plan.json").read_text())
        assert doc["select"]["objective"] == artefact.select["objective"] == round(selection.objective, 3)
        perms = {v: tuple(p) for b in doc["blocks"] for v, p in b["layouts"].items()}
        assert (list(perms.values()) == [(0, 2, 3, 1)]) == (policy != "local"), perms
        assert_close(load(tmp_path / policy).run(feeds), expected, rtol=1e-3, atol=1e-4)


def test_unknown_policy_is_a_clear_error() -> None:
    model = channel_attention_block()
    graph = static_graph(model, random_inputs(model, 0, dims=DIMS))
    with pytest.raises(ValueError, match="unknown policy 'best'"):
        select_layouts(plan_fusion(graph, layouts=False), policy="best")
