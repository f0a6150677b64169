"""format_rules: print -> parse -> print is stable, and parsing the output gives the same AST."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from egraph_compiler.dsl import DslParseError, ast, format_rules, load_rules
from egraph_compiler.dsl.diagnostics import SourceLines
from egraph_compiler.dsl.format import expr_text, without_spans
from egraph_compiler.dsl.parser import parse_file

PASS = Path(__file__).parent / "pass"
PASS_FILES = sorted(PASS.glob("*.dnnr"))


def parse(text: str, file: str) -> ast.SourceFile:
    parsed = parse_file(text, file, SourceLines())
    assert parsed.errors == [], [str(d) for d in parsed.errors]
    return parsed.source


@pytest.mark.parametrize("path", PASS_FILES, ids=lambda p: p.name)
def test_file_round_trip(path: Path) -> None:
    original = parse(path.read_text(encoding="utf-8"), str(path))
    printed = format_rules(path)
    reparsed = parse(printed, str(path))
    assert without_spans(reparsed) == without_spans(original)
    assert format_rules(reparsed) == printed


def test_ruleset_round_trip(tmp_path: Path) -> None:
    ruleset = load_rules([PASS])
    printed = format_rules(ruleset)
    target = tmp_path / "all.dnnr"
    target.write_text(printed, encoding="utf-8")
    again = load_rules([target])
    assert without_spans(dataclasses.replace(again, files=())) == without_spans(
        dataclasses.replace(ruleset, files=())
    )
    assert format_rules(again) == printed


def test_comments_are_kept_and_docs_stay_docs(tmp_path: Path) -> None:
    text = (
        "# header\n\n# block\n# two lines\nop N(a) : one_to_one ili_variable shape_determined\n"
        "# doc of r\nrule r: N(?x) => ?x  # trailing\nrule s: N(N(?x)) => ?x\n"
    )
    path = tmp_path / "c.dnnr"
    path.write_text(text, encoding="utf-8")
    source = parse(text, str(path))
    kinds = [type(i).__name__ for i in source.items]
    assert kinds == ["Comment", "Comment", "OpDecl", "Rule", "Comment", "Rule"]
    assert source.items[1].lines == ("block", "two lines")
    assert source.items[3].doc == "doc of r" and source.items[5].doc == ""
    printed = format_rules(path)
    assert "# header" in printed and "# trailing" in printed
    assert without_spans(parse(printed, str(path))) == without_spans(source)


@pytest.mark.parametrize(
    "text",
    [
        "a - (b - c)",
        "(a - b) - c",
        "a ** b ** c",
        "(a ** b) ** c",
        "(-a) ** 2",
        "-a ** 2",
        "(-2) ** 2",
        "a - -1",
        "--1",
        "not (a and b) or c",
        "not a == b",
        "(a == b) == c",
        "a / (b * c) // d % 2",
        "(a + b)[0]",
        "shape(?x)[1] * -(2 + 3)",
        "[1, -2.5, 1e-05, inf, -inf]",
        'f("s", ?x, [])',
    ],
)
def test_expressions_keep_their_meaning(text: str) -> None:
    source = f"op N(a, b, c, d) : one_to_one ili_variable shape_determined = {text}\n"
    expr = parse(source, "e.dnnr").items[0].semantics
    printed = expr_text(expr)
    again = parse(
        f"op N(a, b, c, d) : one_to_one ili_variable shape_determined = {printed}\n", "e.dnnr"
    )
    assert without_spans(again.items[0].semantics) == without_spans(expr)


def test_long_rules_are_wrapped(tmp_path: Path) -> None:
    long_guard = " and ".join(f"rank(?x) > {i}" for i in range(12))
    path = tmp_path / "w.dnnr"
    path.write_text(f"rule w: N(?x) => ?x when {long_guard}\n", encoding="utf-8")
    printed = format_rules(path)
    assert max(len(line) for line in printed.splitlines()) > 100  # the guard alone is long
    assert printed.splitlines()[1].startswith("    => ")


def test_formatting_a_broken_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "b.dnnr"
    path.write_text("rule r: N(?x ?x\n", encoding="utf-8")
    with pytest.raises(DslParseError):
        format_rules(path)
