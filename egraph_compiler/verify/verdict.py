"""Data-only results of `dnnr verify`: one `Verdict` per rule (imports nothing above it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

# Stages of the refinement check, in the order they run. A verdict names the
# first stage that failed ("" when the rule is proved).
Stage = Literal["", "semantics", "applicability", "shape", "definedness", "value"]
Status = Literal["proved", "failed", "unknown"]
Replay = Literal["CONFIRMED", "SPURIOUS", ""]


@dataclass(frozen=True, slots=True)
class TensorValue:
    """A concrete input or result tensor of a counterexample (values as nested lists)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    values: tuple[float | int, ...]  # row-major

    def render(self) -> str:
        if not self.shape:
            return f"{self.name}: {self.dtype}[] = {_fmt(self.values[0])}"
        vals = ", ".join(_fmt(v) for v in self.values[:16])
        more = ", ..." if len(self.values) > 16 else ""
        dims = "x".join(str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}] = [{vals}{more}]"


def _fmt(value: float | int, exact: bool = False) -> str:
    """Rounded to 6 significant digits (``-1.61``, not ``-1.6099999999999999``);
    ``exact``: the shortest text that reads back as the same float."""
    if isinstance(value, float):
        if exact or not math.isfinite(value):
            return repr(value)
        if value == int(value) and abs(value) < 1e15:
            return f"{value:.1f}"
        return f"{value:.6g}"
    return str(value)


def _differs(a: float | int, b: float | int) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) != math.isnan(b)
        if a == 0 and b == 0:
            return math.copysign(1, a) != math.copysign(1, b)
    return a != b


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    for dim in reversed(shape):
        out.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return tuple(reversed(out))


@dataclass(frozen=True, slots=True)
class Counterexample:
    """Inputs that break a rule, the two sides' results and the NumPy replay's label."""

    tier: str
    inputs: tuple[TensorValue, ...]
    attrs: tuple[tuple[str, str], ...]
    lhs: TensorValue | None  # None: undefined or ill-formed
    rhs: TensorValue | None
    replay: Replay
    explanation: str

    def render(self, indent: str = "    ") -> str:
        lines = [f"counterexample ({self.tier}, replayed in NumPy: {self.replay}): "
                 f"{self.explanation}"]
        for attr, value in self.attrs:
            lines.append(f"  {attr} = {value}")
        for tensor in self.inputs:
            lines.append(f"  {tensor.render()}")
        lines.append("  LHS = " + (self.lhs.render().split(" = ", 1)[1] if self.lhs
                                   else "undefined"))
        lines.append("  RHS = " + (self.rhs.render().split(" = ", 1)[1] if self.rhs
                                   else "undefined"))
        first = self.first_difference()
        if first is not None and self.lhs is not None and self.rhs is not None:
            k, where = first
            lines.append(f"  differs at {list(where)}: LHS {_fmt(self.lhs.values[k], True)}, "
                         f"RHS {_fmt(self.rhs.values[k], True)}")
        return "\n".join(indent + line for line in lines)

    def first_difference(self) -> tuple[int, tuple[int, ...]] | None:
        """The first element (flat position, index) where both sides are defined, of one
        shape, and differ (NaN and the sign of zero count)."""
        if self.lhs is None or self.rhs is None or self.lhs.shape != self.rhs.shape:
            return None
        for k, (a, b) in enumerate(zip(self.lhs.values, self.rhs.values, strict=False)):
            if _differs(a, b):
                return k, _index(k, self.lhs.shape)
        return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome for one rule. ``ok`` is what gates `dnnr compile --verified-only`."""

    rule: str
    location: str
    status: Status
    stage: Stage = ""
    tiers: tuple[str, ...] = ()  # tiers that were proved
    message: str = ""
    counterexample: Counterexample | None = None
    suggested_guard: str = ""  # DSL text, "" when none was found
    wrong: bool = False  # no guard from the search fixes the rule
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    cached: bool = False
    # how the exact tier was proved where not by the default encoding (induction,
    # unrolling): "contraction normal form" (`verify/contraction.py`)
    methods: tuple[str, ...] = ()
    # what the e-graph adds to the rule's guard so that it applies only at the ranks
    # checked (`dsl.normalize.rank_limits`), "" when every variable is rank-free
    rank_guard: str = ""
    # the rule's effect on ±inf, NaN, -0, overflow and rounding (`special_values`), as JSON
    special_values: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "proved"
