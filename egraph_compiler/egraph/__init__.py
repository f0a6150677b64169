"""Stage `egraph`: lower a `RuleSet` and a `Graph` to egglog and saturate.

Entry point: `saturate(graph, rules, limits=..., progress=...) -> Saturation`.

In: a `Graph` (shapes filled by `shapes`, where known) and the `RuleSet` parsed
from `rules/*.dnnr`. Out: a `Saturation` holding the egglog e-graph, the handle
(``(V id)`` term) of each graph output's e-class, the Python-side tables
(constants, interned vectors, symbolic dims) and `SaturationStats`: per
iteration (rulesets, e-nodes, seconds), per-rule match/fire counts, total
seconds, and why it stopped (``saturated``, ``schedule-done``, ``limit:nodes``,
``limit:iterations``, ``limit:seconds``) with the limit's value. A stopping limit
is never silent: it is in the stats, for the caller to report.

`saturate_then(graph, rules, limits, progress, finish, fallback, started)` is what
the compiler calls: the same saturation in forked workers that the time and node
budgets can stop inside an iteration, followed by ``finish`` (extraction) where the
e-graph lives, all within the time limit counted from ``started`` (`worker`).

Raises `ModelError` for a node whose operator no rule file declares, and
`LoweringError` (a `DnnrError`) for a rule that cannot be lowered.

How rules run (details in `lower`): pattern matching, literal attributes, pattern
constants (all-equal constants through the ``splat`` fact), ``is_const`` /
``nonneg`` / ``positive`` / ``nonzero`` conjuncts, ``compose(?p, ?q)``,
``scalar(?f)`` / ``vector(?l)`` of bound attributes are native egglog. Every other
guard conjunct and computed attribute is evaluated in Python (`guards`), once per
distinct key of primitive facts, in a batched round inside the same iteration.
Shapes of rewrite-created classes: native for unary/same-shape elementwise ops and
Transpose, through a Python shape oracle (the shapes stage's rules) for the rest.
"""

from __future__ import annotations

from collections.abc import Callable

from egraph_compiler.dsl.ast import Limits, RuleSet
from egraph_compiler.egraph.result import IterationStats, Saturation, SaturationStats
from egraph_compiler.egraph.saturate import extraction_reserve, saturate_graph, saturate_then
from egraph_compiler.egraph.schema import LoweringError
from egraph_compiler.ir.graph import Graph


def saturate(
    graph: Graph,
    rules: RuleSet,
    *,
    limits: Limits | None = None,
    progress: Callable[[str], None] | None = None,
) -> Saturation:
    """Saturate ``graph`` under ``rules``' schedule within ``limits`` (default: the
    rule set's own). See the module docstring for what comes back."""
    return saturate_graph(graph, rules, limits, progress)


__all__ = ["IterationStats", "Limits", "LoweringError", "Saturation", "SaturationStats", "extraction_reserve",
           "saturate", "saturate_then"]
