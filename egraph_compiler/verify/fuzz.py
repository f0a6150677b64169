"""Random and special-value testing in NumPy before any solver runs (DESIGN §4:
it finds most counterexamples in milliseconds). Whatever it finds is a concrete,
replayed counterexample; finding nothing proves nothing."""

from __future__ import annotations

from typing import Any

import numpy as np

from egraph_compiler.dsl import ast
from egraph_compiler.verify.builtin_ops import Undefined
from egraph_compiler.verify.encode import Config, DoesNotFire, Illformed, Unsupported
from egraph_compiler.verify.normalize import CanonRule, boolean_vars, subpatterns
from egraph_compiler.verify.perm import sample_perms
from egraph_compiler.verify.replay import Runner, same
from egraph_compiler.verify.scalar import Domain
from egraph_compiler.verify.semantics import OpSemantics

_SPECIAL = {
    "real": [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 3.0, -0.5, 4.0],
    "float": [0.0, -0.0, 1.0, -1.0, 0.1, 3.0, -2.5, 1e30, -1e30, 1e-30, float("inf"),
              float("-inf"), float("nan"), 65504.0, 6e-8],
    "int": [0, 1, 2, 3, 5, 7, 8, 255],
    "bv": [0, 1, 2, 3, 7, 128, 255, 200],
}


def _values(domain: Domain, shape: tuple[int, ...], rng: np.random.Generator,
            shift: bool) -> np.ndarray:
    size = int(np.prod(shape)) if shape else 1
    if domain.is_bv or domain.name == "int":
        pool = _SPECIAL["int" if domain.name == "int" or shift else "bv"]
        if shift:
            pool = [0, 1, 2, 3]
        vals = rng.choice(pool, size)
    else:
        pool = _SPECIAL["float" if domain.is_float else "real"]
        vals = np.where(rng.random(size) < 0.6, rng.choice(pool, size),
                        np.round(rng.normal(0, 3, size), 2))
    return np.asarray(vals).reshape(shape)


class FuzzFinding:
    def __init__(self, stage: str, tensors: dict[str, np.ndarray], attrs: dict[str, Any],
                 lhs: np.ndarray | None, rhs: np.ndarray | None, explanation: str) -> None:
        self.stage = stage
        self.tensors = tensors
        self.attrs = attrs
        self.lhs = lhs
        self.rhs = rhs
        self.explanation = explanation


def compare(canon: CanonRule, sems: dict[str, OpSemantics], domain: Domain,
            tensors: dict[str, np.ndarray], attrs: dict[str, Any],
            guard: ast.Expr | None) -> FuzzFinding | None | str:
    """Run both sides. A `FuzzFinding` when they disagree, None when they agree,
    "skip" when the left side does not apply to these inputs."""
    runner = Runner(sems, domain, tensors, attrs)
    try:
        if not runner.guard(guard):
            return "skip"
        lhs: np.ndarray | None = runner.run(canon.lhs)
    except Illformed:
        return "skip"
    except Undefined:
        lhs = None
    try:
        rhs: np.ndarray | None = runner.run(canon.rhs)
    except DoesNotFire:
        return "skip"
    except Illformed as err:
        return FuzzFinding("shape", tensors, attrs, lhs, None, f"RHS is ill-formed: {err}")
    except Undefined:
        rhs = None
    if lhs is not None and rhs is not None and lhs.shape != rhs.shape:
        return FuzzFinding("shape", tensors, attrs, lhs, rhs,
                           f"LHS shape {lhs.shape} != RHS shape {rhs.shape}")
    if (lhs is None) != (rhs is None):
        side = "RHS" if rhs is None else "LHS"
        return FuzzFinding("definedness", tensors, attrs, lhs, rhs,
                           f"{side} is undefined where the other side is defined")
    if lhs is not None and rhs is not None and not same(lhs, rhs, domain, _scale(tensors, attrs)):
        return FuzzFinding("value", tensors, attrs, lhs, rhs, "LHS and RHS values differ")
    return None


def _scale(tensors: dict[str, np.ndarray], attrs: dict[str, Any]) -> float:
    """The largest finite magnitude among the inputs (the real tier's rounding scale)."""
    values = [np.abs(np.asarray(t, dtype=np.float64)).ravel() for t in tensors.values()
              if np.asarray(t).dtype.kind in "fiu"]
    values += [np.array([abs(float(v))]) for v in attrs.values() if isinstance(v, (int, float))]
    flat = np.concatenate(values) if values else np.zeros(1)
    finite = flat[np.isfinite(flat)]
    return float(finite.max()) if finite.size else 0.0


def fuzz(canon: CanonRule, sems: dict[str, OpSemantics], tier: str,
         configs: list[Config], guard: ast.Expr | None, trials: int = 0,
         seed: int = 0, budget: int = 160) -> FuzzFinding | None:
    """``budget`` random evaluations, round-robin over ``configs`` (widest ranks first)."""
    rng = np.random.default_rng(seed)
    configs = sorted(configs, key=lambda c: -sum(r for _, r in c.ranks))[:64]
    if not configs:
        return None
    domain = Domain(tier)
    shift_vars = _shift_amount_vars(canon)
    required = _element_facts(guard)
    booleans = boolean_vars(canon, {n: s.decl for n, s in sems.items()})
    for trial in range(trials or budget):
        config = configs[trial % len(configs)]
        ranks = config.rank_of
        sizes = [int(rng.choice([2, 3])) for _ in range(4)]
        tensors: dict[str, np.ndarray] = {}
        for var, rank in ranks.items():
            shape = tuple(sizes[4 - rank + k] if rng.random() < 0.75 else 1
                          for k in range(rank))
            if var.startswith("#"):
                value = dict(canon.const_values)[var]
                tensors[var] = np.full(shape, value, dtype=domain.dtype)
            else:
                values = (rng.choice([0.0, 1.0], shape) if var in booleans else
                          _satisfy(_values(domain, shape, rng, var in shift_vars),
                                   required.get(var, set())))
                with np.errstate(all="ignore"):
                    tensors[var] = Runner(sems, domain, {}, {}).cast(values)
        attrs = dict(config.attrs)
        attrs.update(sample_perms(canon, sems, config, rng))  # symbolic perms: one drawn
        attrs.update({name: float(rng.choice([0.0, 1.0, -1.0, 0.5, 2.0]))
                      for name in _float_attr_vars(canon, sems) if name not in attrs})
        try:
            found = compare(canon, sems, domain, tensors, attrs, guard)
        except (Unsupported, KeyError, TypeError, ValueError, OverflowError):
            return None
        if isinstance(found, FuzzFinding):
            return found
    return None


def _element_facts(guard: ast.Expr | None) -> dict[str, set[str]]:
    """``nonzero(?x)``-style conjuncts of the guard, so random inputs can satisfy them."""
    out: dict[str, set[str]] = {}
    if isinstance(guard, ast.BinOp) and guard.op == "and":
        for side in (_element_facts(guard.lhs), _element_facts(guard.rhs)):
            for var, kinds in side.items():
                out.setdefault(var, set()).update(kinds)
    elif (isinstance(guard, ast.Call) and guard.func in ("nonzero", "nonneg", "positive")
          and guard.args and isinstance(guard.args[0], ast.Var)):
        out[guard.args[0].name] = {guard.func}
    return out


def _satisfy(values: np.ndarray, kinds: set[str]) -> np.ndarray:
    with np.errstate(all="ignore"):
        if "positive" in kinds or "nonneg" in kinds:
            values = np.abs(values)
        if "positive" in kinds or "nonzero" in kinds:
            values = np.where(values == 0, 1, values)
    return values


def _shift_amount_vars(canon: CanonRule) -> set[str]:
    return {p.inputs[1].name for p in subpatterns(canon.lhs) if isinstance(p, ast.POp) and p.op == "BitShift"
            and len(p.inputs) > 1 and isinstance(p.inputs[1], ast.PVar)}


def _float_attr_vars(canon: CanonRule, sems: dict[str, OpSemantics]) -> list[str]:
    names: list[str] = []

    def walk(p: ast.Pattern) -> None:
        if isinstance(p, ast.POp):
            types = {a.name: a.type for a in sems[p.op].decl.attrs}
            for name, expr in p.attrs:
                if isinstance(expr, ast.Var) and types.get(name) in ("float", "int"):
                    names.append(expr.name)
            for child in p.inputs:
                walk(child)

    walk(canon.lhs)
    return names


# ---------------------------------------------------------------- shrinking
# A counterexample a person can read (issue 10): the fewest dims at the lowest ranks,
# then each element replaced by the simplest value that still breaks the rule.
_SIMPLE = {"real": [0.0, 1.0, -1.0, 2.0, 0.5, -2.0, 3.0, -0.5],
           "float": [0.0, 1.0, -1.0, -0.0, 2.0, 0.5, float("inf"), float("-inf"),
                     float("nan"), 1e30, -1e30, 1e-30, 3.0],
           "int": [0, 1, 2, 3, 5, 255]}
SHRINK_EVALUATIONS = 400  # at most this many NumPy evaluations per shrink


def _simple_pool(domain: Domain) -> list[float]:
    if domain.is_integer:
        return _SIMPLE["int"]
    return _SIMPLE["float" if domain.is_float else "real"]


def _size(found: FuzzFinding) -> tuple[int, int]:
    arrays = [a for name, a in found.tensors.items() if not name.startswith("#")]
    return (sum(np.ndim(a) for a in arrays), sum(int(np.size(a)) for a in arrays))


def shrink(canon: CanonRule, sems: dict[str, OpSemantics], tier: str, configs: list[Config],
           guard: ast.Expr | None, found: FuzzFinding, seed: int = 1) -> FuzzFinding:
    """A smaller witness of the same kind of failure as ``found`` (same stage), or
    ``found`` itself: configurations by increasing total rank, dims of 1 first, values
    from a pool of simple ones; then each element simplified in turn."""
    domain = Domain(tier)
    rng = np.random.default_rng(seed)
    pool = _simple_pool(domain)
    shift_vars = _shift_amount_vars(canon)
    required = _element_facts(guard)
    booleans = boolean_vars(canon, {n: s.decl for n, s in sems.items()})
    left = SHRINK_EVALUATIONS
    best = found

    def attempt(tensors: dict[str, np.ndarray], attrs: dict[str, Any]) -> FuzzFinding | None:
        nonlocal left
        left -= 1
        try:
            result = compare(canon, sems, domain, tensors, attrs, guard)
        except (Unsupported, KeyError, TypeError, ValueError, OverflowError):
            return None
        if isinstance(result, FuzzFinding) and result.stage == found.stage:
            return result
        return None

    float_attrs = [n for n in _float_attr_vars(canon, sems)]
    for config in sorted(configs, key=lambda c: (sum(r for _, r in c.ranks), c.describe())):
        if left <= 0 or sum(r for _, r in config.ranks) > _size(best)[0]:
            break
        for trial in range(8):
            if left <= 0:
                break
            tensors: dict[str, np.ndarray] = {}
            for var, rank in config.ranks:
                dims = tuple(1 if trial < 4 else int(rng.choice([1, 2])) for _ in range(rank))
                if var.startswith("#"):
                    tensors[var] = np.full(dims, dict(canon.const_values)[var], dtype=domain.dtype)
                    continue
                base = rng.choice([0, 1, 2, 3]) if var in shift_vars else None
                choices = [0.0, 1.0] if var in booleans else pool
                if trial < 2:  # all zeros, then all ones: the simplest witnesses
                    choices = [float(trial)]
                values = (np.full(dims, base) if base is not None
                          else np.asarray(rng.choice(choices, dims) if dims else rng.choice(choices)))
                values = _satisfy(np.asarray(values), required.get(var, set()))
                with np.errstate(all="ignore"):
                    tensors[var] = Runner(sems, domain, {}, {}).cast(values)
            attrs = dict(config.attrs)
            attrs.update(sample_perms(canon, sems, config, rng))
            attrs.update({name: float(rng.choice([1.0, 0.0, -1.0, 0.5, 2.0]))
                          for name in float_attrs if name not in attrs})
            smaller = attempt(tensors, attrs)
            if smaller is not None and _size(smaller) < _size(best):
                best = smaller
                break
    return _simplify_values(best, pool, attempt, lambda: left > 0, booleans)


def _simplify_values(found: FuzzFinding, pool: list[float], attempt: Any,
                     budget_left: Any, booleans: frozenset[str]) -> FuzzFinding:
    """Each element, in turn, replaced by the first value of ``pool`` that keeps the
    failure (0 before 1 before -1 ...)."""
    best = found
    for name in list(best.tensors):
        if name.startswith("#"):
            continue
        for k in range(int(np.size(best.tensors[name]))):
            for candidate in ([0.0, 1.0] if name in booleans else pool):
                if not budget_left():
                    return best
                array = np.array(best.tensors[name], copy=True)
                current = array.reshape(-1)[k]
                if current == candidate and np.signbit(current) == np.signbit(candidate):
                    break  # already the simplest that works
                with np.errstate(all="ignore"):
                    array.reshape(-1)[k] = candidate
                smaller = attempt({**best.tensors, name: array}, best.attrs)
                if smaller is not None:
                    best = smaller
                    break
    return best
