"""Options whose costs depend on symbolic dims: compare them over the declared ranges.

An option dominates when the shapes prover (canonical form, then Z3 over the symbol
ranges) proves its cost ≤ every other option's for all values of the symbols. Where
none does, no single choice is right for every shape: the block is a multi-version
candidate, and `Dominance` says which options are cheapest somewhere (each one not
proved ≥ some other everywhere) so a dispatcher can keep only those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from egraph_compiler.ir.dims import Dim, dim_str
from egraph_compiler.shapes.prover import prove_le


@dataclass(frozen=True)
class Dominance:
    node: str
    options: tuple[str, ...]
    best: int | None  # the option proved cheapest for every shape; None: none is
    candidates: tuple[int, ...]  # options that no other option is proved to beat everywhere
    reason: str

    @property
    def multi_version(self) -> bool:
        return self.best is None


def dominance(node: str, options: Sequence[str], costs: Sequence[Dim],
              ranges: Mapping[str, tuple[int, int]]) -> Dominance:
    """Which of ``options`` (costs over symbols in ``ranges``) is cheapest for every shape."""
    k = len(options)
    le = [[i == j or prove_le(costs[i], costs[j], ranges) for j in range(k)] for i in range(k)]
    best = next((i for i in range(k) if all(le[i])), None)
    # i is beaten everywhere when some j is proved ≤ i and not proved equal to it
    beaten = {i for i in range(k) for j in range(k) if j != i and le[j][i] and not le[i][j]}
    candidates = (best,) if best is not None else tuple(i for i in range(k) if i not in beaten)
    span = ", ".join(f"{s} in [{lo}, {hi}]" for s, (lo, hi) in sorted(ranges.items()))
    if best is not None:
        reason = f"{options[best]} ({dim_str(costs[best])}) is cheapest for every {span}"
    else:
        names = ", ".join(f"{options[i]} ({dim_str(costs[i])})" for i in candidates)
        reason = f"no option is cheapest for every {span}: multi-version candidate over {names}"
    return Dominance(node, tuple(options), best, candidates, reason)
