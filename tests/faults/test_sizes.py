"""Zero-sized tensors give empty outputs; tensors past 32-bit indexing are refused
by name (issue 16, items 4 and 6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from egraph_compiler import compile
from egraph_compiler.cli import main
from egraph_compiler.ir import DnnrError


def _relu_square(dim: int | str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["s"], name="relu"),
                               helper.make_node("Mul", ["s", "s"], ["y"], name="square")], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("target", ["opencl", "onnx"])
def test_zero_sized_tensors_give_empty_outputs(tmp_path: Path, target: str) -> None:
    model = compile(_relu_square(0), target=target, out_dir=tmp_path / "out")
    y = model.run({"x": np.zeros((0, 3), np.float32)})["y"]
    assert y.shape == (0, 3) and y.dtype == np.float32


def _save(tmp_path: Path, model: onnx.ModelProto) -> Path:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("batch", [3_000_000_000, 2**62])
def test_tensors_past_32_bit_indexing_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], batch: int) -> None:
    path = _save(tmp_path, _relu_square(batch))  # static dims: no --dim range stops them first
    code = main(["compile", "-q", str(path), "--target", "opencl", "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"value 'x' has {batch * 3} elements" in err and "32-bit" in err
    assert not (tmp_path / "o").exists()


def test_binding_a_symbol_past_32_bits_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _save(tmp_path, _relu_square("batch"))
    code = main(["compile", "-q", str(path), "--target", "opencl", "--bind", "batch=3000000000",
                 "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "batch=3000000000" in err
    assert not (tmp_path / "o").exists()


def test_non_empty_result_of_an_empty_tensor_is_refused_by_name(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Concat", ["x", "z"], ["c"], name="cat", axis=0),
                               helper.make_node("Relu", ["c"], ["y"], name="relu")], "g", [x, z], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(DnnrError, match=r"node 'c' \(Concat\) reads the zero-sized tensor 'x'"):
        compile(model, target="opencl", out_dir=tmp_path / "out")
