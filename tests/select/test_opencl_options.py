"""The OpenCL selection decides every anchor's kernel variant together with the layouts
(one PBQP node option per implementation × layout, priced in µs by the cost model or the
tuning database), the chosen variant is the one generated, and a layout-conversion kernel
is inserted (and priced: launch + sectors) where a consumer cannot read the chosen order."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.backends.opencl import KernelParams, compile_graph, load
from egraph_compiler.backends.opencl.pricing import LAUNCH_US, pricing
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.fusion.layout import physical_strides
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.select import layout_problem, select_layouts
from egraph_compiler.select.conversions import CONVERSION_OP, conversion_sectors
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import (
    assert_close,
    conv_pointwise_block,
    random_inputs,
    run_ort,
    transformer_encoder_block,
)

MODELS = {"conv_pointwise": lambda: conv_pointwise_block(channels=8, out_channels=32),
          "transformer_encoder": transformer_encoder_block}
DIMS = {"batch": 1, "height": 12, "width": 12, "seq": 16}


def shared_reduction_model(h: int = 8, w: int = 8, seed: int = 0) -> onnx.ModelProto:
    """A conv output read by two channel reductions (a ReduceMean, a Softmax over
    channels) and by a second conv: channels innermost pays for the reductions, and the
    second conv, which reads row-major only, then needs a conversion kernel."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((48, 5, 3, 3)) / 6).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((8, 48, 3, 3)) / 20).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["c1"], ["a"], axes=[1], keepdims=1),
             helper.make_node("Softmax", ["c1"], ["s"], axis=1),
             helper.make_node("ReduceMax", ["s"], ["b"], axes=[1], keepdims=1),
             helper.make_node("Conv", ["c1", "w2"], ["d"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["a", "b"], ["ab"]),
             helper.make_node("Add", ["d", "ab"], ["y"])]
    graph = helper.make_graph(nodes, "shared_reduction",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, h, w])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _graph(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict, object]:
    feeds = random_inputs(model, 0, dims=DIMS)
    model = with_static_inputs(model, feeds)
    return model, feeds, static_graph(model, feeds)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_anchor_variants_are_options_and_the_choice_is_generated(name: str, device: str,
                                                                 tmp_path: Path) -> None:
    model, feeds, graph = _graph(MODELS[name]())
    params = KernelParams.for_device(device)
    fusion_plan = plan_fusion(graph, layouts=False)
    prices = pricing(fusion_plan, params)
    planned, selection = select_layouts(fusion_plan, pricing=prices)
    assert selection.gap == 0 and selection.objective <= selection.local_objective
    anchors = [b for b in planned.blocks if b.kind in ("conv", "matmul")]
    assert anchors and all(b.implementation for b in anchors)
    variants = set()
    for b in anchors:
        options = [n for n in selection.problem.nodes if n.name.startswith(f"block{b.id}:")][0]
        kinds = {label.split()[0] for label in options.options}
        variants |= kinds
        assert "direct" in kinds, options.options
        # the implementation is decided by the PBQP: its option is the cheapest of the node
        chosen = selection.label(options.name)
        assert chosen.startswith(b.implementation + " | ")
        impl_costs = dict(prices.implementations[b.id])
        assert impl_costs[b.implementation] == min(impl_costs.values())
    assert "tiled" in variants
    artefact = compile_graph(graph, tmp_path, params=params)
    doc = json.loads((tmp_path / "plan.json").read_text())
    implementation = {b["id"]: b["implementation"] for b in doc["blocks"]}
    for launch in doc["launches"]:
        if launch["kind"] in ("conv", "matmul"):
            assert launch["variant"] == implementation[launch["block"]] != ""
    if device == "gpu":  # the GPU model prefers work-group-tiled kernels somewhere
        assert any(v.startswith(("tiled", "gemv")) for v in implementation.values())
    assert artefact.select["unit"] == "µs (cost model)"
    assert_close(load(tmp_path).run(feeds), run_ort(model, feeds), rtol=1e-3, atol=1e-4)


def test_tuning_database_option_is_the_implementation(tmp_path: Path) -> None:
    model, feeds, graph = _graph(MODELS["conv_pointwise"]())
    fusion_plan = plan_fusion(graph, layouts=False)
    compile_graph(graph, tmp_path / "plain")
    launches = json.loads((tmp_path / "plain" / "plan.json").read_text())["launches"]
    key = next(la["shape_key"] for la in launches if la["kind"] == "conv")
    options = pricing(fusion_plan, KernelParams()).implementations
    tiled = next(label for impls in options.values() for label, _ in impls if label.startswith("tiled"))
    from egraph_compiler.backends.opencl import cost
    tile = next(o for o in cost.options(cost.DEVICES["cpu"], 32, 144, 72, 1, 64, True, None,
                                        cost.TILES) if o.describe() == tiled)
    params = replace(KernelParams(), tuned=((key, replace(tile, estimate_us=1.0)),))
    prices = pricing(fusion_plan, params)
    tuned_blocks = [i for i, impls in prices.implementations.items() if impls == [(tiled, 1.0)]]
    assert tuned_blocks, prices.implementations
    compile_graph(graph, tmp_path / "tuned", params=params)
    doc = json.loads((tmp_path / "tuned" / "plan.json").read_text())
    assert {la["variant"] for la in doc["launches"] if la["block"] in tuned_blocks} == {tiled}
    assert_close(load(tmp_path / "tuned").run(feeds), run_ort(model, feeds), rtol=1e-3, atol=1e-4)


def test_conversion_sectors_of_nhwc_to_nchw() -> None:
    # [1, 48, 8, 8] stored channels-last: the conversion's lanes walk W (stride 48 in
    # NHWC, capped at a sector) and write consecutive floats
    assert conversion_sectors((1, 48, 8, 8), (0, 2, 3, 1)) == 3072 * 8 + 3072
    assert conversion_sectors((1, 48, 8, 8), (0, 1, 2, 3)) == 3072 * 2


def test_conversion_kernel_is_priced_inserted_and_runs(tmp_path: Path) -> None:
    model, feeds, graph = _graph(shared_reduction_model())
    fusion_plan = plan_fusion(graph, layouts=False)
    prices = pricing(fusion_plan, KernelParams())
    problem, columns = layout_problem(fusion_plan, prices)
    # the edge into the second conv: finite only through a conversion kernel
    into_conv = [e for e in problem.edges if e.tensor == "c1" and e.target.endswith(":conv")]
    assert len(into_conv) == 1
    # (the dimension orders of c1; its NCHWc candidates are tests/backends/opencl/test_blocked.py's)
    stored, picks = next((t, ks) for t, ks in columns[into_conv[0].source].stored if t.value == "c1")
    rows = {row[0] for row, k in zip(into_conv[0].costs, picks, strict=True)
            if isinstance(stored.candidates[k], tuple)}
    numel = 48 * 8 * 8
    row_major = prices.per_sector * numel  # the conv's row-major read
    converted = LAUNCH_US["cpu"] + prices.per_sector * (conversion_sectors((1, 48, 8, 8), (0, 2, 3, 1)) + numel)
    assert sorted(rows) == pytest.approx(sorted([row_major, converted]))
    planned, selection = select_layouts(fusion_plan, pricing=prices)
    assert selection.gap == 0 and selection.objective < selection.local_objective
    conversions = [b for b in planned.blocks if b.ops == (CONVERSION_OP,)]
    assert len(conversions) == 1
    view = GraphView(planned.graph)
    (copy,) = conversions[0].outputs
    # channels at unit stride for the two channel reductions: NHWC, or a blocked NCHWc
    # (whose conversion for the conv reads W at stride b, not 48: NCHW4c wins on the model)
    assert physical_strides((1, 48, 8, 8), dict(conversions[0].layouts)["c1"])[1] == 1
    assert copy not in dict(conversions[0].layouts)
    assert any(copy in view.nodes[n].inputs and view.nodes[n].op == "Conv" for b in planned.blocks
               for n in b.nodes)
    # without a conversion kernel the same order is infeasible for that consumer
    bare, _ = layout_problem(fusion_plan, replace(prices, conversion_launch=None))
    edge = next(e for e in bare.edges if e.tensor == "c1" and e.target.endswith(":conv"))
    assert any(math.isinf(row[0]) for row in edge.costs)
    compile_graph(graph, tmp_path)
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert [la["ops"] for la in doc["launches"]].count([CONVERSION_OP]) == 1
    assert_close(load(tmp_path).run(feeds), run_ort(model, feeds), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_image2d_is_an_option_priced_per_device(device: str, tmp_path: Path) -> None:
    """Depthwise weights re-read by every output pixel are image2d_t candidates: the
    block's options are buffers × image2d_t. On the CPU class image reads cost 1.36× a
    buffer read (measured on PoCL); on the GPU class they cost the measured image/buffer
    ratio at the block's reuse (`gpu_prices`: 1.09–1.48× on an H200), so the selection
    picks images exactly where that price is below the buffers' — nowhere on either class
    with today's measurements — and the kernel has an image argument only then (run here
    on PoCL with images forced on)."""
    from egraph_compiler.backends.opencl import gpu_prices
    from egraph_compiler.backends.opencl.pricing import IMAGE_READ_FACTOR
    from tests.modelzoo import depthwise_separable_block

    model = depthwise_separable_block(channels=13, out_channels=16)
    feeds = random_inputs(model, 0, dims={"batch": 2, "height": 14, "width": 13})
    model = with_static_inputs(model, feeds)
    graph = static_graph(model, feeds)
    params = KernelParams.for_device(device)
    fusion_plan = plan_fusion(graph, layouts=False)
    prices = pricing(fusion_plan, params)
    ((block_id, (buffer_us, image_us)),) = prices.images.items()
    assert buffer_us > 0
    if device == "cpu":
        assert image_us == pytest.approx(buffer_us * IMAGE_READ_FACTOR)
    else:
        measured = [gpu_prices.image_factor(float(r)) for r in gpu_prices.MEASURED["image_reads"]]
        assert min(measured) <= image_us / buffer_us <= max(measured)  # the measured ratio at some reuse
    images_win = image_us < buffer_us
    planned, selection = select_layouts(fusion_plan, pricing=prices)
    node = next(n for n in selection.problem.nodes if n.name.startswith(f"block{block_id}:"))
    assert any("image2d_t" in o for o in node.options) and any("buffers" in o for o in node.options)
    chosen = selection.label(node.name)
    assert ("image2d_t" in chosen) == images_win, chosen
    artefact = compile_graph(graph, tmp_path, params=params)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert bool(plan["images"]) == images_win == ("DNNR_IMAGE_ARG" in (tmp_path / "kernels.cl").read_text())
    assert artefact.select["decisions"][node.name]["option"] == chosen
    assert_close(load(tmp_path, images=True).run(feeds), run_ort(model, feeds), rtol=1e-3, atol=1e-4)
