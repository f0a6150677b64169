"""The conv and matmul anchor options (direct, tiled, gemv) on PoCL against onnxruntime,
on ragged shapes (no dimension a multiple of a tile), with a prologue and an epilogue
fused; and the cost model's choices."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.gemm import Gemv, Tile
from egraph_compiler.backends.opencl.sgemm import Sgemm
from egraph_compiler.backends.opencl.spelling import multiply_add
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.ir import DnnrError
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import build_one_anchor_block, static_graph
from tests.modelzoo import assert_close, run_ort

VARIANTS = {
    "direct": KernelParams(anchor_variant="direct"),
    "tiled-64x64": KernelParams(anchor_variant="tiled", anchor_tile=Tile(64, 64, 16, 4, 4)),
    "tiled-16x64": KernelParams(anchor_variant="tiled", anchor_tile=Tile(16, 64, 16, 1, 4)),
    "tiled-128x128": KernelParams(anchor_variant="tiled", anchor_tile=Tile(128, 128, 8, 8, 8)),
    "tiled-64x64-vec": KernelParams(anchor_variant="tiled",
                                    anchor_tile=Tile(64, 64, 16, 4, 4, True)),
    "tiled-32x64-vec": KernelParams(anchor_variant="tiled",
                                    anchor_tile=Tile(32, 64, 16, 2, 4, True)),
    "tiled-32x32-vec-splitk4": KernelParams(anchor_variant="tiled",
                                            anchor_tile=Tile(32, 32, 16, 4, 4, True, 4)),
    "tiled-16x32-splitk2": KernelParams(anchor_variant="tiled",
                                        anchor_tile=Tile(16, 32, 16, 2, 2, False, 2)),
    # split-K across work-groups: two launches through scratch; 3 groups leave the
    # last one ragged (or empty, on a short K)
    "tiled-32x32-vec-kgroups4": KernelParams(anchor_variant="tiled",
                                             anchor_tile=Tile(32, 32, 16, 2, 2, True, 1, 4)),
    "tiled-16x16-kgroups3": KernelParams(anchor_variant="tiled",
                                         anchor_tile=Tile(16, 16, 16, 1, 1, False, 1, 3)),
    "tiled-32x32-splitk2-kgroups2": KernelParams(
        anchor_variant="tiled", anchor_tile=Tile(32, 32, 16, 4, 4, True, 2, 2)),
    "gemv-8x32": KernelParams(anchor_variant="gemv", anchor_gemv=Gemv(8, 32)),
    "gemv-32x8": KernelParams(anchor_variant="gemv", anchor_gemv=Gemv(32, 8)),
}


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, list[int]], out: list[int],
           constants: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv(n: int, cin: int, size: tuple[int, ...], cout: int, k: int, stride: int, pad: int,
          group: int = 1) -> onnx.ModelProto:
    """BatchNorm → Relu → Conv(+bias) → Clip: a prologue of two operators and an epilogue."""
    rng = np.random.default_rng(cout)
    spatial = len(size)
    out = [(s + 2 * pad - k) // stride + 1 for s in size]
    nodes = [
        helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["xn"]),
        helper.make_node("Relu", ["xn"], ["xr"]),
        helper.make_node("Conv", ["xr", "W", "B"], ["c"], kernel_shape=[k] * spatial,
                         strides=[stride] * spatial, pads=[pad] * 2 * spatial, group=group),
        helper.make_node("Sigmoid", ["c"], ["y"]),
    ]
    constants = {
        "W": (rng.standard_normal((cout, cin // group, *[k] * spatial)) * 0.2).astype(np.float32),
        "B": rng.standard_normal(cout).astype(np.float32),
        "s": rng.uniform(0.5, 1.5, cin).astype(np.float32),
        "b": rng.standard_normal(cin).astype(np.float32),
        "mu": rng.standard_normal(cin).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, cin).astype(np.float32),
    }
    return _model(nodes, {"x": [n, cin, *size]}, [n, cout, *out], constants)


CONVS = {
    "3x3-pad-ragged": _conv(2, 5, (9, 7), 13, 3, 1, 1),
    "1x1": _conv(1, 16, (5, 6), 33, 1, 1, 0),
    "3x3-stride2-grouped": _conv(2, 8, (11, 11), 24, 3, 2, 1, group=2),
    "1-pixel-output": _conv(1, 70, (1, 1), 40, 1, 1, 0),
    "1d-k5": _conv(3, 4, (19,), 6, 5, 2, 2),
}


def _matmuls() -> dict[str, onnx.ModelProto]:
    rng = np.random.default_rng(7)
    normal = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {
        "gemm-transB-M1-relu-prologue": _model(
            [helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("Gemm", ["xr", "W", "C"], ["y"], transB=1, alpha=0.5, beta=2.0)],
            {"x": [1, 70]}, [1, 37], {"W": normal(37, 70), "C": normal(37)}),
        "gemm-transA-ragged": _model(
            [helper.make_node("Gemm", ["x", "W", "C"], ["y"], transA=1)],
            {"x": [70, 5]}, [5, 37], {"W": normal(70, 37), "C": normal(5, 37)}),
        "batched-broadcast-sigmoid": _model(
            [helper.make_node("MatMul", ["x", "z"], ["m"]), helper.make_node("Sigmoid", ["m"], ["y"])],
            {"x": [3, 2, 33, 19], "z": [2, 19, 45]}, [3, 2, 33, 45], {}),
        # a Linear on an NHWC activation: the batch dims fold into the GEMM's rows,
        # read through a Relu prologue, stored through a Transpose back to NCHW
        "rows-folded-transpose-epilogue": _model(
            [helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("MatMul", ["xr", "W"], ["m"]),
             helper.make_node("Transpose", ["m"], ["y"], perm=[0, 3, 1, 2])],
            {"x": [2, 3, 5, 19]}, [2, 45, 3, 5], {"W": normal(19, 45)}),
        "vector-matrix": _model(
            [helper.make_node("MatMul", ["x", "W"], ["y"])], {"x": [2, 1, 300]}, [2, 1, 29],
            {"W": normal(300, 29)}),
    }


def _check(model: onnx.ModelProto, params: KernelParams, tmp_path: Path) -> list[str]:
    compiled, feeds, launches = build_one_anchor_block(model, params, tmp_path)
    groups = params.anchor_tile.groups if params.anchor_variant == "tiled" and \
        params.anchor_tile else params.anchor_sgemm.groups if params.anchor_sgemm else 1
    assert len(launches) == (2 if groups > 1 else 1), "split-K across groups: a second launch"
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)
    return [launch["variant"] for launch in launches]


def _pairs(shapes: dict[str, onnx.ModelProto], one_row: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every shape × variant, gemv only where it applies (one output row or pixel)."""
    return [(s, v) for s in sorted(shapes) for v in sorted(VARIANTS)
            if not v.startswith("gemv") or s in one_row]


@pytest.mark.parametrize("shape, variant", _pairs(CONVS, ("1-pixel-output",)))
def test_conv_options_match_onnxruntime(shape: str, variant: str, tmp_path: Path) -> None:
    chosen = _check(CONVS[shape], VARIANTS[variant], tmp_path)
    assert chosen[0].startswith(variant.split("-")[0])


MATMULS = _matmuls()


@pytest.mark.parametrize("shape, variant", _pairs(
    MATMULS, ("gemm-transB-M1-relu-prologue", "vector-matrix")))
def test_matmul_options_match_onnxruntime(shape: str, variant: str, tmp_path: Path) -> None:
    chosen = _check(MATMULS[shape], VARIANTS[variant], tmp_path)
    assert chosen[0].startswith(variant.split("-")[0])


def test_tiled_prologue_runs_once_per_loaded_element(tmp_path: Path) -> None:
    """BatchNorm and Relu are evaluated where the tile is loaded into local memory; the
    multiply loop only reads local memory."""
    build(plan_memory(plan_fusion(static_graph(CONVS["3x3-pad-ragged"], {
        "x": np.zeros((2, 5, 9, 7), np.float32)}))), tmp_path, VARIANTS["tiled-64x64"])
    source = (tmp_path / "kernels.cl").read_text()
    multiply = source[source.index("for (int kk = 0; kk < BK; ++kk)"):]
    multiply = multiply[:multiply.index("barrier")]
    assert multiply_add("av[i]", "bv[j]", "acc[i][j]") in multiply
    relu = r"< 0\.0f\) \? 0\.0f : "  # spelling.FLOAT_OPS["Relu"], NaN-keeping
    assert not re.search(rf"fmax|rsqrt|sqrt|in\d\[|{relu}", multiply), multiply
    loads = source[:source.index("for (int kk = 0; kk < BK; ++kk)")]
    assert "Bs[b0_kk][b0_rr]" in loads and re.search(relu, loads)


SGEMMS = {
    "sgemm-64x64": KernelParams(anchor_variant="sgemm", anchor_sgemm=Sgemm(64, 64, 16, 4, 4)),
    "sgemm-128x64-8x4": KernelParams(anchor_variant="sgemm",
                                     anchor_sgemm=Sgemm(128, 64, 16, 8, 4)),
    # split-K across groups: 3 leaves the last K range ragged (or empty on a short K)
    "sgemm-32x64-kgroups3": KernelParams(anchor_variant="sgemm",
                                         anchor_sgemm=Sgemm(32, 64, 16, 4, 4, 3)),
}


def _vector_matmuls() -> dict[str, onnx.ModelProto]:
    """Shapes whose operands are float4-loadable views (K and the vector dims multiples
    of 4) but ragged against every tile: batched K^T through a Transpose with a bias and
    Gelu epilogue; a Linear on a [2, 5, 7, 40] activation with a residual Add."""
    rng = np.random.default_rng(11)
    normal = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    half, one, root2 = (numpy_helper.from_array(np.array([v], np.float32), n)
                        for n, v in (("half", 0.5), ("one", 1.0), ("root2", 2 ** 0.5)))
    gelu = [helper.make_node("Add", ["m", "bias"], ["z"]),
            helper.make_node("Div", ["z", "root2"], ["zd"]), helper.make_node("Erf", ["zd"], ["ze"]),
            helper.make_node("Add", ["ze", "one"], ["zo"]), helper.make_node("Mul", ["z", "zo"], ["zm"]),
            helper.make_node("Mul", ["zm", "half"], ["y"])]
    scores = _model([helper.make_node("Transpose", ["kt"], ["k"], perm=[0, 2, 1]),
                     helper.make_node("MatMul", ["q", "k"], ["m"]), *gelu],
                    {"q": [3, 70, 36], "kt": [3, 52, 36]}, [3, 70, 52], {"bias": normal(52)})
    scores.graph.initializer.extend([half, one, root2])
    return {
        "batched-kT-view-gelu": scores,
        "linear-view-residual": _model(
            [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "r"], ["y"])],
            {"x": [2, 5, 7, 40], "r": [2, 5, 7, 44]}, [2, 5, 7, 44], {"W": normal(40, 44)}),
        "conv-weights-view": _conv(2, 6, (9, 7), 20, 3, 1, 1),
    }


VECTOR_MATMULS = _vector_matmuls()


# each case covers several features (PoCL compiles each kernel: kept to a few seconds)
SGEMM_CASES = (
    ("batched-kT-view-gelu", "sgemm-64x64"),  # float4 views, K^T transposed in, Gelu
    ("batched-kT-view-gelu", "sgemm-128x64-8x4"),
    ("linear-view-residual", "sgemm-32x64-kgroups3"),  # rows folded, split-K, residual
    ("conv-weights-view", "sgemm-64x64"),  # implicit GEMM, relaid weights as float4
    ("gemm-transB-M1-relu-prologue", "sgemm-128x64-8x4"),  # prologue, alpha/beta/C, M = 1
    ("batched-broadcast-sigmoid", "sgemm-32x64-kgroups3"),  # ragged K = 19: scalar loads
    ("rows-folded-transpose-epilogue", "sgemm-128x64-8x4"),
    ("3x3-stride2-grouped", "sgemm-64x64"),  # conv window, groups, BatchNorm+Relu prologue
)


@pytest.mark.parametrize("shape, variant", SGEMM_CASES)
def test_sgemm_matches_onnxruntime(shape: str, variant: str, tmp_path: Path) -> None:
    """The ``sgemm`` option, ragged (scalar loads) and on float4 views, batched,
    transposed B, prologue, bias/Gelu/residual/Transpose epilogues, implicit-GEMM convs."""
    model = {**MATMULS, **VECTOR_MATMULS, **CONVS}[shape]
    chosen = _check(model, SGEMMS[variant], tmp_path)
    assert chosen[0].startswith("sgemm")


def test_sgemm_loads_float4_where_the_view_allows(tmp_path: Path) -> None:
    """Both operands of K^T-through-a-Transpose load as float4 (B transposed into local
    memory along k); a ragged K (19) keeps scalar loads."""
    params = SGEMMS["sgemm-64x64"]
    feeds = {"q": np.zeros((3, 70, 36), np.float32), "kt": np.zeros((3, 52, 36), np.float32)}
    build(plan_memory(plan_fusion(static_graph(VECTOR_MATMULS["batched-kT-view-gelu"], feeds))),
          tmp_path / "view", params)
    source = (tmp_path / "view" / "kernels.cl").read_text()
    assert len(re.findall(r"a0_v = .*\*\(__global const float4\*\)", source)) == 2
    assert len(re.findall(r"b0_v = .*\*\(__global const float4\*\)", source)) == 2
    model = MATMULS["batched-broadcast-sigmoid"]
    build(plan_memory(plan_fusion(static_graph(model, {
        "x": np.zeros((3, 2, 33, 19), np.float32), "z": np.zeros((2, 19, 45), np.float32)}))),
        tmp_path / "ragged", params)
    assert "__global const float4" not in (tmp_path / "ragged" / "kernels.cl").read_text()


def _prologue_scores(k_size: int) -> onnx.ModelProto:
    """GPT-2's attention scores with arithmetic prologues: Q scaled, NaNs zeroed
    (IsNaN/Where), a causal-style bool mask (a constant, loaded as uchar4) and a per-row
    scale (one value per run of 4 along K: a broadcast scalar load); K^T through a
    Transpose."""
    rng = np.random.default_rng(5)
    mask = rng.random((70, k_size)) > 0.3
    scale, zero, low = (numpy_helper.from_array(np.array(v, np.float32), n)
                        for n, v in (("scale", 0.125), ("zero", 0.0), ("low", -4.0)))
    model = _model([
        helper.make_node("Mul", ["q", "scale"], ["qs"]), helper.make_node("Mul", ["qs", "rs"], ["qr"]),
        helper.make_node("IsNaN", ["qr"], ["nan"]), helper.make_node("Where", ["nan", "zero", "qr"], ["qc"]),
        helper.make_node("Where", ["mask", "qc", "low"], ["qm"]),
        helper.make_node("Transpose", ["kt"], ["k"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["qm", "k"], ["y"])],
        {"q": [3, 70, k_size], "rs": [3, 70, 1], "kt": [3, 52, k_size]}, [3, 70, 52], {})
    model.graph.initializer.extend([scale, zero, low, numpy_helper.from_array(mask, "mask")])
    return model


def test_sgemm_loads_float4_through_arithmetic_prologues(tmp_path: Path) -> None:
    """A prologue of elementwise operators over float4 views (a bool mask, a per-row
    scale) loads 4 wide and runs per lane, matching onnxruntime; a ragged K (19) loads
    scalars through the same prologue."""
    params = SGEMMS["sgemm-64x64"]
    _check(_prologue_scores(36), params, tmp_path / "vector")
    source = (tmp_path / "vector" / "kernels.cl").read_text()
    assert len(re.findall(r"const float4 a0_l\d+ = \*\(__global const float4\*\)", source)) == 2
    assert re.search(r"const uchar4 a0_l\d+ = vload4\(0, ", source), "the bool mask loads 4 wide"
    assert re.search(r"const float a0_l\d+ = ", source), "the per-row scale loads once per run"
    assert re.search(r"b0_v = .*\*\(__global const float4\*\)", source)
    _check(_prologue_scores(19), params, tmp_path / "ragged")
    ragged = (tmp_path / "ragged" / "kernels.cl").read_text()
    assert "__global const float4" not in ragged and "vload4" not in ragged


def _epilogue_scores(n_size: int) -> onnx.ModelProto:
    """GPT-2's masked attention scores with their masks in the epilogue: K^T through a
    Transpose, then an additive mask broadcast over the heads ([2, 1, 20, N], a vector
    along N), a per-row scale ([2, 3, 20, 1], one value per run of 4 columns) and a
    constant bool mask through Where (4 bytes at once); M = 20 is ragged against the
    tile."""
    rng = np.random.default_rng(9)
    keep = rng.random((20, n_size)) > 0.3
    low = numpy_helper.from_array(np.array(-1e4, np.float32), "low")
    model = _model([
        helper.make_node("Transpose", ["kt"], ["k"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "k"], ["s"]), helper.make_node("Add", ["s", "mask"], ["sm"]),
        helper.make_node("Mul", ["sm", "rs"], ["sr"]),
        helper.make_node("Where", ["keep", "sr", "low"], ["y"])],
        {"q": [2, 3, 20, 16], "kt": [2, 3, n_size, 16], "mask": [2, 1, 20, n_size],
         "rs": [2, 3, 20, 1]}, [2, 3, 20, n_size], {})
    model.graph.initializer.extend([low, numpy_helper.from_array(keep, "keep")])
    return model


def test_sgemm_epilogue_runs_on_runs_of_four_columns(tmp_path: Path) -> None:
    """Where N is whole runs of 4, the epilogue's reads load 4 wide (the broadcast mask as
    a float4, the bool mask as a uchar4) or once per run (the per-row scale), it runs
    once per lane, and the output is stored as float4, matching onnxruntime; a ragged N
    (22) keeps the scalar store loop. Gemm's C (a per-element matrix) and alpha go the
    same way; a bias row alone keeps the scalar loop (`sgemm.vector_epilogue`: where it
    measured faster)."""
    params = SGEMMS["sgemm-64x64"]
    _check(_epilogue_scores(24), params, tmp_path / "vector")
    source = (tmp_path / "vector" / "kernels.cl").read_text()
    stores = source[source.index("const int m = mt"):]
    assert re.search(r"const float4 e\d+ = \*\(__global const float4\*\)\(in\d", stores)
    assert re.search(r"const uchar4 e\d+ = vload4\(0, ", stores), "the bool mask loads 4 wide"
    assert re.search(r"const float e\d+ = in\d\[", stores), "the per-row scale loads once per run"
    # 4 rows × one run of 4 columns per work-item
    assert len(re.findall(r"\*\(__global float4\*\)\(out0 \+", stores)) == 4
    _check(_epilogue_scores(22), params, tmp_path / "ragged")
    ragged = (tmp_path / "ragged" / "kernels.cl").read_text()
    assert "__global float4*" not in ragged and "vload4" not in ragged
    rng = np.random.default_rng(4)
    for c_shape, vector in (((9, 12), True), ((12,), False)):
        gemm = _model([helper.make_node("Gemm", ["x", "W", "C"], ["y"], alpha=0.5, beta=2.0)],
                      {"x": [9, 20]}, [9, 12],
                      {"W": rng.standard_normal((20, 12)).astype(np.float32),
                       "C": rng.standard_normal(c_shape).astype(np.float32)})
        _check(gemm, SGEMMS["sgemm-128x64-8x4"], tmp_path / f"gemm{len(c_shape)}")
        source = (tmp_path / f"gemm{len(c_shape)}" / "kernels.cl").read_text()
        assert ("*(__global float4*)(out0 +" in source) == vector, c_shape


def test_every_listed_sgemm_is_valid() -> None:
    assert all(tile.valid() for tile in cost.SGEMMS)


def test_gpu_cost_model_picks_sgemm_for_bert_base_and_not_on_the_cpu() -> None:
    """BERT-base's GEMMs at batch 8 × 512 take the register-blocked kernel on the GPU
    class; the CPU class (PoCL) is not offered it."""
    for m, n, k in ((4096, 2304, 768), (4096, 768, 3072), (4096, 3072, 768)):
        assert cost.choose(cost.options(cost.DEVICES["gpu"], m, n, k, 1, m * n // 16, True, None,
                                        sgemm=True)).variant == "sgemm"
        assert all(o.variant != "sgemm" for o in cost.options(
            cost.DEVICES["cpu"], m, n, k, 1, m * n // 16, True, None, sgemm=True))


@pytest.mark.parametrize("shape, block", [("bert_qkv", (8, 8)), ("convnext_s1_fc1", (8, 4))])
def test_gpu_cost_model_picks_the_measured_faster_sgemm_block(shape: str, block: tuple[int, int],
                                                               tmp_path: Path) -> None:
    """As measured on an H200 (`benchmarks/gpu_gemm.py`): BERT-base's QKV GEMM on 8 × 8
    blocks (0.338 ms; 8 × 4: 0.376), ConvNeXt-T's short-K fc1 with its Gelu epilogue on
    8 × 4 (0.073 ms; 8 × 8: 0.090) — the compiler's pick, epilogue counted from the block."""
    from benchmarks.gpu_gemm import SHAPES, model

    onnx_model = model(*SHAPES[shape])
    zeros = {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32)
             for i in onnx_model.graph.input}
    build(plan_memory(plan_fusion(static_graph(onnx_model, zeros))), tmp_path,
          KernelParams.for_device("gpu"))
    variant = json.loads((tmp_path / "plan.json").read_text())["launches"][0]["variant"]
    assert variant.startswith("sgemm") and variant.split("per-item ")[1].startswith(
        f"{block[0]}x{block[1]}"), variant


def _option(device: str, **shape: int) -> cost.Option:
    m, n, k, batch = shape["m"], shape["n"], shape["k"], shape.get("batch", 1)
    return cost.choose(cost.options(cost.DEVICES[device], m, n, k, batch,
                                    direct_items=shape.get("items", n * m // 64),
                                    tiled_ok=shape.get("tiled", 1) == 1,
                                    gemv_side="n" if n == 1 else None))


def test_a_forced_tile_that_cannot_map_its_loads_is_an_error(tmp_path: Path) -> None:
    params = KernelParams(anchor_variant="tiled", anchor_tile=Tile(48, 64, 16, 4, 4))
    with pytest.raises(DnnrError, match="does not map its loads"):
        _check(CONVS["1x1"], params, tmp_path)


def test_every_listed_tile_is_valid() -> None:
    """A tile the cost model may pick maps its loads exactly onto its work-group and
    stays within 256 work-items (NVIDIA's limit for these kernels)."""
    assert all(tile.valid() and tile.work_group <= 256 for tile in cost.TILES)


def test_cost_model_choices() -> None:
    """GPU: ResNet's 3×3 convs at batch 8 tiled with large tiles when there are enough
    of them, smaller tiles when there are few columns (7×7 layers), gemv for a
    squeeze-and-excitation 1×1 conv; depthwise stays direct. CPU (PoCL): direct."""
    big = _option("gpu", m=64, n=8 * 56 * 56, k=64 * 9)
    assert big.variant == "tiled" and big.params.bm * big.params.bn >= 64 * 64
    small = _option("gpu", m=512, n=8 * 7 * 7, k=512 * 9)
    assert small.variant == "tiled" and small.params.bm * small.params.bn < 64 * 64
    assert _option("gpu", m=240, n=1, k=10).variant == "gemv"
    assert _option("gpu", m=1, n=8 * 112 * 112, k=9, batch=32, tiled=0).variant == "direct"
    assert _option("cpu", m=64, n=8 * 56 * 56, k=64 * 9).variant == "direct"
    assert _option("cpu", m=512, n=8 * 7 * 7, k=512 * 9).variant == "direct"
    assert _option("cpu", m=1000, n=1, k=2048).variant == "direct"


def test_launch_times_come_from_profiling_events(tmp_path: Path) -> None:
    """Each launch's device time (profiling events) is positive, and all of them
    together fit in the wall time of running the same launches back to back."""
    model = CONVS["3x3-pad-ragged"]
    feeds = {"x": np.ones((2, 5, 9, 7), np.float32)}
    build(plan_memory(plan_fusion(static_graph(model, feeds), fuse=False)), tmp_path)
    compiled = load(tmp_path)
    compiled.run(feeds)
    seconds = compiled.time_launches(repeats=3)
    assert len(seconds) == len(compiled.plan["launches"]) > 1 and min(seconds) > 0
    start = time.perf_counter()
    compiled.run(feeds)
    wall = time.perf_counter() - start
    assert sum(seconds) < 3 * wall + 0.01


def test_compile_for_gpu_from_the_command_line(tmp_path: Path) -> None:
    """`dnnr compile --target opencl --opencl-kernels gpu` picks the GPU options by the
    cost model, and the artefact still computes the model (run here on PoCL)."""
    from egraph_compiler.cli import main

    model = CONVS["3x3-pad-ragged"]
    onnx.save(model, str(tmp_path / "conv.onnx"))
    assert main(["compile", str(tmp_path / "conv.onnx"), "--target", "opencl",
                 "--opencl-kernels", "gpu", "-o", str(tmp_path / "out"), "-q"]) == 0
    compiled = load(tmp_path / "out")
    assert [launch["variant"].split()[0] for launch in compiled.plan["launches"]] == ["tiled"]
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 5, 9, 7)).astype(np.float32)}
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_linear_batch_dims_fold_into_gemm_rows(tmp_path: Path) -> None:
    """A [2, 3, 5, 19] × [19, 45] MatMul is one GEMM of 30 rows (its shape class says
    so), not six GEMMs of 5 rows; a B with batch dims stays batched."""
    _check(MATMULS["rows-folded-transpose-epilogue"], KernelParams(), tmp_path / "folded")
    assert load(tmp_path / "folded").plan["launches"][0]["shape_key"].startswith(
        "MatMul m30 n45 k19 b1")
    _check(MATMULS["batched-broadcast-sigmoid"], KernelParams(), tmp_path / "batched")
    assert load(tmp_path / "batched").plan["launches"][0]["shape_key"].startswith(
        "MatMul m33 n45 k19 b6")


def test_gpu_benchmark_error_compares_finite_entries_and_counts_the_rest() -> None:
    """`benchmarks/gpu.py`'s error: one NaN no longer makes the whole comparison NaN; the
    finite entries give the relative error and the non-finite ones are counted apart
    (a NaN on both sides and equal infinities agree; a NaN against a number or opposite
    infinities do not)."""
    from benchmarks.gpu import compare

    reference = np.array([[1.0, -4.0, np.nan, np.inf], [2.0, np.inf, 0.5, -np.inf]], np.float32)
    out = np.array([[1.0, -4.0 + 2e-3, np.nan, np.inf], [np.nan, -np.inf, 0.5, -np.inf]],
                   np.float32)
    found = compare(out, reference)
    assert found["rel_err"] == pytest.approx(2e-3 / 4.0, rel=1e-3)
    assert (found["nonfinite_out"], found["nonfinite_ref"], found["nonfinite_mismatch"]) == (5, 4, 2)
    assert compare(reference, reference) == {"rel_err": 0.0, "nonfinite_out": 4,
                                             "nonfinite_ref": 4, "nonfinite_mismatch": 0}
    with pytest.raises(ValueError, match="shape"):
        compare(out[:1], reference)
