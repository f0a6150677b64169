"""Run a pattern in NumPy: the reference the SMT counterexamples are replayed on,
and the evaluator of the quick fuzz that runs before any solver."""

from __future__ import annotations

from typing import Any

import numpy as np

from egraph_compiler.dsl import ast
from egraph_compiler.ops import scalar
from egraph_compiler.verify import evalexpr
from egraph_compiler.verify.builtin_ops import Undefined
from egraph_compiler.verify.encode import DoesNotFire, Illformed, Unsupported
from egraph_compiler.verify.scalar import Domain
from egraph_compiler.verify.semantics import OpSemantics


def round_bf16(array: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32."""
    bits = np.asarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(array), np.float32("nan"), out).astype(np.float32)


class NumpyFacts:
    def __init__(self, tensors: dict[str, np.ndarray], domain: Domain) -> None:
        self.tensors = tensors
        self.domain = domain

    def rank(self, var: str) -> int:
        return self.tensors[var].ndim

    def shape(self, var: str) -> list[int]:
        return list(self.tensors[var].shape)

    def element_fact(self, kind: str, var: str) -> bool:
        x = self.tensors[var]
        with np.errstate(all="ignore"):
            if kind == "nonzero":
                return bool(np.all(x != 0))
            if kind == "positive":
                return bool(np.all(x > 0))
            return bool(np.all(x >= 0))

    def is_const(self, var: str) -> bool:
        return var.startswith("#")

    def values(self, var: str) -> list[int]:
        """A 1-D tensor of integral values as a list (a shape operand)."""
        x = self.tensors[var]
        if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any(x != np.round(x)):
            raise evalexpr.NotApplicable(f"?{var} is not a list of ints")
        return [int(v) for v in x]

    def dtype(self, var: str) -> str:
        return {"real": "float32", "int": "uint32"}.get(self.domain.name, self.domain.dtype)


class Runner:
    def __init__(self, sems: dict[str, OpSemantics], domain: Domain,
                 tensors: dict[str, np.ndarray], attrs: dict[str, Any]) -> None:
        self.sems = sems
        self.domain = domain
        self.tensors = tensors
        self.attrs = attrs
        self.facts = NumpyFacts(tensors, domain)

    def guard(self, expr: ast.Expr | None) -> bool:
        if expr is None:
            return True
        try:
            return bool(evalexpr.evaluate(expr, self.attrs, self.facts))
        except evalexpr.NotApplicable:
            return False

    def cast(self, values: Any) -> np.ndarray:
        array = np.asarray(values, dtype=self.domain.dtype)
        return round_bf16(array) if self.domain.name == "bf16" else array

    def run(self, p: ast.Pattern) -> np.ndarray:
        """The pattern's value; raises `Undefined` or `Illformed`."""
        with np.errstate(all="ignore"):
            return self._run(p)

    def _run(self, p: ast.Pattern) -> np.ndarray:
        if isinstance(p, ast.PVar):
            return self.tensors[p.name]
        if isinstance(p, ast.PConst):
            return self.cast(p.value)
        if isinstance(p, ast.PCompute):
            try:
                return self.cast(evalexpr.evaluate(p.args[0], self.attrs, self.facts))
            except evalexpr.NotApplicable as err:  # as the e-graph: no rewrite
                raise DoesNotFire(str(err)) from err
        sem = self.sems[p.op]
        inputs = [self._run(child) for child in p.inputs]
        attrs: dict[str, Any] = {}
        for name, expr in p.attrs:
            try:
                attrs[name] = evalexpr.evaluate(expr, self.attrs, self.facts)
            except evalexpr.NotApplicable as err:
                raise DoesNotFire(str(err)) from err
        consts = [isinstance(c, ast.PVar) and c.name.startswith("#") for c in p.inputs]
        if any(consts) and not all(consts):
            try:
                full = np.broadcast_shapes(*[a.shape for a in inputs])
                rest = np.broadcast_shapes(*[a.shape for a, c in zip(inputs, consts,
                                                                       strict=True) if not c])
            except ValueError as err:
                raise Illformed("shapes do not broadcast") from err
            if full != rest:
                raise Illformed("a pattern constant would broadcast the result")
        if sem.elementwise is not None:
            try:
                arrays = np.broadcast_arrays(*inputs)
            except ValueError as err:
                raise Illformed("shapes do not broadcast") from err
            env: dict[str, Any] = {prm.name: a for prm, a in zip(sem.decl.params, arrays, strict=False)}
            env.update(attrs)
            if sem.decl.requires is not None:
                ok = self._scalar(sem.decl.requires, env)
                if not np.all(ok):
                    raise Undefined(f"{p.op} outside its domain")
            out = np.broadcast_to(self.cast(self._scalar(sem.elementwise, env)),
                                  np.broadcast_shapes(*[a.shape for a in inputs]))
            return np.array(out)  # a copy; ascontiguousarray would make 0-d arrays 1-d
        if sem.builtin is None:
            raise Unsupported(f"{p.op} has no semantics")
        try:
            out = sem.builtin.numpy(inputs, attrs)
        except (ValueError, IndexError) as err:
            raise Illformed(str(err)) from err
        return out if out.dtype == object else self.cast(out)

    def _scalar(self, e: ast.Expr, env: dict[str, Any]) -> Any:
        """The op's scalar semantics in this domain (`ops.scalar`, the compiler's own)."""
        try:
            return scalar.evaluate(e, env, cast=self.cast, integer=self.domain.is_integer)
        except scalar.NoReference as err:
            raise Unsupported(str(err)) from None


def same(lhs: np.ndarray, rhs: np.ndarray, domain: Domain) -> bool:
    """Equal results: bit-exact in IEEE tiers, to 1e-9 relative over the reals."""
    if lhs.shape != rhs.shape:
        return False
    if domain.is_integer:
        return bool(np.array_equal(lhs.astype(object), rhs.astype(object)))
    if domain.is_float:
        a, b = lhs.astype(domain.dtype), rhs.astype(domain.dtype)
        nan = np.isnan(a) & np.isnan(b)
        bits = a.view(f"uint{a.itemsize * 8}") == b.view(f"uint{b.itemsize * 8}")
        return bool(np.all(nan | bits))
    return bool(np.allclose(lhs, rhs, rtol=1e-9, atol=1e-12, equal_nan=True))
