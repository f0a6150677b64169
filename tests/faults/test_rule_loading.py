"""Loading rules is fast and bounded (issue 16, item 2: "10,000 rules took 393 s to
load against a 20 s limit"): parsing and checking take time linear in the number of
rules, and a compile's seconds limit stops the load itself with a `LimitError` that
names the limit, within 10 % of it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.budgets import many_rules as benchmark_rules
from egraph_compiler import dsl, pipeline
from egraph_compiler.dsl.ast import Limits
from egraph_compiler.ir.errors import LimitError
from tests.faults.helpers import add_relu_model

OPERATORS = Path(__file__).resolve().parents[2] / "rules" / "operators.dnnr"


def many_rules(count: int, limits: str = "") -> str:
    return benchmark_rules(count, OPERATORS, limits)


def _load_cpu_seconds(path: Path) -> float:
    start = time.process_time()  # CPU time: other processes on the machine do not count
    ruleset = dsl.load_rules([str(path)])
    elapsed = time.process_time() - start
    assert len(ruleset.rules) == int(path.stem)
    return elapsed


def test_loading_takes_time_linear_in_the_number_of_rules(tmp_path: Path) -> None:
    warm, small, large = tmp_path / "10.dnnr", tmp_path / "1000.dnnr", tmp_path / "4000.dnnr"
    for path in (warm, small, large):
        path.write_text(many_rules(int(path.stem)))
    _load_cpu_seconds(warm)  # lark's tables and the operators file, once (parses are cached)
    ratio = _load_cpu_seconds(large) / _load_cpu_seconds(small)
    # 4x the rules: linear is 4 (less with fixed costs); the quadratic comment
    # attachment and garbage collection passes made it 8-16
    assert ratio < 6, f"4x the rules took {ratio:.1f}x the time"


def test_docs_and_trailing_comments_stay_attached_in_a_large_file(tmp_path: Path) -> None:
    path = tmp_path / "300.dnnr"
    path.write_text(many_rules(300))
    ruleset = dsl.load_rules([str(path)])
    docs = {rule.name: rule.doc for rule in ruleset.rules}
    assert docs["r0"] == "rule 0: swap the operands of an Add"
    assert docs["r299"] == "rule 299: swap the operands of an Add"


def test_the_limits_block_binds_on_the_parse_of_its_own_file(tmp_path: Path) -> None:
    rules = tmp_path / "runaway.dnnr"
    rules.write_text(many_rules(10_000, "seconds = 1.5"))  # the limits block comes last
    start = time.perf_counter()
    with pytest.raises(LimitError) as caught:
        pipeline.compile_model(add_relu_model().SerializeToString(), rule_paths=[rules], started=start)
    elapsed = time.perf_counter() - start
    assert elapsed <= 1.5 * 1.1, f"{elapsed:.2f} s against a 1.5 s limit"
    message = str(caught.value)
    assert message.startswith("error: loading the rules passed the seconds limit (1.5 s, "
                              f"limits at {rules}:20004)"), message
    assert "\n" not in message and "raise 'seconds'" in message


def test_the_callers_limit_overrides_the_rule_files(tmp_path: Path) -> None:
    rules = tmp_path / "runaway.dnnr"
    rules.write_text(many_rules(10_000, "seconds = 600"))
    start = time.perf_counter()
    with pytest.raises(LimitError, match=r"seconds limit \(1 s, --max-seconds\)"):
        pipeline.compile_model(add_relu_model().SerializeToString(), rule_paths=[rules],
                               limits=Limits(seconds=1.0), started=start)
    assert time.perf_counter() - start <= 1.1


def test_a_load_within_the_limit_compiles(tmp_path: Path) -> None:
    rules = tmp_path / "few.dnnr"
    rules.write_text(many_rules(50, "seconds = 60"))
    result = pipeline.compile_model(add_relu_model().SerializeToString(), rule_paths=[rules])
    assert len(result.rules.rules) == 50 and not result.report.limits_hit
