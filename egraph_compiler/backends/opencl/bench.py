"""``dnnr bench``: ours (fused) vs fusion off ("OurB") vs onnxruntime CPU, on PoCL.

`bench(model_path, repeats)` compiles the model twice (fusion on and off, with the
kernel parameters `dnnr compile --target opencl` uses for the same device class), runs
each ``repeats`` times after one warm-up run (which pays PoCL's lazy kernel
compilation), and times onnxruntime CPU with ``ORT_ENABLE_ALL``. It also counts
kernels launched and onnxruntime's optimised node count, and reports the arena
against a buffer per tensor and against the max-live lower bound, and the
launches of ours that take the most time, by OpenCL profiling events (device
time, `CompiledModel.time_launches`), with the sum over all launches beside the
wall time of a run.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from egraph_compiler.backends.opencl.build import build_artefact
from egraph_compiler.backends.opencl.kernels import KernelParams
from egraph_compiler.backends.opencl.planning import execution_plan
from egraph_compiler.backends.opencl.runtime import CompiledModel
from egraph_compiler.ir import Graph, load_onnx
from egraph_compiler.ir.dims import shape_is_static
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ops import evaluate
from egraph_compiler.shapes import infer_shapes


@dataclass(frozen=True)
class Timing:
    min_ms: float
    median_ms: float
    max_ms: float

    @staticmethod
    def of(seconds: list[float]) -> Timing:
        ms = [s * 1000.0 for s in seconds]
        return Timing(min(ms), statistics.median(ms), max(ms))

    def __str__(self) -> str:
        return f"{self.min_ms:9.2f} {self.median_ms:9.2f} {self.max_ms:9.2f}"


@dataclass(frozen=True)
class BenchResult:
    model: str
    operators: int
    kernels: int
    kernels_unfused: int
    ort_nodes: int
    ours: Timing
    unfused: Timing
    onnxruntime: Timing
    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    max_abs_error: float
    # ours' slowest launches by profiling events: (ms, kind, operators), slowest first
    hottest: tuple[tuple[float, str, str], ...] = ()
    kernels_ms: float = 0.0  # sum of every launch's device time (profiling events)

    def table(self) -> str:
        return "\n".join([
            f"model {self.model}: {self.operators} operators",
            f"  kernels launched: ours {self.kernels}, fusion off {self.kernels_unfused}, "
            f"onnxruntime (ORT_ENABLE_ALL) nodes {self.ort_nodes}",
            "  latency ms          min    median       max",
            f"  ours (PoCL)   {self.ours}",
            f"  fusion off    {self.unfused}",
            f"  onnxruntime   {self.onnxruntime}",
            f"  arena {self.arena_bytes} B, naive {self.naive_bytes} B, "
            f"lower bound {self.lower_bound_bytes} B",
            f"  max |ours - onnxruntime| = {self.max_abs_error:.3g}",
            f"  kernels of ours (profiling events, summed): {self.kernels_ms:.2f} ms",
            "  slowest launches of ours (device time, median of 3 runs):",
            *(f"  {ms:9.2f} ms  {kind:9s} {ops}" for ms, kind, ops in self.hottest),
        ])


def _bind_dims(model_path: str | Path, dims: dict[str, int], work: Path) -> Path:
    """A copy of the model whose symbolic input dims named in ``dims`` are fixed."""
    import onnx

    model = onnx.load(str(model_path))
    for info in model.graph.input:
        for dim in info.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in dims:
                size = dims[dim.dim_param]
                dim.Clear()
                dim.dim_value = size
    path = work / "static.onnx"
    onnx.save(model, str(path))
    return path


def _static_graph(model_path: str | Path) -> Graph:
    graph = infer_shapes(load_onnx(str(model_path), evaluate))
    for value in graph.inputs:
        if not shape_is_static(value.type.shape) and not shape_is_static(
                graph.types[value.name].shape):
            symbols = [str(d) for d in value.type.shape or () if not isinstance(d, int)]
            hint = f"--bind {symbols[0]}=1" if symbols else "--bind NAME=INT"
            raise ModelError(f"error: input '{value.name}' has symbolic dims ({', '.join(symbols) or '?'}); "
                             f"bench needs static shapes\n  hint: add {hint} (one --bind NAME=INT per symbol)")
    return graph


def _inputs(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in graph.inputs:
        shape = tuple(int(d) for d in graph.types[value.name].shape)  # type: ignore[union-attr]
        dtype = np.dtype(value.type.dtype)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[value.name] = rng.integers(0, 4, shape).astype(dtype)
    return feeds


def _time(fn, repeats: int) -> list[float]:  # noqa: ANN001
    fn()  # warm-up: PoCL compiles work-group functions on first launch
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return seconds


def _onnxruntime(model_path: str | Path, feeds: dict[str, np.ndarray], repeats: int,
                 work: Path) -> tuple[list[float], int, dict[str, np.ndarray]]:
    import onnx

    try:
        import onnxruntime as ort
    except ImportError:
        raise ModelError("error: dnnr bench measures onnxruntime as the peer, which is not installed\n"
                         "  hint: python3 -m pip install onnxruntime (or pip install -e '.[test]')") from None

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(work / "ort_optimized.onnx")
    options.log_severity_level = 3
    session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    nodes = len(onnx.load(str(work / "ort_optimized.onnx"), load_external_data=False).graph.node)
    names = [o.name for o in session.get_outputs()]
    outputs: dict[str, np.ndarray] = {}

    def run() -> None:
        outputs.update(zip(names, session.run(names, feeds), strict=False))

    return _time(run, repeats), nodes, outputs


def bench(model_path: str | Path, repeats: int = 10, dims: dict[str, int] | None = None,
          seed: int = 0, optimize: Callable[[Graph], Graph] | None = None,
          tables: object = None, device: str | None = None,
          params: KernelParams | None = None) -> BenchResult:
    """Time one ONNX model three ways (see the module docstring).

    ``optimize`` is the graph optimiser to run first (the CLI passes the e-graph
    pipeline with the rule library; ``None`` benchmarks the imported graph) and
    ``tables`` the fusion tables (a dsl `RuleSet` or `FusionTables`). ``params``: the
    kernel parameters both compiles use, by default the ``cpu`` class's (PoCL), as
    `dnnr compile --target opencl` builds them.
    """
    params = params or KernelParams.for_device("cpu")
    name = Path(model_path).stem
    with tempfile.TemporaryDirectory(prefix="dnnr-bench-") as tmp:
        work = Path(tmp)
        model_path = _bind_dims(model_path, dims or {}, work)
        graph = _static_graph(model_path)
        feeds = _inputs(graph, seed)
        if optimize is not None:
            graph = optimize(graph)
        results = {}
        hottest: tuple[tuple[float, str, str], ...] = ()
        kernels_ms = 0.0
        for label, fuse in (("ours", True), ("unfused", False)):
            plan, selection = execution_plan(graph, tables, fuse=fuse, params=params)
            artefact = build_artefact(plan, work / label, params, selection=selection)
            compiled = CompiledModel(work / label, device)
            outputs: dict[str, np.ndarray] = {}
            seconds = _time(lambda c=compiled, o=outputs: o.update(c.run(feeds)), repeats)
            results[label] = (artefact, Timing.of(seconds), outputs)
            if fuse:
                hottest, kernels_ms = _hottest(compiled)
        ort_seconds, ort_nodes, ort_outputs = _onnxruntime(model_path, feeds, repeats, work)
    ours, ours_time, ours_out = results["ours"]
    unfused, unfused_time, _ = results["unfused"]
    error = max((float(np.max(np.abs(ours_out[k].astype(np.float64) - v)))
                 for k, v in ort_outputs.items() if v.size), default=0.0)
    return BenchResult(name, ours.operators, ours.kernels, unfused.kernels,
                       ort_nodes, ours_time, unfused_time, Timing.of(ort_seconds),
                       ours.arena_bytes, ours.naive_bytes, ours.lower_bound_bytes, error,
                       hottest, kernels_ms)


def _hottest(compiled: CompiledModel, count: int = 5
             ) -> tuple[tuple[tuple[float, str, str], ...], float]:
    """The ``count`` slowest launches and the sum over all, in device ms."""
    launches = compiled.plan["launches"]
    seconds = compiled.time_launches()
    timed = sorted(zip(seconds, launches, strict=True), key=lambda t: -t[0])
    return tuple((s * 1000.0, launch["kind"], "+".join(launch["ops"]))
                 for s, launch in timed[:count]), sum(seconds) * 1000.0
