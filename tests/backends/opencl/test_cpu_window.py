"""The CPU k×k conv (`cpu_window.py`, ``conv-vec``) on PoCL against onnxruntime: a
BatchNorm → Relu prologue and a Sigmoid epilogue fused, strides 1 and 2, a 7×7 stem,
dilation, ragged channel blocks and pixel vectors, padding on every edge, batch 2;
its packed weight layout; where it does not apply (weights computed at run time) the
direct kernel; its work-group sizes; and its pricing (CPU class only, where measured
faster, instead of the window kernel)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, cost
from egraph_compiler.backends.opencl.cpu_window import VARIANT, VecConv, _packed, vec_group
from tests.backends.opencl.test_cpu_conv import _run  # one build-run-compare helper
from tests.backends.opencl.test_gemm import _conv, _model


def _dilated(cin: int, cout: int, size: int, k: int, dilation: int, pad: int
             ) -> onnx.ModelProto:
    """Conv(dilated, +bias) → Relu on a square input."""
    rng = np.random.default_rng(k * dilation)
    out = size + 2 * pad - dilation * (k - 1)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[k, k],
                              dilations=[dilation] * 2, pads=[pad] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    constants = {"W": (rng.standard_normal((cout, cin, k, k)) * 0.3).astype(np.float32),
                 "B": rng.standard_normal(cout).astype(np.float32)}
    return _model(nodes, {"x": [1, cin, size, size]}, [1, cout, out, out], constants)


# (model, N·OH·OW, block): 13 channels in blocks of 8 leave a ragged block; 9 and 11
# columns leave part of a vector empty; the 7×7 stride-2 stem pads three columns on each
# side, so edge work-items take the checked path
CASES = {
    "3x3-ragged-batch2": (_conv(2, 5, (9, 11), 13, 3, 1, 1), 2 * 9 * 11, VecConv(8, 8)),
    "3x3-stride2": (_conv(1, 6, (17, 18), 16, 3, 2, 1), 9 * 9, VecConv(16, 4)),
    "7x7-stride2-stem": (_conv(1, 3, (23, 40), 8, 7, 2, 3), 12 * 20, VecConv(8, 16)),
    "5x5-dilated": (_dilated(4, 6, 12, 3, 2, 2), 12 * 12, VecConv(16, 8)),
}


def _forced(model: onnx.ModelProto, columns: int, block: VecConv) -> KernelParams:
    w = next(i for i in model.graph.initializer if i.name == "W")
    cout, cin, k0, k1 = w.dims
    return _forced_key(f"Conv m{cout} n{columns} k{cin * k0 * k1} b1", block)


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_vec_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    model, columns, block = CASES[case]
    launches = _run(model, _forced(model, columns, block), tmp_path)
    assert [la["variant"] for la in launches] == [block.describe()], \
        "prologue and epilogue fuse into one conv-vec launch"
    source = (tmp_path / "kernels.cl").read_text()
    assert f"float{block.pixels} a0" in source


def test_packed_weights_put_a_channel_block_last() -> None:
    weights = np.arange(5 * 2 * 3 * 3, dtype=np.float32).reshape(5, 2, 3, 3) + 1
    packed = _packed(weights, 4)
    assert packed.shape == (2, 2, 3, 3, 4)  # [Cout/4][Cin][K0][K1][4], 5 → 8 channels
    for co in range(8):
        block, lane = divmod(co, 4)
        expected = weights[co] if co < 5 else np.zeros((2, 3, 3), np.float32)
        np.testing.assert_array_equal(packed[block, :, :, :, lane], expected)


def test_conv_vec_leaves_run_time_weights_to_the_direct_kernel(tmp_path: Path) -> None:
    """Weights that are a model input cannot be packed at generation."""
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3],
                                     pads=[1, 1, 1, 1])],
                   {"x": [1, 3, 8, 8], "w": [8, 3, 3, 3]}, [1, 8, 8, 8], {})
    launches = _run(model, _forced_key("Conv m8 n64 k27 b1", VecConv(8, 8)), tmp_path)
    assert [la["variant"] for la in launches] == ["direct"]


def _forced_key(key: str, block: VecConv) -> KernelParams:
    return dataclasses.replace(KernelParams.for_device("cpu"),
                               tuned=((key, cost.Option(VARIANT, block, 0.0)),))


def test_small_grids_are_cut_into_several_work_groups() -> None:
    # 28 work-items (a 14×14 map, 32 channels in blocks of 16): 14 groups of 2, so both
    # of PoCL's threads get work; a large grid keeps the 64-item limit
    assert vec_group(28, 64) == 2
    assert vec_group(100_000, 64) == 64
    assert vec_group(1, 64) == 1


def _best(device: str, cin: int, cout: int, size: int, k: int, stride: int) -> cost.Option:
    out = (size + 2 * (k // 2) - k) // stride + 1
    return cost.choose(cost.options(cost.DEVICES[device], cout, out * out, cin * k * k, 1,
                                    out * out // 4, True, None, window_taps=k * k, width=out,
                                    stride=stride))


def test_conv_vec_is_priced_for_the_cpu_class_where_it_measured_faster() -> None:
    # measured faster on PoCL: the stems (7x7 s2, 3x3 s2), ResNet-50's 14x14 and 7x7 3x3s
    assert _best("cpu", 3, 8, 224, 7, 2).variant == VARIANT
    assert _best("cpu", 3, 16, 224, 3, 2).variant == VARIANT
    assert _best("cpu", 32, 32, 14, 3, 1).variant == VARIANT
    assert _best("cpu", 64, 64, 14, 3, 2).variant == VARIANT
    # with its epilogue on vectors (`cpu_epilogue`): ResNet-50's 56x56 3x3 (8 channels)
    # 0.062 ms against the window kernel's 0.086
    assert _best("cpu", 8, 8, 56, 3, 1).variant == VARIANT
    # measured no faster: 28x28 maps of 16 channels, an 11x11 stride-4 stem
    assert _best("cpu", 16, 16, 28, 3, 1).variant == "window"
    assert _best("cpu", 3, 64, 227, 11, 4).variant == "window"
    # never on the GPU class, never for a pointwise conv on a 7x7 map
    # (`test_cpu_epilogue.py` prices the larger ones)
    assert _best("gpu", 3, 8, 224, 7, 2).variant != VARIANT
    assert not [o for o in cost.options(cost.DEVICES["cpu"], 32, 49, 32, 1, 49, True, None,
                                        window_taps=1, width=7) if o.variant == VARIANT]


def test_conv_vec_option_round_trips_through_the_tuning_database() -> None:
    from egraph_compiler.backends.opencl.kernel_search import option_from_json, option_to_json

    option = cost.Option(VARIANT, VecConv(16, 8), 0.0)
    assert option_from_json(option_to_json(option), "db") == option
