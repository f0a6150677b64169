"""The CPU pointwise conv (`cpu_conv.py`, ``conv-lanes``) on PoCL against onnxruntime:
a per-channel scale → Relu prologue and a residual Add → Relu epilogue fused, a ragged last
channel block, ragged pixel runs (masked lanes), input channels in several
straight-line chunks, batch > 1; where it does not apply (stride 2) the direct kernel;
its pricing (CPU class only); and bound CPU compiles keeping sizes as literals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.cpu_conv import CHUNK_MADS, VARIANT, LanesConv
from egraph_compiler.backends.opencl.cpu_window import VARIANT as VEC_VARIANT
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph
from tests.backends.opencl.test_gemm import _model
from tests.modelzoo import assert_close, run_ort


def _pointwise(n: int, cin: int, cout: int, size: tuple[int, int], stride: int = 1
               ) -> onnx.ModelProto:
    """Mul(per-channel scale) → Relu → Conv 1×1 (+bias) → Add(residual) → Relu."""
    rng = np.random.default_rng(cin * cout)
    out = [(s - 1) // stride + 1 for s in size]
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["xn"]),
        helper.make_node("Relu", ["xn"], ["xr"]),
        helper.make_node("Conv", ["xr", "W", "B"], ["c"], kernel_shape=[1, 1],
                         strides=[stride] * 2),
        helper.make_node("Add", ["c", "res"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    constants = {
        "W": (rng.standard_normal((cout, cin, 1, 1)) * 0.3).astype(np.float32),
        "B": rng.standard_normal(cout).astype(np.float32),
        "s": rng.uniform(-1.5, 1.5, (1, cin, 1, 1)).astype(np.float32),
    }
    return _model(nodes, {"x": [n, cin, *size], "res": [n, cout, *out]}, [n, cout, *out],
                  constants)


def _run(model: onnx.ModelProto, params: KernelParams, tmp_path: Path) -> list[dict]:
    rng = np.random.default_rng(5)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    build(plan_memory(plan_fusion(static_graph(model, feeds))), tmp_path, params)
    compiled = load(tmp_path)
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-4)
    return compiled.plan["launches"]


# (batch, cin, cout, plane, block): 24 output channels in blocks of 16 leave a ragged
# block; a 7×7 plane in runs of 64 leaves masked lanes; 80 input channels × 16
# accumulators are three chunks of CHUNK_MADS
CASES = {
    "ragged-channels": (1, 8, 24, (8, 8), LanesConv(16, 64)),
    "masked-lanes": (1, 6, 8, (7, 7), LanesConv(8, 64)),
    "chunks": (1, 80, 16, (4, 8), LanesConv(16, 32)),
    "batch-2": (2, 5, 12, (4, 8), LanesConv(8, 64)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_lanes_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    n, cin, cout, size, block = CASES[case]
    model = _pointwise(n, cin, cout, size)
    key = f"Conv m{cout} n{n * size[0] * size[1]} k{cin} b1"
    params = dataclasses.replace(KernelParams.for_device("cpu"),
                                 tuned=((key, cost.Option(VARIANT, block, 0.0)),))
    launches = _run(model, params, tmp_path)
    assert [la["variant"] for la in launches] == [block.describe()], \
        "prologue and epilogue fuse into one conv-lanes launch"
    assert "get_local_id" in (tmp_path / "kernels.cl").read_text()
    if case == "chunks":
        assert cin * block.channels > CHUNK_MADS
        assert "barrier(" in (tmp_path / "kernels.cl").read_text()


def test_conv_lanes_leaves_a_strided_conv_to_the_direct_kernel(tmp_path: Path) -> None:
    model = _pointwise(1, 8, 16, (8, 8), stride=2)
    params = dataclasses.replace(KernelParams.for_device("cpu"), tuned=(
        ("Conv m16 n16 k8 b1", cost.Option(VARIANT, LanesConv(16, 64), 0.0)),))
    launches = _run(model, params, tmp_path)
    assert [la["variant"] for la in launches] == ["direct"]
    assert "get_local_id" not in (tmp_path / "kernels.cl").read_text(), \
        "a strided 1x1 conv keeps the direct kernel"


def _lanes(device: str, m: int, n: int, k: int) -> list[cost.Option]:
    return [o for o in cost.options(cost.DEVICES[device], m, n, k, 1, max(1, m * n // 64), True,
                                    None, window_taps=1, width=int(n ** 0.5))
            if o.variant == VARIANT]


def test_conv_lanes_is_priced_for_the_cpu_class_only() -> None:
    # ResNet-50's 1x1 convs on 56x56 planes: measured 2x faster than direct on PoCL, and
    # 2x slower than conv-vec with its epilogue on vectors (`test_cpu_epilogue.py`)
    options = cost.options(cost.DEVICES["cpu"], 32, 3136, 8, 1, 1568, True, None,
                           window_taps=1, width=56)
    lanes = min((o for o in options if o.variant == VARIANT), key=lambda o: o.estimate_us)
    direct = next(o for o in options if o.variant == "direct")
    assert lanes.estimate_us < direct.estimate_us
    assert cost.choose(options).variant == VEC_VARIANT
    assert not _lanes("gpu", 32, 3136, 8)
    # offered only where it measured faster: whole runs of pixels, one chunk
    assert not _lanes("cpu", 32, 784 + 4, 8)
    assert not _lanes("cpu", 32, 3136, CHUNK_MADS)
    # and never for a conv of several taps
    assert not [o for o in cost.options(cost.DEVICES["cpu"], 32, 3136, 72, 1, 1568, True, None,
                                        window_taps=9, width=56) if o.variant == VARIANT]


def test_bound_cpu_compiles_keep_sizes_as_literals() -> None:
    """PoCL folds literal sizes into the index arithmetic (BERT-tiny's kernels 1.12 →
    0.60 ms); the symbolic build turns size arguments back on (`symbolic.py`)."""
    assert not KernelParams.for_device("cpu").hoist_sizes
    assert not KernelParams.for_device("gpu").hoist_sizes


def test_conv_lanes_option_round_trips_through_the_tuning_database() -> None:
    from egraph_compiler.backends.opencl.kernel_search import option_from_json, option_to_json

    option = cost.Option(VARIANT, LanesConv(24, 32), 0.0)
    assert option_from_json(option_to_json(option), "db") == option
