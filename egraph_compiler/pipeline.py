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

from egraph_compiler import dsl, egraph, extract, ir, shapes
from egraph_compiler.dsl.ast import Limits, RuleSet
from egraph_compiler.dsl.fp_policy import DEFAULT_FP, apply_fp_policy
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
    source_sha256: str = ""  # the source model's digest, recorded in the artefact manifest


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
    started: float | None = None,
) -> tuple[Graph, Report]:
    """Saturate ``graph`` under ``rules`` and extract the cheapest equivalent graph.

    In: a `Graph` (shapes inferred or not) and a parsed `RuleSet`. Out: the
    optimised `Graph` (shapes inferred) and the `Report` of what happened. The time
    limit counts from ``started`` (default: now) and binds on saturation and extraction.
    """
    report = report or Report(model=graph.name)
    with _stage(report, "shapes", progress):
        graph = shapes.infer_shapes(graph)
    report.nodes_before = graph.op_counts()
    report.cost_before = _cost_json(extract.graph_cost(graph))
    # the time limit binds on loading, saturation and extraction together (from
    # ``started``, the start of the compile): they run in workers the limit can stop
    with _stage(report, "saturate", progress):
        slim, provenance, stats, extract_seconds = egraph.saturate_then(
            graph, rules, limits, progress, _extract_in_worker,
            lambda stats: (_Slim(graph, ()), {}, stats, 0.0), started)
        extracted = slim.restore(graph)
    report.seconds["saturate"] = round(report.seconds["saturate"] - extract_seconds, 4)
    report.seconds["extract"] = round(extract_seconds, 4)
    with _stage(report, "shapes-after", progress):
        optimised = shapes.infer_shapes(extracted)
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
    report.provenance = {k: list(v) for k, v in sorted(provenance.items()) if v}
    report.rule_sources = {r.name: str(r.span) for r in rules.rules}
    return optimised, report


def compile_model(
    model: str | Path | bytes,
    *,
    rule_paths: Sequence[str | Path] | None = None,
    limits: Limits | None = None,
    progress: Progress | None = None,
    target: str = "onnx",
    started: float | None = None,
    fp: str = DEFAULT_FP,
) -> CompileResult:
    """Compile an ONNX model with the rule library: import, optimise, re-infer shapes.

    In: a path to (or the bytes of) an ONNX model, rule files/dirs. Out: the
    optimised `Graph`, its `Report`, and the `RuleSet` used. Backends take it from
    here (`egraph_compiler.backends.*`); `ir.to_onnx` writes it back as ONNX. A
    ``target`` with its own rules (`target_rules`) compiles with those by default.
    ``fp`` is the floating-point policy (`dsl.fp_policy`: ``reals`` or ``strict``).
    The rule set's time limit counts from ``started`` (a `time.perf_counter` value,
    default now; `process_started` for the whole process).
    """
    # the time limit covers rule loading and import too (the CLI: the whole process)
    started = time.perf_counter() if started is None else started
    name = Path(model).name if isinstance(model, (str, Path)) else "model"
    report = Report(model=name)
    with _stage(report, "parse-rules", progress):
        rules, report.fp = apply_fp_policy(load_rules(rule_paths, target), fp)
    with _stage(report, "import", progress):
        graph = ir.load_onnx(model)
    optimised, report = optimize(graph, rules, limits=limits, progress=progress, report=report,
                                 started=started)
    from egraph_compiler.backends.artefact import source_digest

    return CompileResult(optimised, report, rules, source_digest(model))


def process_started() -> float:
    """When this process started, as a `time.perf_counter` value (now where /proc is
    missing): ``dnnr compile``'s time limit covers interpreter start-up and imports."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        import os

        age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        age = 0.0
    return time.perf_counter() - max(age, 0.0)


@dataclass(frozen=True)
class _Slim:
    """An extracted graph as sent back from the worker: without the constants it shares
    with the graph the caller already holds (vgg19's 550 MB need not cross the pipe)."""

    graph: Graph
    order: tuple[tuple[str, bool], ...]  # every constant name, and whether it is shared

    def restore(self, original: Graph) -> Graph:
        if not self.order:
            return self.graph
        constants = {name: original.constants[name] if shared else self.graph.constants[name]
                     for name, shared in self.order}
        return dataclasses.replace(self.graph, constants=constants)


def _extract_in_worker(saturation: egraph.Saturation) -> tuple[_Slim, dict[str, tuple[str, ...]], Any, float]:
    """Extraction, run where the e-graph lives; what it gives back must pickle."""
    began = time.perf_counter()
    extraction = extract.extract(saturation)
    graph, before = extraction.graph, saturation.graph.constants
    order = tuple((name, before.get(name) is array) for name, array in graph.constants.items())
    slim = dataclasses.replace(graph, constants={n: a for n, a in graph.constants.items() if before.get(n) is not a})
    return _Slim(slim, order), extraction.provenance, saturation.stats, time.perf_counter() - began


TARGETS = ("onnx", "opencl", "hexagon")


def write_artefact(result: CompileResult, target: str, out: Path, *,
                   bindings: dict[str, int] | None = None, profile_db: str | Path | None = None,
                   progress: Progress | None = None) -> None:
    """Build ``target`` from ``result`` into ``out`` (OpenCL: kernels.cl, plan.json, …;
    Hexagon: C, ELF) with ``model.onnx``, ``report.json`` and ``manifest.json`` beside it,
    atomically: ``out`` holds the old artefact or the new one whole (`backends.artefact`).
    ``bindings`` fix symbolic input dims for the static-shape targets; ``profile_db``
    is a `dnnr tune` database deciding the OpenCL fusion planner's yellow cases."""
    from egraph_compiler.backends import artefact

    if target not in TARGETS:
        raise ir.DnnrError(f"error: unknown target {target!r} (choose one of {', '.join(TARGETS)})")
    if target == "onnx" and profile_db is not None:
        raise ir.DnnrError("error: --profile-db only applies to --target opencl")

    def build(tmp: Path) -> dict[str, Any]:
        graph = result.graph
        if target != "onnx":
            graph = _build_target(target, result, tmp, progress, bindings or {}, profile_db, out)
        (tmp / "model.onnx").write_bytes(ir.to_onnx(result.graph).SerializeToString())
        (tmp / "report.json").write_text(json.dumps(result.report.to_json(), indent=2) + "\n")
        return artefact.describe(target, result.source_sha256, graph, tmp)

    artefact.write_atomically(out, build)


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
                  bindings: dict[str, int], profile_db: str | Path | None, final: Path) -> Graph:
    """Run the backend into ``out`` (a temporary directory that becomes ``final``);
    the static graph it compiled."""
    if progress:
        progress(f"{target} backend ...")
    start = time.perf_counter()
    from egraph_compiler.backends.static_checks import prepare_static_graph

    graph = prepare_static_graph(static_graph(result.graph, bindings, target), target)
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
    # paths name the final directory, not the temporary one they were written in
    info = {k: (_moved(v, out, final) if isinstance(v, Path) else v)
            for k, v in dataclasses.asdict(artefact).items() if k != "report"}
    result.report.target = {"name": target, **info}
    return graph


def _moved(path: Path, tmp: Path, final: Path) -> str:
    return str(final / path.relative_to(tmp)) if path.is_relative_to(tmp) else str(path)


def _cost_json(cost: Any) -> dict[str, float]:
    return {"flops": float(cost.flops), "bytes": float(cost.bytes)}
