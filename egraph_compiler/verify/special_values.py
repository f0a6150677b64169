"""Each rule's effect on special values, measured: the table behind ``--fp strict``.

For every rule both sides are run in NumPy, bit-exact float32 through the registry's
scalar semantics (`replay.Runner`, the compiler's own `ops.scalar`), on the shapes and
attributes the verifier enumerates for it (`check._configs`, its witness
configurations), with five input sets: ordinary finite values, and the same with NaN,
±inf, ±0 or huge finite values (±1e38, ±3e38) mixed in. Every output element where
the two sides differ is classified:

- ``nan``: NaN on one side only;
- ``inf``: an infinity on one side only (or of the other sign), from infinite inputs;
- ``overflow``: the same from finite inputs (one side overflowed, the other did not);
- ``negzero``: +0 on one side, -0 on the other;
- ``rounding``: two different finite numbers (the rules over the reals re-associate);
- ``domain``: one side outside an operator's declared domain (``requires``), where
  onnxruntime gives NaN or inf, and the other side not;
- ``shape``: different shapes (a wrong rule; the verifier refutes it too).

A rule *keeps bits* when it was evaluated at least once and no difference was seen.
That is what ``--fp strict`` keeps. Testing cannot prove "keeps bits"; the ``[exact]``
tag, which the verifier proves in the IEEE tiers, does. So the tag is checked against
the record: a rule tagged ``[exact]`` whose record shows a change fails ``dnnr
verify`` and ``dnnr check``, and strict keeps only rules that are both tagged and
recorded as keeping bits.

Records are cached on disk beside the verifier's verdicts (`cache.default_cache_dir`,
folder ``special-values``),
keyed by the rule's text and its operators' semantics; the library's take about a
second of NumPy to compute.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler.dsl import ast, load_budget
from egraph_compiler.verify import cache, check
from egraph_compiler.verify.builtin_ops import Undefined, load_semantics
from egraph_compiler.verify.encode import Config, DoesNotFire, Illformed, Unsupported
from egraph_compiler.verify.fuzz import _element_facts, _float_attr_vars, _satisfy
from egraph_compiler.verify.normalize import CanonRule, boolean_vars, canonical, subpatterns
from egraph_compiler.verify.replay import NumpyFacts, Runner
from egraph_compiler.verify.scalar import Domain
from egraph_compiler.verify.semantics import OpSemantics
from egraph_compiler.verify.verdict import Verdict

VERSION = "4"  # of this evaluation: part of the cache key
KINDS = ("nan", "inf", "overflow", "negzero", "rounding", "domain", "shape")
# ordinary values: exact small numbers, fractions that round, and a spread
FINITE = np.array([0.5, 1.0, -1.0, 2.0, -2.5, 3.0, 0.1, -0.3, 1e-3, 7.25], np.float32)
INPUT_SETS: dict[str, np.ndarray] = {
    "finite": np.array([], np.float32),
    "nan": np.array([np.nan], np.float32),
    "inf": np.array([np.inf, -np.inf], np.float32),
    "negzero": np.array([0.0, -0.0], np.float32),
    "overflow": np.array([1e38, -1e38, 3e38, -3e38], np.float32),
}
TRIALS = 12  # per input set, round-robin over the configurations
MAX_RANK = 3
MAX_CONFIGS = 64


@dataclass(frozen=True)
class SpecialValues:
    """One rule's record: how many evaluations applied, the kinds of change seen (in
    `KINDS` order) with the first example of each, or why nothing was evaluated."""

    rule: str
    evaluated: int
    changes: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()  # "kind: inputs ... gives ... before and ... after", per kind
    not_evaluated: str = ""  # the reason, when ``evaluated`` is 0

    @property
    def keeps_bits(self) -> bool:
        return self.evaluated > 0 and not self.changes

    @property
    def summary(self) -> str:
        if self.keeps_bits:
            return "keeps bits"
        if self.changes:
            return "changes " + ", ".join(self.changes)
        return f"not evaluated: {self.not_evaluated}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["changes"] = list(self.changes)
        data["examples"] = list(self.examples)
        data["keeps_bits"] = self.keeps_bits
        data["summary"] = self.summary
        return data


def records(ruleset: ast.RuleSet, sems: dict[str, OpSemantics] | None = None,
            cache_dir: str | Path | None = None, use_cache: bool = True) -> dict[str, SpecialValues]:
    """The record of every rule of ``ruleset``, by rule name (cached on disk)."""
    sems = sems if sems is not None else load_semantics(ruleset.ops)
    # beside the verdicts, in a folder of their own
    directory = (Path(cache_dir) if cache_dir is not None else cache.default_cache_dir()) / "special-values"
    out: dict[str, SpecialValues] = {}
    load_budget.at("computing the rules' special-value records")
    for rule in ruleset.rules:
        load_budget.check()  # inside a compile (--fp strict), its seconds limit binds here too
        key = _key(rule, sems)
        found = _load(directory, key) if use_cache else None
        if found is None:
            try:
                found = evaluate(rule, sems)
            except Exception as error:  # noqa: BLE001 - a bug here must not hide the other records
                found = SpecialValues(rule.name, 0, not_evaluated=f"internal error: {type(error).__name__}: {error}")
            if use_cache:
                _store(directory, key, found)
        out[rule.name] = replace(found, rule=rule.name)
    return out


def evaluate(rule: ast.Rule, sems: dict[str, OpSemantics], seed: int = 0) -> SpecialValues:
    """Run both sides of ``rule`` on every input set (see the module docstring)."""
    canon = canonical(rule, {name: s.decl for name, s in sems.items()})
    if canon.problems:
        return SpecialValues(rule.name, 0, not_evaluated="; ".join(canon.problems))
    missing = [op for op in canon.ops if sems[op].elementwise is None and sems[op].builtin is None]
    if missing:
        return SpecialValues(rule.name, 0, not_evaluated="no semantics for " + ", ".join(missing))
    if any(sems[op].integer_only for op in canon.ops):
        return SpecialValues(rule.name, 0, not_evaluated="integer operators (no floating-point values)")
    try:
        configs = [c for c, _ in check._configs(canon, sems, MAX_RANK, canon.guard)]
    except Unsupported as error:
        return SpecialValues(rule.name, 0, not_evaluated=str(error))
    configs = sorted(configs, key=lambda c: -sum(r for _, r in c.ranks))[:MAX_CONFIGS]
    if not configs:
        return SpecialValues(rule.name, 0, not_evaluated="no configuration of shapes")
    rng = np.random.default_rng(seed)
    domain = Domain("fp32")
    required = _element_facts(canon.guard)
    booleans = boolean_vars(canon, {n: s.decl for n, s in sems.items()})
    float_attrs = _float_attr_vars(canon, sems)
    flat_targets = _reshape_targets(canon, sems)
    evaluated, examples = 0, {}  # kind -> its first instance
    for set_name, specials in INPUT_SETS.items():
        for trial in range(TRIALS):
            config = configs[trial % len(configs)]
            tensors = _inputs(canon, config, rng, specials, required, booleans, sems, domain)
            for var in flat_targets & tensors.keys():  # a shape operand random values cannot be
                tensors[var] = np.array([-1], np.float32)
            attrs = dict(config.attrs)
            attrs.update({name: float(rng.choice([1.0, -1.0, 0.5, 2.0]))
                          for name in float_attrs if name not in attrs})
            try:
                outcome = _compare(canon, sems, domain, tensors, attrs, bool(np.isinf(specials).any()))
            except (Unsupported, KeyError, TypeError, ValueError, OverflowError):
                continue
            if outcome is None:
                continue
            evaluated += 1
            for kind, text in outcome.items():
                if kind not in examples:
                    examples[kind] = f"{kind}: {set_name} inputs, {config.describe() or 'scalars'}: {text}"
    if not evaluated:
        return SpecialValues(rule.name, 0, not_evaluated="the left-hand side never applied to the inputs tried")
    changes = tuple(k for k in KINDS if k in examples)
    return SpecialValues(rule.name, evaluated, changes, tuple(examples[k] for k in changes))


def _inputs(canon: CanonRule, config: Config, rng: np.random.Generator, specials: np.ndarray,
            required: dict[str, set[str]], booleans: frozenset[str], sems: dict[str, OpSemantics],
            domain: Domain) -> dict[str, np.ndarray]:
    """Inputs for one evaluation: ordinary values, then (when the set has any) the set's
    special values at about a third of the positions, at least one per tensor."""
    sizes = [int(rng.choice([2, 3])) for _ in range(4)]
    tensors: dict[str, np.ndarray] = {}
    for var, rank in config.rank_of.items():
        shape = tuple(sizes[4 - rank + k] if rng.random() < 0.75 else 1 for k in range(rank))
        if var.startswith("#"):
            tensors[var] = np.full(shape, dict(canon.const_values)[var], dtype=np.float32)
            continue
        if var in booleans:
            tensors[var] = rng.choice([0.0, 1.0], shape).astype(np.float32)
            continue
        values = _satisfy(rng.choice(FINITE, shape), required.get(var, set())).astype(np.float32)
        if specials.size and values.size:
            flat = values.reshape(-1)
            where = rng.random(flat.size) < 0.34
            where[rng.integers(flat.size)] = True
            flat[where] = rng.choice(specials, int(where.sum()))
        with np.errstate(all="ignore"):
            tensors[var] = Runner(sems, domain, {}, {}).cast(values)
    return tensors


def _compare(canon: CanonRule, sems: dict[str, OpSemantics], domain: Domain,
             tensors: dict[str, np.ndarray], attrs: dict[str, Any],
             infinite_inputs: bool) -> dict[str, str] | None:
    """None when the left-hand side does not apply; else each kind of difference
    between the two sides (none: bit for bit the same) with its first instance."""
    runner = Runner(sems, domain, tensors, attrs)
    runner.facts = _Facts(tensors, domain, _constant_vars(canon.guard))
    try:
        if not runner.guard(canon.guard):
            return None
        lhs: np.ndarray | None = runner.run(canon.lhs)
    except (Illformed, DoesNotFire):
        return None
    except Undefined:
        lhs = None
    try:
        rhs: np.ndarray | None = runner.run(canon.rhs)
    except DoesNotFire:
        return None
    except Illformed as error:
        return {"shape": f"the right-hand side is ill-formed: {error}"}
    except Undefined:
        rhs = None
    inputs = ", ".join(f"?{k}={_text(v)}" for k, v in tensors.items() if not k.startswith("#"))
    if lhs is None or rhs is None:
        if lhs is None and rhs is None:
            return {}
        side = "left" if lhs is None else "right"
        return {"domain": f"the {side}-hand side is outside an operator's domain and the other is not, for {inputs}"}
    if lhs.shape != rhs.shape:
        return {"shape": f"shapes {lhs.shape} and {rhs.shape}"}
    a, b = np.asarray(lhs).reshape(-1), np.asarray(rhs).reshape(-1)
    return {kind: f"output element {index} is {_text(a[index:index + 1])[1:-1]} before and "
                  f"{_text(b[index:index + 1])[1:-1]} after, for {inputs}"
            for kind, index in _differences(a, b, infinite_inputs).items()}


def _reshape_targets(canon: CanonRule, sems: dict[str, OpSemantics]) -> set[str]:
    """Variables that are the target shape of a reshaping operator: given [-1] (flatten,
    valid for every input), so that rules over reshapes apply to the random inputs."""
    return {p.inputs[1].name for p in subpatterns(canon.lhs) if isinstance(p, ast.POp) and p.op in sems
            and getattr(sems[p.op].builtin, "name", None) == "reshape" and len(p.inputs) > 1
            and isinstance(p.inputs[1], ast.PVar)}


class _Facts(NumpyFacts):
    """The replay's facts, except that the tensors the guard wants constant are: in a
    compiled model they would be initializers, and their values here are concrete
    anyway (the folds of `bn-fold-conv`, `const-mul-mul`, ... apply only to constants)."""

    def __init__(self, tensors: dict[str, np.ndarray], domain: Domain, constants: frozenset[str]) -> None:
        super().__init__(tensors, domain)
        self.constants = constants

    def is_const(self, var: str) -> bool:
        return var.startswith("#") or var in self.constants


def _constant_vars(guard: ast.Expr | None) -> frozenset[str]:
    """The variables of ``is_const(?v)`` calls the guard requires (not under a ``not``)."""
    found: set[str] = set()

    def walk(expr: ast.Expr, negated: bool) -> None:
        if isinstance(expr, ast.UnOp) and expr.op == "not":
            walk(expr.operand, not negated)
            return
        if (isinstance(expr, ast.Call) and expr.func == "is_const" and not negated and expr.args
                and isinstance(expr.args[0], ast.Var)):
            found.add(expr.args[0].name)
        for sub in ast.sub_expressions(expr):
            walk(sub, negated)

    if guard is not None:
        walk(guard, False)
    return frozenset(found)


def _differences(a: np.ndarray, b: np.ndarray, infinite_inputs: bool) -> dict[str, int]:
    """Each kind of difference between two flat results, with its first element."""
    if a.dtype == object or b.dtype == object or a.dtype.kind != "f" or b.dtype.kind != "f":
        differ = np.flatnonzero(a.astype(object) != b.astype(object))
        return {"rounding": int(differ[0])} if differ.size else {}
    a, b = a.astype(np.float32), b.astype(np.float32)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    both = ~nan_a & ~nan_b
    with np.errstate(all="ignore"):
        inf_a, inf_b = np.isinf(a), np.isinf(b)
        masks = {
            "nan": nan_a != nan_b,
            "inf" if infinite_inputs else "overflow": both & ((inf_a != inf_b) | (inf_a & inf_b & (a != b))),
            "negzero": both & (a == 0) & (b == 0) & (np.signbit(a) != np.signbit(b)),
            "rounding": both & ~inf_a & ~inf_b & (a != b),
        }
    return {kind: int(np.flatnonzero(mask)[0]) for kind, mask in masks.items() if mask.any()}


def _text(array: np.ndarray) -> str:
    flat = np.asarray(array).reshape(-1)
    shown = ", ".join(f"{float(v):.9g}" if np.asarray(v).dtype.kind == "f" else str(v) for v in flat[:6])
    return f"[{shown}{', ...' if flat.size > 6 else ''}]"


# ---------------------------------------------------------------- the [exact] tag and the record


def tag_mismatch(rule: ast.Rule, record: SpecialValues) -> str:
    """Why ``rule``'s ``[exact]`` tag contradicts its record ("" when it does not)."""
    if "exact" not in rule.flags or not record.changes:
        return ""
    return (f"rule '{rule.name}' is tagged [exact] but its special-value record {record.summary} "
            f"(e.g. {record.examples[0]}); remove [exact] or fix the rule")


def exact_tag_errors(ruleset: ast.RuleSet, cache_dir: str | Path | None = None) -> list[str]:
    """One message per rule tagged ``[exact]`` whose record shows a change (``dnnr check``)."""
    tagged = replace(ruleset, rules=tuple(r for r in ruleset.rules if "exact" in r.flags))
    if not tagged.rules:
        return []
    found = records(tagged, cache_dir=cache_dir)
    return [f"{rule.span}: error: {message}" for rule in tagged.rules
            if (message := tag_mismatch(rule, found[rule.name]))]


def attach(verdicts: Sequence[Verdict], ruleset: ast.RuleSet, sems: dict[str, OpSemantics],
           cache_dir: str | Path | None = None, use_cache: bool = True,
           known: dict[str, SpecialValues] | None = None) -> list[Verdict]:
    """``verdicts`` with each rule's special-value record (``special_values`` in
    ``--json``); a proved rule tagged [exact] whose record shows a change fails.
    ``known``: records computed already (by the verifier's workers), by rule name."""
    known = known or {}
    rest = replace(ruleset, rules=tuple(r for r in ruleset.rules if r.name not in known))
    found = {**records(rest, sems, cache_dir, use_cache), **known}
    out = []
    for verdict, rule in zip(verdicts, ruleset.rules, strict=True):
        record = found[rule.name]
        verdict = replace(verdict, special_values=record.to_json())
        mismatch = tag_mismatch(rule, record)
        if mismatch and verdict.ok:
            verdict = replace(verdict, status="failed", stage="value", message=mismatch)
        elif "exact" in rule.flags and not record.evaluated:
            verdict = replace(verdict, notes=(*verdict.notes, f"special values {record.summary}: "
                                              "[exact] rests on the IEEE-tier proof alone"))
        out.append(verdict)
    return out


def _key(rule: ast.Rule, sems: dict[str, OpSemantics]) -> str:
    return cache.cache_key(rule, sems, f"special-values/{VERSION}/{MAX_RANK}/{TRIALS}")


def _load(directory: Path, key: str) -> SpecialValues | None:
    try:
        data = json.loads((directory / f"{key}.json").read_text())
        return SpecialValues(data["rule"], int(data["evaluated"]), tuple(data["changes"]),
                             tuple(data["examples"]), str(data["not_evaluated"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _store(directory: Path, key: str, record: SpecialValues) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f"{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record.to_json()))
        tmp.replace(directory / f"{key}.json")
    except OSError:  # a read-only cache costs time, not correctness
        pass
