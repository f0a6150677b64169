"""The floating-point policy of a compile: which rules may change special values.

- ``reals`` (the default): every rule of the library. Rules not marked ``[exact]``
  are identities over the real numbers (like fast-math): on ±inf, NaN, −0 or at
  overflow they may give another value than onnxruntime (``mul-distribute`` turns
  inf·0 terms around, ``exp-mul`` overflows in a different place). Partial
  operators keep their domain guards (``nonneg(?a)`` before deleting a Sqrt, on
  ``pow-half``), so no rule adds a NaN on finite inputs where none was.
- ``strict``: only rules tagged ``[exact]`` whose special-value record shows no
  change. `dnnr verify` proves each ``[exact]`` rule in the IEEE tiers (bf16, fp16,
  fp32 with Z3's floating-point sorts: ±inf, NaN, −0, overflow and rounding modelled)
  with bit-exact equality (all NaNs alike, −0 ≠ +0), and `tests/verify/test_library.py`
  keeps the shipped ones proved; the record (`verify.special_values`: both sides run
  bit-exact in float32 on inputs holding NaN, ±inf, ±0 and ±3e38) is the measured
  check of the same claim, and a tagged rule whose record shows a change is left out
  here (and fails ``dnnr verify`` / ``dnnr check``). So a strict compile keeps
  onnxruntime's values bit for bit, special values included.

Why ``reals`` is the default: the algebraic rules (DNNFusion Table 3.4) are where
the optimiser's savings come from, and models hold finite activations; ``--fp
strict`` is for code whose inf/NaN behaviour is part of its meaning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from egraph_compiler.dsl.ast import RuleSet
from egraph_compiler.ir.errors import DnnrError

FP_MODES = ("reals", "strict")
DEFAULT_FP = "reals"


def check_fp_mode(mode: str) -> None:
    if mode not in FP_MODES:
        raise DnnrError(f"error: unknown --fp mode {mode!r} (choose one of {', '.join(FP_MODES)})")


def apply_fp_policy(rules: RuleSet, mode: str,
                    changes: Mapping[str, Sequence[str]] | None = None) -> tuple[RuleSet, dict[str, Any]]:
    """``rules`` restricted to what ``mode`` allows, and a record for the report (the
    mode, and the rules left out with the reason). ``changes`` (strict) maps each
    ``[exact]`` rule to the kinds of change its special-value record shows."""
    check_fp_mode(mode)
    if mode == "reals":
        reals_only = sorted(r.name for r in rules.rules if "exact" not in r.flags)
        return rules, {"mode": mode, "reals_only_rules": reals_only}
    changes = changes or {}
    contradicted = {r.name: list(changes[r.name]) for r in rules.rules
                    if "exact" in r.flags and changes.get(r.name)}
    kept = tuple(r for r in rules.rules if "exact" in r.flags and r.name not in contradicted)
    left_out = sorted(r.name for r in rules.rules if "exact" not in r.flags)
    return replace(rules, rules=kept), {
        "mode": mode, "left_out": sorted([*left_out, *contradicted]),
        "why": "not [exact]: may change ±inf, NaN, -0 or overflow",
        "exact_but_changes": contradicted,  # tagged, but the special-value record shows a change
    }
