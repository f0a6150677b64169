"""The ``conv-gemm`` option (`conv_gemm.py`: implicit-GEMM k×k convs on sgemm's register
blocks) on PoCL against onnxruntime, and where the cost model offers it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.conv_gemm import VARIANT, ConvGemm
from egraph_compiler.backends.opencl.sgemm import Sgemm
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import build_one_anchor_block, static_graph
from tests.modelzoo import assert_close, run_ort


def _conv(n: int, cin: int, size: tuple[int, int], cout: int, stride: int,
          pads: tuple[int, int, int, int], epilogue: str, dilation: int = 1) -> onnx.ModelProto:
    """BatchNorm → Relu → Conv(3×3, bias) → epilogue: "relu", or "residual" (Add of a
    second input, then Relu, as ResNet's blocks end)."""
    rng = np.random.default_rng(cout * 7 + cin)
    k = 3
    out = [(size[d] + pads[d] + pads[d + 2] - dilation * (k - 1) - 1) // stride + 1 for d in range(2)]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["xn"]),
             helper.make_node("Relu", ["xn"], ["xr"]),
             helper.make_node("Conv", ["xr", "W", "B"], ["c"], kernel_shape=[k, k],
                              strides=[stride] * 2, pads=list(pads), dilations=[dilation] * 2)]
    inputs = {"x": [n, cin, *size]}
    if epilogue == "residual":
        inputs["r"] = [n, cout, *out]
        nodes += [helper.make_node("Add", ["c", "r"], ["cr"]), helper.make_node("Relu", ["cr"], ["y"])]
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    constants = {
        "W": (rng.standard_normal((cout, cin, k, k)) * 0.2).astype(np.float32),
        "B": rng.standard_normal(cout).astype(np.float32),
        "s": rng.uniform(0.5, 1.5, cin).astype(np.float32),
        "b": rng.standard_normal(cin).astype(np.float32),
        "mu": rng.standard_normal(cin).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, cin).astype(np.float32),
    }
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                     for name, shape in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, cout, *out])],
        [numpy_helper.from_array(v, name) for name, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# each case covers several features (PoCL compiles each kernel)
CASES = {
    # stride 2, K steps inside one tap (Cin 16), ragged M (20 of 32) and N, float4 weights
    "stride2-per-tap-ragged": (_conv(2, 16, (11, 9), 20, 2, (1, 1, 1, 1), "relu"),
                               ConvGemm(Sgemm(32, 32, 16, 4, 4))),
    # ragged channels (5, 13): every slot splits its own k, ragged K, scalar weights
    "stride1-ragged-channels": (_conv(2, 5, (9, 7), 13, 1, (1, 1, 1, 1), "residual"),
                                ConvGemm(Sgemm(32, 64, 16, 4, 4))),
    # asymmetric padding, dilation 2, 8×8 blocks over a ragged 64×64 tile
    "stride2-asym-pad-dilated": (_conv(3, 32, (13, 12), 40, 2, (0, 1, 2, 0), "relu", 2),
                                 ConvGemm(Sgemm(64, 64, 16, 8, 8))),
    # split-K across 3 work-groups (the last one short), residual epilogue in the sum launch;
    # 32 columns: partials stored as float4 runs, ragged M inside a run's row
    "stride2-kgroups-residual": (_conv(2, 32, (8, 8), 36, 2, (1, 1, 1, 1), "residual"),
                                 ConvGemm(Sgemm(32, 32, 16, 4, 4, 3))),
    # split-K over 25 columns (not whole runs of 4): partials element by element
    "stride2-kgroups-odd-columns": (_conv(1, 32, (9, 9), 24, 2, (1, 1, 1, 1), "relu"),
                                    ConvGemm(Sgemm(32, 32, 16, 4, 4, 2))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_gemm_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    model, shape = CASES[case]
    params = KernelParams(anchor_variant=VARIANT, anchor_conv_gemm=shape)
    compiled, feeds, launches = build_one_anchor_block(model, params, tmp_path)
    assert launches[0]["variant"] == shape.describe()
    assert len(launches) == (2 if shape.tile.groups > 1 else 1)
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)
    source = (tmp_path / "kernels.cl").read_text()
    # weights re-laid out [KH][KW][Cin][Cout]: float4 loads along Cout where it is whole runs of 4
    cout = shape_out = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    assert ("__global const float4" in source) == (shape_out % 4 == 0), cout
    # K steps inside one tap: no per-element division of k
    cin = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    assert ("kc / " in source) == (cin % shape.tile.bk != 0)
    # K groups over whole runs of 4 columns: float4 partial stores
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    runs = shape.tile.groups > 1 and dims[0] * dims[2] * dims[3] % 4 == 0
    assert ("*(__global float4*)&scr[" in source) == runs


def test_every_listed_conv_gemm_is_valid() -> None:
    assert all(shape.valid() for shape in cost.CONV_GEMMS)


def test_gpu_cost_model_offers_conv_gemm_for_resnet_stride2_and_never_the_cpu() -> None:
    """The GPU class prices ``conv-gemm`` for ResNet's stride-2 3×3 convs at batch 8
    and picks it; the CPU class is never offered it (its goldens stay as they were)."""
    def pick(device: str, m: int, n: int, k: int) -> cost.Option:
        return cost.choose(cost.options(cost.DEVICES[device], m, n, k, 1, n * m // 64, True, None,
                                        window_taps=9, width=28, stride=2, conv_gemm=True))

    for m, n, k in ((128, 8 * 28 * 28, 64 * 9), (256, 8 * 14 * 14, 128 * 9),
                    (512, 8 * 7 * 7, 256 * 9)):
        assert pick("gpu", m, n, k).variant == VARIANT
        assert all(o.variant != VARIANT for o in cost.options(
            cost.DEVICES["cpu"], m, n, k, 1, n * m // 64, True, None, window_taps=9, width=28,
            stride=2, conv_gemm=True))


def test_gpu_class_picks_conv_gemm_unless_switched_off(tmp_path: Path) -> None:
    """Compiled for the GPU class, a stride-2 3×3 conv the model prices cheapest as
    ``conv-gemm`` generates it; ``KernelParams.conv_gemm`` off (the benchmarks' baseline)
    leaves the earlier options."""
    model = _conv(8, 64, (56, 56), 128, 2, (1, 1, 1, 1), "relu")  # ResNet's first stride-2 3×3
    feeds = {"x": np.zeros((8, 64, 56, 56), np.float32)}
    plan = plan_memory(plan_fusion(static_graph(model, feeds)))
    gpu = KernelParams.for_device("gpu")
    variants = []
    for label, params in (("on", gpu), ("off", replace(gpu, conv_gemm=False))):
        build(plan, tmp_path / label, params)
        variants.append(load(tmp_path / label).plan["launches"][0]["variant"])
    assert variants[0].startswith(VARIANT) and not variants[1].startswith(VARIANT), variants


# ResNet-18/50's stride-2 3×3 convs at batch 8 (Cin, Cout, input side): every listed
# ``conv-gemm`` option within 15 % of the fastest, ms as measured on an H200 (median of
# 15; .gpu/conv14/logs/1/cv.log and cv2.log, `benchmarks/gpu_conv.py run`); sizes as
# `Sgemm`'s (bm, bn, bk, tm, tn, K groups)
MEASURED_H200 = {
    (64, 128, 56): {(64, 128, 16, 8, 8, 4): 0.036, (64, 64, 16, 8, 8, 4): 0.039},
    (128, 256, 28): {(128, 32, 16, 8, 4, 8): 0.041, (64, 128, 16, 8, 8, 4): 0.045,
                     (64, 64, 16, 8, 8, 8): 0.046, (128, 32, 16, 8, 4, 12): 0.047,
                     (128, 64, 32, 8, 4, 4): 0.047, (64, 128, 16, 8, 8, 8): 0.047},
    (256, 512, 14): {(64, 128, 16, 8, 8, 8): 0.047, (128, 32, 16, 8, 4, 12): 0.048,
                     (64, 64, 16, 8, 8, 12): 0.048, (64, 64, 16, 8, 8, 16): 0.049,
                     (128, 64, 16, 8, 4, 8): 0.050, (128, 32, 16, 8, 4, 8): 0.052},
    (128, 128, 56): {(64, 128, 16, 8, 8, 4): 0.058, (64, 128, 16, 8, 8, 8): 0.063,
                     (128, 64, 32, 8, 4, 4): 0.066},
    (256, 256, 28): {(128, 32, 16, 8, 4, 8): 0.068, (64, 64, 16, 8, 8, 16): 0.074,
                     (64, 64, 16, 8, 8, 8): 0.074, (64, 128, 16, 8, 8, 4): 0.075,
                     (128, 32, 16, 8, 4, 12): 0.076, (64, 128, 16, 8, 8, 8): 0.076},
    (512, 512, 14): {(128, 32, 16, 8, 4, 12): 0.074},
}


@pytest.mark.parametrize("shape", sorted(MEASURED_H200))
def test_gpu_pricing_picks_a_measured_fastest_conv_gemm(shape: tuple[int, int, int]) -> None:
    """The GPU class's pick for each stride-2 conv is within 5 % of the fastest
    measured option (both 28² convs: 128 × 32 with 8 K groups, which the model ranked
    below 64 × 128 until `cost.CONV_GEMM_OTHER_REGISTERS`)."""
    cin, cout, side = shape
    out = side // 2
    n = 8 * out * out
    pick = cost.choose(cost.options(cost.DEVICES["gpu"], cout, n, cin * 9, 1, n * cout // 64, True,
                                    None, window_taps=9, width=out, stride=2, conv_gemm=True,
                                    epilogue_ops=1))
    assert pick.variant == VARIANT
    tile = pick.params.tile
    measured = MEASURED_H200[shape]
    chosen = measured.get((tile.bm, tile.bn, tile.bk, tile.tm, tile.tn, tile.groups))
    assert chosen is not None and chosen <= 1.05 * min(measured.values()), (shape, pick.params.describe())
