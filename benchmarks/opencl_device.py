"""OpenCL benchmark on another machine's device (e.g. an NVIDIA GPU), in two steps.

The device machine has numpy but not the compiler's dependencies, so the models are
compiled here and only the artefacts travel:

    python benchmarks/opencl_device.py prepare bench_artefacts      # here
    python benchmarks/opencl_device.py run bench_artefacts --device NVIDIA   # there

``run`` needs pyopencl (and onnx; onnxruntime if present gives the CPU baseline).
Per model it prints kernels launched (ours vs fusion off) and latency
min/median/max for ours, fusion off and onnxruntime CPU, with the ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from egraph_compiler.backends.opencl.bench import Timing, _bind_dims, _inputs, _static_graph, _time  # noqa: E402
from egraph_compiler.backends.opencl.runtime import CompiledModel  # noqa: E402

MODELS = {
    "transformer_encoder": {"batch": 8, "seq": 128},
    "mha": {"batch": 8, "seq": 128},
    "swin_window": {"batch": 32},
    "conv_bn_relu": {"batch": 8, "height": 56, "width": 56},
    "depthwise_separable": {"batch": 8, "height": 56, "width": 56},
    "residual": {"batch": 8, "height": 56, "width": 56},
    "squeezenet": {},
    "shufflenet": {},
}


def prepare(out: Path) -> None:
    import onnx

    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl import build
    from egraph_compiler.fusion import plan_fusion
    from egraph_compiler.plan import plan_memory
    from tests.modelzoo import BLOCKS, light_model, randomize_weights

    rules = pipeline.load_rules()
    for name, dims in MODELS.items():
        model = BLOCKS[name]() if name in BLOCKS else randomize_weights(light_model(name), seed=0)
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "model.onnx"
            onnx.save(model, str(source))
            static = _bind_dims(source, dims, Path(tmp))
            (target / "model.onnx").write_bytes(static.read_bytes())
        graph = _static_graph(target / "model.onnx")
        np.savez(target / "inputs.npz", **_inputs(graph, seed=0))
        optimised = pipeline.optimize(graph, rules)[0]
        counts = {}
        for label, fuse in (("fused", True), ("unfused", False)):
            artefact = build(plan_memory(plan_fusion(optimised, rules, fuse=fuse)), target / label)
            counts[label] = artefact.kernels
        counts["operators"] = len(graph.nodes)
        (target / "counts.json").write_text(json.dumps(counts))
        print(f"{name}: {counts}", flush=True)


def _time_model(target: Path, label: str, device: str | None, feeds: dict[str, np.ndarray],
                repeats: int) -> tuple[Timing, dict[str, np.ndarray]]:
    compiled = CompiledModel(target / label, device)
    result: dict[str, np.ndarray] = {}
    return Timing.of(_time(lambda: result.update(compiled.run(feeds)), repeats)), result


def _time_onnxruntime(path: Path, feeds: dict[str, np.ndarray],
                      repeats: int) -> tuple[Timing, dict[str, np.ndarray]] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    result: dict[str, np.ndarray] = {}
    return Timing.of(_time(lambda: result.update(zip(names, session.run(names, feeds), strict=True)),
                           repeats)), result


def run(out: Path, device: str | None, repeats: int, only: str | None = None) -> None:
    print(f"{'model':<22}{'ops':>5}{'ours':>6}{'off':>6}  {'ours ms (min med max)':<30}"
          f"{'fusion-off ms':<30}{'ORT CPU ms':<30}{'off/ours':>9}{'ort/ours':>9}  max|err|")
    for target in sorted(p for p in out.iterdir() if p.is_dir() and only in (None, p.name)):
        counts = json.loads((target / "counts.json").read_text())
        feeds = dict(np.load(target / "inputs.npz"))
        fused, fused_out = _time_model(target, "fused", device, feeds, repeats)
        unfused, _ = _time_model(target, "unfused", device, feeds, repeats)
        reference = _time_onnxruntime(target / "model.onnx", feeds, repeats)
        if reference is None:
            ort_text, ort_ratio, error = "n/a", f"{'n/a':>9}", float("nan")
        else:
            ort_timing, expected = reference
            ort_text = str(ort_timing)
            ort_ratio = f"{ort_timing.median_ms / fused.median_ms:9.2f}"
            error = max(float(np.max(np.abs(fused_out[k] - v))) for k, v in expected.items())
        print(f"{target.name:<22}{counts['operators']:>5}{counts['fused']:>6}{counts['unfused']:>6}  "
              f"{str(fused):<30}{str(unfused):<30}{ort_text:<30}"
              f"{unfused.median_ms / fused.median_ms:9.2f}{ort_ratio}  {error:.2e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["prepare", "run"])
    parser.add_argument("dir")
    parser.add_argument("--device", help="device name substring, e.g. NVIDIA (default: PoCL)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", help="run just this model's artefacts")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(Path(args.dir))
    else:
        run(Path(args.dir), args.device, args.repeats, args.only)


if __name__ == "__main__":
    main()
