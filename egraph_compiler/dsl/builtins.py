"""The closed vocabularies of the rule language: built-in functions and class names.

This is the contract between `dsl` (checks names and arities), `egraph` (evaluates
guards and computed attributes), `verify` (encodes them in Z3) and the rule authors
(`builtins_reference()` renders the documentation from this registry).
Pure Python implementations exist for the int-list built-ins; they work on and
return tuples, and raise `ValueError` when an argument is not valid (a guard that
calls one with bad arguments simply does not match).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from egraph_compiler.dsl import shape_builtins

# What an argument or a result is. "tensor" is a pattern variable bound to a tensor
# (an e-class); "ints"/"list" are int lists (attributes such as perm, shapes).
ArgKind = Literal[
    "tensor", "int", "ints", "list", "float", "number", "bool", "dtype", "shape", "dim"
]

# Where a built-in may be called.
Category = Literal["tensor_fact", "int_list", "constructor", "scalar"]

CATEGORY_TITLES: dict[Category, str] = {
    "tensor_fact": "Tensor facts (guards and computed attributes)",
    "int_list": "Int-list arithmetic (guards and computed attributes)",
    "constructor": "Constant constructors (right-hand sides only)",
    "scalar": "Scalar functions (elementwise op semantics)",
}


@dataclass(frozen=True, slots=True)
class Builtin:
    name: str
    params: tuple[ArgKind, ...]
    result: ArgKind
    doc: str
    category: Category
    impl: Callable[..., object] | None = None

    @property
    def arity(self) -> int:
        return len(self.params)

    def signature(self) -> str:
        return f"{self.name}({', '.join(self.params)}) -> {self.result}"


# ---------------------------------------------------------------- int-list implementations


def _as_perm(p: Sequence[int]) -> tuple[int, ...]:
    perm = tuple(int(i) for i in p)
    if sorted(perm) != list(range(len(perm))):
        raise ValueError(f"{list(perm)} is not a permutation")
    return perm


def compose(p: Sequence[int], q: Sequence[int]) -> tuple[int, ...]:
    # Transpose(Transpose(x, p), q) reads x's axis p[q[i]] at output axis i.
    pp, qq = _as_perm(p), _as_perm(q)
    if len(pp) != len(qq):
        raise ValueError(f"cannot compose permutations of rank {len(pp)} and {len(qq)}")
    return tuple(pp[i] for i in qq)


def invert(p: Sequence[int]) -> tuple[int, ...]:
    perm = _as_perm(p)
    inverse = [0] * len(perm)
    for i, axis in enumerate(perm):
        inverse[axis] = i
    return tuple(inverse)


def is_identity(p: Sequence[int]) -> bool:
    return tuple(int(i) for i in p) == tuple(range(len(p)))


def permute(values: Sequence[object], p: Sequence[int]) -> tuple[object, ...]:
    perm = _as_perm(p)
    if len(perm) != len(values):
        raise ValueError(f"cannot permute {len(values)} values with a rank-{len(perm)} perm")
    return tuple(values[i] for i in perm)


def normalize_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    normalized = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise ValueError(f"axis {axis} is out of range for rank {rank}")
        normalized.append(axis + rank if axis < 0 else axis)
    return tuple(sorted(normalized))


def concat(a: Sequence[object], b: Sequence[object]) -> tuple[object, ...]:
    return tuple(a) + tuple(b)


def length(values: Sequence[object]) -> int:
    return len(values)


def int_range(n: int) -> tuple[int, ...]:
    if n < 0:
        raise ValueError(f"range({n}) of a negative length")
    return tuple(range(n))


# ---------------------------------------------------------------- the registry


def _b(
    name: str,
    params: tuple[ArgKind, ...],
    result: ArgKind,
    category: Category,
    doc: str,
    impl: Callable[..., object] | None = None,
) -> Builtin:
    return Builtin(name, params, result, doc, category, impl)


_BUILTINS: tuple[Builtin, ...] = (
    # Tensor facts: `egraph` evaluates them from its analyses, `verify` encodes them.
    _b("rank", ("tensor",), "int", "tensor_fact", "Number of dimensions of ?x."),
    _b(
        "shape",
        ("tensor",),
        "shape",
        "tensor_fact",
        "Tuple of the dims of ?x; a dim may be symbolic (B, S*B).",
    ),
    _b(
        "dim",
        ("tensor", "int"),
        "dim",
        "tensor_fact",
        "Dim i of ?x (negative i counts from the end).",
    ),
    _b(
        "numel",
        ("tensor",),
        "dim",
        "tensor_fact",
        "Number of elements of ?x (product of its dims).",
    ),
    _b(
        "dtype",
        ("tensor",),
        "dtype",
        "tensor_fact",
        "Element type of ?x; compare with a bare dtype name: dtype(?x) == float32.",
    ),
    _b("is_const", ("tensor",), "bool", "tensor_fact", "?x is a compile-time constant tensor."),
    _b(
        "same_shape",
        ("tensor", "tensor"),
        "bool",
        "tensor_fact",
        "?a and ?b have provably equal shapes.",
    ),
    _b(
        "broadcastable",
        ("tensor", "tensor"),
        "bool",
        "tensor_fact",
        "?a and ?b broadcast together (numpy rules).",
    ),
    _b(
        "nonzero",
        ("tensor",),
        "bool",
        "tensor_fact",
        "Every element of ?x is provably non-zero (false when unknown).",
    ),
    _b(
        "positive",
        ("tensor",),
        "bool",
        "tensor_fact",
        "Every element of ?x is provably > 0, e.g. produced by Exp (false when unknown).",
    ),
    _b(
        "nonneg",
        ("tensor",),
        "bool",
        "tensor_fact",
        "Every element of ?x is provably >= 0, e.g. produced by Relu/Abs/Sqrt (false when unknown).",
    ),
    # Int-list arithmetic, with pure Python implementations.
    _b(
        "compose",
        ("ints", "ints"),
        "ints",
        "int_list",
        "Perm of Transpose(Transpose(x, p), q) as one Transpose: r[i] = p[q[i]].",
        compose,
    ),
    _b("invert", ("ints",), "ints", "int_list", "Inverse permutation: r[p[i]] = i.", invert),
    _b("is_identity", ("ints",), "bool", "int_list", "p == [0, 1, ..., len(p) - 1].", is_identity),
    _b("len", ("list",), "int", "int_list", "Length of a list.", length),
    _b("permute", ("list", "ints"), "list", "int_list", "Reorder a list: r[i] = l[p[i]].", permute),
    _b(
        "normalize_axes",
        ("ints", "int"),
        "ints",
        "int_list",
        "Negative axes made positive (axis + rank), then sorted.",
        normalize_axes,
    ),
    _b("concat", ("list", "list"), "list", "int_list", "List concatenation a ++ b.", concat),
    _b("range", ("int",), "ints", "int_list", "[0, 1, ..., n - 1].", int_range),
    # ONNX shape functions (rules/layout.dnnr); dims may be symbolic. A tensor variable
    # passed bare means its value (a small int tensor: a Reshape target, a Shape output).
    _b("reshape_shape", ("list", "list"), "list", "int_list",
       "Output shape of Reshape(shape, target), allowzero=0: 0 copies a dim, one -1 is inferred.",
       shape_builtins.reshape_shape),
    _b("squeeze_shape", ("list", "ints"), "list", "int_list",
       "Output shape of Squeeze(shape, axes); no axes drops every 1.", shape_builtins.squeeze_shape),
    _b("unsqueeze_shape", ("list", "ints"), "list", "int_list",
       "Output shape of Unsqueeze(shape, axes).", shape_builtins.unsqueeze_shape),
    _b("flatten_shape", ("list", "int"), "list", "int_list",
       "Output shape of Flatten(shape, axis).", shape_builtins.flatten_shape),
    _b("reshape_target", ("list", "list"), "ints", "int_list",
       "Constant Reshape target from shape a to shape b: ints as is, 0 copies a same-index "
       "symbolic dim, one -1; no match when none exists.", shape_builtins.reshape_target),
    # Right-hand-side constant constructors (`PCompute`).
    _b(
        "scalar",
        ("number",),
        "tensor",
        "constructor",
        "Rank-0 tensor of a number or float attribute, in the dtype of the surrounding op.",
    ),
    _b("vector", ("ints",), "tensor", "constructor", "1-D int64 tensor of an int list."),
    # Scalar functions for elementwise semantics (`op Exp(a) : ... = exp(a)`).
    _b("exp", ("float",), "float", "scalar", "e ** x."),
    _b("log", ("float",), "float", "scalar", "Natural logarithm; undefined for x <= 0."),
    _b("sqrt", ("float",), "float", "scalar", "Square root; undefined for x < 0."),
    _b("abs", ("number",), "number", "scalar", "|x|."),
    _b("tanh", ("float",), "float", "scalar", "Hyperbolic tangent."),
    _b("erf", ("float",), "float", "scalar", "Gauss error function."),
    _b("sin", ("float",), "float", "scalar", "Sine."),
    _b("cos", ("float",), "float", "scalar", "Cosine."),
    _b("floor", ("float",), "float", "scalar", "Round towards -inf."),
    _b("ceil", ("float",), "float", "scalar", "Round towards +inf."),
    _b("round", ("float",), "float", "scalar", "Round half to even."),
    _b("sign", ("number",), "number", "scalar", "-1, 0 or 1."),
    _b("min", ("number", "number"), "number", "scalar", "The smaller of a and b."),
    _b("max", ("number", "number"), "number", "scalar", "The larger of a and b."),
    _b("select", ("bool", "number", "number"), "number", "scalar", "c ? a : b."),
)

BUILTINS: dict[str, Builtin] = {b.name: b for b in _BUILTINS}

# ---------------------------------------------------------------- closed class sets

# DNNFusion Table 3.2: mapping type of an operator's input-to-output index map.
MAPPING_CLASSES: dict[str, str] = {
    "one_to_one": "Each output element depends on one input element (Add, Relu).",
    "one_to_many": "One input element feeds several outputs (Expand, Resize).",
    "many_to_many": "Outputs depend on many inputs (Conv, MatMul, reductions).",
    "reorganize": "Same elements, new shape; order kept (Reshape, Squeeze, Flatten).",
    "shuffle": "Same elements, permuted order (Transpose, DepthToSpace).",
}

# SmartMem Table 3: input-layout dependence x output-layout flexibility.
LAYOUT_CLASSES: dict[str, str] = {
    "ild_variable": "Input layout dependent, output layout customizable (Conv, MatMul, Softmax).",
    "ild_fixed": "Input layout dependent, output layout fixed (Reshape, Transpose, DtoS, StoD).",
    "ili_variable": "Input layout independent, output layout customizable (unary, Add).",
    "ili_fixed": "Input layout independent, output layout fixed (Gather, Slice).",
}

# SoD² Table 5.2: degree of dynamism of the output.
DYNAMISM_CLASSES: dict[str, str] = {
    "shape_determined_output": "Input shape determines the output values (Shape, ConstantOfShape).",
    "shape_determined": "Input shapes determine the output shape (Add, Conv, MatMul).",
    "shape_value_determined": "Input shapes and some input values determine the output shape "
    "(Reshape, Range, Slice, Expand).",
    "execution_determined": "Output shape known only after execution (NonZero, If, Loop).",
}

# DNNFusion Table 3.3 cells: green = fuse, yellow = profile, red = break.
FUSION_VERDICTS: dict[str, str] = {
    "fuse": "Always fuse (green).",
    "profile": "Fuse if profiling says it pays (yellow).",
    "break": "Never fuse (red).",
}

# Operator fact clauses (rules/README.md, "Operator facts"); `egraph_compiler.ops` derives
# what a declaration leaves out.
SHAPE_CLAUSES: dict[str, str] = {
    "same": "The output has the shape of the first operand.",
    "broadcast": "The output has the NumPy broadcast of all operands' shapes.",
}
COST_CLAUSES: dict[str, str] = {
    "per_element": "N operations per output element (per_element(N); elementwise default N = 1).",
    "reduce": "One operation per input element.",
    "mac": "One multiply-accumulate per product term (Conv, MatMul).",
    "movement": "Moves data only, no arithmetic; index arithmetic when fused (Slice, Concat, Cast).",
    "free": "A view of its operand: no arithmetic, no bytes moved (Reshape, Squeeze, Identity).",
}
ANCHOR_CLAUSES: dict[str, str] = {
    "conv": "A tiled convolution kernel.", "matmul": "A tiled matrix-multiply kernel.",
    "pool": "A windowed pooling kernel.", "reduce": "A reduction kernel.",
    "rownorm": "A row-normalisation kernel (Softmax, LayerNormalization, InstanceNormalization).",
    "indexed": "One output element per work item, from its index (CumSum, Trilu, "
               "GatherElements; backends/opencl/ops_extra.py).",
}
FACT_CLAUSES: dict[str, str] = {
    "positive": "Every output element is > 0.", "nonneg": "Every output element is >= 0.",
}
DTYPE_FORMS: dict[str, str] = {
    "dtype": "dtype(ATTR): the ONNX element type code held by an attribute (Cast's `to`).",
    "like": "like(OPERAND[, DTYPE]): the operand's dtype, DTYPE when it is absent.",
}

ATTR_TYPES: tuple[str, ...] = ("int", "ints", "float", "floats", "string", "strings", "tensor")

RULE_FLAGS: dict[str, str] = {
    "exact": "Bit-exact in IEEE arithmetic; `dnnr verify` checks the IEEE tier too.",
}

LIMIT_NAMES: dict[str, str] = {
    "nodes": "Stop when the e-graph holds more e-nodes (int).",
    "iterations": "Stop after this many iterations (int).",
    "seconds": "Stop after this much wall time (number).",
}

# Bare names a guard may compare with: `dtype(?x) == float32`, booleans.
DTYPE_NAMES: tuple[str, ...] = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
)
GUARD_CONSTANTS: tuple[str, ...] = ("true", "false")


def builtins_reference() -> str:
    """The built-ins and the closed class sets as Markdown, generated from this registry."""
    lines = ["## Built-ins", ""]
    for category, title in CATEGORY_TITLES.items():
        lines += [f"### {title}", "", "| function | result | meaning |", "|---|---|---|"]
        for b in _BUILTINS:
            if b.category == category:
                args = ", ".join(b.params)
                lines.append(f"| `{b.name}({args})` | {b.result} | {b.doc} |")
        lines.append("")
    tables = (
        ("Mapping classes (DNNFusion Table 3.2)", MAPPING_CLASSES),
        ("Layout classes (SmartMem Table 3)", LAYOUT_CLASSES),
        ("Dynamism classes (SoD² Table 5.2)", DYNAMISM_CLASSES),
        ("Fusion verdicts (DNNFusion Table 3.3)", FUSION_VERDICTS),
        ("Rule flags", RULE_FLAGS),
        ("Limits", LIMIT_NAMES),
    )
    for title, table in tables:
        lines += [f"### {title}", ""]
        lines += [f"- `{name}`: {doc}" for name, doc in table.items()]
        lines.append("")
    lines += ["### Attribute types", "", ", ".join(f"`{t}`" for t in ATTR_TYPES), ""]
    lines += ["### Dtype names (guards)", "", ", ".join(f"`{t}`" for t in DTYPE_NAMES), ""]
    return "\n".join(lines)
