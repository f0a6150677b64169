"""The facts fusion planning reads, as data: mapping types and the fusion table.

Both tables live in the rule language only: DNNFusion Table 3.2 (operator →
mapping type) is the ``: MAPPING`` of each ``op`` in ``rules/operators.dnnr`` and
Table 3.3 (first type × second type → fused type and verdict) is
``rules/fusion.dnnr``. `FusionTables.shipped()` reads the shipped library once
(cached); `FusionTables.from_ruleset` lays a rule set's own declarations over it.
An operator no rule file declares is Many-to-Many, the type that fuses least.

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
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from egraph_compiler import ops

ONE_TO_ONE = "one_to_one"
ONE_TO_MANY = "one_to_many"
MANY_TO_MANY = "many_to_many"
REORGANIZE = "reorganize"
SHUFFLE = "shuffle"
MAPPING_TYPES = (ONE_TO_ONE, REORGANIZE, SHUFFLE, ONE_TO_MANY, MANY_TO_MANY)

FUSE, BREAK, PROFILE = "fuse", "break", "profile"

@dataclass(frozen=True)
class FusionTables:
    """Mapping type per operator and the fusion verdict per mapping-type pair."""

    mapping: Mapping[str, str]
    fusion: Mapping[tuple[str, str], tuple[str | None, str]]

    @staticmethod
    def shipped() -> FusionTables:
        """The tables of the shipped rule library (``$DNNR_RULES`` when set)."""
        # imported here: loading a built artefact (runtime, device machines) needs no parser
        from egraph_compiler.dsl.shipped import rules_dir

        return _load_shipped(rules_dir())

    @staticmethod
    def from_ruleset(ruleset: Any) -> FusionTables:
        """``ruleset.ops[name].mapping`` and ``ruleset.fusion`` (a dsl `RuleSet`) laid
        over the shipped tables, so a rule set that declares only a few operators
        still plans with the library's types for the rest."""
        base = FusionTables.shipped()
        return _overlay(base.mapping, base.fusion, ruleset)

    def mapping_of(self, op: str) -> str:
        return self.mapping.get(op, MANY_TO_MANY)

    def verdict(self, first: str, second: str) -> tuple[str | None, str]:
        return self.fusion.get((first, second), (None, BREAK))


def _overlay(mapping: Mapping[str, str], fusion: Mapping[tuple[str, str], tuple[str | None, str]],
             ruleset: Any) -> FusionTables:
    merged_mapping = dict(mapping)
    for name, decl in getattr(ruleset, "ops", {}).items():
        if getattr(decl, "mapping", None) in MAPPING_TYPES:
            merged_mapping[name] = decl.mapping
    merged_fusion = dict(fusion)
    for entry in getattr(ruleset, "fusion", ()):
        merged_fusion[entry.first, entry.second] = (entry.result, entry.verdict)
    return FusionTables(merged_mapping, merged_fusion)


@lru_cache(maxsize=4)
def _load_shipped(rules: Path) -> FusionTables:
    # the two files that hold the tables (parsed once: every plan_fusion without tables
    # shares the copy), so a rewrite rule elsewhere in the library cannot break planning
    from egraph_compiler import dsl

    files = [rules / "operators.dnnr", rules / "fusion.dnnr"]
    return _overlay({}, {}, dsl.load_rules(files if all(f.is_file() for f in files) else [rules]))


def role_of(op: str) -> str:
    """``anchor`` | ``elementwise`` | ``layout`` | ``unsupported`` (see module doc), as the
    active registry says: an operator declared only in a rule file plans too."""
    info = ops.current().get(op)
    return info.role if info is not None else "unsupported"


def anchor_kind(op: str) -> str | None:
    """The kernel class (``anchor conv|matmul|pool|reduce|rownorm|indexed``) the active
    registry declares for ``op``, or None for an operator that is no anchor."""
    info = ops.current().get(op)
    return info.anchor if info is not None else None


def compile_time(op: str) -> bool:
    """A shape-only operator (``cost per_element(0)``: computed from shapes, never a
    kernel), evaluated at compile time."""
    info = ops.current().get(op)
    return info is not None and info.cost == ("per_element", 0.0)
