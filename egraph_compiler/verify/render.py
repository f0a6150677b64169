"""Verdicts as text for people and as JSON for machines."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from egraph_compiler.verify.cache import verdict_to_json
from egraph_compiler.verify.verdict import Verdict


def summary(verdicts: Sequence[Verdict]) -> dict[str, int]:
    counts = Counter(v.status for v in verdicts)
    return {"rules": len(verdicts), "proved": counts["proved"], "failed": counts["failed"],
            "unknown": counts["unknown"]}


def render_text(verdicts: Sequence[Verdict]) -> str:
    lines: list[str] = []
    for v in verdicts:
        cached = ", cached" if v.cached else ""
        if v.ok:
            tiers = ", ".join(v.tiers)
            lines.append(f"proved   {v.rule}  [{tiers}]  ({v.seconds:.2f} s{cached})")
        else:
            label = "FAILED " if v.status == "failed" else "UNKNOWN"
            stage = f" at {v.stage}" if v.stage else ""
            lines.append(f"{label}  {v.rule}{stage}  {v.location}  ({v.seconds:.2f} s{cached})")
            if v.message:
                lines.append(f"    {v.message}")
            if v.counterexample is not None:
                lines.append(v.counterexample.render())
            if v.suggested_guard:
                lines.append(f"    suggested guard: when {v.suggested_guard}")
            elif v.wrong:
                lines.append("    no guard from the search fixes it: the rule is wrong")
        for note in v.notes:
            lines.append(f"    note: {note}")
    s = summary(verdicts)
    lines.append(f"{s['rules']} rules: {s['proved']} proved, {s['failed']} failed, "
                 f"{s['unknown']} unknown")
    records = [v.special_values for v in verdicts if v.special_values is not None]
    if records:  # verify.special_values; each rule's record is in --json
        changes = Counter(kind for r in records for kind in r["changes"])
        lines.append(f"special values: {sum(r['keeps_bits'] for r in records)} keep bits, "
                     f"{sum(bool(r['changes']) for r in records)} change them ("
                     + ", ".join(f"{kind} {n}" for kind, n in changes.items())
                     + f"), {sum(not r['evaluated'] for r in records)} not evaluated")
    return "\n".join(lines)


def render_json(verdicts: Sequence[Verdict]) -> str:
    return json.dumps({"summary": summary(verdicts),
                       "verdicts": [verdict_to_json(v) for v in verdicts]}, indent=2)
