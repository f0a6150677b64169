"""The e-graph's domain for guards and computed attributes (`dsl.guard_eval`, the one
evaluator the verifier shares).

A guard sees attribute values and, for each tensor variable, the facts the e-graph
holds for its class (`TensorFacts`). A comparison of symbolic dims is decided by
`shapes.decide` (canonical form, bounds, then Z3 under the graph's dim ranges).
Anything undecided — a missing fact, a symbolic comparison the prover cannot settle, a
built-in rejecting its arguments — makes the guard false: never assume. Element facts
and `is_const` are decided natively in egglog (`lower.py`), never here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from egraph_compiler.dsl import guard_eval
from egraph_compiler.dsl.ast import Expr
from egraph_compiler.dsl.guard_eval import Undecided as Unknown
from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.shapes import decide as decide_dims

__all__ = ["BOOL_FACTS", "TENSOR_FACTS", "EGraphDomain", "TensorFacts", "Unknown", "evaluate",
           "holds", "value_of"]


@dataclass(frozen=True, slots=True)
class TensorFacts:
    shape: tuple[Dim, ...] | None = None
    dtype: str | None = None
    value: tuple[Dim, ...] | None = None  # value of a small int constant


TENSOR_FACTS = tuple(f for f in guard_eval.TENSOR_FACTS if f != "is_const")
BOOL_FACTS = ("is_const", *guard_eval.ELEMENT_FACTS)


class EGraphDomain(guard_eval.GuardDomain):
    """Tensor facts from the e-graph's analyses; symbolic values are `DimExpr`s."""

    def __init__(self, tensors: dict[str, TensorFacts]) -> None:
        self.tensors = tensors

    def _known(self, var: str, fact: str) -> Any:
        """One fact (``shape``, ``dtype``, ``value``) of ``?var``; Unknown where not known."""
        if var not in self.tensors:
            raise Unknown(f"?{var}")
        known = getattr(self.tensors[var], fact)
        if known is None:
            raise Unknown("tensor value" if fact == "value" else fact)
        return known

    def shape(self, var: str) -> Sequence[Any]:
        return self._known(var, "shape")

    def rank(self, var: str) -> int:
        return len(self.shape(var))

    def dtype(self, var: str) -> str:
        return self._known(var, "dtype")

    def tensor_value(self, var: str) -> Sequence[Any]:
        return self._known(var, "value")

    def is_symbolic(self, value: Any) -> bool:
        return isinstance(value, DimExpr)

    def compare_symbolic(self, op: str, a: Any, b: Any) -> Any:
        # the shapes stage's prover, under the graph's dim ranges
        answer = True if op == "==" and a == b else decide_dims(op, a, b)
        if answer is None:
            raise Unknown(f"symbolic {op}")
        return answer

    def arith_symbolic(self, op: str, a: Any, b: Any) -> Any:
        try:
            return guard_eval.ARITH[op](a, b)
        except (TypeError, ValueError, ZeroDivisionError):
            raise Unknown(op) from None

    def negate_symbolic(self, a: Any) -> Any:
        return -a


def _split(env: dict[str, object]) -> tuple[dict[str, object], EGraphDomain]:
    attrs = {k: v for k, v in env.items() if not isinstance(v, TensorFacts)}
    tensors = {k: v for k, v in env.items() if isinstance(v, TensorFacts)}
    return attrs, EGraphDomain(tensors)


def evaluate(expr: Expr, env: dict[str, object]) -> object:
    """Value of ``expr``; ``env`` binds attribute variables to values and tensor
    variables to `TensorFacts` (used bare they mean their small int value). Raises
    `Unknown` when undecidable."""
    attrs, domain = _split(env)
    return guard_eval.evaluate(expr, attrs, domain)


def value_of(value: object) -> object:
    """A tensor variable used as a value means its (small int constant) value."""
    if isinstance(value, TensorFacts):
        if value.value is None:
            raise Unknown("tensor value")
        return value.value
    return value


def holds(expr: Expr, env: dict[str, object]) -> bool:
    """Guard truth: undecided counts as false."""
    attrs, domain = _split(env)
    return guard_eval.holds(expr, attrs, domain)
