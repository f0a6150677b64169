"""Fuzz: on any text, `check` returns Diagnostics and `load_rules` raises only DslError.

Inputs are random text over the language's alphabet, and real rule files (rules/*.dnnr
when present, else tests/dsl/pass/) mutated by deleting, duplicating and swapping
tokens and characters.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egraph_compiler.dsl import Diagnostic, DslError, check, format_rules, load_rules
from egraph_compiler.dsl.diagnostics import SourceLines
from egraph_compiler.dsl.format import without_spans
from egraph_compiler.dsl.parser import parse_file

HERE = Path(__file__).parent
RULES = HERE.parents[1] / "rules"
CORPUS_DIR = RULES if sorted(RULES.glob("*.dnnr")) else HERE / "pass"
CORPUS = {p.name: p.read_text(encoding="utf-8") for p in sorted(CORPUS_DIR.glob("*.dnnr"))}
WORKDIR = Path(tempfile.mkdtemp(prefix="dnnr-fuzz-"))
for name, text in CORPUS.items():  # siblings, so `use` lines of a mutant resolve
    (WORKDIR / name).write_text(text, encoding="utf-8")
TOKEN = re.compile(r'\s+|"[^"\n]*"|#[^\n]*|\?\w+|<=>|=>|->|\*\*|//|[=!<>]=|\w+|.', re.DOTALL)
WINDOW = 30
KEYWORDS = (
    "op rule ruleset use fuse then limits schedule saturate run repeat when requires builtin "
    "and or not inf ?x ?p Neg Add Transpose perm compose rank one_to_one ili_variable "
    "shape_determined => <=> -> ( ) [ ] { } : ; , = == ** - # \n"
).split(" ")


def assert_only_dsl_outcomes(text: str) -> None:
    path = WORKDIR / "fuzz.dnnr"
    path.write_text(text, encoding="utf-8")
    diagnostics = check([path])
    assert isinstance(diagnostics, list)
    assert all(isinstance(d, Diagnostic) and str(d) for d in diagnostics)
    try:
        load_rules([path])
    except DslError as error:
        assert str(error).endswith("error" if len(error.diagnostics) == 1 else "errors")
        assert len(error.diagnostics) == len(diagnostics)
    else:
        assert diagnostics == []


@st.composite
def mutants(draw: st.DrawFn) -> str:
    # A window of a real file (with its `use` lines), so big rule files stay cheap.
    lines = CORPUS[draw(st.sampled_from(sorted(CORPUS)))].splitlines(keepends=True)
    start = draw(st.integers(0, max(len(lines) - WINDOW, 0)))
    uses = [line for line in lines if line.startswith("use ")]
    text = "".join(uses + lines[start : start + WINDOW])
    by_tokens = draw(st.booleans())
    pieces = TOKEN.findall(text) if by_tokens else list(text)
    for _ in range(draw(st.integers(1, 6))):
        if not pieces:
            break
        i = draw(st.integers(0, len(pieces) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "swap", "insert"]))
        if action == "delete":
            del pieces[i]
        elif action == "duplicate":
            pieces.insert(i, pieces[i])
        elif action == "swap":
            j = draw(st.integers(0, len(pieces) - 1))
            pieces[i], pieces[j] = pieces[j], pieces[i]
        else:
            pieces.insert(i, draw(st.sampled_from(KEYWORDS)))
    return "".join(pieces)


FAST = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@FAST
@given(
    st.text(alphabet=st.sampled_from(list('aZ?x_(),[]{}:;=<>-+*/%.#"\n 019\x00\t')), max_size=80)
)
def test_random_characters(text: str) -> None:
    assert_only_dsl_outcomes(text)


@FAST
@given(st.lists(st.sampled_from(KEYWORDS), max_size=30).map(" ".join))
def test_random_token_soup(text: str) -> None:
    assert_only_dsl_outcomes(text)
    assert_format_round_trips(text)


def assert_format_round_trips(text: str) -> None:
    """Whatever parses, formats to text that parses to the same AST."""
    parsed = parse_file(text, "fuzz.dnnr", SourceLines())
    if parsed.errors:
        return
    printed = format_rules(parsed.source)
    again = parse_file(printed, "fuzz.dnnr", SourceLines())
    assert again.errors == [], printed
    assert without_spans(again.source) == without_spans(parsed.source)


@settings(
    max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(mutants())
def test_mutated_rule_files(text: str) -> None:
    assert_only_dsl_outcomes(text)
    assert_format_round_trips(text)


def test_unmutated_corpus_is_accepted_or_diagnosed() -> None:
    for name in CORPUS:
        assert_only_dsl_outcomes(CORPUS[name])


def teardown_module() -> None:
    shutil.rmtree(WORKDIR, ignore_errors=True)
