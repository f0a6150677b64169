"""Permutations as symbolic index maps: Transpose at every rank without enumerating perms.

Up to `SYMBOLIC_FROM_RANK - 1` a Transpose's perm variable is enumerated (every
permutation, and the absent ``[]``: `configs.py`); from that rank on it is one list of
Z3 Ints ``p_0 .. p_{r-1}`` with ``Distinct(p)`` and ``0 <= p_k < r`` (the left side is
well-formed only on a permutation), so one configuration per rank covers all ``r!``
permutations. A rule over permutations is then a statement of axis arithmetic:

- the output dim ``k`` of ``Transpose(x, p)`` is ``dim(x, p_k)``: a selection by a
  symbolic index (`select`);
- its element at index ``i`` reads ``x`` at ``j`` with ``j[p_k] = i_k``, i.e.
  ``j_m = i_k`` for the one ``k`` with ``p_k = m`` (`read_index`);
- ``compose(p, q)_k = p[q_k]``, ``invert(p)_m = the k with p_k = m``,
  ``is_identity(p) = And(p_k == k)``, ``permute(v, p)_k = v[p_k]``.

Z3 proves such a rule for all permutations at once (``Transpose(Transpose(x, p), q)``
reads ``x`` at ``j`` with ``j[p[q_k]] = i_k``, the same index as ``compose(p, q)``
gives), and a model is a concrete permutation, replayed in NumPy like any other
counterexample. Which attributes are so encoded is `dsl.normalize.SYMBOLIC_LIST_ATTRIBUTES`
(the e-graph's rank guard reads it too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import z3

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.normalize import SYMBOLIC_LIST_ATTRIBUTES
from egraph_compiler.verify.builtin_ops import Transpose
from egraph_compiler.verify.encode import SYMBOLIC_LIST, Cell, Dims, Encoder, Illformed
from egraph_compiler.verify.evalexpr import NotApplicable, evaluate

SYMBOLIC_FROM_RANK = 3  # below it, perms are enumerated (1 or 2 of them, and the absent [])

Require = Callable[[Any], None]


def is_symbolic_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and any(isinstance(v, z3.ExprRef) for v in value)


def _key(term: Any) -> tuple[int, int]:
    """A term's identity: its context (a worker process makes a fresh one, whose ids
    restart) and its id there. The registries below keep their terms, and so their
    contexts, alive: neither number is reused while an entry exists."""
    return id(term.ctx), term.get_id()


def _term(value: Any) -> Any:
    return z3.IntVal(value) if isinstance(value, int) else value


def one_hot_perm(name: str, length: int) -> list[Any]:
    """A symbolic perm as Int terms over one-hot Booleans ``B[k][m]`` (``p_k == m``):
    ``p_k = If(B[k][0], 0, If(B[k][1], 1, ...))``. Every comparison of an entry with an
    axis number is pushed down to those Booleans (`equals_axis`), so Z3 reasons about
    perms propositionally: an Int perm with `Distinct` took 14 s on transpose-fold's
    rank-6 index check, the one-hot one takes about a second."""
    _forget_if_full()
    rows = [[z3.Bool(f"perm_{name}_{k}_{m}") for m in range(length)] for k in range(length)]
    out: list[Any] = []
    for row in rows:
        term: Any = z3.IntVal(length - 1)
        for m in range(length - 2, -1, -1):
            term = z3.If(row[m], m, term)
        _ONE_HOT[_key(term)] = (term, row)  # the term is kept: its id stays its own
        out.append(term)
    return out


# a one-hot perm entry's term id -> (the term, its Booleans); Z3 shares equal terms, so
# an entry rebuilt for another encoding of the same rule finds its row here
_ONE_HOT: dict[tuple[int, int], tuple[Any, list[Any]]] = {}


def equals_axis(term: Any, m: int, memo: dict[tuple[int, int], Any] | None = None) -> Any:
    """``term == m`` with the comparison pushed through ``If`` to its leaves (constants
    fold to True/False; a one-hot perm entry becomes its Booleans)."""
    if isinstance(term, int):
        return z3.BoolVal(term == m)
    if z3.is_int_value(term):
        return z3.BoolVal(term.as_long() == m)
    memo = {} if memo is None else memo
    key = (term.get_id(), m)
    if key in memo:
        return memo[key]
    one_hot = _ONE_HOT.get(_key(term))
    chosen = _SELECTS.get(_key(term))
    if one_hot is not None and one_hot[0].eq(term):
        row = one_hot[1]
        out = row[m] if 0 <= m < len(row) else z3.BoolVal(False)
    elif chosen is not None and chosen[0].eq(term):
        # exactly one k has index == k: the choices are exclusive, not "first true"
        _, index, values = chosen
        out = z3.Or(*[z3.And(equals_axis(index, k, memo), equals_axis(_term(v), m, memo))
                      for k, v in enumerate(values)])
    elif z3.is_app_of(term, z3.Z3_OP_ITE):
        cond, then, other = term.children()
        a, b = equals_axis(then, m, memo), equals_axis(other, m, memo)
        if z3.is_true(a) and z3.is_false(b):
            out = cond
        elif z3.is_false(a) and z3.is_true(b):
            out = z3.Not(cond)
        elif z3.is_false(a) and z3.is_false(b):
            out = z3.BoolVal(False)
        else:
            out = z3.If(cond, a, b)
    else:
        out = term == m
    memo[key] = out
    return out


def select(values: Sequence[Any], index: Any) -> Any:
    """``values[index]`` for a symbolic ``index`` (in range: the caller's condition)."""
    if isinstance(index, int):
        return values[index]
    memo: dict[tuple[int, int], Any] = {}
    out = _term(values[-1])
    for k in range(len(values) - 2, -1, -1):
        out = z3.If(equals_axis(index, k, memo), _term(values[k]), out)
    _SELECTS[_key(out)] = (out, index, list(values))
    return out


# a selection's term id -> (the term, the index, the values): `equals_axis` reads it as
# the exclusive choice it is
_SELECTS: dict[tuple[int, int], tuple[Any, Any, list[Any]]] = {}


# perms built by compose / invert -> the perms they were built from: the result is a
# permutation exactly where those are (a composition or inverse of bijections is one),
# which spares Z3 re-deriving it from the entries (19 s for compose at rank 6)
_BUILT: dict[tuple[tuple[int, int], ...], tuple[list[Any], tuple[Sequence[Any], ...]]] = {}
# Forgetting entries is safe, only slower: each shortcut is equivalent, under the
# permutation conditions every encoding states, to the plain reading of its terms.
REGISTRY_LIMIT = 100_000


def _forget_if_full() -> None:
    for registry in (_ONE_HOT, _SELECTS, _BUILT):
        if len(registry) > REGISTRY_LIMIT:
            registry.clear()


def _built_from(result: list[Any], *sources: Sequence[Any]) -> list[Any]:
    key = tuple(_key(_term(v)) for v in result)
    _BUILT[key] = (result, sources)  # the terms are kept: their ids stay their own
    return result


def is_permutation(p: Sequence[Any]) -> Any:
    """``p`` holds each of 0 .. len(p) - 1 once: every entry one axis, every axis taken
    by one entry (pseudo-Boolean over `equals_axis`)."""
    n = len(p)
    built = _BUILT.get(tuple(_key(_term(v)) for v in p))
    if built is not None and all(a.eq(_term(b)) for a, b in zip(built[0], p, strict=True)):
        return z3.And(*[is_permutation(source) for source in built[1]])
    memo: dict[tuple[int, int], Any] = {}
    hits = [[equals_axis(_term(v), m, memo) for m in range(n)] for v in p]
    rows = [z3.PbEq([(h, 1) for h in row], 1) for row in hits]
    cols = [z3.PbEq([(hits[k][m], 1) for k in range(n)], 1) for m in range(n)]
    return z3.And(*rows, *cols)


def read_index(idx: Sequence[Any], p: Sequence[Any]) -> list[Any]:
    """The input index ``j`` a Transpose by ``p`` reads at output index ``idx``:
    ``j[p_k] = idx_k`` (for a permutation ``p``, each ``m`` is some ``p_k``)."""
    n = len(p)
    memo: dict[tuple[int, int], Any] = {}
    out: list[Any] = []
    for m in range(n):
        j = _term(idx[n - 1])
        for k in range(n - 2, -1, -1):
            j = z3.If(equals_axis(_term(p[k]), m, memo), _term(idx[k]), j)
        out.append(j)
    return out


# ---------------------------------------------------------------- guard built-ins
def sym_compose(p: Sequence[Any], q: Sequence[Any], require: Require) -> list[Any]:
    if len(p) != len(q):
        raise NotApplicable(f"compose of perms of lengths {len(p)} and {len(q)}")
    require(is_permutation(p))
    require(is_permutation(q))
    return _built_from([select(p, qk) for qk in q], p, q)


def sym_invert(p: Sequence[Any], require: Require) -> list[Any]:
    require(is_permutation(p))
    n = len(p)
    out: list[Any] = []
    for m in range(n):
        k_of_m: Any = z3.IntVal(n - 1)
        for k in range(n - 2, -1, -1):
            k_of_m = z3.If(equals_axis(_term(p[k]), m), k, k_of_m)
        out.append(k_of_m)
    return _built_from(out, p)


def sym_is_identity(p: Sequence[Any], require: Require) -> Any:
    memo: dict[tuple[int, int], Any] = {}
    return z3.And(*[equals_axis(_term(v), k, memo) for k, v in enumerate(p)]) if p \
        else z3.BoolVal(True)


def sym_permute(values: Sequence[Any], p: Sequence[Any], require: Require) -> list[Any]:
    if len(values) != len(p):
        raise NotApplicable(f"permute of {len(values)} values by a perm of length {len(p)}")
    require(is_permutation(p))
    return [select(values, pk) for pk in p]


PERM_BUILTINS: dict[str, Callable[..., Any]] = {
    "compose": sym_compose, "invert": sym_invert, "is_identity": sym_is_identity,
    "permute": sym_permute,
}


# ---------------------------------------------------------------- Transpose
class SymbolicTranspose(Transpose):
    """`builtin_ops.Transpose`, with its perm a list of Z3 Ints from `SYMBOLIC_FROM_RANK`
    on (see the module docstring)."""

    symbolic_lists = tuple(SYMBOLIC_LIST_ATTRIBUTES.get(Transpose.name, ()))

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        if attr in self.symbolic_lists and in_ranks and in_ranks[0] >= SYMBOLIC_FROM_RANK:
            return [[], SYMBOLIC_LIST]  # absent (reversed axes), or any permutation
        return super().attr_domain(attr, in_ranks)

    @staticmethod
    def list_length(attrs: dict[str, Any], rank: int) -> int:
        return rank

    @staticmethod
    def symbolic_list(name: str, length: int) -> list[Any]:
        return one_hot_perm(name, length)

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if attrs.get("perm") == SYMBOLIC_LIST:  # the rank enumeration: any perm of this rank
            return in_ranks[0]
        return super().out_rank(in_ranks, attrs)

    @staticmethod
    def perm(attrs: dict[str, Any], rank: int) -> list[int]:
        perm = attrs.get("perm")
        if perm == SYMBOLIC_LIST:  # a replay needs a value: the Z3 model gives one
            raise Illformed("a symbolic perm has no value to replay")
        if is_symbolic_list(perm):
            if len(perm) != rank:
                raise Illformed(f"a perm of length {len(perm)} for rank {rank}")
            return list(perm)
        return Transpose.perm(attrs, rank)

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        perm = self.perm(attrs, len(dims[0]))
        if not is_symbolic_list(perm):
            return super().shape(enc, node, dims, attrs)
        return [select(dims[0], p) for p in perm], [is_permutation(perm)]

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        perm = self.perm(attrs, len(idx))
        if not is_symbolic_list(perm):
            return super().value(enc, node, attrs, idx)
        return enc.value_of(node.inputs[0], read_index(idx, perm))

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        if attrs.get("perm") == SYMBOLIC_LIST:  # no value drawn for it: nothing to replay
            raise Illformed("a symbolic perm has no value to replay")
        return super().numpy(inputs, attrs)


def sample_perms(canon: Any, sems: dict[str, Any], config: Any,
                 rng: np.random.Generator) -> dict[str, list[int]]:
    """A random permutation for each perm variable the configuration leaves symbolic,
    so that the NumPy fuzz tries the ranks the solver covers symbolically too."""
    from egraph_compiler.verify.configs import rank_of
    from egraph_compiler.verify.normalize import subpatterns

    attrs = dict(config.attrs)
    chosen: dict[str, list[int]] = {}
    for node in subpatterns(canon.lhs):
        if not isinstance(node, ast.POp):
            continue
        builtin = sems[node.op].builtin
        for name, expr in node.attrs:
            if (isinstance(builtin, SymbolicTranspose) and name in builtin.symbolic_lists
                    and isinstance(expr, ast.Var) and attrs.get(expr.name) == SYMBOLIC_LIST
                    and expr.name not in chosen):
                try:
                    rank = rank_of(node.inputs[0], sems, config.rank_of, attrs)
                except Exception:  # ill-ranked here: the trial is skipped anyway
                    continue
                named = _named_perm(canon.guard, expr.name, config)
                if named is None or len(named) != rank:
                    # the identity a quarter of the time: guards that fix axes want it
                    named = (list(range(rank)) if rng.random() < 0.25
                             else [int(a) for a in rng.permutation(rank)])
                chosen[expr.name] = named
    return chosen


def _named_perm(guard: ast.Expr | None, var: str, config: Any) -> list[int] | None:
    """The perm a guard conjunct ``?var == E`` names for these ranks (MatMul's
    transpose rules swap the last two axes), if any: a random one rarely is it."""
    from egraph_compiler.dsl.normalize import conjuncts
    from egraph_compiler.verify.configs import _RankFacts

    for c in conjuncts(guard):
        if not (isinstance(c, ast.BinOp) and c.op == "==" and isinstance(c.lhs, ast.Var)
                and c.lhs.name == var):
            continue
        try:
            value = evaluate(c.rhs, {}, _RankFacts(config.rank_of))
        except Exception:  # not decided by ranks alone
            continue
        if (isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value)
                and sorted(value) == list(range(len(value)))):
            return list(value)
    return None
