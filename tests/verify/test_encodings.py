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
