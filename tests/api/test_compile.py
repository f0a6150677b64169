"""The Python API: ``compile(model, target=..., out_dir=..., bind=...)`` then ``.run(feeds)``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from egraph_compiler import compile
from egraph_compiler.backends.opencl import CompiledModel
from egraph_compiler.ir import DnnrError
from tests.backends.hexagon.conftest import needs_toolchain
from tests.modelzoo import BLOCKS, assert_close, residual_block, run_ort

DIMS = {"batch": 2, "seq": 5}


def test_compile_opencl_runs_like_onnxruntime(tmp_path: Path) -> None:
    model = BLOCKS["transformer_encoder"]()
    path = tmp_path / "encoder.onnx"
    onnx.save(model, path)
    compiled = compile(path, target="opencl", out_dir=tmp_path / "out", bind=DIMS)
    assert isinstance(compiled.model, CompiledModel)
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["launches"]
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 5, 32)).astype(np.float32)}
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-3, atol=1e-4)


def test_compile_onnx_target_runs_the_optimised_model(tmp_path: Path) -> None:
    model = BLOCKS["layernorm"]()
    compiled = compile(model, target="onnx", out_dir=tmp_path)  # a ModelProto works too
    assert (tmp_path / "model.onnx").exists() and (tmp_path / "report.json").exists()
    feeds = {"x": np.random.default_rng(2).standard_normal((3, 4, 32)).astype(np.float32)}
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)


@needs_toolchain
def test_compile_hexagon_runs_a_quantised_block(tmp_path: Path) -> None:
    from tests.backends.hexagon.test_models import _quantise, _static

    model = _static(residual_block(channels=4, seed=1), {"batch": 1, "height": 5, "width": 5})
    qdq = onnx.load(_quantise(model, tmp_path, seed=2))
    compiled = compile(qdq, target="hexagon", out_dir=tmp_path / "hexagon")
    x = np.random.default_rng(3).standard_normal((1, 4, 5, 5)).astype(np.float32)
    name = next(i.name for i in qdq.graph.input)
    expected = run_ort(qdq, {name: x})
    got = compiled.run({name: x})
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in qdq.graph.initializer}
    last = next(n for n in qdq.graph.node if n.output[0] == qdq.graph.output[0].name)
    scale = float(inits[last.input[1]])
    for out, value in expected.items():  # integer kernels vs ORT's float QDQ: within one LSB
        assert np.abs(got[out] - value).max() <= scale * 1.001


def test_bad_arguments_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DnnrError, match="unknown target 'cuda'"):
        compile(BLOCKS["gelu"](), target="cuda", out_dir=tmp_path)
    with pytest.raises(DnnrError, match="takes a path"):
        compile(42, out_dir=tmp_path)  # type: ignore[arg-type]
    # seq left unbound: one artefact for seq in 1..4 (issue 15), which names a shape outside
    compiled = compile(BLOCKS["gelu"](), target="opencl", out_dir=tmp_path, bind={"batch": 1},
                       dims={"seq": (1, 4)})
    x = np.random.default_rng(2).standard_normal((1, 3, 32)).astype(np.float32)
    (got,) = compiled.run({"x": x}).values()
    (expected,) = run_ort(BLOCKS["gelu"](), {"x": x}).values()
    assert_close(got, expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(DnnrError, match=r"input 'x' dim 1 \(seq\) is 5, outside the compiled "
                                        r"range seq=1\.\.4"):
        compiled.run({"x": np.zeros((1, 5, 32), np.float32)})


def test_import_stays_cheap() -> None:
    code = ("import sys, egraph_compiler; "
            "print(sorted(m for m in ('onnx', 'numpy', 'egraph_compiler.pipeline', "
            "'egraph_compiler.api') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"
