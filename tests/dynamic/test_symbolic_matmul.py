"""Issue 15: a symbolic build's `matmul_direct` kernel (`kernels.py`) indexes as cheaply as
a per-shape compile: a tile's last row and column are clamped by ``min`` against the size
argument (the compare PoCL kept for an argument cost GPT-2's QKV matmul 8.3 µs against
5.1 bound at 3x7), and the outermost index of the work-item id is the quotient itself (no
remainder by a size); a version where a divisor is a power of two at every shape divides
by a shift and a mask; the artefact stays exact at power-of-two and other lengths."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import pipeline
from egraph_compiler.backends.opencl import dimpoly
from egraph_compiler.runner import load_artefact

TOLERANCE = 1e-4  # of max |reference|


def _attention_model(path: Path) -> None:
    """``a = erf(x @ W)`` then the scores ``a @ aᵀ``: [batch, seq, 16] → [batch, seq, seq],
    so both a tile's rows (seq) and its columns (seq) are symbolic."""
    rng = np.random.default_rng(5)
    weight = numpy_helper.from_array(rng.standard_normal((16, 24)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"]),
        helper.make_node("Erf", ["p"], ["a"]),
        helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["a", "t"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "scores",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", "seq"])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_symbolic_matmul_indexes_like_a_bound_compile(tmp_path: Path) -> None:
    path = tmp_path / "scores.onnx"
    _attention_model(path)
    out = tmp_path / "out"
    result = pipeline.compile_model(path, dims={"batch": (1, 2), "seq": (1, 16)})
    pipeline.write_artefact(result, "opencl", out)
    plan = json.loads((out / "plan.json").read_text())
    source = (out / "kernels.cl").read_text()
    direct = {launch["kernel"] for version in plan["versions"] for launch in version["launches"]
              if launch["variant"] == "direct"}
    assert direct, plan["versions"]
    bodies = [source[source.index(f"void {k}("):].split("\n}\n", 1)[0] for k in direct]
    # no clamp by a compare against a size argument; where a tile can pass the end of a
    # symbolic dim, min() clamps it
    assert not [b for b in bodies if re.search(r"< s\d+ \?", b)]
    assert any(re.search(r"min\([mn]t \* T[MN] \+ t[mn], s\d+\)", b) for b in bodies)
    # the batch index is what is left of the id: no division by the batch size
    batched = [b for b in bodies if "const int b0" in b]
    assert batched and all("const int b0 = r;" in b for b in batched)
    # a version whose every shape makes a divisor a power of two (seq 2 and 3: one
    # 2-row tile in ceil(seq/2) = 1 and 2) shifts and masks by it, no other does
    shifted = 0
    for box in plan["boxes"]:
        for launch, sizes in zip(plan["versions"][box["version"]]["launches"], box["sizes"],
                                 strict=True):
            body = source[source.index(f"void {launch['kernel']}("):].split("\n}\n", 1)[0]
            powers = {int(a or b) for a, b in re.findall(
                r"DNNR_P2(?:DIV\(.*?, s(\d+)_s\)|REM\(.*?, s(\d+)\))", body)}
            shifted += bool(powers)
            (lo_b, hi_b), (lo_s, hi_s) = box["box"]["batch"], box["box"]["seq"]
            for k in powers:
                values = {dimpoly.evaluate(sizes[k], {"batch": b, "seq": q})
                          for b in range(lo_b, hi_b + 1) for q in range(lo_s, hi_s + 1)}
                assert all(v > 0 and v & (v - 1) == 0 for v in values), (box["condition"], k)
    assert shifted and result.report.target["dynamic"]["magic_division"]["shifts_and_masks"]
    # the erf epilogue's helper is inlined however many versions' kernels call it
    helpers = re.findall(r"^static inline .*\bdnnr_erf\(", source, re.MULTILINE)
    assert helpers and all("always_inline" in h for h in helpers)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    compiled = load_artefact(out)
    for batch, seq in [(1, 4), (2, 7), (2, 8), (1, 13), (2, 16), (2, 2), (1, 3)]:
        x = np.random.default_rng(batch * seq).standard_normal((batch, seq, 16)).astype(np.float32)
        (expected,) = session.run(["y"], {"x": x})
        got = compiled.run({"x": x})["y"]
        assert got.shape == expected.shape
        assert np.max(np.abs(got - expected)) <= TOLERANCE * np.max(np.abs(expected)), (batch, seq)
