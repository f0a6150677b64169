"""The refinement check of one rule in one tier, stage by stage.

For every configuration (`configs.py`), with ``L``/``R`` the two sides:
1. applicability: ``wf(L) and guard`` is satisfiable for some configuration;
2. shape: ``wf(L) and guard`` implies ``wf(R)`` and equal ranks and dims;
3. definedness: at every in-bounds index, ``L`` is defined iff ``R`` is. Both
   ways: an e-graph merge is symmetric, so extraction may put ``L`` where ``R``
   was (a rule that only *removes* undefined behaviour, such as
   ``Div(?x, ?x) => 1``, would otherwise let extraction add it back);
4. value: where both are defined, the elements are equal (bit-exact in IEEE tiers).
Reductions are proved for every length by induction over a prefix ``m`` (base
m = 1, step m -> m + 1), all reductions of the rule sharing one enumeration of their
index space and the hypothesis being the goal itself. Where that does not close, a
paired induction: each LHS reduction paired with an RHS one over equal extents (one
split in two at a Concat boundary by the proved `lemmas.split_reduction`), each pair
with its own enumeration, the hypothesis that every pair's partial results agree.
Otherwise the reductions are unrolled for lengths <= 4 (a model there is a real
counterexample) and the verdict is `unknown` if none is found.

Every Z3 check runs under a resource limit (`Budget`, `RLIMIT_PER_SECOND`), not a
wall-clock timeout, so that a verdict does not depend on the machine's load.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import z3

from egraph_compiler.dsl import ast
from egraph_compiler.verify import contraction, evalexpr
from egraph_compiler.verify.builtin_ops import Undefined
from egraph_compiler.verify.configs import RANK_LIMIT, enumerate_configs, guard_refuted
from egraph_compiler.verify.encode import (
    Config,
    DoesNotFire,
    Encoder,
    Illformed,
    Reduction,
    Unsupported,
)
from egraph_compiler.verify.fuzz import FuzzFinding, compare, fuzz, shrink
from egraph_compiler.verify.lemmas import split_reduction
from egraph_compiler.verify.normalize import (
    CanonRule,
    boolean_vars,
    list_used_vars,
    subpatterns,
)
from egraph_compiler.verify.scalar import AbstractDomain, Domain
from egraph_compiler.verify.semantics import OpSemantics
from egraph_compiler.verify.verdict import Counterexample, TensorValue

MAX_CONFIGS = 4000
RETRY_SEEDS = (1, 2)  # Z3 seeds tried after an 'unknown' that is not a spent budget
# Added to every Z3 seed: `verify_rules` checks a rule whose budget ran out once more
# with another offset, in a fresh process (a proof Z3 finds in 3 s on most search
# orders can run out of budget on an unlucky one).
SEED_OFFSET = 0
INDUCTION_SECONDS = 8.0  # per induction check (base, step); a proof takes 1-2 s
BOUNDED_SECONDS = 5.0  # per unrolled check once the induction has not closed
# Z3 budgets are resource limits ("rlimit", counted by Z3 itself), so a verdict does not
# depend on the machine's load: a "second" of budget is RLIMIT_PER_SECOND units. Z3 does
# 0.4 to 2.8 M units per CPU second on the shipped library's longer checks (1.4 M on
# average), about 5 M on the QDQ counterexample searches of the mutation suite: 3 M
# keeps every budget within a factor 2 of what it was in wall-clock seconds (measure:
# `python benchmarks/verify.py --calibrate`).
RLIMIT_PER_SECOND = 3_000_000
WALL_SLACK = 5.0  # a wall-clock timeout this many times the budget: a safety net only
SMALL_FIRST_SECONDS = 1.0
PLAIN_SECONDS = 1.0  # an induction check without the function axioms first (`_closes`)  # a quick look for a small counterexample (`_check_config`)


@dataclass
class Budget:
    """What Z3 may still do for one tier of one rule: resource units, and a wall-clock
    deadline far beyond them (reached only where Z3 stops counting)."""

    units: int
    wall_deadline: float

    @classmethod
    def of_seconds(cls, seconds: float) -> Budget:
        return cls(int(seconds * RLIMIT_PER_SECOND), time.monotonic() + seconds * WALL_SLACK)

    def wall_left(self) -> float:
        return self.wall_deadline - time.monotonic()

    def exhausted(self, seconds: float = 0.0) -> bool:
        """Less than ``seconds`` of budget is left."""
        return self.units <= seconds * RLIMIT_PER_SECOND or self.wall_left() <= 0


@dataclass
class TierResult:
    tier: str
    status: str  # proved | failed | unknown
    stage: str = ""
    message: str = ""
    counterexample: Counterexample | None = None
    seconds: float = 0.0
    methods: tuple[str, ...] = ()  # proof methods besides the default (`contraction.METHOD`)


@dataclass
class _Sides:
    enc: Encoder
    guard: Any
    lhs_dims: list[Any]
    wf_lhs: list[Any]
    rhs_dims: list[Any] | None
    wf_rhs: list[Any]
    rhs_error: str
    guard_expr: ast.Expr | None = None


def make_domain(tier: str) -> Domain:
    """``uf_<tier>``: the IEEE tier with uninterpreted scalar operations (proofs only)."""
    return AbstractDomain(tier[3:]) if tier.startswith("uf_") else Domain(tier)


def _build(canon: CanonRule, sems: dict[str, OpSemantics], tier: str, config: Config,
           guard: ast.Expr | None, mode: str = "bounded", m: Any = None,
           plan: _Plan | None = None) -> _Sides | None:
    """Both sides' shapes and the guard of ``config`` in ``mode`` (None where the rule
    does not apply). The shape stage does not depend on the mode: it is encoded once
    per configuration (`_shape_stage`) and each mode gets a fork of that encoder."""
    stage = _shape_stage(canon, sems, tier, config, guard)
    if stage is None:
        return None
    template, guard_term, lhs_dims, wf_lhs, rhs_dims, wf_rhs, error = stage
    enc = template.fork(mode, m)
    if plan is not None:
        enc.groups, enc.splits = dict(plan.groups), dict(plan.splits)
    return _Sides(enc, guard_term, list(lhs_dims), list(wf_lhs),
                  None if rhs_dims is None else list(rhs_dims), list(wf_rhs), error, guard)


_Stage = tuple[Encoder, Any, list[Any], list[Any], list[Any] | None, list[Any], str]
# The shape stage of each configuration met in this tier of this rule (`check_tier`
# clears it), by (rule, tier, configuration, guard), with the semantics and the Z3
# context it was built for: the plain encoding and the induction's prefix, base and
# step encodings (and the paired induction's) share it.
_SHAPE_STAGES: dict[Any, tuple[Any, Any, _Stage | None]] = {}


def _shape_stage(canon: CanonRule, sems: dict[str, OpSemantics], tier: str, config: Config,
                 guard: ast.Expr | None) -> _Stage | None:
    key = (canon, tier, repr(config), guard)  # (an attribute's value may be a list)
    ctx = z3.main_ctx()
    hit = _SHAPE_STAGES.get(key)
    if hit is not None and hit[0] is sems and hit[1] is ctx:
        return hit[2]
    stage = _encode_shapes(canon, sems, tier, config, guard)
    if stage is not None and not stage[0].shapes_only():
        return _encode_shapes(canon, sems, tier, config, guard)  # not reusable: never cached
    if len(_SHAPE_STAGES) > 256:
        _SHAPE_STAGES.clear()
    _SHAPE_STAGES[key] = (sems, ctx, stage)
    return stage


def _encode_shapes(canon: CanonRule, sems: dict[str, OpSemantics], tier: str, config: Config,
                   guard: ast.Expr | None, mode: str = "bounded", m: Any = None
                   ) -> _Stage | None:
    """The shape stage in a fresh encoder (in ``mode``: what `Encoder.fork` must equal)."""
    valued, booleans = _var_kinds(canon, sems)
    enc = Encoder(sems, make_domain(tier), config, dict(canon.const_values), mode, m,
                  valued_vars=valued, boolean_vars=booleans)
    _bind_attributes(enc, canon.lhs)
    try:
        lhs_dims, wf_lhs = enc.shape_of(canon.lhs)
        guard_term = enc.guard(guard)
    except (Illformed, evalexpr.NotApplicable):
        return None
    if guard_term is False:
        return None
    if guard_term is True:
        guard_term = z3.BoolVal(True)
    try:
        rhs_dims, wf_rhs = enc.shape_of(canon.rhs)
        error = ""
        if len(rhs_dims) != len(lhs_dims):
            error = f"RHS has rank {len(rhs_dims)}, LHS rank {len(lhs_dims)}"
    except DoesNotFire:
        return None
    except (Illformed, evalexpr.NotApplicable) as err:
        rhs_dims, wf_rhs, error = None, [], f"RHS is ill-formed: {err}"
    if enc.fires:  # the rule fires only where its shape built-ins are defined
        guard_term = z3.And(guard_term, *enc.fires)
    return enc, guard_term, lhs_dims, wf_lhs, rhs_dims, wf_rhs, error


_VAR_KINDS: dict[Any, tuple[dict[str, OpSemantics], tuple[Any, Any]]] = {}


def _var_kinds(canon: CanonRule, sems: dict[str, OpSemantics]) -> tuple[Any, Any]:
    """The rule's tensors read as int lists, and its boolean tensors: one walk of the
    rule, not one per encoding (a rule has thousands of configurations)."""
    hit = _VAR_KINDS.get(canon)
    if hit is not None and hit[0] is sems:
        return hit[1]
    kinds = (list_used_vars(canon), boolean_vars(canon, {n: s.decl for n, s in sems.items()}))
    if len(_VAR_KINDS) > 64:
        _VAR_KINDS.clear()
    _VAR_KINDS[canon] = (sems, kinds)
    return kinds


def _bind_attributes(enc: Encoder, lhs: ast.Pattern) -> None:
    """Give every left-hand attribute variable its symbolic value before the guard reads
    it: an elementwise operator's shape does not ask for its attributes, so a guard over
    float attributes (``?a <= ?c`` of two Clips) would find them unbound."""
    for node in subpatterns(lhs):
        if isinstance(node, ast.POp):
            try:
                enc.attrs(node)
            except (Illformed, evalexpr.NotApplicable, DoesNotFire):
                pass  # decided where the node's shape or value needs them


def _dims_equal(sides: _Sides) -> list[Any]:
    assert sides.rhs_dims is not None
    return [a == b for a, b in zip(sides.lhs_dims, sides.rhs_dims, strict=False)]


def rlimit_count(s: z3.Solver) -> int:
    """Z3's resource counter (process-wide, so a difference is one check's work). It
    is the fourth statistic from the end (before the memory and time ones): looked up
    there first, since reading every key costs as much as a small check."""
    stats = s.statistics()
    ctx, ref = stats.ctx.ref(), stats.stats
    size = z3.Z3_stats_size(ctx, ref)
    for k in (size - 4, *range(size)):
        if 0 <= k < size and z3.Z3_stats_get_key(ctx, ref, k) == "rlimit count":
            if z3.Z3_stats_is_uint(ctx, ref, k):
                return int(z3.Z3_stats_get_uint_value(ctx, ref, k))
            return int(z3.Z3_stats_get_double_value(ctx, ref, k))
    return 0


class _Solver:
    """Each check gets ``seconds`` of Z3 work (`RLIMIT_PER_SECOND`), within what is
    left of ``budget`` (the tier's), which it spends."""

    def __init__(self, seconds: float, budget: Budget | None = None,
                 slack: float = WALL_SLACK) -> None:
        self.solver = _tier_solver()
        self.seconds = seconds
        self.budget = budget
        self.slack = slack  # the wall-clock cap, in budgets (Z3 does not count everywhere)

    def _run(self, seed: int) -> Any:
        s = self.solver
        units, wall = int(self.seconds * RLIMIT_PER_SECOND), self.seconds * self.slack
        if self.budget is not None:
            units, wall = min(units, self.budget.units), min(wall, self.budget.wall_left())
        s.set("rlimit", max(1, units), "timeout", max(1, int(wall * 1000)), "random_seed", seed + SEED_OFFSET)
        before = rlimit_count(s)
        result = s.check()
        if self.budget is not None:
            self.budget.units -= rlimit_count(s) - before
        return result

    def check(self, facts: list[Any], small: Callable[[], list[Any]] | None = None,
              retry_spent: bool = False) -> tuple[str, Any]:
        """``small``: the preferred model's constraints, built only if a model is found
        (most checks are proofs). ``retry_spent``: retry other seeds after a spent budget
        too (a search for a counterexample, which Z3 finds or not by the luck of its
        search order)."""
        key = _query_key(facts)
        if key is not None and key in _PROVED:
            return "unsat", None
        s = self.solver
        s.push()
        s.add(*facts)
        result = self._run(0)
        for seed in RETRY_SEEDS:  # nonlinear tactics give up by luck: retry other seeds
            spent = any(word in s.reason_unknown() for word in ("timeout", "cancel", "resource"))
            if result != z3.unknown or (spent and not retry_spent) or (
                    self.budget is not None and self.budget.exhausted(0.5)):
                break
            result = self._run(seed)
        model = None
        if result == z3.sat:
            model = s.model()
            preferred = small() if small is not None else []
            if preferred:
                s.push()
                s.add(*preferred)
                if s.check() == z3.sat:
                    model = s.model()
                s.pop()
        s.pop()
        if result == z3.unsat and key is not None:
            _PROVED[key] = facts  # (the terms stay alive, so their ids are not reused)
        return str(result), model


# The Z3 solver of this tier of this rule (`check_tier` clears it), with the context it
# belongs to: every check pushes its facts and pops them, so one solver serves them
# all. A fresh solver costs about 1 ms before its first check (its first push sets up
# Z3's SMT kernel), as much as most of the library's checks.
_SOLVER: list[tuple[Any, z3.Solver]] = []


def _tier_solver() -> z3.Solver:
    ctx = z3.main_ctx()
    if not _SOLVER or _SOLVER[0][0] is not ctx:
        _SOLVER[:] = [(ctx, z3.Solver())]
    return _SOLVER[0][1]


# Queries proved unsat in this tier of this rule (`check_tier` clears it), by the ids of
# their assertions: Z3 shares structurally equal terms, so a configuration whose query
# is one already proved (another rank of a variable the query does not read, another
# enumerated attribute value it does not use) needs no second proof.
_PROVED: dict[frozenset[int], list[Any]] = {}


def _query_key(facts: list[Any]) -> frozenset[int] | None:
    if not all(isinstance(f, z3.ExprRef) for f in facts):
        return None
    return frozenset(f.get_id() for f in facts)


def _small_dims(sides: _Sides) -> list[Any]:
    return ([d <= 3 for var, _ in sides.enc.config.ranks for d in sides.enc.shape(var)]
            + sides.enc.hints)


def check_tier(canon: CanonRule, sems: dict[str, OpSemantics], tier: str,
               guard: ast.Expr | None, timeout_s: float, use_fuzz: bool = True,
               max_rank: int = RANK_LIMIT, check_shapes: bool = True) -> TierResult:
    """One tier's verdict. Machine tiers pass ``check_shapes=False``: shapes do not
    depend on the element type, the exact tier has checked them."""
    start = time.monotonic()
    budget = Budget.of_seconds(timeout_s)
    _FULL_FIRST.clear()
    _PAIRED_FIRST.clear()
    _PROVED.clear()
    _SHAPE_STAGES.clear()
    _SOLVER.clear()
    try:
        configs = _configs(canon, sems, max_rank, guard)
    except Unsupported as err:
        return TierResult(tier, "unknown", "semantics", str(err))
    if len(configs) > MAX_CONFIGS:
        return TierResult(tier, "unknown", "semantics",
                          f"{len(configs)} configurations to check (limit {MAX_CONFIGS})")
    if use_fuzz:
        found = fuzz(canon, sems, tier, [c for c, _ in configs], guard,
                     budget=48 if tier in ("real", "int") else 96)
        if found is not None:
            found = shrink(canon, sems, tier, [c for c, _ in configs], guard, found)
            cex = _from_fuzz(found, tier)
            return TierResult(tier, "failed", found.stage, found.explanation, cex,
                              time.monotonic() - start)
    applicable = False
    methods: dict[str, None] = {}
    unknown: TierResult | None = None
    spurious: TierResult | None = None
    for config, role in configs:
        if role == "rank" and _same_rank(canon, sems, config):
            continue  # covered by the configurations with these variables at rank 3 and 0
        if not check_shapes and role != "values":
            continue  # (`_configs` dropped those ``guard`` refutes from ranks alone)
        values_needed = role == "values"
        if budget.exhausted():
            return TierResult(tier, "unknown", "", f"timeout after {timeout_s:.1f} s of Z3 "
                              "work (its resource limit)", None, time.monotonic() - start)
        try:
            outcome = _check_config(canon, sems, tier, config, values_needed, guard, budget,
                                    check_shapes, applicable_known=applicable)
        except Unsupported as err:
            return TierResult(tier, "unknown", "semantics", str(err), None,
                              time.monotonic() - start)
        if outcome is None:
            continue
        applicable = True
        if outcome.status == "proved":
            methods.update(dict.fromkeys(outcome.methods))
            continue
        outcome.seconds = time.monotonic() - start
        if outcome.status == "failed":
            if outcome.counterexample is None or outcome.counterexample.replay == "CONFIRMED":
                return outcome
            spurious = spurious or outcome
        else:
            unknown = unknown or outcome
    elapsed = time.monotonic() - start
    if not applicable:
        return TierResult(tier, "failed", "applicability",
                          "the left-hand side (with its guard) never matches anything",
                          None, elapsed)
    if spurious is not None:
        spurious.status = "unknown"
        spurious.message += " (the only counterexamples found are SPURIOUS)"
        return spurious
    if unknown is not None:
        unknown.seconds = elapsed
        return unknown
    return TierResult(tier, "proved", "", "", None, elapsed, tuple(methods))


_CONFIGS: dict[Any, tuple[dict[str, OpSemantics], list[tuple[Config, str]]]] = {}


def _configs(canon: CanonRule, sems: dict[str, OpSemantics], max_rank: int,
             guard: ast.Expr | None) -> list[tuple[Config, str]]:
    """`enumerate_configs`, remembered: a rule's tiers (and guard candidates) enumerate
    the same configurations, and enumerating them costs as much as a proof."""
    key = (canon, max_rank, guard, id(sems))
    hit = _CONFIGS.get(key)
    if hit is not None and hit[0] is sems:
        return hit[1]
    # configurations the guard refutes from ranks and enumerated attributes alone are
    # dropped before counting (a Slice's axes at rank 4 under `len(?sa) == 1`)
    configs = [(c, role) for c, role in enumerate_configs(canon, sems, tuple(range(max_rank + 1)),
                                                          guard)
               if not guard_refuted(guard, c)]
    if len(_CONFIGS) > 64:
        _CONFIGS.clear()
    _CONFIGS[key] = (sems, configs)
    return configs


def _same_rank(canon: CanonRule, sems: dict[str, OpSemantics], config: Config) -> bool:
    """Both sides have the same rank (or the rule does not apply here)."""
    from egraph_compiler.verify.configs import rank_of

    try:
        lhs = rank_of(canon.lhs, sems, config.rank_of, config.attr_of)
    except (Illformed, evalexpr.NotApplicable):
        return True
    try:
        return lhs == rank_of(canon.rhs, sems, config.rank_of, config.attr_of)
    except (Illformed, evalexpr.NotApplicable):
        return False


def _check_config(canon: CanonRule, sems: dict[str, OpSemantics], tier: str, config: Config,
                  values_needed: bool, guard: ast.Expr | None,
                  budget: Budget, check_shapes: bool = True,
                  applicable_known: bool = False) -> TierResult | None:
    """None when the LHS does not apply under ``config``; else this config's result.
    ``applicable_known``: some other configuration applies, so this one needs its own
    applicability check only where a later check does not prove (`_applies`)."""
    sides = _build(canon, sems, tier, config, guard)
    if sides is None:
        return None
    solver = _Solver(20.0, budget)
    base = sides.enc.background() + sides.wf_lhs + [sides.guard]
    # Where the shape check follows, its "unsat" (of base and more) settles this
    # configuration whether or not base alone is satisfiable: the applicability check
    # is then needed only to report the first applicable configuration, or once a
    # later check fails (it decides between "not applicable here" and the failure).
    if applicable_known and check_shapes and not sides.rhs_error:
        outcome = _check_applicable(canon, sems, tier, config, values_needed, guard, budget,
                                    check_shapes, sides, solver, base, None)
        if outcome.status == "proved":
            return outcome
        applies = _applies(solver, base, sides, tier, config)
        return outcome if isinstance(applies, tuple) else applies
    applies = _applies(solver, base, sides, tier, config)
    if not isinstance(applies, tuple):
        return applies
    model = applies[1]
    if sides.rhs_error:
        return _failure(canon, sems, tier, sides, model, "shape", sides.rhs_error)
    return _check_applicable(canon, sems, tier, config, values_needed, guard, budget,
                             check_shapes, sides, solver, base, model)


def _check_applicable(canon: CanonRule, sems: dict[str, OpSemantics], tier: str,
                      config: Config, values_needed: bool, guard: ast.Expr | None,
                      budget: Budget, check_shapes: bool, sides: _Sides, solver: _Solver,
                      base: list[Any], model: Any) -> TierResult:
    """`_check_config` from the shape check on (``model``: the applicability check's)."""
    enc = sides.enc
    if check_shapes:
        shape_ok = z3.And(*sides.wf_rhs, *_dims_equal(sides))
        status, model = solver.check(base + [z3.Not(shape_ok)], lambda: _small_dims(sides))
        if status != "unsat":
            return _failure(canon, sems, tier, sides, model, "shape",
                            "RHS shape differs from LHS shape or RHS is ill-formed", status)
    if not values_needed:
        return TierResult(tier, "proved")
    if tier == "real" and contraction.applies(canon, sems):  # MatMul chains, every length
        idx = [z3.Int(f"i{k}") for k in range(len(sides.lhs_dims))]
        facts = (enc.background() + sides.wf_lhs + [sides.guard] + sides.wf_rhs
                 + _dims_equal(sides)
                 + [z3.And(i >= 0, i < d) for i, d in zip(idx, sides.lhs_dims, strict=True)])
        quick = _Solver(2.0, budget)
        if contraction.prove(canon, sems, enc, idx, facts, lambda f: quick.check(f)[0]):
            return TierResult(tier, "proved", methods=(contraction.METHOD,))
    # reductions: an induction proof first, it is cheaper than unrolling (encoding the
    # unrolled sides costs more than the proof: try it before encoding them)
    proof: TierResult | None = None
    if any(sems[op].builtin is not None and sems[op].builtin.reduces for op in canon.ops):
        try:
            proof = _induction(canon, sems, tier, config, guard, budget)
        except Illformed:  # the unrolled encoding below says what is ill-formed
            proof = None
        if proof is not None and proof.status == "proved":
            return proof
    try:
        idx = [z3.Int(f"i{k}") for k in range(len(sides.lhs_dims))]
        vl, dl = enc.value_of(canon.lhs, idx)
        vr, dr = enc.value_of(canon.rhs, idx)
    except Illformed as err:
        return _failure(canon, sems, tier, sides, model, "shape", str(err))
    if enc.bounds:
        if proof is None:
            proof = _induction(canon, sems, tier, config, guard, budget)
            if proof.status == "proved":
                return proof
        # what follows can only find a counterexample at small lengths (the verdict is
        # unknown otherwise): those are found in seconds, a proof for them is useless
        solver = _Solver(BOUNDED_SECONDS, budget)
    inside = [z3.And(i >= 0, i < d) for i, d in zip(idx, sides.lhs_dims, strict=False)]
    facts = (enc.background() + sides.wf_lhs + [sides.guard] + sides.wf_rhs
             + _dims_equal(sides) + inside + enc.bounds)

    def search(bad: list[Any]) -> tuple[str, Any]:
        if enc.bounds:  # a counterexample search: small ones (what NumPy replays) first
            status, model = _Solver(SMALL_FIRST_SECONDS, budget, slack=2.0).check(
                facts + bad + _small_dims(sides), retry_spent=True)
            if status == "sat":
                return status, model
        return solver.check(facts + bad, lambda: _small_dims(sides), retry_spent=bool(enc.bounds))

    if not enc.bounds:
        # both halves at once: "unsat" proves this configuration (the common case);
        # otherwise the two checks below say which half fails, as they always did
        either = z3.Or(dl != dr, z3.And(dl, dr, z3.Not(enc.domain.equal(vl, vr))))
        status, _ = solver.check(facts + [either])
        if status == "unsat":
            return TierResult(tier, "proved")
    status, model = search([dl != dr])
    if status != "unsat":
        return _failure(canon, sems, tier, sides, model, "definedness",
                        "one side is undefined where the other is defined", status)
    status, model = search([dl, dr, z3.Not(enc.domain.equal(vl, vr))])
    if status != "unsat":
        return _failure(canon, sems, tier, sides, model, "value", "LHS and RHS values differ",
                        status)
    if enc.bounds and proof is not None:
        return proof
    return TierResult(tier, "proved")


def _applies(solver: _Solver, base: list[Any], sides: _Sides, tier: str,
             config: Config) -> tuple[str, Any] | TierResult | None:
    """The applicability check of one configuration: ("sat", a model; small where the
    RHS is ill-formed, the model is then a counterexample), None where the LHS does not
    apply, an `unknown` result where Z3 cannot tell."""
    status, model = solver.check(base, (lambda: _small_dims(sides)) if sides.rhs_error else None)
    if status == "unsat":
        return None
    if status == "unknown":
        return TierResult(tier, "unknown", "applicability", f"Z3 unknown ({config.describe()})")
    return status, model


def _failure(canon: CanonRule, sems: dict[str, OpSemantics], tier: str, sides: _Sides,
             model: Any, stage: str, message: str, status: str = "sat") -> TierResult:
    if status == "unknown" or model is None or tier.startswith("uf_"):
        # the abstract tier only proves: its models need not be IEEE counterexamples
        return TierResult(tier, "unknown", stage,
                          f"Z3 returned unknown ({sides.enc.config.describe()})")
    cex = _counterexample(canon, sems, tier, sides, model, message)
    return TierResult(tier, "failed", stage, message, cex)


# ---------------------------------------------------------------- induction
def _induction(canon: CanonRule, sems: dict[str, OpSemantics], tier: str, config: Config,
               guard: ast.Expr | None, budget: Budget) -> TierResult:
    """Induction over the prefix length m of one enumeration of the reduced index
    space: the rule holds for the first element (base) and, if it holds for the
    prefix m, for the prefix m + 1 (step)."""
    m = z3.Int("m")
    built = {"prefix": _induction_sides(canon, sems, tier, config, guard, "prefix", m)}
    if not built["prefix"].sides.enc.reductions:
        return TierResult(tier, "unknown", "value", "no reduction to induct on")
    built.update((mode, _induction_sides(canon, sems, tier, config, guard, mode, m))
                 for mode in ("base", "step"))
    prefix = built["prefix"].sides
    paired: TierResult | None = None
    if _PAIRED_FIRST:
        # an earlier configuration of this tier needed the paired induction after the
        # shared one failed (the LayerNorm folds: 0.2 s of `unknown` each): its
        # configurations are alike, so the paired one goes first; the shared one still
        # runs if it does not prove, so a verdict never depends on the order
        paired = _paired_induction(canon, sems, tier, config, guard, built["prefix"], budget)
        if paired.status == "proved":
            return paired
    tried: list[TierResult] = []

    def detour() -> None:
        """Before the shared induction's first check with the function axioms (up to
        INDUCTION_SECONDS of Z3 work): the paired induction, once. qdq-gemm-nobias's
        step spends 11 s there to return unknown where the paired one proves in 0.03 s;
        where the paired one fails (the BatchNorm folds) it costs a few hundredths."""
        if paired is None and not tried:
            tried.append(_paired_induction(canon, sems, tier, config, guard,
                                           built["prefix"], budget))
            if tried[0].status == "proved":
                raise _Detour(tried[0])

    same = _same_index_space(prefix, prefix.enc.reductions)
    if not same:
        outcome = TierResult(tier, "unknown", "value", "holds for reduced lengths <= 4; the "
                             "reductions differ in their index spaces, so no induction")
    else:
        try:
            outcome = _shared_induction(tier, built, m, budget, detour)
        except _Detour as proof:
            _PAIRED_FIRST.add(True)
            return proof.result
    if outcome.status == "proved" or paired is not None or tried or budget.exhausted(1.0):
        return outcome
    paired = _paired_induction(canon, sems, tier, config, guard, built["prefix"], budget)
    if paired.status == "proved" and same:
        _PAIRED_FIRST.add(True)
    return paired if paired.status == "proved" else outcome


class _Detour(Exception):
    """The paired induction proved the configuration in the middle of the shared one."""

    def __init__(self, result: TierResult) -> None:
        super().__init__(result.status)
        self.result = result


# set (non-empty) in a tier of a rule (`check_tier` clears it) where the shared
# induction failed and the paired one proved: later configurations try paired first.
_PAIRED_FIRST: set[bool] = set()


@dataclass
class _Induction:
    """One side-by-side encoding in an induction mode: the goal (both sides agree at
    the index ``i``), what is assumed, and how many reductions the LHS met."""

    sides: _Sides
    goal: Any
    assumptions: list[Any]
    lhs_reductions: int
    plain: list[Any]  # the assumptions without the scalar functions' axioms
    parts: tuple[Any, Any]  # the goal's two halves: definedness, value


@dataclass
class _Plan:
    """Paired induction: each LHS reduction with its RHS partner, sharing an
    enumeration (``groups``: key -> name), after ``splits`` (key -> boundary)."""

    groups: dict[str, str]
    splits: dict[str, Any]
    pairs: list[tuple[tuple[str, str], tuple[str, str]]]  # (key, outer) of both


def _induction_sides(canon: CanonRule, sems: dict[str, OpSemantics], tier: str,
                     config: Config, guard: ast.Expr | None, mode: str, m: Any,
                     plan: _Plan | None = None) -> _Induction:
    sides = _build(canon, sems, tier, config, guard, mode, m, plan)
    assert sides is not None and sides.rhs_dims is not None
    idx = [z3.Int(f"i{k}") for k in range(len(sides.lhs_dims))]
    vl, dl = sides.enc.value_of(canon.lhs, idx)
    lhs_reductions = len(sides.enc.reductions)
    vr, dr = sides.enc.value_of(canon.rhs, idx)
    parts = (dl == dr, z3.Implies(z3.And(dl, dr), sides.enc.domain.equal(vl, vr)))
    inside = [z3.And(i >= 0, i < d) for i, d in zip(idx, sides.lhs_dims, strict=False)]
    rest = sides.wf_lhs + [sides.guard] + sides.wf_rhs + _dims_equal(sides) + inside
    background = sides.enc.background(axioms=False)
    axioms = sides.enc.domain.axioms()
    return _Induction(sides, z3.And(*parts), background + axioms + rest + sides.enc.bounds,
                      lhs_reductions, background + rest + sides.enc.bounds, parts)


# (where, part) of `_closes` whose plain check failed and full check closed, in this
# tier of this rule (`check_tier` clears it): its configurations are alike, so the
# full check goes first there, and the plain one runs only if that does not close.
_FULL_FIRST: set[tuple[str, int]] = set()


def _closes(solver: _Solver, plain: list[Any], full: list[Any], goal: _Induction,
            budget: Budget, where: str, before_full: Callable[[], None] = lambda: None) -> str:
    """"unsat" when ``goal`` follows from ``full`` (else Z3's answer), one half at a time
    (definedness, then value), each tried first, briefly, from ``plain``: the same
    assumptions without the axioms of exp, sqrt, inv ... (fewer assumptions: unsat there
    is unsat with them). Most value steps are ring identities over those terms, where
    the axioms' nonlinear instances can send Z3 searching for minutes (the BatchNorm
    folds); definedness is where the axioms are needed (sqrt(v) != 0 iff v > 0): where
    the plain check of a half failed in an earlier configuration (`_FULL_FIRST`), the
    full one goes first (the same two checks, in the other order). ``before_full`` runs
    before each full check (`_induction`'s detour: it may raise to end the search)."""
    for k, part in enumerate(goal.parts):
        if (where, k) in _FULL_FIRST:
            before_full()
            status, _ = solver.check(full + [z3.Not(part)])
            if status == "unsat":
                continue
            if _Solver(PLAIN_SECONDS, budget).check(plain + [z3.Not(part)])[0] == "unsat":
                continue
            return status
        status, _ = _Solver(PLAIN_SECONDS, budget).check(plain + [z3.Not(part)])
        if status == "unsat":
            continue
        before_full()
        status, _ = solver.check(full + [z3.Not(part)])
        if status != "unsat":
            return status
        _FULL_FIRST.add((where, k))
    return "unsat"


def _shared_induction(tier: str, built: dict[str, _Induction], m: Any,
                      budget: Budget, before_full: Callable[[], None] = lambda: None
                      ) -> TierResult:
    """All reductions share one enumeration; the hypothesis is the goal itself."""
    total = math.prod(built["prefix"].sides.enc.reductions[0].extents)
    solver = _Solver(INDUCTION_SECONDS, budget)
    base = built["base"]
    status = _closes(solver, base.plain, base.assumptions, base, budget, "base", before_full)
    if status != "unsat":
        return TierResult(tier, "unknown", "value", "holds for reduced lengths <= 4; the "
                          f"induction base did not close (Z3: {status})")
    now, after = built["prefix"], built["step"]
    step = [m >= 1, m < total, now.goal]
    status = _closes(solver, now.plain + after.plain + step,
                     now.assumptions + after.assumptions + step, after, budget, "step",
                     before_full)
    if status != "unsat":
        return TierResult(tier, "unknown", "value", "holds for reduced lengths <= 4; the "
                          f"induction step did not close (Z3: {status})")
    return TierResult(tier, "proved")


def _record_key(r: Reduction) -> tuple[str, str]:
    return r.key, " ".join(z3.simplify(z3.IntVal(0) + o).sexpr() for o in r.outer)


def _paired_induction(canon: CanonRule, sems: dict[str, OpSemantics], tier: str,
                      config: Config, guard: ast.Expr | None, found: _Induction,
                      budget: Budget) -> TierResult:
    """Each LHS reduction paired with an RHS one over provably equal extents (after
    splitting a reduction in two at the boundary of two partners, where
    `lemmas.split_reduction` is proved), each pair with its own enumeration; the
    hypothesis is that the partial results of every pair agree. Then the goal must
    follow from the full results agreeing. Proves rules whose sides reduce the same
    elements in other index spaces or under other operations (a Conv over a Concat's
    channels; a Softmax whose sum the IEEE pre-pass cannot recover from a quotient)."""
    plan = _pair_reductions(tier, found, budget)
    if plan is None:
        return TierResult(tier, "unknown", "value", "holds for reduced lengths <= 4; the "
                          "reductions of the two sides do not pair up")
    built = {mode: _induction_sides(canon, sems, tier, config, guard, mode, z3.Int("m"), plan)
             for mode in ("prefix", "base", "step")}
    cells = {mode: {_record_key(r): r for r in b.sides.enc.reductions}
             for mode, b in built.items()}
    domain = built["prefix"].sides.enc.domain

    def agree(mode: str) -> list[Any]:
        out = []
        for lkey, rkey in plan.pairs:
            left, right = cells[mode].get(lkey), cells[mode].get(rkey)
            if left is None or right is None or left.cell is None or right.cell is None:
                raise Unsupported("a paired reduction is missing after the split")
            (vl, dl), (vr, dr) = left.cell, right.cell
            out.append(z3.And(dl == dr, z3.Implies(dl, domain.equal(vl, vr))))
        return out

    prefix = built["prefix"]
    lengths = []
    for lkey, _ in plan.pairs:
        record = cells["prefix"][lkey]
        lengths.append((prefix.sides.enc.group_m(record.group), math.prod(record.extents)))
    solver = _Solver(INDUCTION_SECONDS, budget)
    try:
        now, after = agree("prefix"), agree("step")
        # one step per pair: a step assuming every pair's prefix (each m in range)
        # would hold vacuously where some other pair cannot have such an m
        steps = [(f"step of pair {g + 1}", prefix.assumptions + built["step"].assumptions
                  + [m >= 1, m < n, now[g], z3.Not(after[g])])
                 for g, (m, n) in enumerate(lengths)]
        checks = [("base", built["base"].assumptions + [z3.Not(z3.And(*agree("base")))]),
                  *steps,
                  ("conclusion", prefix.assumptions + [m == n for m, n in lengths]
                   + now + [z3.Not(prefix.goal)])]
    except Unsupported as err:
        return TierResult(tier, "unknown", "value", str(err))
    for name, facts in checks:
        status, _ = solver.check(facts)
        if status != "unsat":
            return TierResult(tier, "unknown", "value", "holds for reduced lengths <= 4; "
                              f"the paired induction's {name} did not close (Z3: {status})")
    return TierResult(tier, "proved")


def _pair_reductions(tier: str, found: _Induction, budget: Budget) -> _Plan | None:
    """Pairs of reductions (LHS, RHS) of one kind over provably equal, non-empty
    extents; an unpaired one is split where two partners' first extents add up to
    its own (the rest equal). None if some reduction stays unpaired."""
    records = found.sides.enc.reductions
    sides = [records[:found.lhs_reductions], records[found.lhs_reductions:]]
    solver = _Solver(2.0, budget)

    def proved(claims: list[Any]) -> bool:
        claims = [c for c in claims if not (isinstance(c, bool) and c)]
        if any(isinstance(c, bool) for c in claims):
            return False
        return not claims or solver.check(found.assumptions
                                          + [z3.Not(z3.And(*claims))])[0] == "unsat"

    def same(a: Reduction, b: Reduction) -> bool:
        return (a.kind == b.kind and len(a.extents) == len(b.extents)
                and proved([x == y for x, y in zip(a.extents, b.extents, strict=True)]
                           + [x >= 1 for x in a.extents]))

    pairs: list[tuple[Reduction | tuple[Reduction, str], Reduction]] = []
    free = [list(sides[0]), list(sides[1])]
    for left in sides[0]:
        match = next((r for r in free[1] if same(left, r)), None)
        if match is not None:
            pairs.append((left, match))
            free[0].remove(left)
            free[1].remove(match)
    splits: dict[str, Any] = {}
    split_pairs: list[tuple[tuple[str, str], tuple[str, str]]] = []
    for mine, theirs, flip in ((0, 1, False), (1, 0, True)):
        for whole in list(free[mine]):
            if not split_reduction(tier, whole.kind) or whole.key in splits:
                continue
            for lo, hi in itertools.permutations(free[theirs], 2):
                if not (lo.kind == hi.kind == whole.kind
                        and len(lo.extents) == len(hi.extents) == len(whole.extents)):
                    continue
                rest = whole.extents[1:]
                if proved([whole.extents[0] == lo.extents[0] + hi.extents[0],
                           lo.extents[0] >= 1, hi.extents[0] >= 1]
                          + [x == y for x, y in zip(rest, lo.extents[1:], strict=True)]
                          + [x == y for x, y in zip(rest, hi.extents[1:], strict=True)]
                          + [x >= 1 for x in rest]):
                    splits[whole.key] = lo.extents[0]
                    outer = _record_key(whole)[1]
                    for part, partner in (("lo", lo), ("hi", hi)):
                        mine_key = (whole.key + part, outer)
                        split_pairs.append((_record_key(partner), mine_key) if flip
                                           else (mine_key, _record_key(partner)))
                    free[mine].remove(whole)
                    free[theirs].remove(lo)
                    free[theirs].remove(hi)
                    break
    if free[0] or free[1]:
        return None
    keyed = [(_record_key(a), _record_key(b)) for a, b in pairs] + split_pairs
    groups: dict[str, str] = {}
    for g, pair in enumerate(keyed):
        for key, _outer in pair:
            if groups.setdefault(key, f"g{g}") != f"g{g}":
                return None  # one reduction in two pairs: no shared enumeration
    return _Plan(groups, splits, keyed)


def _same_index_space(sides: _Sides, reductions: list[Any]) -> bool:
    """All reductions run over provably equal extents (under the rule's assumptions)."""
    first = reductions[0].extents
    if any(len(r.extents) != len(first) for r in reductions):
        return False
    solver = _Solver(5.0)
    facts = sides.enc.background() + sides.wf_lhs + [sides.guard] + sides.wf_rhs
    differ = [a != b for r in reductions[1:] for a, b in zip(first, r.extents, strict=False)
              if not (isinstance(a, int) and isinstance(b, int))]
    if not differ:
        return True
    status, _ = solver.check(facts + [z3.Or(*differ)])
    return status == "unsat"


# ---------------------------------------------------------------- counterexamples
def _number(value: z3.ExprRef, domain: Domain) -> float | int:
    if domain.is_float:
        raise AssertionError("FP values go through fpToIEEEBV")
    if z3.is_int_value(value) or z3.is_bv_value(value):
        return value.as_long()
    if z3.is_rational_value(value):
        return value.numerator_as_long() / value.denominator_as_long()
    if z3.is_algebraic_value(value):
        return float(value.approx(20).as_decimal(17).rstrip("?"))
    return 0


def _element(model: z3.ModelRef, term: z3.ExprRef, domain: Domain) -> float | int:
    if domain.is_float:
        bits = model.eval(z3.fpToIEEEBV(term), model_completion=True).as_long()
        ebits, sbits = term.sort().ebits(), term.sort().sbits()
        width = ebits + sbits
        if width == 16 and domain.name == "bf16":
            return float(np.array([bits << 16], dtype=np.uint32).view(np.float32)[0])
        dtype = {16: np.float16, 32: np.float32}[width]
        return float(np.array([bits], dtype=f"uint{width}").view(dtype)[0])
    return _number(model.eval(term, model_completion=True), domain)


def _counterexample(canon: CanonRule, sems: dict[str, OpSemantics], tier: str, sides: _Sides,
                    model: Any, message: str) -> Counterexample:
    enc = sides.enc
    domain = enc.domain
    tensors: dict[str, np.ndarray] = {}
    for var, _rank in enc.config.ranks:
        shape = tuple(model.eval(d, model_completion=True).as_long() for d in enc.shape(var))
        if var.startswith("#"):
            tensors[var] = np.full(shape, dict(canon.const_values)[var], dtype=domain.dtype)
            continue
        touched = {}
        for idx, term in enc.touched.get(var, []):
            key = tuple(model.eval(i, model_completion=True).as_long()
                        if not isinstance(i, int) else i for i in idx)
            touched[key] = term
        array = np.ones(shape, dtype=object)
        for key, term in touched.items():
            if all(0 <= k < s for k, s in zip(key, shape, strict=False)):
                array[key] = _element(model, term, domain)
        tensors[var] = np.asarray(array.astype(float) if not domain.is_integer else
                                  array.astype(np.int64)).astype(domain.dtype)
    attrs = dict(enc.config.attrs)
    for name, term in enc.symbolic_attrs.items():
        attrs[name] = ([_number(model.eval(t, model_completion=True), Domain("real"))
                        for t in term] if isinstance(term, list)
                       else _number(model.eval(term, model_completion=True), Domain("real")))
    try:
        found: Any = compare(canon, sems, domain, tensors, attrs, sides.guard_expr)
    except Unsupported:  # e.g. a Conv geometry the NumPy reference does not replay
        found = "unsupported"
    return _render(canon, tier, tensors, attrs, found, message, sems, domain)


def _from_fuzz(found: FuzzFinding, tier: str) -> Counterexample:
    return Counterexample(tier, _inputs(found.tensors), _attrs(found.attrs),
                          _tensor("LHS", found.lhs), _tensor("RHS", found.rhs), "CONFIRMED",
                          found.explanation + " (found by the NumPy fuzz)")


def _render(canon: CanonRule, tier: str, tensors: dict[str, np.ndarray], attrs: dict[str, Any],
            found: Any, message: str, sems: dict[str, OpSemantics],
            domain: Domain) -> Counterexample:
    if isinstance(found, FuzzFinding):
        return Counterexample(tier, _inputs(tensors), _attrs(attrs), _tensor("LHS", found.lhs),
                              _tensor("RHS", found.rhs), "CONFIRMED", message)
    from egraph_compiler.verify.replay import Runner

    runner = Runner(sems, domain, tensors, attrs)
    results = []
    for side in (canon.lhs, canon.rhs):
        try:
            results.append(runner.run(side))
        except (Undefined, Illformed, Unsupported):
            results.append(None)
    why = {"skip": "the left side does not match these inputs",
           "unsupported": "NumPy cannot replay it"}.get(found, "NumPy agrees")
    return Counterexample(tier, _inputs(tensors), _attrs(attrs), _tensor("LHS", results[0]),
                          _tensor("RHS", results[1]), "SPURIOUS", f"{message}; {why}")


def _inputs(tensors: dict[str, np.ndarray]) -> tuple[TensorValue, ...]:
    return tuple(t for name, a in tensors.items() if not name.startswith("#")
                 if (t := _tensor(f"?{name}", a)) is not None)


def _attrs(attrs: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """``?p = [1, 0]``; an attribute absent from the rule prints as ``Op.attr``, or as
    ``Op#1.attr``, ``Op#2.attr`` (in the rule's order) when two such nodes have it."""
    anonymous = {k: m for k in attrs if (m := re.fullmatch(r"_([A-Za-z]+)(\d+)_(\w+)", k))}
    counts: dict[str, list[str]] = {}
    for key, m in sorted(anonymous.items(), key=lambda kv: int(kv[1][2])):
        counts.setdefault(f"{m[1]}.{m[3]}", []).append(key)

    def name(key: str) -> str:
        if key not in anonymous:
            return f"?{key}"
        m = anonymous[key]
        same = counts[f"{m[1]}.{m[3]}"]
        return f"{m[1]}.{m[3]}" if len(same) == 1 else f"{m[1]}#{same.index(key) + 1}.{m[3]}"

    return tuple((name(k), f'"{v}"' if isinstance(v, str) else _value_text(v))
                 for k, v in sorted(attrs.items()))


def _value_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}" if value != int(value) else f"{value:.1f}"
    return str(value)


def _tensor(name: str, array: np.ndarray | None) -> TensorValue | None:
    if array is None:
        return None
    flat = np.asarray(array).reshape(-1)
    values = tuple(int(v) if isinstance(v, (int, np.integer)) else float(v) for v in flat)
    return TensorValue(name, tuple(int(d) for d in np.shape(array)), str(np.asarray(array).dtype),
                       values)
