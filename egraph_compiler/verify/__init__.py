"""`dnnr verify`: every rule machine-checked with Z3 (DESIGN §4).

Entry point: ``verify_rules(ruleset, *, jobs=None, cache_dir=None, timeout_s=60.0)``
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
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import z3

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.normalize import normalize_rule, pinned_ranks, rank_limits
from egraph_compiler.verify import cache, check, special_values
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.normalize import canonical
from egraph_compiler.verify.render import render_json, render_text, summary
from egraph_compiler.verify.rule_check import verify_rule
from egraph_compiler.verify.semantics import OpSemantics
from egraph_compiler.verify.verdict import Counterexample, TensorValue, Verdict

__all__ = ["Counterexample", "TensorValue", "Verdict", "render_json", "render_text",
           "summary", "verify_rules"]


RETRY_SEED_OFFSET = 1000  # a second attempt's Z3 seeds (check.SEED_OFFSET)


class _Job(NamedTuple):
    """One rule to verify in a worker, and where its special-value record goes."""

    rule: ast.Rule
    ops: dict[str, ast.OpDecl] | None  # None: the parent's, inherited (`_INHERITED`)
    timeout_s: float
    suggest: bool
    machine: bool
    seed_offset: int
    cache_dir: Path
    use_cache: bool
    special_values: bool  # compute the record here too (in parallel, not in the parent)


# The operators of the rules being verified, set in the parent just before it forks its
# workers: each worker inherits them instead of unpickling them with every rule (190
# copies of the library's operators cost 6 CPU s, as much as 40 rules' proofs).
_INHERITED: tuple[dict[str, ast.OpDecl], dict[str, OpSemantics]] | None = None


def _work(job: _Job) -> tuple[Verdict, special_values.SpecialValues | None]:
    start = time.monotonic()
    check.SEED_OFFSET = job.seed_offset
    rule = job.rule
    sems = None
    ops = job.ops if job.ops is not None or _INHERITED is None else _INHERITED[0]
    job = job._replace(ops=ops)
    try:
        sems = (_INHERITED[1] if _INHERITED is not None and ops is _INHERITED[0]
                else load_semantics(ops))
        verdict = verify_rule(rule, sems, job.timeout_s, job.suggest, job.machine)
    except Exception as err:  # a verifier bug must not hide the other verdicts
        verdict = Verdict(rule.name, str(rule.span), "unknown", "semantics", (),
                          f"internal error in the verifier: {type(err).__name__}: {err}",
                          seconds=time.monotonic() - start)
    finally:
        check.SEED_OFFSET = 0
    record = None
    if job.special_values and sems is not None:
        one = ast.RuleSet(ops=job.ops, rules=(rule,))
        record = special_values.records(one, sems, job.cache_dir, job.use_cache)[rule.name]
    return verdict, record


def _fresh_z3_context() -> None:
    """Make z3py's default context a new one, as in a fresh process. The verifier keeps
    no Z3 object across rules at module level (its caches hold verdicts, not terms)."""
    z3.z3._main_ctx = None  # z3py creates its main context lazily when this is None


def _run_all(work: list[_Job], jobs: int) -> list[tuple[Verdict, special_values.SpecialValues | None]]:
    if len(work) <= 1:
        return [_work(w) for w in work]
    # Each rule in a fresh process forked from this one, with a fresh Z3 context: Z3's
    # heuristics follow its internal term ids, so a verdict must depend neither on the
    # rules checked before it nor on what this process did with Z3 before (in a test
    # worker that had run other Z3 checks, a 3 s proof ran out of its 150 s).
    global _INHERITED
    ops = work[0].ops
    shared = ops is not None and all(w.ops is ops for w in work)
    if shared:
        _INHERITED = (ops, load_semantics(ops))
        work = [w._replace(ops=None) for w in work]
    context = multiprocessing.get_context("fork")
    try:
        with context.Pool(processes=max(1, jobs), initializer=_fresh_z3_context,
                          maxtasksperchild=1) as pool:
            return pool.map(_work, work, chunksize=1)
    finally:
        _INHERITED = None


def _expected_cost(rule: ast.Rule, sems: dict[str, OpSemantics]) -> int:
    """A rough rank of a rule's verification time: reductions (an induction per
    configuration), then machine tiers ([exact]), then size."""
    ops = [op for op in canonical(rule, {n: s.decl for n, s in sems.items()}).ops
           if op in sems]
    reduces = any(sems[op].builtin is not None and sems[op].builtin.reduces for op in ops)
    return 100 * reduces + 50 * ("exact" in rule.flags) + len(ops)


def verify_rules(ruleset: ast.RuleSet, *, jobs: int | None = None, cache_dir: str | Path | None = None,
                 timeout_s: float = 60.0, use_cache: bool = True,
                 suggest_guards: bool = True, machine_tiers: bool = True) -> list[Verdict]:
    """One verdict per rule of ``ruleset``, in order (see the module docstring).
    ``timeout_s`` bounds each rule's exact tier (machine tiers get at most 10 s each,
    the guard search 12 s); ``suggest_guards=False`` skips the guard search and
    ``machine_tiers=False`` the IEEE / bit-vector tiers (the exact tier only).
    ``jobs=None`` uses every core (`dnnr compile --verified-only` too); the cache is
    `cache.default_cache_dir()` unless ``cache_dir`` is given."""
    if jobs is None:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    sems = load_semantics(ruleset.ops)
    directory = Path(cache_dir) if cache_dir is not None else cache.default_cache_dir()
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
    # likely slow rules first, so that no worker is left with one at the end
    todo.sort(key=lambda i: -_expected_cost(ruleset.rules[i], sems))
    work = [_Job(ruleset.rules[i], ruleset.ops, timeout_s, suggest_guards, machine_tiers, 0,
                 directory, use_cache, True) for i in todo]
    done_work = _run_all(work, jobs)
    results = [verdict for verdict, _ in done_work]
    known = {work[k].rule.name: record for k, (_, record) in enumerate(done_work)
             if record is not None}
    # Z3 finds some proofs in seconds on most search orders and runs out of budget on
    # an unlucky one: a rule left unknown by its solver (not by a missing encoding) gets
    # one more attempt with other seeds, and keeps the better verdict.
    again = [k for k, v in enumerate(results) if v.status == "unknown" and v.stage != "semantics"]
    retried = [verdict for verdict, _ in _run_all(
        [work[k]._replace(seed_offset=RETRY_SEED_OFFSET, special_values=False) for k in again],
        jobs)]
    for k, verdict in zip(again, retried, strict=True):
        if verdict.status != "unknown":
            results[k] = replace(verdict, seconds=verdict.seconds + results[k].seconds,
                                 notes=(*verdict.notes, "proved on a second attempt with other Z3 seeds"
                                        if verdict.ok else "decided on a second attempt with other Z3 seeds"))
    for i, verdict in zip(todo, results, strict=False):
        verdicts[i] = verdict
        if use_cache:
            cache.store(directory, keys[i], verdict)
    done = [replace(v, rank_guard=rank_guard(rule, ruleset.ops))
            for v, rule in zip(verdicts, ruleset.rules, strict=True) if v is not None]
    # [exact] checked against the records
    return special_values.attach(done, ruleset, sems, directory, use_cache, known)


def rank_guard(rule: ast.Rule, ops: dict[str, ast.OpDecl]) -> str:
    """The rank bounds the e-graph adds to ``rule``'s guard (`dsl.normalize.rank_limits`),
    as DSL text: the ranks at which its verdict was reached."""
    normal = normalize_rule(rule, ops)
    pinned = pinned_ranks(normal.guard)
    return " and ".join(f"rank(?{var}) <= {limit}"
                        for var, limit in rank_limits(normal, ops).items() if var not in pinned)
