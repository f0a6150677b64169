"""load_rules / check: what the RuleSet holds, spans on every node, and the report format."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from lark import UnexpectedInput

from egraph_compiler.dsl import (
    ArityError,
    DslError,
    DslParseError,
    DuplicateError,
    UnknownNameError,
    UseError,
    ast,
    check,
    load_rules,
)
from egraph_compiler.dsl.diagnostics import SourceLines
from egraph_compiler.dsl.parse_errors import EXAMPLES, describe_parse_error
from egraph_compiler.dsl.parser import lark_parser, parse_file

PASS = Path(__file__).parent / "pass"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def spans_of(node: object, trail: str = "") -> list[tuple[str, ast.Span]]:
    """Every (field path, span) reachable from an AST value."""
    found: list[tuple[str, ast.Span]] = []
    if isinstance(node, ast.Span):
        return [(trail, node)]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        for f in dataclasses.fields(node):
            found += spans_of(getattr(node, f.name), f"{trail}.{type(node).__name__}.{f.name}")
    elif isinstance(node, (tuple, list, frozenset)):
        for item in node:
            found += spans_of(item, trail)
    elif isinstance(node, dict):
        for item in node.values():
            found += spans_of(item, trail)
    return found


def test_every_parsed_node_has_a_real_span() -> None:
    ruleset = load_rules([PASS])
    spans = spans_of(ruleset)
    assert len(spans) > 300
    missing = [
        trail
        for trail, span in spans
        # The only span allowed to be absent: the result class of `fuse A then B : v`.
        if span == ast.NO_SPAN and not trail.endswith("FuseEntry.part_spans")
    ]
    assert missing == []
    for _, span in spans:
        if span != ast.NO_SPAN:
            assert (
                span.line >= 1
                and span.col >= 1
                and (span.end_line, span.end_col) >= (span.line, span.col)
            )


def test_ruleset_contents(tmp_path: Path) -> None:
    ruleset = load_rules([PASS])
    rules = {r.name: r for r in ruleset.rules}
    fold = rules["transpose-fold"]
    assert fold.doc == "SmartMem: two transposes are one, perm r[i] = p[q[i]]."
    assert fold.ruleset == "layout" and fold.flags == frozenset({"exact"})
    assert fold.span.file.endswith("layout.dnnr") and fold.span.line == 7
    assert fold.rhs == ast.POp(
        "Transpose",
        (ast.PVar("x", fold.rhs.inputs[0].span),),
        (
            (
                "perm",
                ast.Call(
                    "compose",
                    (
                        ast.Var("p", fold.rhs.attrs[0][1].args[0].span),
                        ast.Var("q", fold.rhs.attrs[0][1].args[1].span),
                    ),
                    fold.rhs.attrs[0][1].span,
                ),
            ),
        ),
        fold.rhs.span,
        fold.rhs.attr_spans,
    )
    assert rules["reshape-noop"].doc == ""  # a trailing comment is not a doc
    assert rules["neg-neg"].bidirectional and not rules["mul-distribute"].bidirectional
    assert rules["default-neg"].ruleset == "default_ruleset"
    assert rules["second-neg"].ruleset == "second"
    literal = rules["transpose-literal"].lhs
    assert isinstance(literal, ast.POp)
    perm = literal.attrs[0][1]
    assert isinstance(perm, ast.ListLit) and [n.value for n in perm.items] == [1, 0]
    assert rules["neg-const"].lhs.inputs[0].value == -1.5
    ops = ruleset.ops
    assert ops["Clip"].params[1].optional and ops["Concat"].params[0].variadic
    assert ops["Split"].outputs == 2 and ops["MatMul"].builtin == "matmul"
    assert ops["Shape"].dynamism == "shape_determined_output"
    assert ruleset.limits.nodes == 50000 and ruleset.limits.seconds == 2.5
    steps = ruleset.schedule
    assert isinstance(steps[0], ast.Saturate) and steps[0].rulesets == ("layout",)
    assert isinstance(steps[1], ast.Repeat) and steps[1].times == 3
    assert isinstance(steps[2], ast.RunTimes) and steps[2].rulesets == ("algebra", "layout")
    assert {r.name for r in ruleset.rulesets} == {"layout", "algebra", "default_ruleset", "second"}
    assert [f.verdict for f in ruleset.fusion] == ["fuse", "fuse", "break", "profile"]
    assert ruleset.rules_in("algebra")[0].name == "mul-distribute"


def test_directory_means_its_dnnr_files_sorted(tmp_path: Path) -> None:
    write(tmp_path, "b.dnnr", "op B(a) : one_to_one ili_variable shape_determined\n")
    write(tmp_path, "a.dnnr", "op A(a) : one_to_one ili_variable shape_determined\n")
    write(tmp_path, "notes.txt", "not rules")
    ruleset = load_rules(tmp_path)
    assert [Path(f).name for f in ruleset.files] == ["a.dnnr", "b.dnnr"]
    assert list(ruleset.ops) == ["A", "B"]


def test_use_is_relative_to_the_using_file_and_loads_once(tmp_path: Path) -> None:
    write(tmp_path, "lib/ops.dnnr", "op N(a) : one_to_one ili_variable shape_determined\n")
    write(tmp_path, "lib/x.dnnr", 'use "ops.dnnr"\nrule x: N(?a) => ?a\n')
    main = write(
        tmp_path, "main.dnnr", 'use "lib/x.dnnr"\nuse "lib/ops.dnnr"\nrule m: N(N(?a)) => ?a\n'
    )
    ruleset = load_rules([main, tmp_path / "lib" / "ops.dnnr"])
    assert len(ruleset.files) == 3 and list(ruleset.ops) == ["N"]
    assert [r.name for r in ruleset.rules] == ["x", "m"]


def test_one_report_with_every_error_and_the_kind_of_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "r.dnnr",
        "op Neg(a) : one_to_one ili_variable shape_determined\n"
        "rule a: Ngg(?x) => ?x\n"
        "rule b: Neg(?x, ?y) => ?x\n",
    )
    with pytest.raises(DslError) as raised:
        load_rules([path])
    error = raised.value
    assert type(error) is DslError  # two kinds: the base class
    assert [d.kind for d in error.diagnostics] == [UnknownNameError, ArityError]
    text = str(error)
    expected_first = (
        f"{path}:2:9: error: unknown operator 'Ngg'\n"
        "rule a: Ngg(?x) => ?x\n"
        "        ^~~\n"
        "  hint: did you mean Neg?\n"
    )
    assert text.startswith(expected_first)
    assert text.endswith("\n\nfound 2 errors")

    only_unknown = write(tmp_path, "u.dnnr", "rule a: Ngg(?x) => ?x\n")
    with pytest.raises(UnknownNameError) as raised_one:
        load_rules([only_unknown])
    assert str(raised_one.value).endswith("found 1 error")


def test_parse_error_is_friendly_and_other_files_still_checked(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.dnnr", "rule r: Neg(?x) ?x\n")
    other = write(tmp_path, "other.dnnr", "rule s: Nope(?x) => ?x\n")
    diagnostics = check([bad, other])
    assert [d.kind for d in diagnostics] == [DslParseError, UnknownNameError]
    assert "missing '=>'" in diagnostics[0].message
    assert (diagnostics[0].span.line, diagnostics[0].span.col) == (1, 17)


def test_check_never_raises_for_unreadable_input(tmp_path: Path) -> None:
    binary = tmp_path / "binary.dnnr"
    binary.write_bytes(b"\xff\xfe\x00rule")
    diagnostics = check([tmp_path / "missing.dnnr", binary])
    assert [d.kind for d in diagnostics] == [UseError, UseError]
    assert "not UTF-8" in diagnostics[1].message
    with pytest.raises(UseError):
        load_rules([tmp_path / "missing.dnnr"])
    odd = write(tmp_path, "odd.dnnr", 'use "a\x00b.dnnr"\nuse "."\n')
    assert [d.kind for d in check([odd, tmp_path / "x\x00y.dnnr"])] == [UseError] * 3


def test_ops_are_global_across_files_of_one_load(tmp_path: Path) -> None:
    rules = write(tmp_path, "rules.dnnr", "rule r: Late(?x) => ?x\n")
    ops = write(tmp_path, "ops.dnnr", "op Late(a) : one_to_one ili_variable shape_determined\n")
    assert check([rules]) != [] and check([rules, ops]) == []


def test_duplicates_carry_the_first_definition_as_a_note(tmp_path: Path) -> None:
    first = write(tmp_path, "a.dnnr", "op N(a) : one_to_one ili_variable shape_determined\n")
    second = write(tmp_path, "b.dnnr", "\nop N(b) : one_to_one ili_variable shape_determined\n")
    [diagnostic] = check([first, second])
    assert diagnostic.kind is DuplicateError
    assert (diagnostic.span.file, diagnostic.span.line, diagnostic.span.col) == (str(second), 2, 4)
    [note] = diagnostic.notes
    assert (note.span.file, note.span.line, note.span.col) == (str(first), 1, 4)
    assert f"  {first}:1:4: note: first declared here\n  op N(a)" in str(diagnostic)


def test_common_mistakes_get_named_parse_errors() -> None:
    # Every example in the table is recognised as its own mistake.
    parser = lark_parser()
    for label, (_, examples) in EXAMPLES.items():
        for text in examples:
            with pytest.raises(UnexpectedInput) as raised:
                parser.parse(text)
            assert describe_parse_error(raised.value, text, parser)[0] == label, text


def test_every_broken_item_is_reported_and_the_rest_kept(tmp_path: Path) -> None:
    text = (
        "op N(a) : one_to_one ili_variable shape_determined\n"
        "rule a: N(?x => ?x\n"
        "rule b: N(?x) => ?x\n"
        "rule c: N(?x) ?x\n"
        "rule d: N(N(?x)) => ?x\n"
        "rule e: N(?x) => ?x when rank(?x\n"
    )
    path = write(tmp_path, "r.dnnr", text)
    diagnostics = check([path])
    assert [(d.span.line, d.kind) for d in diagnostics] == [
        (2, DslParseError),
        (4, DslParseError),
        (6, DslParseError),
    ]
    assert "unclosed '('" in diagnostics[0].message and "unclosed '('" in diagnostics[2].message
    assert diagnostics[2].span.col == len("rule e: N(?x) => ?x when rank(?x") + 1
    parsed = parse_file(text, str(path), SourceLines())
    assert [i.name for i in parsed.source.items if isinstance(i, ast.Rule)] == ["b", "d"]
