"""tests/dsl/pass/*.dnnr must load clean; each tests/dsl/fail/*.dnnr states its diagnostics.

A fail file lists what it expects in comments (STYLE 7)::

    # ERROR: 3:14 unknown operator 'Transpos' HINT: did you mean Transpose?
    # ERROR: include/other.dnnr:1:1 'use' cycle

``line:col`` (optionally prefixed by a path relative to the fail file) and a
substring of the message, optionally followed by ``HINT:`` and a substring of the
hint. Every expectation must match a distinct diagnostic and every diagnostic an
expectation.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from egraph_compiler.dsl import Diagnostic, DslError, check, load_rules

HERE = Path(__file__).parent
PASS_FILES = sorted((HERE / "pass").glob("*.dnnr"))
FAIL_FILES = sorted((HERE / "fail").glob("*.dnnr"))
EXPECT = re.compile(r"#\s*ERROR:\s*(?:(\S+?):)?(\d+):(\d+)\s+(.*?)(?:\s+HINT:\s*(.*))?$")


@dataclass(frozen=True)
class Expected:
    file: str
    line: int
    col: int
    message: str
    hint: str | None

    def matches(self, diagnostic: Diagnostic) -> bool:
        return (
            os.path.normpath(diagnostic.span.file) == self.file
            and (diagnostic.span.line, diagnostic.span.col) == (self.line, self.col)
            and self.message in diagnostic.message
            and (self.hint is None or self.hint in diagnostic.hint)
        )


def expectations(path: Path) -> list[Expected]:
    found = []
    for text in path.read_text(encoding="utf-8").splitlines():
        match = EXPECT.match(text.strip())
        if match:
            where, line, col, message, hint = match.groups()
            file = os.path.normpath(path.parent / where) if where else os.path.normpath(path)
            found.append(Expected(file, int(line), int(col), message, hint))
    return found


def test_the_folders_are_not_empty() -> None:
    assert len(PASS_FILES) >= 4 and len(FAIL_FILES) >= 10


@pytest.mark.parametrize("path", PASS_FILES, ids=lambda p: p.name)
def test_pass_file_loads_clean(path: Path) -> None:
    assert check([path]) == [], "\n\n".join(str(d) for d in check([path]))
    ruleset = load_rules([path])
    assert str(path) in ruleset.files


def test_pass_folder_loads_clean_as_one_load() -> None:
    ruleset = load_rules([HERE / "pass"])
    # Each file once, even though several files `use` ops.dnnr.
    assert len(ruleset.files) == len(set(ruleset.files)) == len(PASS_FILES)


@pytest.mark.parametrize("path", FAIL_FILES, ids=lambda p: p.name)
def test_fail_file_reports_exactly_its_expected_diagnostics(path: Path) -> None:
    expected = expectations(path)
    assert expected, f"{path} states no '# ERROR:' expectations"
    diagnostics = check([path])
    unmatched = list(diagnostics)
    missing = []
    for want in expected:
        hit = next((d for d in unmatched if want.matches(d)), None)
        if hit is None:
            missing.append(want)
        else:
            unmatched.remove(hit)
    report = "\n\n".join(str(d) for d in diagnostics)
    assert not missing and not unmatched, (
        f"missing: {missing}\nunexpected: {[str(d) for d in unmatched]}\nfull report:\n{report}"
    )
    with pytest.raises(DslError) as raised:
        load_rules([path])
    assert len(raised.value.diagnostics) == len(expected)
    assert str(raised.value).endswith(
        f"found {len(expected)} errors" if len(expected) > 1 else "found 1 error"
    )
