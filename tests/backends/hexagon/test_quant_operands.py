"""QConvInt keeps every scale and zero point (rules/quant.dnnr): the backend lowers the
bias exactly where it follows quantize_static's conventions and refuses the others."""

from __future__ import annotations

import numpy as np
import pytest

from egraph_compiler.backends.hexagon.lower import _bias
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node

ACC_SCALE = np.asarray([0.02 * 0.005])  # x_scale · w_scale
NODE = Node("QConvInt", (), ("y",), name="conv")


def _graph(bias: np.ndarray) -> Graph:
    return Graph("g", (), (), (), constants={"b": bias})


def test_bias_with_the_accumulator_scale_is_taken_exactly_minus_its_zero_point() -> None:
    bias = np.asarray([5, -7, 100], np.int32)
    got = _bias(_graph(bias), "b", ACC_SCALE, 3, NODE,
                (np.asarray(ACC_SCALE[0], np.float32), np.asarray(3, np.int32)))
    assert got.tolist() == [2, -10, 97]


@pytest.mark.parametrize(("dtype", "scale"), [(np.int32, 2 * ACC_SCALE[0]),
                                               (np.float32, ACC_SCALE[0])])
def test_bias_of_another_scale_or_type_is_refused(dtype: type, scale: float) -> None:
    bias = np.asarray([5, -7, 100], dtype)
    with pytest.raises(ModelError, match="bias must be int32 with scale x_scale·w_scale"):
        _bias(_graph(bias), "b", ACC_SCALE, 3, NODE, (np.asarray(scale), None))
