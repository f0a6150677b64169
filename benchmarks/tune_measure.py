"""Exhaustive tuning spaces measured on a GPU machine that cannot compile: every option
of each `benchmarks/tune.py` shape class compiled here, timed there.

    PYTHONPATH=. python3 benchmarks/tune_measure.py prepare DIR [--only NAME]  # here
    python3 benchmarks/tune_measure.py run DIR --out SPACE.json [--jobs 15]   # on the GPU
    # then: PYTHONPATH=. python3 benchmarks/tune.py --gpu --replay SPACE.json ...

``prepare`` writes, per shape class (`tune.session12_classes`, or with ``--classes gpu``
`tune.gpu_classes`, the session 8/9 classes), ``DIR/c<i>/key.txt`` and
one artefact per option (``o<k>/``, the anchor compiled alone with that option forced
through `KernelParams.tuned`, as `kernel_search.Measurer` compiles it; ``option.json``
beside it). Weight arrays go to ``DIR/pool`` as `benchmarks.gpu`'s ``--synthetic`` pool
does (large float arrays travel as a shape and a seed: times do not depend on values).

``run`` (needs only numpy and pyopencl): ``--jobs`` processes rebuild each artefact's
weights and build its OpenCL program (pyopencl keeps built binaries on disk, keyed by
source) while the main process times the options one at a time, in order, as each
becomes ready: inputs of ones, one run, then the median of ``--repeats`` runs of every
launch by OpenCL profiling events, summing the launches of the class's shape key —
exactly what `Measurer` records. The space file (`tune.py --exhaustive`'s format:
key -> [[option, µs], …], plus ``"card"``) is rewritten after every class, so a run cut
short by its deadline keeps the classes it finished.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def prepare(out: Path, only: str, classes: str) -> None:
    from benchmarks.gpu import _pool_weights
    from benchmarks.tune import gpu_classes, session12_classes
    from egraph_compiler.backends.opencl.kernel_search import _launches, anchors, option_to_json
    from egraph_compiler.backends.opencl.kernels import KernelParams
    from tests.backends.opencl.helpers import static_graph

    model, feeds = session12_classes(only) if classes == "session12" else gpu_classes()
    graph = static_graph(model, feeds)
    params = KernelParams.for_device("gpu")
    pool = out / "pool"
    pool.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dnnr-tune-measure-") as tmp:
        found = anchors(graph, params, Path(tmp))
    for i, anchor in enumerate(a for a in found if classes == "session12" or only in a.key):
        start = time.perf_counter()
        cls = out / f"c{i}"
        cls.mkdir(exist_ok=True)
        (cls / "key.txt").write_text(anchor.key)
        for k, option in enumerate(anchor.space):
            artefact = cls / f"o{k}"
            launches = _launches(anchor.graph, replace(params, tuned=((anchor.key, option),)),
                                 artefact, None)
            if not any(la.get("shape_key") == anchor.key for la in launches):
                raise SystemExit(f"error: {anchor.key}: {option.describe()} compiled no launch "
                                 "of the class")
            _pool_weights(artefact, pool, {}, synthetic=True)
            (artefact / "option.json").write_text(json.dumps(option_to_json(option)))
        print(f"{anchor.key}: {len(anchor.space)} options ({time.perf_counter() - start:.0f} s)",
              flush=True)


_SHARED: list[object] = []  # this process's one context and queue on the device


def _shared(device: str | None) -> tuple[object, object]:
    """One context and queue per process: a context per option would cost the driver's
    context set-up thousands of times."""
    import pyopencl as cl

    from egraph_compiler.backends.opencl.runtime import _device

    if not _SHARED:
        context = cl.Context([_device(device)])
        _SHARED.extend([context, cl.CommandQueue(context)])
    return _SHARED[0], _SHARED[1]


def _ready(job: tuple[str, str, str | None, str]) -> tuple[str, str]:
    """One option's artefact with its weights rebuilt under ``scratch``, its program
    built once (into pyopencl's binary cache); the error text where the driver refuses."""
    from benchmarks.gpu import _unpool_weights
    from egraph_compiler.backends.opencl.runtime import CompiledModel

    artefact, pool, device, scratch = job
    into = Path(scratch) / Path(artefact).parent.name / Path(artefact).name
    try:
        _unpool_weights(Path(artefact), Path(pool), into)
        CompiledModel(into, device, shared=_shared(device))  # type: ignore[arg-type]
    except Exception as error:  # a kernel the driver refuses: recorded, the run goes on
        return str(into), f"{type(error).__name__}: {str(error)[:300]}"
    return str(into), ""


def _time_option(path: Path, key: str, device: str | None, repeats: int) -> float:
    from egraph_compiler.backends.opencl.runtime import CompiledModel

    model = CompiledModel(path, device, shared=_shared(device))  # type: ignore[arg-type]
    feeds = {name: np.ones(model.plan["tensors"][name]["shape"], np.float32)
             for name in model.plan["inputs"]}
    model.run(feeds)
    times = model.time_launches(repeats)
    return 1e6 * sum(t for t, la in zip(times, model.plan["launches"], strict=True)
                     if la.get("shape_key") == key)


def run(directory: Path, out: Path, device: str | None, repeats: int, jobs: int,
        deadline_s: float) -> None:
    start = time.perf_counter()
    context, _ = _shared(device)
    card = str(context.devices[0].name).strip()  # type: ignore[attr-defined]
    print(f"card: {card}", flush=True)
    classes = sorted((p for p in directory.iterdir() if (p / "key.txt").exists()),
                     key=lambda p: int(p.name[1:]))
    table: dict[str, object] = {"card": card}
    failed: dict[str, list[object]] = {}
    scratch = Path(tempfile.mkdtemp(prefix="dnnr-tune-run-"))
    jobs_list = [(str(o), str(directory / "pool"), device, str(scratch))
                 for c in classes for o in sorted((p for p in c.iterdir() if p.is_dir()),
                                                  key=lambda p: int(p.name[1:]))]
    with multiprocessing.get_context("spawn").Pool(jobs) as workers:
        ready = workers.imap(_ready, jobs_list, chunksize=2)
        for cls in classes:
            key = (cls / "key.txt").read_text()
            options = [p for p in cls.iterdir() if p.is_dir()]
            rows: list[list[object]] = []
            class_start = time.perf_counter()
            for _ in options:
                path, error = next(ready)
                option = json.loads((cls / Path(path).name / "option.json").read_text())
                if not error:
                    try:
                        rows.append([option, _time_option(Path(path), key, device, repeats)])
                    except Exception as failure:  # noqa: BLE001 - recorded, the run goes on
                        error = f"{type(failure).__name__}: {str(failure)[:300]}"
                if error:
                    failed.setdefault(key, []).append([option, error])
                    print(f"{key}: {option} failed: {error}", flush=True)
                shutil.rmtree(path, ignore_errors=True)
                if time.perf_counter() - start > deadline_s:
                    break
            if len(rows) + len(failed.get(key, [])) < len(options):
                print(f"{key}: deadline after {len(rows)} of {len(options)} options; "
                      "class left out", flush=True)
                break
            table[key] = rows
            out.write_text(json.dumps({**table, "failed": failed}))
            best = min(us for _, us in rows)  # type: ignore[type-var]
            print(f"{key}: {len(rows)} options, {len(failed.get(key, []))} failed, best "
                  f"{best:.1f} us ({time.perf_counter() - class_start:.0f} s, "
                  f"{time.perf_counter() - start:.0f} s in all, {card})", flush=True)
        workers.terminate()
    shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["prepare", "run"])
    parser.add_argument("dir")
    parser.add_argument("--only", default="", help="prepare: classes whose name contains this")
    parser.add_argument("--classes", choices=["session12", "gpu"], default="session12",
                        help="prepare: `tune.session12_classes` or `tune.gpu_classes` "
                             "(session 8/9's, --only on their keys)")
    parser.add_argument("--out", help="run: the space file to write")
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=15)
    parser.add_argument("--deadline", type=float, default=1e9,
                        help="run: seconds after which no further option is timed")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(Path(args.dir), args.only, args.classes)
    else:
        if not args.out:
            parser.error("run needs --out SPACE.json")
        run(Path(args.dir), Path(args.out), args.device, args.repeats, args.jobs, args.deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
