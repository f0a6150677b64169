"""The built-in encodings added for the shipped library (Reshape target values,
Flatten, Gemm, Conv, Softmax) prove small true rules of their own; the mutation
suite (mutations.dnnr) shows that each still refutes wrong ones."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from egraph_compiler import verify

TRUE_RULES = [
    # -1 is inferred from the element count, 0 copies the input dim
    "Flatten(?x, axis=1) => Reshape(?x, vector([dim(?x, 0), -1]), allowzero=0)",
    "Reshape(?x, ?s, allowzero=0) => Flatten(?x, axis=1)"
    " when rank(?x) == 3 and len(?s) == 2 and ?s[0] == 0 and ?s[1] == -1",
    # Gemm with transA is MatMul of the transposed operand
    "Gemm(?a, ?b, alpha=1.0, beta=1.0, transA=1, transB=0)"
    " => MatMul(Transpose(?a, perm=[1, 0]), ?b)",
    # Conv is linear in its weights, whatever the geometry
    "Neg(Conv(?x, ?w, auto_pad=?ap, dilations=?d, group=?g, kernel_shape=?k, pads=?p,"
    " strides=?s)) => Conv(?x, Neg(?w), auto_pad=?ap, dilations=?d, group=?g,"
    " kernel_shape=?k, pads=?p, strides=?s)",
    # Softmax is invariant under a scalar shift
    "Softmax(Add(?x, ?c), axis=-1) => Softmax(?x, axis=-1) when rank(?c) == 0",
]


@pytest.mark.parametrize("text", TRUE_RULES)
def test_true_rule_is_proved(check: Callable[..., list[verify.Verdict]], text: str) -> None:
    (v,) = check(f"rule r: {text}", timeout_s=30, suggest_guards=False, machine_tiers=False)
    assert v.ok, verify.render_text([v])


def _query_text(canon: object, sides: object, idx: list[object]) -> list[str]:
    """Everything a check of ``sides`` asserts, as text: shapes, guard, both values."""
    vl, dl = sides.enc.value_of(canon.lhs, idx)
    vr, dr = sides.enc.value_of(canon.rhs, idx)
    enc = sides.enc
    facts = (enc.background() + sides.wf_lhs + [sides.guard] + sides.wf_rhs + enc.bounds
             + [vl, dl, vr, dr] + [term for cells in enc.touched.values() for _, term in cells]
             + [term for _, _, term in enc.domain.terms])
    return [f.sexpr() for f in facts] + [r.key for r in enc.reductions]


def test_a_forked_shape_stage_encodes_what_a_fresh_encoder_does() -> None:
    """`check._build` encodes a configuration's shapes once and forks the encoder per
    induction mode: after the plain (unrolled) encoding has run on its fork, every
    mode's fork gives the same assertions, term for term, as a fresh encoder."""
    import z3

    from egraph_compiler import dsl
    from egraph_compiler.verify.builtin_ops import load_semantics
    from egraph_compiler.verify.check import _build, _encode_shapes, _Sides, check_tier
    from egraph_compiler.verify.configs import enumerate_configs
    from egraph_compiler.verify.normalize import canonical

    from .conftest import ROOT

    ruleset = dsl.load_rules([str(ROOT / "rules")])
    sems = load_semantics(ruleset.ops)
    (rule,) = [r for r in ruleset.rules if r.name == "bn-fold-gemm"]  # a Gemm and Sqrt
    canon = canonical(rule, {n: s.decl for n, s in sems.items()})
    check_tier(canon, sems, "real", canon.guard, 0.0, use_fuzz=False)  # clears the caches
    compared = 0
    for config, role in list(enumerate_configs(canon, sems, (0, 1, 2), canon.guard))[:40]:
        plain = _build(canon, sems, "real", config, canon.guard)
        if plain is None or role != "values":
            continue
        idx = [z3.Int(f"i{k}") for k in range(len(plain.lhs_dims))]
        _query_text(canon, plain, idx)  # mutates the plain fork only
        m = z3.Int("m")
        for mode in ("prefix", "base", "step"):
            forked = _build(canon, sems, "real", config, canon.guard, mode, m)
            stage = _encode_shapes(canon, sems, "real", config, canon.guard, mode, m)
            assert forked is not None and stage is not None
            enc, guard_term, lhs_dims, wf_lhs, rhs_dims, wf_rhs, error = stage
            fresh = _Sides(enc, guard_term, lhs_dims, wf_lhs, rhs_dims, wf_rhs, error)
            assert forked.enc.mode == mode
            assert _query_text(canon, forked, idx) == _query_text(canon, fresh, idx), mode
            compared += 1
    assert compared >= 6  # several configurations, three modes each
