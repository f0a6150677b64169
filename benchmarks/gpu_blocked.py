"""The blocked NCHWc conv on a GPU: its device time at b = 4 / 8 / 16 and reading an RGBA
image (``nchwc4-image``), against ``direct`` and the GPU class's pick for the same conv,
with the conversion kernels the selection inserts — what the GPU class's blocked prices
(`gpu_prices.json` ``blocked_conv``, `gpu_prices.blocked_conv_us`) are fitted from.

    PYTHONPATH=. python3 benchmarks/gpu_blocked.py prepare DIR   # here: compile every artefact
    python3 benchmarks/gpu_blocked.py run DIR [--repeats N]       # on the GPU machine: time them
    PYTHONPATH=. python3 benchmarks/gpu_blocked.py prepare-models DIR  # whole models, forced policies
    PYTHONPATH=. python3 benchmarks/gpu_blocked.py fit LOG [--json FILE]  # the price model from a run log
    PYTHONPATH=. python3 benchmarks/gpu_blocked.py decisions -    # the PBQP's choices at 224, both classes

Each shape is a dense conv of resnet50 / mobilenet_v2 / convnext_tiny at a 224 input
(batch 1 and 8) behind a 1x1 conv (so its input is an intermediate the selection may
store blocked), with a bias and a ReLU fused. Variants per shape: ``direct`` (forced),
``pick`` (the GPU class's pick with no blocked option: what it ran before), ``nchwc{b}``
(the measured conv forced onto the blocked kernel of block b: the selection inserts a
conversion kernel where the 1x1 conv cannot write the blocked input itself, i.e. its
channels are padded) and ``image4`` (its input an RGBA image, images on). Weights are
drawn on the GPU machine from a seed per source constant (derived layouts rebuilt from
the same draw), so every variant computes the same conv and its output is compared
with ``direct``'s. Times: per launch, median of ``--repeats`` runs (OpenCL profiling
events); ``conv`` is the measured conv's launch, ``total`` every launch of the artefact.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import shutil
import statistics
import sys
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name: (cin, cout, kernel, stride, input height = width); padding kernel // 2 except the
# convnext patchify convs (kernel = stride, no padding)
SHAPES: dict[str, tuple[int, int, int, int, int]] = {
    "r50_stem_7x7s2": (3, 64, 7, 2, 224),
    "r50_l1_1x1_64_64": (64, 64, 1, 1, 56),
    "r50_l1_3x3_64": (64, 64, 3, 1, 56),
    "r50_l1_1x1_64_256": (64, 256, 1, 1, 56),
    "r50_l1_1x1_256_64": (256, 64, 1, 1, 56),
    "r50_l2_3x3s2_128": (128, 128, 3, 2, 56),
    "r50_l2_1x1_512_128": (512, 128, 1, 1, 28),
    "r50_l3_3x3_256": (256, 256, 3, 1, 14),
    "r50_l3_1x1_1024_256": (1024, 256, 1, 1, 14),
    "r50_l4_3x3_512": (512, 512, 3, 1, 7),
    "r50_l4_1x1_512_2048": (512, 2048, 1, 1, 7),
    "mv2_stem_3x3s2": (3, 32, 3, 2, 224),
    "mv2_1x1_16_96": (16, 96, 1, 1, 112),
    "mv2_1x1_144_24": (144, 24, 1, 1, 56),
    "mv2_1x1_24_144": (24, 144, 1, 1, 56),
    "mv2_1x1_576_96": (576, 96, 1, 1, 14),
    "mv2_1x1_160_960": (160, 960, 1, 1, 7),
    "mv2_1x1_320_1280": (320, 1280, 1, 1, 7),
    "cnx_stem_4x4s4": (3, 96, 4, 4, 224),
    "cnx_down_2x2s2_96": (96, 192, 2, 2, 56),
    "cnx_down_2x2s2_384": (384, 768, 2, 2, 14),
}
BATCHES = (1, 8)
BLOCK_SIZES = (4, 8, 16)
SMALL = 4096  # constants below this many elements travel as they are


def conv_model(cin: int, cout: int, k: int, stride: int, size: int, batch: int):  # noqa: ANN201 - onnx
    from onnx import TensorProto, helper, numpy_helper

    pad = 0 if k == stride else k // 2
    out = (size + 2 * pad - k) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]),
             helper.make_node("Conv", ["a", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride] * 2),
             helper.make_node("Relu", ["c"], ["y"])]
    # the weights of `_draw`: the GPU machine draws the large ones again from their seeds
    inits = [numpy_helper.from_array(_draw(shape, _seed(name)), name)
             for name, shape in (("w0", [cin, cin, 1, 1]), ("w", [cout, cin, k, k]), ("b", [cout]))]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [batch, cin, size, size])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [batch, cout, out, out])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _draw(shape: list[int], seed: int) -> np.ndarray:
    """A stand-in weight: N(0, 1) / sqrt(fan-in), from NumPy's generator with ``seed``."""
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    draw = np.random.default_rng(seed).standard_normal(int(np.prod(shape, dtype=np.int64)))
    return (draw / math.sqrt(fan_in)).astype(np.float32).reshape(shape)


def _derive(recipe: str, source: np.ndarray) -> np.ndarray:
    """A derived constant as the kernels made it: ``nchwc{b}`` (`blocked.blocked_weights`)
    or `benchmarks.gpu`'s recipes (Winograd, re-layouts)."""
    if recipe.startswith("nchwc"):
        from egraph_compiler.backends.opencl.blocked import blocked_weights

        return blocked_weights(source, int(recipe[5:]))
    from benchmarks.gpu import _derive as gpu_derive

    return gpu_derive(recipe, source)


def _recipe(name: str) -> tuple[str, str] | None:
    head, _, tail = name.rpartition("@")
    if head and re.fullmatch(r"nchwc\d+", tail):
        return head, tail
    from benchmarks.gpu import _recipe as gpu_recipe

    return gpu_recipe(name)


def _strip_weights(artefact: Path, constants: dict[str, np.ndarray]) -> None:
    """Replace the artefact's large weights by their seeds (derived ones by their source's
    seed and a recipe), checking here that the recipe rebuilds the stored array."""
    weights = np.load(artefact / "weights.npz")
    names = json.loads((artefact / "weights.json").read_text())
    refs, small = {}, {}
    for key in weights.files:
        array = weights[key]
        name = names[int(key[1:])]
        recipe = _recipe(name)
        source = recipe[0] if recipe else name
        if source not in constants or np.size(constants[source]) < SMALL or array.dtype != np.float32:
            small[key] = array
            continue
        if not np.array_equal(_draw(list(np.shape(constants[source])), _seed(source)), constants[source]):
            raise SystemExit(f"{artefact}: constant {source} is not the draw of its seed")
        if recipe and not np.array_equal(_derive(recipe[1], np.asarray(constants[source])), array):
            raise SystemExit(f"{artefact}: recipe {recipe[1]} does not rebuild {name}")
        refs[key] = {"shape": list(np.shape(constants[source])), "seed": _seed(source),
                     "recipe": recipe[1] if recipe else None}
    weights.close()
    (artefact / "weights.npz").unlink()
    np.savez(artefact / "small.npz", **small)
    (artefact / "weights.refs.json").write_text(json.dumps(refs))


def _restore_weights(artefact: Path, into: Path) -> Path:
    shutil.copytree(artefact, into)
    small = np.load(artefact / "small.npz")
    arrays = {key: small[key] for key in small.files}
    for key, ref in json.loads((artefact / "weights.refs.json").read_text()).items():
        source = _draw(ref["shape"], ref["seed"])
        arrays[key] = _derive(ref["recipe"], source) if ref["recipe"] else source
    np.savez(into / "weights.npz", **arrays)
    return into


@contextlib.contextmanager
def _gpu_class_offered(offered: bool, block: int = 0) -> Iterator[None]:
    """The GPU class with (``offered``: a placeholder price, 1 µs, the prices being measured;
    ``block``: that channel block's only) or without (what it ran before) the blocked conv
    options (`gpu_prices.MEASURED`'s ``blocked_conv`` entry)."""
    from egraph_compiler.backends.opencl import gpu_prices

    saved = gpu_prices.MEASURED.pop("blocked_conv", None)
    if offered:
        gpu_prices.MEASURED["blocked_conv"] = {
            "intercept": {str(b): 0.0 if block in (0, b) else 20.0 for b in BLOCK_SIZES},
            "flops_exponent": 0.0, "items_exponent": 0.0, "image_over_buffer": 1.0,
            "domain": {"multiply_adds": [0, math.inf], "work_items": [0, math.inf]}}
    try:
        yield
    finally:
        gpu_prices.MEASURED.pop("blocked_conv", None)
        if saved is not None:
            gpu_prices.MEASURED["blocked_conv"] = saved


def prepare(out: Path, only: str | None) -> None:
    from egraph_compiler.backends.opencl import KernelParams, build
    from egraph_compiler.backends.opencl.pricing import pricing
    from egraph_compiler.fusion import plan_fusion
    from egraph_compiler.plan import plan_memory
    from egraph_compiler.select import select_layouts
    from tests.backends.opencl.helpers import static_graph

    params = KernelParams.for_device("gpu")
    for name, (cin, cout, k, stride, size) in SHAPES.items():
        if only and name not in only.split(","):
            continue
        for batch in BATCHES:
            target = out / f"{name}_b{batch}"
            model = conv_model(cin, cout, k, stride, size, batch)
            graph = static_graph(model, {"x": np.zeros((batch, cin, size, size), np.float32)})
            fusion_plan = plan_fusion(graph, layouts=False)
            conv_block = max(b.id for b in fusion_plan.blocks if b.kind == "conv")
            meta = {"shape": [batch, cin, cout, k, stride, size], "variants": {}, "conv_block": conv_block}
            with _gpu_class_offered(False):  # the GPU class before blocked options
                old = pricing(fusion_plan, params)
                plan, selection = select_layouts(fusion_plan, pricing=old)
                build(plan_memory(plan), target / "pick", params, selection=selection)
            meta["estimates"] = dict(old.implementations.get(conv_block, []))
            meta["variants"]["pick"] = plan.blocks[conv_block].implementation if any(
                b.id == conv_block for b in plan.blocks) else ""
            direct = replace(params, anchor_variant="direct")
            plan, selection = select_layouts(fusion_plan, pricing=pricing(fusion_plan, direct))
            build(plan_memory(plan), target / "direct", direct, selection=selection)
            with _gpu_class_offered(True):
                offered = pricing(fusion_plan, params)
                for label, image in [*((f"nchwc{b}", False) for b in BLOCK_SIZES), ("image4", True)]:
                    b = 4 if image else int(label[5:])
                    wanted = {impl: layout for impl, layout in offered.blocked.get(conv_block, {}).items()
                              if layout.block == b and layout.image == image}
                    if not wanted:
                        continue
                    forced = replace(offered, blocked={conv_block: wanted}, force="images" if image else "nchwc",
                                     implementations={**offered.implementations, conv_block: [
                                         o for o in offered.implementations[conv_block] if o[0] in wanted]})
                    plan, selection = select_layouts(fusion_plan, pricing=forced)
                    build(plan_memory(plan), target / label, params, selection=selection)
                    meta["variants"][label] = [b.implementation for b in plan.blocks if b.id == conv_block][0]
                meta["estimates"].update({impl: cost for impl, cost in offered.implementations[conv_block]
                                          if impl in offered.blocked.get(conv_block, {})})
            for artefact in target.iterdir():
                if artefact.is_dir():
                    _strip_weights(artefact, graph.constants)
            (target / "meta.json").write_text(json.dumps(meta))
            print(target.name, meta["variants"], flush=True)


MODELS = ("resnet50", "mobilenet_v2", "convnext_tiny")
# the GPU class's pick (blocked not offered); every conv with a blocked kernel forced onto it
# at channel block 4 / 8 / 16, or reading an RGBA image
POLICIES = ("pbqp", "nchwc4", "nchwc8", "nchwc16", "images")


def _model_graph(name: str, batch: int, rules: object):  # noqa: ANN202 - a Graph
    """`benchmarks.gpu`'s torchvision build of ``name`` at a 224 input, exported at
    ``batch``, optimised, its large float weights replaced by seeded draws (`_draw`)."""
    import torch

    from benchmarks.gpu import _Exported, build_model, model_inputs
    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl.bench import _static_graph

    inputs = model_inputs(name, batch)
    with tempfile.TemporaryDirectory() as tmp:
        torch.onnx.export(_Exported(build_model(name), name), tuple(torch.from_numpy(v) for v in inputs.values()),
                          f"{tmp}/m.onnx", dynamo=False, opset_version=17, input_names=list(inputs),
                          output_names=["y"])
        graph = pipeline.optimize(_static_graph(f"{tmp}/m.onnx"), rules)[0]
    return replace(graph, constants={
        k: _draw(list(v.shape), _seed(k)) if v.dtype == np.float32 and v.size >= SMALL else v
        for k, v in graph.constants.items()})


def prepare_models(out: Path, only: str | None) -> None:
    """Whole models (`benchmarks.gpu`'s torchvision builds at 224, batch 1 and 8) under each
    of `POLICIES`, their weights replaced by seeded draws (`_draw`: the same for every
    policy, so outputs compare)."""
    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl import KernelParams, build
    from egraph_compiler.backends.opencl.planning import execution_plan

    rules = pipeline.load_rules()
    params = KernelParams.for_device("gpu")
    for name in MODELS:
        if only and name not in only.split(","):
            continue
        for batch in BATCHES:
            target = out / f"model_{name}_b{batch}"
            graph = _model_graph(name, batch, rules)
            meta = {}
            for policy in POLICIES:
                with _gpu_class_offered(policy != "pbqp", int(policy[5:] or 0) if policy.startswith("nchwc") else 0):
                    plan, selection = execution_plan(graph, rules, layouts=policy.rstrip("0123456789"),
                                                     params=params)
                    build(plan, target / policy, params, selection=selection)
                _strip_weights(target / policy, plan.fusion.graph.constants)
                variants = [b.implementation.split()[0] for b in plan.fusion.blocks if b.implementation]
                meta[policy] = {v: variants.count(v) for v in sorted(set(variants))}
            (target / "meta.json").write_text(json.dumps({"model": meta}))
            print(target.name, meta, flush=True)


def decisions(only: str | None) -> None:
    """The selection's decisions on `MODELS` (+ efficientnet_b0) at 224, batch 1 and 8, for
    both device classes with the stored prices: per model the convs offered a blocked
    option, those the PBQP gave one, the tensors it stored blocked, its objective (µs of
    the class's cost model) and the objective with nothing blocked offered."""
    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl import KernelParams, blocked
    from egraph_compiler.backends.opencl.cost import DEVICES, fusion_cost
    from egraph_compiler.backends.opencl.planning import with_kernels
    from egraph_compiler.backends.opencl.pricing import pricing
    from egraph_compiler.fusion import plan_fusion
    from egraph_compiler.fusion.index import Blocked
    from egraph_compiler.select import select_layouts

    rules = pipeline.load_rules()
    print("| model | batch | class | convs offered blocked | blocked convs chosen | NCHWc tensors | "
          "objective µs | without blocked µs | solve s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in (*MODELS, "efficientnet_b0"):
        if only and name not in only.split(","):
            continue
        for batch in BATCHES:
            graph = with_kernels(_model_graph(name, batch, rules))
            for device in ("cpu", "gpu"):
                params = KernelParams.for_device(device)
                # as `planning.execution_plan` plans it for this class
                fusion_plan = plan_fusion(graph, rules, layouts=False, cost=fusion_cost(DEVICES[device]))
                prices = pricing(fusion_plan, params)
                planned, selection = select_layouts(fusion_plan, pricing=prices)
                chosen = sum(bool(blocked.block_of(b.implementation)) for b in planned.blocks)
                stored = sum(isinstance(c.perm, Blocked) for c in planned.layouts)
                without = replace(prices, blocked={}, implementations={
                    k: [o for o in v if not o[0].startswith(blocked.VARIANT)] for k, v in prices.implementations.items()})
                baseline = select_layouts(fusion_plan, pricing=without)[1]
                print(f"| {name} | {batch} | {device} | {len(prices.blocked)} | {chosen} | {stored} | "
                      f"{selection.objective:.1f} | {baseline.objective:.1f} | {selection.seconds:.2f} |", flush=True)


def run(out: Path, device: str, repeats: int) -> None:
    import time

    import pyopencl as cl

    from egraph_compiler.backends.opencl.runtime import CompiledModel, _device

    chosen = _device(device)
    context = cl.Context([chosen])
    shared = (context, cl.CommandQueue(context))  # one context for every artefact
    card = chosen.name
    print(f"{card}: per launch µs, median of {repeats} (OpenCL profiling events)", flush=True)
    start = time.perf_counter()
    for shape_dir in sorted(p for p in out.iterdir() if (p / "meta.json").exists()):
        meta = json.loads((shape_dir / "meta.json").read_text())
        reference = None
        feeds = None
        row: dict[str, object] = {"name": shape_dir.name, **meta}
        labels = list(POLICIES) if "model" in meta else \
            ["direct", "pick", *(f"nchwc{b}" for b in BLOCK_SIZES), "image4"]
        for label in labels:
            if not (shape_dir / label).exists():
                continue
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    compiled = CompiledModel(_restore_weights(shape_dir / label, Path(tmp) / "a"), device,
                                             images=True if label in ("image4", "images") else None,
                                             shared=shared)
                    if feeds is None:
                        rng = np.random.default_rng(0)
                        feeds = {n: rng.standard_normal(compiled.plan["tensors"][n]["shape"]).astype(np.float32)
                                 for n in compiled.plan["inputs"]}
                    result = compiled.run(feeds)[compiled.plan["outputs"][0]]
                    compiled.run(feeds)
                    times = [t * 1e6 for t in compiled.time_launches(repeats)]
                except Exception as error:  # one variant failing must not lose the run
                    row[label] = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
                    print(shape_dir.name, label, "failed:", row[label], flush=True)
                    continue
                if reference is None:
                    reference = result
                diff = float(np.max(np.abs(result - reference)) / max(float(np.max(np.abs(reference))), 1e-30))
                launches = compiled.plan["launches"]
                # the measured conv's block (several launches: Winograd, split K), the conversions
                row[label] = {"conv_us": sum(t for la, t in zip(launches, times, strict=True)
                                             if la["block"] == meta.get("conv_block")),
                              "conversion_us": sum(t for la, t in zip(launches, times, strict=True)
                                                   if la["ops"] == ["Identity"]),
                              "total_us": sum(times), "rel_diff": diff, "images_on": compiled.images_on,
                              "launches": [[la["kind"], la.get("variant", ""), round(t, 2)]
                                           for la, t in zip(launches, times, strict=True)]
                              if "model" not in meta else len(launches)}
                del compiled
        print(json.dumps({**row, "card": card}), flush=True)
        cells = " ".join(f"{label}={row[label]['conv_us']:.1f}/{row[label]['total_us']:.1f}"
                         for label in labels
                         if isinstance(row.get(label), dict) and "conv_us" in row[label])
        print(f"# {shape_dir.name}: conv/total µs {cells} ({time.perf_counter() - start:.0f} s)", flush=True)


def _out_hw(cin: int, cout: int, k: int, stride: int, size: int) -> tuple[int, int]:
    pad = 0 if k == stride else k // 2
    out = (size + 2 * pad - k) // stride + 1
    return out, out


def fit(log: Path, json_file: str | None) -> None:
    """From a ``run`` log: per shape the blocked conv's launch over ``direct``'s and over the
    pick's; the GPU class's price model fitted to them by least squares in log space,
    log t = intercept[block] + flops_exponent · log(multiply-adds) + items_exponent ·
    log(work-items) (`gpu_prices.blocked_conv_us`), and image4 / nchwc4's geometric mean;
    per shape, whether the priced blocked option would beat the pick's price, against
    whether the measured one beat the pick."""
    from egraph_compiler.backends.opencl import blocked

    rows = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    rows = [r for r in rows if "conv_us" in r.get("direct", {}) and "conv_us" in r.get("pick", {})]
    labels = [*(f"nchwc{b}" for b in BLOCK_SIZES), "image4"]

    def features(row: dict, b: int) -> list[float]:
        batch, cin, cout, k, stride, size = row["shape"]
        macs, items = blocked.work((batch, cin, size, size), cout, _out_hw(cin, cout, k, stride, size), k * k, b)
        return [float(b == c) for c in BLOCK_SIZES] + [math.log(macs), math.log(items)]

    design, times, work = [], [], []
    for row in rows:
        for b in BLOCK_SIZES:
            if "conv_us" in row.get(f"nchwc{b}", {}):
                design.append(features(row, b))
                work.append([math.exp(v) for v in design[-1][-2:]])
                times.append(math.log(row[f"nchwc{b}"]["conv_us"]))
    coef, *_ = np.linalg.lstsq(np.array(design), np.array(times), rcond=None)
    residuals = np.array(times) - np.array(design) @ coef
    image = [row["image4"]["conv_us"] / row["nchwc4"]["conv_us"] for row in rows
             if "conv_us" in row.get("image4", {}) and "conv_us" in row.get("nchwc4", {})]
    image_factor = math.exp(statistics.mean(map(math.log, image)))
    print(f"card: {rows[0]['card']}; conv launch µs (OpenCL profiling events); blocked: µs "
          "(× direct, × pick); priced: the best blocked option's price over the pick's estimate; "
          "measured: the best blocked over the pick")
    print(f"| shape | direct | pick (variant) | {' | '.join(labels)} | priced | measured |")
    print("|---|---|---|" + "---|" * len(labels) + "---|---|")
    disagree = 0
    for row in rows:
        direct, pick = row["direct"]["conv_us"], row["pick"]["conv_us"]
        cells, measured = [], []
        for label in labels:
            got = row.get(label, {}).get("conv_us")
            cells.append("-" if got is None else f"{got:.0f} ({got / direct:.1f}, {got / pick:.1f})")
            if got is not None:
                measured.append(got)
        pick_price = min(v for key, v in row["estimates"].items() if not key.startswith(blocked.VARIANT))
        prices = [math.exp(float(np.dot(features(row, b), coef))) for b in BLOCK_SIZES]
        if "image4" in row:
            prices.append(prices[0] * image_factor)
        priced, real = min(prices) / pick_price, min(measured) / pick
        disagree += (priced < 1) != (real < 1)
        print(f"| {row['name']} | {direct:.0f} | {pick:.0f} ({row['variants']['pick']}) | {' | '.join(cells)} | "
              f"{priced:.2f} | {real:.2f} |")
    intercepts = {str(b): round(float(c), 4) for b, c in zip(BLOCK_SIZES, coef, strict=False)}
    print(f"fit over {len(times)} blocked launches: intercepts {intercepts}, multiply-add exponent "
          f"{coef[-2]:.3f}, work-item exponent {coef[-1]:.3f}; error × geometric mean "
          f"{math.exp(float(np.mean(np.abs(residuals)))):.2f}, max {math.exp(float(np.max(np.abs(residuals)))):.2f}")
    print(f"image4 / nchwc4: geometric mean {image_factor:.2f} (min {min(image):.2f}, max {max(image):.2f}, "
          f"{len(image)} shapes)")
    print(f"shapes where the priced and the measured choice (a blocked option or the pick) disagree: "
          f"{disagree} of {len(rows)}")
    if json_file:
        entry = {"intercept": intercepts, "flops_exponent": round(float(coef[-2]), 4),
                 "items_exponent": round(float(coef[-1]), 4), "image_over_buffer": round(image_factor, 4),
                 # the measured shapes' range: outside it the GPU class is offered no blocked conv
                 "domain": {"multiply_adds": [round(min(m for m, _ in work)), round(max(m for m, _ in work))],
                            "work_items": [round(min(i for _, i in work)), round(max(i for _, i in work))]},
                 "measured": f"{rows[0]['card']}: benchmarks/gpu_blocked.py run (conv launch alone, median "
                             f"of 10), {len(rows)} conv shapes of resnet50/mobilenet_v2/convnext_tiny at batch 1 "
                             "and 8; fitted by benchmarks/gpu_blocked.py fit"}
        Path(json_file).write_text(json.dumps(entry, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["prepare", "prepare-models", "run", "fit", "decisions"])
    parser.add_argument("dir")
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", help="shape names, comma-separated")
    parser.add_argument("--json", help="fit: write the fitted ratios here")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(Path(args.dir), args.only)
    elif args.step == "prepare-models":
        prepare_models(Path(args.dir), args.only)
    elif args.step == "decisions":  # DIR unused
        decisions(args.only)
    elif args.step == "run":
        run(Path(args.dir), args.device, args.repeats)
    else:
        fit(Path(args.dir), args.json)


if __name__ == "__main__":
    main()
