"""Layout/implementation selection benchmark: the PBQP against the local and chain-DP choices.

    python benchmarks/layout_selection.py [--repeats N] [--models a,b,...|none] [--all] [--corpus DIR]
                                [--dnnr-corpus] [--corpus-models a,b] [--exporters ts,dynamo]
                                [--no-opencl] [--no-hexagon] [--hexagon-models a,b]
    python benchmarks/layout_selection.py --blocked-kernels [--repeats N]

OpenCL also measures two forced policies: ``nchwc`` (every conv with a blocked NCHWc
kernel on it, the PBQP laying out the rest) and ``images`` (the same reading RGBA
image2d_t inputs, run with images forced on). ``--blocked-kernels``: the blocked conv
kernel's device time against ``direct`` per conv shape of the corpus CNNs (what
`blocked.ESTIMATE_RATIO` and `CPU_IMAGE_FACTOR` come from).

OpenCL (PoCL): per model, the PBQP's size (one node per block: anchor kernel variant ×
stored layouts), solver, objective (µs of the cost model) with its lower bound, the
local and chain-DP objectives, solve seconds, the variants and conversion kernels the
PBQP chose, and the measured latency (the minimum over runs of the summed device time
of its launches) of the artefact built with each choice
("same": that choice picked what an earlier one did, not measured again). Hexagon (qemu):
QDQ-quantised blocks, the instruction-family PBQP (estimated cycles) and the executed
packets of the whole program under qemu-hexagon for each choice. ``--corpus DIR`` adds
every ``*.onnx`` under DIR (symbolic dims bound to batch=1, seq=64, height=width=64,
others 1); ``--dnnr-corpus`` adds the real-model corpus (tests/corpus, both exporters, at
its first stored shape) to OpenCL and its QDQ-quantised CNNs to Hexagon (objectives only:
single-stepping a whole ResNet-50 in qemu takes too long). Prints; asserts nothing.
"""

# ruff: noqa: E402  (the import path is fixed before the imports: see below)
from __future__ import annotations

import os
import sys

# This file's name shadows the standard library's `select` (which subprocess imports):
# take the benchmarks folder off the import path before anything imports it.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from egraph_compiler.backends import hexagon, opencl
from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.backends.hexagon.lower import lower_qdq
from egraph_compiler.backends.opencl import KernelParams
from egraph_compiler.backends.opencl.pricing import pricing
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.fusion.index import Blocked
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.select import SelectError, select_layouts
from egraph_compiler.select.conversions import CONVERSION_OP
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import (
    BLOCKS,
    LIGHT_MODELS,
    channel_attention_block,
    conv_pointwise_block,
    depthwise_separable_block,
    light_model,
    random_inputs,
    randomize_weights,
    residual_block,
)

POLICIES = ("pbqp", "local", "chain-dp")
# OpenCL also measures the forced blocked NCHWc policy (every conv with a blocked kernel on it)
OPENCL_POLICIES = (*POLICIES, "nchwc", "images")  # images: run with images forced on
DIMS = {"batch": 2, "height": 14, "width": 14, "seq": 32}
CORPUS_DIMS = {"batch": 1, "seq": 64, "sequence": 64, "height": 64, "width": 64}
DEFAULT_LIGHT = ("squeezenet", "resnet50", "inception_v1", "densenet121")


def _fmt(x: object) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "inf" if math.isinf(x) else f"{x:.0f}"
    return str(x)


def _opencl_models(args: argparse.Namespace) -> list[tuple[str, onnx.ModelProto]]:
    names = [m for m in args.models.split(",") if m and m != "none"] or ([] if args.models == "none" else [
        *BLOCKS, "channel_attention", *(LIGHT_MODELS if args.all else DEFAULT_LIGHT)])
    models = []
    for name in names:
        if name == "channel_attention":
            models.append((name, channel_attention_block()))
        elif name in BLOCKS:
            models.append((name, BLOCKS[name]()))
        else:
            models.append((name, randomize_weights(light_model(name), seed=0)))
    return models


def _corpus(args: argparse.Namespace) -> list[tuple[str, onnx.ModelProto]]:
    return [(path.stem, onnx.load(str(path))) for path in sorted(Path(args.corpus).rglob("*.onnx"))] \
        if args.corpus else []


def _dnnr_corpus(args: argparse.Namespace) -> list[tuple[str, onnx.ModelProto, dict]]:
    """The real-model corpus (tests/corpus), both exporters, with its first stored inputs."""
    if not args.dnnr_corpus:
        return []
    from tests.corpus import build, check

    folder = build.build(build.names_in("suite"), log=lambda _: None)
    models = []
    wanted = [m for m in args.corpus_models.split(",") if m]
    for name in build.names_in("suite"):
        if wanted and name not in wanted:
            continue
        for exporter in args.exporters.split(","):
            model = check.load(folder, name, exporter)
            models.append((model.id, onnx.load(model.path), model.feeds(0)))
    return models


def _dims_for(model: onnx.ModelProto, base: dict[str, int]) -> dict[str, int]:
    dims = dict(base)
    for value in model.graph.input:
        for d in value.type.tensor_type.shape.dim:
            if d.dim_param and d.dim_param not in dims:
                dims[d.dim_param] = 1
    return dims


def _time(out_dir: Path, feeds: dict, repeats: int, images: bool | None = None) -> float:
    """The minimum over ``repeats`` plan runs of the summed device time of its launches
    (OpenCL profiling events), in ms: on the shared 2-core machine a wall-clock median of
    whole runs moved 2-5x between runs of the same artefact; the minimum of device time
    is what the load disturbs least."""
    compiled = opencl.load(out_dir, images=images)
    compiled.run(feeds)  # compile the kernels, warm the caches
    return min(sum(compiled.time_launches(1)) for _ in range(repeats)) * 1e3


def _blocked_counts(out_dir: Path) -> str:
    """The blocked NCHWc conv launches and conversion launches of an artefact."""
    launches = json.loads((out_dir / "plan.json").read_text())["launches"]
    blocked = sum(la["variant"].startswith("nchwc") for la in launches)
    converted = sum(la["ops"] == [CONVERSION_OP] for la in launches)
    return f"{blocked} blocked conv, {converted} conversions"


def bench_opencl(args: argparse.Namespace, work: Path) -> None:
    print("OpenCL (PoCL): PBQP of kernel variant x layout, objective in µs of the cost model; "
          f"latency = min over {args.repeats} runs of the summed device ms")
    header = (f"{'model':22s} {'ops':>5s} {'nodes':>5s} {'edges':>5s} {'solver':18s} {'global':>10s} "
              f"{'bound':>10s} {'local':>10s} {'chainDP':>10s} {'solve s':>8s}  ms pbqp/local/chain-dp/nchwc/images"
              "  [pbqp: variants, conversions, NCHWc tensors] [forced policies]")
    print(header)
    from tests.select.test_opencl_options import shared_reduction_model

    params = KernelParams.for_device(args.device_class)
    # the GPU class's selection is priced for a card: PoCL's latencies say nothing of it
    policies = OPENCL_POLICIES if args.device_class == "cpu" else ()
    if args.device_class != "cpu":
        print(f"device class {args.device_class}: objectives and decisions only (no latency on PoCL)")

    models = [(n, m, DIMS, None) for n, m in _opencl_models(args)] + \
        ([("shared_reduction", shared_reduction_model(16, 16), DIMS, None)] if args.models != "none" else []) + \
        [(n, m, CORPUS_DIMS, None) for n, m in _corpus(args)] + \
        [(n, m, CORPUS_DIMS, feeds) for n, m, feeds in _dnnr_corpus(args)]
    for name, model, base, given in models:
        try:
            feeds = given or random_inputs(model, 0, dims=_dims_for(model, base))
            model = with_static_inputs(model, feeds)
            graph = static_graph(model, feeds)
            fusion_plan = plan_fusion(graph, layouts=False)
            planned, sel = select_layouts(fusion_plan, pricing=pricing(fusion_plan, params))
        except Exception as error:  # a corpus model the backend cannot take yet
            print(f"{name:22s} skipped: {str(error).splitlines()[0][:100]}")
            continue
        variants: dict[str, int] = {}
        for b in planned.blocks:
            if b.implementation:
                kind = b.implementation.split()[0]
                variants[kind] = variants.get(kind, 0) + 1
        conversions = sum(b.ops == (CONVERSION_OP,) for b in planned.blocks)
        blocked_tensors = sum(isinstance(c.perm, Blocked) for c in planned.layouts)
        latencies, seen, forced = [], {}, []
        for policy in policies:
            try:
                picks = tuple(sorted(sel.policy_picks(policy).items())) if policy in POLICIES else policy
            except ValueError:
                latencies.append("infeasible")
                continue
            if picks not in seen:
                try:
                    opencl.compile_graph(graph, work / name / policy, layouts=policy)
                    seen[picks] = f"{_time(work / name / policy, feeds, args.repeats, policy == 'images' or None):.2f}"
                    if policy not in POLICIES:
                        forced.append(f"{policy}: {_blocked_counts(work / name / policy)}")
                except Exception as error:  # the backend fails on this model whatever the layouts
                    seen[picks] = f"failed ({type(error).__name__})"
                latencies.append(seen[picks])
            else:  # the same artefact as an earlier choice: not measured again
                latencies.append("same")
        ops = sum(len(b.nodes) for b in fusion_plan.blocks)
        chosen = ", ".join(f"{k} {v}" for k, v in sorted(variants.items()))
        print(f"{name:22s} {ops:5d} {len(sel.problem.nodes):5d} {len(sel.problem.edges):5d} "
              f"{sel.solver:18s} {_fmt2(sel.objective):>10s} {_fmt2(sel.lower_bound):>10s} "
              f"{_fmt2(sel.local_objective):>10s} {_fmt2(sel.chain_objective):>10s} "
              f"{sel.seconds:8.4f}  {'/'.join(latencies)}  [{chosen}; {conversions} conv; "
              f"{blocked_tensors} NCHWc] [{'; '.join(forced)}]", flush=True)


# dense convs of the corpus CNNs at a 64x64 input (resnet50, mobilenet_v2 pointwise):
# (cin, cout, kernel, stride, height = width of the input)
BLOCKED_SHAPES = ((64, 64, 3, 1, 16), (256, 64, 1, 1, 16), (64, 256, 1, 1, 16), (128, 128, 3, 1, 8),
                  (512, 128, 1, 1, 8), (96, 24, 1, 1, 16), (24, 144, 1, 1, 16), (3, 32, 3, 2, 64))


def _conv_model(cin: int, cout: int, k: int, stride: int, size: int) -> onnx.ModelProto:
    """A 1x1 conv feeding the measured conv, so the measured conv's input is an
    intermediate the selection may store in NCHWc (a pointwise producer would be fused
    into it as a prologue)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((cout, cin, k, k)) / (cin * k * k) ** 0.5)
                                .astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")
    out = (size + 2 * (k // 2) - k) // stride + 1
    w0 = numpy_helper.from_array((rng.standard_normal((cin, cin, 1, 1)) / cin ** 0.5).astype(np.float32), "w0")
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),
             helper.make_node("Conv", ["a", "w", "b"], ["c"], pads=[k // 2] * 4, strides=[stride] * 2),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                            [1, cin, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, out, out])],
                              [w0, w, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def bench_blocked_kernels(args: argparse.Namespace, work: Path) -> None:
    """Device time (OpenCL profiling, median of ``--repeats``) of the conv launch alone:
    the `direct` kernel (forced), the cost model's pick, and the blocked NCHWc kernel at each
    channel block (its input in NCHWc, written by the first conv or a conversion) — what
    `blocked.ESTIMATE_RATIO` is read from."""
    from dataclasses import replace

    from egraph_compiler.backends.opencl import blocked

    print(f"blocked NCHWc conv vs direct (PoCL, conv launch µs, median of {args.repeats}); "
          "cin cout k stride size: direct / cost-model pick / nchwc4 / nchwc8 / nchwc16 / nchwc4-image")
    ratios: dict[int, list[float]] = {b: [] for b in blocked.BLOCKS}
    image_ratios: list[float] = []
    for shape in BLOCKED_SHAPES:
        model = _conv_model(*shape)
        feeds = random_inputs(model, 0)
        graph = static_graph(model, feeds)
        times = {}
        base = KernelParams.for_device(args.device_class)
        runs = [("direct", "row-major", replace(base, anchor_variant="direct")),
                ("pick", "pbqp", base)]
        runs += [(f"nchwc{b}", "nchwc", base) for b in blocked.BLOCKS]
        runs.append(("image4", "images", base))  # its input an RGBA image (forced on)
        for label, policy, params in runs:
            saved = dict(blocked.ESTIMATE_RATIO)
            if label.startswith("nchwc"):  # only this block is offered below the others
                blocked.ESTIMATE_RATIO.update({(b, w): 1.0 if label == f"nchwc{b}" else 1e6
                                               for b in blocked.BLOCKS for w in (False, True)})
            try:
                out = work / "blocked" / "x".join(map(str, shape)) / label
                opencl.compile_graph(graph, out, layouts=policy, params=params)
            finally:
                blocked.ESTIMATE_RATIO.update(saved)
            doc = json.loads((out / "plan.json").read_text())
            conv = max(k for k, la in enumerate(doc["launches"]) if la["kind"] == "conv")
            variant = doc["launches"][conv]["variant"]
            if label.startswith("nchwc") and variant != f"{label} {label[5:]}x{blocked.TILE_WIDTH}" or \
                    label == "image4" and not variant.startswith(f"nchwc4{blocked.IMAGE_SUFFIX}"):
                times[label] = None
                continue
            compiled = opencl.load(out, device=args.opencl_device or None,
                                   images=True if label == "image4" else None)
            got = compiled.run(feeds)["y"]
            compiled.run(feeds)
            times[label] = compiled.time_launches(args.repeats)[conv] * 1e6
            if label == "pick":
                times["pick"] = (times["pick"], variant)
            if label == "direct":
                expected = got
            elif not np.allclose(got, expected, rtol=1e-3, atol=1e-4):
                raise AssertionError(f"{shape} {label}: differs from direct")
        direct = times["direct"]
        for b in blocked.BLOCKS:
            if times.get(f"nchwc{b}") is not None:
                ratios[b].append(times[f"nchwc{b}"] / direct)
        pick, variant = times["pick"]
        cells = " / ".join("-" if times.get(label) is None else f"{times[label]:.0f}"
                           for label in [*(f"nchwc{b}" for b in blocked.BLOCKS), "image4"])
        if times.get("image4") is not None and times.get("nchwc4") is not None:
            image_ratios.append(times["image4"] / times["nchwc4"])
        print(f"  {shape}: {direct:.0f} / {pick:.0f} ({variant}) / {cells}", flush=True)
    if image_ratios:
        print(f"  image4 / nchwc4 (input read as an RGBA image, PoCL images forced on): geometric mean "
              f"{math.exp(statistics.mean(map(math.log, image_ratios))):.2f} "
              f"(min {min(image_ratios):.2f}, max {max(image_ratios):.2f})")
    for b, r in ratios.items():
        if r:
            print(f"  nchwc{b} / direct: geometric mean {math.exp(statistics.mean(map(math.log, r))):.2f} "
                  f"(min {min(r):.2f}, max {max(r):.2f}, {len(r)} shapes)")


def _fmt2(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf" if math.isinf(x) else f"{x:.2f}"


def _executed_packets(elf: Path, stdin: bytes) -> int:
    """Packets qemu-hexagon executes for the whole program (single-stepped, logged)."""
    log = elf.with_suffix(".all.log")
    toolchain.run_elf(elf, stdin, ["-singlestep", "-d", "exec,nochain", "-D", str(log)], timeout=600)
    with log.open(errors="replace") as handle:
        count = sum(1 for line in handle if line.startswith("Trace"))
    log.unlink()
    return count


def _hexagon_models() -> list[tuple[str, onnx.ModelProto]]:
    return [("conv_pointwise", conv_pointwise_block(channels=11, out_channels=13, seed=4)),
            ("conv_pointwise_wide", conv_pointwise_block(channels=64, out_channels=48, seed=1)),
            ("residual", residual_block(channels=16, seed=2)),
            ("depthwise_separable", depthwise_separable_block(channels=16, out_channels=32, seed=3))]


def bench_hexagon(args: argparse.Namespace, work: Path) -> None:
    from tests.backends.hexagon.test_models import (
        _quantise,
        _real_input,
        _static,
        _through_quant_rules,
    )

    print("\nHexagon (qemu-hexagon v67): instruction-family PBQP, objective in estimated cycles; "
          "executed packets of the whole program per choice")
    print(f"{'model':22s} {'nodes':>5s} {'edges':>5s} {'solver':14s} {'global':>9s} {'local':>9s} "
          f"{'chainDP':>9s} {'solve s':>8s}  packets pbqp/local/chain-dp")
    if not toolchain.have_toolchain():
        print("  skipped: clang/qemu-hexagon missing")
        return
    models: list[tuple[str, onnx.ModelProto, dict | None]] = [
        (name, _static(model, {"batch": 1, "height": 9, "width": 7}), None) for name, model in _hexagon_models()]
    if args.dnnr_corpus:  # the corpus CNNs the Hexagon backend lowers, at their first stored shape
        from tests.corpus import build, check
        from tests.select.test_corpus import HEXAGON_MODELS

        folder = build.build(build.names_in("suite"), log=lambda _: None)
        wanted = [m for m in args.hexagon_models.split(",") if m] or list(HEXAGON_MODELS)
        for corpus_name in (m for m in HEXAGON_MODELS if m in wanted):
            entry = check.load(folder, corpus_name, "ts")
            models.append((entry.id, with_static_inputs(onnx.load(entry.path), entry.feeds(0)), entry.feeds(0)))
    for name, model, feeds in models:
        tmp = work / f"hex_{name}"
        tmp.mkdir(parents=True, exist_ok=True)
        path = _quantise(model, tmp, seed=2, feeds=feeds)
        graph = _through_quant_rules(path)
        info = _real_input(onnx.load(path))
        x = np.random.default_rng(3).standard_normal(
            [d.dim_value for d in info.type.tensor_type.shape.dim]).astype(np.float32)
        packets, seen, sel = [], {}, None
        for policy in POLICIES:
            try:
                artefact = hexagon.build(graph, tmp / policy, select=policy)
            except SelectError:
                packets.append("infeasible")
                continue
            except ModelError as error:  # the selection ran; an operator elsewhere has no kernel
                _, _, selection = hexagon._choose_families(lower_qdq(graph), policy)
                sel = sel or selection.to_json()
                packets.append(f"no build ({str(error)[:60]})")
                break
            sel = sel or artefact.select
            decisions = tuple(sorted((k, v["option"]) for k, v in artefact.select["decisions"].items()))
            if decisions not in seen:
                meta = json.loads((tmp / policy / "meta.json").read_text())
                stdin = hexagon._to_device(x, meta["inputs"][info.name]) if feeds is None else b"".join(
                    hexagon._to_device(np.asarray(feeds[n]), meta["inputs"][n], n) for n in meta["input_order"])
                try:
                    seen[decisions] = str(_executed_packets(tmp / policy / "model.elf", stdin))
                except toolchain.ToolchainError as error:  # the artefact faults: say so, go on
                    seen[decisions] = f"qemu failed ({str(error).splitlines()[0][-40:]})"
                packets.append(seen[decisions])
            else:
                packets.append("same")
        print(f"{name:22s} {sel['nodes']:5d} {sel['edges']:5d} {sel['solver']:14s} "
              f"{_fmt(sel['objective']):>9s} {_fmt(sel['local_objective']):>9s} "
              f"{_fmt(sel['chain_dp_objective']):>9s} {sel['seconds']:8.4f}  {'/'.join(packets)}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default="")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--corpus", default="")
    parser.add_argument("--dnnr-corpus", action="store_true")
    parser.add_argument("--no-opencl", action="store_true")
    parser.add_argument("--no-hexagon", action="store_true")
    parser.add_argument("--corpus-models", default="", help="with --dnnr-corpus: only these corpus models")
    parser.add_argument("--exporters", default="ts,dynamo", help="with --dnnr-corpus: these exporters")
    parser.add_argument("--device-class", default="cpu",
                        help="cpu or gpu prices (gpu: OpenCL objectives and decisions only)")
    parser.add_argument("--opencl-device", default="", help="with --blocked-kernels: OpenCL device name part")
    parser.add_argument("--blocked-kernels", action="store_true",
                        help="only the blocked NCHWc conv kernel against direct, per conv shape")
    parser.add_argument("--hexagon-models", default="", help="with --dnnr-corpus: only these corpus models on Hexagon")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.blocked_kernels:
            bench_blocked_kernels(args, Path(tmp))
            return
        if not args.no_opencl:
            bench_opencl(args, Path(tmp))
        if not args.no_hexagon:
            bench_hexagon(args, Path(tmp))


if __name__ == "__main__":
    main()
