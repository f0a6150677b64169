"""One rule, every tier: the verdict, a replayed counterexample and a suggested guard."""

from __future__ import annotations

import time

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.normalize import normalize_rule
from egraph_compiler.dsl.normalize import rank_limit as verified_rank_limit
from egraph_compiler.verify.check import TierResult, check_tier
from egraph_compiler.verify.normalize import CanonRule, canonical
from egraph_compiler.verify.preconditions import search
from egraph_compiler.verify.semantics import OpSemantics
from egraph_compiler.verify.verdict import Verdict

FLOAT_TIERS = ("bf16", "fp16", "fp32")
INT_TIERS = ("bv8", "bv16", "bv32")
SEARCH_SECONDS = 12.0
ABSTRACT_SECONDS = 5.0  # the uninterpreted-scalar pre-pass of each IEEE tier
MACHINE_SECONDS = 10.0  # per IEEE / bit-vector tier  # for the precondition search of one failing rule


def tiers_for(rule: ast.Rule, sems: dict[str, OpSemantics], ops: tuple[str, ...]
              ) -> tuple[str, tuple[str, ...]]:
    """The exact tier every rule must pass, and the machine tiers checked besides."""
    if any(sems[op].integer_only for op in ops if op in sems):
        return "int", INT_TIERS
    return "real", FLOAT_TIERS if "exact" in rule.flags else ()


def verify_rule(rule: ast.Rule, sems: dict[str, OpSemantics], timeout_s: float = 60.0,
                suggest: bool = True, machine: bool = True) -> Verdict:
    start = time.monotonic()
    canon = canonical(rule, {name: s.decl for name, s in sems.items()})
    where = str(rule.span)
    if canon.problems:
        return Verdict(rule.name, where, "unknown", "semantics", (),
                       "; ".join(canon.problems), seconds=time.monotonic() - start)
    missing = [op for op in canon.ops if sems[op].elementwise is None
               and sems[op].builtin is None]
    if missing:
        names = ", ".join(f"{op} (= builtin {sems[op].decl.builtin})" if sems[op].decl.builtin
                          else op for op in missing)
        return Verdict(rule.name, where, "unknown", "semantics", (),
                       f"no verifier encoding for {names}", seconds=time.monotonic() - start)
    exact_tier, machine_tiers = tiers_for(rule, sems, canon.ops)
    if not machine:
        machine_tiers = ()
    ops = {name: s.decl for name, s in sems.items()}
    top_rank = verified_rank_limit(normalize_rule(rule, ops), ops)  # the e-graph applies it up to here
    result = check_tier(canon, sems, exact_tier, canon.guard, timeout_s, max_rank=top_rank)
    notes: list[str] = []
    if result.status != "proved":
        guard, wrong = "", False
        if result.status == "failed" and suggest and result.stage != "applicability":
            budget = min(SEARCH_SECONDS, max(2.0, timeout_s - (time.monotonic() - start)))
            search_deadline = time.monotonic() + budget

            def prove(g: ast.Expr) -> bool | None:
                left = search_deadline - time.monotonic()
                if left <= 0:
                    return None
                status = check_tier(canon, sems, exact_tier, g, left, use_fuzz=False,
                                    max_rank=top_rank).status
                return None if status == "unknown" else status == "proved"

            guard, complete = search(canon, sems, exact_tier, prove, search_deadline)
            wrong = not guard and complete
            if not guard and not complete:
                notes.append("the guard search ran out of time")
        return _verdict(rule, where, result, (), guard, wrong, notes, start)
    proved = [exact_tier]
    # bit-blasted reductions are slow: machine tiers check them at lower ranks
    reduces = any(sems[op].builtin is not None and sems[op].builtin.name.startswith(
        ("reduce_", "matmul", "reshape")) for op in canon.ops)
    reshapes = any(sems[op].builtin is not None and sems[op].builtin.name == "reshape"
                   for op in canon.ops)
    if reduces and machine_tiers:
        notes.append(f"{'/'.join(machine_tiers)} checked up to rank "
                     f"{1 if machine_tiers == INT_TIERS or reshapes else 2} "
                     "(reductions, reshapes)")
    # the abstract tiers differ only in what dtype() says: without it, one proof is all
    congruent: dict[str, bool] = {}
    per_tier = "dtype" in repr(canon.guard)
    for tier in machine_tiers:
        rank_limit = (1 if tier in INT_TIERS or reshapes else 2) if reduces else 3
        if tier in FLOAT_TIERS:
            key = tier if per_tier else "any"
            if key not in congruent:
                congruent[key] = _congruent(canon, sems, tier, timeout_s, rank_limit)
            if congruent[key]:
                proved.append(tier)
                continue
        machine = check_tier(canon, sems, tier, canon.guard, min(timeout_s, MACHINE_SECONDS),
                             max_rank=(1 if tier in INT_TIERS or reshapes else 2)
                             if reduces else 3,
                             check_shapes=False)
        if machine.status != "proved":
            notes.append(f"exact in the {exact_tier} tier, fails in {tier}")
            return _verdict(rule, where, machine, tuple(proved), "", False, notes, start)
        proved.append(tier)
    if not machine and "exact" in rule.flags:
        notes.append("machine tiers not checked (machine_tiers=False)")
    if exact_tier == "real" and "exact" not in rule.flags:
        notes.append("exact over the reals, not bit-exact in fp32 (not marked [exact])")
    return Verdict(rule.name, where, "proved", "", tuple(proved), "", None, "", False,
                   tuple(notes), time.monotonic() - start, methods=result.methods)


def _congruent(canon: CanonRule, sems: dict[str, OpSemantics], tier: str, timeout_s: float,
               max_rank: int) -> bool:
    """The rule holds with every scalar operation uninterpreted (`AbstractDomain`), so
    in IEEE ``tier`` too: the index maps alone make both sides the same function of
    the same elements, and no float reasoning is needed."""
    result = check_tier(canon, sems, f"uf_{tier}", canon.guard,
                        min(timeout_s, ABSTRACT_SECONDS), use_fuzz=False, max_rank=max_rank,
                        check_shapes=False)
    return result.status == "proved"


def _verdict(rule: ast.Rule, where: str, result: TierResult, proved: tuple[str, ...],
             guard: str, wrong: bool, notes: list[str], start: float) -> Verdict:
    message = f"[{result.tier}] {result.message}".strip()
    if result.status == "unknown":
        message += f" (after {result.seconds:.1f} s)"
    return Verdict(rule.name, where, "failed" if result.status == "failed" else "unknown",
                   result.stage, proved, message, result.counterexample, guard, wrong,
                   tuple(notes), time.monotonic() - start)
