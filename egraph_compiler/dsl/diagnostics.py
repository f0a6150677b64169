"""Diagnostics of the rule language: a closed set of error kinds, each printed as

    file:line:col: error: message
    <the source line>
    ^~~~ under the span
      hint: ...

`DslError` carries every diagnostic of a load; its str() is the full report ending
in ``found N errors``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from egraph_compiler.dsl.ast import Span
from egraph_compiler.ir.errors import DnnrError


class DslError(DnnrError):
    """Bad rule-language input. ``diagnostics`` holds every error found; str() prints them all."""

    title = "error"

    def __init__(self, diagnostics: Sequence[Diagnostic] = ()) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__(render_report(self.diagnostics))

    def __str__(self) -> str:
        return render_report(self.diagnostics)


class DslParseError(DslError):
    """The text does not follow the grammar."""


class UseError(DslError):
    """A file (or a ``use``d file) cannot be read, or ``use`` forms a cycle."""


class UnknownNameError(DslError):
    """A name that is not declared: operator, attribute, operand, built-in, ruleset, class,
    fusion verdict, attribute type, flag or limit."""


class ArityError(DslError):
    """Wrong number of operands, built-in arguments, or a missing required attribute."""


class UnboundVariableError(DslError):
    """A variable used on a right-hand side or in a guard that the left-hand side does not bind."""


class MisuseError(DslError):
    """A well-formed construct in the wrong place: a computed constant on a left-hand side,
    an attribute variable where a tensor is expected, a limit of the wrong type."""


class DuplicateError(DslError):
    """Two definitions of one name (rule, op, attribute, parameter) or two schedules/limits;
    carries the first definition as a secondary span."""


@dataclass(frozen=True, slots=True)
class Note:
    """A secondary location, e.g. the first definition of a duplicated name."""

    span: Span
    message: str
    source_line: str | None = None


@dataclass(frozen=True, slots=True)
class Diagnostic:
    kind: type[DslError]
    message: str
    span: Span
    hint: str = ""
    source_line: str | None = None
    notes: tuple[Note, ...] = ()

    @property
    def code(self) -> str:
        """The kind's name, e.g. ``UnknownNameError`` (for machine-readable output)."""
        return self.kind.__name__

    def __str__(self) -> str:
        lines = [f"{_location(self.span)}: error: {self.message}"]
        lines += _excerpt(self.span, self.source_line, indent="")
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        for note in self.notes:
            lines.append(f"  {_location(note.span)}: note: {note.message}")
            lines += _excerpt(note.span, note.source_line, indent="  ")
        return "\n".join(lines)


def _location(span: Span) -> str:
    return str(span) if span.line > 0 else span.file


def _excerpt(span: Span, source_line: str | None, indent: str) -> list[str]:
    if source_line is None or span.line <= 0:
        return []
    text = source_line.expandtabs(1)
    start = max(span.col - 1, 0)
    end = span.end_col - 1 if span.end_line == span.line else len(text)
    width = max(end - start, 1)
    return [indent + text, indent + " " * start + "^" + "~" * (width - 1)]


def render_report(diagnostics: Sequence[Diagnostic]) -> str:
    if not diagnostics:
        return "no errors"
    count = len(diagnostics)
    footer = f"found {count} error" + ("" if count == 1 else "s")
    return "\n\n".join(str(d) for d in diagnostics) + "\n\n" + footer


def error_for(diagnostics: Sequence[Diagnostic]) -> DslError:
    """The exception to raise: the common kind when all diagnostics share one, else DslError."""
    kinds = {d.kind for d in diagnostics}
    kind = kinds.pop() if len(kinds) == 1 else DslError
    return kind(diagnostics)


class SourceLines:
    """The text of every loaded file, to quote the offending line in a diagnostic."""

    def __init__(self) -> None:
        self._lines: dict[str, list[str]] = {}

    def add(self, file: str, text: str) -> None:
        self._lines[file] = text.splitlines()

    def line(self, span: Span) -> str | None:
        lines = self._lines.get(span.file)
        if lines is None or not 1 <= span.line <= len(lines):
            return None
        return lines[span.line - 1]

    def diagnostic(
        self,
        kind: type[DslError],
        message: str,
        span: Span,
        hint: str = "",
        notes: Sequence[tuple[Span, str]] = (),
    ) -> Diagnostic:
        return Diagnostic(
            kind,
            message,
            span,
            hint,
            self.line(span),
            tuple(Note(s, m, self.line(s)) for s, m in notes),
        )
