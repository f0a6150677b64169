"""PoCL's worker pool against its calling thread (`cpu_threads`), paired, beside onnxruntime.

    PYTHONPATH=. python3 benchmarks/cpu_threads.py [--models mobilenet_v3_small,resnet50]
                                                   [--rounds 40] [--fusion-off]

Each model (as `benchmarks/cpu.py` builds it: CPU device class, fusion on unless
``--fusion-off``) runs ``--rounds`` rounds of one run on the worker pool, one on the
calling thread (in alternating order) and one of onnxruntime (``intra_op_num_threads`` =
the pool's threads), so all three see the same moments of the machine's load. Printed:
the minimum and median wall time of each and the process CPU time of each (minimum),
the load average, and how many of the runs each mode won. On a loaded machine the pool's
wall time is mostly waiting: its hand-overs wait for the scheduler (`cpu_threads`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def compare(name: str, rounds: int, fuse: bool, work: Path) -> None:
    import onnxruntime as ort

    from benchmarks.cpu import _pocl_cores, model_path
    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl import KernelParams
    from egraph_compiler.backends.opencl.bench import _bind_dims, _inputs, _static_graph
    from egraph_compiler.backends.opencl.build import build_artefact
    from egraph_compiler.backends.opencl.cpu_threads import CALLER, WORKERS
    from egraph_compiler.backends.opencl.planning import execution_plan
    from egraph_compiler.backends.opencl.runtime import CompiledModel

    source, dims = model_path(name, work)
    static = _bind_dims(source, dims, work)
    graph = _static_graph(static)
    feeds = _inputs(graph, seed=0)
    rules = pipeline.load_rules()
    params = KernelParams.for_device("cpu")
    plan, selection = execution_plan(pipeline.optimize(graph, rules)[0], rules, fuse=fuse,
                                     params=params)
    build_artefact(plan, work / f"{name}.dnnr", params, selection=selection)
    model = CompiledModel(work / f"{name}.dnnr")
    if model.caller_device is None:
        raise SystemExit(f"error: {name}: no calling-thread device (POCL_DEVICES is "
                         f"{os.environ.get('POCL_DEVICES')!r}, or its work-group functions "
                         "do not fit PoCL's cache twice: `cpu_threads.both_fit`)")
    options = ort.SessionOptions()
    options.intra_op_num_threads = _pocl_cores()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(static), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    for mode in (WORKERS, CALLER, WORKERS, CALLER):  # programs built, functions compiled
        model.threads.fixed = mode
        model.run(feeds)
    session.run(names, feeds)
    wall: dict[str, list[float]] = {WORKERS: [], CALLER: [], "onnxruntime": []}
    cpu: dict[str, list[float]] = {key: [] for key in wall}

    def timed(key: str, run) -> None:  # noqa: ANN001
        c0, t0 = time.process_time(), time.perf_counter()
        run()
        wall[key].append(time.perf_counter() - t0)
        cpu[key].append(time.process_time() - c0)

    for k in range(rounds):
        for mode in (WORKERS, CALLER) if k % 2 == 0 else (CALLER, WORKERS):
            model.threads.fixed = mode
            timed(mode, lambda: model.run(feeds))
        timed("onnxruntime", lambda: session.run(names, feeds))
    wins = sum(a > b for a, b in zip(wall[WORKERS], wall[CALLER], strict=True))
    print(f"{name}{'' if fuse else ' (fusion off)'}: {len(model.launches)} launches, load "
          f"{os.getloadavg()[0]:.1f}, calling thread faster in {wins} of {rounds} rounds")
    for key in wall:
        print(f"  {key:12s} wall min {min(wall[key]) * 1e3:7.2f} median "
              f"{statistics.median(wall[key]) * 1e3:7.2f} ms, CPU min {min(cpu[key]) * 1e3:6.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v3_small,resnet50")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--fusion-off", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dnnr-cpu-threads-") as tmp:
        for name in args.models.split(","):
            compare(name, args.rounds, not args.fusion_off, Path(tmp))


if __name__ == "__main__":
    main()
