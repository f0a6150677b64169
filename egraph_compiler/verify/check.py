"""The refinement check of one rule in one tier, stage by stage.

For every configuration (`configs.py`), with ``L``/``R`` the two sides:
1. applicability: ``wf(L) and guard`` is satisfiable for some configuration;
2. shape: ``wf(L) and guard`` implies ``wf(R)`` and equal ranks and dims;
3. definedness: at every in-bounds index, ``L`` is defined iff ``R`` is. Both
   ways: an e-graph merge is symmetric, so extraction may put ``L`` where ``R``
   was (a rule that only *removes* undefined behaviour, such as
   ``Div(?x, ?x) => 1``, would otherwise let extraction add it back);
4. value: where both are defined, the elements are equal (bit-exact in IEEE tiers).
Reductions are unrolled for lengths <= 4 (a model there is a real counterexample),
then proved for every length by induction over a prefix ``m`` (base m = 1, step
m -> m + 1), all reductions of the rule sharing one enumeration of their index
space. If the induction does not close, the verdict is `unknown`.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import z3

from egraph_compiler.dsl import ast
from egraph_compiler.verify import evalexpr
from egraph_compiler.verify.builtin_ops import Undefined
from egraph_compiler.verify.configs import enumerate_configs, guard_refuted
from egraph_compiler.verify.encode import Config, DoesNotFire, Encoder, Illformed, Unsupported
from egraph_compiler.verify.fuzz import FuzzFinding, compare, fuzz
from egraph_compiler.verify.normalize import CanonRule, list_used_vars
from egraph_compiler.verify.scalar import AbstractDomain, Domain
from egraph_compiler.verify.semantics import OpSemantics
from egraph_compiler.verify.verdict import Counterexample, TensorValue

MAX_CONFIGS = 4000
RETRY_SEEDS = (1, 2)  # Z3 seeds tried after an 'unknown' that is not a timeout
INDUCTION_SECONDS = 8.0  # per induction check (base, step); a proof takes 1-2 s
BOUNDED_SECONDS = 5.0  # per unrolled check once the induction has not closed


@dataclass
class TierResult:
    tier: str
    status: str  # proved | failed | unknown
    stage: str = ""
    message: str = ""
    counterexample: Counterexample | None = None
    seconds: float = 0.0


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
           guard: ast.Expr | None, mode: str = "bounded", m: Any = None) -> _Sides | None:
    enc = Encoder(sems, make_domain(tier), config, dict(canon.const_values), mode, m,
                  valued_vars=list_used_vars(canon))
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
    return _Sides(enc, guard_term, lhs_dims, wf_lhs, rhs_dims, wf_rhs, error, guard)


def _dims_equal(sides: _Sides) -> list[Any]:
    assert sides.rhs_dims is not None
    return [a == b for a, b in zip(sides.lhs_dims, sides.rhs_dims, strict=False)]


class _Solver:
    """Each check gets ``timeout_s``, and none runs past ``deadline`` (the rule's)."""

    def __init__(self, timeout_s: float, deadline: float | None = None) -> None:
        self.solver = z3.Solver()
        self.timeout_s = timeout_s
        self.deadline = deadline

    def check(self, facts: list[Any], small: list[Any] | None = None) -> tuple[str, Any]:
        s = self.solver
        limit = self.timeout_s
        if self.deadline is not None:
            limit = min(limit, self.deadline - time.monotonic())
        s.set("timeout", max(1, int(limit * 1000)))
        s.push()
        s.add(*facts)
        result = s.check()
        for seed in RETRY_SEEDS:  # nonlinear tactics give up by luck: retry other seeds
            left = limit if self.deadline is None else self.deadline - time.monotonic()
            if result != z3.unknown or "timeout" in s.reason_unknown() or left < 0.5:
                break
            s.set("timeout", max(1, int(min(limit, left) * 1000)), "random_seed", seed)
            result = s.check()
            s.set("random_seed", 0)
        model = None
        if result == z3.sat:
            model = s.model()
            if small:
                s.push()
                s.add(*small)
                if s.check() == z3.sat:
                    model = s.model()
                s.pop()
        s.pop()
        return str(result), model


def _small_dims(sides: _Sides) -> list[Any]:
    return ([d <= 3 for var, _ in sides.enc.config.ranks for d in sides.enc.shape(var)]
            + sides.enc.hints)


def check_tier(canon: CanonRule, sems: dict[str, OpSemantics], tier: str,
               guard: ast.Expr | None, timeout_s: float, use_fuzz: bool = True,
               max_rank: int = 3, check_shapes: bool = True) -> TierResult:
    """One tier's verdict. Machine tiers pass ``check_shapes=False``: shapes do not
    depend on the element type, the exact tier has checked them."""
    start = time.monotonic()
    deadline = start + timeout_s
    try:
        configs = list(enumerate_configs(canon, sems, tuple(range(max_rank + 1)), guard))
    except Unsupported as err:
        return TierResult(tier, "unknown", "semantics", str(err))
    if len(configs) > MAX_CONFIGS:
        return TierResult(tier, "unknown", "semantics",
                          f"{len(configs)} configurations to check (limit {MAX_CONFIGS})")
    if use_fuzz:
        found = fuzz(canon, sems, tier, [c for c, _ in configs], guard,
                     budget=48 if tier in ("real", "int") else 96)
        if found is not None:
            cex = _from_fuzz(found, tier)
            return TierResult(tier, "failed", found.stage, found.explanation, cex,
                              time.monotonic() - start)
    applicable = False
    unknown: TierResult | None = None
    spurious: TierResult | None = None
    for config, role in configs:
        if role == "rank" and _same_rank(canon, sems, config):
            continue  # covered by the configurations with these variables at rank 3 and 0
        if not check_shapes and role != "values":
            continue
        if guard_refuted(guard, config):
            continue
        values_needed = role == "values"
        left = deadline - time.monotonic()
        if left <= 0:
            return TierResult(tier, "unknown", "", f"timeout after {timeout_s:.1f} s",
                              None, time.monotonic() - start)
        try:
            outcome = _check_config(canon, sems, tier, config, values_needed, guard, left,
                                    check_shapes)
        except Unsupported as err:
            return TierResult(tier, "unknown", "semantics", str(err), None,
                              time.monotonic() - start)
        if outcome is None:
            continue
        applicable = True
        if outcome.status == "proved":
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
    return TierResult(tier, "proved", "", "", None, elapsed)


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
                  timeout_s: float, check_shapes: bool = True) -> TierResult | None:
    """None when the LHS does not apply under ``config``; else this config's result."""
    sides = _build(canon, sems, tier, config, guard)
    if sides is None:
        return None
    deadline = time.monotonic() + timeout_s
    solver = _Solver(20.0, deadline)
    enc = sides.enc
    base = enc.background() + sides.wf_lhs + [sides.guard]
    status, model = solver.check(base, _small_dims(sides))
    if status == "unsat":
        return None
    if status == "unknown":
        return TierResult(tier, "unknown", "applicability", f"Z3 unknown ({config.describe()})")
    if sides.rhs_error:
        return _failure(canon, sems, tier, sides, model, "shape", sides.rhs_error)
    if check_shapes:
        shape_ok = z3.And(*sides.wf_rhs, *_dims_equal(sides))
        status, model = solver.check(base + [z3.Not(shape_ok)], _small_dims(sides))
        if status != "unsat":
            return _failure(canon, sems, tier, sides, model, "shape",
                            "RHS shape differs from LHS shape or RHS is ill-formed", status)
    if not values_needed:
        return TierResult(tier, "proved")
    try:
        idx = [z3.Int(f"i{k}") for k in range(len(sides.lhs_dims))]
        vl, dl = enc.value_of(canon.lhs, idx)
        vr, dr = enc.value_of(canon.rhs, idx)
    except Illformed as err:
        return _failure(canon, sems, tier, sides, model, "shape", str(err))
    if enc.bounds:  # reductions: an induction proof first, it is cheaper than unrolling
        proof = _induction(canon, sems, tier, config, guard, deadline - time.monotonic())
        if proof.status == "proved":
            return proof
        # what follows can only find a counterexample at small lengths (the verdict is
        # unknown otherwise): those are found in seconds, a proof for them is useless
        solver = _Solver(BOUNDED_SECONDS, deadline)
    inside = [z3.And(i >= 0, i < d) for i, d in zip(idx, sides.lhs_dims, strict=False)]
    facts = (enc.background() + sides.wf_lhs + [sides.guard] + sides.wf_rhs
             + _dims_equal(sides) + inside + enc.bounds)
    status, model = solver.check(facts + [dl != dr], _small_dims(sides))
    if status != "unsat":
        return _failure(canon, sems, tier, sides, model, "definedness",
                        "one side is undefined where the other is defined", status)
    status, model = solver.check(facts + [dl, dr, z3.Not(enc.domain.equal(vl, vr))],
                                 _small_dims(sides))
    if status != "unsat":
        return _failure(canon, sems, tier, sides, model, "value", "LHS and RHS values differ",
                        status)
    if enc.bounds:
        return proof
    return TierResult(tier, "proved")


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
               guard: ast.Expr | None, timeout_s: float) -> TierResult:
    """Induction over the prefix length m of one enumeration of the reduced index
    space: the rule holds for the first element (base) and, if it holds for the
    prefix m, for the prefix m + 1 (step)."""
    m = z3.Int("m")
    built = {}
    for mode in ("prefix", "base", "step"):
        sides = _build(canon, sems, tier, config, guard, mode, m)
        assert sides is not None and sides.rhs_dims is not None
        idx = [z3.Int(f"i{k}") for k in range(len(sides.lhs_dims))]
        vl, dl = sides.enc.value_of(canon.lhs, idx)
        vr, dr = sides.enc.value_of(canon.rhs, idx)
        goal = z3.And(dl == dr, z3.Implies(z3.And(dl, dr), sides.enc.domain.equal(vl, vr)))
        inside = [z3.And(i >= 0, i < d) for i, d in zip(idx, sides.lhs_dims, strict=False)]
        assumptions = (sides.enc.background() + sides.wf_lhs + [sides.guard] + sides.wf_rhs
                       + _dims_equal(sides) + inside + sides.enc.bounds)
        built[mode] = (sides, goal, assumptions)
    prefix = built["prefix"][0]
    if not prefix.enc.reductions or not _same_index_space(prefix, prefix.enc.reductions):
        return TierResult(tier, "unknown", "value", "holds for reduced lengths <= 4; the "
                          "reductions differ in their index spaces, so no induction")
    total = math.prod(prefix.enc.reductions[0].extents)
    solver = _Solver(INDUCTION_SECONDS, time.monotonic() + timeout_s)
    _, goal, assumptions = built["base"]
    status, _ = solver.check(assumptions + [z3.Not(goal)])
    if status != "unsat":
        return TierResult(tier, "unknown", "value", "holds for reduced lengths <= 4; the "
                          f"induction base did not close (Z3: {status})")
    _, goal_m, assumptions_m = built["prefix"]
    _, goal_next, assumptions_next = built["step"]
    status, _ = solver.check(assumptions_m + assumptions_next
                             + [m >= 1, m < total, goal_m, z3.Not(goal_next)])
    if status != "unsat":
        return TierResult(tier, "unknown", "value", "holds for reduced lengths <= 4; the "
                          f"induction step did not close (Z3: {status})")
    return TierResult(tier, "proved")


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
    """``?p = [1, 0]``; an attribute absent from the rule prints as ``Op.attr``."""
    def name(key: str) -> str:
        anonymous = re.fullmatch(r"_([A-Za-z]+)\d+_(\w+)", key)
        return f"{anonymous[1]}.{anonymous[2]}" if anonymous else f"?{key}"

    return tuple((name(k), f'"{v}"' if isinstance(v, str) else str(v))
                 for k, v in sorted(attrs.items()))


def _tensor(name: str, array: np.ndarray | None) -> TensorValue | None:
    if array is None:
        return None
    flat = np.asarray(array).reshape(-1)
    values = tuple(int(v) if isinstance(v, (int, np.integer)) else float(v) for v in flat)
    return TensorValue(name, tuple(int(d) for d in np.shape(array)), str(np.asarray(array).dtype),
                       values)
