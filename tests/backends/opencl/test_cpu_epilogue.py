"""The CPU conv kernels' epilogue on whole vectors (`cpu_epilogue.py`) and ``conv-vec``
over 1×1 convs (`cpu_window.flat_applies`), on PoCL against onnxruntime: a HardSwish
epilogue on a 3×3 stride-2 stem (ragged columns), a residual Add → Relu gathered lane by
lane on a flat plane that does not fill its last vector, a stride-2 1×1 conv in rows, a
comparison in the spine (no vector form: per-element epilogue); and the 1×1 pricing."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, cost
from egraph_compiler.backends.opencl.cpu_channels import VARIANT as CHANNELS
from egraph_compiler.backends.opencl.cpu_window import VARIANT, VecConv
from tests.backends.opencl.test_cpu_conv import _run
from tests.backends.opencl.test_gemm import _model


def _conv_epilogue(cin: int, cout: int, size: tuple[int, int], k: int, stride: int,
                   epilogue: str) -> tuple[onnx.ModelProto, int]:
    """Conv(+bias) → ``epilogue``: "HardSwish", "residual" (Add a second input → Relu)
    or "where" (Where(conv > 0, conv, second input))."""
    rng = np.random.default_rng(cin + cout)
    pad = k // 2
    out = [(s + 2 * pad - k) // stride + 1 for s in size]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[k, k],
                              strides=[stride] * 2, pads=[pad] * 4)]
    inputs = {"x": [1, cin, *size]}
    if epilogue == "HardSwish":
        nodes.append(helper.make_node("HardSwish", ["c"], ["y"]))
    elif epilogue == "residual":
        nodes += [helper.make_node("Add", ["c", "res"], ["a"]),
                  helper.make_node("Relu", ["a"], ["y"])]
        inputs["res"] = [1, cout, *out]
    else:
        nodes += [helper.make_node("Greater", ["c", "zero"], ["p"]),
                  helper.make_node("Where", ["p", "c", "res"], ["y"])]
        inputs["res"] = [1, cout, *out]
    constants = {"W": (rng.standard_normal((cout, cin, k, k)) * 0.4).astype(np.float32),
                 "B": rng.standard_normal(cout).astype(np.float32)}
    if epilogue == "where":
        constants["zero"] = np.zeros((), np.float32)
    return _model(nodes, inputs, [1, cout, *out], constants), out[0] * out[1]


# (cin, cout, map, k, stride, epilogue, block): 30 columns of 16-wide vectors and 25×7
# pixels (175, flat) leave lanes past the output's end; 20 channels a ragged block
CASES = {
    "hardswish-stem": (3, 16, (30, 60), 3, 2, "HardSwish", VecConv(16, 16)),
    "residual-flat-ragged": (12, 20, (25, 7), 1, 1, "residual", VecConv(16, 16)),
    "stride2-rows": (8, 32, (13, 20), 1, 2, "residual", VecConv(32, 16)),
    "where-per-element": (5, 8, (6, 20), 3, 1, "where", VecConv(8, 8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_vector_epilogue_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    cin, cout, size, k, stride, epilogue, block = CASES[case]
    model, columns = _conv_epilogue(cin, cout, size, k, stride, epilogue)
    params = dataclasses.replace(KernelParams.for_device("cpu"), tuned=(
        (f"Conv m{cout} n{columns} k{cin * k * k} b1", cost.Option(VARIANT, block, 0.0)),))
    launches = _run(model, params, tmp_path)
    assert [la["variant"] for la in launches] == [block.describe()]
    source = (tmp_path / "kernels.cl").read_text()
    vector_values = re.findall(rf"const float{block.pixels} t\d+ = ", source)
    if epilogue == "where":  # a comparison's result is no float vector
        assert not vector_values
    else:  # the bias add and each spine operator once per channel, on the vector
        assert len(vector_values) >= 2 * min(block.channels, cout)
    if epilogue == "residual":  # the other operand gathered lane by lane
        assert re.search(rf"float{block.pixels} g\d+ = ", source)


def test_pointwise_conv_vec_is_priced_where_it_measured_faster() -> None:
    device = cost.DEVICES["cpu"]

    def pick(cout: int, width: int, cin: int, stride: int) -> str:
        n = width * width
        return cost.choose(cost.options(device, cout, n, cin, 1, n // 4 * cout // 8, True,
                                        None, window_taps=1, width=width,
                                        stride=stride)).variant

    assert pick(64, 28, 16, 1) == VARIANT  # 28×28 and larger maps at stride 1
    # 7×7 maps and stride 2: the channel vectors (`cpu_channels`; ResNet-50's 64 → 256
    # at 7×7 0.015 ms against direct's 0.030, 64 → 128 at stride 2 0.034 against 0.044)
    assert pick(128, 7, 32, 1) == CHANNELS
    assert pick(128, 14, 64, 2) == CHANNELS
    assert pick(64, 28, 16, 1) not in {o.variant for o in cost.options(
        cost.DEVICES["gpu"], 64, 784, 16, 1, 784, True, None, window_taps=1, width=28)}
