"""Data-only results of `dnnr verify`: one `Verdict` per rule (imports nothing above it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

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


def _fmt(value: float | int) -> str:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value) or abs(value) > 1e15:
            return repr(value)
        return repr(value) if value != int(value) else f"{value:.1f}"
    return str(value)


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
        return "\n".join(indent + line for line in lines)


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

    @property
    def ok(self) -> bool:
        return self.status == "proved"
