"""The rule language: `.dnnr` files -> a checked `RuleSet` (see grammar/dnnr.lark).

Entry points:
- `load_rules(paths)`: parse, resolve ``use``, check, merge; raises `DslError` with
  every diagnostic (its str() is the full report).
- `check(paths)`: the same checks, returning the diagnostics; never raises for bad input.
  `render_report(diagnostics)` prints them as `load_rules` would ("found N errors").
- `format_rules(ruleset_or_file)`: canonical text that re-parses to the same AST.
- `builtins_reference()`: the documentation of the built-in functions and class names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from egraph_compiler.dsl.ast import RuleSet, SourceFile, Span
from egraph_compiler.dsl.bounds import check_bounds
from egraph_compiler.dsl.builtins import BUILTINS, builtins_reference
from egraph_compiler.dsl.diagnostics import (
    ArityError,
    Diagnostic,
    DslError,
    DslParseError,
    DuplicateError,
    MisuseError,
    SourceLines,
    UnboundVariableError,
    UnknownNameError,
    UseError,
    error_for,
    render_report,
)
from egraph_compiler.dsl.format import format_items, ruleset_items
from egraph_compiler.dsl.load_budget import gc_paused
from egraph_compiler.dsl.loader import build_ruleset, load_files
from egraph_compiler.dsl.parser import parse_file
from egraph_compiler.dsl.semantics import check_files
from egraph_compiler.dsl.shipped import grammar_path, rules_dir

PathLike = str | os.PathLike[str]

__all__ = [
    "BUILTINS",
    "ArityError",
    "Diagnostic",
    "DslError",
    "DslParseError",
    "DuplicateError",
    "MisuseError",
    "RuleSet",
    "UnboundVariableError",
    "UnknownNameError",
    "UseError",
    "builtins_reference",
    "check",
    "format_rules",
    "grammar_path",
    "load_rules",
    "render_report",
    "rules_dir",
]


def _paths(paths: PathLike | Sequence[PathLike]) -> list[PathLike]:
    if isinstance(paths, (str, os.PathLike)):
        return [paths]
    return list(paths)


def _diagnose(paths: list[PathLike], search: Sequence[PathLike] = ()) -> tuple[list[Diagnostic], RuleSet | None]:
    with gc_paused():  # linear time for large rule files (load_budget.gc_paused)
        return _diagnose_files(paths, search)


def _diagnose_files(paths: list[PathLike], search: Sequence[PathLike]) -> tuple[list[Diagnostic], RuleSet | None]:
    load = load_files(paths, search)
    diagnostics = list(load.diagnostics)
    try:
        diagnostics += check_files(load.files, load.lines)
        diagnostics += check_bounds(load.files, load.lines)  # guard constants fit int64
    except RecursionError:  # an absurdly long chain such as a+a+...+a; the parser copes
        span = Span(str(paths[0]) if paths else "<rules>", 0, 0, 0, 0)
        diagnostics.append(
            load.lines.diagnostic(DslParseError, "expressions are nested too deeply", span)
        )
    order = {f.source.file: i for i, f in enumerate(load.files)}
    diagnostics.sort(key=lambda d: (order.get(d.span.file, -1), d.span.line, d.span.col))
    return diagnostics, (None if diagnostics else build_ruleset(load.files))


def load_rules(paths: PathLike | Sequence[PathLike], search: Sequence[PathLike] = ()) -> RuleSet:
    """Load `.dnnr` files (a directory = its ``*.dnnr`` files, sorted) into one RuleSet.

    ``use "x.dnnr"`` is resolved relative to the using file, then in the ``search``
    folders, then in the shipped library; every file is loaded once. Op declarations, rule names and rulesets are global to the load, and at
    most one ``schedule`` and one ``limits`` block may appear. Raises `DslError`
    (a subclass when every error is of one kind) carrying all diagnostics.
    """
    diagnostics, ruleset = _diagnose(_paths(paths), search)
    if ruleset is None:
        raise error_for(diagnostics)
    return ruleset


def check(paths: PathLike | Sequence[PathLike], search: Sequence[PathLike] = ()) -> list[Diagnostic]:
    """Every diagnostic `load_rules` would report for ``paths``; [] when they are clean.

    Never raises for bad input (unreadable files are diagnostics too).
    """
    return _diagnose(_paths(paths), search)[0]


def format_rules(source: RuleSet | SourceFile | PathLike) -> str:
    """Canonical text of a RuleSet, a parsed file, or one `.dnnr` file on disk.

    A file is formatted on its own (``use`` lines are kept, not followed), with its
    comments; it must parse, else `DslParseError`. Parsing the output gives the same
    AST up to spans (for a RuleSet, the same RuleSet up to spans and file names).
    """
    if isinstance(source, RuleSet):
        return format_items(ruleset_items(source))
    if isinstance(source, SourceFile):
        return format_items(source.items)
    path = Path(source)
    lines = SourceLines()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UseError(
            [
                lines.diagnostic(
                    UseError, f"cannot read '{path}': {error}", Span(str(path), 0, 0, 0, 0)
                )
            ]
        ) from None
    lines.add(str(path), text)
    parsed = parse_file(text, str(path), lines)
    if parsed.errors:
        raise DslParseError(parsed.errors)
    return format_items(parsed.source.items)
