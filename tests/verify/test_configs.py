"""The configuration enumeration prunes rank combinations early (`configs._rank_combinations`)
without changing which configurations are checked."""

from __future__ import annotations

import itertools

import pytest

from egraph_compiler import dsl
from egraph_compiler.dsl import ast
from egraph_compiler.dsl.ast import RuleSet
from egraph_compiler.verify import configs
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.normalize import canonical, subpatterns

from .conftest import ROOT


@pytest.fixture(scope="module")
def library() -> RuleSet:
    return dsl.load_rules([str(ROOT / "rules")])


# rules with many tensor variables whose left sides are ill-formed at most ranks (Gemm
# and BatchNormalization operands), with axes, with Concat and Slice
@pytest.mark.parametrize("name", ["bn-fold-gemm", "bn-fold-gemm-transb", "concat-slices",
                                  "reduce-sum-add", "slice-concat-first", "gelu-tanh-fold"])
def test_pruned_rank_combinations_keep_every_well_formed_one(library: RuleSet,
                                                              name: str) -> None:
    sems = load_semantics(library.ops)
    rule = next(r for r in library.rules if r.name == name)
    canon = canonical(rule, {n: s.decl for n, s in sems.items()})
    top = 2  # 3 ** 7 combinations for the unpruned reference: fast enough here
    choices = [tuple(range(top + 1))] * len(canon.tensor_vars)
    nodes = [p for p in subpatterns(canon.lhs) if isinstance(p, ast.POp)]

    def fits(combo: tuple[int, ...]) -> bool:
        ranks = dict(zip(canon.tensor_vars, combo, strict=True))
        return configs._lhs_ranks_fit(canon, sems, ranks, nodes, top)

    reference = [c for c in itertools.product(*choices) if fits(c)]
    pruned = list(configs._rank_combinations(canon, sems, choices, top))
    assert [c for c in pruned if fits(c)] == reference
    assert reference, name  # the rule applies at some ranks
    if name.startswith("bn-fold-gemm"):  # Gemm's operands are pruned before BN's
        assert len(pruned) < len(list(itertools.product(*choices))) / 5
