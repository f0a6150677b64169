"""The compiler as one function per stage (STYLE 1).

`compile_model` is the only place that chains stages: each line calls one stage's
public entry point and the `Report` records what it did and how long it took.
`write_artefact` runs a backend on the result and writes the artefact directory
(``dnnr compile -o OUT`` and the Python API `egraph_compiler.compile` share it).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from egraph_compiler import dsl, egraph, extract, ir, ops, shapes
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


def target_rules(target: str) -> Path | None:
    """A target's own rule set and schedule, ``rules/targets/<target>.dnnr``, if it has one
    (Hexagon: only the QDQ → integer-operator rules, so results stay onnxruntime's)."""
    path = default_rules_dir() / "targets" / f"{target}.dnnr"
    return path if path.is_file() else None


def load_rules(rule_paths: Sequence[str | Path] | None = None, target: str = "onnx") -> RuleSet:
    """Parse the rule files (default: the target's own rules, else the shipped library)."""
    if rule_paths:
        return dsl.load_rules(list(rule_paths))
    own = target_rules(target)
    return dsl.load_rules([own] if own else [default_rules_dir()])


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
    with ops.using(rules):  # stages read operator facts from the rules compiled with
        return _optimize(graph, rules, limits, progress, report or Report(model=graph.name))


def _optimize(graph: Graph, rules: RuleSet, limits: Limits | None, progress: Progress | None,
              report: Report) -> tuple[Graph, Report]:
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
    target: str = "onnx",
) -> CompileResult:
    """Compile an ONNX model with the rule library: import, optimise, re-infer shapes.

    In: a path to (or the bytes of) an ONNX model, rule files/dirs. Out: the
    optimised `Graph`, its `Report`, and the `RuleSet` used. Backends take it from
    here (`egraph_compiler.backends.*`); `ir.to_onnx` writes it back as ONNX. A
    ``target`` with its own rules (`target_rules`) compiles with those by default.
    """
    name = Path(model).name if isinstance(model, (str, Path)) else "model"
    report = Report(model=name)
    with _stage(report, "parse-rules", progress):
        rules = load_rules(rule_paths, target)
    with _stage(report, "import", progress):
        graph = ir.load_onnx(model)
    optimised, report = optimize(graph, rules, limits=limits, progress=progress, report=report)
    return CompileResult(optimised, report, rules)


TARGETS = ("onnx", "opencl", "hexagon")


def write_artefact(result: CompileResult, target: str, out: Path, *,
                   bindings: dict[str, int] | None = None, profile_db: str | Path | None = None,
                   progress: Progress | None = None) -> None:
    """Build ``target`` from ``result`` into ``out`` (OpenCL: kernels.cl, plan.json, …;
    Hexagon: C, ELF) and write ``model.onnx`` and ``report.json`` beside it.
    ``bindings`` fix symbolic input dims for the static-shape targets; ``profile_db``
    is a `dnnr tune` database deciding the OpenCL fusion planner's yellow cases."""
    if target not in TARGETS:
        raise ir.DnnrError(f"error: unknown target {target!r} (choose one of {', '.join(TARGETS)})")
    if target != "onnx":
        with ops.using(result.rules):
            _build_target(target, result, out, progress, bindings or {}, profile_db)
    elif profile_db is not None:
        raise ir.DnnrError("error: --profile-db only applies to --target opencl")
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.onnx").write_bytes(ir.to_onnx(result.graph).SerializeToString())
    (out / "report.json").write_text(json.dumps(result.report.to_json(), indent=2) + "\n")


def static_graph(graph: Graph, bindings: dict[str, int], target: str) -> Graph:
    """``graph`` with its symbolic input dims bound; a clear error names any left."""
    from egraph_compiler.ir.dims import DimExpr

    graph = shapes.bind_symbols(graph, bindings) if bindings else graph
    unbound = sorted({s for v in graph.inputs for d in v.type.shape or () if isinstance(d, DimExpr)
                      for s in d.symbols()})
    if unbound:
        raise ir.DnnrError(f"error: the {target} target needs static shapes, and the model's "
                           f"inputs have symbolic dims {', '.join(unbound)}\n"
                           f"  hint: add --bind {unbound[0]}=1 (one --bind NAME=INT per symbol)")
    return graph


def _build_target(target: str, result: CompileResult, out: Path, progress: Progress | None,
                  bindings: dict[str, int], profile_db: str | Path | None) -> None:
    if progress:
        progress(f"{target} backend ...")
    start = time.perf_counter()
    graph = static_graph(result.graph, bindings, target)
    artefact: Any
    if target == "opencl":
        from egraph_compiler.backends import opencl
        from egraph_compiler.fusion import ProfileDb

        db = ProfileDb.load(profile_db) if profile_db is not None else None
        artefact = opencl.compile_graph(graph, out, tables=result.rules, profile_db=db)
    else:
        if profile_db is not None:
            raise ir.DnnrError("error: --profile-db only applies to --target opencl")
        from egraph_compiler.backends import hexagon

        artefact = hexagon.build(graph, out)
    result.report.seconds[f"backend-{target}"] = round(time.perf_counter() - start, 4)
    info = {k: (str(v) if isinstance(v, Path) else v)
            for k, v in dataclasses.asdict(artefact).items() if k != "report"}
    result.report.target = {"name": target, **info}


def _cost_json(cost: Any) -> dict[str, float]:
    return {"flops": float(cost.flops), "bytes": float(cost.bytes)}
