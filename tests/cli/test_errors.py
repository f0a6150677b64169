"""Bad input gets a clear message and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, captured.out, captured.err


def tiny_model(op: str = "Relu", domain: str = "") -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], name="the_node", domain=domain)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def test_malformed_dnnr_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.dnnr"
    bad.write_text("op Add(a, b) : one_to_one ili_variable shape_determined = a + b\n"
                   "rule broken: Add(?x, ?y => ?x\n")
    code, _, err = run_cli(["check", str(bad)], capsys)
    assert code == 1
    assert f"{bad}:2:" in err
    assert "^" in err
    assert "found 1 error" in err


def test_unknown_operator_in_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "unknown.dnnr"
    bad.write_text("op Transpose(x) [perm: ints = []] : shuffle ild_fixed shape_determined = builtin transpose\n"
                   "rule t: Transpos(?x, perm=?p) => ?x\n")
    code, _, err = run_cli(["check", str(bad)], capsys)
    assert code == 1
    assert f"{bad}:2:9" in err
    assert "Transpos" in err and "did you mean" in err and "Transpose" in err


def test_truncated_onnx_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cut.onnx"
    data = onnx.load(str(Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx")).SerializeToString()
    path.write_bytes(data[: len(data) // 3])
    code, _, err = run_cli(["compile", str(path), "-q"], capsys)
    assert code == 1
    assert "cut.onnx" in err or "ONNX" in err


def test_unsupported_operator_is_named_with_its_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "custom.onnx"
    path.write_bytes(tiny_model("FancyOp", domain="com.example").SerializeToString())
    code, _, err = run_cli(["compile", str(path), "-q"], capsys)
    assert code == 1
    assert "the_node" in err and "FancyOp" in err


def test_undeclared_default_domain_operator_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A real ONNX operator that no rule file declares: the optimiser must name it.
    rules = tmp_path / "rules.dnnr"
    rules.write_text("op Add(a, b) : one_to_one ili_variable shape_determined = a + b\n")
    path = tmp_path / "relu.onnx"
    path.write_bytes(tiny_model("Relu").SerializeToString())
    code, _, err = run_cli(["compile", str(path), "--rules", str(rules), "-q"], capsys)
    assert code == 1
    assert "the_node" in err and "Relu" in err


def test_exploding_rule_set_is_stopped_by_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Commutativity + associativity with no limits in the file: the default limits stop it."""
    rules = tmp_path / "explode.dnnr"
    rules.write_text(
        "op Add(a, b) : one_to_one ili_variable shape_determined = a + b\n"
        "rule add-comm: Add(?a, ?b) => Add(?b, ?a)\n"
        "rule add-assoc: Add(Add(?a, ?b), ?c) <=> Add(?a, Add(?b, ?c))\n"
    )
    inits = [numpy_helper.from_array(np.full((4,), i, np.float32), f"c{i}") for i in range(40)]
    nodes, prev = [], "x"
    for i in range(40):
        nodes.append(helper.make_node("Add", [prev, f"c{i}"], [f"t{i}"], name=f"add{i}"))
        prev = f"t{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [4])], inits)
    path = tmp_path / "chain.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    code, out, err = run_cli(["compile", str(path), "--rules", str(rules), "--max-seconds", "20",
                              "--strict-limits", "-o", str(tmp_path / "out")], capsys)
    assert code == 1
    assert "LIMIT HIT" in out
    assert "nodes" in out or "iterations" in out or "seconds" in out


def test_dnnr_help_is_instant_and_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "egraph_compiler.cli", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for command in ("compile", "check", "verify", "explain", "run", "bench"):
        assert command in result.stdout
