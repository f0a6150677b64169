"""How each declared operator becomes an egglog constructor.

Every op ``Op(p1, p2?, p3...) [a: int, b: ints]`` becomes
``(constructor Op_Op (T T TList i64 IVec) T)``: its tensor inputs first (an
optional one is the nullary ``Absent`` when missing, a variadic one a cons list
of sort ``TList``), then its attributes in declaration order as primitives.
An attribute absent from a node and without a declared default takes the
"absent" sentinel of its kind (empty vector, ``ABSENT_INT`` ...); the decoder
drops sentinels again, so absent stays absent (ONNX meaning, e.g. Conv strides).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from egraph_compiler.dsl.ast import AttrDecl, Expr, ListLit, Name, Num, OpDecl, Str, UnOp
from egraph_compiler.egraph import text
from egraph_compiler.ir.errors import DnnrError

# attribute kind -> egglog sort
ATTR_SORT: dict[str, str] = {
    "int": "i64",
    "float": "f64",
    "string": "String",
    "ints": "IVec",
    "floats": "FVec",
    "strings": "SVec",
    "tensor": "i64",  # a handle into the constant table
}

ABSENT_INT = -(2**62)
ABSENT_FLOAT = -1.0e308
ABSENT: dict[str, object] = {
    "int": ABSENT_INT,
    "float": ABSENT_FLOAT,
    "string": "",
    "ints": (),
    "floats": (),
    "strings": (),
    "tensor": -1,
}


class LoweringError(DnnrError):
    """A rule or declaration cannot be lowered to egglog."""


def constructor_name(op: str) -> str:
    return f"Op_{op}"


def literal(kind: str, value: object) -> str:
    """egglog literal of an attribute value of the given kind (tensor: handle)."""
    if kind in ("int", "tensor"):
        return text.i64(int(value))  # type: ignore[arg-type]
    if kind == "float":
        return text.f64(float(value))  # type: ignore[arg-type]
    if kind == "string":
        return text.string(str(value))
    elem = {"ints": "i64", "floats": "f64", "strings": "String"}[kind]
    return text.vec(tuple(value), elem)  # type: ignore[arg-type]


def const_value(expr: Expr) -> object:
    """Python value of a literal expression (attribute defaults, literal attrs)."""
    if isinstance(expr, Num):
        return expr.value
    if isinstance(expr, Str):
        return expr.value
    if isinstance(expr, Name):
        if expr.name == "inf":
            return math.inf
        return expr.name
    if isinstance(expr, UnOp) and expr.op == "-":
        inner = const_value(expr.operand)
        if isinstance(inner, (int, float)):
            return -inner
    if isinstance(expr, ListLit):
        return tuple(const_value(item) for item in expr.items)
    raise LoweringError(f"{getattr(expr, 'span', '')}: expected a literal, got {expr!r}")


def coerce(kind: str, value: object) -> object:
    """Bring a Python attribute value into the kind's canonical Python form."""
    if kind in ("int", "tensor"):
        return int(value)  # type: ignore[arg-type]
    if kind == "float":
        return float(value)  # type: ignore[arg-type]
    if kind == "string":
        return str(value)
    if kind == "ints":
        return tuple(int(v) for v in value)  # type: ignore[union-attr]
    if kind == "floats":
        return tuple(float(v) for v in value)  # type: ignore[union-attr]
    return tuple(str(v) for v in value)  # type: ignore[union-attr]


@dataclass(frozen=True, slots=True)
class OpSchema:
    decl: OpDecl

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def egglog(self) -> str:
        return constructor_name(self.decl.name)

    @property
    def attrs(self) -> tuple[AttrDecl, ...]:
        return self.decl.attrs

    def default(self, attr: AttrDecl) -> object:
        if attr.default is None:
            return ABSENT[attr.type]
        value = const_value(attr.default)
        if attr.type in ("ints", "floats", "strings") and not isinstance(value, tuple):
            value = (value,)
        return coerce(attr.type, value)

    @property
    def variadic_index(self) -> int | None:
        for i, param in enumerate(self.decl.params):
            if param.variadic:
                return i
        return None

    @property
    def multi_output(self) -> bool:
        return self.decl.outputs > 1

    def declaration(self) -> str:
        sorts = ["TList" if p.variadic else "T" for p in self.decl.params]
        sorts += [ATTR_SORT[a.type] for a in self.decl.attrs]
        return f"(constructor {self.egglog} ({' '.join(sorts)}) T)"


def schemas(ops: dict[str, OpDecl]) -> dict[str, OpSchema]:
    return {name: OpSchema(decl) for name, decl in sorted(ops.items())}
