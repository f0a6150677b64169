"""Tensor patterns in Z3 (DESIGN §4): a tensor is an uninterpreted function of
symbolic indices, its dims are z3 Ints (>= 1), a node is encoded as "its shape"
plus "its element at a symbolic index, and whether that element is defined".

One `Encoder` encodes both sides of one rule for one `Config` (ranks of the
tensor variables, values of the enumerated attributes) in one tier (`Domain`).
Reductions are unrolled for lengths <= `bound` ("bounded" mode) or become partial
sums over a prefix of symbolic length ``m`` ("induction" mode; see `check.py`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import z3

from egraph_compiler.dsl import ast
from egraph_compiler.ops.z3 import Unencodable, as_bool, as_element, to_z3
from egraph_compiler.verify import evalexpr
from egraph_compiler.verify.scalar import AbstractDomain, Domain, Unsupported
from egraph_compiler.verify.semantics import OpSemantics

Dims = list[Any]  # z3 ArithRef or int
Cell = tuple[z3.ExprRef, z3.BoolRef]  # (element value, element defined)


SYMBOLIC_LIST = "<symbolic ints>"  # an enumerated attribute value: z3 Ints, one per axis


class Illformed(Exception):
    """The pattern has no meaning for this configuration (rank or attribute mismatch)."""


class DoesNotFire(Illformed):
    """A computed attribute cannot be evaluated (a built-in failed): the rewrite does
    not fire, as in the e-graph, where the original node stays."""


@dataclass(frozen=True)
class Config:
    ranks: tuple[tuple[str, int], ...]
    attrs: tuple[tuple[str, Any], ...]

    @property
    def rank_of(self) -> dict[str, int]:
        return dict(self.ranks)

    @property
    def attr_of(self) -> dict[str, Any]:
        return dict(self.attrs)

    def describe(self) -> str:
        ranks = ", ".join(f"rank(?{v})={r}" for v, r in self.ranks if not v.startswith("#"))
        attrs = ", ".join(f"?{a}={_show(v)}" for a, v in self.attrs)
        return "; ".join(x for x in (ranks, attrs) if x)


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


@dataclass
class Reduction:
    """One reduction met in induction mode: partial results P(m, outer), D(m, outer)."""

    key: str
    outer: tuple[Any, ...]
    extents: tuple[Any, ...]
    body: Callable[[list[Any]], Cell]
    combine: Callable[[Any, Any], Any]
    partial: z3.FuncDeclRef
    partial_defined: z3.FuncDeclRef
    kind: str = "sum"
    group: str = ""  # the enumeration (m, E) it shares with its partner (paired induction)
    cell: Cell | None = None  # what this mode's encoding of the reduction is

    def prefix(self, m: Any) -> Cell:
        """The partial result over the first ``m`` elements of the enumeration."""
        return self.partial(m, *self.outer), self.partial_defined(m, *self.outer)


def stable_key(obj: object) -> str:
    return hashlib.sha1(repr(obj).encode()).hexdigest()[:10]


# Results of the pure term builders below (`broadcast`, `project`, `in_bounds`, a
# variable's dims and their ">= 1" facts), by the ids of their arguments, for z3py's
# current main context: a rule's configurations and encodings build the same terms
# again and again (z3py spends ~20 us per term; Z3 shares equal terms, so a
# remembered result is the very term a new call would build: the queries are the
# same). The arguments are kept with the result, so their ids are not reused while
# they key it.
_MEMO: dict[Any, tuple[Any, Any]] = {}
_MEMO_CONTEXT: list[Any] = [None]
_MEMO_LIMIT = 200_000


def _memo_key(value: Any, keep: list[Any]) -> Any:
    if isinstance(value, z3.AstRef):
        keep.append(value)
        return value.get_id()
    if isinstance(value, (list, tuple)):
        return tuple(_memo_key(v, keep) for v in value)
    return (type(value).__name__, value)  # (True and 1 are different arguments)


def _memoised(name: str, args: Any, build: Callable[[], Any]) -> Any:
    ctx = z3.main_ctx()
    if _MEMO_CONTEXT[0] is not ctx or len(_MEMO) > _MEMO_LIMIT:
        _MEMO.clear()
        _MEMO_CONTEXT[0] = ctx
    keep: list[Any] = []  # the terms themselves (a caller may change its lists)
    key = (name, _memo_key(args, keep))
    hit = _MEMO.get(key)
    if hit is None:
        hit = (keep, build())
        _MEMO[key] = hit
    return hit[1]


@dataclass
class Encoder:
    sems: dict[str, OpSemantics]
    domain: Domain
    config: Config
    consts: dict[str, float]
    mode: str = "bounded"  # or "prefix", "base", "step" (induction)
    m: Any = None
    bound: int = 4
    touched: dict[str, list[tuple[tuple[Any, ...], z3.ExprRef]]] = field(default_factory=dict)
    bounds: list[z3.BoolRef] = field(default_factory=list)
    reductions: list[Reduction] = field(default_factory=list)
    extents: list[Any] = field(default_factory=list)  # every reduced length met
    index_facts: list[Any] = field(default_factory=list)  # ranges of abstract index maps
    flags: dict[tuple[str, str], z3.BoolRef] = field(default_factory=dict)
    symbolic_attrs: dict[str, Any] = field(default_factory=dict)
    hints: list[Any] = field(default_factory=list)  # preferred models, never assumed
    fires: list[Any] = field(default_factory=list)  # where the rule's built-ins are defined
    row_major: bool = False  # an exact Reshape / Flatten index map was encoded
    valued_vars: frozenset[str] = frozenset()  # tensors the rule reads as int lists
    boolean_vars: frozenset[str] = frozenset()  # boolean tensors: elements 0 or 1
    integers: dict[int, Any] = field(default_factory=dict)  # id -> real term of an integer
    # paired induction (check._paired_induction): reduction key -> its enumeration's
    # name, and reduction key -> where its first axis is split in two reductions
    groups: dict[str, str] = field(default_factory=dict)
    splits: dict[str, Any] = field(default_factory=dict)
    _values: dict[str, list[Any]] = field(default_factory=dict)
    _shape_memo: dict[Any, tuple[Dims, list[Any]]] = field(default_factory=dict)
    _value_memo: dict[Any, Cell] = field(default_factory=dict)
    _index_keys: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    _in_body: bool = False
    _nesting: int = 0  # depth of `_opaque_reduction`s being encoded

    # ------------------------------------------------------------ forks
    def shapes_only(self) -> bool:
        """Nothing but shapes, attributes and the guard has been encoded: no value,
        no reduction (what `fork` may copy into another mode)."""
        return not (self.reductions or self.extents or self.bounds or self._value_memo
                    or self._in_body or self._nesting)

    def fork(self, mode: str, m: Any) -> Encoder:
        """This encoder (after its shape stage, `shapes_only`) in ``mode``: every
        container copied, so the two go on independently. Its terms are the ones a
        fresh encoder in ``mode`` would build for the same shapes (they are named, not
        numbered, and the shape stage never reads the mode), so the queries are the
        same; the shape stage is not paid again (check._build: a reduction rule
        encodes its shapes for the plain, prefix, base and step encodings)."""
        assert self.shapes_only(), "fork after the shape stage only"
        domain = copy.copy(self.domain)
        domain.terms = list(self.domain.terms)
        domain._seen = set(self.domain._seen)
        copied: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (list, dict, set)):
                value = copy.copy(value)
            copied[f.name] = value
        copied["touched"] = {var: list(cells) for var, cells in self.touched.items()}
        copied["_shape_memo"] = {key: (list(dims), list(wf))
                                 for key, (dims, wf) in self._shape_memo.items()}
        copied.update(domain=domain, mode=mode, m=m)
        return Encoder(**copied)

    # ------------------------------------------------------------ tensor facts
    def rank(self, var: str) -> int:
        return self.config.rank_of[var]

    def shape(self, var: str) -> Dims:
        return list(dims_of(var, self.rank(var)))

    def element_fact(self, kind: str, var: str) -> z3.BoolRef:
        key = (kind, var)
        if key not in self.flags:
            self.flags[key] = z3.Bool(f"{kind}_{var}")
        return self.flags[key]

    def is_const(self, var: str) -> z3.BoolRef:
        return z3.BoolVal(True) if var.startswith("#") else z3.Bool(f"is_const_{var}")

    def dtype(self, var: str) -> str:
        return {"real": "float32", "int": "uint32"}.get(self.domain.name, self.domain.dtype)

    def require(self, cond: Any) -> None:
        self.fires.append(cond)

    def values(self, var: str) -> list[Any]:
        """The elements of a 1-D tensor read as a list of ints (a Reshape target):
        integer z3 constants tied to the tensor's elements; the length is the
        enumerated target rank of the Reshape / Expand / ConstantOfShape reading it."""
        if var not in self._values:
            length = target_length(self.config.attr_of, var)
            if length is None or self.rank(var) != 1:
                raise evalexpr.NotApplicable(f"?{var} has no known length as a list")
            ints = [z3.Int(f"v_{var}_{k}") for k in range(length)]
            self._values[var] = ints
            for k, v in enumerate(ints):
                element = self.var_element(var, [k])
                if self.domain.name == "real":
                    self.index_facts.append(element == z3.ToReal(v))
                elif self.domain.name == "int":
                    self.index_facts.append(element == v)
                # other tiers: the ints stay free (a proof covers every value)
        return self._values[var]

    def guard(self, expr: ast.Expr | None) -> Any:
        if expr is None:
            return True
        return evalexpr.evaluate(expr, self.attr_env(), self)

    def attr_env(self) -> dict[str, Any]:
        env = dict(self.config.attrs)
        env.update(self.symbolic_attrs)
        return env

    # ------------------------------------------------------------ attributes
    def attrs(self, node: ast.POp) -> dict[str, Any]:
        decl = self.sems[node.op].decl
        types = {a.name: a.type for a in decl.attrs}
        builtin = self.sems[node.op].builtin
        lists = getattr(builtin, "symbolic_lists", ())
        out: dict[str, Any] = {}
        # symbolic int lists last: their length follows the other attributes (axes)
        ordered = sorted(node.attrs, key=lambda item: item[0] in lists)
        for name, expr in ordered:
            if isinstance(expr, ast.Var) and name in lists and self.config.attr_of.get(
                    expr.name) == SYMBOLIC_LIST:
                length = builtin.list_length(out, self.rank_of(node.inputs[0]))
                known = self.symbolic_attrs.get(expr.name)
                if known is not None and len(known) != length:
                    raise Illformed(f"?{expr.name} has two lengths")
                if expr.name not in self.symbolic_attrs:
                    # a built-in may shape its symbolic lists (a perm: one-hot, `perm.py`)
                    make = getattr(builtin, "symbolic_list", None)
                    self.symbolic_attrs[expr.name] = (
                        make(expr.name, length) if make is not None
                        else [z3.Int(f"attr_{expr.name}_{k}") for k in range(length)])
            elif isinstance(expr, ast.Var) and expr.name not in self.config.attr_of:
                if types.get(name) not in ("float", "int", "tensor"):
                    raise Unsupported(f"attribute ?{expr.name} of {node.op} is not enumerable")
                # a `tensor` attribute (ConstantOfShape's value) is one symbolic scalar
                make = z3.Int if types.get(name) == "int" else z3.Real
                self.symbolic_attrs.setdefault(expr.name, make(f"attr_{expr.name}"))
            try:
                out[name] = evalexpr.evaluate(expr, self.attr_env(), self)
            except evalexpr.NotApplicable as err:
                raise DoesNotFire(f"{node.op}.{name}: {err}") from err
        return out

    # ------------------------------------------------------------ ranks and shapes
    def rank_of(self, p: ast.Pattern) -> int:
        if isinstance(p, ast.PVar):
            return self.rank(p.name)
        if isinstance(p, ast.PConst):
            return 0
        if isinstance(p, ast.PCompute):
            return 0 if p.func == "scalar" else 1
        sem = self.sems[p.op]
        in_ranks = [self.rank_of(i) for i in p.inputs]
        if sem.elementwise is not None or sem.builtin is None:
            return max(in_ranks, default=0)
        return sem.builtin.out_rank(in_ranks, self.attrs(p))

    def shape_of(self, p: ast.Pattern) -> tuple[Dims, list[Any]]:
        """Dims of the pattern's result and the conditions for it to be well-formed."""
        if p in self._shape_memo:
            return self._shape_memo[p]
        if isinstance(p, ast.PVar):
            result: tuple[Dims, list[Any]] = (self.shape(p.name), [])
        elif isinstance(p, ast.PConst) or (isinstance(p, ast.PCompute) and p.func == "scalar"):
            result = ([], [])
        elif isinstance(p, ast.PCompute) and p.func == "vector":
            result = ([len(self.vector_entries(p))], [])
        elif isinstance(p, ast.PCompute):
            raise Unsupported(f"{p.func}() constants have no verifier encoding")
        else:
            sem = self.sems[p.op]
            children = [self.shape_of(i) for i in p.inputs]
            wf = [c for _, conds in children for c in conds]
            if sem.elementwise is not None or getattr(sem.builtin, "elementwise", False):
                dims, more = broadcast([d for d, _ in children])
                more = more + self._constant_fits(p, children, dims)
            elif sem.builtin is not None:
                attrs = self.attrs(p)
                sem.builtin.out_rank([len(d) for d, _ in children], attrs)  # validates ranks
                dims, more = sem.builtin.shape(self, p, [d for d, _ in children], attrs)
            else:
                raise Unsupported(f"{p.op} has no semantics (neither `= expr` nor `= builtin`)")
            result = (dims, wf + more)
        self._shape_memo[p] = result
        return result

    def _constant_fits(self, p: ast.POp, children: list[tuple[Dims, list[Any]]],
                       dims: Dims) -> list[Any]:
        """A left-hand-side constant never broadcasts the result (the e-graph matches
        it only where the op's shape is the other operands' shape)."""
        consts = [isinstance(c, ast.PVar) and c.name.startswith("#") for c in p.inputs]
        if not any(consts) or all(consts):
            return []
        others, _ = broadcast([d for (d, _), c in zip(children, consts, strict=True) if not c])
        if len(others) != len(dims):
            raise Illformed("a pattern constant would broadcast the result")
        return [a == b for a, b in zip(others, dims, strict=True)]

    # ------------------------------------------------------------ values
    def value_of(self, p: ast.Pattern, idx: list[Any]) -> Cell:
        # inside a reduction's body a nested reduction is its whole (opaque) value, not
        # the prefix the same node has outside: the two never share a cell
        key = (p, self._in_body, tuple(self._index_key(i) for i in idx))
        if key in self._value_memo:
            return self._value_memo[key]
        result = self._value(p, idx)
        self._value_memo[key] = result
        return result

    def _index_key(self, i: Any) -> int:
        """An index in simplified form, so that equal indices share a cell: the id of
        the simplified term (Z3 shares equal terms), memoised by the term's id (both
        terms are kept alive, so neither id is reused)."""
        term = z3.IntVal(i) if isinstance(i, int) else i
        known = self._index_keys.get(term.get_id())
        if known is None:
            simple = z3.simplify(term)
            known = (term, simple)
            self._index_keys[term.get_id()] = known
        return known[1].get_id()

    def _value(self, p: ast.Pattern, idx: list[Any]) -> Cell:
        if isinstance(p, ast.PVar):
            return self.var_element(p.name, idx), z3.BoolVal(True)
        if isinstance(p, ast.PConst):
            return self.domain.const(p.value), z3.BoolVal(True)
        if isinstance(p, ast.PCompute) and p.func == "vector":
            entries = self.vector_entries(p)
            if not entries:
                raise Illformed("an element of an empty vector()")
            value = self.scalar_const(entries[-1])
            for k in range(len(entries) - 2, -1, -1):
                value = z3.If(idx[0] == k, self.scalar_const(entries[k]), value)
            return value, z3.BoolVal(True)
        if isinstance(p, ast.PCompute):
            value = evalexpr.evaluate(p.args[0], self.attr_env(), self)
            return self.scalar_const(value), z3.BoolVal(True)
        sem = self.sems[p.op]
        if sem.elementwise is not None:
            out_dims, _ = self.shape_of(p)
            cells = [self.value_of(child, project(self.shape_of(child)[0], idx))
                     for child in p.inputs]
            return self.scalar_semantics(p, sem, [c[0] for c in cells],
                                         z3.And(*[c[1] for c in cells]))
        assert sem.builtin is not None
        return sem.builtin.value(self, p, self.attrs(p), idx)

    def vector_entries(self, p: ast.PCompute) -> list[Any]:
        """The int list of ``vector(...)`` (ints and z3 Ints), evaluated once."""
        key = ("vector", p)
        if key not in self._shape_memo:
            try:
                entries = evalexpr.evaluate(p.args[0], self.attr_env(), self)
            except evalexpr.NotApplicable as err:
                raise DoesNotFire(f"vector(): {err}") from err
            if not isinstance(entries, list):
                raise Illformed("vector() of something that is not a list")
            self._shape_memo[key] = (entries, [])
        return list(self._shape_memo[key][0])

    def var_element(self, var: str, idx: list[Any]) -> z3.ExprRef:
        if var.startswith("#"):
            return self.domain.const(self.consts[var])
        sort = self.domain.sort
        if not idx:
            term = z3.Const(f"T_{var}_{self.domain.name}", sort)
        else:
            fn = z3.Function(f"T_{var}_{self.domain.name}", *([z3.IntSort()] * len(idx)), sort)
            term = fn(*idx)
        self.touched.setdefault(var, []).append((tuple(idx), term))
        return term

    def scalar_const(self, value: Any) -> z3.ExprRef:
        if isinstance(value, z3.ExprRef):
            if isinstance(self.domain, AbstractDomain):
                return self.domain.of_real(value)
            if self.domain.name == "real":
                return value if value.sort() == z3.RealSort() else z3.ToReal(value)
            if self.domain.is_float:
                return z3.fpRealToFP(z3.RNE(), value if value.sort() == z3.RealSort()
                                     else z3.ToReal(value), self.domain.sort)
            raise Unsupported("symbolic attribute in an integer tier")
        return self.domain.const(value)

    def scalar_semantics(self, node: ast.POp, sem: OpSemantics, operands: list[z3.ExprRef],
                         defined: z3.BoolRef) -> Cell:
        env: dict[str, Any] = {p.name: v for p, v in zip(sem.decl.params, operands, strict=False)}
        for name, value in self.attrs(node).items():
            env[name] = value if isinstance(value, str) else self.scalar_const(value)
        assert sem.elementwise is not None
        term = as_element(scalar_expr(sem.elementwise, env, self.domain), self.domain)
        if sem.decl.requires is not None:
            defined = z3.And(defined, as_bool(scalar_expr(sem.decl.requires, env, self.domain),
                                              self.domain))
        return term, defined

    # ------------------------------------------------------------ reductions
    def reduce(self, node: ast.POp, outer: list[Any], extents: list[Any],
               body: Callable[[list[Any]], Cell], kind: str) -> Cell:
        """Combine ``body(t)`` over every ``t`` with ``0 <= t[k] < extents[k]``."""
        combine = combiner(kind, self.domain)
        self.extents.extend(extents)
        if self.mode == "bounded":
            acc, defined = body([0] * len(extents))
            if kind == "sum" and (self.domain.is_float
                                  or getattr(self.domain, "mirrors_float", False)):
                acc = self.domain.binop("+", self.domain.const(0.0), acc)  # +0.0 + x, as NumPy
            # at most 16 unrolled elements: lengths <= 4 on one axis, <= 2 on several
            per_axis = self.bound if len(extents) == 1 else 2
            self.bounds.extend(e <= per_axis for e in extents if not isinstance(e, int))
            for point in _grid(len(extents), per_axis):
                if not any(point):
                    continue
                inside = z3.And(*[t < e for t, e in zip(point, extents, strict=False)])
                value, ok = body(list(point))
                acc = z3.If(inside, combine(acc, value), acc)
                defined = z3.And(defined, z3.Implies(inside, ok))
            return acc, defined
        # Induction modes (see check._induction): "prefix" is the reduction over the
        # first m elements of an enumeration E of the index space, as an uninterpreted
        # P(m); "base" is the first element alone; "step" is P(m) combined with the
        # element E(m). All reductions of the rule share E (their extents are equal).
        if self._in_body:
            return self._opaque_reduction(outer, extents, body, kind)
        key = stable_key((node, kind))
        if key in self.splits:
            # the split lemma (lemmas.split_reduction): over [0, n) x K, the reduction is
            # the one over [0, s) x K combined with the one over [s, n) x K re-indexed
            s, rest = self.splits[key], list(extents[1:])
            lo, lo_ok = self._partial(f"{key}lo", outer, [s] + rest, body, kind)
            hi, hi_ok = self._partial(f"{key}hi", outer, [extents[0] - s] + rest,
                                      lambda t: body([s + t[0]] + list(t[1:])), kind)
            return combine(lo, hi), z3.And(lo_ok, hi_ok)
        return self._partial(key, outer, extents, body, kind)

    def _opaque_reduction(self, outer: list[Any], extents: list[Any],
                          body: Callable[[list[Any]], Cell], kind: str) -> Cell:
        """A reduction met inside another's body (LayerNorm's variance reads the mean)
        in an induction mode: an unknown function ``N_B`` of its outer index, named by
        what it reduces: its kind, extents and body ``B`` (the body's terms at fresh
        reduced indices, its outer index replaced by fresh variables). Putting the outer
        index back into ``B`` gives the body again, so the reduction is ``G(outer)`` for
        ``G(o)`` the reduction of ``B(o, .)``: equal names are equal functions. Nothing
        else is assumed about them, so a proof holds for their true values."""
        self._nesting += 1
        try:
            fresh = [z3.Int(f"nest{self._nesting}_t{k}") for k in range(len(extents))]
            value, defined = body(fresh)
        finally:
            self._nesting -= 1
        args = [z3.IntVal(o) if isinstance(o, int) else o for o in outer]
        holes = [(a, z3.Int(f"nest{self._nesting + 1}_o{k}")) for k, a in enumerate(args)]
        ext = [z3.IntVal(e) if isinstance(e, int) else e for e in extents]
        name = stable_key((kind, self.domain.name,
                           *(z3.substitute(t, *holes).sexpr() if holes else t.sexpr()
                             for t in (*ext, value, defined))))
        ints = [z3.IntSort()] * len(args)
        if not args:
            return (z3.Const(f"N_{name}_{self.domain.name}", self.domain.sort),
                    z3.Bool(f"ND_{name}_{self.domain.name}"))
        return (z3.Function(f"N_{name}_{self.domain.name}", *ints, self.domain.sort)(*args),
                z3.Function(f"ND_{name}_{self.domain.name}", *ints, z3.BoolSort())(*args))

    def group_m(self, group: str) -> Any:
        """The prefix length of enumeration ``group`` ("" is the shared one, ``m``)."""
        return self.m if not group else z3.Int(f"m_{group}")

    def _partial(self, key: str, outer: list[Any], extents: list[Any],
                 body: Callable[[list[Any]], Cell], kind: str) -> Cell:
        """Reduction ``key`` in an induction mode (see `reduce`)."""
        combine = combiner(kind, self.domain)
        ints = [z3.IntSort()] * (1 + len(outer))
        partial = z3.Function(f"P_{key}_{self.domain.name}", *ints, self.domain.sort)
        partial_defined = z3.Function(f"D_{key}_{self.domain.name}", *ints, z3.BoolSort())
        group = self.groups.get(key, "")
        record = Reduction(key, tuple(outer), tuple(extents), body, combine, partial,
                           partial_defined, kind, group)
        self.reductions.append(record)
        m = self.group_m(group)
        if self.mode == "prefix":
            record.cell = record.prefix(m)
            return record.cell
        at = z3.IntVal(0) if self.mode == "base" else m
        index = [z3.Function(f"E{k}{'_' + group if group else ''}", z3.IntSort(),
                             z3.IntSort())(at) for k in range(len(extents))]
        self.bounds.extend(z3.And(t >= 0, t < e) for t, e in zip(index, extents, strict=False))
        self._in_body = True
        try:
            value, ok = body(index)
        finally:
            self._in_body = False
        if self.mode == "base":
            if kind == "sum" and (self.domain.is_float
                                  or getattr(self.domain, "mirrors_float", False)):
                value = self.domain.binop("+", self.domain.const(0.0), value)  # as unrolled
            record.cell = (value, ok)
            return record.cell
        record.cell = (combine(partial(m, *outer), value),
                       z3.And(partial_defined(m, *outer), ok))
        return record.cell

    # ------------------------------------------------------------ background facts
    def background(self, axioms: bool = True) -> list[z3.BoolRef]:
        """Dims >= 1, unsigned integer elements, instantiated guard facts and (unless
        ``axioms`` is false) the axioms of the scalar functions met."""
        facts: list[z3.BoolRef] = []
        for var, rank in self.config.ranks:
            facts.extend(_memoised("positive", (var, rank),
                                   lambda var=var, rank=rank: [d >= 1 for d in dims_of(var, rank)]))
        for var, cells in self.touched.items():
            for _idx, term in cells:
                facts.extend(self.domain.element_facts(term))
                if var in self.boolean_vars:
                    facts.append(z3.Or(self.domain.equal(term, self.domain.const(0)),
                                       self.domain.equal(term, self.domain.const(1))))
        for (kind, var), flag in self.flags.items():
            for _idx, term in self.touched.get(var, []):
                facts.append(z3.Implies(flag, element_predicate(kind, term, self.domain)))
        if axioms:
            facts.extend(self.domain.axioms())
        facts.extend(self.index_facts)
        if self.row_major:
            facts.extend(self._row_major_injective())
        return facts

    def _row_major_injective(self) -> list[Any]:
        """Two in-bounds indices of one tensor with the same row-major offset are the
        same index (true of every shape): instantiated on the pairs read, so that a
        Reshape's read index (known by its offset) meets a directly read one."""
        facts: list[Any] = []
        for var, cells in self.touched.items():
            if var.startswith("#") or self.rank(var) < 2:
                continue
            dims = self.shape(var)
            seen: list[tuple[Any, ...]] = []
            for idx, _term in cells:
                if any(idx is other or idx == other for other in seen):
                    continue
                seen.append(idx)
            for a, b in itertools.combinations(seen, 2):
                facts.append(z3.Implies(
                    z3.And(*in_bounds(a, dims), *in_bounds(b, dims),
                           row_major_offset(a, dims) == row_major_offset(b, dims)),
                    z3.And(*[x == y for x, y in zip(a, b, strict=True)])))
        return facts


def element_predicate(kind: str, term: z3.ExprRef, domain: Domain) -> z3.BoolRef:
    zero = domain.const(0)
    if kind == "nonzero":
        return domain.binop("!=", term, zero)
    if kind == "positive":
        return domain.binop(">", term, zero)
    return domain.binop(">=", term, zero)


def combiner(kind: str, domain: Domain) -> Callable[[Any, Any], Any]:
    if kind in ("sum", "mean"):
        return lambda a, b: domain.binop("+", a, b)
    if kind == "prod":
        return lambda a, b: domain.binop("*", a, b)
    if kind == "max":
        return lambda a, b: domain.call("max", (a, b))
    if kind == "min":
        return lambda a, b: domain.call("min", (a, b))
    raise Unsupported(f"unknown reduction {kind}")


def _grid(n: int, bound: int) -> list[tuple[int, ...]]:
    points: list[tuple[int, ...]] = [()]
    for _ in range(n):
        points = [p + (t,) for p in points for t in range(bound)]
    return points


def dims_of(var: str, rank: int) -> Dims:
    """The dims of tensor ``?var`` at ``rank`` (z3 Ints named by both; do not mutate)."""
    return _memoised("dims", (var, rank),
                     lambda: [z3.Int(f"d_{var}_{k}") for k in range(rank)])


def broadcast(shapes: list[Dims]) -> tuple[Dims, list[Any]]:
    """NumPy broadcasting of symbolic shapes: result dims and when it is legal."""
    out, wf = _memoised("broadcast", shapes, lambda: _broadcast(shapes))
    return list(out), list(wf)


def _broadcast(shapes: list[Dims]) -> tuple[Dims, list[Any]]:
    rank = max((len(s) for s in shapes), default=0)
    out: Dims = []
    wf: list[Any] = []
    for k in range(rank):
        dim: Any = None
        for shape in shapes:
            pos = k - (rank - len(shape))
            if pos < 0:
                continue
            d = shape[pos]
            if dim is None:
                dim = d
            else:
                wf.append(z3.Or(dim == d, dim == 1, d == 1))
                dim = z3.If(dim == 1, d, dim)
        out.append(dim)
    return out, wf


def in_bounds(idx: tuple[Any, ...] | list[Any], dims: Dims) -> list[Any]:
    return list(_memoised("in_bounds", (idx, dims), lambda: [
        z3.And(i >= 0, i < d) for i, d in zip(idx, dims, strict=True)]))


def row_major_offset(idx: tuple[Any, ...] | list[Any], dims: Dims) -> Any:
    """The position of ``idx`` in the row-major order of a tensor of shape ``dims``."""
    offset: Any = z3.IntVal(0)
    for i, d in zip(idx, dims, strict=True):
        offset = offset * d + i
    return offset


def target_length(attrs: dict[str, Any], var: str) -> int | None:
    """The enumerated length of a shape tensor ``?var`` (see `normalize._reshape_rank`)."""
    for kind in ("Reshape", "Expand", "ConstantOfShape"):
        length = attrs.get(f"_{kind}0_rank_{var}")
        if isinstance(length, int):
            return length
    return None


def project(dims: Dims, idx: list[Any]) -> list[Any]:
    """The operand index that broadcasting reads for output index ``idx``."""
    offset = len(idx) - len(dims)
    return list(_memoised("project", (dims, idx[offset:]), lambda: [
        z3.If(d == 1, 0, idx[offset + k]) for k, d in enumerate(dims)]))


def scalar_expr(expr: ast.Expr, env: dict[str, Any], domain: Domain) -> Any:
    """An op's `= expr` / `requires expr` over operand elements, in ``domain``: the one
    scalar compiler (`ops.scalar`) with its Z3 backend, the tier being the spelling."""
    try:
        return to_z3(expr, env, domain)
    except Unencodable as err:
        raise Unsupported(str(err)) from err
