"""Issue 15: a symbolic build's register-window conv kernels (`depthwise.py`,
`window.py`, `cpu_window.py`) drop the window's high-side bounds check where no block's
window reaches the input's end and the store check along a dim the blocks fill — a
comparison of sizes recorded as a version condition, as LLVM drops them in a bound
compile — and the artefact stays exact at every shape of the ranges."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import pipeline
from egraph_compiler.runner import load_artefact

TOLERANCE = 1e-4  # of max |reference|


def _model(path: Path) -> None:
    """Depthwise 3×3 (pad 1) + Relu, then a dense 3×3 stride-2 conv (pad 1): NCHW with
    symbolic height and width."""
    rng = np.random.default_rng(7)
    dw = numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "dw")
    dense = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "dense")
    nodes = [
        helper.make_node("Conv", ["x", "dw"], ["a"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "dense"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes, "windows",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, "out_h", "out_w"])], [dw, dense])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_window_checks_are_version_conditions(tmp_path: Path) -> None:
    path = tmp_path / "windows.onnx"
    _model(path)
    out = tmp_path / "out"
    result = pipeline.compile_model(path, dims={"height": (12, 15), "width": (16, 19)})
    pipeline.write_artefact(result, "opencl", out, dim_steps={"height": 3, "width": 3})
    plan = json.loads((out / "plan.json").read_text())
    source = (out / "kernels.cl").read_text()
    # some version reads an interior window row without the high-side check: a
    # depthwise window row h1 (offset 1) never reaches the end of an even height with
    # blocks of 2 rows, which the per-shape compile's literal sizes let LLVM prove
    depthwise = {launch["kernel"] for version in plan["versions"] for launch in
                 version["launches"] if launch["variant"].startswith("depthwise")}
    assert depthwise, plan["versions"]
    bodies = {k: source[source.index(f"void {k}("):].split("\n}\n", 1)[0] for k in depthwise}
    assert any(not re.search(r"\bh1 < s\d+", body) for body in bodies.values())
    # and a row past the end stays checked: at run time, or (output rows of one block,
    # its position the same in every work-item) decided at compile time as never inside
    assert any(re.search(r"\bh\d+ < s\d+|[(&] ?0 ?[)&]", body) for body in bodies.values())
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    compiled = load_artefact(out)
    for height, width in [(12, 16), (15, 19), (12, 19), (15, 16)]:
        x = np.random.default_rng(height * width).standard_normal(
            (1, 8, height, width)).astype(np.float32)
        (expected,) = session.run(["y"], {"x": x})
        got = compiled.run({"x": x})["y"]
        assert got.shape == expected.shape
        assert np.max(np.abs(got - expected)) <= TOLERANCE * np.max(np.abs(expected)), \
            (height, width)


def _stem_model(path: Path) -> None:
    """A 7×7 stride-2 stem (3 → 8 channels, pad 3) + Relu, then a 3×3 stride-2 conv (pad
    1): NCHW with symbolic height and width, the `conv-vec` kernels' shapes (ResNet-50's
    stem and its last stage's small maps)."""
    rng = np.random.default_rng(11)
    stem = numpy_helper.from_array(rng.standard_normal((8, 3, 7, 7)).astype(np.float32), "stem")
    dense = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "dense")
    nodes = [
        helper.make_node("Conv", ["x", "stem"], ["a"], pads=[3, 3, 3, 3], strides=[2, 2]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "dense"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes, "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, "out_h", "out_w"])],
        [stem, dense])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_conv_vec_one_column_block_is_a_version(tmp_path: Path) -> None:
    """Where a row of outputs is one `conv-vec` column block, the symbolic kernel knows
    its window's columns as a per-shape compile does (no block index, each column's
    check decided at compile time: a version condition); a row of several blocks checks
    its edge columns with one unsigned compare each. Exact at every shape."""
    path = tmp_path / "stem.onnx"
    _stem_model(path)
    out = tmp_path / "out"
    result = pipeline.compile_model(path, dims={"height": (9, 45), "width": (9, 45)})
    pipeline.write_artefact(result, "opencl", out, dim_steps={"height": 18, "width": 18})
    plan = json.loads((out / "plan.json").read_text())
    source = (out / "kernels.cl").read_text()
    vec = {launch["kernel"] for version in plan["versions"] for launch in
           version["launches"] if launch["variant"].startswith("conv-vec")}
    assert vec, plan["versions"]
    bodies = {k: source[source.index(f"void {k}("):].split("\n}\n", 1)[0] for k in vec}
    one_block = [b for b in bodies.values() if "const int vt = 0;" in b]
    assert one_block  # the 3×3 conv's 3- and 6-wide maps, the stem's 5-wide one
    # no column check left in a one-block kernel: each was decided by a recorded comparison
    assert all(not re.search(r"\bw\d+ < s\d+|\(uint\)w\d+", b) for b in one_block)
    several = [b for b in bodies.values() if "const int vt = 0;" not in b]
    # against the width argument, or its literal where the version serves one width
    # (`symbolic._specialised_kernels`)
    assert several and all(re.search(r"\(uint\)w\d+ < \(uint\)(s\d+|\(\d+\))", b)
                           for b in several)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    compiled = load_artefact(out)
    for height, width in [(9, 9), (45, 27), (27, 45), (9, 45)]:
        x = np.random.default_rng(height * width).standard_normal(
            (1, 3, height, width)).astype(np.float32)
        (expected,) = session.run(["y"], {"x": x})
        got = compiled.run({"x": x})["y"]
        assert got.shape == expected.shape
        assert np.max(np.abs(got - expected)) <= TOLERANCE * np.max(np.abs(expected)), \
            (height, width)
