"""Every rule's effect on special values is measured and recorded (issue 16, item 3):
`verify.special_values` runs both sides bit-exact in float32 on inputs holding NaN,
±inf, ±0 and ±3e38; ``dnnr verify --json`` carries the record, an ``[exact]`` tag the
record contradicts fails ``dnnr check`` and ``dnnr verify``, and ``--fp strict``
leaves such a rule out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import dsl, ir, pipeline, verify
from egraph_compiler.verify import special_values
from egraph_compiler.verify.builtin_ops import load_semantics
from tests.faults.test_fp_strict import assert_bit_exact
from tests.modelzoo import run_ort

ROOT = Path(__file__).resolve().parents[2]
OPERATORS = ROOT / "rules" / "operators.dnnr"
ADD_ZERO = "rule add-zero-exact [exact]: Add(?x, 0) => ?x"  # x + 0 is +0 for x = -0


@pytest.fixture(scope="module")
def library_records(tmp_path_factory: pytest.TempPathFactory) -> tuple[dsl.RuleSet, dict[str, special_values.SpecialValues]]:
    library = dsl.load_rules([str(ROOT / "rules")])
    return library, special_values.records(library, cache_dir=tmp_path_factory.mktemp("cache"))


def _rules_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inline.dnnr"
    path.write_text(f'use "{OPERATORS}"\nruleset inline\n{text}\n')
    return path


def test_every_shipped_rule_has_a_record_and_no_exact_rule_changes_bits(library_records) -> None:  # type: ignore[no-untyped-def]
    library, records = library_records
    assert set(records) == {rule.name for rule in library.rules}
    exact = [rule for rule in library.rules if "exact" in rule.flags]
    contradicted = {r.name: records[r.name].summary for r in exact if records[r.name].changes}
    assert not contradicted, contradicted
    # the measurement is not vacuous: most [exact] rules were evaluated, and every
    # record that shows nothing says why
    assert sum(records[r.name].keeps_bits for r in exact) >= 0.9 * len(exact)
    for record in records.values():
        assert record.keeps_bits or record.changes or record.not_evaluated, record


def test_the_issues_real_only_rules_are_recorded_with_what_they_change(library_records) -> None:  # type: ignore[no-untyped-def]
    # issue 16: Pow(x, 0.5) -> Sqrt(x) turns -0 into -0 where onnxruntime gives +0;
    # sqrt-square loses the overflow at 1e30; exp-mul and mul-distribute make or lose NaNs
    _, records = library_records
    assert "negzero" in records["pow-half"].changes, records["pow-half"]
    assert "overflow" in records["sqrt-square"].changes, records["sqrt-square"]
    assert "nan" in records["exp-mul"].changes, records["exp-mul"]
    assert "nan" in records["mul-distribute"].changes, records["mul-distribute"]
    for name in ("pow-half", "sqrt-square", "exp-mul", "mul-distribute"):
        record = records[name]
        assert len(record.examples) == len(record.changes)
        assert all(e.startswith(f"{kind}: ") for kind, e in zip(record.changes, record.examples, strict=True))


def test_records_tell_the_kinds_apart(tmp_path: Path) -> None:
    ruleset = dsl.load_rules([str(_rules_file(tmp_path, "\n".join([
        ADD_ZERO,
        "rule neg-neg: Neg(Neg(?x)) => ?x",
        "rule distribute: Mul(Add(?a, ?b), ?c) => Add(Mul(?a, ?c), Mul(?b, ?c))",
    ])))])
    records = special_values.records(ruleset, use_cache=False)
    assert records["add-zero-exact"].changes == ("negzero",), records["add-zero-exact"]
    assert "-0" in records["add-zero-exact"].examples[0]
    assert records["neg-neg"].keeps_bits and records["neg-neg"].evaluated > 0
    assert {"rounding", "nan"} <= set(records["distribute"].changes)


def test_an_exact_tag_the_record_contradicts_fails_check_and_verify(tmp_path: Path) -> None:
    path = _rules_file(tmp_path, ADD_ZERO + "\nrule neg-neg [exact]: Neg(Neg(?x)) => ?x")
    env = {"PYTHONPATH": str(ROOT), "DNNR_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "egraph_compiler.cli", "check", str(path)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 1, done
    errors = done.stderr.strip().splitlines()
    assert len(errors) == 1 and "add-zero-exact" in errors[0] and "negzero" in errors[0], done.stderr
    assert errors[0].startswith(f"{path}:"), errors[0]  # names the file and line
    verdicts = verify.verify_rules(dsl.load_rules([str(path)]), jobs=1, cache_dir=tmp_path / "verify")
    by_rule = {v.rule: v for v in verdicts}
    assert not by_rule["add-zero-exact"].ok  # Z3's bf16 tier refutes it as well
    assert by_rule["neg-neg"].ok and by_rule["neg-neg"].special_values["keeps_bits"]
    # a rule the solver proved (or could not refute) still fails on its record
    ruleset = dsl.load_rules([str(path)])
    proved = [verify.Verdict(rule.name, str(rule.span), "proved", tiers=("real", "fp32")) for rule in ruleset.rules]
    checked = special_values.attach(proved, ruleset, load_semantics(ruleset.ops), use_cache=False)
    assert [v.status for v in checked] == ["failed", "proved"]
    assert "special-value record changes negzero" in checked[0].message, checked[0].message
    as_json = json.loads(verify.render_json(verdicts))["verdicts"]
    assert {v["rule"]: v["special_values"]["summary"] for v in as_json} == {
        "add-zero-exact": "changes negzero", "neg-neg": "keeps bits"}


def test_strict_leaves_out_an_exact_rule_its_record_contradicts(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    graph = helper.make_graph([helper.make_node("Add", ["x", "zero"], ["y"], name="add")], "g", [x], [y], [zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rules = _rules_file(tmp_path, ADD_ZERO)
    reals = pipeline.compile_model(model.SerializeToString(), rule_paths=[rules], fp="reals")
    assert "add-zero-exact" in reals.report.rules_fired  # the rule applies here
    strict = pipeline.compile_model(model.SerializeToString(), rule_paths=[rules], fp="strict")
    assert strict.report.fp["exact_but_changes"] == {"add-zero-exact": ["negzero"]}
    assert "add-zero-exact" in strict.report.fp["left_out"]
    assert "add-zero-exact" not in strict.report.rules_fired
    feeds = {"x": np.array([-0.0, 0.0, np.nan, -np.inf], np.float32)}
    assert_bit_exact(run_ort(ir.to_onnx(strict.graph), feeds)["y"], run_ort(model, feeds)["y"], "y")
