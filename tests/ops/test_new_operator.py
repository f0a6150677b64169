"""Issue 11 acceptance: an elementwise operator declared only in a rule file, with only
its scalar semantics, and a rule rewriting to it, goes through every stage — the onnx
target (written in dnnr's domain), OpenCL on PoCL, the Hexagon scalar fallback under
qemu — and `dnnr verify` proves the rule. No Python file names the operator.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from egraph_compiler import dsl, pipeline
from egraph_compiler.backends import hexagon, opencl
from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.cli import main
from egraph_compiler.ir.onnx_export import CUSTOM_DOMAIN

# The operator's name is built at run time, so no Python file holds it as a literal.
NAME = "Swi" + "shy"
RULE_FILE = """
# A test operator, x * sigmoid(x), declared by its scalar semantics alone.
op {name}(x) : one_to_one ili_variable shape_determined = x * (1 / (1 + exp(-x)))
ruleset {ruleset}
# x * Sigmoid(x) = {name}(x): the definition read backwards.
rule fuse-{lower}: Mul(?x, Sigmoid(?x)) => {name}(?x)
"""
# A ruleset each target's schedule runs (rules/schedule.dnnr, rules/targets/hexagon.dnnr).
RULESET = {"onnx": "algebra", "opencl": "algebra", "hexagon": "quant"}
SHAPE = [2, 3, 5]


def _rule_file(tmp: Path, target: str = "onnx") -> Path:
    path = tmp / f"{NAME.lower()}.dnnr"
    path.write_text(RULE_FILE.format(name=NAME, lower=NAME.lower(), ruleset=RULESET[target]))
    return path


def _model(quantised: bool) -> onnx.ModelProto:
    """y = x * Sigmoid(x); ``quantised``: between QuantizeLinear/DequantizeLinear pairs."""
    nodes, inits, x = [], [], "x"
    if quantised:
        inits += [helper.make_tensor("s", TensorProto.FLOAT, [], [0.03]),
                  helper.make_tensor("z", TensorProto.UINT8, [], [128])]
        nodes += [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
        x = "xd"
    nodes += [helper.make_node("Sigmoid", [x], ["sig"]), helper.make_node("Mul", [x, "sig"], ["m"])]
    out = "m"
    if quantised:
        nodes += [helper.make_node("QuantizeLinear", ["m", "s", "z"], ["mq"]),
                  helper.make_node("DequantizeLinear", ["mq", "s", "z"], ["y"])]
        out = "y"
    else:
        nodes[-1].output[0] = out = "y"
    graph = helper.make_graph(nodes, "swish", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, SHAPE)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _reference(x: np.ndarray) -> np.ndarray:
    return x * (1 / (1 + np.exp(-x.astype(np.float64))))


def _compile(tmp: Path, quantised: bool, target: str) -> pipeline.CompileResult:
    path = tmp / "model.onnx"
    onnx.save(_model(quantised), path)
    base = pipeline.target_rules(target) or pipeline.default_rules_dir()
    result = pipeline.compile_model(path, rule_paths=[base, _rule_file(tmp, target)], target=target)
    assert result.report.rules_fired.get(f"fuse-{NAME.lower()}"), result.report.rules_fired
    assert [n.op for n in result.graph.nodes if n.op not in ("QuantizeLinear", "DequantizeLinear")] == [NAME]
    return result


def test_onnx_target_writes_the_operator_in_dnnrs_domain(tmp_path: Path) -> None:
    result = _compile(tmp_path, quantised=False, target="onnx")
    pipeline.write_artefact(result, "onnx", tmp_path / "out")
    written = onnx.load(tmp_path / "out" / "model.onnx")
    assert [(n.domain, n.op_type) for n in written.graph.node] == [(CUSTOM_DOMAIN, NAME)]
    assert {o.domain: o.version for o in written.opset_import} == {"": 17, CUSTOM_DOMAIN: 1}
    assert written.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_opencl_runs_it_and_matches_numpy(tmp_path: Path) -> None:
    result = _compile(tmp_path, quantised=False, target="opencl")
    pipeline.write_artefact(result, "opencl", tmp_path / "out")
    x = np.random.default_rng(0).uniform(-6, 6, SHAPE).astype(np.float32)
    y = opencl.load(tmp_path / "out").run({"x": x})["y"]
    np.testing.assert_allclose(y, _reference(x), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not toolchain.have_toolchain(), reason="clang, ld.lld, llvm-mc-14 and qemu-hexagon are required")
def test_hexagon_scalar_fallback_runs_it_and_matches_numpy(tmp_path: Path) -> None:
    result = _compile(tmp_path, quantised=True, target="hexagon")
    pipeline.write_artefact(result, "hexagon", tmp_path / "out")
    assert NAME in (tmp_path / "out" / "report.txt").read_text()
    x = np.random.default_rng(1).uniform(-3.5, 3.5, SHAPE).astype(np.float32)
    y = hexagon.load(tmp_path / "out").run({"x": x})["y"]
    # the NumPy model of the same arithmetic: quantise, dequantise, the op, quantise
    scale, zero = np.float32(0.03), 128
    xd = (np.clip(np.rint(x / scale) + zero, 0, 255) - zero) * scale
    want = (np.clip(np.rint(_reference(xd) / scale) + zero, 0, 255) - zero) * scale
    assert np.abs(y - want).max() <= scale * 1.001  # at most one quantisation step (exp within ulps)
    assert np.mean(y == want.astype(np.float32)) > 0.9


def test_dnnr_verify_proves_the_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    library = dsl.rules_dir() / "operators.dnnr"
    assert main(["verify", str(library), str(_rule_file(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert f"proved   fuse-{NAME.lower()}" in out and "1 proved, 0 failed" in out


def test_it_folds_on_constants_from_its_declaration(tmp_path: Path) -> None:
    from egraph_compiler import ops
    from egraph_compiler.ir.errors import ModelError
    from egraph_compiler.ops.evaluate import evaluate_node

    x = np.linspace(-4, 4, 9, dtype=np.float32)
    with pytest.raises(ModelError):  # the shipped library does not know it
        evaluate_node(NAME, {}, [x])
    with ops.using(dsl.load_rules([dsl.rules_dir() / "operators.dnnr", _rule_file(tmp_path)])):
        folded = evaluate_node(NAME, {}, [x])[0]
    assert folded.dtype == np.float32
    np.testing.assert_allclose(folded, _reference(x), rtol=1e-6)
