"""`cpu_threads`: each run on PoCL's worker pool or its calling-thread device, whichever
ran faster lately. The choice on made-up timings (warm-up, the faster mode, the other
one tried every ``explore_every`` runs, a change of load followed), the cache bound
(`both_fit`), and a model run on
both devices in a fresh process (PoCL reads ``POCL_DEVICES`` once per process, so a test
run after another that queried the platform first would see the pool alone) with every
output equal to onnxruntime's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from egraph_compiler.backends.opencl import KernelParams, build
from egraph_compiler.backends.opencl.cpu_threads import CALLER, WORKERS, ThreadChoice, both_fit
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph
from tests.backends.opencl.test_cpu_conv import _pointwise

ROOT = Path(__file__).resolve().parents[3]


def _drive(choice: ThreadChoice, seconds: dict[str, float], runs: int) -> list[str]:
    picked = []
    for _ in range(runs):
        mode = choice.next()
        choice.record(mode, seconds[mode])
        picked.append(mode)
    return picked


def test_thread_choice_runs_the_faster_mode_and_follows_a_change() -> None:
    choice = ThreadChoice(warm=3, explore_every=8)
    loaded = {WORKERS: 0.012, CALLER: 0.0035}  # hand-overs waiting for the scheduler
    picked = _drive(choice, loaded, 40)
    assert picked[:6] == [WORKERS] * 3 + [CALLER] * 3
    later = list(enumerate(picked[6:], start=7))
    assert [run for run, mode in later if mode == WORKERS] == [8, 16, 24, 32, 40]
    assert choice.preferred == CALLER
    idle = {WORKERS: 0.002, CALLER: 0.0035}  # the load gone: the pool is faster
    picked = _drive(choice, idle, 40)
    # two explorations of the pool make its median of three the lower one
    assert picked[-8:].count(WORKERS) == 7 and choice.preferred == WORKERS
    forced = ThreadChoice(fixed=CALLER)  # benchmarks/cpu.py --threads caller
    assert _drive(forced, idle, 10) == [CALLER] * 10


def test_only_models_whose_functions_fit_pocl_s_cache_twice_take_both_devices() -> None:
    # MobileNetV3-small: fused 53 distinct kernels, fusion-off 90 (PoCL keeps 128)
    assert both_fit(53) and both_fit(64) and not both_fit(65) and not both_fit(90)


_SCRIPT = """
import json, sys
import numpy as np
from egraph_compiler.backends.opencl import load
out, feeds = sys.argv[1], dict(np.load(sys.argv[2]))
model = load(out)
results = [model.run(feeds)["y"].tolist() for _ in range(10)]
print(json.dumps({"device": model.device.name, "caller": model.caller_device.name,
                  "counts": model.threads.counts, "results": results}))
"""


def test_a_model_runs_on_both_pocl_devices_with_onnxruntime_s_results(tmp_path: Path) -> None:
    model = _pointwise(1, 8, 24, (8, 8))
    rng = np.random.default_rng(7)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    build(plan_memory(plan_fusion(static_graph(model, feeds))), tmp_path / "a",
          KernelParams.for_device("cpu"))
    np.savez(tmp_path / "feeds.npz", **feeds)
    env = {k: v for k, v in os.environ.items() if k != "POCL_DEVICES"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "a"),
                           str(tmp_path / "feeds.npz")], capture_output=True, text=True,
                          cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["device"].startswith("pthread-") and report["caller"].startswith("basic-")
    assert report["counts"][WORKERS] >= 3 and report["counts"][CALLER] >= 3
    import onnxruntime as ort

    session = ort.InferenceSession(onnx.ModelProto.SerializeToString(model),
                                   providers=["CPUExecutionProvider"])
    expected = session.run(["y"], feeds)[0]
    for result in report["results"]:
        np.testing.assert_allclose(np.asarray(result, np.float32), expected, rtol=1e-4,
                                   atol=1e-4)
