"""Issue 10 item 3: the compile report says what happened to the files read and written."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import onnx
import pytest

from egraph_compiler.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def encoder_artefact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("encoder")
    model = folder / "encoder.onnx"
    subprocess.run([sys.executable, str(ROOT / "examples/make_example.py"), "--out", str(model)],
                   check=True, capture_output=True)
    assert main(["compile", str(model), "-o", str(folder / "out"), "-q"]) == 0
    return model, folder / "out"


def test_op_counts_are_those_of_the_onnx_read_and_written(encoder_artefact: tuple[Path, Path]) -> None:
    model, out = encoder_artefact
    report = json.loads((out / "report.json").read_text())
    read = Counter(n.op_type for n in onnx.load(model).graph.node)
    written = Counter(n.op_type for n in onnx.load(out / "model.onnx").graph.node)
    assert read["Identity"] == 1  # the example's output Identity, dropped by the importer
    assert report["nodes_before"] == dict(read)
    assert report["nodes_after"] == dict(written)


def test_rules_fired_counts_applications_matches_apart(abs_model: Path, user_rules: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """One Abs(Abs(x)) in the model: one application, however often egglog re-matches it."""
    assert main(["compile", str(abs_model), "--add-rules", str(user_rules), "-o", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["rules_fired"]["my-abs-abs"] == 1
    assert report["rule_matches"]["my-abs-abs"] >= 1
    printed = capsys.readouterr().out
    assert "applied" in printed and "matches" in printed


def test_rules_that_matched_but_whose_guard_failed_are_shown(abs_model: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "guarded.dnnr"
    rules.write_text('use "operators.dnnr"\n\n# |x| = x for x >= 0 (never true of rank-2 x here).\n'
                     'rule abs-rank7 [exact]: Abs(?x) => ?x when rank(?x) == 7\n')
    assert main(["compile", str(abs_model), "--add-rules", str(rules), "-o", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "abs-rank7" in report["guard_failed"] and "abs-rank7" not in report["rules_fired"]
    assert "guard never held" in capsys.readouterr().out


def test_explain_chains_from_original_node_names(abs_model: Path, user_rules: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["compile", str(abs_model), "--add-rules", str(user_rules), "-o", str(out), "-q"]) == 0
    written = [n.name for n in onnx.load(out / "model.onnx").graph.node]
    assert written == ["abs_inner"]  # the kept node keeps its input-model name
    assert main(["explain", str(out), "abs_inner"]) == 0
    text = capsys.readouterr().out
    assert "from   abs_inner (Abs), abs_outer (Abs)" in text and "my-abs-abs" in text
    assert main(["explain", str(out), "abs_outer"]) == 0  # a replaced node leads to its replacement
    assert "see abs_inner" in capsys.readouterr().out


def test_explain_of_an_unknown_node_exits_1(encoder_artefact: tuple[Path, Path],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(encoder_artefact[1]), "no_such_node"]) == 1
    assert "no node named no_such_node" in capsys.readouterr().err


def test_operand_swaps_are_not_listed_as_rewrites(encoder_artefact: tuple[Path, Path]) -> None:
    report = json.loads((encoder_artefact[1] / "report.json").read_text())
    listed = {rule for rules in report["provenance"].values() for rule in rules}
    assert report["provenance"] and not listed & {"add-comm", "mul-comm"}
    # a node no listed rewrite made (kept, or only swapped) keeps its input-model name
    read = {n.name for n in onnx.load(encoder_artefact[0]).graph.node}
    written = {n.name for n in onnx.load(encoder_artefact[1] / "model.onnx").graph.node}
    # (an operator written as its expansion names its nodes after the listed one: Gelu_5_Erf_0)
    unlisted = {name for name in written - set(report["provenance"])
                if not any(name.startswith(f"{listed}_") for listed in report["provenance"])}
    assert unlisted and unlisted <= read, unlisted - read


def test_without_output_nothing_is_written_and_it_says_so(abs_model: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    before = set(abs_model.parent.iterdir())
    assert main(["compile", str(abs_model)]) == 0
    assert "nothing written" in capsys.readouterr().out
    assert set(abs_model.parent.iterdir()) == before


def test_bind_on_the_onnx_target_binds_the_written_model(abs_model: Path, tmp_path: Path) -> None:
    assert main(["compile", str(abs_model), "--bind", "n=3", "-o", str(tmp_path / "out"), "-q"]) == 0
    dims = onnx.load(tmp_path / "out" / "model.onnx").graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [3, 4]


@pytest.mark.parametrize("extra", [[], ["--target", "onnx", "-o", "OUT"]])
def test_malformed_bind_is_an_error_on_every_target(abs_model: Path, tmp_path: Path, extra: list[str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    extra = [str(tmp_path / "out") if e == "OUT" else e for e in extra]
    assert main(["compile", str(abs_model), "--bind", "n", *extra]) == 1
    assert "--bind expects NAME=POSITIVE_INT" in capsys.readouterr().err
    assert main(["compile", str(abs_model), "--bind", "nosuch=2", *extra]) == 1
    assert "cannot bind nosuch" in capsys.readouterr().err


def test_wrote_lists_every_file(abs_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["compile", str(abs_model), "--target", "opencl", "--bind", "n=2", "-o", str(out)]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("wrote "))
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert len(files) > 2 and all(name in line for name in files), (line, files)


def test_explain_lists_rules_in_the_order_they_applied(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """y = Abs(Neg(Abs(x))): `z-abs-neg` builds Abs(Abs(x)) in iteration 1, which only
    then lets `a-abs-abs` fire (iteration 2): the order is not the names' order."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs_inner"),
             helper.make_node("Neg", ["a"], ["n"], name="neg"),
             helper.make_node("Abs", ["n"], ["y"], name="abs_outer")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "chain.onnx")
    rules = tmp_path / "chain.dnnr"
    rules.write_text('use "operators.dnnr"\n\n# |-x| = |x|.\nrule z-abs-neg [exact]: Abs(Neg(?x)) => Abs(?x)\n'
                     '# ||x|| = |x|.\nrule a-abs-abs [exact]: Abs(Abs(?x)) => Abs(?x)\n')
    out = tmp_path / "out"
    assert main(["compile", str(tmp_path / "chain.onnx"), "--rules", str(rules), "-o", str(out), "-q"]) == 0
    assert [n.op_type for n in onnx.load(out / "model.onnx").graph.node] == ["Abs"]
    assert main(["explain", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.index("z-abs-neg") < text.index("a-abs-abs"), text
    assert "abs_inner (Abs)" in text and "abs_outer (Abs)" in text
