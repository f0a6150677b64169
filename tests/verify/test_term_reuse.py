"""What the verifier reuses within a tier of a rule to save time (one Z3 solver, the
results of its pure term builders) must not change what it asks Z3."""

from __future__ import annotations

from pathlib import Path

import z3

from egraph_compiler.verify import check as check_module
from egraph_compiler.verify import encode
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.normalize import canonical

from .conftest import load_inline


def test_remembered_terms_are_the_terms_a_fresh_build_gives() -> None:
    x, y = encode.dims_of("x", 3), encode.dims_of("y", 2)
    shapes = [x, y]
    fresh = encode._broadcast([list(x), list(y)])
    out, wf = encode.broadcast(shapes)
    out.append(z3.Int("junk"))  # a caller changing a result changes no later one
    wf.clear()
    again = encode.broadcast([encode.dims_of("x", 3), encode.dims_of("y", 2)])
    assert len(again[0]) == len(fresh[0]) == 3 and len(again[1]) == len(fresh[1]) == 2
    for a, b in zip(again[0] + again[1], fresh[0] + fresh[1], strict=True):
        assert a.eq(b)
    idx = [z3.Int("i0"), z3.Int("i1")]
    assert all(a.eq(b) for a, b in zip(encode.project(y, idx),
                                       [z3.If(d == 1, 0, i) for d, i in zip(y, idx, strict=True)],
                                       strict=True))
    # ints and z3 terms, True and 1 are different arguments
    assert encode.project([1, y[0]], [0, idx[0]])[1].eq(z3.If(y[0] == 1, 0, idx[0]))


def test_a_new_context_gets_new_terms() -> None:
    before = encode.dims_of("x", 2)[0]
    z3.z3._main_ctx = None  # what each verifier worker does
    after = encode.dims_of("x", 2)[0]
    assert after.ctx is z3.main_ctx() and before.ctx is not after.ctx


def test_every_check_leaves_the_tier_solver_empty(tmp_path: Path) -> None:
    # a proof, and a refutation by the solver (no fuzz): a model, a preferred model
    rules = load_inline("rule proved: Mul(Add(?a, ?b), ?c) => Add(Mul(?a, ?c), Mul(?b, ?c))\n"
                        "rule failed: Sub(?a, ?b) => Sub(?b, ?a)", tmp_path)
    sems = load_semantics(rules.ops)
    for rule in rules.rules:
        canon = canonical(rule, rules.ops)
        result = check_module.check_tier(canon, sems, "real", canon.guard, 20.0, use_fuzz=False)
        assert result.status == rule.name, result
        ((ctx, solver),) = check_module._SOLVER
        assert ctx is z3.main_ctx() and solver.num_scopes() == 0
        assert len(solver.assertions()) == 0
