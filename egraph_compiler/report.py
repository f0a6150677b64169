"""The compile report: what a compile did, as data, as a terminal table and as JSON.

Data only plus rendering; imports no stage. ``report.json`` in an artefact
directory is `Report.to_json()`; `explain` reads it back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Report:
    """Node counts per op before/after, rules fired, e-graph size, seconds per stage."""

    model: str
    nodes_before: dict[str, int] = field(default_factory=dict)
    nodes_after: dict[str, int] = field(default_factory=dict)
    rules_fired: dict[str, int] = field(default_factory=dict)
    egraph: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    limits_hit: list[str] = field(default_factory=list)
    cost_before: dict[str, float] = field(default_factory=dict)
    cost_after: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, list[str]] = field(default_factory=dict)
    rule_sources: dict[str, str] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    # the layout/implementation PBQP of the backend (`select.Selection.to_json`)
    select: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def render_report(report: Report | dict[str, Any]) -> str:
    """The report as readable tables for the terminal."""
    data = report.to_json() if isinstance(report, Report) else report
    before, after = data["nodes_before"], data["nodes_after"]
    ops = sorted(set(before) | set(after), key=lambda op: (-before.get(op, 0), op))
    rows = [[op, str(before.get(op, 0)), str(after.get(op, 0)),
             f"{after.get(op, 0) - before.get(op, 0):+d}"] for op in ops]
    total_before, total_after = sum(before.values()), sum(after.values())
    rows.append(["total", str(total_before), str(total_after), f"{total_after - total_before:+d}"])
    parts = [f"dnnr compile: {data['model']}", "", _table(["op", "before", "after", "change"], rows)]
    if data.get("rules_fired"):
        fired = sorted(data["rules_fired"].items(), key=lambda kv: (-kv[1], kv[0]))
        sources = data.get("rule_sources", {})
        parts += ["", _table(["rule fired", "count", "defined at"],
                             [[name, str(count), sources.get(name, "")] for name, count in fired])]
    else:
        parts += ["", "no rule fired"]
    eg = data.get("egraph", {})
    if eg:
        parts += ["", "e-graph: " + ", ".join(f"{k} {v}" for k, v in eg.items() if not isinstance(v, (list, dict)))]
    cb, ca = data.get("cost_before", {}), data.get("cost_after", {})
    if cb and ca:
        parts.append(f"cost: {cb['flops']:.4g} -> {ca['flops']:.4g} FLOPs, "
                     f"{cb['bytes']:.4g} -> {ca['bytes']:.4g} bytes moved")
    secs = data.get("seconds", {})
    if secs:
        parts.append("seconds: " + ", ".join(f"{k} {v:.3f}" for k, v in secs.items())
                     + f" (total {sum(secs.values()):.3f})")
    for limit in data.get("limits_hit", []):
        parts.append(f"LIMIT HIT: {limit}")
    target = data.get("target") or {}
    if target:
        parts.append("target: " + ", ".join(f"{k} {v}" for k, v in target.items()
                                            if not isinstance(v, (list, dict))))
    chosen = data.get("select") or {}
    if chosen:
        parts.append("select: " + ", ".join(f"{k} {v}" for k, v in chosen.items()
                                            if not isinstance(v, (list, dict))))
    return "\n".join(parts)


def explain(report: dict[str, Any], nodes: list[str] | None = None) -> str:
    """Name the rules (with their source location) that produced each output node."""
    provenance: dict[str, list[str]] = report.get("provenance", {})
    sources: dict[str, str] = report.get("rule_sources", {})
    wanted = nodes or sorted(provenance)
    if not wanted:
        return "no output node was produced by a rewrite (the graph is as imported)"
    lines = []
    for node in wanted:
        rules = provenance.get(node)
        if rules is None:
            lines.append(f"{node}: from the input model (no rule rewrote it)")
            continue
        lines.append(f"{node}:")
        lines += [f"  {rule}  ({sources.get(rule, '?')})" for rule in rules]
    return "\n".join(lines)
