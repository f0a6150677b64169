"""Blocked NCHWc intermediates (`backends.opencl.blocked`, `fusion.index.Blocked`): the
blocked conv reads and writes NCHW{b}c with vector loads, conversion kernels into it are
priced and inserted by the selection, a padded channel block stays zero through the
epilogue, and the results equal onnxruntime's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.backends.opencl import KernelParams, compile_graph, load
from egraph_compiler.backends.opencl import blocked as nchwc
from egraph_compiler.backends.opencl.pricing import LAUNCH_US, pricing
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.fusion.index import Blocked, stored_numel
from egraph_compiler.select import layout_problem, select_layouts
from egraph_compiler.select.conversions import CONVERSION_OP, conversion_sectors
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import assert_close, run_ort

CHANNELS = 6  # not a multiple of the 4-channel block: the last block is half padding


def residual_fork_model(c: int = CHANNELS, h: int = 9, w: int = 10) -> onnx.ModelProto:
    """conv → ReLU forks to a blocked conv chain and a residual Add; the middle conv's
    output (c channels, bias > 0 so a padded lane's bias + ReLU would be positive) is
    read by the next conv and by its epilogue's Add; a strided conv ends it."""
    rng = np.random.default_rng(0)

    def weight(name: str, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [weight("w1", (c, 3, 3, 3), 0.25), weight("w2", (c, c, 3, 3), 0.15),
             weight("w3", (c, c, 1, 1), 0.3), weight("w4", (5, c, 3, 3), 0.15),
             numpy_helper.from_array(np.abs(rng.standard_normal(c)).astype(np.float32) + 0.5, "b2"),
             weight("b3", (c,), 1.0)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"]),
             helper.make_node("Add", ["c3", "r2"], ["s"]),
             helper.make_node("Add", ["s", "r1"], ["t"]),
             helper.make_node("Relu", ["t"], ["r3"]),
             helper.make_node("Conv", ["r3", "w4"], ["y"], pads=[0, 1, 0, 1], strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "residual_fork", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, (h - 3) // 2 + 1, (w - 1) // 2 + 1])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _graph(model: onnx.ModelProto):  # noqa: ANN202
    x = np.random.default_rng(1).standard_normal((1, 3, 9, 10)).astype(np.float32)
    feeds = {"x": x}
    model = with_static_inputs(model, feeds)
    return model, feeds, static_graph(model, feeds)


def test_forced_nchwc_runs_padded_blocks_zero_and_matches_onnxruntime(tmp_path: Path) -> None:
    model, feeds, graph = _graph(residual_fork_model())
    compile_graph(graph, tmp_path, layouts="nchwc")
    doc = json.loads((tmp_path / "plan.json").read_text())
    variants = [la["variant"] for la in doc["launches"] if la["kind"] == "conv"]
    # the first conv reads the graph input and the last one computes its input in a fused
    # prologue (Add, ReLU): no NCHWc option; the middle two are blocked
    assert len(variants) == 4 and variants[0] and variants[3], variants
    assert [v.startswith(nchwc.VARIANT) for v in variants] == [False, True, True, False], variants
    layouts = {d["value"]: d["perm"] for d in doc["layout_decisions"]}
    blocked_values = [v for v, perm in layouts.items() if "1%4" in perm]
    # r2: written by the middle blocked conv with its padded lanes, read by the next one
    assert layouts["r2"] == [0, "1/4", 2, 3, "1%4"], layouts
    assert any(b["ops"] == [CONVERSION_OP] for b in doc["blocks"])  # r1 converted into NCHW4c
    # the arena filled with NaN first: a padded lane left unwritten would reach the blocked
    # convs' vector loads (NaN × a zero weight is NaN) and the output
    import pyopencl as cl

    compiled = load(tmp_path)
    poison = np.full(int(doc["arena_bytes"]) // 4, np.nan, dtype=np.float32)
    cl.enqueue_copy(compiled.queue, compiled.arena, poison)
    got = compiled.run(feeds)
    assert np.isfinite(got["y"]).all()
    assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=1e-5)
    assert blocked_values


@pytest.mark.parametrize("channels", [4, 6])
def test_pbqp_prices_the_blocked_conv_and_its_conversions(channels: int) -> None:
    _, _, graph = _graph(residual_fork_model(channels))
    fusion_plan = plan_fusion(graph, layouts=False)
    prices = pricing(fusion_plan, KernelParams())
    assert prices.blocked, "no conv has a blocked option"
    problem, columns = layout_problem(fusion_plan, prices)
    # the edge r1 -> the middle conv: its row-major storage read by a blocked option costs
    # a conversion kernel into NCHW{b}c (launch + sectors) and the padded read
    (edge,) = [e for e in problem.edges if e.tensor == "r1" and
               any(lbl.startswith(nchwc.VARIANT) for lbl in columns[e.target].implementation)]
    target = columns[edge.target]
    k = next(j for j, lbl in enumerate(target.implementation) if nchwc.block_of(lbl) == Blocked(1, 4, 4))
    source_stored = next(ks for t, ks in columns[edge.source].stored if t.value == "r1")
    candidates = next(t for t, _ in columns[edge.source].stored if t.value == "r1").candidates
    row = next(i for i, cand in enumerate(source_stored) if candidates[cand] == (0, 1, 2, 3))
    shape = (1, channels, 9, 10)
    layout = Blocked(1, 4, 4)
    expected = LAUNCH_US["cpu"] + prices.per_sector * (
        conversion_sectors(shape, (0, 1, 2, 3), layout) + stored_numel(shape, layout))
    assert edge.costs[row][k] == pytest.approx(expected)
    assert conversion_sectors(shape, (0, 1, 2, 3), layout) == 540 * channels // 6 * 8 + \
        stored_numel(shape, layout)
    planned, selection = select_layouts(fusion_plan, pricing=prices)
    assert selection.gap == 0 and selection.objective <= selection.local_objective
    assert selection.chain_objective is None or selection.objective <= selection.chain_objective


def test_blocked_options_are_priced_from_the_direct_kernel() -> None:
    """direct × the measured ratio at (block, window) × the padding: 6 channels in blocks
    of 4 are 8 × 8 / (6 × 6) of the work; a 1x1 and a 3x3 conv both get options."""
    _, _, graph = _graph(residual_fork_model())
    fusion_plan = plan_fusion(graph, layouts=False)
    prices = pricing(fusion_plan, KernelParams())
    windows = set()
    for block_id, labels in prices.blocked.items():
        costs = dict(prices.implementations[block_id])
        direct = min(c for lbl, c in costs.items() if lbl.startswith("direct"))
        block = next(b for b in fusion_plan.blocks if b.id == block_id)
        node = fusion_plan.graph.nodes[block.anchor]
        window = graph.types[node.inputs[1]].shape[2] > 1
        windows.add(window)
        for label, layout in labels.items():
            b = layout.block
            padding = {4: 64 / 36, 8: 64 / 36, 16: 256 / 36}[b]
            image = nchwc.CPU_IMAGE_FACTOR if layout.image else 1.0
            assert costs[label] == pytest.approx(direct * nchwc.ESTIMATE_RATIO[b, window] * padding * image)
        assert any(layout.image for layout in labels.values())
    assert windows == {False, True}


def test_forced_images_write_and_read_rgba_texels_and_match_onnxruntime(tmp_path: Path) -> None:
    """The ``images`` policy: the blocked convs read their input as an RGBA image2d_t
    written texel by texel (write_imagef of four channels, the padded ones 0) by a
    conversion kernel; on PoCL with images forced on, and on the same artefact's NCHW4c
    buffers (images off), the results equal onnxruntime's."""
    model, feeds, graph = _graph(residual_fork_model())
    compile_graph(graph, tmp_path, layouts="images")
    doc = json.loads((tmp_path / "plan.json").read_text())
    variants = [la["variant"] for la in doc["launches"] if la["kind"] == "conv"]
    assert [v.startswith(f"{nchwc.VARIANT}4{nchwc.IMAGE_SUFFIX}") for v in variants] == \
        [False, True, True, False], variants
    extents = doc["activation_images"]
    assert len(extents) == 2  # r1 and r2, each converted for its blocked conv
    for value, extent in extents.items():
        shape = doc["tensors"][value]["shape"]
        assert (extent["width"], extent["height"]) == (shape[3], shape[0] * -(-shape[1] // 4) * shape[2])
    source = (tmp_path / "kernels.cl").read_text()
    assert "DNNR_ACT_STORE4(" in source and "DNNR_ACT_LOAD4(" in source
    expected = run_ort(model, feeds)
    on = load(tmp_path, images=True)
    assert on.images_on, on.images_note
    assert_close(on.run(feeds), expected, rtol=1e-4, atol=1e-5)
    off = load(tmp_path, images=False)
    assert not off.images_on
    assert_close(off.run(feeds), expected, rtol=1e-4, atol=1e-5)


def test_image_extent_limit_is_refused_by_name() -> None:
    """An activation past the guaranteed 8192-texel extent is not an image option, and says why."""
    assert nchwc.image_refusal((1, 64, 16, 16)) is None
    reason = nchwc.image_refusal((1, 64, 600, 8))  # 16 blocks × 600 rows = 9600 texels high
    assert reason is not None and "8x9600" in reason and "8192" in reason


def test_pbqp_stores_nchwc_between_blocked_convs_where_they_are_cheaper(tmp_path: Path) -> None:
    """Not forced: with the blocked kernels priced below every other option, the PBQP picks
    them and stores the tensor between them (r2) in their layout, written by the first
    with its padded lanes zero and read by the second with no conversion between; the
    artefact built from that selection equals onnxruntime (arena poisoned with NaN)."""
    from dataclasses import replace

    import pyopencl as cl

    from egraph_compiler.backends.opencl import build
    from egraph_compiler.plan import plan_memory

    model, feeds, graph = _graph(residual_fork_model())
    fusion_plan = plan_fusion(graph, layouts=False)
    prices = pricing(fusion_plan, KernelParams())
    # every other implementation of a conv that has a blocked one 1 ms dearer (at the real
    # prices converting r1 in costs more than these tiny convs, and the PBQP keeps row-major)
    dear = {i: [(lbl, c if lbl in prices.blocked.get(i, {}) and not prices.blocked[i][lbl].image
                 else c + 1000.0 * bool(prices.blocked.get(i))) for lbl, c in impls]
            for i, impls in prices.implementations.items()}
    planned, selection = select_layouts(fusion_plan, pricing=replace(prices, implementations=dear))
    assert selection.gap == 0 and selection.objective <= selection.local_objective
    chosen = {b.id: b.implementation for b in planned.blocks if b.kind == "conv"}
    assert sum(nchwc.block_of(v) is not None for v in chosen.values()) == 2, chosen
    layouts = {c.value: c.perm for c in planned.layouts}
    assert isinstance(layouts["r2"], Blocked) and layouts["r2"].block == 4, layouts
    # the second blocked conv reads r2 itself, not a converted copy (the last conv's prologue,
    # which reads row-major, gets a conversion)
    readers = [planned.graph.nodes[b.anchor].inputs[0] for b in planned.blocks
               if b.kind == "conv" and nchwc.block_of(b.implementation) is not None]
    assert "r2" in readers, readers
    build(plan_memory(planned), tmp_path, KernelParams(), selection=selection)
    compiled = load(tmp_path)
    doc = json.loads((tmp_path / "plan.json").read_text())
    cl.enqueue_copy(compiled.queue, compiled.arena,
                    np.full(int(doc["arena_bytes"]) // 4, np.nan, dtype=np.float32))
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)


def conv_chain_model(c: int = CHANNELS, h: int = 9, w: int = 10) -> onnx.ModelProto:
    """Three convs in a row (the middle one's bias ≥ 1: a padded lane through the epilogue
    would not be 0)."""
    rng = np.random.default_rng(2)

    def weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c2", "w3", "b3"], ["y"])]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, h, w])],
        [weight("w1", (c, 3, 3, 3)), weight("w2", (c, c, 3, 3)), weight("w3", (5, c, 1, 1)),
         numpy_helper.from_array(np.abs(rng.standard_normal(c)).astype(np.float32) + 1, "b2"),
         weight("b3", (5,))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_blocked_conv_writes_the_image_the_next_one_reads(tmp_path: Path) -> None:
    """SmartMem's 2.5D chain: the middle conv's epilogue fills RGBA texels (its two padded
    lanes 0) and writes them with write_imagef; the last conv reads them with read_imagef
    — no conversion between; images on, and the same artefact on NCHW4c buffers with the
    arena poisoned with NaN."""
    import pyopencl as cl

    model, feeds, graph = _graph(conv_chain_model())
    compile_graph(graph, tmp_path, layouts="images")
    doc = json.loads((tmp_path / "plan.json").read_text())
    layouts = {d["value"]: d["perm"] for d in doc["layout_decisions"]}
    assert layouts["c2"] == [0, "1/4", 2, 3, "1%4", "image2d_t"]
    assert "c2" in doc["activation_images"]
    conversions = [la for la in doc["launches"] if la["ops"] == [CONVERSION_OP]]
    assert all("c2" not in la["args"] for la in conversions)  # only c1 (from a conv-vec) is converted
    expected = run_ort(model, feeds)
    assert_close(load(tmp_path, images=True).run(feeds), expected, rtol=1e-4, atol=1e-5)
    off = load(tmp_path, images=False)
    cl.enqueue_copy(off.queue, off.arena, np.full(int(doc["arena_bytes"]) // 4, np.nan, dtype=np.float32))
    assert_close(off.run(feeds), expected, rtol=1e-4, atol=1e-5)


def _gpu_sized(model: onnx.ModelProto, size: int = 32):  # noqa: ANN202
    """``model``'s graph at a 1×3×size×size input: its 64-channel 3x3 conv within the
    shapes the GPU class's blocked prices were measured on (`gpu_prices.blocked_conv_us`)."""
    feeds = {"x": np.zeros((1, 3, size, size), np.float32)}
    return static_graph(with_static_inputs(model, feeds), feeds)


def _blocked_prices(fusion_plan, params: KernelParams) -> dict[str, float]:  # noqa: ANN001
    """Every blocked option's price per 'block id: label'."""
    prices = pricing(fusion_plan, params)
    return {f"{block_id}: {label}": cost for block_id, labels in prices.blocked.items()
            for label, cost in prices.implementations[block_id] if label in labels}


def test_gpu_class_offers_blocked_options_priced_from_the_stored_measurements(monkeypatch) -> None:  # noqa: ANN001
    """The GPU class is offered the blocked conv at b = 4/8/16 and its RGBA-image variant,
    each priced by `gpu_prices.blocked_conv_us` over the conv's multiply-adds and
    work-items (`blocked.work`) — read from gpu_prices.json's measured entry: scaling the
    stored model scales the prices, and without the entry nothing blocked is offered.
    A conv outside the measured shapes' range (the 1x1 conv, 4.2 M multiply-adds) is
    offered none on the GPU class (no extrapolation), but is on the CPU class."""
    from egraph_compiler.backends.opencl import gpu_prices

    graph = _gpu_sized(residual_fork_model(64, 32, 32))
    fusion_plan = plan_fusion(graph, layouts=False)
    gpu = KernelParams.for_device("gpu")
    prices = pricing(fusion_plan, gpu)
    assert prices.blocked, "the GPU class offers no blocked conv"
    labels = {layout for labels in prices.blocked.values() for layout in labels.values()}
    assert {(b.block, b.image) for b in labels} == {(4, False), (8, False), (16, False), (4, True)}
    types = fusion_plan.graph.types
    taps = {}
    for block in fusion_plan.blocks:
        if block.kind == "conv":
            node = fusion_plan.graph.nodes[block.anchor]
            taps[block.id] = types[node.inputs[1]].shape[2] * types[node.inputs[1]].shape[3]
    one_by_one = [i for i, t in taps.items() if t == 1]
    assert one_by_one and not set(one_by_one) & set(prices.blocked)
    assert set(one_by_one) & set(pricing(fusion_plan, KernelParams()).blocked)
    for block_id, offered in prices.blocked.items():
        block = next(b for b in fusion_plan.blocks if b.id == block_id)
        node = fusion_plan.graph.nodes[block.anchor]
        out_shape = types[node.outputs[0]].shape
        costs = dict(prices.implementations[block_id])
        for label, layout in offered.items():
            work = nchwc.work(types[node.inputs[0]].shape, out_shape[1], out_shape[2:], taps[block_id],
                              layout.block)
            expected = gpu_prices.blocked_conv_us(layout.block, *work)
            if layout.image:
                expected *= gpu_prices.MEASURED["blocked_conv"]["image_over_buffer"]
            assert costs[label] == pytest.approx(expected)
    before = _blocked_prices(fusion_plan, gpu)
    stored = gpu_prices.MEASURED["blocked_conv"]
    doubled = {**stored, "intercept": {b: v + np.log(2.0) for b, v in stored["intercept"].items()}}
    monkeypatch.setitem(gpu_prices.MEASURED, "blocked_conv", doubled)
    after = _blocked_prices(fusion_plan, gpu)
    assert after.keys() == before.keys()
    assert all(after[k] == pytest.approx(2 * before[k]) for k in before)
    monkeypatch.delitem(gpu_prices.MEASURED, "blocked_conv")
    assert not pricing(fusion_plan, gpu).blocked


def test_gpu_class_pbqp_takes_blocked_convs_only_where_they_are_priced_cheaper(monkeypatch) -> None:  # noqa: ANN001
    """With the measured prices (on the H200 the blocked conv ran 1.2-150x the GPU class's
    pick, 42 shapes) the GPU-class PBQP picks no blocked conv in a conv chain; priced 10^4
    times cheaper it picks one and stores its input blocked — the PBQP decides, not a
    rule."""
    from egraph_compiler.backends.opencl import gpu_prices

    fusion_plan = plan_fusion(_gpu_sized(conv_chain_model(64, 32, 32)), layouts=False)
    gpu = KernelParams.for_device("gpu")
    assert pricing(fusion_plan, gpu).blocked
    planned, selection = select_layouts(fusion_plan, pricing=pricing(fusion_plan, gpu))
    assert selection.gap == 0 and selection.objective <= selection.local_objective
    assert not [b for b in planned.blocks if nchwc.block_of(b.implementation)]
    stored = gpu_prices.MEASURED["blocked_conv"]
    cheap = {**stored, "intercept": {b: v - np.log(1e4) for b, v in stored["intercept"].items()}}
    monkeypatch.setitem(gpu_prices.MEASURED, "blocked_conv", cheap)
    planned, selection = select_layouts(fusion_plan, pricing=pricing(fusion_plan, gpu))
    assert selection.gap == 0 and selection.objective <= selection.local_objective
    assert [b for b in planned.blocks if nchwc.block_of(b.implementation)]
    assert any(isinstance(c.perm, Blocked) for c in planned.layouts)
