"""`dnnr verify`: every rule machine-checked with Z3 (DESIGN §4).

Entry point: ``verify_rules(ruleset, *, jobs=1, cache_dir=None, timeout_s=60.0)``
takes a parsed `RuleSet` (operators with their `= expr` / `= builtin` semantics,
and rules) and returns one `Verdict` per rule, in order: ``proved`` (with the tiers
proved), ``failed`` (the stage that failed -- applicability, shape, definedness or
value -- a counterexample replayed in NumPy and labelled CONFIRMED or SPURIOUS, and
a suggested guard or "wrong") or ``unknown`` (a timeout, a SPURIOUS-only
counterexample or an operator without an encoding; a failure too).
``render_text`` / ``render_json`` print them. Verdicts are cached on disk (see
`cache.py`); ``jobs`` > 1 checks rules in that many processes.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import replace
from pathlib import Path

from egraph_compiler.dsl import ast
from egraph_compiler.verify import cache
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.render import render_json, render_text, summary
from egraph_compiler.verify.rule_check import verify_rule
from egraph_compiler.verify.verdict import Counterexample, TensorValue, Verdict

__all__ = ["Counterexample", "TensorValue", "Verdict", "render_json", "render_text",
           "summary", "verify_rules"]


def _work(args: tuple[ast.Rule, dict[str, ast.OpDecl], float, bool, bool]) -> Verdict:
    rule, ops, timeout_s, suggest, machine = args
    start = time.monotonic()
    try:
        return verify_rule(rule, load_semantics(ops), timeout_s, suggest, machine)
    except Exception as err:  # a verifier bug must not hide the other verdicts
        return Verdict(rule.name, str(rule.span), "unknown", "semantics", (),
                       f"internal error in the verifier: {type(err).__name__}: {err}",
                       seconds=time.monotonic() - start)


def verify_rules(ruleset: ast.RuleSet, *, jobs: int = 1, cache_dir: str | Path | None = None,
                 timeout_s: float = 60.0, use_cache: bool = True,
                 suggest_guards: bool = True, machine_tiers: bool = True) -> list[Verdict]:
    """One verdict per rule of ``ruleset``, in order (see the module docstring).
    ``timeout_s`` bounds each rule's exact tier (machine tiers get at most 10 s each,
    the guard search 12 s); ``suggest_guards=False`` skips the guard search and
    ``machine_tiers=False`` the IEEE / bit-vector tiers (the exact tier only)."""
    sems = load_semantics(ruleset.ops)
    directory = Path(cache_dir) if cache_dir is not None else cache.default_cache_dir(ruleset)
    verdicts: list[Verdict | None] = [None] * len(ruleset.rules)
    keys = [cache.cache_key(rule, sems, f"{timeout_s}/{suggest_guards}/{machine_tiers}")
            for rule in ruleset.rules]
    todo: list[int] = []
    for i, key in enumerate(keys):
        start = time.monotonic()
        hit = cache.load(directory, key) if use_cache else None
        if hit is not None:
            verdicts[i] = replace(hit, cached=True, seconds=time.monotonic() - start,
                                  location=str(ruleset.rules[i].span))
        else:
            todo.append(i)
    work = [(ruleset.rules[i], ruleset.ops, timeout_s, suggest_guards, machine_tiers)
            for i in todo]
    if len(work) > 1:
        # Each rule in a fresh process forked from this one: Z3's heuristics follow its
        # internal term ids, so a verdict must not depend on the rules checked before it.
        context = multiprocessing.get_context("fork")
        with context.Pool(processes=max(1, jobs), maxtasksperchild=1) as pool:
            results = pool.map(_work, work, chunksize=1)
    else:
        results = [_work(w) for w in work]
    for i, verdict in zip(todo, results, strict=False):
        verdicts[i] = verdict
        if use_cache:
            cache.store(directory, keys[i], verdict)
    return [v for v in verdicts if v is not None]
