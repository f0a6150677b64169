"""The operator registry (DESIGN §6): what every stage knows about an operator.

In: a dsl `RuleSet`. Out: a `Registry` of `OpInfo` — classes, output dtype, shape
kind, value facts, cost, anchor kernel class, typed attributes with defaults — and
`scalar`, the one compiler of ``op … = expr`` semantics to NumPy and C text;
`evaluate`, constant folding (the importer's folder) over both; `quantised`, the float
operator each integer operator (Q*Int, QLinear*) stands for.
`current()` is the registry of the rule set being compiled (`using(rules)`), else the
shipped library's.
"""

from egraph_compiler.ops import evaluate, scalar
from egraph_compiler.ops.registry import OpInfo, Registry, current, shipped, using

__all__ = ["OpInfo", "Registry", "current", "evaluate", "scalar", "shipped", "using"]
