"""The verifier's LayerNormalization (`verify/layer_norm.py`): its NumPy reference is
onnxruntime's operator, and a spelled-out LayerNorm that differs from it in ε, in the
axis or in which mean the variance subtracts (a reduction nested in a reduction, named
by what it reduces) is refuted, not proved."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.verify.builtin_ops import lookup_builtin


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_numpy_reference_is_onnxruntime_layer_normalization(axis: int) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    shape = x.shape[axis % 3:]
    scale, bias = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis, epsilon=1e-3)
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    builtin = lookup_builtin("layer_norm")
    assert builtin is not None
    got = builtin.numpy([x, scale, bias], {"axis": axis, "epsilon": 1e-3})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


_SPELLED = """Add(Mul(Div(Sub(?x, ReduceMean(?x, axes=[-1], keepdims=1)),
        Sqrt(Add(ReduceMean(Mul(Sub(?x, ReduceMean(?x, axes=[MEAN], keepdims=1)),
                                Sub(?x, ReduceMean(?x, axes=[MEAN], keepdims=1))),
                            axes=[-1], keepdims=1), 0.001))), ?g), ?b)"""
_GUARD = "when rank(?g) == 1 and rank(?b) == 1 and dim(?g, 0) == dim(?x, -1) and dim(?b, 0) == dim(?x, -1)"


@pytest.mark.parametrize(("name", "mean_axis", "rhs_attrs"), [
    ("ln-true", "-1", "axis=-1, epsilon=0.001"),
    ("ln-wrong-epsilon", "-1", "axis=-1, epsilon=0.01"),
    ("ln-wrong-inner-mean", "0", "axis=-1, epsilon=0.001"),
])
def test_spelled_out_layer_norm_is_proved_only_when_true(check, name: str, mean_axis: str,
                                                         rhs_attrs: str) -> None:
    text = (f"rule {name}: {_SPELLED.replace('MEAN', mean_axis)}\n"
            f"    => LayerNormalization(?x, ?g, ?b, {rhs_attrs})\n    {_GUARD}")
    (verdict,) = check(text, timeout_s=60, suggest_guards=False)
    if name == "ln-true":
        assert verdict.status == "proved", verdict
    else:
        assert verdict.status == "failed" and verdict.stage == "value", verdict
