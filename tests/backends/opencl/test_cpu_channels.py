"""The CPU pointwise conv with vectors along output channels (`cpu_channels.py`,
``conv-channels``) on PoCL against onnxruntime: a per-channel scale prologue, a residual
Add → HardSwish epilogue on channel vectors, a BatchNormalization epilogue (per-channel
parameters across the lanes: the per-element form), a ragged last pixel block and
channel block, stride 2, batch 2; its pricing (CPU class only, where measured faster)
and its round trip through the tuning database."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, cost
from egraph_compiler.backends.opencl.cpu_channels import VARIANT, ChannelConv
from egraph_compiler.backends.opencl.cpu_window import VARIANT as VEC_VARIANT
from tests.backends.opencl.test_cpu_conv import _run
from tests.backends.opencl.test_gemm import _model


def _pointwise(n: int, cin: int, cout: int, size: int, stride: int, epilogue: str
               ) -> onnx.ModelProto:
    """Mul(per-channel scale) → Conv 1×1 (+bias) → an epilogue: ``residual`` (Add of a
    second input → HardSwish) or ``batchnorm`` (BatchNormalization → Relu)."""
    rng = np.random.default_rng(cin * cout + stride)
    out = (size - 1) // stride + 1
    nodes = [helper.make_node("Mul", ["x", "s"], ["xs"]),
             helper.make_node("Conv", ["xs", "W", "B"], ["c"], kernel_shape=[1, 1],
                              strides=[stride] * 2)]
    constants = {"W": (rng.standard_normal((cout, cin, 1, 1)) * 0.3).astype(np.float32),
                 "B": rng.standard_normal(cout).astype(np.float32),
                 "s": rng.uniform(-1.5, 1.5, (1, cin, 1, 1)).astype(np.float32)}
    inputs = {"x": [n, cin, size, size]}
    if epilogue == "residual":
        nodes += [helper.make_node("Add", ["c", "res"], ["a"]),
                  helper.make_node("HardSwish", ["a"], ["y"])]
        inputs["res"] = [n, cout, out, out]
    else:
        nodes += [helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["bn"]),
                  helper.make_node("Relu", ["bn"], ["y"])]
        constants.update({"g": rng.uniform(0.5, 1.5, cout).astype(np.float32),
                          "b": rng.standard_normal(cout).astype(np.float32),
                          "mu": rng.standard_normal(cout).astype(np.float32),
                          "var": rng.uniform(0.5, 1.5, cout).astype(np.float32)})
    return _model(nodes, inputs, [n, cout, out, out], constants)


# (model, N·OH·OW, block, epilogue on vectors): 7×7 in blocks of 4 pixels leaves one
# pixel in the last; 40 output channels in blocks of 32 leave 8 padded lanes; a 9×9 map
# at stride 2 reads every other pixel of every other row
CASES = {
    "7x7-ragged-residual": (_pointwise(1, 24, 40, 7, 1, "residual"), 49, ChannelConv(32, 4),
                            True),
    "stride2-batch2-residual": (_pointwise(2, 16, 48, 9, 2, "residual"), 2 * 25,
                                ChannelConv(48, 4), True),
    "batchnorm-per-element": (_pointwise(1, 20, 32, 5, 1, "batchnorm"), 25,
                              ChannelConv(16, 7), False),
}


def _forced(key: str, block: ChannelConv) -> KernelParams:
    return dataclasses.replace(KernelParams.for_device("cpu"),
                               tuned=((key, cost.Option(VARIANT, block, 0.0)),))


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_channels_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    model, columns, block, on_vectors = CASES[case]
    w = next(i for i in model.graph.initializer if i.name == "W")
    launches = _run(model, _forced(f"Conv m{w.dims[0]} n{columns} k{w.dims[1]} b1", block),
                    tmp_path)
    assert [la["variant"] for la in launches] == [block.describe()], \
        "prologue and epilogue fuse into one conv-channels launch"
    source = (tmp_path / "kernels.cl").read_text()
    accumulators = set(re.findall(r"float16 (a\d+_\d+) = ", source))
    assert len(accumulators) == block.channels // 16 * block.pixels
    # the epilogue on channel vectors: the residual gathered lane by lane into one
    assert bool(re.search(r"float16 g\d+ = ", source)) == on_vectors


def _pick(device: str, cin: int, cout: int, width: int, stride: int) -> cost.Option:
    n = width * width
    return cost.choose(cost.options(cost.DEVICES[device], cout, n, cin, 1,
                                    max(1, n // 4) * -(-cout // 16), True,
                                    "n" if n == 1 else None, window_taps=1, width=width,
                                    stride=stride))


def test_conv_channels_is_priced_where_it_measured_faster() -> None:
    # PoCL's calling thread here: MobileNetV3-small's 7×7 convs 0.028-0.058 ms against
    # direct's 0.054-0.101, its 14×14 ones 0.021-0.058 against conv-vec's 0.022-0.075,
    # its squeeze-excitation convs (1×1 maps) 0.003 against direct's 0.006-0.007
    assert _pick("cpu", 96, 576, 7, 1).variant == VARIANT
    assert _pick("cpu", 576, 96, 7, 1).variant == VARIANT
    assert _pick("cpu", 240, 40, 14, 1).variant == VARIANT
    assert _pick("cpu", 576, 144, 1, 1).variant == VARIANT
    # conv-vec keeps 28×28 and larger maps at stride 1 (ResNet-50's 16 → 64 at 28×28:
    # 0.015 ms against 0.020 or more)
    assert _pick("cpu", 16, 64, 28, 1).variant == VEC_VARIANT
    assert _pick("cpu", 8, 32, 56, 1).variant == VEC_VARIANT
    assert _pick("gpu", 96, 576, 7, 1).variant != VARIANT
    assert ChannelConv(24, 4).valid() is False  # not whole vectors


def test_conv_channels_option_round_trips_through_the_tuning_database() -> None:
    from egraph_compiler.backends.opencl.kernel_search import option_from_json, option_to_json
    from egraph_compiler.ir.errors import DnnrError

    option = cost.Option(VARIANT, ChannelConv(48, 4), 0.0)
    assert option_from_json(option_to_json(option), "db") == option
    with pytest.raises(DnnrError, match="whole vectors"):
        option_from_json({"variant": VARIANT, "channels": 24, "pixels": 4}, "db")
