"""Inputs are checked, not coerced; bad .npy files are clear errors (issue 16, items 5 and 6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from egraph_compiler import compile
from egraph_compiler.cli import main
from egraph_compiler.ir import DnnrError
from tests.faults.helpers import add_relu_model, expected

X = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)


@pytest.fixture(scope="module")
def artefact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("inputs") / "out"
    compile(add_relu_model(), target="opencl", out_dir=out)
    return out


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def test_dtype_mismatch_is_refused_or_cast_on_request(artefact: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    for dtype in (np.float64, np.int64):
        np.save(tmp_path / "x.npy", X.astype(dtype))
        code, err = _run(["run", str(artefact), "--input", f"x={tmp_path / 'x.npy'}",
                          "--output-dir", str(tmp_path / "o")], capsys)
        assert code == 1
        assert f"input 'x' is {np.dtype(dtype).name}[2, 3], the model takes x: float32[2, 3]" in err
    np.save(tmp_path / "x.npy", X.astype(np.float64))
    code, _ = _run(["run", str(artefact), "--input", f"x={tmp_path / 'x.npy'}", "--cast",
                    "--output-dir", str(tmp_path / "o")], capsys)
    assert code == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "y.npy"), expected(0.0, X))


def test_shape_and_name_mismatches_name_what_was_expected(artefact: Path) -> None:
    from egraph_compiler.runner import load_artefact

    model = load_artefact(artefact)
    with pytest.raises(DnnrError, match=r"input 'x' has shape \[3, 2\], the model takes x: float32\[2, 3\]"):
        model.run({"x": X.reshape(3, 2)})
    with pytest.raises(DnnrError, match=r"missing input\(s\) x \(the model takes x: float32\[2, 3\]\)"):
        model.run({})
    with pytest.raises(DnnrError, match=r"unknown input\(s\) z"):
        model.run({"x": X, "z": X})


@pytest.mark.parametrize(("content", "message"), [
    (b"", "the file is empty"),
    (b"not a numpy file at all", "expected a .npy file"),
    (b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4', ", "expected a .npy file"),
])
def test_odd_npy_files_are_clear_errors(artefact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        content: bytes, message: str) -> None:
    (tmp_path / "x.npy").write_bytes(content)
    code, err = _run(["run", str(artefact), "--input", f"x={tmp_path / 'x.npy'}",
                      "--output-dir", str(tmp_path / "o")], capsys)
    assert code == 1 and "cannot read input 'x'" in err and message in err, err


def test_npz_directory_and_fifo_inputs_are_clear_errors(artefact: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "x.npz", x=X)
    code, err = _run(["run", str(artefact), "--input", f"x={tmp_path / 'x.npz'}"], capsys)
    assert code == 1 and "is an .npz archive" in err
    import os

    os.mkfifo(tmp_path / "fifo.npy")
    code, err = _run(["run", str(artefact), "--input", f"x={tmp_path / 'fifo.npy'}"], capsys)
    assert code == 1 and "is not a regular file" in err


def _rank0_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "c"], ["y"], name="mul")], "g", [x, c], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("target", ["opencl", "onnx"])
def test_rank0_inputs_run(tmp_path: Path, target: str) -> None:
    model = compile(_rank0_model(), target=target, out_dir=tmp_path / "out")
    got = model.run({"x": X, "c": np.array(2.5, np.float32)})["y"]
    np.testing.assert_array_equal(got, X * np.float32(2.5))
