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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from egraph_compiler import dsl, dump, egraph, extract, ir, ops, shapes
from egraph_compiler.dsl import library
from egraph_compiler.dsl.ast import Limits, RuleSet
from egraph_compiler.dsl.fp_policy import DEFAULT_FP, apply_fp_policy, check_fp_mode
from egraph_compiler.dsl.library import RuleOptions
from egraph_compiler.dsl.load_budget import load_budget
from egraph_compiler.dump import Dumps
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
    dumps: Dumps = field(default_factory=Dumps)  # what `write_artefact` prints of the backend stages
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


def load_rules(rule_paths: Sequence[str | Path] | None = None, target: str = "onnx",
               options: RuleOptions | None = None) -> RuleSet:
    """Parse the rule files (default: the target's own rules, else the shipped library),
    then ``options``' added files (their rules without a ruleset run under the
    schedule, `dsl.library`), minus the disabled rules / other rulesets."""
    options = options or RuleOptions()
    own = target_rules(target)
    base: list[str | Path] = list(rule_paths) if rule_paths else [own if own else default_rules_dir()]
    rules = dsl.load_rules([*base, *options.add], options.search)
    rules = library.schedule_added(rules, options.add)
    return library.filter_rules(rules, options.disable, options.only)


def optimize(
    graph: Graph,
    rules: RuleSet,
    *,
    limits: Limits | None = None,
    progress: Progress | None = None,
    report: Report | None = None,
    dumps: Dumps | None = None,
    dims: dict[str, tuple[int, int]] | None = None,
    started: float | None = None,
) -> tuple[Graph, Report]:
    """Saturate ``graph`` under ``rules`` and extract the cheapest equivalent graph.

    In: a `Graph` (shapes inferred or not) and a parsed `RuleSet`; ``dims`` narrows the
    ranges of symbolic input dims (``--dim seq=1..512``; default ``1..2**31-1``), which
    shape inference and the rules' guards assume. Out: the optimised `Graph` (shapes
    inferred) and the `Report` of what happened. The time limit counts from ``started``
    (default: now) and binds on saturation and extraction.
    """
    with ops.using(rules):  # stages read operator facts from the rules compiled with
        return _optimize(graph, rules, limits, progress, report or Report(model=graph.name),
                         dumps or Dumps(), dims or {}, started)


def _optimize(graph: Graph, rules: RuleSet, limits: Limits | None, progress: Progress | None,
              report: Report, dumps: Dumps, dims: dict[str, tuple[int, int]],
              started: float | None) -> tuple[Graph, Report]:
    dim_ranges = shapes.dim_ranges(graph, dims)
    report.dims = {name: {"low": low, "high": high, "given": name in dims}
                   for name, (low, high) in dim_ranges.items()}
    classes = shapes.declared_classes(rules.ops)  # SoD² dynamism classes: which RDP transfers apply
    with _stage(report, "shapes", progress):
        graph = shapes.infer_shapes(graph, symbols=dim_ranges, dynamism=classes)
    report.rdp = shapes.rdp_census(graph, classes)
    dumps.write("shapes", lambda: dump.graph_text(graph))
    if not report.nodes_before:  # `compile_model` counts the ONNX file it read instead;
        # here the input graph as the exporter writes it, the same measure as `nodes_after`
        report.nodes_before = onnx_op_counts(ir.to_onnx(graph))
    report.cost_before = _cost_json(extract.graph_cost(graph))
    # the time limit binds on loading, saturation and extraction together (from
    # ``started``, the start of the compile): they run in workers the limit can stop
    with _stage(report, "saturate", progress):
        extracted = egraph.saturate_then(
            graph, rules, limits, progress, lambda saturation: _extract_in_worker(saturation, dumps),
            lambda stats: _Extracted(graph, (), {}, {}, stats, 0.0, None), started)
    if extracted.egraph_text is not None:
        dumps.write("saturate", lambda: str(extracted.egraph_text))
    report.seconds["saturate"] = round(report.seconds["saturate"] - extracted.seconds, 4)
    report.seconds["extract"] = round(extracted.seconds, 4)
    with _stage(report, "shapes-after", progress):
        optimised = shapes.infer_shapes(extracted.restore(graph), dynamism=classes)
    dumps.write("extract", lambda: dump.graph_text(optimised))
    stats = extracted.stats
    report.nodes_after = onnx_op_counts(ir.to_onnx(optimised))
    report.cost_after = _cost_json(extract.graph_cost(optimised))
    _record_rules(report, rules, stats, extracted)
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
    return optimised, report


def onnx_op_counts(model: onnx.ModelProto) -> dict[str, int]:
    """Nodes per operator of an ONNX model's main graph (domain-qualified outside
    the default domain): what the report's before/after tables show."""
    counts: dict[str, int] = {}
    for node in model.graph.node:
        op = f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items()))


def _record_rules(report: Report, rules: RuleSet, stats: Any, extraction: Any) -> None:
    """Applications (distinct e-classes rewritten), matches, rules whose guard never
    held, and per output node the rules that built it in the order they first fired
    (operand swaps left out: they rewrite nothing a reader needs to see)."""
    report.rules_fired = {k: v for k, v in stats.rule_sites.items() if v}
    report.rule_matches = {k: v for k, v in sorted(stats.rule_matches.items()) if v}
    report.guard_failed = sorted(k for k, v in stats.rule_matches.items()
                                 if v and not stats.rule_fires.get(k))
    swaps = {r.name for r in rules.rules if library.is_operand_swap(r)}
    order = {name: i for i, name in enumerate(stats.fire_order)}
    provenance = {}
    for node, names in sorted(extraction.provenance.items()):
        kept = sorted((n for n in names if n not in swaps), key=lambda n: (order.get(n, len(order)), n))
        if kept:
            provenance[node] = kept
    report.provenance = provenance
    report.origins = {k: list(v) for k, v in sorted(extraction.origins.items()) if k in provenance}
    report.rule_sources = {r.name: str(r.span) for r in rules.rules}


def compile_model(
    model: str | Path | bytes,
    *,
    rule_paths: Sequence[str | Path] | None = None,
    limits: Limits | None = None,
    progress: Progress | None = None,
    target: str = "onnx",
    rule_options: RuleOptions | None = None,
    dumps: Dumps | None = None,
    dims: dict[str, tuple[int, int]] | None = None,
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
    with _stage(report, "parse-rules", progress), load_budget(started, limits.seconds if limits else None):
        check_fp_mode(fp)
        rules = load_rules(rule_paths, target, rule_options)
        rules, report.fp = apply_fp_policy(rules, fp, special_value_changes(rules) if fp == "strict" else None)
    with _stage(report, "import", progress), ops.using(rules):
        graph = ir.load_onnx(model, ops.evaluate)
        if target == "hexagon":  # QConvInt has explicit pads only (backends/hexagon/explicit_pads.py)
            from egraph_compiler.backends.hexagon.explicit_pads import explicit_pads

            graph = explicit_pads(graph)
    report.nodes_before = onnx_op_counts(_read_onnx(model))
    dumps = dumps or Dumps()
    dumps.write("import", lambda: dump.graph_text(graph))
    optimised, report = optimize(graph, rules, limits=limits, progress=progress, report=report, dumps=dumps,
                                 dims=dims, started=started)
    from egraph_compiler.backends.artefact import source_digest

    return CompileResult(optimised, report, rules, dumps, source_digest(model))


def special_value_changes(rules: RuleSet) -> dict[str, tuple[str, ...]]:
    """What the special-value record (`verify.special_values`, cached on disk) of each
    ``[exact]`` rule shows it changes: ``--fp strict`` leaves out a rule with any."""
    from egraph_compiler.verify import special_values

    exact = dataclasses.replace(rules, rules=tuple(r for r in rules.rules if "exact" in r.flags))
    return {name: record.changes for name, record in special_values.records(exact).items()}


def _read_onnx(model: str | Path | bytes) -> onnx.ModelProto:
    """The ONNX file as read (``ir.load_onnx`` has accepted it already)."""
    if isinstance(model, bytes):
        return onnx.load_model_from_string(model)
    return onnx.load(str(model), load_external_data=False)


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
class _Extracted:
    """What extraction in the worker sends back: the graph without the constants it
    shares with the caller's (vgg19's 550 MB need not cross the pipe), provenance,
    statistics, seconds, and the text of the e-graph dump."""

    graph: Graph
    order: tuple[tuple[str, bool], ...]  # every constant name, and whether it is shared
    provenance: dict[str, tuple[str, ...]]
    origins: dict[str, Any]
    stats: Any
    seconds: float
    egraph_text: str | None  # the saturate dump, when asked for

    def restore(self, original: Graph) -> Graph:
        if not self.order:
            return self.graph
        constants = {name: original.constants[name] if shared else self.graph.constants[name]
                     for name, shared in self.order}
        return dataclasses.replace(self.graph, constants=constants)


def _extract_in_worker(saturation: egraph.Saturation, dumps: Dumps) -> _Extracted:
    """Extraction (and the e-graph dumps), run where the e-graph lives; it must pickle."""
    # the text goes back to be printed by the caller: this process's sys.stderr may
    # be a buffer of the caller's (a test's capture) that nobody reads
    text = dump.egraph_text(saturation) if dumps.wants("saturate") else None
    if dumps.egraph_file is not None:
        dump.write_egraph_json(saturation, dumps.egraph_file)
    began = time.perf_counter()
    extraction = extract.extract(saturation)
    graph, before = extraction.graph, saturation.graph.constants
    order = tuple((name, before.get(name) is array) for name, array in graph.constants.items())
    slim = dataclasses.replace(graph, constants={n: a for n, a in graph.constants.items() if before.get(n) is not a})
    return _Extracted(slim, order, extraction.provenance, extraction.origins, saturation.stats,
                      time.perf_counter() - began, text)


TARGETS = ("onnx", "opencl", "hexagon")


def write_artefact(result: CompileResult, target: str, out: Path, *,
                   bindings: dict[str, int] | None = None, profile_db: str | Path | None = None,
                   progress: Progress | None = None, kernel_device: str = "cpu",
                   tuned_device: str | None = None, dim_steps: dict[str, int] | None = None) -> None:
    """Build ``target`` from ``result`` into ``out`` (OpenCL: kernels.cl, plan.json, …;
    Hexagon: C, ELF) with ``model.onnx``, ``report.json`` and ``manifest.json`` beside it,
    atomically: ``out`` holds the old artefact or the new one whole (`backends.artefact`).
    ``bindings`` fix symbolic input dims for the static-shape targets; ``profile_db``
    is a `dnnr tune` database deciding the OpenCL fusion planner's yellow cases;
    ``kernel_device`` the device class ("cpu", "gpu") OpenCL anchor kernels are for;
    ``tuned_device`` whose kernel choices in ``profile_db`` to use (when it has several);
    ``dim_steps`` the step of a symbolic OpenCL artefact's dims (``--dim height=32..64:8``)."""
    from egraph_compiler.backends import artefact

    if target not in TARGETS:
        raise ir.DnnrError(f"error: unknown target {target!r} (choose one of {', '.join(TARGETS)})")
    if target == "onnx" and profile_db is not None:
        raise ir.DnnrError("error: --profile-db only applies to --target opencl")

    def build(tmp: Path) -> dict[str, Any]:
        graph = written = result.graph
        if target != "onnx":
            with ops.using(result.rules):
                graph = _build_target(target, result, tmp, progress, bindings or {}, profile_db, out,
                                      kernel_device, tuned_device, dim_steps or {})
        elif bindings:  # the written model's dims, as --bind says
            graph = written = shapes.bind_symbols(result.graph, bindings)
        (tmp / "model.onnx").write_bytes(ir.to_onnx(written).SerializeToString())
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
                  bindings: dict[str, int], profile_db: str | Path | None, final: Path,
                  kernel_device: str = "cpu", tuned_device: str | None = None,
                  dim_steps: dict[str, int] | None = None) -> Graph:
    """Run the backend into ``out`` (a temporary directory that becomes ``final``);
    the static graph it compiled."""
    if progress:
        progress(f"{target} backend ...")
    start = time.perf_counter()
    from egraph_compiler.backends.static_checks import prepare_static_graph

    artefact: Any
    if target == "opencl" and _symbolic_inputs(shapes.bind_symbols(result.graph, bindings)
                                               if bindings else result.graph):
        # no --bind for some dims: one artefact for every shape in their --dim ranges
        from egraph_compiler.backends.opencl import KernelParams
        from egraph_compiler.backends.opencl.kernel_search import tuned_options
        from egraph_compiler.backends.opencl.symbolic import build_symbolic
        from egraph_compiler.fusion import ProfileDb

        graph = shapes.bind_symbols(result.graph, bindings) if bindings else result.graph
        db = ProfileDb.load(profile_db) if profile_db is not None else None
        params = KernelParams.for_device(kernel_device)
        if db is not None:
            params = dataclasses.replace(params, tuned=tuned_options(db, tuned_device))
        from egraph_compiler.backends.opencl.segmented import data_dependent
        from egraph_compiler.backends.opencl.specialise import value_inputs, write_deferred

        needed = value_inputs(graph)
        if needed or data_dependent(graph):  # sizes decided by input values too: dims and values bound at run time
            artefact = write_deferred(graph, out, needed, result.rules, db, params=params)
        else:
            artefact = build_symbolic(graph, out, tables=result.rules, profile_db=db, params=params,
                                      progress=progress, steps=dim_steps)
    elif target == "opencl":
        graph = prepare_static_graph(static_graph(result.graph, bindings, target), target)
        from egraph_compiler.backends import opencl
        from egraph_compiler.backends.opencl.kernel_search import tuned_options
        from egraph_compiler.fusion import ProfileDb

        db = ProfileDb.load(profile_db) if profile_db is not None else None
        params = opencl.KernelParams.for_device(kernel_device)
        if db is not None:  # `dnnr tune`'s kernel choices for this device
            params = dataclasses.replace(params, tuned=tuned_options(db, tuned_device))
        artefact = opencl.compile_graph(graph, out, tables=result.rules, profile_db=db,
                                        params=params, symbolic=_declared_symbols(result.graph))
        if artefact.specialised is None:  # else fusion and plan happen at run time
            _dump_backend_stages(result.dumps, graph, result.rules, db, params.device)
    else:
        if profile_db is not None:
            raise ir.DnnrError("error: --profile-db only applies to --target opencl")
        from egraph_compiler.backends import hexagon

        graph = prepare_static_graph(static_graph(result.graph, bindings, target), target)
        artefact = hexagon.build(graph, out, symbolic=_declared_symbols(result.graph))
    result.report.seconds[f"backend-{target}"] = round(time.perf_counter() - start, 4)
    # paths name the final directory, not the temporary one they were written in
    info = {k: (_moved(v, out, final) if isinstance(v, Path) else v)
            for k, v in dataclasses.asdict(artefact).items()
            if k not in ("report", "select") and not (k in ("dynamic", "specialised") and v is None)}
    result.report.select = getattr(artefact, "select", None) or {}
    result.report.target = {"name": target, **info}
    return graph


def _symbolic_inputs(graph: Graph) -> bool:
    from egraph_compiler.ir.dims import DimExpr

    return any(isinstance(d, DimExpr) for v in graph.inputs for d in v.type.shape or ())


def _declared_symbols(graph: Graph) -> Graph | None:
    """``graph`` keeping only the dim ranges ``--dim`` declared (the selection's
    multi-version analysis compares option costs over them), or None without any."""
    from egraph_compiler.shapes.infer import DEFAULT_RANGE

    declared = {s: r for s, r in graph.symbols.items() if r != DEFAULT_RANGE}
    return dataclasses.replace(graph, symbols=declared) if declared else None


def _moved(path: Path, tmp: Path, final: Path) -> str:
    return str(final / path.relative_to(tmp)) if path.is_relative_to(tmp) else str(path)


def _dump_backend_stages(dumps: Dumps, graph: Graph, rules: RuleSet, db: Any,
                         device: str = "cpu") -> None:
    """The fusion and memory plans `opencl.compile_graph` built (both stages are
    deterministic, so planning again gives the same plans)."""
    if not (dumps.wants("fusion") or dumps.wants("plan")):
        return
    from egraph_compiler.backends.opencl.cost import DEVICES, fusion_cost
    from egraph_compiler.backends.opencl.planning import with_kernels
    from egraph_compiler.fusion import plan_fusion
    from egraph_compiler.plan import plan_memory

    fusion_plan = plan_fusion(with_kernels(graph), rules, db, cost=fusion_cost(DEVICES[device]))
    dumps.write("fusion", lambda: dump.fusion_text(fusion_plan))
    dumps.write("plan", lambda: dump.plan_text(plan_memory(fusion_plan)))


def _cost_json(cost: Any) -> dict[str, float]:
    return {"flops": float(cost.flops), "bytes": float(cost.bytes)}
