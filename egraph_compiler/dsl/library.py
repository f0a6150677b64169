"""The rule library a compile uses: the shipped files (or ``--rules``), the user's
``--add-rules`` files, and the ``--disable-rule`` / ``--only-ruleset`` filters.

An added file's rules without a ``ruleset`` line belong to the ruleset named after
the file (``mine.dnnr`` → ``mine``, `parser.default_ruleset`). The library's
schedule does not know that name, so it is saturated together with every
``saturate`` step of the schedule (the steps that run the directed, terminating
clean-up rulesets ``fold, layout``): the added rules see the graph as imported and
after every ``algebra`` pass. A ruleset the schedule never runs is reported by
`unscheduled_rulesets` (``dnnr check`` and ``dnnr compile`` print it as a warning).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.loader import expand_paths
from egraph_compiler.dsl.parser import default_ruleset
from egraph_compiler.dsl.shipped import rules_dir
from egraph_compiler.ir.errors import DnnrError

PathLike = str | os.PathLike[str]


class RuleFilterError(DnnrError):
    """``--disable-rule`` / ``--only-ruleset`` named a rule or ruleset the load lacks."""


@dataclass(frozen=True, slots=True)
class RuleOptions:
    """What the command line says about rules, beyond the rule files themselves."""

    add: tuple[str, ...] = ()  # --add-rules FILE_OR_DIR: loaded after the library
    search: tuple[str, ...] = ()  # --rules-path DIR: where `use` looks after the using file
    disable: tuple[str, ...] = ()  # --disable-rule NAME
    only: tuple[str, ...] = ()  # --only-ruleset NAME


def step_rulesets(steps: Sequence[ast.ScheduleStep]) -> set[str]:
    """Every ruleset a schedule runs, however deeply nested."""
    names: set[str] = set()
    for step in steps:
        if isinstance(step, ast.Repeat):
            names |= step_rulesets(step.body)
        else:
            names.update(step.rulesets)
    return names


def _with_saturated(steps: tuple[ast.ScheduleStep, ...], extra: tuple[str, ...]) -> tuple[tuple[ast.ScheduleStep, ...], bool]:
    out: list[ast.ScheduleStep] = []
    placed = False
    for step in steps:
        if isinstance(step, ast.Saturate):
            step = dataclasses.replace(step, rulesets=(*step.rulesets, *extra), name_spans=())
            placed = True
        elif isinstance(step, ast.Repeat):
            body, inner = _with_saturated(step.body, extra)
            step = dataclasses.replace(step, body=body)
            placed |= inner
        out.append(step)
    return tuple(out), placed


def implicit_rulesets(rules: ast.RuleSet, files: Sequence[PathLike]) -> tuple[str, ...]:
    """The rulesets of ``files``' rules written without a ``ruleset`` line."""
    names: list[str] = []
    for path in expand_paths(files):
        implicit = default_ruleset(str(path))
        if any(r.ruleset == implicit and r.span.file == str(path) for r in rules.rules):
            names.append(implicit)
    return tuple(dict.fromkeys(names))


def schedule_added(rules: ast.RuleSet, added: Sequence[PathLike]) -> ast.RuleSet:
    """``rules`` with the added files' implicit rulesets put under the schedule (see
    the module docstring); a schedule without a ``saturate`` step gets one at the end."""
    extra = tuple(n for n in implicit_rulesets(rules, added) if n not in step_rulesets(rules.schedule))
    if not extra or not rules.schedule:  # no schedule: saturate runs every ruleset already
        return rules
    steps, placed = _with_saturated(rules.schedule, extra)
    if not placed:
        steps = (*steps, ast.Saturate(extra))
    return dataclasses.replace(rules, schedule=steps)


def _shipped(file: str) -> bool:
    try:
        library = rules_dir().resolve()
        return Path(file).resolve().is_relative_to(library)
    except (FileNotFoundError, OSError, ValueError):
        return False


def unscheduled_rulesets(rules: ast.RuleSet) -> list[ast.RulesetDecl]:
    """Rulesets with rules that the schedule never runs. The shipped library's own
    (``partition``, ``quant``: left out of its schedule on purpose, schedule.dnnr
    says why) are not listed; a load without a schedule runs every ruleset."""
    if not rules.schedule:
        return []
    scheduled = step_rulesets(rules.schedule)
    with_rules = {r.ruleset for r in rules.rules}
    return [d for d in rules.rulesets
            if d.name in with_rules and d.name not in scheduled and not _shipped(d.span.file)]


def unscheduled_warnings(rules: ast.RuleSet) -> list[str]:
    """One line per unscheduled ruleset, for the command line's stderr."""
    return [f"{decl.span}: warning: ruleset '{decl.name}' is never run by the schedule, so its "
            f"{len(rules.rules_in(decl.name))} rule(s) cannot fire\n"
            f"  hint: add it to a step of the schedule (e.g. `saturate fold, layout, {decl.name}`), "
            "or drop the `ruleset` line of a file loaded with --add-rules"
            for decl in unscheduled_rulesets(rules)]


def filter_rules(rules: ast.RuleSet, disable: Sequence[str] = (), only: Sequence[str] = ()) -> ast.RuleSet:
    """``rules`` without the ``disable``d rules and, when ``only`` names rulesets, with
    just their rules (the schedule then runs only those). Unknown names are errors."""
    names = {r.name for r in rules.rules}
    unknown = [n for n in disable if n not in names]
    if unknown:
        raise RuleFilterError(f"error: --disable-rule: no rule named {', '.join(map(repr, unknown))} "
                              f"in the loaded rule files")
    known_sets = {d.name for d in rules.rulesets} | {r.ruleset for r in rules.rules}
    unknown = [n for n in only if n not in known_sets]
    if unknown:
        raise RuleFilterError(f"error: --only-ruleset: no ruleset named {', '.join(map(repr, unknown))} "
                              f"(rulesets: {', '.join(sorted(known_sets))})")
    kept = tuple(r for r in rules.rules if r.name not in disable and (not only or r.ruleset in only))
    if not only:
        return dataclasses.replace(rules, rules=kept)
    if rules.schedule and not set(only) & step_rulesets(rules.schedule):
        # the schedule never runs these rulesets: saturate them instead of running nothing
        return dataclasses.replace(rules, rules=kept, schedule=(ast.Saturate(tuple(only)),))
    return dataclasses.replace(rules, rules=kept)


def is_operand_swap(rule: ast.Rule) -> bool:
    """``Op(?a, ?b) => Op(?b, ?a)`` (no attributes, no guard): a commute step, not a
    rewrite a reader of `dnnr explain` needs to see."""
    lhs, rhs = rule.lhs, rule.rhs
    if not (isinstance(lhs, ast.POp) and isinstance(rhs, ast.POp)) or lhs.op != rhs.op:
        return False
    if lhs.attrs or rhs.attrs or rule.guard is not None:
        return False
    if not all(isinstance(p, ast.PVar) for p in (*lhs.inputs, *rhs.inputs)):
        return False
    left = [p.name for p in lhs.inputs]  # type: ignore[union-attr]
    right = [p.name for p in rhs.inputs]  # type: ignore[union-attr]
    return sorted(left) == sorted(right) and left != right
