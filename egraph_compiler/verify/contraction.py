"""MatMul chains proved for every length: a contraction normal form (issue 12).

The induction of `check.py` handles one reduction per side; a chain of MatMuls nests
them (``(A·B)·C`` sums inside a sum), and nested reductions were only unrolled for
lengths <= 4. Here both sides are lowered to an einsum: a sum over bound index
variables of a product of indexed tensor elements,

    MatMul(MatMul(A, B), C)[i, l] = Σ_t Σ_s A[i, s] · B[s, t] · C[t, l]
    MatMul(A, MatMul(B, C))[i, l] = Σ_s Σ_t A[i, s] · B[s, t] · C[t, l]

by merging nested sums (a product of finite sums is the sum of the products: Σ_s a_s ·
Σ_t b_t = Σ_{s,t} a_s · b_t), and the two sums are compared up to a renaming of their
bound indices (exchanging finite sums) and the order of their factors: the rule holds
for every length if some bijection of the bound indices maps each extent to an equal
one and each factor to a factor of the same tensor read at the same index, which Z3
checks for symbolic dims, batch broadcasting (``If(dim == 1, 0, i)``) and the rank-1
operands of ONNX MatMul included (the index terms are the encoder's own).

These steps are identities of real arithmetic (commutativity and associativity of +
and ·, distributivity): the proof is for the ``real`` tier only. In IEEE arithmetic
the two sides round differently (``(a·b)·c`` sums in another order than ``a·(b·c)``),
so such a rule is proved over the reals, not bit-exact: ``[exact]`` fails in the fp
tiers with a counterexample, and ``--fp strict`` leaves the (unmarked) rule out.
Anything else (another operator, a symbolic perm, no matching) returns None and the
rule takes the usual path (induction, then lengths <= 4).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import z3

from egraph_compiler.dsl import ast
from egraph_compiler.verify.builtin_ops import matmul_operand_indices
from egraph_compiler.verify.encode import Encoder
from egraph_compiler.verify.semantics import OpSemantics

METHOD = "contraction normal form"  # the proof method `dnnr verify --json` reports
MAX_BOUND = 5  # bound indices per side: at most 5! renamings are tried
CONTRACTING = ("matmul", "transpose")  # built-ins this normal form lowers


class NotAContraction(Exception):
    """The pattern is not a product of indexed tensors summed over indices."""


@dataclass
class Contraction:
    """Σ over ``bound`` (index variable, extent) of the product of ``factors`` (tensor
    variable, index terms)."""

    bound: list[tuple[Any, Any]]
    factors: list[tuple[str, tuple[Any, ...]]]


def applies(canon: Any, sems: dict[str, OpSemantics]) -> bool:
    """Both sides are MatMuls (and concrete Transposes) of tensor variables, with at
    least one MatMul: the rule is a statement about contractions."""
    ops = [sems[op].builtin for op in canon.ops]
    return (bool(ops) and all(b is not None and b.name in CONTRACTING for b in ops)
            and any(b is not None and b.name == "matmul" for b in ops))


class _Lowering:
    def __init__(self, enc: Encoder, sems: dict[str, OpSemantics], prefix: str) -> None:
        self.enc = enc
        self.sems = sems
        self.prefix = prefix
        self.count = 0

    def fresh(self) -> Any:
        self.count += 1
        return z3.Int(f"sum_{self.prefix}{self.count}")

    def lower(self, p: ast.Pattern, idx: list[Any]) -> Contraction:
        if isinstance(p, ast.PVar) and not p.name.startswith("#"):
            return Contraction([], [(p.name, tuple(idx))])
        if not isinstance(p, ast.POp):
            raise NotAContraction(f"{type(p).__name__} in a contraction")
        builtin = self.sems[p.op].builtin
        if builtin is not None and builtin.name == "transpose":
            perm = builtin.perm(self.enc.attrs(p), len(idx))  # type: ignore[attr-defined]
            if any(isinstance(axis, z3.ExprRef) for axis in perm):
                raise NotAContraction("a symbolic perm")
            j: list[Any] = [0] * len(idx)
            for k, axis in enumerate(perm):
                j[axis] = idx[k]
            return self.lower(p.inputs[0], j)
        if builtin is None or builtin.name != "matmul" or len(p.inputs) != 2:
            raise NotAContraction(f"{p.op} is not a contraction")
        # the index arithmetic of `builtin_ops.MatMul.value`, shared
        a, b = p.inputs
        a_dims, _ = self.enc.shape_of(a)
        b_dims, _ = self.enc.shape_of(b)
        t = self.fresh()
        a_index, b_index = matmul_operand_indices(a_dims, b_dims, list(idx), t)
        left = self.lower(a, a_index)
        right = self.lower(b, b_index)
        return Contraction([(t, a_dims[-1]), *left.bound, *right.bound],
                           left.factors + right.factors)


def prove(canon: Any, sems: dict[str, OpSemantics], enc: Encoder, idx: list[Any],
          facts: list[Any], check: Any) -> bool:
    """Both sides of ``canon`` are equal at the output index ``idx`` for every length,
    under ``facts`` (the rule's assumptions: dims, well-formedness, guard, ``idx`` in
    bounds). ``check(facts) -> str`` is Z3's answer on a list of facts ("unsat"...)."""
    try:
        lhs = _Lowering(enc, sems, "l").lower(canon.lhs, idx)
        rhs = _Lowering(enc, sems, "r").lower(canon.rhs, idx)
    except NotAContraction:
        return False
    if (len(lhs.bound) != len(rhs.bound) or len(lhs.bound) > MAX_BOUND
            or sorted(v for v, _ in lhs.factors) != sorted(v for v, _ in rhs.factors)):
        return False
    ranges = [z3.And(t >= 0, t < e) for t, e in lhs.bound]
    equal_extent: dict[tuple[int, int], bool] = {}

    def same_extent(k: int, m: int) -> bool:
        if (k, m) not in equal_extent:
            a, b = lhs.bound[k][1], rhs.bound[m][1]
            equal_extent[(k, m)] = check(facts + [a != b]) == "unsat"
        return equal_extent[(k, m)]

    for order in itertools.permutations(range(len(rhs.bound))):
        # rhs bound index order[k] is renamed to lhs bound index k
        if not all(same_extent(k, m) for k, m in enumerate(order)):
            continue
        renaming = [(rhs.bound[m][0], lhs.bound[k][0]) for k, m in enumerate(order)]
        renamed = [(v, tuple(z3.substitute(z3.IntVal(0) + i, *renaming) if renaming
                             else z3.IntVal(0) + i for i in index))
                   for v, index in rhs.factors]
        for matched in _matchings(lhs.factors, renamed):
            same_reads = [a == b for (_, ia), (_, ib) in matched
                          for a, b in zip(ia, ib, strict=True)]
            if check(facts + ranges + [z3.Not(z3.And(*same_reads))]) == "unsat":
                return True
    return False


def _matchings(left: list[tuple[str, tuple[Any, ...]]], right: list[tuple[str, tuple[Any, ...]]]
               ) -> list[list[tuple[tuple[str, tuple[Any, ...]], tuple[str, tuple[Any, ...]]]]]:
    """Every pairing of the factors of ``left`` with those of ``right`` that pairs equal
    tensor variables (a tensor read twice can pair either way)."""
    out: list[list[Any]] = []
    for order in itertools.permutations(range(len(right))):
        pairs = [(left[k], right[m]) for k, m in enumerate(order)]
        if all(a[0] == b[0] for a, b in pairs):
            out.append(pairs)
        if len(out) >= 24:
            break
    return out
