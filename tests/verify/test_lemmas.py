"""The lemmas the verifier uses (egraph_compiler/verify/lemmas.py) are proved by Z3
where they hold and not where they do not, and the proofs that need them go through:
a reduction split at a Concat boundary, a max through QuantizeLinear, the
uninterpreted-scalar (IEEE) proof of a pure re-indexing of Softmax."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from egraph_compiler import verify
from egraph_compiler.verify.lemmas import _prove_split, quantize_is_monotone, split_reduction
from egraph_compiler.verify.scalar import AbstractDomain


@pytest.mark.parametrize("tier", ["real", "int"])
@pytest.mark.parametrize("kind", ["sum", "mean", "prod", "max", "min"])
def test_split_lemma_is_proved_in_exact_tiers(tier: str, kind: str) -> None:
    assert split_reduction(tier, kind)


def test_split_lemma_fails_without_associativity() -> None:
    # an uninterpreted + (the IEEE pre-pass) is not associative: the proof must fail
    assert not _prove_split(AbstractDomain("fp32"), "sum")
    assert not split_reduction("fp32", "sum")


def test_quantize_linear_is_monotone() -> None:
    assert quantize_is_monotone()


SPLIT_RULES = [
    # a sum over the concatenated axis is the sum over each part (the split lemma)
    "ReduceSum(Concat(?a, ?b, axis=0), axes=[0], keepdims=0)"
    " => Add(ReduceSum(?a, axes=[0], keepdims=0), ReduceSum(?b, axes=[0], keepdims=0))"
    " when rank(?a) == 2",
    # and the max of the maxima (its partial results pair as for the sum)
    "ReduceMax(Concat(?a, ?b, axis=1), axes=[1], keepdims=1)"
    " => Max(ReduceMax(?a, axes=[1], keepdims=1), ReduceMax(?b, axes=[1], keepdims=1))"
    " when rank(?a) == 2",
]


@pytest.mark.parametrize("text", SPLIT_RULES)
def test_reduction_over_a_concat_is_split(check: Callable[..., list[verify.Verdict]],
                                          text: str) -> None:
    (v,) = check(f"rule r: {text}", timeout_s=30, suggest_guards=False, machine_tiers=False)
    assert v.ok, verify.render_text([v])


def test_wrong_split_is_refuted(check: Callable[..., list[verify.Verdict]]) -> None:
    (v,) = check("rule r: ReduceSum(Concat(?a, ?b, axis=0), axes=[0], keepdims=0)"
                 " => Add(ReduceSum(?a, axes=[0], keepdims=0), ReduceSum(?a, axes=[0],"
                 " keepdims=0)) when rank(?a) == 2", timeout_s=30, suggest_guards=False,
                 machine_tiers=False)
    assert v.status == "failed" and v.counterexample is not None
    assert v.counterexample.replay == "CONFIRMED", verify.render_text([v])


def test_relu_through_quantize_is_an_integer_max(
        check: Callable[..., list[verify.Verdict]]) -> None:
    # Q(Relu(DQ(x))) = max(x, z): the max with 0 goes through QuantizeLinear's monotonicity
    (v,) = check("rule r: QuantizeLinear(Relu(DequantizeLinear(?x, ?s, ?z)), ?s, ?z)"
                 " => Max(?x, ?z) when positive(?s) and rank(?s) == 0 and rank(?z) == 0",
                 timeout_s=30, suggest_guards=False, machine_tiers=False)
    assert v.ok, verify.render_text([v])


def test_softmax_over_a_flattened_axis_is_bit_exact(
        check: Callable[..., list[verify.Verdict]]) -> None:
    # softmax-unflatten (rules/layout.dnnr) re-indexes only: every IEEE tier proves it
    # through the uninterpreted-scalar pre-pass, whose induction pairs the two sums
    (v,) = check("rule r [exact]: Reshape(Softmax(Flatten(?x, axis=?a), axis=-1), ?t,"
                 " allowzero=0) => Softmax(?x, axis=?a) when ?a >= 0 and ?a < rank(?x)"
                 " and flatten_shape(shape(?x), ?a)[1] == dim(?x, ?a)"
                 " and reshape_shape(flatten_shape(shape(?x), ?a), ?t) == shape(?x)",
                 timeout_s=30, suggest_guards=False)
    assert v.ok and v.tiers == ("real", "bf16", "fp16", "fp32"), verify.render_text([v])
