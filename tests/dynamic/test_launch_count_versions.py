"""Versions of one symbolic artefact may differ in how many kernels they launch: an RNN
over a symbolic sequence length is unrolled once per length (ir/decompose.py), so
seq=1 launches fewer kernels than seq=3. The report's per-version choices
(`symbolic._choices`) compared launch k across every version and indexed past the end
of the shorter ones (IndexError) before 1edcfba."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from egraph_compiler import pipeline
from egraph_compiler.runner import load_artefact

HIDDEN, SIZE, BATCH = 3, 2, 2


def _rnn_model(path: Path, rng: np.random.Generator) -> None:
    weights = [helper.make_tensor("W", TensorProto.FLOAT, [1, HIDDEN, SIZE],
                                  rng.normal(0, 0.5, HIDDEN * SIZE)),
               helper.make_tensor("R", TensorProto.FLOAT, [1, HIDDEN, HIDDEN],
                                  rng.normal(0, 0.5, HIDDEN * HIDDEN))]
    node = helper.make_node("RNN", ["X", "W", "R"], ["Y", "Y_h"], hidden_size=HIDDEN)
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["seq", BATCH, SIZE])]
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["seq", 1, BATCH, HIDDEN]),
               helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, BATCH, HIDDEN])]
    graph = helper.make_graph([node], "rnn", inputs, outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    path.write_bytes(model.SerializeToString())


def test_versions_with_different_launch_counts_compile_and_run(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    path = tmp_path / "rnn.onnx"
    _rnn_model(path, rng)
    result = pipeline.compile_model(path, dims={"seq": (1, 3)})
    out = tmp_path / "artefact"
    pipeline.write_artefact(result, "opencl", out, dim_steps={"seq": 2})  # seq 1 and 3
    plan = json.loads((out / "plan.json").read_text())
    launches = sorted(len(version["launches"]) for version in plan["versions"])
    assert len(launches) == 2 and launches[0] < launches[1], launches  # what this test is about
    compiled = load_artefact(out)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for seq in (1, 3):
        feeds = {"X": rng.normal(size=(seq, BATCH, SIZE)).astype(np.float32)}
        expected = session.run(["Y", "Y_h"], feeds)
        got = compiled.run(feeds)
        for name, want in zip(["Y", "Y_h"], expected, strict=True):
            np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5, err_msg=f"{name} seq={seq}")
