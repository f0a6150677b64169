"""Where the best anchor variant depends on a dim: Z3 over the cost model's expressions
(issue 15 item 4, seed 000 §5.4.4.2).

`cost.options` prices a conv/matmul anchor's variants (direct, tiled GEMM tiles, GEMV
when a side is one row) from its sizes ``m, n, k, batch`` and the direct kernel's
work-items. The symbolic build knows each of those as a dim expression
(`shapes.symint`), so `trace_costs` runs `cost.options` itself on `Traced` numbers:
each carries the Z3 term of its derivation along with its value, every comparison the
cost model makes (a tile's size filter, a split-K's "under half the device") is
recorded as a path condition, and every estimate arrives as a Z3 real-valued term in
the dims (whole waves are integer ceil-divisions in it). Nothing in cost.py changes:
the expressions are the cost model's own arithmetic.

`decide` then asks Z3, on each box of a version of the symbolic artefact (one
variant per anchor by construction), whether (1) the path condition holds on the whole
box (the expressions are the model there) and (2) the variant the version runs costs
no more than every other option at EVERY shape of the box. A failure of (2) is a
crossover inside the box: Z3's model is a shape where another option is cheaper, and
the verdict names it (the `select` stage may still prefer the variant for its layout
costs, which these expressions do not include). Anchors whose variants use float
powers (depthwise and window kernels: ``round(k ** 0.5)``) are not traced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from egraph_compiler.backends.opencl import cost
from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.shapes import prover
from egraph_compiler.shapes.symint import expr_of

z3 = prover.z3
Z3_TIMEOUT_MS = 4000


class Untraceable(Exception):
    """The cost model did something `Traced` cannot follow (a float power)."""


class Traced:
    """A number of the cost model: its value at the traced shape and its Z3 term."""

    __slots__ = ("value", "term", "path")

    def __init__(self, value: float, term: Any, path: list) -> None:
        self.value, self.term, self.path = value, term, path

    @staticmethod
    def _parts(other: object) -> tuple[float, Any]:
        if isinstance(other, Traced):
            return other.value, other.term
        if isinstance(other, bool) or not isinstance(other, (int, float)):
            raise Untraceable(f"cost model operand {other!r}")
        return other, (z3.IntVal(other) if isinstance(other, int) else z3.RealVal(other))

    def _new(self, value: float, term: Any) -> Traced:
        return Traced(value, term, self.path)

    def __add__(self, o: object) -> Traced:
        v, t = self._parts(o)
        return self._new(self.value + v, self.term + t)

    __radd__ = __add__

    def __sub__(self, o: object) -> Traced:
        v, t = self._parts(o)
        return self._new(self.value - v, self.term - t)

    def __rsub__(self, o: object) -> Traced:
        v, t = self._parts(o)
        return self._new(v - self.value, t - self.term)

    def __mul__(self, o: object) -> Traced:
        v, t = self._parts(o)
        return self._new(self.value * v, self.term * t)

    __rmul__ = __mul__

    def __truediv__(self, o: object) -> Traced:
        v, t = self._parts(o)
        return self._new(self.value / v, _real(self.term) / _real(t))

    def __rtruediv__(self, o: object) -> Traced:
        v, t = self._parts(o)
        return self._new(v / self.value, _real(t) / _real(self.term))

    def __floordiv__(self, o: object) -> Traced:
        v, t = self._parts(o)
        if not (isinstance(self.value, int) and isinstance(v, int)) or v <= 0:
            raise Untraceable("floor division of non-integers")
        return self._new(self.value // v, self.term / t)  # Z3 Int division: floor for v > 0

    def __neg__(self) -> Traced:
        return self._new(-self.value, -self.term)

    def __pow__(self, o: object) -> Traced:
        raise Untraceable("a power in the cost model")

    def __float__(self) -> float:
        raise Untraceable("float() of a traced size")

    def _compare(self, o: object, op: str) -> bool:
        v, t = self._parts(o)
        result = {"<": self.value < v, "<=": self.value <= v, ">": self.value > v,
                  ">=": self.value >= v, "==": self.value == v, "!=": self.value != v}[op]
        term = {"<": self.term < t, "<=": self.term <= t, ">": self.term > t,
                ">=": self.term >= t, "==": self.term == t, "!=": self.term != t}[op]
        self.path.append(term if result else z3.Not(term))  # the branch the model took
        return result

    def __lt__(self, o: object) -> bool:
        return self._compare(o, "<")

    def __le__(self, o: object) -> bool:
        return self._compare(o, "<=")

    def __gt__(self, o: object) -> bool:
        return self._compare(o, ">")

    def __ge__(self, o: object) -> bool:
        return self._compare(o, ">=")

    def __eq__(self, o: object) -> bool:  # type: ignore[override]
        return self._compare(o, "==")

    def __ne__(self, o: object) -> bool:  # type: ignore[override]
        return self._compare(o, "!=")

    __hash__ = None  # type: ignore[assignment]


def _real(term: Any) -> Any:
    return z3.ToReal(term) if z3.is_int(term) else term


@dataclass(frozen=True)
class TracedCosts:
    labels: tuple[str, ...]  # `cost.Option.describe()` of each option, in order
    costs: tuple[Any, ...]  # Z3 terms over the dims, one per option
    values: tuple[float, ...]  # the estimates at the traced shape
    path: tuple[Any, ...]  # the comparisons the model made, as taken there
    facts: tuple[Any, ...]  # what the dims' floor-division atoms mean (the encoder's)
    inputs: dict[str, Dim]  # m, n, k, batch, items: their dim expressions


def trace_costs(device: cost.DeviceModel, shape: tuple,
                branches: Sequence[tuple[Dim, str, Dim, bool]] = ()) -> TracedCosts | None:
    """``cost.options`` on an anchor shape (`kernels.anchor_shape`, sizes as
    `shapes.symint.SymInt`s) with every size `Traced`; None when it cannot be traced.
    ``branches``: the comparisons computing the shape took (`symint.recording`: a
    register tile clamped to a dim, the GEMV side where a dim is 1), which bound the
    region where its expressions hold: they join the path condition."""
    sizes, direct_items, tiled_ok, gemv_side, depthwise_ok, window_taps = shape
    if depthwise_ok or window_taps:
        return None
    inputs = {**{d: expr_of(sizes[d]) for d in ("m", "n", "k", "batch")},
              "items": expr_of(direct_items)}
    if not any(isinstance(e, DimExpr) for e in inputs.values()):
        return None
    path: list = []
    encoder = prover._Encoder(z3.Solver(), {})  # terms only: the ranges come in `decide`
    for left, op, right, outcome in branches:
        a, b = encoder(left), encoder(right)
        term = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b,
                "!=": a != b}[op]
        path.append(term if outcome else z3.Not(term))

    def traced(value: int, expr: Dim) -> Traced:
        return Traced(int(value), encoder(expr), path)

    try:
        options = cost.options(device, *(traced(sizes[d], inputs[d]) for d in ("m", "n", "k", "batch")),
                               traced(direct_items, inputs["items"]), tiled_ok, gemv_side)
    except (Untraceable, TypeError):
        return None
    costs = [o.estimate_us for o in options]
    return TracedCosts(tuple(o.describe() for o in options),
                       tuple(c.term if isinstance(c, Traced) else z3.RealVal(c) for c in costs),
                       tuple(c.value if isinstance(c, Traced) else float(c) for c in costs),
                       tuple(path), tuple(encoder.solver.assertions()), inputs)


@dataclass(frozen=True)
class Verdict:
    chosen: str
    proved: bool  # ``chosen`` is no costlier than every option at every shape of the box
    note: str


def decide(traced: TracedCosts, chosen: str, box: Mapping[str, tuple[int, int]]) -> Verdict:
    """Z3 on ``box`` (dim -> inclusive range): the traced path holds everywhere, and
    ``chosen`` is the cheapest option everywhere — or the shape where it is not."""
    if chosen not in traced.labels:
        return Verdict(chosen, False, f"{chosen} is not among the traced options")
    mine = traced.costs[traced.labels.index(chosen)]
    names = sorted(box)
    dims = {n: z3.Int(n) for n in names}
    within = [c for n in names for c in (dims[n] >= box[n][0], dims[n] <= box[n][1])]
    within += traced.facts
    if not _valid(within, z3.And(*traced.path) if traced.path else z3.BoolVal(True), dims):
        return Verdict(chosen, False, "the cost model branches differently inside the box")
    for label, other in zip(traced.labels, traced.costs, strict=True):
        if label == chosen:
            continue
        solver = _solver(dims)
        solver.add(*within, other < mine)
        answer = solver.check()
        if answer == z3.sat:
            model = solver.model()
            at = ", ".join(f"{n}={model.eval(dims[n])}" for n in names)
            return Verdict(chosen, False, f"crossover: {label} is cheaper at {at}")
        if answer != z3.unsat:
            return Verdict(chosen, False, f"Z3 could not compare with {label} ({answer})")
    return Verdict(chosen, True, f"{chosen} is the cheapest of {len(traced.labels)} options "
                                 f"at every shape of the box (Z3)")


def _solver(dims: Mapping[str, Any]) -> Any:
    solver = z3.Solver()
    solver.set("timeout", Z3_TIMEOUT_MS)
    return solver


def _valid(within: Sequence[Any], claim: Any, dims: Mapping[str, Any]) -> bool:
    solver = _solver(dims)
    solver.add(*within, z3.Not(claim))
    return solver.check() == z3.unsat


def cheapest(traced: TracedCosts) -> str:
    """The option the cost model picks at the traced shape (the first of equal ones)."""
    return traced.labels[min(range(len(traced.values)), key=traced.values.__getitem__)]


@dataclass(frozen=True)
class Interval:
    low: int
    high: int
    variant: str  # proved the cheapest at every value of ``low..high`` (Z3)


def solve_intervals(trace_at: Callable[[int], TracedCosts | None], dim: str, low: int,
                    high: int) -> list[Interval] | None:
    """The crossovers of an anchor along ``dim`` (the other dims held): from ``low`` up,
    the cost model's pick at the first value, held as far as Z3 proves it cheapest over
    the traced expressions (a binary search over the interval's end), then the next.
    ``trace_at(value)``: the anchor's traced costs with ``dim`` at value. None when
    some value cannot be traced."""
    result: list[Interval] = []
    start = low
    while start <= high:
        traced = trace_at(start)
        if traced is None:
            return None
        best = cheapest(traced)
        good, bad = start, high + 1  # proved up to ``good``; not proved at ``bad`` or beyond
        while bad - good > 1:
            middle = (good + bad) // 2
            if decide(traced, best, {dim: (start, middle)}).proved:
                good = middle
            else:
                bad = middle
        if result and result[-1].variant == best:  # the path changed, the pick did not
            result[-1] = Interval(result[-1].low, good, best)
        else:
            result.append(Interval(start, good, best))
        start = good + 1
    return result
