"""Paths -> parsed files (``use`` resolved, each file once, cycles diagnosed) -> RuleSet.

``use "x.dnnr"`` is looked up like a C compiler's ``#include "x.h"``: next to the
using file first, then in each ``search`` folder (``--rules-path DIR``), then in the
shipped library, so a rule file anywhere can ``use "operators.dnnr"``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from egraph_compiler.dsl import ast, load_budget
from egraph_compiler.dsl.diagnostics import Diagnostic, SourceLines, UseError
from egraph_compiler.dsl.parser import ParsedFile, default_ruleset, limits_blocks, parse_file
from egraph_compiler.dsl.shipped import rules_dir
from egraph_compiler.dsl.source_io import read_rule_file


@dataclass
class Load:
    """Every file of one load in load order (a file after the files it uses)."""

    files: list[ParsedFile] = field(default_factory=list)
    lines: SourceLines = field(default_factory=SourceLines)
    diagnostics: list[Diagnostic] = field(default_factory=list)


def _identity(path: Path) -> Path:
    """The key that makes a file load once; odd names (a NUL byte) cannot be resolved."""
    try:
        return path.resolve()
    except (OSError, ValueError, RuntimeError):
        return Path(os.path.abspath(path))


def _unreadable_reason(error: Exception) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error) or type(error).__name__


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def expand_paths(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """A directory stands for its ``*.dnnr`` files, sorted by name."""
    expanded: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if _is_dir(path):
            expanded.extend(sorted(p for p in path.glob("*.dnnr") if p.is_file()))
        else:
            expanded.append(path)
    return expanded


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def use_search_path(search: Sequence[str | os.PathLike[str]] = ()) -> list[Path]:
    """The folders a ``use`` falls back to after the using file's own: ``search`` in
    order, then the shipped library (when it exists)."""
    folders = [Path(s) for s in search]
    try:
        shipped = rules_dir()
    except FileNotFoundError:  # an install without its rules/ data: nothing to fall back on
        return folders
    return [*folders, shipped]


def resolve_use(using_file: Path, written: str, search: Sequence[Path]) -> Path:
    """Where ``use "written"`` in ``using_file`` points: the first existing candidate
    (the using file's folder, then ``search``); the local one when none exists, so
    the "cannot read" diagnostic names the path a reader expects."""
    local = Path(os.path.normpath(using_file.parent / written))
    if _is_file(local) or Path(written).is_absolute():
        return local
    for folder in search:
        candidate = Path(os.path.normpath(folder / written))
        if _is_file(candidate):
            return candidate
    return local


def load_files(paths: Sequence[str | os.PathLike[str]],
               search: Sequence[str | os.PathLike[str]] = ()) -> Load:
    """Parse ``paths`` and every file they ``use`` (looked up as `resolve_use` says)."""
    load = Load()
    done: set[Path] = set()
    folders = use_search_path(search)

    def visit(path: Path, stack: list[tuple[Path, str]], via: ast.UseDecl | None) -> None:
        key = _identity(path)
        names = [name for k, name in stack]
        if any(k == key for k, _ in stack):
            cycle = names[[k for k, _ in stack].index(key) :] + [str(path)]
            load.diagnostics.append(
                load.lines.diagnostic(
                    UseError,
                    "'use' cycle: " + " -> ".join(cycle),
                    via.span if via else ast.Span(str(path), 0, 0, 0, 0),
                    "files may use each other only without cycles; "
                    "move the shared declarations into a third file",
                )
            )
            return
        if key in done:
            return
        done.add(key)
        file = str(path)
        try:
            text = read_rule_file(path)  # a regular file under a size cap (source_io)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            reason = _unreadable_reason(error)
            span = via.span if via else ast.Span(file, 0, 0, 0, 0)
            hint = ""
            if via is not None and not Path(via.path).is_absolute():
                looked = ", ".join(str(f) for f in folders) or "no other folder"
                hint = (f"'use' looks next to the using file, then in: {looked}; "
                        "add a folder with --rules-path DIR")
            load.diagnostics.append(
                load.lines.diagnostic(UseError, f"cannot read '{file}': {reason}", span, hint)
            )
            return
        load.lines.add(file, text)
        if load_budget.active():  # the file's own limits bound its parse
            for decl in limits_blocks(text, file):
                load_budget.note_limits(decl)
        load_budget.at(f"parsing {file}")
        parsed = parse_file(text, file, load.lines)
        for item in parsed.source.items:
            if isinstance(item, ast.UseDecl):
                target = resolve_use(path, item.path, folders)
                visit(target, [*stack, (key, file)], item)
        load.files.append(parsed)
        load.diagnostics.extend(parsed.errors)

    for path in expand_paths(paths):
        visit(path, [], None)
    return load


def _limits(decl: ast.LimitsDecl | None) -> ast.Limits:
    if decl is None:
        return ast.Limits()
    values = {item.name: item.value for item in decl.items}
    default = ast.Limits()
    return ast.Limits(
        nodes=int(values.get("nodes", default.nodes)),
        iterations=int(values.get("iterations", default.iterations)),
        seconds=float(values.get("seconds", default.seconds)),
        span=decl.span,
    )


def build_ruleset(files: Sequence[ParsedFile]) -> ast.RuleSet:
    """Merge checked files into one RuleSet (first definition wins on duplicates)."""
    ops: dict[str, ast.OpDecl] = {}
    rules: list[ast.Rule] = []
    rulesets: dict[str, ast.RulesetDecl] = {}
    fusion: list[ast.FuseEntry] = []
    schedule: ast.ScheduleDecl | None = None
    limits: ast.LimitsDecl | None = None
    for parsed in files:
        implicit = default_ruleset(parsed.source.file)
        for item in parsed.source.items:
            if isinstance(item, ast.OpDecl):
                ops.setdefault(item.name, item)
            elif isinstance(item, ast.Rule):
                rules.append(item)
                if item.ruleset == implicit and implicit not in rulesets:
                    rulesets[implicit] = ast.RulesetDecl(implicit, item.span)
            elif isinstance(item, ast.RulesetDecl):
                rulesets.setdefault(item.name, item)
            elif isinstance(item, ast.FuseEntry):
                fusion.append(item)
            elif isinstance(item, ast.ScheduleDecl):
                schedule = schedule or item
            elif isinstance(item, ast.LimitsDecl):
                limits = limits or item
    return ast.RuleSet(
        ops=ops,
        rules=tuple(rules),
        rulesets=tuple(rulesets.values()),
        schedule=schedule.steps if schedule else (),
        limits=_limits(limits),
        fusion=tuple(fusion),
        files=tuple(parsed.source.file for parsed in files),
    )
