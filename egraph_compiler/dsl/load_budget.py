"""The seconds limit, applied while rule files are read, parsed and checked.

``dnnr compile``'s ``seconds`` covers the whole compile, loading the rules included:
10,000 rules once took 393 s to load against a 20 s limit and then ran nothing. The
load cannot stop "early with what it has" (half a rule set is not a rule set), so a
load past the limit is a `LimitError` naming the limit, raised within a few
milliseconds of the deadline:

- `load_budget(started, seconds)` installs the deadline for one load (``seconds``
  None: the ``limits`` block of the rule files, else the default `Limits.seconds`);
- the loader calls `note_limits` with each file's ``limits`` block *before* parsing
  the file, so the rules' own budget binds on their own parse;
- the lexer (every `CHECK_EVERY` tokens), the tree transform and the checker (every
  item) call `check`, which costs one clock read when a deadline is set and nothing
  when none is (``dnnr check``, ``format`` and ``verify`` have no budget).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from egraph_compiler.dsl import ast
from egraph_compiler.ir.errors import LimitError

CHECK_EVERY = 64  # tokens between clock reads: ~0.1 ms of lexing


@dataclass
class _Budget:
    started: float  # time.perf_counter() when the compile started
    seconds: float
    source: str  # where the limit comes from, for the message
    fixed: bool  # given by the caller (--max-seconds): a limits block does not replace it
    place: str = ""  # what the load is doing now, for the message

    @property
    def deadline(self) -> float:
        return self.started + self.seconds


_current: _Budget | None = None


@contextmanager
def load_budget(started: float, seconds: float | None = None) -> Iterator[None]:
    """Bind loads inside the block to ``seconds`` from ``started`` (None: the rule
    files' ``limits`` block, else the default)."""
    global _current
    outer = _current
    if seconds is None:
        _current = _Budget(started, ast.Limits().seconds, "the default limits", fixed=False)
    else:
        _current = _Budget(started, seconds, "--max-seconds", fixed=True)
    try:
        yield
    finally:
        _current = outer


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block. A load allocates a few objects
    per token and keeps them (trees, spans): each full collection walks all of them
    again, which made parsing superlinear (10,000 rules: 10 s with collections,
    3.7 s without). A load makes next to no cycles; a later full collection finds them."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # the load's objects join the oldest generation as they are (freeze and
        # unfreeze move lists, O(1)): re-enabled with millions of objects in the youngest
        # generation, the first allocation would walk them all (0.5 s of a 1.5 s budget
        # once the deadline had stopped a load)
        if gc.get_freeze_count() == 0:  # (never unfreeze what someone else froze)
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()


def active() -> bool:
    return _current is not None


def note_limits(decl: ast.LimitsDecl) -> None:
    """A ``limits`` block found in a rule file: its ``seconds`` bounds the load from
    now on (the first block found wins, as `loader.build_ruleset` keeps the first)."""
    budget = _current
    if budget is None or budget.fixed or budget.source != "the default limits":
        return
    for item in decl.items:
        if item.name == "seconds" and isinstance(item.value, (int, float)) and item.value > 0:
            budget.seconds = float(item.value)
            span = decl.span
            budget.source = f"limits at {span.file}:{span.line}"
    check()


def at(place: str) -> None:
    """Name what the load does now (``parsing FILE``); the message says where it stopped."""
    if _current is not None:
        _current.place = place


def check() -> None:
    """Raise `LimitError` when the load's deadline has passed."""
    budget = _current
    if budget is None:
        return
    now = time.perf_counter()
    if now > budget.deadline:
        where = f" while {budget.place}" if budget.place else ""
        raise LimitError(
            f"error: loading the rules passed the seconds limit ({budget.seconds:g} s, {budget.source}) "
            f"after {now - budget.started:.1f} s{where}; raise 'seconds' in the limits block "
            "(or --max-seconds) or load fewer rules"
        )
