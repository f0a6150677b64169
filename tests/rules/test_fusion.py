"""rules/fusion.dnnr: DNNFusion Table 3.3 as data — complete, and coloured as the text
around the table says (seed 000 §3.3.2)."""

from __future__ import annotations

import itertools

import pytest

from egraph_compiler import dsl
from egraph_compiler.dsl.builtins import MAPPING_CLASSES
from egraph_compiler.fusion.tables import FusionTables
from tests.rules.support import RULES

RULESET = dsl.load_rules([RULES / "fusion.dnnr"])
TABLE = {(e.first, e.second): (e.result, e.verdict) for e in RULESET.fusion}
TYPES = tuple(MAPPING_CLASSES)
LAYOUT = ("reorganize", "shuffle")
HEAVY = ("one_to_many", "many_to_many")


def test_file_is_clean() -> None:
    assert dsl.check([RULES / "fusion.dnnr"]) == []


def test_every_pair_has_exactly_one_cell() -> None:
    pairs = [(e.first, e.second) for e in RULESET.fusion]
    assert sorted(pairs) == sorted(itertools.product(TYPES, TYPES))


def test_break_cells_have_no_result_and_the_others_do() -> None:
    for (first, second), (result, verdict) in TABLE.items():
        assert (result is None) == (verdict == "break"), (first, second)


@pytest.mark.parametrize("other", TYPES)
def test_one_to_one_fuses_with_anything_and_takes_the_other_type(other: str) -> None:
    # "One-to-One has the lowest transformation impedance": green, the other type wins.
    assert TABLE["one_to_one", other] == (other, "fuse")
    assert TABLE[other, "one_to_one"] == (other, "fuse")


def test_red_cells_are_the_two_the_text_names() -> None:
    # Expand followed by Conv, and Conv followed by Conv: unprofitable.
    red = sorted(pair for pair, (_, verdict) in TABLE.items() if verdict == "break")
    assert red == [("many_to_many", "many_to_many"), ("one_to_many", "many_to_many")]


def test_yellow_cells_are_layout_with_heavy_and_many_to_many_then_one_to_many() -> None:
    expected = {(a, b) for a in LAYOUT for b in HEAVY} | {(b, a) for a in LAYOUT for b in HEAVY}
    expected.add(("many_to_many", "one_to_many"))
    yellow = {pair for pair, (_, verdict) in TABLE.items() if verdict == "profile"}
    assert yellow == expected


def test_fused_types_follow_the_printed_table() -> None:
    # Rows of the printed table read as FIRST operator (see the file header).
    printed = {
        "one_to_many": ("one_to_many", "one_to_many", None, "one_to_many", "one_to_many"),
        "many_to_many": ("many_to_many", "many_to_many", None, "many_to_many", "many_to_many"),
        "reorganize": ("reorganize", "one_to_many", "many_to_many", "reorganize", "reorganize"),
        "shuffle": ("shuffle", "one_to_many", "many_to_many", "reorganize", "shuffle"),
    }
    columns = ("one_to_one", "one_to_many", "many_to_many", "reorganize", "shuffle")
    for first, row in printed.items():
        for second, result in zip(columns, row, strict=True):
            assert TABLE[first, second][0] == result, (first, second)


def test_the_fusion_stage_reads_the_table() -> None:
    tables = FusionTables.from_ruleset(dsl.load_rules([RULES]))
    assert tables.verdict("many_to_many", "one_to_many") == ("many_to_many", "profile")
    assert tables.verdict("one_to_many", "many_to_many") == (None, "break")
    assert tables.mapping_of("Conv") == "many_to_many"
    assert tables.mapping_of("Transpose") == "shuffle"
