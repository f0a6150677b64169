"""The compiler as one function per stage (STYLE 1).

`compile_model` is the only place that chains stages: each line calls one stage's
public entry point and the `Report` records what it did and how long it took.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from egraph_compiler import dsl, egraph, extract, ir, shapes
from egraph_compiler.dsl.ast import Limits, RuleSet
from egraph_compiler.ir.graph import Graph
from egraph_compiler.report import Report

Progress = Callable[[str], None]


def default_rules_dir() -> Path:
    """The shipped rule library: ``$DNNR_RULES`` or the packaged ``rules/``."""
    return dsl.rules_dir()


@dataclass
class CompileResult:
    graph: Graph
    report: Report
    rules: RuleSet


@contextmanager
def _stage(report: Report, name: str, progress: Progress | None) -> Iterator[None]:
    if progress:
        progress(f"{name} ...")
    start = time.perf_counter()
    yield
    report.seconds[name] = round(time.perf_counter() - start, 4)


def load_rules(rule_paths: Sequence[str | Path] | None = None) -> RuleSet:
    """Parse the rule files (default: the shipped library)."""
    return dsl.load_rules(list(rule_paths) if rule_paths else [default_rules_dir()])


def optimize(
    graph: Graph,
    rules: RuleSet,
    *,
    limits: Limits | None = None,
    progress: Progress | None = None,
    report: Report | None = None,
) -> tuple[Graph, Report]:
    """Saturate ``graph`` under ``rules`` and extract the cheapest equivalent graph.

    In: a `Graph` (shapes inferred or not) and a parsed `RuleSet`. Out: the
    optimised `Graph` (shapes inferred) and the `Report` of what happened.
    """
    report = report or Report(model=graph.name)
    with _stage(report, "shapes", progress):
        graph = shapes.infer_shapes(graph)
    report.nodes_before = graph.op_counts()
    report.cost_before = _cost_json(extract.graph_cost(graph))
    with _stage(report, "saturate", progress):
        saturation = egraph.saturate(graph, rules, limits=limits, progress=progress)
    with _stage(report, "extract", progress):
        extraction = extract.extract(saturation)
    with _stage(report, "shapes-after", progress):
        optimised = shapes.infer_shapes(extraction.graph)
    stats = saturation.stats
    report.nodes_after = optimised.op_counts()
    report.cost_after = _cost_json(extract.graph_cost(optimised))
    report.rules_fired = {k: v for k, v in sorted(stats.rule_fires.items()) if v}
    last = stats.iterations[-1] if stats.iterations else None
    report.egraph = {
        "iterations": len(stats.iterations),
        "enodes": stats.e_nodes,
        "eclasses": last.e_classes if last else None,
        "stop_reason": stats.stop_reason,
        "load_seconds": round(stats.load_seconds, 4),
        "per_iteration": [
            {"rulesets": it.ruleset, "enodes": it.e_nodes, "eclasses": it.e_classes,
             "seconds": round(it.seconds, 4)}
            for it in stats.iterations
        ],
    }
    if stats.stop_reason.startswith("limit:"):
        report.limits_hit.append(stats.describe())
    report.provenance = {k: list(v) for k, v in sorted(extraction.provenance.items()) if v}
    report.rule_sources = {r.name: str(r.span) for r in rules.rules}
    return optimised, report


def compile_model(
    model: str | Path | bytes,
    *,
    rule_paths: Sequence[str | Path] | None = None,
    limits: Limits | None = None,
    progress: Progress | None = None,
) -> CompileResult:
    """Compile an ONNX model with the rule library: import, optimise, re-infer shapes.

    In: a path to (or the bytes of) an ONNX model, rule files/dirs. Out: the
    optimised `Graph`, its `Report`, and the `RuleSet` used. Backends take it from
    here (`egraph_compiler.backends.*`); `ir.to_onnx` writes it back as ONNX.
    """
    name = Path(model).name if isinstance(model, (str, Path)) else "model"
    report = Report(model=name)
    with _stage(report, "parse-rules", progress):
        rules = load_rules(rule_paths)
    with _stage(report, "import", progress):
        graph = ir.load_onnx(model)
    optimised, report = optimize(graph, rules, limits=limits, progress=progress, report=report)
    return CompileResult(optimised, report, rules)


def _cost_json(cost: Any) -> dict[str, float]:
    return {"flops": float(cost.flops), "bytes": float(cost.bytes)}
