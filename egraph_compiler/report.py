"""The compile report: what a compile did, as data, as a terminal table and as JSON.

Data only plus rendering; imports no stage. ``report.json`` in an artefact
directory is `Report.to_json()`; `explain` reads it back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Report:
    """Node counts per op before/after, rules fired, e-graph size, seconds per stage.

    ``nodes_before`` / ``nodes_after`` count the ONNX model read and the one written
    (not the IR between: its internal operators and dropped Identity nodes would not
    match either file). ``rules_fired`` counts a rule's applications (distinct
    e-classes it rewrote), ``rule_matches`` its left-hand-side matches summed over
    iterations; ``guard_failed`` lists rules that matched and never fired.
    ``provenance`` maps an output node to the rules that built it (in the order they
    first fired, operand swaps left out), ``origins`` to the input-model nodes of its
    e-class."""

    model: str
    nodes_before: dict[str, int] = field(default_factory=dict)
    nodes_after: dict[str, int] = field(default_factory=dict)
    rules_fired: dict[str, int] = field(default_factory=dict)
    rule_matches: dict[str, int] = field(default_factory=dict)
    guard_failed: list[str] = field(default_factory=list)
    egraph: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    limits_hit: list[str] = field(default_factory=list)
    cost_before: dict[str, float] = field(default_factory=dict)
    cost_after: dict[str, float] = field(default_factory=dict)
    provenance: dict[str, list[str]] = field(default_factory=dict)
    origins: dict[str, list[str]] = field(default_factory=dict)
    rule_sources: dict[str, str] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    dims: dict[str, dict[str, Any]] = field(default_factory=dict)  # symbolic input dim -> range, given by --dim?
    rdp: dict[str, dict[str, int]] = field(default_factory=dict)  # shapes.rdp.census of the input graph
    # the layout/implementation PBQP of the backend (`select.Selection.to_json`)
    select: dict[str, Any] = field(default_factory=dict)
    fp: dict[str, Any] = field(default_factory=dict)  # the --fp policy and the rules it left out

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
    sources = data.get("rule_sources", {})
    matches = data.get("rule_matches", {})
    if data.get("rules_fired"):
        fired = sorted(data["rules_fired"].items(), key=lambda kv: (-kv[1], kv[0]))
        parts += ["", _table(["rule fired", "applied", "matches", "defined at"],
                             [[name, str(count), str(matches.get(name, count)), sources.get(name, "")]
                              for name, count in fired])]
    else:
        parts += ["", "no rule fired"]
    failed = data.get("guard_failed") or []
    if failed:
        parts += ["", _table(["matched, guard never held", "matches", "defined at"],
                             [[name, str(matches.get(name, 0)), sources.get(name, "")] for name in failed])]
    eg = data.get("egraph", {})
    if eg:
        parts += ["", "e-graph: " + ", ".join(f"{k} {v}" for k, v in eg.items() if not isinstance(v, (list, dict)))]
    cb, ca = data.get("cost_before", {}), data.get("cost_after", {})
    if cb and ca:
        parts.append(f"cost: {cb['flops']:.4g} -> {ca['flops']:.4g} FLOPs, "
                     f"{cb['bytes']:.4g} -> {ca['bytes']:.4g} bytes moved")
    dims = data.get("dims") or {}
    if dims:  # the ranges shape inference and the guards assumed
        parts.append("dims: " + ", ".join(f"{name}={d['low']}..{d['high']}" + ("" if d["given"] else " (default)")
                                          for name, d in dims.items()))
    rdp = data.get("rdp") or {}
    if rdp:
        parts.append("shapes (RDP): dims " + ", ".join(f"{n} {k}" for k, n in rdp["dims"].items() if n)
                     + "; ops by dynamism class " + ", ".join(f"{k} {n}" for k, n in rdp["acting"].items())
                     + " (after constant values; declared: "
                     + ", ".join(f"{k} {n}" for k, n in rdp["declared"].items()) + ")")
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
    specialised = target.get("specialised")
    if specialised and specialised["value_inputs"]:  # sizes decided by input values (issue 17)
        parts.append("specialised at run time on the values of: " + ", ".join(
            f"{name} ({why})" for name, why in specialised["value_inputs"].items()))
    if specialised and specialised.get("data_dependent"):  # sizes decided by data: segments
        parts.append("run in segments cut at the nodes whose output sizes come from their data: "
                     + ", ".join(f"{name} {how}" for name, how in specialised["data_dependent"].items()))
    dynamic = target.get("dynamic")
    if dynamic:  # a symbolic OpenCL artefact: its ranges, arena and versions (issue 15)
        parts.append("symbolic: " + ", ".join(f"{n}={r[0]}..{r[1]}" + (f":{r[2]}" if len(r) > 2 else "")
                                              for n, r in dynamic["dims"].items())
                     + f"; {dynamic['shapes_compiled']} shapes compiled; arena peak "
                     f"{dynamic['arena_bytes_peak']} B over the ranges; {len(dynamic['versions'])} "
                     f"versions in {dynamic['boxes']} boxes")
        for k, version in enumerate(dynamic["versions"]):
            parts.append(f"  version {k} ({version['id']}): " + " | ".join(version["conditions"]))
            parts.extend(f"    {choice}" for choice in version.get("choices", ())[:6])
    chosen = data.get("select") or {}
    if chosen:
        parts.append("select: " + ", ".join(f"{k} {v}" for k, v in chosen.items()
                                            if not isinstance(v, (list, dict))))
        versions = [v for v in chosen.get("multi_version", []) if v["multi_version"]]
        if versions:  # no single option is cheapest over the declared dim ranges
            parts.append("multi-version candidates: " + "; ".join(
                f"{v['node']} ({', '.join(v['candidates'])})" for v in versions))
    return "\n".join(parts)


class UnknownNode(ValueError):
    """`explain` was asked about a node neither model has."""


def explain(report: dict[str, Any], nodes: list[str] | None = None,
            known_nodes: dict[str, str] | None = None) -> str:
    """Each output node's derivation: the input-model node(s) it replaced, then the
    rules (with their source location) in the order they first fired, then the
    output node. ``known_nodes``: node name -> op of the written model; a name that
    is neither there nor an input-model origin raises `UnknownNode`."""
    provenance: dict[str, list[str]] = report.get("provenance", {})
    origins: dict[str, list[str]] = report.get("origins", {})
    sources: dict[str, str] = report.get("rule_sources", {})
    by_origin = {o.split(" (")[0]: node for node, names in origins.items() for o in names}
    wanted = nodes or sorted(provenance)
    if not wanted:
        return "no output node was produced by a rewrite (the graph is as imported)"
    known = set(known_nodes or ()) | set(provenance) | set(by_origin)
    missing = [n for n in wanted if n not in known]
    if missing:
        raise UnknownNode(", ".join(missing))
    lines = []
    for node in wanted:
        if node not in provenance and node in by_origin:
            lines.append(f"{node}: rewritten; see {by_origin[node]}")
            node = by_origin[node]
        rules = provenance.get(node)
        if rules is None:
            lines.append(f"{node}: from the input model (no rule rewrote it)")
            continue
        start = ", ".join(origins.get(node, [])) or "new terms of the e-graph (no input node computes this value)"
        lines.append(f"{node}:")
        lines.append(f"  from   {start}")
        lines += [f"  by     {rule}  ({sources.get(rule, '?')})" for rule in rules]
        op = (known_nodes or {}).get(node)
        lines.append(f"  gives  {node}" + (f" ({op} in the written model)" if op else ""))
    return "\n".join(lines)
