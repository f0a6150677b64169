"""The shared helpers in tests/modelzoo.py do what their docstrings promise."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from tests.modelzoo import (
    BLOCKS,
    assert_close,
    layernorm_block,
    light_model,
    random_inputs,
    randomize_weights,
    run_ort,
)


def test_randomize_weights_is_seeded_and_replaces_fills() -> None:
    model = light_model("densenet121")
    first, again, other = (randomize_weights(model, seed) for seed in (1, 1, 2))
    assert first.SerializeToString() == again.SerializeToString()
    assert first.SerializeToString() != other.SerializeToString()
    assert not any(n.op_type == "ConstantOfShape" for n in first.graph.node)
    weights = {t.name: numpy_helper.to_array(t) for t in first.graph.initializer}
    assert len({float(w.reshape(-1)[0]) for w in weights.values() if w.dtype == np.float32}) > 100
    for node in first.graph.node:
        if node.op_type == "BatchNormalization":
            assert np.all(weights[node.input[4]] > 0), "variances must stay positive"
    outputs = run_ort(first, random_inputs(first, seed=0))
    assert all(np.isfinite(v).all() for v in outputs.values())


def test_randomize_weights_keeps_scalar_hyperparameters() -> None:
    model = layernorm_block()
    randomized = randomize_weights(model, seed=4)
    scalars = {t.name: float(numpy_helper.to_array(t)) for t in randomized.graph.initializer if not t.dims}
    original = {t.name: float(numpy_helper.to_array(t)) for t in model.graph.initializer if not t.dims}
    assert scalars == original
    outputs = run_ort(randomized, random_inputs(randomized, seed=0, dims={"batch": 2, "seq": 3}))
    assert np.isfinite(outputs[randomized.graph.output[0].name]).all()


def test_random_inputs_bind_symbols_and_skip_initializers() -> None:
    model = light_model("squeezenet")  # old style: weights are listed as graph inputs too
    feeds = random_inputs(model, seed=0)
    assert list(feeds) == ["data_0"] and feeds["data_0"].shape == (1, 3, 224, 224)
    block = BLOCKS["mha"]()
    assert random_inputs(block, seed=0, dims={"batch": 2, "seq": 5})["x"].shape == (2, 5, 32)
    with pytest.raises(KeyError, match="seq"):
        random_inputs(block, seed=0, dims={"batch": 2})


def test_assert_close_locates_the_worst_element() -> None:
    expected = np.zeros((2, 3), np.float32)
    actual = expected.copy()
    actual[1, 2] = 0.5
    with pytest.raises(AssertionError, match=r"max abs error 0\.5.*index \(1, 2\)"):
        assert_close(actual, expected, rtol=1e-4, atol=1e-5)
    assert_close({"y": expected + 1e-7}, {"y": expected})
