"""The facts fusion planning reads, as data: mapping types and the fusion table.

Defaults are DNNFusion Table 3.2 (operator → mapping type) and Table 3.3 (first
type × second type → fused type and verdict). `FusionTables.from_ruleset` takes
both from the rule files (`op … : MAPPING …` and `fuse A then B -> C : verdict`),
falling back to the defaults for whatever the rules do not say.

Besides the mapping type, the planner needs one structural fact per operator: its
*role* in generated code (SmartMem's ILD/ILI split, seen from a kernel):

- ``anchor``: a many-to-many computation a kernel is built around (Conv, MatMul,
  reductions, pooling, Softmax, LayerNorm); at most one per block;
- ``elementwise``: a scalar function of its operands at the same (broadcast) index;
- ``layout``: an operator that only moves data (Reshape, Transpose, Slice, Concat,
  Pad, Gather, Expand, …) and becomes index arithmetic when fused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ONE_TO_ONE = "one_to_one"
ONE_TO_MANY = "one_to_many"
MANY_TO_MANY = "many_to_many"
REORGANIZE = "reorganize"
SHUFFLE = "shuffle"
MAPPING_TYPES = (ONE_TO_ONE, REORGANIZE, SHUFFLE, ONE_TO_MANY, MANY_TO_MANY)

FUSE, BREAK, PROFILE = "fuse", "break", "profile"

ELEMENTWISE_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Min", "Max", "Sum", "Mean", "PRelu", "Where",
    "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Not", "And", "Or", "Xor",
    "IsNaN", "IsInf", "Neg", "Abs", "Sign", "Reciprocal", "Sqrt", "Exp", "Log", "Erf", "Tanh",
    "Sigmoid", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
    "Atanh", "Ceil", "Floor", "Round", "Relu", "LeakyRelu", "Elu", "Selu", "Celu",
    "ThresholdedRelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Clip", "Cast",
    "Square", "Gelu", "BatchNormalization", "Identity", "Dropout", "Mod", "Mish",
})
LAYOUT_OPS = {
    "Reshape": REORGANIZE, "Flatten": REORGANIZE, "Squeeze": REORGANIZE,
    "Unsqueeze": REORGANIZE, "Transpose": SHUFFLE, "DepthToSpace": SHUFFLE,
    "SpaceToDepth": SHUFFLE, "Slice": ONE_TO_ONE, "Concat": ONE_TO_ONE, "Split": ONE_TO_ONE,
    "Pad": ONE_TO_MANY, "Gather": ONE_TO_MANY, "Expand": ONE_TO_MANY, "Tile": ONE_TO_MANY,
}
ANCHOR_OPS = {
    "Conv": "conv", "MatMul": "matmul", "Gemm": "matmul",
    "MaxPool": "pool", "AveragePool": "pool", "LRN": "pool",
    "GlobalAveragePool": "reduce", "GlobalMaxPool": "reduce",
    "ReduceSum": "reduce", "ReduceMean": "reduce", "ReduceMax": "reduce",
    "ReduceMin": "reduce", "ReduceProd": "reduce", "ReduceL1": "reduce", "ReduceL2": "reduce",
    "ReduceSumSquare": "reduce", "ReduceLogSum": "reduce", "ReduceLogSumExp": "reduce",
    "ArgMax": "reduce", "ArgMin": "reduce",
    "Softmax": "rownorm", "LogSoftmax": "rownorm", "LayerNormalization": "rownorm",
}
# Shape-only operators: evaluated at compile time, never a kernel.
COMPILE_TIME_OPS = frozenset({"Shape", "Size", "ConstantOfShape", "Constant", "Range"})

# Table 3.2 as data, extended to the operators above (elementwise ops are
# one_to_one; a broadcast operand makes that edge one_to_many — decided per edge).
DEFAULT_MAPPING: dict[str, str] = {
    **{op: ONE_TO_ONE for op in ELEMENTWISE_OPS},
    **LAYOUT_OPS,
    **{op: MANY_TO_MANY for op in ANCHOR_OPS},
}

# Table 3.3 (first, second) → (fused type, verdict). One-to-One has the lowest
# transformation impedance (always green, the other type wins); Reorganize and
# Shuffle fuse with each other; with One-to-Many / Many-to-Many they need
# profiling; Many-to-Many after One-to-Many or Many-to-Many is red.
_M = MAPPING_TYPES


def _default_fusion_table() -> dict[tuple[str, str], tuple[str | None, str]]:
    table: dict[tuple[str, str], tuple[str | None, str]] = {}
    rank = {t: i for i, t in enumerate(_M)}
    for first in _M:
        for second in _M:
            if first == ONE_TO_ONE:
                table[first, second] = (second, FUSE)
            elif second == ONE_TO_ONE:
                table[first, second] = (first, FUSE)
            elif first in (REORGANIZE, SHUFFLE) and second in (REORGANIZE, SHUFFLE):
                table[first, second] = (max(first, second, key=rank.get), FUSE)
            elif second == MANY_TO_MANY and first in (ONE_TO_MANY, MANY_TO_MANY):
                table[first, second] = (None, BREAK)
            elif first == ONE_TO_MANY and second == ONE_TO_MANY:
                table[first, second] = (ONE_TO_MANY, FUSE)
            else:
                table[first, second] = (max(first, second, key=rank.get), PROFILE)
    return table


DEFAULT_FUSION_TABLE = _default_fusion_table()


@dataclass(frozen=True)
class FusionTables:
    """Mapping type per operator and the fusion verdict per mapping-type pair."""

    mapping: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_MAPPING))
    fusion: Mapping[tuple[str, str], tuple[str | None, str]] = field(
        default_factory=lambda: dict(DEFAULT_FUSION_TABLE))

    @staticmethod
    def from_ruleset(ruleset: Any) -> FusionTables:
        """Read ``ruleset.ops[name].mapping`` and ``ruleset.fusion`` (a dsl `RuleSet`)."""
        mapping = dict(DEFAULT_MAPPING)
        for name, decl in getattr(ruleset, "ops", {}).items():
            if getattr(decl, "mapping", None) in MAPPING_TYPES:
                mapping[name] = decl.mapping
        fusion = dict(DEFAULT_FUSION_TABLE)
        for entry in getattr(ruleset, "fusion", ()):
            fusion[entry.first, entry.second] = (entry.result, entry.verdict)
        return FusionTables(mapping, fusion)

    def mapping_of(self, op: str) -> str:
        return self.mapping.get(op, MANY_TO_MANY)

    def verdict(self, first: str, second: str) -> tuple[str | None, str]:
        return self.fusion.get((first, second), (None, BREAK))


def role_of(op: str) -> str:
    """``anchor`` | ``elementwise`` | ``layout`` | ``unsupported`` (see module doc)."""
    if op in ANCHOR_OPS:
        return "anchor"
    if op in ELEMENTWISE_OPS:
        return "elementwise"
    if op in LAYOUT_OPS:
        return "layout"
    return "unsupported"
