"""Issue 12, rank-generic soundness: permutations are symbolic from rank 3 on
(`verify/perm.py`), so Transpose rules are verified to rank 6; MatMul chains are
proved for every length by the contraction normal form (`verify/contraction.py`)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import z3

from egraph_compiler import verify
from egraph_compiler.dsl import builtins as dsl_builtins
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.check import check_tier
from egraph_compiler.verify.contraction import METHOD
from egraph_compiler.verify.normalize import canonical
from egraph_compiler.verify.perm import one_hot_perm, sym_compose, sym_invert, sym_is_identity

from .conftest import load_inline


def _model_of(perms: dict[str, tuple[int, ...]]) -> z3.ModelRef:
    solver = z3.Solver()
    for name, perm in perms.items():
        for k, axis in enumerate(perm):
            for m in range(len(perm)):
                solver.add(z3.Bool(f"perm_{name}_{k}_{m}") == (m == axis))
    assert solver.check() == z3.sat
    return solver.model()


def _ints(model: z3.ModelRef, terms: list[z3.ArithRef]) -> tuple[int, ...]:
    return tuple(model.eval(t, model_completion=True).as_long() for t in terms)


@pytest.mark.parametrize("rank", [3, 6])
def test_symbolic_perm_arithmetic_is_the_e_graphs(rank: int) -> None:
    """compose / invert / is_identity over one-hot perms evaluate, on concrete perms,
    to what the e-graph's built-ins compute (`dsl.builtins`)."""
    rng = np.random.default_rng(rank)
    p, q = one_hot_perm(f"tp{rank}", rank), one_hot_perm(f"tq{rank}", rank)
    conditions: list[z3.BoolRef] = []
    composed = sym_compose(p, q, conditions.append)
    inverse = sym_invert(p, conditions.append)
    identity = sym_is_identity(p, conditions.append)
    perms = list(itertools.permutations(range(rank)))
    for _ in range(12):
        pv = perms[rng.integers(len(perms))]
        qv = perms[rng.integers(len(perms))]
        model = _model_of({f"tp{rank}": pv, f"tq{rank}": qv})
        assert _ints(model, p) == pv
        assert _ints(model, composed) == dsl_builtins.compose(pv, qv)
        assert _ints(model, inverse) == dsl_builtins.invert(pv)
        assert z3.is_true(model.eval(identity)) == dsl_builtins.is_identity(pv)
        assert all(z3.is_true(model.eval(c)) for c in conditions)  # both are perms


@pytest.mark.parametrize(("name", "rank"), [("m-rank-perm-fix-three", 5),
                                            ("m-rank-perm-fix-four", 6)])
def test_the_solver_refutes_a_perm_rule_true_up_to_rank_four(tmp_path: Path, name: str,
                                                            rank: int) -> None:
    """True wherever perms were enumerated (rank <= 4); the symbolic perm of rank
    ``rank`` gives a counterexample that NumPy confirms, without the fuzz."""
    guard = " and ".join(f"?p[{k}] == {k}" for k in range(rank - 2))
    ruleset = load_inline(f"rule {name}: Transpose(?x, perm=?p) => ?x "
                          f"when len(?p) == rank(?x) and {guard}", tmp_path)
    sems = load_semantics(ruleset.ops)
    canon = canonical(ruleset.rules[0], ruleset.ops)
    assert check_tier(canon, sems, "real", canon.guard, 20.0, use_fuzz=False,
                      max_rank=rank - 1).status == "proved"
    result = check_tier(canon, sems, "real", canon.guard, 20.0, use_fuzz=False, max_rank=rank)
    assert result.status == "failed", result
    cex = result.counterexample
    assert cex is not None and cex.replay == "CONFIRMED", cex
    (x,) = cex.inputs
    assert len(x.shape) == rank
    perm = json.loads(dict(cex.attrs)["?p"])
    assert sorted(perm) == list(range(rank)) and perm != list(range(rank))


ASSOCIATIVE = """
rule row: MatMul(MatMul(?v, ?b), ?c) => MatMul(?v, MatMul(?b, ?c)) when rank(?v) == 1 and rank(?b) == 2
rule transposed:
    Transpose(MatMul(MatMul(?a, ?b), ?c), perm=[1, 0])
    => MatMul(Transpose(?c, perm=[1, 0]), MatMul(Transpose(?b, perm=[1, 0]), Transpose(?a, perm=[1, 0])))
    when rank(?a) == 2 and rank(?b) == 2 and rank(?c) == 2
rule fp [exact]: MatMul(MatMul(?a, ?b), ?c) => MatMul(?a, MatMul(?b, ?c)) when rank(?a) == 2 and rank(?b) == 2 and rank(?c) == 2
rule swapped: MatMul(MatMul(?a, ?b), ?c) => MatMul(?a, MatMul(?c, ?b)) when rank(?a) == 2 and rank(?b) == 2 and rank(?c) == 2
"""


def test_matmul_associativity_is_proved_for_every_length(check) -> None:  # type: ignore[no-untyped-def]
    verdicts = {v.rule: v for v in check(ASSOCIATIVE, suggest_guards=False)}
    for name in ("row", "transposed"):
        v = verdicts[name]
        assert v.ok and v.tiers == ("real",) and v.methods == (METHOD,), v
    # the method is in `dnnr verify --json`
    data = json.loads(verify.render_json(list(verdicts.values())))
    assert {d["rule"]: d["methods"] for d in data["verdicts"]}["row"] == [METHOD]
    # over the reals only: the IEEE tiers round (ab)c and a(bc) differently
    fp = verdicts["fp"]
    assert fp.status == "failed" and fp.tiers == ("real",), fp
    assert fp.counterexample is not None and fp.counterexample.replay == "CONFIRMED"
    assert fp.counterexample.tier in ("bf16", "fp16", "fp32")
    # a wrong association is not proved by the normal form: refuted, confirmed
    swapped = verdicts["swapped"]
    assert swapped.status == "failed" and swapped.methods == (), swapped
    assert swapped.counterexample is not None and swapped.counterexample.replay == "CONFIRMED"
