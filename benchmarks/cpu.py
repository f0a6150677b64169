"""dnnr on this machine's CPU (PoCL) against onnxruntime's CPU provider, in one process.

    PYTHONPATH=. python3 benchmarks/cpu.py [--models resnet50,mobilenet_v3_small,bert_tiny]
                                           [--rounds 20] [--hot 8]
                                           [--threads auto|workers|caller]

The issue's CPU target: within 2× of onnxruntime on ResNet-50, MobileNetV3 and BERT-tiny.
The models:

- ``resnet50``: the corpus's ResNet-50 (``~/.cache/dnnr/corpus``, `tests/corpus/build.py`)
  at batch 1, 224²;
- ``mobilenet_v3_small``: torchvision's, weights from `gpu.seeded_weights` (seed 0),
  exported with the TorchScript exporter at batch 1, 224² (the corpus has MobileNetV2 only);
- ``bert_tiny``: the corpus's ``bert_sdpa`` (a BERT of the tiny family) at batch 1, seq 64.

Each model is compiled once (e-graph pipeline with the shipped rules, fusion on, the
``cpu`` device class), then dnnr end to end (`CompiledModel.run`: inputs copied in,
outputs copied out) and onnxruntime (``ORT_ENABLE_ALL``, ``intra_op_num_threads`` = the
cores PoCL uses) are timed *alternately*, ``--rounds`` rounds of one run each, so both
see the same load on this shared machine; the minimum of each is reported and their
ratio. On a loaded machine wall time mostly measures the scheduler, so each run's
process CPU time (every thread: PoCL's workers, onnxruntime's pool) is reported too,
its minimum over the rounds; onnxruntime's is taken from a second session with its
pool's spin-waiting off (a spinning thread burns CPU time doing nothing), timed in
the same rounds. The model compiled with fusion off is timed after, in as many rounds
beside onnxruntime (the issue's "fused never slower than fusion-off"): not alternating
with the fused model, whose launches would evict its work-group functions from PoCL's
cache of 128 (`measure` says why). dnnr's kernels alone are the sum
of every launch's OpenCL profiling-event time (`CompiledModel.time_launches`, minimum over ``--rounds // 4`` repetitions of the
median of 3), and the ``--hot`` slowest launches are listed by kind and operators.
The largest difference between dnnr's outputs and onnxruntime's is printed beside.

Each dnnr run goes to PoCL's worker pool or its calling thread, as the runtime chooses
(`cpu_threads`: the faster of the two lately); ``caller`` counts the timed runs on the
calling thread, and ``--threads workers`` / ``caller`` forces one for every run (the
median wall times printed beside show the waiting that choice avoids under load).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ("resnet50", "mobilenet_v3_small", "bert_tiny")
CORPUS = {"resnet50": ("resnet50", {"batch": 1, "height": 224, "width": 224}),
          "bert_tiny": ("bert_sdpa", {"batch": 1, "seq": 64}),
          # not in the three; the previous session's CPU numbers used it
          "mobilenet_v2": ("mobilenet_v2", {"batch": 1, "height": 224, "width": 224})}


def _corpus_dir() -> Path:
    base = Path(os.environ.get("DNNR_CORPUS", Path.home() / ".cache" / "dnnr" / "corpus"))
    found = sorted(base.glob("*/manifest.json"))
    if not found:
        raise SystemExit(f"error: no corpus under {base}\n  hint: python3 tests/corpus/build.py")
    return found[-1].parent


def model_path(name: str, work: Path) -> tuple[Path, dict[str, int]]:
    """The ONNX file of ``name`` and the dims to bind."""
    if name in CORPUS:
        stem, dims = CORPUS[name]
        return _corpus_dir() / f"{stem}.ts.onnx", dims
    if name != "mobilenet_v3_small":
        raise SystemExit(f"error: unknown model '{name}' (one of {', '.join(MODELS)})")
    import torch

    from benchmarks.gpu import _Exported, build_model, model_inputs

    model = build_model(name)
    inputs = model_inputs(name, 1)
    path = work / f"{name}.onnx"
    torch.onnx.export(_Exported(model, name), tuple(torch.from_numpy(v) for v in inputs.values()),
                      str(path), dynamo=False, opset_version=17, input_names=list(inputs),
                      output_names=["y"])
    return path, {}


def _pocl_cores() -> int:
    """Threads PoCL's pthread device runs (its compute units)."""
    import pyopencl as cl

    from egraph_compiler.backends.opencl.cpu_threads import expose_caller_device

    expose_caller_device()  # as the runtime does, before PoCL's first platform query
    for platform in cl.get_platforms():
        if "portable" in platform.name.lower() or "pocl" in platform.name.lower():
            # the worker pool's, not the calling-thread device's one (`cpu_threads`)
            return max(int(d.max_compute_units) for d in platform.get_devices())
    return os.cpu_count() or 1


def measure(name: str, rounds: int, hot: int, work: Path, threads: str = "auto"
            ) -> dict[str, Any]:
    import onnxruntime as ort

    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl import KernelParams
    from egraph_compiler.backends.opencl.bench import _bind_dims, _inputs, _static_graph
    from egraph_compiler.backends.opencl.build import build_artefact
    from egraph_compiler.backends.opencl.cpu_threads import CALLER
    from egraph_compiler.backends.opencl.planning import execution_plan
    from egraph_compiler.backends.opencl.runtime import CompiledModel

    source, dims = model_path(name, work)
    static = _bind_dims(source, dims, work)
    graph = _static_graph(static)
    feeds = _inputs(graph, seed=0)
    rules = pipeline.load_rules()
    start = time.perf_counter()
    optimised = pipeline.optimize(graph, rules)[0]
    params = KernelParams.for_device("cpu")
    plan, selection = execution_plan(optimised, rules, params=params)
    artefact = build_artefact(plan, work / f"{name}.dnnr", params, selection=selection)
    compile_s = time.perf_counter() - start
    compiled = CompiledModel(work / f"{name}.dnnr")
    # the other CPU criterion: fused never slower than fusion off
    plan_off, selection_off = execution_plan(optimised, rules, fuse=False, params=params)
    build_artefact(plan_off, work / f"{name}.off.dnnr", params, selection=selection_off)
    unfused = CompiledModel(work / f"{name}.off.dnnr")

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = _pocl_cores()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(static), options, providers=["CPUExecutionProvider"])
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    quiet = ort.InferenceSession(str(static), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    ours_out = compiled.run(feeds)  # warm-up: PoCL compiles work-group functions lazily
    ort_out = dict(zip(names, session.run(names, feeds), strict=True))
    quiet.run(names, feeds)
    # Each dnnr model is timed in a phase of its own, alternating with onnxruntime only:
    # PoCL keeps at most 128 work-group functions loaded per process (its dlhandle cache,
    # MAX_CACHE_ITEMS, least recently used out, dlclose/dlopen back), and the fused and
    # fusion-off models alternating (MobileNetV3: 64 + 122 launches) reloaded the other's
    # functions every run: that was the "process CPU 2-3× wall" of earlier sessions, and
    # fusion-off runs of 13-33 ms against 4-4.4 ms of kernels
    for model in (compiled, unfused):  # `cpu_threads`: the runtime's choice unless forced
        model.threads.fixed = None if threads == "auto" else threads
    ours_s, ort_s, ours_cpu, ort_cpu, off_s = [], [], [], [], []
    compiled.threads.counts.clear()
    for _ in range(rounds):
        t0 = time.perf_counter()
        compiled.run(feeds)
        t1 = time.perf_counter()
        session.run(names, feeds)
        t2 = time.perf_counter()
        ours_s.append(t1 - t0)
        ort_s.append(t2 - t1)
        c0 = time.process_time()
        compiled.run(feeds)
        c1 = time.process_time()
        quiet.run(names, feeds)
        c2 = time.process_time()
        ours_cpu.append(c1 - c0)
        ort_cpu.append(c2 - c1)
    caller_runs = compiled.threads.counts.get(CALLER, 0)
    per_launch = None
    for _ in range(max(rounds // 4, 1)):
        times = compiled.time_launches()
        per_launch = times if per_launch is None else [min(a, b) for a, b in
                                                      zip(per_launch, times, strict=True)]
    assert per_launch is not None
    unfused.run(feeds)  # its work-group functions loaded back
    unfused.threads.counts.clear()
    for _ in range(rounds):  # beside onnxruntime as the fused model was, for a like load
        t0 = time.perf_counter()
        unfused.run(feeds)
        off_s.append(time.perf_counter() - t0)
        session.run(names, feeds)
    off_launch = None
    for _ in range(max(rounds // 4, 1)):
        times = unfused.time_launches()
        off_launch = times if off_launch is None else [min(a, b) for a, b in
                                                       zip(off_launch, times, strict=True)]
    assert off_launch is not None
    launches = compiled.plan["launches"]
    ranked = sorted(zip(per_launch, launches, strict=True), key=lambda t: -t[0])
    error = max(float(np.max(np.abs(ours_out[k].astype(np.float64) - v)))
                for k, v in ort_out.items() if v.size)
    scale = max(float(np.max(np.abs(v))) for v in ort_out.values() if v.size)
    return {"model": name, "launches": len(launches), "compile_s": compile_s,
            "ours_ms": min(ours_s) * 1e3, "ort_ms": min(ort_s) * 1e3,
            "ours_median_ms": statistics.median(ours_s) * 1e3,
            "ort_median_ms": statistics.median(ort_s) * 1e3,
            "kernels_ms": sum(per_launch) * 1e3, "ours_cpu_ms": min(ours_cpu) * 1e3,
            "ort_cpu_ms": min(ort_cpu) * 1e3, "error": error / max(scale, 1e-30),
            "off_ms": min(off_s) * 1e3, "off_kernels_ms": sum(off_launch) * 1e3,
            "off_launches": len(unfused.plan["launches"]),
            "caller_runs": caller_runs, "off_caller_runs": unfused.threads.counts.get(CALLER, 0),
            "operators": artefact.operators,
            "hot": [(s * 1e3, launch["kind"], "+".join(launch["ops"]), launch.get("variant", ""))
                    for s, launch in ranked[:hot]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--hot", type=int, default=8)
    parser.add_argument("--threads", choices=("auto", "workers", "caller"), default="auto",
                        help="PoCL's worker pool or calling thread for every run (default: "
                             "the runtime's choice, `cpu_threads`)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="dnnr-cpu-") as tmp:
        for name in args.models.split(","):
            result = measure(name, args.rounds, args.hot, Path(tmp), args.threads)
            rows.append(result)
            print(f"{name}: {result['operators']} operators, {result['launches']} launches, "
                  f"compiled in {result['compile_s']:.0f} s, max |dnnr - ort| / max |ort| = "
                  f"{result['error']:.2g}")
            for ms, kind, ops, variant in result["hot"]:
                print(f"  {ms:8.3f} ms  {kind:10s} {variant[:28]:28s} {ops[:70]}")
    print(f"\nPoCL threads {_pocl_cores()} = onnxruntime intra-op threads; min of "
          f"{args.rounds} alternating runs, ms")
    print(f"{'model':20s} {'dnnr e2e':>9s} {'kernels':>9s} {'ort':>9s} {'e2e/ort':>8s} "
          f"{'kern/ort':>8s} {'dnnr CPU':>9s} {'ort CPU':>9s} {'CPU/CPU':>8s} {'caller':>6s}")
    for r in rows:
        print(f"{r['model']:20s} {r['ours_ms']:9.2f} {r['kernels_ms']:9.2f} {r['ort_ms']:9.2f} "
              f"{r['ours_ms'] / r['ort_ms']:8.2f} {r['kernels_ms'] / r['ort_ms']:8.2f} "
              f"{r['ours_cpu_ms']:9.2f} {r['ort_cpu_ms']:9.2f} "
              f"{r['ours_cpu_ms'] / r['ort_cpu_ms']:8.2f} {r['caller_runs']:6d}")
    print(f"caller: of the {2 * args.rounds} timed runs, those on PoCL's calling thread "
          f"rather than its worker pool (`cpu_threads`); medians of the wall times, ms:")
    for r in rows:
        print(f"  {r['model']:20s} dnnr {r['ours_median_ms']:7.2f}  ort "
              f"{r['ort_median_ms']:7.2f}")
    print(f"\nfusion off (rounds of its own), ms\n{'model':20s} {'launches':>8s} {'off e2e':>9s} "
          f"{'off kern':>9s} {'fused/off e2e':>13s} {'kernels':>8s} {'caller':>6s}")
    for r in rows:
        print(f"{r['model']:20s} {r['off_launches']:8d} {r['off_ms']:9.2f} "
              f"{r['off_kernels_ms']:9.2f} {r['ours_ms'] / r['off_ms']:13.2f} "
              f"{r['kernels_ms'] / r['off_kernels_ms']:8.2f} {r['off_caller_runs']:6d}")


if __name__ == "__main__":
    main()
