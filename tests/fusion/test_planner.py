"""Fusion planning (Listing 3.1) on the light models and the model-zoo blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from egraph_compiler import dsl
from egraph_compiler.fusion import FusionTables, plan_fusion
from egraph_compiler.fusion.tables import BREAK, FUSE, MANY_TO_MANY, ONE_TO_ONE
from egraph_compiler.ops import shipped
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import BLOCKS, LIGHT_MODELS, light_model, random_inputs

LAYOUT_OPS = shipped().with_role("layout")  # the registry's layout operators

BASELINE = Path(__file__).resolve().parents[1] / "backends" / "opencl" / "fusion_baseline.json"
DIMS = {"batch": 2, "height": 7, "width": 7, "seq": 5}


def _graph(name: str):  # noqa: ANN202
    model = BLOCKS[name]() if name in BLOCKS else light_model(name)
    return static_graph(model, random_inputs(model, 0, dims=DIMS))


def test_default_table_follows_table_3_3() -> None:
    tables = FusionTables.shipped()
    assert tables.verdict(ONE_TO_ONE, MANY_TO_MANY) == (MANY_TO_MANY, FUSE)
    assert tables.verdict(MANY_TO_MANY, ONE_TO_ONE) == (MANY_TO_MANY, FUSE)
    assert tables.verdict(MANY_TO_MANY, MANY_TO_MANY)[1] == BREAK


@pytest.mark.parametrize("name", sorted(LIGHT_MODELS))
def test_light_model_fusion_rate_meets_baseline(name: str) -> None:
    plan = plan_fusion(_graph(name))
    baseline = json.loads(BASELINE.read_text())[name]
    print(f"{name}: {plan.operator_count} operators -> {plan.kernel_count} kernels "
          f"(rate {plan.fusion_rate:.2f})")
    assert plan.kernel_count < plan.operator_count
    assert plan.fusion_rate >= baseline["fusion_rate"] - 1e-3
    for block in plan.blocks:  # at most one anchor per block (m2m then m2m is red)
        assert sum(op in ("Conv", "MatMul", "Gemm") for op in block.ops) <= 1


@pytest.mark.parametrize("name", ["light_shufflenet", "swin_window", "mha"])
def test_layout_operators_between_blocks_are_eliminated(name: str) -> None:
    """SmartMem Table 5: a Transpose/Reshape next to another operator never runs alone."""
    name = name.removeprefix("light_")
    plan = plan_fusion(_graph(name))
    layout_ops = [op for b in plan.blocks for op in b.ops if op in LAYOUT_OPS]
    assert layout_ops, "the model has layout operators to eliminate"
    for block in plan.blocks:
        assert not all(op in LAYOUT_OPS for op in block.ops), block.ops


def test_fusion_off_gives_one_block_per_operator() -> None:
    graph = _graph("residual")
    plan = plan_fusion(graph, fuse=False)
    assert plan.kernel_count == plan.operator_count == len(graph.nodes)


def test_mapping_types_come_from_the_rule_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    """No Python copy of Table 3.2: edit operators.dnnr and the plan follows it."""
    rules = Path(dsl.rules_dir())
    for source in ("operators.dnnr", "fusion.dnnr"):
        text = (rules / source).read_text()
        if source == "operators.dnnr":
            declared = "op Relu(x)          : one_to_one"
            assert declared in text
            text = text.replace(declared, "op Relu(x)          : many_to_many")
        (tmp_path / source).write_text(text)
    graph = _graph("conv_bn_relu")
    fused = plan_fusion(graph)
    assert any("Conv" in b.ops and "Relu" in b.ops for b in fused.blocks), fused.blocks
    monkeypatch.setenv("DNNR_RULES", str(tmp_path))
    assert FusionTables.shipped().mapping_of("Relu") == MANY_TO_MANY
    split = plan_fusion(graph)  # Conv then Relu is now Many-to-Many twice: red
    assert not any("Conv" in b.ops and "Relu" in b.ops for b in split.blocks), split.blocks
