"""The GPU class's memory-bound kernel forms on PoCL against onnxruntime: LayerNorm over
the channels of an NCHW map with lanes along the pixels (`pixel_rows.py`, both write
forms, ragged rows and rows), and pointwise kernels with several consecutive elements
per work-item (`KernelParams.pointwise_items`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.gemm import Tile
from egraph_compiler.backends.opencl.pixel_rows import access_strides
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import assert_close, run_ort

GPU = KernelParams(work_group=256, reduce_work_group=256, row_serial_below=0, device="gpu",
                   hoist_sizes=False, row_cache=8, pointwise_items=4, strided_rows=32)


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, list[int]],
           outputs: dict[str, list[int]], constants: dict[str, np.ndarray]
           ) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v)
                     for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _channel_layernorm(channels: int, back_to_nchw: bool, scaled: bool = False,
                       spatial: tuple[int, int] = (41, 39)) -> onnx.ModelProto:
    """ConvNeXt's LayerNorm2d: NCHW → NHWC, LayerNorm over C, a Mul epilogue, then (or
    not) back to NCHW; ``scaled``: a per-channel scale before it (a load that moves
    along the row only)."""
    rng = np.random.default_rng(3)
    shape = [2, channels, *spatial]
    scale = [helper.make_node("Mul", ["x", "s"], ["xs"])] if scaled else []
    nodes = [*scale,
             helper.make_node("Transpose", ["xs" if scaled else "x"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=-1,
                              epsilon=1e-6),
             helper.make_node("Mul", ["n", "three"], ["m" if back_to_nchw else "y"])]
    out = [2, *spatial, channels]
    if back_to_nchw:
        nodes.append(helper.make_node("Transpose", ["m"], ["y"], perm=[0, 3, 1, 2]))
        out = shape
    return _model(nodes, {"x": shape}, {"y": out},
                  {"g": rng.uniform(0.5, 1.5, channels).astype(np.float32),
                   "b": rng.standard_normal(channels).astype(np.float32),
                   "three": np.array(3.0, np.float32),
                   **({"s": rng.uniform(0.5, 1.5, [channels, 1, 1]).astype(np.float32)}
                      if scaled else {})})


def _build_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: Path,
               params: KernelParams = GPU, gpu_fusion: bool = False
               ) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Launches and outputs of ``model`` built with ``params``; ``gpu_fusion``: fused
    as the GPU class's cost model fuses (a row input stored by its row kernel)."""
    fusion_cost = cost.fusion_cost(cost.DEVICES["gpu"]) if gpu_fusion else None
    build(plan_memory(plan_fusion(static_graph(model, feeds), cost=fusion_cost)), tmp_path,
          params)
    compiled = load(tmp_path)
    return compiled.plan["launches"], compiled.run(feeds)


@pytest.mark.parametrize(("channels", "back", "scaled", "spatial", "form"), [
    (24, False, False, (127, 65), "32 transposed"), (20, True, True, (127, 65), "32 direct"),
    (20, False, True, (41, 39), "8 transposed"), (20, True, True, (41, 39), "8 direct"),
    (300, False, False, (127, 65), "16 transposed"),
    (24, False, False, (20, 20), "8 transposed"), (24, True, False, (5, 7), "")])
def test_pixel_rows_layernorm_matches_onnxruntime(channels: int, back: bool, scaled: bool,
                                                  spatial: tuple[int, int], form: str,
                                                  tmp_path: Path) -> None:
    """16,510 pixels: 516 work-groups of 32 (`pixel_rows.TARGET_GROUPS`), the last
    ragged; 20 channels over 8 parts per pixel leave a ragged last register; 300
    channels take 16 pixels per work-group (19 registers a lane, not 38); 3,198 pixels
    take 8 per work-group (400 work-groups: fewer rows per group until there are
    `TARGET_GROUPS` or a group has 8), the last ragged; 800 pixels take 8 (100
    work-groups, at least `pixel_rows.MIN_GROUPS`); 70 pixels keep a work-group per
    row."""
    model = _channel_layernorm(channels, back, scaled, spatial)
    feeds = {"x": np.random.default_rng(5).standard_normal([2, channels, *spatial])
             .astype(np.float32) * 3 + 1}
    launches, got = _build_run(model, feeds, tmp_path)
    rows = [launch for launch in launches if "LayerNormalization" in launch["ops"]]
    assert len(rows) == 1 and rows[0]["variant"] == (f"pixel-rows {form}" if form else "")
    assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_contiguous_rows_keep_a_work_group_per_row(tmp_path: Path) -> None:
    """LayerNorm over a contiguous last axis is not the pixel-rows form's."""
    rng = np.random.default_rng(2)
    model = _model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)],
                   {"x": [70, 24]}, {"y": [70, 24]},
                   {"g": rng.uniform(0.5, 1.5, 24).astype(np.float32),
                    "b": rng.standard_normal(24).astype(np.float32)})
    feeds = {"x": rng.standard_normal([70, 24]).astype(np.float32)}
    launches, got = _build_run(model, feeds, tmp_path)
    assert [launch["variant"] for launch in launches] == [""]
    assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_access_strides_reads_the_probe() -> None:
    lines = ["const int i0 = ((o)/35);", "const float t1 = in0[840*i0 + 35*r + ((o)%35)];",
             "const float t2 = (t1 * 2.0f);", "out0[24*o + r] = t2;"]
    assert access_strides(lines) == [("load", 1, 35), ("store", 24, 1)]
    assert access_strides(["int g3 = (int)(t2);"]) is None


def _se_scale() -> onnx.ModelProto:
    """EfficientNet's squeeze-excitation scale x · σ(s), s per (n, c), and a transpose
    of s whose last dim (3) is too short to split."""
    return _model([helper.make_node("Sigmoid", ["s"], ["g"]),
                   helper.make_node("Mul", ["x", "g"], ["y"]),
                   helper.make_node("Transpose", ["s"], ["z"], perm=[0, 2, 3, 1])],
                  {"x": [2, 3, 5, 40], "s": [2, 3, 1, 1]},
                  {"y": [2, 3, 5, 40], "z": [2, 1, 1, 3]}, {})


@pytest.mark.parametrize("items", [1, 2, 4, 8])
def test_pointwise_items_match_onnxruntime(items: int, tmp_path: Path) -> None:
    """2 or 4 items per work-item along the last dim of 40 (runs of 20 or 10 lanes);
    8 would leave runs of 5, shorter than a sector, and takes 4; the transpose's last
    dim of 3 keeps one element per work-item."""
    from dataclasses import replace

    model = _se_scale()
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal([2, 3, 5, 40]).astype(np.float32),
             "s": rng.standard_normal([2, 3, 1, 1]).astype(np.float32)}
    launches, got = _build_run(model, feeds, tmp_path, replace(GPU, pointwise_items=items))
    variants = {launch["variant"] for launch in launches if launch["kind"] == "pointwise"}
    assert variants == ({f"items {min(items, 4)}", ""} if items > 1 else {""})
    assert_close(got, run_ort(model, feeds), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("stride", "pads", "out", "tile"), [
    (2, [1, 1, 1, 1], [7, 6], None), (2, [0, 1, 2, 0], [7, 5], Tile(64, 64, 16, 4, 4, True)),
    (3, [1, 1, 1, 1], [5, 4], Tile(32, 32, 16, 2, 2, False))])
def test_im2col_conv_matches_onnxruntime(stride: int, pads: list[int], out: list[int],
                                         tile: Tile | None, tmp_path: Path) -> None:
    """A strided 3×3 conv with a Relu prologue and an Add epilogue as im2col to scratch
    then the tiled GEMM (`im2col.py`): K = 5·9 = 45 (a ragged last K step),
    asymmetric padding, the forced option's tile and `KernelParams.im2col_tile`."""
    from dataclasses import replace

    rng = np.random.default_rng(4)
    model = _model([helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("Conv", ["r", "w", "bias"], ["c"], kernel_shape=[3, 3],
                                     strides=[stride, stride], pads=pads),
                    helper.make_node("Add", ["c", "c"], ["y"])],
                   {"x": [2, 5, 13, 11]}, {"y": [2, 6, *out]},
                   {"w": rng.standard_normal([6, 5, 3, 3]).astype(np.float32),
                    "bias": rng.standard_normal(6).astype(np.float32)})
    feeds = {"x": rng.standard_normal([2, 5, 13, 11]).astype(np.float32)}
    params = replace(GPU, anchor_variant="tiled", anchor_tile=Tile(32, 64, 16, 2, 4, True),
                     im2col_min_stride=2, im2col_tile=tile)
    launches, got = _build_run(model, feeds, tmp_path, params)
    conv = [launch for launch in launches if "Conv" in launch["ops"]]
    assert len(conv) == 2 and conv[0]["variant"].startswith("im2col "), conv
    assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups", [None, 3])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "ReduceL2"])
def test_unrolled_reductions_match_onnxruntime(op: str, groups: int | None,
                                               tmp_path: Path) -> None:
    """`KernelParams.reduce_unroll`: 4 partials per work-item, one work-group per row
    and `row-split`; 1000 elements a row (the last unrolled step ragged)."""
    from dataclasses import replace

    from egraph_compiler.backends.opencl.rows import RowSplit

    reduce = [helper.make_node(op, ["x"], ["y"])] if op == "GlobalAveragePool" else [
        helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)]
    model = _model(reduce, {"x": [2, 3, 40, 25]}, {"y": [2, 3, 1, 1]},
                   {} if op == "GlobalAveragePool" else {"axes": np.array([2, 3], np.int64)})
    feeds = {"x": np.random.default_rng(6).standard_normal([2, 3, 40, 25]).astype(np.float32)}
    params = replace(GPU, reduce_unroll=4, row_split=RowSplit(groups) if groups else None)
    _, got = _build_run(model, feeds, tmp_path, params)
    assert "accv3" in (tmp_path / "kernels.cl").read_text()
    assert_close(got, run_ort(model, feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("unroll", "launches"), [(1, 2), (4, 1)])
def test_unrolled_reduction_keeps_one_work_group_per_row(unroll: int, launches: int,
                                                         tmp_path: Path) -> None:
    """EfficientNet's first GlobalAveragePool at batch 8 (256 rows of 112²): with one
    accumulator the GPU cost model splits each row over two work-groups (two
    launches); counting 4 loads in flight per work-item fills the device with one."""
    from dataclasses import replace

    model = _model([helper.make_node("GlobalAveragePool", ["x"], ["y"])],
                   {"x": [8, 32, 112, 112]}, {"y": [8, 32, 1, 1]}, {})
    feeds = {"x": np.random.default_rng(8).standard_normal([8, 32, 112, 112]).astype(np.float32)}
    got_launches, got = _build_run(model, feeds, tmp_path, replace(GPU, reduce_unroll=unroll))
    assert len(got_launches) == launches
    assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(("shape", "vectors", "variant"), [
    ([2, 3, 5, 40], 2, "vectors 2"), ([2, 3, 5, 12], 4, "vectors 4"),
    ([2, 3, 5, 18], 2, "items 2")])
def test_vector_pointwise_matches_onnxruntime(shape: list[int], vectors: int, variant: str,
                                              tmp_path: Path) -> None:
    """`vector_forms.vector_pointwise`: the squeeze-excitation scale x · σ(s) plus a
    residual r as float4s, s constant over each run of 4 (one load, σ per lane): 600
    elements are 150 float4s, 75 work-items of 2; 180 are 45 float4s, 12 work-items of
    4 with the last ragged; a last dim of 18 is no whole float4s (540 elements are)
    and keeps the scalar items. The transpose of s (a strided read) keeps its scalar form."""
    from dataclasses import replace

    model = _model([helper.make_node("Sigmoid", ["s"], ["g"]),
                    helper.make_node("Mul", ["x", "g"], ["m"]),
                    helper.make_node("Add", ["m", "r"], ["y"]),
                    helper.make_node("Transpose", ["s"], ["z"], perm=[0, 2, 3, 1])],
                   {"x": shape, "r": shape, "s": [2, 3, 1, 1]},
                   {"y": shape, "z": [2, 1, 1, 3]}, {})
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "r": rng.standard_normal(shape).astype(np.float32),
             "s": rng.standard_normal([2, 3, 1, 1]).astype(np.float32)}
    launches, got = _build_run(model, feeds, tmp_path, replace(GPU, pointwise_vectors=vectors))
    variants = {launch["variant"] for launch in launches if launch["kind"] == "pointwise"}
    assert variants == {variant, ""}, variants
    assert_close(got, run_ort(model, feeds), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shape", "vector"), [([2, 3, 40, 26], True), ([2, 3, 7, 9], False)])
def test_vector_reduction_matches_onnxruntime(shape: list[int], vector: bool,
                                              tmp_path: Path) -> None:
    """`vector_forms.vector_accumulate`: ResNet's Add + Relu + GlobalAveragePool with
    float4 loads (rows of 1040 = 260 float4s: the last unrolled step ragged); rows of
    63 are no whole float4s and load scalars."""
    from dataclasses import replace

    model = _model([helper.make_node("Add", ["x", "b"], ["a"]),
                    helper.make_node("Relu", ["a"], ["r"]),
                    helper.make_node("GlobalAveragePool", ["r"], ["y"])],
                   {"x": shape, "b": shape}, {"y": [*shape[:2], 1, 1]}, {})
    rng = np.random.default_rng(10)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32),
             "b": rng.standard_normal(shape).astype(np.float32)}
    _, got = _build_run(model, feeds, tmp_path, replace(GPU, reduce_unroll=4, reduce_vectors=True))
    assert ("float4" in (tmp_path / "kernels.cl").read_text()) == vector
    assert_close(got, run_ort(model, feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stage", [True, False])
def test_pixel_rows_stage_nhwc_operands_matches_onnxruntime(stage: bool, tmp_path: Path) -> None:
    """ConvNeXt's downsampling LayerNorm: an NHWC branch added to an NCHW map, then
    LayerNorm over the channels back to NCHW. The NHWC operand is read once per
    element, 24 floats apart along the pixels: staged through local memory
    (`pixel_rows._stage`; 3,198 pixels in work-groups of 8, the last ragged) or not."""
    from dataclasses import replace

    rng = np.random.default_rng(11)
    channels, spatial = 24, [41, 39]
    model = _model([helper.make_node("Transpose", ["h"], ["ht"], perm=[0, 3, 1, 2]),
                    helper.make_node("Add", ["x", "ht"], ["a"]),
                    helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 3, 1]),
                    helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=-1,
                                     epsilon=1e-6),
                    helper.make_node("Transpose", ["n"], ["y"], perm=[0, 3, 1, 2])],
                   {"x": [2, channels, *spatial], "h": [2, *spatial, channels]},
                   {"y": [2, channels, *spatial]},
                   {"g": rng.uniform(0.5, 1.5, channels).astype(np.float32),
                    "b": rng.standard_normal(channels).astype(np.float32)})
    feeds = {"x": rng.standard_normal([2, channels, *spatial]).astype(np.float32),
             "h": rng.standard_normal([2, *spatial, channels]).astype(np.float32)}
    launches, got = _build_run(model, feeds, tmp_path, replace(GPU, strided_rows_stage=stage))
    assert [launch["variant"] for launch in launches] == ["pixel-rows 8 direct"]
    assert ("stage0" in (tmp_path / "kernels.cl").read_text()) == stage
    assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("rows", "length", "stored", "form"), [
    (2048, 32, True, "packed-rows 8x32"), (2051, 20, False, "packed-rows 8x32"),
    (2052, 160, True, "packed-rows 8x32"), (2048, 300, True, ""), (2040, 32, False, "")])
def test_packed_rows_layernorm_matches_onnxruntime(rows: int, length: int, stored: bool,
                                                   form: str, tmp_path: Path) -> None:
    """SegFormer's residual sum then LayerNorm over short contiguous rows: 8 rows of 32
    lanes per work-group (`pixel_rows.packed_rownorm`), the last group ragged (2,051,
    2,052 rows), a row ragged over its lanes (20 and 160 elements: 1 and 5 registers a
    lane); with ``stored`` the sum is also written, from the registers. 300 elements
    take 64 lanes, over `pixel_rows.PACKED_PARTS` (one work-group per row); 2,040
    rows are under `pixel_rows.PACKED_MIN_ROWS`."""
    from dataclasses import replace

    rng = np.random.default_rng(7)
    nodes = [helper.make_node("Add", ["x", "h"], ["a"]),
             helper.make_node("LayerNormalization", ["a", "g", "b"], ["n"], axis=-1),
             # the residual sum read again after the row (SegFormer's next residual)
             helper.make_node("MatMul", ["n", "w"], ["m"]),
             helper.make_node("Add", ["m" if stored else "n", "a"], ["y"])]
    model = _model(nodes, {"x": [rows, length], "h": [rows, length]}, {"y": [rows, length]},
                   {"g": rng.uniform(0.5, 1.5, length).astype(np.float32),
                    "b": rng.standard_normal(length).astype(np.float32),
                    "w": rng.standard_normal([length, length]).astype(np.float32) / length})
    feeds = {k: (rng.standard_normal([rows, length]) * 3 + 1).astype(np.float32)
             for k in ("x", "h")}
    launches, got = _build_run(model, feeds, tmp_path, replace(GPU, packed_rows=True),
                               gpu_fusion=True)
    rownorm = [launch for launch in launches if "LayerNormalization" in launch["ops"]]
    # the residual sum fused in front of the row, and stored by it where read again
    assert [(launch["ops"][0], launch["variant"]) for launch in rownorm] == [("Add", form)]
    source = (tmp_path / "kernels.cl").read_text().split(f"void {rownorm[0]['kernel']}(")[1]
    assert ("out1[" in source.split("\n}\n")[0]) == stored
    assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("pixels", "length", "stored"), [(1024, 32, True), (1027, 40, False)])
def test_packed_rows_transposed_store_matches_onnxruntime(pixels: int, length: int,
                                                          stored: bool, tmp_path: Path) -> None:
    """SegFormer's block end: the residual sum, LayerNorm over the channels of an NHWC
    map, then back to NCHW (a store along the rows: written through a local tile,
    `pixel_rows.packed_rownorm`'s ``transposed`` form), the sum also written from the
    registers where read again. 2 × 1,027 rows leave the last work-group ragged; 40
    channels over 32 lanes a ragged register."""
    from dataclasses import replace

    rng = np.random.default_rng(9)
    side = {1024: (32, 32), 1027: (79, 13)}[pixels]
    nodes = [helper.make_node("Add", ["x", "h"], ["a"]),
             helper.make_node("LayerNormalization", ["a", "g", "b"], ["n"], axis=-1),
             helper.make_node("Reshape", ["n", "hw"], ["m"]),
             helper.make_node("Transpose", ["m"], ["y"], perm=[0, 3, 1, 2]),
             helper.make_node("Mul", ["a", "two"], ["z"])]
    model = _model(nodes if stored else nodes[:4], {"x": [2, pixels, length],
                                                    "h": [2, pixels, length]},
                   {"y": [2, length, *side], **({"z": [2, pixels, length]} if stored else {})},
                   {"g": rng.uniform(0.5, 1.5, length).astype(np.float32),
                    "b": rng.standard_normal(length).astype(np.float32),
                    "hw": np.array([2, *side, length], np.int64),
                    "two": np.array(2.0, np.float32)})
    feeds = {k: (rng.standard_normal([2, pixels, length]) * 3 + 1).astype(np.float32)
             for k in ("x", "h")}
    launches, got = _build_run(model, feeds, tmp_path, replace(GPU, packed_rows=True),
                               gpu_fusion=True)
    rownorm = [launch for launch in launches if "LayerNormalization" in launch["ops"]]
    assert [launch["variant"] for launch in rownorm] == ["packed-rows 8x32 transposed"]
    assert_close(got, run_ort(model, feeds), rtol=1e-4, atol=1e-5)
