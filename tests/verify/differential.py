"""Tie the verifier to the compiler (issue 12, item 4): for one rule, build a model in
which it fires -- from the rule's own left-hand side, with the ranks, broadcasting and
attribute values the verifier enumerates -- compile it with only that rule, and compare
the compiled model with the original under onnxruntime on random and special values.

`witness(rule, ruleset)` returns the model (or why none could be built, a reason the
test prints); `differ(rule, ruleset, witness)` compiles and compares, returning "" when
the compiled model agrees and a one-line description naming the rule otherwise.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from egraph_compiler import egraph, extract, ir
from egraph_compiler.dsl import ast
from egraph_compiler.dsl.ast import RuleSet
from egraph_compiler.extract.cost import Cost, CostModel
from egraph_compiler.ir.graph import Graph, Node, TensorType, Value
from egraph_compiler.verify.builtin_ops import OPAQUE, Undefined, load_semantics
from egraph_compiler.verify.configs import enumerate_configs
from egraph_compiler.verify.encode import SYMBOLIC_LIST, DoesNotFire, Illformed, Unsupported
from egraph_compiler.verify.normalize import CanonRule, boolean_vars, canonical, list_used_vars
from egraph_compiler.verify.perm import sample_perms
from egraph_compiler.verify.replay import Runner
from egraph_compiler.verify.scalar import Domain
from tests.modelzoo import run_ort

# float32 values no rule may mishandle (exact or not), and the IEEE specials only rules
# marked [exact] must keep bit for bit (others are exact over the reals only)
FINITE_SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, 1e-40, -1e-40, 0.5, 2.0], dtype=np.float32)
IEEE_SPECIALS = np.array([np.inf, -np.inf, np.nan, 3e38, -3e38, 0.0, -0.0, 1e-45],
                         dtype=np.float32)
TRIES = 60  # random configurations tried before giving up on a witness


@dataclass
class Witness:
    graph: Graph
    feeds: list[dict[str, np.ndarray]]  # random, finite specials, then IEEE specials
    exact: bool


def _attr_value(expr: ast.Expr, attrs: dict[str, Any]) -> Any:
    if isinstance(expr, ast.Var):
        return attrs.get(expr.name)
    if isinstance(expr, ast.Num):
        return expr.value
    if isinstance(expr, ast.Str):
        return expr.value
    if isinstance(expr, ast.UnOp) and expr.op == "-":
        inner = _attr_value(expr.operand, attrs)
        return None if inner is None else -inner
    if isinstance(expr, ast.ListLit):
        return tuple(_attr_value(i, attrs) for i in expr.items)
    if isinstance(expr, ast.Name) and expr.name == "inf":
        return float("inf")
    return None


def _symbolic_attrs(canon: CanonRule, ruleset: RuleSet, rng: np.random.Generator,
                    config_attrs: dict[str, Any]) -> dict[str, Any] | None:
    """Values for the attribute variables the verifier leaves symbolic: floats away from
    their defaults, small ints; None when an int list is symbolic (not built here)."""
    out: dict[str, Any] = {}
    for node in _ops(canon.lhs):
        types = {a.name: a.type for a in ruleset.ops[node.op].attrs}
        for name, expr in node.attrs:
            if not isinstance(expr, ast.Var) or name.startswith("_") or expr.name in out:
                continue
            if config_attrs.get(expr.name) == SYMBOLIC_LIST:
                return None
            if expr.name in config_attrs:
                continue
            kind = types.get(name)
            if kind == "float":
                out[expr.name] = float(rng.choice([0.5, 2.0, -1.0, 0.25, 1.5] if rng.random() < 0.5
                                                  else [0.5, 2.0, 0.25, 1e-3]))
            elif kind == "int":
                out[expr.name] = int(rng.choice([0, 1, -1, 2]))
            elif kind in ("ints", "floats", "strings", "string", "tensor"):
                return None
    return out


def _ops(p: ast.Pattern) -> list[ast.POp]:
    if not isinstance(p, ast.POp):
        return []
    return [n for c in p.inputs for n in _ops(c)] + [p]


def witness(rule: ast.Rule, ruleset: RuleSet, seed: int = 0) -> Witness | str:
    """A model made of ``rule``'s left-hand side on which its guard holds, or the reason
    none was found."""
    sems = load_semantics(ruleset.ops)
    canon = canonical(rule, ruleset.ops)
    if canon.problems:
        return "; ".join(canon.problems)
    if boolean_vars(canon, ruleset.ops):
        return "boolean inputs (not generated here)"
    if any(sems[op].integer_only for op in canon.ops):
        return "integer-only operators (not generated here)"
    valued = list_used_vars(canon) | _reshape_targets(canon, sems)
    facts = _fact_vars(canon.guard)
    if any(op in INTERNAL_OPS for op in canon.ops):
        return "an internal operator without an onnxruntime kernel in the exported opset"
    try:
        configs = [c for c, _ in enumerate_configs(canon, sems)]
    except Unsupported as err:
        return f"no configurations: {err}"
    if not configs:
        return "no configurations"
    rng = np.random.default_rng(seed)
    domain = Domain("fp32")
    # the widest ranks first: rank-4 tensors and broadcasting are the interesting ones
    configs.sort(key=lambda c: -sum(r for _, r in c.ranks))
    for attempt in range(TRIES):
        config = configs[attempt % min(len(configs), 24)] if attempt < 24 else configs[
            int(rng.integers(len(configs)))]
        attrs = dict(config.attrs)
        attrs.update(sample_perms(canon, sems, config, rng))  # a perm symbolic at rank >= 3
        extra = _symbolic_attrs(canon, ruleset, rng, attrs)
        if extra is None:
            return "a symbolic int list attribute (not generated here)"
        attrs.update(extra)
        # every other attempt one size for all dims: guards that equate dims (channels of
        # a BatchNorm and of a Conv's weights) hold more often
        dims = ([int(rng.choice([2, 3, 4])) for _ in range(5)] if attempt % 2
                else [int(rng.choice([2, 3]))] * 5)
        tensors: dict[str, np.ndarray] = {}
        targets: list[str] = []
        for var, rank in config.ranks:
            shape = tuple(dims[5 - rank + k] if rng.random() < (0.8 if attempt % 2 else 0.9)
                          else 1 for k in range(rank))
            if var.startswith("#"):
                tensors[var] = np.full(shape, dict(canon.const_values)[var], dtype=np.float32)
            elif var in valued:
                targets.append(var)
            else:
                values = rng.normal(0, 2, shape)
                if attempt % 3 == 2:  # positive values: variances, square roots, logs
                    values = np.abs(values) + 0.5
                kinds = facts.get(var, set())
                if kinds & {"nonneg", "positive"}:
                    values = np.abs(values)
                if kinds & {"positive", "nonzero"}:
                    values = np.where(values == 0, 1.0, values)
                tensors[var] = np.asarray(values, dtype=np.float32)
        runner = Runner(sems, domain, tensors, attrs)
        constant = set(facts) | set(targets)
        runner.facts.is_const = lambda var, constant=constant: (  # type: ignore[method-assign]
            var.startswith("#") or var in constant)
        try:
            for var in targets:  # a Reshape target: a valid one for the reshaped tensor
                target = _reshape_target(canon, sems, runner, var, config.rank_of[var], rng)
                if target is None:
                    raise DoesNotFire("no reshape target")
                tensors[var] = target
            if not runner.guard(canon.guard):
                continue
            values: dict[int, np.ndarray] = {}
            for node in _ops(canon.lhs):
                values[id(node)] = runner.run(node)
        except (Illformed, Undefined, DoesNotFire, Unsupported, KeyError, TypeError, ValueError):
            continue
        graph = _graph(canon, ruleset, tensors, attrs, values, set(facts) | set(targets))
        if graph is None:
            continue
        inputs = {v: a for v, a in tensors.items()
                  if not v.startswith("#") and v not in facts and v not in targets}
        feeds = [inputs, _specials(inputs, FINITE_SPECIALS, rng)]
        if "exact" in rule.flags:
            feeds.append(_specials(inputs, IEEE_SPECIALS, rng))
        return Witness(graph, feeds, "exact" in rule.flags)
    return f"no configuration of {TRIES} tried satisfies the guard"


INTERNAL_OPS = frozenset({"Gelu"})  # exported as opset-20 Gelu, which our onnxruntime lacks
ELEMENT_FACTS = ("is_const", "nonneg", "positive", "nonzero")


def _fact_vars(guard: ast.Expr | None) -> dict[str, set[str]]:
    """Tensor variables the guard asks `is_const`/`nonneg`/... of: the e-graph decides
    those facts on constants, so the witness makes them constants that satisfy them."""
    out: dict[str, set[str]] = {}

    def walk(e: ast.Expr) -> None:
        if isinstance(e, ast.Call) and e.func in ELEMENT_FACTS:
            for a in e.args:
                if isinstance(a, ast.Var):
                    out.setdefault(a.name, set()).add(e.func)
        for sub in ast.sub_expressions(e):
            walk(sub)

    if guard is not None:
        walk(guard)
    return out


def _reshape_targets(canon: CanonRule, sems: dict[str, Any]) -> set[str]:
    return {p.inputs[1].name for p in _ops(canon.lhs)
            if sems[p.op].builtin is not None and sems[p.op].builtin.name in ("reshape", "expand")
            and len(p.inputs) > 1 and isinstance(p.inputs[1], ast.PVar)}


def _reshape_target(canon: CanonRule, sems: dict[str, Any], runner: Runner, var: str,
                    rank: int, rng: np.random.Generator) -> np.ndarray | None:
    """A shape of ``rank`` dims that the tensor reshaped (or expanded) to ``var`` accepts."""
    for p in _ops(canon.lhs):
        if len(p.inputs) > 1 and isinstance(p.inputs[1], ast.PVar) and p.inputs[1].name == var:
            source = runner.run(p.inputs[0]).shape
            if rank != 1 and sems[p.op].builtin.name == "reshape":
                return None if rank == 0 else _split_shape(source, rank, rng)
            if sems[p.op].builtin.name == "expand":
                return np.array([int(rng.choice([2, 3])) if d == 1 else d for d in source],
                                dtype=np.float32) if rank == 1 else None
            return np.array([int(np.prod(source))], dtype=np.float32)
    return None


def _split_shape(source: tuple[int, ...], rank: int, rng: np.random.Generator) -> np.ndarray | None:
    total = int(np.prod(source))
    dims = [1] * rank
    left = total
    for k in range(rank - 1):
        divisors = [d for d in (2, 3, 4) if left % d == 0]
        dims[k] = int(rng.choice(divisors)) if divisors else 1
        left //= dims[k]
    dims[-1] = left
    return np.array(dims, dtype=np.float32)


def _returns_bool(decl: ast.OpDecl) -> bool:
    """An elementwise operator whose semantics is a condition (Greater, Not, And ...)."""
    e = decl.semantics
    return (isinstance(e, ast.BinOp) and e.op in ("==", "!=", "<", "<=", ">", ">=", "and", "or")
            or isinstance(e, ast.UnOp) and e.op == "not")


def _specials(inputs: dict[str, np.ndarray], pool: np.ndarray,
              rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for name, array in inputs.items():
        mask = rng.random(array.shape) < 0.6
        out[name] = np.where(mask, rng.choice(pool, array.shape), array).astype(np.float32)
    return out


def _graph(canon: CanonRule, ruleset: RuleSet, tensors: dict[str, np.ndarray],
           attrs: dict[str, Any], values: dict[int, np.ndarray],
           constant_vars: set[str]) -> Graph | None:
    nodes: list[Node] = []
    types: dict[str, TensorType] = {}
    constants: dict[str, np.ndarray] = {}
    names: dict[int, str] = {}
    shape_vars = {p.inputs[1].name for p in _ops(canon.lhs)
                  if p.op in ("Reshape", "Expand") and len(p.inputs) > 1
                  and isinstance(p.inputs[1], ast.PVar)}

    def name_of(p: ast.Pattern) -> str | None:
        if isinstance(p, ast.PVar):
            if p.name.startswith("#"):
                const = f"c{p.name[2:]}"
                constants[const] = tensors[p.name]
                types[const] = TensorType("float32", tuple(tensors[p.name].shape))
                return const
            if p.name in constant_vars and p.name not in constants:
                array = tensors[p.name]
                if p.name in shape_vars:
                    array = array.astype(np.int64)
                constants[p.name] = array
                types[p.name] = TensorType(str(array.dtype), tuple(array.shape))
            return p.name
        if not isinstance(p, ast.POp) or id(p) in names:
            return names.get(id(p))
        ins = [name_of(c) for c in p.inputs]
        if any(i is None for i in ins):
            return None
        decl = ruleset.ops[p.op]
        kinds = {a.name: a.type for a in decl.attrs}
        node_attrs: dict[str, Any] = {}
        for attr, expr in p.attrs:
            if attr.startswith("_"):
                continue  # the verifier's hidden attributes (a Reshape's target rank)
            value = _attr_value(expr, attrs)
            if value is None or value == OPAQUE or (isinstance(value, (list, tuple)) and not value
                                 and kinds.get(attr) in ("ints", "floats")):
                continue  # absent: its ONNX meaning
            if kinds.get(attr) in ("ints", "floats", "strings"):
                value = tuple(value) if isinstance(value, (list, tuple)) else (value,)
            elif kinds.get(attr) == "int":
                value = int(value)
            elif kinds.get(attr) == "float":
                value = float(value)
            node_attrs[attr] = value
        out = f"v{len(nodes)}"
        names[id(p)] = out
        result = values[id(p)]
        dtype = types[ins[0]].dtype if ins and ins[0] in types else "float32"
        if p.op == "Cast" and "to" in node_attrs:
            dtype = str(onnx.helper.tensor_dtype_to_np_dtype(int(node_attrs["to"])))
        elif _returns_bool(decl):
            dtype = "bool"
        types[out] = TensorType(dtype, tuple(int(d) for d in np.shape(result)))
        nodes.append(Node(p.op, tuple(ins), (out,), tuple(sorted(node_attrs.items())),
                          f"{p.op.lower()}_{len(nodes)}"))
        return out

    root = name_of(canon.lhs)
    if root is None or not nodes:
        return None
    inputs = [v for v in tensors if not v.startswith("#") and v not in constants]
    for v in inputs:
        types[v] = TensorType("float32", tuple(tensors[v].shape))
    return Graph("witness", inputs=tuple(Value(v, types[v]) for v in inputs),
                 outputs=(Value(root, types[root]),), nodes=tuple(nodes),
                 constants=constants, types=types)


@dataclass(frozen=True, slots=True)
class PreferRewrite(CostModel):
    """The shipped cost model, plus a prohibitive cost on the operators the rule's left
    side has more of than its right side: extraction then takes the rewritten form
    wherever the rule removes an operator (it would keep the original on a tie or where
    the rewrite costs more, and the test would see nothing)."""

    removed: frozenset[str] = frozenset()

    def scalar(self, cost: Cost, op: str | None = None) -> float:
        return CostModel.scalar(self, cost, op) + (1e15 if op in self.removed else 0.0)


def _removed_ops(rule: ast.Rule) -> frozenset[str]:
    def count(p: ast.Pattern) -> Counter[str]:
        found: Counter[str] = Counter()
        if isinstance(p, ast.POp):
            found[p.op] += 1
            for child in p.inputs:
                found += count(child)
        return found

    left, right = count(rule.lhs), count(rule.rhs)
    return frozenset(op for op, n in left.items() if n > right.get(op, 0))


def differ(rule: ast.Rule, ruleset: RuleSet, found: Witness) -> tuple[bool, str]:
    """(fired, problem): compile ``found.graph`` with ``rule`` alone; problem is "" when
    the compiled model agrees with the original under onnxruntime."""
    alone = RuleSet(ops=ruleset.ops, rules=(rule,), limits=ruleset.limits)
    saturation = egraph.saturate(found.graph, alone)
    fired = bool(saturation.stats.rule_fires.get(rule.name, 0))
    compiled = extract.extract(saturation, cost_model=PreferRewrite(removed=_removed_ops(rule))).graph
    before, after = ir.to_onnx(found.graph), ir.to_onnx(compiled)
    for k, feeds in enumerate(found.feeds):
        want = next(iter(run_ort(before, feeds).values()))
        kind = ("random", "finite special", "IEEE special")[k]
        try:
            got = next(iter(run_ort(after, feeds).values()))
        except Exception as err:  # onnxruntime rejects the compiled model (a wrong type)
            return fired, f"rule {rule.name}: onnxruntime rejects the compiled model: {err}"
        if want.shape != got.shape:
            return fired, f"rule {rule.name}: shape {got.shape} != {want.shape} ({kind} inputs)"
        if want.dtype.kind != "f":
            same = want == got
        elif k == 2:  # [exact]: bit for bit, all NaNs alike
            same = (np.isnan(want) & np.isnan(got)) | (
                want.view(np.uint32) == got.view(np.uint32))
        else:
            # exact over the reals only: where the original is not finite, the left side
            # was undefined over the reals (x / 0, log of a negative) and the verifier's
            # refinement lets the right side give anything there
            same = np.isclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True) | (
                ~np.isfinite(want) if not found.exact else False)
        if not np.all(same):
            where = tuple(int(i) for i in np.argwhere(~same)[0])
            return fired, (f"rule {rule.name}: compiled model differs from onnxruntime on "
                           f"{kind} inputs at {list(where)}: {got[where]!r} vs {want[where]!r}")
    return fired, ""
