"""`facts.term_shape`: the e-graph's view of a term (output 0, variadic operands as a
list, optional ones possibly unknown) mapped onto the shapes stage's rules."""

from __future__ import annotations

from egraph_compiler import dsl
from egraph_compiler.egraph.facts import term_shape
from egraph_compiler.egraph.schema import schemas
from egraph_compiler.ir import DimExpr
from tests.egraph.helpers import OPERATORS

N = DimExpr.symbol("N")
SCHEMAS = schemas(dsl.load_rules([OPERATORS]).ops)


def test_variadic_operands_are_the_node_inputs_in_order() -> None:
    assert term_shape(SCHEMAS["Concat"], [[(N, 2), (N, 3), (N, 1)]], {"axis": 1}, {}) == (N, 6)
    assert term_shape(SCHEMAS["Max"], [[(N, 1), (1, 4)]], {}, {}) == (N, 4)
    assert term_shape(SCHEMAS["Concat"], [None], {"axis": 1}, {}) is None


def test_split_term_is_output_zero_whose_count_only_split_tells() -> None:
    assert term_shape(SCHEMAS["Split"], [(N, 6)], {"axis": 1, "split": (2, 4)}, {}) == (N, 2)
    assert term_shape(SCHEMAS["Split"], [(N, 6)], {"axis": 1}, {}) is None


def test_value_inputs_and_absent_optional_inputs() -> None:
    assert term_shape(SCHEMAS["Reshape"], [(N, 6), (2,)], {}, {1: (0, 3, -1)}) == (N, 3, 2)
    assert term_shape(SCHEMAS["Conv"], [(N, 3, 8, 8), (4, 3, 3, 3), None], {}, {}) == (N, 4, 6, 6)
