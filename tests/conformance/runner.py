"""onnx's per-operator node tests through dnnr, onnx target and OpenCL (PoCL) alike.

Compiling ~1,000 one-node models one by one costs a saturation each (about a second),
so cases of one opset are merged into one model (every value name prefixed by its case),
optimised once, then written as ONNX and run in onnxruntime, and compiled for OpenCL
and run on PoCL. A merged model that fails for a target is split in halves until the
case at fault is alone (an optimised subset is kept, so the two targets share the
saturations of the subsets both need). Every case ends in one outcome per target:

- ``refused``: dnnr raised a clear `DnnrError` (an unsupported construct): allowed;
- ``match``: the target reproduces onnx's expected outputs;
- ``wrong``: it does not (a silent wrong answer), or the written model does not load in
  onnxruntime though the case's own model does, or dnnr raised something other than a
  `DnnrError` (a traceback): never allowed.

Cases onnxruntime itself cannot load or reproduce are ``oracle`` (not counted). OpenCL
needs static shapes: a case's symbolic input dims are bound to its inputs' sizes (what
``--bind`` does). Before merging, a case's imported graph goes through shape inference
(onnx target) or is compiled for OpenCL (no saturation, no device build) alone; one
refused there is refused without a saturation (that
keeps a refusal from splitting every merged model it sits in).
"""

from __future__ import annotations

import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from egraph_compiler import ir, ops, pipeline, shapes
from egraph_compiler.dsl.ast import RuleSet
from egraph_compiler.ir.dims import DimExpr

TARGETS = ("onnx", "opencl")
# PoCL's float kernels are not onnxruntime's (contracted multiply-adds, its own exp/log):
# a looser floor than the onnx target's, the one the OpenCL backend tests use.
OPENCL_RTOL, OPENCL_ATOL = 1e-3, 1e-4


@dataclass
class Case:
    name: str
    op: str
    model: onnx.ModelProto
    inputs: list[np.ndarray]
    expected: list[np.ndarray]
    rtol: float
    atol: float

    @property
    def opset(self) -> int:
        return next(o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx"))

    def feeds(self) -> dict[str, np.ndarray]:
        names = [i.name for i in self.model.graph.input]
        return {n: np.asarray(v) for n, v in zip(names, self.inputs, strict=False)}


@dataclass
class Outcomes:
    match: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    wrong: dict[str, str] = field(default_factory=dict)
    ops: dict[str, str] = field(default_factory=dict)  # case -> its operator

    def covered_ops(self) -> list[str]:
        return sorted({self.ops[c] for c in self.match})


@dataclass
class Results:
    oracle: dict[str, str] = field(default_factory=dict)
    by_target: dict[str, Outcomes] = field(default_factory=lambda: {t: Outcomes() for t in TARGETS})
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per target


def close(got: list[np.ndarray], want: list[np.ndarray], rtol: float, atol: float) -> str | None:
    """None when ``got`` reproduces ``want`` (same shapes, dtypes, values within tolerance)."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return f"output {index}: shape {g.shape} != {w.shape}"
        if g.dtype != w.dtype:
            return f"output {index}: dtype {g.dtype} != {w.dtype}"
        if w.dtype.kind in "fc":
            if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
                error = np.abs(g.astype(float) - w.astype(float))
                return f"output {index}: max |error| {np.nanmax(error) if error.size else 0:.3g}"
        elif not np.array_equal(g, w):
            return f"output {index}: values differ"
    return None


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _prefixed(case: Case, prefix: str) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    graph = onnx.GraphProto()
    graph.CopyFrom(case.model.graph)
    rename = lambda n: f"{prefix}{n}" if n else n  # noqa: E731
    outer = {v.name for v in graph.input} | {t.name for t in graph.initializer} | \
        {o for node in graph.node for o in node.output if o}
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = rename(value.name)
    for init in graph.initializer:
        init.name = rename(init.name)
    for node in graph.node:
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
        node.name = rename(node.name or node.op_type)
        for body in _bodies(node):
            _rename_outer_references(body, outer, rename)
    return graph, {rename(k): v for k, v in case.feeds().items()}


def _bodies(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    return [sub for a in node.attribute
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))]


def _rename_outer_references(body: onnx.GraphProto, outer: set[str], rename) -> None:
    """Rename the values an If/Loop/Scan body reads from the case's graph (not its own)."""
    local = {v.name for v in body.input} | {t.name for t in body.initializer} | \
        {o for node in body.node for o in node.output if o}
    visible = outer - local
    for node in body.node:
        node.input[:] = [rename(n) if n in visible else n for n in node.input]
        for sub in _bodies(node):
            _rename_outer_references(sub, visible, rename)
    for value in body.output:  # a body output may be an outer value passed through
        if value.name in visible:
            value.name = rename(value.name)


def merged(cases: list[Case]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One model holding every case side by side (names prefixed), and its feeds."""
    graph = onnx.GraphProto(name="conformance")
    feeds: dict[str, np.ndarray] = {}
    for index, case in enumerate(cases):
        part, part_feeds = _prefixed(case, f"c{index}_")
        graph.node.extend(part.node)
        graph.input.extend(part.input)
        graph.output.extend(part.output)
        graph.initializer.extend(part.initializer)
        graph.value_info.extend(part.value_info)
        feeds.update(part_feeds)
    model = onnx.helper.make_model(graph, opset_imports=list(cases[0].model.opset_import))
    model.ir_version = max(c.model.ir_version for c in cases)
    return model, feeds


def _bound(graph: ir.Graph, feeds: dict[str, np.ndarray]) -> ir.Graph:
    """``graph`` with each symbolic input dim bound to its feed's size (``--bind``)."""
    bindings: dict[str, int] = {}
    for value in graph.inputs:
        for dim, size in zip(value.type.shape or (), np.shape(feeds[value.name]), strict=False):
            if isinstance(dim, DimExpr) and len(dim.symbols()) == 1 and str(dim) in dim.symbols():
                bindings[str(dim)] = int(size)
    return shapes.bind_symbols(graph, bindings) if bindings else graph


def _run_opencl(graph: ir.Graph, feeds: dict[str, np.ndarray], rules: RuleSet) -> dict[str, np.ndarray]:
    from egraph_compiler.backends import opencl
    from egraph_compiler.backends.static_checks import prepare_static_graph

    with ops.using(rules):
        static = prepare_static_graph(pipeline.static_graph(_bound(graph, feeds), {}, "opencl"),
                                      "opencl")
        with tempfile.TemporaryDirectory(prefix="dnnr-conformance-") as out:
            opencl.compile_graph(static, Path(out), tables=rules)
            model = opencl.load(out)
            return model.run({v.name: feeds[v.name] for v in static.inputs})


def onnx_screen(case: Case, rules: RuleSet) -> str | None:
    """Why shape inference refuses the case's imported graph alone, or None."""
    try:
        with ops.using(rules):
            shapes.infer_shapes(ir.load_onnx(case.model))
    except ir.DnnrError as error:
        return _first_line(error)
    except Exception:  # a traceback: the merged run meets it again and reports it
        return None
    return None


def opencl_screen(case: Case, rules: RuleSet) -> str | None:
    """Why OpenCL's planner refuses the case's imported graph alone, or None."""
    from egraph_compiler.backends import opencl
    from egraph_compiler.backends.static_checks import prepare_static_graph

    try:
        with ops.using(rules):
            graph = shapes.infer_shapes(ir.load_onnx(case.model))
            static = prepare_static_graph(
                pipeline.static_graph(_bound(graph, case.feeds()), {}, "opencl"), "opencl")
            with tempfile.TemporaryDirectory(prefix="dnnr-screen-") as out:
                artefact = opencl.compile_graph(static, Path(out), tables=rules)  # kernels, no device build
                if artefact.specialised:  # sizes from input values: compile for the case's
                    from egraph_compiler.backends.opencl.specialise import compile_for_values

                    compile_for_values(out, case.feeds(), Path(out) / "values")
    except ir.DnnrError as error:
        return _first_line(error)
    except Exception:  # a traceback: the merged run meets it again and reports it
        return None
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:240] if text else type(error).__name__


class _Runner:
    def __init__(self, rules: RuleSet, results: Results) -> None:
        self.rules = rules
        self.results = results
        self.optimised: dict[tuple[str, ...], ir.Graph | BaseException] = {}

    def optimise(self, cases: list[Case]) -> ir.Graph | BaseException:
        key = tuple(c.name for c in cases)
        if key not in self.optimised:
            model, _ = merged(cases)
            try:
                self.optimised[key] = pipeline.optimize(ir.load_onnx(model), self.rules)[0]
            except Exception as error:  # judged per case once split down to one
                self.optimised[key] = error
        return self.optimised[key]

    def execute(self, target: str, cases: list[Case]) -> list[np.ndarray]:
        graph = self.optimise(cases)
        if isinstance(graph, BaseException):
            raise graph
        _, feeds = merged(cases)
        if target == "onnx":
            return run_onnxruntime(ir.to_onnx(graph), feeds)
        outputs = _run_opencl(graph, feeds, self.rules)
        return [outputs[o.name] for o in graph.outputs]

    def settle(self, target: str, cases: list[Case]) -> None:
        """Run ``cases`` merged on ``target``; split on any failure down to single cases."""
        outcomes = self.results.by_target[target]
        try:
            results = self.execute(target, cases)
        except Exception as error:
            if len(cases) > 1:
                half = len(cases) // 2
                self.settle(target, cases[:half])
                self.settle(target, cases[half:])
                return
            name = cases[0].name
            if isinstance(error, ir.DnnrError):
                outcomes.refused[name] = _first_line(error)
            elif target == "onnx" and isinstance(error, ort.capi.onnxruntime_pybind11_state.Fail
                                                  | RuntimeError):
                outcomes.wrong[name] = f"onnxruntime refuses the written model: {_first_line(error)}"
            else:
                outcomes.wrong[name] = f"traceback: {type(error).__name__}: {_first_line(error)}"
            return
        position = 0
        for case in cases:
            count = len(case.expected)
            rtol, atol = (case.rtol, case.atol) if target == "onnx" else \
                (max(case.rtol, OPENCL_RTOL), max(case.atol, OPENCL_ATOL))
            mismatch = close(results[position:position + count], case.expected, rtol, atol)
            position += count
            if mismatch is None:
                outcomes.match.append(case.name)
            else:
                outcomes.wrong[case.name] = mismatch


def run(cases: list[Case], rules: RuleSet, targets: tuple[str, ...] = TARGETS, batch: int = 128,
        log: Callable[[str], None] = lambda _: None) -> Results:
    """Every case through every target in ``targets``."""
    results = Results()
    runner = _Runner(rules, results)
    by_opset: dict[str, dict[int, list[Case]]] = {t: defaultdict(list) for t in targets}
    for case in cases:
        try:
            oracle = close(run_onnxruntime(case.model, case.feeds()), case.expected,
                           case.rtol, case.atol)
        except Exception as error:
            oracle = f"onnxruntime cannot run it: {_first_line(error)}"
        if oracle is not None:
            results.oracle[case.name] = oracle
            continue
        for target in targets:
            results.by_target[target].ops[case.name] = case.op
        try:
            ir.load_onnx(case.model)
        except Exception as error:
            for target in targets:
                outcome = results.by_target[target]
                if isinstance(error, ir.DnnrError):
                    outcome.refused[case.name] = _first_line(error)
                else:
                    outcome.wrong[case.name] = f"traceback on import: {type(error).__name__}: " \
                                               f"{_first_line(error)}"
            continue
        for target in targets:
            why = opencl_screen(case, rules) if target == "opencl" else onnx_screen(case, rules)
            if why is not None:
                results.by_target[target].refused[case.name] = why
            else:
                by_opset[target][case.opset].append(case)
    for target in targets:
        started = time.perf_counter()
        for opset, group in sorted(by_opset[target].items()):
            for start in range(0, len(group), batch):
                runner.settle(target, group[start:start + batch])
                log(f"{target} opset {opset}: {min(start + batch, len(group))}/{len(group)}")
        results.seconds[target] = round(time.perf_counter() - started, 1)
    return results
