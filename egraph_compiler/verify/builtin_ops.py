"""Documented encodings for operators declared ``= builtin NAME``.

Each built-in gives, for the SMT encoding, its result rank, its symbolic shape
with well-formedness conditions and its element at a symbolic index; for the
NumPy replay, a reference implementation (the compiler's own constant folding,
`ops.evaluate`, of its ONNX operator wherever that exists); and the finite domain
of each of its enumerated attributes for a given input rank (permutations, axes, flags).

| name | inputs | attributes | meaning |
|---|---|---|---|
| reduce_sum / reduce_prod / reduce_max / reduce_min / reduce_mean | data | axes: ints ([] = all), keepdims: int | ONNX Reduce* |
| matmul | a, b | | NumPy matmul, ranks >= 2 (batch dims broadcast) |
| gemm | a, b, c? | alpha, beta: float; transA, transB: int | ONNX Gemm, rank 2 |
| transpose | x | perm: ints ([] = reversed) | ``out[i] = x[j]`` with ``j[perm[k]] = i[k]`` |
| squeeze / unsqueeze | x | axes: ints | drop / insert size-1 axes |
| bitshift | x, y | direction: string ("LEFT" / "RIGHT") | unsigned ``x << y`` / ``x >> y``, ``y`` < bit width |
| sum / max / min / mean | x... | | ONNX variadic elementwise (left fold, broadcasting) |
| pow | a, b | | ``a ** b``, see `Pow` for where it is defined |
| batch_norm | x, scale, b, mean, var | epsilon: float | inference BatchNormalization, channel axis 1 |
| reshape | x, shape | allowzero (0) | row-major; ONNX 0 / -1 where the target's values are known (see `Reshape`) |
| flatten | x | axis: int | ONNX Flatten, row-major (see `Flatten`) |
| constant_of_shape | shape | value: tensor (one scalar) | ONNX ConstantOfShape (see `ConstantOfShape`) |
| conv | x, w, b? | group: int; geometry attributes kept abstract | ONNX Conv, abstract in padding / stride / dilation (see `Conv`) |
| concat | x... | axis: int | ONNX Concat (see `Concat`) |
| slice | x | starts, ends, axes, steps: ints | ONNX Slice, constant bounds (see `Slice`) |
| expand | x, shape | | a broadcast, abstract unless the shape is a `vector(...)` (see `Expand`) |
| cast | x | to: int | an uninterpreted conversion ``cast(to, x)`` (see `Cast`) |
| softmax / log_softmax | x | axis: int | ONNX opset-13 Softmax / LogSoftmax, reals (see `Softmax`) |

A right-hand-side ``vector(LIST)`` is the 1-D tensor of LIST's values; the shape
built-ins in it (``reshape_shape``, ``reshape_target``, ``squeeze_shape``,
``unsqueeze_shape``, ``flatten_shape``) are evaluated over symbolic dims, the rule
firing only where they are defined (`evalexpr.SHAPE_BUILTINS`).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import z3

from egraph_compiler.dsl import ast, shape_builtins
from egraph_compiler.dsl.format import op_text
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ops.evaluate import evaluate_node
from egraph_compiler.verify import evalexpr
from egraph_compiler.verify.encode import (
    SYMBOLIC_LIST,
    Cell,
    Dims,
    Encoder,
    Illformed,
    Unsupported,
    broadcast,
    in_bounds,
    project,
    row_major_offset,
    stable_key,
)
from egraph_compiler.verify.semantics import OpSemantics


class Undefined(Exception):
    """The NumPy reference found the operation undefined on these inputs."""


class Builtin:
    name = ""
    onnx = ""  # the ONNX operator whose evaluation in `ops.evaluate` is the NumPy reference
    integer_only = False
    reduces = False  # its encoding may call `Encoder.reduce` (then induction comes first)

    def for_op(self, op: str) -> Builtin:  # as the semantics of ``op`` (`quant_ops.Defined` keeps it)
        return self

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return None

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        raise NotImplementedError

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        raise NotImplementedError

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        raise NotImplementedError

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        """The compiler's own constant folding of `onnx` (one evaluator of each operator);
        inputs it rejects are ill-formed for the replay."""
        try:  # the encoding's own keys (``_out_rank``) are no attributes of the operator
            return evaluate_node(self.onnx, {k: v for k, v in attrs.items() if not k.startswith("_")}, inputs)[0]
        except (ModelError, KeyError) as err:
            raise Illformed(f"{self.name}: {err}") from err


def _subsets(rank: int) -> list[list[int]]:
    return [list(c) for k in range(1, rank + 1) for c in itertools.combinations(range(rank), k)]


def _axes(attrs: dict[str, Any], rank: int, key: str = "axes") -> list[int]:
    axes = list(attrs.get(key) or [])
    if not axes:
        return list(range(rank))
    if any(not isinstance(a, int) or a < -rank or a >= rank for a in axes):
        raise Illformed("axis out of range")
    normal = sorted({a % rank for a in axes})
    if len(normal) != len(axes):
        raise Illformed("repeated axis")
    return normal


class Reduce(Builtin):
    reduces = True

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = f"reduce_{kind}"
        self.onnx = f"Reduce{kind.capitalize()}"

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        if attr == "axes":  # [] is absent: every axis, or none under noop_with_empty_axes
            return [[], *_subsets(in_ranks[0])]
        if attr == "keepdims":
            return [1, 0]
        if attr == "noop_with_empty_axes":
            return [0, 1]
        return None

    @staticmethod
    def reduced_axes(attrs: dict[str, Any], rank: int) -> list[int]:
        """ONNX: absent axes reduce every axis, or none with noop_with_empty_axes=1."""
        if not attrs.get("axes") and attrs.get("noop_with_empty_axes", 0):
            return []
        return _axes(attrs, rank)

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        axes = self.reduced_axes(attrs, in_ranks[0])
        return in_ranks[0] if attrs.get("keepdims", 1) else in_ranks[0] - len(axes)

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        (d,) = dims[:1]
        axes = self.reduced_axes(attrs, len(d))
        if attrs.get("keepdims", 1):
            return [1 if k in axes else x for k, x in enumerate(d)], []
        return [x for k, x in enumerate(d) if k not in axes], []

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        child = node.inputs[0]
        d, _ = enc.shape_of(child)
        axes = self.reduced_axes(attrs, len(d))
        if not axes:  # noop_with_empty_axes: the input itself
            return enc.value_of(child, list(idx))
        keep = attrs.get("keepdims", 1)
        outer = [i for k, i in enumerate(idx) if not keep or k not in axes]

        def body(t: list[Any]) -> Cell:
            j: list[Any] = []
            rest = iter(outer)
            reduced = iter(t)
            for k in range(len(d)):
                j.append(next(reduced) if k in axes else next(rest))
            return enc.value_of(child, j)

        value, defined = enc.reduce(node, outer, [d[k] for k in axes], body, self.kind)
        if self.kind == "mean":
            count = math.prod(d[k] for k in axes) if axes else 1
            if enc.domain.name != "real":
                raise Unsupported("reduce_mean is modelled over the reals only")
            value = value / z3.ToReal(z3.IntVal(count) if isinstance(count, int) else count)
        return value, defined


class Transpose(Builtin):
    name, onnx = "transpose", "Transpose"

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        if attr == "perm":
            # [] is an absent perm (reversed axes), as the e-graph binds it
            return [[]] + [list(p) for p in itertools.permutations(range(in_ranks[0]))]
        return None

    @staticmethod
    def perm(attrs: dict[str, Any], rank: int) -> list[int]:
        perm = list(attrs.get("perm") or [])
        if not perm:
            return list(reversed(range(rank)))
        if sorted(perm) != list(range(rank)):
            raise Illformed(f"perm {perm} is not a permutation of rank {rank}")
        return perm

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        return len(self.perm(attrs, in_ranks[0]))

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        perm = self.perm(attrs, len(dims[0]))
        return [dims[0][p] for p in perm], []

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        perm = self.perm(attrs, len(idx))
        j: list[Any] = [0] * len(idx)
        for k, p in enumerate(perm):
            j[p] = idx[k]
        return enc.value_of(node.inputs[0], j)


class Squeeze(Builtin):
    name, onnx = "squeeze", "Squeeze"

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return _subsets(in_ranks[0]) if attr == "axes" else None

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        return in_ranks[0] - len(_axes(attrs, in_ranks[0]))

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        axes = _axes(attrs, len(dims[0]))
        return ([d for k, d in enumerate(dims[0]) if k not in axes],
                [dims[0][k] == 1 for k in axes])

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        rank = len(idx) + len(attrs.get("axes") or [])
        axes = _axes(attrs, rank)
        rest = iter(idx)
        return enc.value_of(node.inputs[0], [0 if k in axes else next(rest)
                                             for k in range(rank)])


class Unsqueeze(Builtin):
    name, onnx = "unsqueeze", "Unsqueeze"

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return [[a] for a in range(in_ranks[0] + 1)] if attr == "axes" else None

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        rank = in_ranks[0] + len(attrs.get("axes") or [])
        _axes(attrs, rank)
        return rank

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        rank = len(dims[0]) + len(attrs.get("axes") or [])
        axes = _axes(attrs, rank)
        rest = iter(dims[0])
        return [1 if k in axes else next(rest) for k in range(rank)], []

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        axes = _axes(attrs, len(idx))
        return enc.value_of(node.inputs[0], [i for k, i in enumerate(idx) if k not in axes])


class MatMul(Builtin):
    name, onnx = "matmul", "MatMul"
    reduces = True

    # NumPy/ONNX: a 1-D left operand is a row [1, K] and a 1-D right one a column [K, 1],
    # and the added axis is dropped from the result.
    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        ra, rb = in_ranks[:2]
        if min(ra, rb) < 1:
            raise Illformed("matmul of a scalar")
        return max(ra, rb, 2) - (ra == 1) - (rb == 1)

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        a, b = list(dims[0]), list(dims[1])
        if not a or not b:
            raise Illformed("matmul of a scalar")
        row, col = len(a) == 1, len(b) == 1
        a2 = [1, *a] if row else a
        b2 = [*b, 1] if col else b
        batch, wf = broadcast([a2[:-2], b2[:-2]])
        out = batch + ([] if row else [a2[-2]]) + ([] if col else [b2[-1]])
        return out, wf + [a2[-1] == b2[-2]]

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        a_dims, _ = enc.shape_of(node.inputs[0])
        b_dims, _ = enc.shape_of(node.inputs[1])
        dom = enc.domain

        def body(t: list[Any]) -> Cell:
            a_index, b_index = matmul_operand_indices(a_dims, b_dims, idx, t[0])
            va, da = enc.value_of(node.inputs[0], a_index)
            vb, db = enc.value_of(node.inputs[1], b_index)
            return dom.binop("*", va, vb), z3.And(da, db)

        return enc.reduce(node, idx, [a_dims[-1]], body, "sum")


def matmul_operand_indices(a_dims: Dims, b_dims: Dims, idx: list[Any],
                           k: Any) -> tuple[list[Any], list[Any]]:
    """The elements of MatMul's operands that output element ``idx`` multiplies at
    contracted index ``k``: a rank-1 operand is a row / a column whose added axis is
    dropped; batch axes broadcast (ONNX MatMul = numpy.matmul)."""
    row, col = len(a_dims) == 1, len(b_dims) == 1
    full = list(idx) + ([0] if col else [])
    if row:
        full.insert(len(full) - 1, 0)
    batch = full[:-2]
    a_index = [k] if row else project(a_dims[:-2], batch) + [full[-2], k]
    b_index = [k] if col else project(b_dims[:-2], batch) + [k, full[-1]]
    return a_index, b_index


class BitShift(Builtin):
    name = "bitshift"
    integer_only = True

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return ["LEFT", "RIGHT"] if attr == "direction" else None

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        return max(in_ranks[:2])

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        return broadcast(dims[:2])

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        cells = [enc.value_of(child, project(enc.shape_of(child)[0], idx))
                 for child in node.inputs[:2]]
        (x, dx), (y, dy) = cells
        dom = enc.domain
        left = str(attrs.get("direction", "LEFT")).upper() == "LEFT"
        width = dom.width if dom.is_bv else 32
        if dom.is_bv:
            value = x << y if left else z3.LShR(x, y)
            ok = z3.ULT(y, width)
        elif dom.name == "int":
            power = z3.IntVal(1)
            for s in range(width - 1, -1, -1):
                power = z3.If(y == s, z3.IntVal(2 ** s), power)
            value = x * power if left else x / power
            ok = y < width
        else:
            raise Illformed("bitshift is an integer operation")
        return value, z3.And(dx, dy, ok)

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        x, y = inputs[0], inputs[1]
        width = x.dtype.itemsize * 8 if x.dtype != np.int64 else 32
        if np.any(y >= width):
            raise Undefined("shift by at least the bit width")
        left = str(attrs.get("direction", "LEFT")).upper() == "LEFT"
        if x.dtype == np.int64:  # the unbounded-integer tier: no wrapping
            xo, yo = x.astype(object), y.astype(object)
            out = xo * (2 ** yo) if left else xo // (2 ** yo)
            return np.asarray(out, dtype=object)
        return np.left_shift(x, y.astype(x.dtype)) if left else np.right_shift(
            x, y.astype(x.dtype))


class Elementwise(Builtin):
    """A broadcasting elementwise built-in over all its inputs."""

    elementwise = True

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        return max(in_ranks, default=0)

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        return broadcast(dims)

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        cells = [enc.value_of(child, project(enc.shape_of(child)[0], idx))
                 for child in node.inputs]
        value, ok = self.scalar(enc, [v for v, _ in cells])
        return value, z3.And(ok, *[d for _, d in cells])

    def scalar(self, enc: Encoder, args: list[Any]) -> tuple[Any, Any]:
        raise NotImplementedError


class Variadic(Elementwise):
    """ONNX Sum / Max / Min / Mean: a left fold over the inputs."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = kind
        self.onnx = kind.capitalize()

    def scalar(self, enc: Encoder, args: list[Any]) -> tuple[Any, Any]:
        dom = enc.domain
        acc = args[0]
        for arg in args[1:]:
            acc = (dom.binop("+", acc, arg) if self.kind in ("sum", "mean")
                   else dom.call(self.kind, (acc, arg)))
        if self.kind == "mean":
            acc = dom.binop("/", acc, dom.const(len(args)))
        return acc, z3.BoolVal(True)


class Pow(Elementwise):
    """``a ** b``: defined for a > 0, for a == 0 with b > 0, and for an integral b with
    a != 0 or b >= 0. A literal exponent is expanded (2 -> a*a, -1 -> 1/a, 0.5 -> sqrt)."""

    name = "pow"
    _literal: float | None = None

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        exponent = node.inputs[1] if len(node.inputs) > 1 else None
        self._literal = (enc.consts.get(exponent.name) if isinstance(exponent, ast.PVar)
                         else exponent.value if isinstance(exponent, ast.PConst) else None)
        return super().value(enc, node, attrs, idx)

    def scalar(self, enc: Encoder, args: list[Any]) -> tuple[Any, Any]:
        dom = enc.domain
        a, b = args[0], args[1]
        zero = dom.const(0)
        value = self._literal
        if value is not None and float(value).is_integer() and 0 <= value <= 8:
            return dom.binop("**", a, z3.IntVal(int(value))), z3.BoolVal(True)
        if value is not None and float(value).is_integer() and -8 <= value < 0:
            power = dom.binop("**", a, z3.IntVal(int(-value)))
            return dom.binop("/", dom.const(1), power), dom.binop("!=", a, zero)
        if value == 0.5:
            return dom.call("sqrt", (a,)), dom.binop(">=", a, zero)
        return dom.apply("pow", (a, b)), z3.Or(dom.binop(">", a, zero), z3.And(
            a == zero, dom.binop(">", b, zero)))

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        a, b = np.broadcast_arrays(*inputs[:2])
        integral = b == np.round(b)
        ok = (a > 0) | ((a == 0) & (b > 0)) | (integral & ((a != 0) | (b >= 0)))
        if not np.all(ok):
            raise Undefined("pow outside its domain")
        with np.errstate(all="ignore"):
            return np.asarray(np.power(a, b))


class Cast(Elementwise):
    """ONNX Cast as an uninterpreted function ``cast(to, x)`` of the (symbolic) target
    type code and the element: the same conversion wherever it is applied, and
    nothing else known about it. Enough for rules that move a Cast across layout
    operators; a rule that needs what a conversion does stays unproved (sound)."""

    name, onnx = "cast", "Cast"

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        (child,) = node.inputs[:1]
        x, defined = enc.value_of(child, project(enc.shape_of(child)[0], idx))
        to = attrs.get("to")
        if to is None:
            raise Illformed("cast without `to`")
        code = to if isinstance(to, z3.ExprRef) else z3.IntVal(int(to))
        dom = enc.domain
        fn = z3.Function(f"cast_{dom.name}", z3.IntSort(), dom.sort, dom.sort)
        return fn(code, x), defined


class Concat(Builtin):
    """ONNX Concat along ``axis`` (enumerated, negative axes included): inputs of one
    rank >= 1 whose dims agree off the axis; output index i reads input k at i minus
    the summed axis lengths of the inputs before k."""

    name, onnx = "concat", "Concat"

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        if attr == "axis":
            return list(range(-in_ranks[0], in_ranks[0])) if in_ranks else []
        return None

    @staticmethod
    def axis(attrs: dict[str, Any], rank: int) -> int:
        axis = attrs.get("axis")
        if not isinstance(axis, int) or not -rank <= axis < rank:
            raise Illformed(f"concat axis {axis} out of range for rank {rank}")
        return axis % rank

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if not in_ranks or len(set(in_ranks)) != 1 or in_ranks[0] < 1:
            raise Illformed("concat takes inputs of one rank >= 1")
        self.axis(attrs, in_ranks[0])
        return in_ranks[0]

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        axis = self.axis(attrs, len(dims[0]))
        wf = [a == b for d in dims[1:] for k, (a, b) in enumerate(zip(dims[0], d, strict=True))
              if k != axis]
        out = list(dims[0])
        out[axis] = sum((d[axis] for d in dims[1:]), start=dims[0][axis])
        return out, wf

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        axis = self.axis(attrs, len(idx))
        offsets: list[Any] = [0]
        for child in node.inputs[:-1]:
            offsets.append(offsets[-1] + enc.shape_of(child)[0][axis])
        last = len(node.inputs) - 1
        j = list(idx)
        j[axis] = idx[axis] - offsets[last]
        value, defined = enc.value_of(node.inputs[last], j)
        for k in range(last - 1, -1, -1):  # input k where idx[axis] is below input k+1
            j = list(idx)
            j[axis] = idx[axis] - offsets[k]
            v, d = enc.value_of(node.inputs[k], j)
            below = idx[axis] < offsets[k + 1]
            value, defined = z3.If(below, v, value), z3.If(below, d, defined)
        return value, defined


def _clamp(x: Any, lo: Any, hi: Any) -> Any:
    return z3.If(x < lo, lo, z3.If(x > hi, hi, x))


class Slice(Builtin):
    """ONNX Slice with constant bounds. ``axes`` is enumerated (every list of distinct
    axes, negative ones included); ``starts``/``ends``/``steps`` are symbolic Ints, one
    per axis (``steps`` also absent, all 1). A step of 1 is exact (negative bounds
    counted from the end, clamped to [0, dim]); any other step is abstract: its length
    and the input index it reads are uninterpreted functions of the bounds and the
    dim (the read index in range), so a proof covers every step and a counterexample
    with a step other than 1 may be SPURIOUS. An absent ``axes`` ([]) is every axis
    with bounds of length rank."""

    name, onnx = "slice", "Slice"
    symbolic_lists = ("starts", "ends", "steps")

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        rank = in_ranks[0] if in_ranks else 0
        if attr == "axes":
            lists: list[Any] = [[]]
            for n in range(1, rank + 1):
                for combo in itertools.permutations(range(-rank, rank), n):
                    if len({a % rank for a in combo}) == n:
                        lists.append(list(combo))
            return lists
        if attr in ("starts", "ends"):
            return [SYMBOLIC_LIST]
        if attr == "steps":
            return [[], SYMBOLIC_LIST]
        return None

    @staticmethod
    def list_length(attrs: dict[str, Any], rank: int) -> int:
        return len(attrs.get("axes") or []) or rank

    @staticmethod
    def bounds(attrs: dict[str, Any], rank: int) -> list[tuple[int, Any, Any, Any]]:
        axes = list(attrs.get("axes") or []) or list(range(rank))
        if any(not isinstance(a, int) or not -rank <= a < rank for a in axes):
            raise Illformed("slice axis out of range")
        normal = [a % rank for a in axes]
        if len(set(normal)) != len(normal):
            raise Illformed("repeated slice axis")
        starts, ends = list(attrs.get("starts") or []), list(attrs.get("ends") or [])
        steps = list(attrs.get("steps") or []) or [1] * len(normal)
        if not (len(starts) == len(ends) == len(steps) == len(normal)):
            raise Illformed("slice bounds of different lengths")
        return list(zip(normal, starts, ends, steps, strict=True))

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if in_ranks[0] < 1:
            raise Illformed("slice of a scalar")
        return in_ranks[0]

    @staticmethod
    def _start(start: Any, end: Any, dim: Any) -> tuple[Any, Any]:
        start = z3.If(start < 0, start + dim, start)
        end = z3.If(end < 0, end + dim, end)
        return _clamp(start, 0, dim), _clamp(end, 0, dim)

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        out = list(dims[0])
        wf: list[Any] = []
        ints = [z3.IntSort()] * 5
        for axis, start, end, step in self.bounds(attrs, len(out)):
            d = out[axis]
            first, last = self._start(start, end, d)
            exact = z3.If(last > first, last - first, 0)
            other = z3.Function("slice_len", *ints)(z3.IntVal(0) + start, z3.IntVal(0) + end,
                                                     z3.IntVal(0) + step, z3.IntVal(0) + d)
            out[axis] = z3.If(step == 1, exact, other) if not isinstance(step, int) or \
                step != 1 else exact
            if not isinstance(step != 0, bool):
                wf.append(step != 0)
            enc.index_facts.append(other >= 0)  # a length: a fact, not a condition to check
        return out, wf

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        in_dims, _ = enc.shape_of(node.inputs[0])
        j = list(idx)
        ints = [z3.IntSort()] * 6
        for axis, start, end, step in self.bounds(attrs, len(idx)):
            d = in_dims[axis]
            first, _ = self._start(start, end, d)
            other = z3.Function("slice_read", *ints)(z3.IntVal(0) + idx[axis],
                                                      z3.IntVal(0) + start,
                                                      z3.IntVal(0) + end,
                                                      z3.IntVal(0) + step, z3.IntVal(0) + d)
            enc.index_facts.append(z3.And(other >= 0, other < d))
            j[axis] = first + idx[axis] if isinstance(step, int) and step == 1 else z3.If(
                step == 1, first + idx[axis], other)
        return enc.value_of(node.inputs[0], j)

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        if any(v == SYMBOLIC_LIST for v in attrs.values()):
            raise Unsupported("slice bounds without values")
        self.bounds(attrs, inputs[0].ndim)  # axes and bound lengths as the encoding takes them
        return super().numpy(inputs, attrs)


class BatchNorm(Builtin):
    """Inference BatchNormalization over axis 1: (x - mean) / sqrt(var + eps) * scale + b,
    with rank-1 parameters of length dim(x, 1); undefined where var + eps <= 0."""

    name = "batch_norm"

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if in_ranks[0] < 2 or any(r != 1 for r in in_ranks[1:5]):
            raise Illformed("batch_norm takes x of rank >= 2 and rank-1 parameters")
        return in_ranks[0]

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        channels = dims[0][1]
        return list(dims[0]), [d[0] == channels for d in dims[1:5]]

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        dom = enc.domain
        x, dx = enc.value_of(node.inputs[0], idx)
        scale, bias, mean, var = (enc.value_of(p, [idx[1]])[0] for p in node.inputs[1:5])
        eps = enc.scalar_const(attrs.get("epsilon", 1e-5))
        spread = dom.binop("+", var, eps)
        root = dom.call("sqrt", (spread,))
        y = dom.binop("+", dom.binop("*", dom.binop("/", dom.binop("-", x, mean), root), scale),
                      bias)
        return y, z3.And(dx, dom.binop(">", spread, dom.const(0)))

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        x, scale, bias, mean, var = inputs[:5]
        if x.ndim < 2 or any(p.shape != (x.shape[1],) for p in inputs[1:5]):
            raise Illformed("batch_norm shapes")
        spread = var + attrs.get("epsilon", 1e-5)
        if np.any(spread <= 0):
            raise Undefined("batch_norm with var + epsilon <= 0")
        shape = (1, -1) + (1,) * (x.ndim - 2)
        with np.errstate(all="ignore"):
            return np.asarray((x - mean.reshape(shape)) / np.sqrt(spread.reshape(shape))
                              * scale.reshape(shape) + bias.reshape(shape))


def shape_entries(enc: Encoder, target: ast.Pattern) -> list[Any] | None:
    """A shape operand's values as a list of ints (z3 Ints where symbolic): a
    ``vector(...)`` literal, or a 1-D tensor variable whose values the rule looks at
    (in its guard or a computed constant), read through `Encoder.values`; None where
    the values are not known (a computed Shape) or not needed (a rule that only moves
    operators across the Reshape: the abstract encoding proves it by congruence)."""
    if isinstance(target, ast.PCompute) and target.func == "vector":
        return enc.vector_entries(target)
    if isinstance(target, ast.PVar) and target.name in enc.valued_vars:
        try:
            return enc.values(target.name)
        except evalexpr.NotApplicable:
            return None
    return None


def _wf_collector(wf: list[Any]) -> Any:
    def require(cond: Any) -> None:
        if isinstance(cond, bool):
            if not cond:
                raise Illformed("reshape target")
            return
        wf.append(cond)
    return require


def row_major_read(enc: Encoder, child: ast.Pattern, idx: list[Any], in_dims: Dims,
                   out_dims: Dims, offsets: bool = True) -> Cell:
    """Element ``idx`` of ``child`` reshaped to ``out_dims``: the input element at the
    same row-major offset. The read index is a function of the output index and both
    shapes (the same function for every Reshape with those ranks, so equal reads are
    equal by congruence) with its offset pinned where the element counts agree."""
    in_dims = [z3.IntVal(d) if isinstance(d, int) else d for d in in_dims]
    out_dims = [z3.IntVal(d) if isinstance(d, int) else d for d in out_dims]
    args = list(idx) + in_dims + out_dims
    sorts = [z3.IntSort()] * (len(args) + 1)
    source = [z3.Function(f"reshape_index{k}_{len(idx)}_{len(in_dims)}", *sorts)(*args)
              for k in range(len(in_dims))]
    enc.index_facts.extend(in_bounds(source, in_dims))
    if not offsets:  # congruence alone (see `shape_entries`): no nonlinear offsets
        return enc.value_of(child, source)
    numel_in = math.prod(in_dims, start=z3.IntVal(1))
    numel_out = math.prod(out_dims, start=z3.IntVal(1))
    enc.index_facts.append(z3.Implies(
        z3.And(*in_bounds(idx, out_dims), numel_in == numel_out),
        row_major_offset(source, in_dims) == row_major_offset(idx, out_dims)))
    enc.row_major = True
    return enc.value_of(child, source)


class _ToTarget(Builtin):
    """A built-in whose last operand is its output's dims, the rank enumerated as
    ``_out_rank`` (Reshape, Expand, ConstantOfShape); ``least_dim``: Reshape's 0 and -1."""

    least_dim = 1

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return [0, 1, 2, 3] if attr == "_out_rank" else None

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        target = inputs[-1]
        if target.ndim != 1 or np.any(target != np.round(target)) or np.any(target < self.least_dim):
            raise Illformed(f"{self.name} target is not a 1-D tensor of dims{', 0 or -1' * (self.least_dim < 1)}")
        out = super().numpy(inputs, attrs)
        if out.ndim != attrs.get("_out_rank", out.ndim):
            raise Illformed(f"{self.name} to another rank")
        return out


class Reshape(_ToTarget):
    """ONNX Reshape (allowzero=0) in row-major order. Where the target's values are
    known to the rule (a ``vector(...)``, or a 1-D tensor variable whose elements
    become integer unknowns), the output dims follow ONNX exactly: 0 copies the input
    dim, one -1 is inferred, the element count is preserved. Otherwise (a computed
    target) the output dims are uninterpreted functions of the input dims, one family
    per shape operand. Either way output index i reads the input element at the same
    row-major offset (`row_major_read`). The target rank is enumerated (``_out_rank``)
    or is the length of the ``vector(...)``. allowzero=1 is not modelled (dims are
    >= 1, so an empty tensor never occurs)."""

    name, onnx, least_dim = "reshape", "Reshape", -1

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return [0] if attr == "allowzero" else super().attr_domain(attr, in_ranks)

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if len(in_ranks) < 2 or in_ranks[1] != 1:
            raise Illformed("reshape takes a 1-D shape operand")
        if attrs.get("_target_len") is not None:
            return int(attrs["_target_len"])
        if attrs.get("_out_rank") is None:
            raise Unsupported("reshape to a target that is not a pattern variable")
        return int(attrs["_out_rank"])

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        in_dims = [z3.IntVal(d) if isinstance(d, int) else d for d in dims[0]]
        entries = shape_entries(enc, node.inputs[1])
        if attrs.get("allowzero", 0) not in (0, None):
            raise Unsupported("reshape with allowzero=1")
        if entries is not None:
            wf: list[Any] = [dims[1][0] == len(entries)]
            try:
                out = evalexpr.sym_reshape_shape(in_dims, entries, _wf_collector(wf))
            except evalexpr.NotApplicable as err:
                raise Illformed(f"reshape: {err}") from err
            return out, wf
        tag = stable_key(node.inputs[1])
        rank = int(attrs["_out_rank"])
        out = [z3.Function(f"reshape_dim{k}_{tag}_{len(in_dims)}",
                           *([z3.IntSort()] * (len(in_dims) + 1)))(*in_dims)
               for k in range(rank)]
        wf = [d >= 1 for d in out] + [dims[1][0] == rank]
        if not (enc.domain.is_float or enc.domain.is_bv
                or getattr(enc.domain, "mirrors_float", False)):
            # numel preserved; nonlinear, and shapes are the exact tier's job: machine
            # tiers prove the values without it (a weaker assumption, still sound)
            wf.append(math.prod(out) == math.prod(in_dims) if in_dims or out else True)
        return out, wf

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        in_dims, _ = enc.shape_of(node.inputs[0])
        out_dims, _ = enc.shape_of(node)
        exact = shape_entries(enc, node.inputs[1]) is not None
        return row_major_read(enc, node.inputs[0], idx, in_dims, out_dims, offsets=exact)


class Flatten(Builtin):
    """ONNX Flatten: ``[prod(dims[:axis]), prod(dims[axis:])]`` in row-major order
    (the `Reshape` index map); ``axis`` in [-rank, rank] is enumerated."""

    name, onnx = "flatten", "Flatten"

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return list(range(-in_ranks[0], in_ranks[0] + 1)) if attr == "axis" else None

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        return 2

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        axis = attrs.get("axis", 1)
        try:
            return list(evalexpr.call_shape_builtin(shape_builtins.flatten_shape, list(dims[0]), axis)), []
        except evalexpr.NotApplicable as err:
            raise Illformed(str(err)) from err

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        in_dims, _ = enc.shape_of(node.inputs[0])
        out_dims, _ = enc.shape_of(node)
        return row_major_read(enc, node.inputs[0], idx, in_dims, out_dims)


class ConstantOfShape(_ToTarget):
    """ONNX ConstantOfShape: a tensor of dims = the shape operand's values (each >= 1,
    see `Reshape` for how the values are known), every element ``value`` (a symbolic
    scalar; 0 when absent). The rank is enumerated as for `Reshape`."""

    name = "constant_of_shape"

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if len(in_ranks) != 1 or in_ranks[0] != 1:
            raise Illformed("constant_of_shape takes a 1-D shape operand")
        rank = attrs.get("_target_len", attrs.get("_out_rank"))
        if rank is None:
            raise Unsupported("constant_of_shape of a computed shape")
        return int(rank)

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        target = node.inputs[0]
        entries = (enc.values(target.name) if isinstance(target, ast.PVar)
                   and not target.name.startswith("#") else shape_entries(enc, target))
        if entries is None:
            raise Unsupported("constant_of_shape of a computed shape")
        return list(entries), [dims[0][0] == len(entries)] + [
            e >= 1 for e in entries if not isinstance(e, int)] + [
            e >= 1 for e in entries if isinstance(e, int)]

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        return enc.scalar_const(attrs.get("value", 0.0)), z3.BoolVal(True)

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        target = inputs[0]
        if target.ndim != 1 or np.any(target != np.round(target)) or np.any(target < 1):
            raise Illformed("constant_of_shape target is not a 1-D tensor of dims")
        return np.full(tuple(int(v) for v in target), attrs.get("value", 0.0))


class Gemm(Builtin):
    """ONNX Gemm: ``alpha * A' B' + beta * C`` with ``A' = A^T`` if transA (likewise
    B), A and B of rank 2, C (optional) broadcast to the [M, N] result."""

    name, onnx = "gemm", "Gemm"
    reduces = True

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return [0, 1] if attr in ("transA", "transB") else None

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if in_ranks[0] != 2 or in_ranks[1] != 2 or (len(in_ranks) > 2 and in_ranks[2] > 2):
            raise Illformed("gemm takes rank-2 A, B and C of rank <= 2")
        return 2

    @staticmethod
    def _mk(dims: Dims, trans: Any) -> tuple[Any, Any]:
        return (dims[1], dims[0]) if trans else (dims[0], dims[1])

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        m, k = self._mk(dims[0], attrs.get("transA", 0))
        k2, n = self._mk(dims[1], attrs.get("transB", 0))
        wf = [k == k2]
        if len(dims) > 2:  # C broadcasts to [M, N] (unidirectionally)
            out, more = broadcast([[m, n], dims[2]])
            wf += more + [a == b for a, b in zip(out, [m, n], strict=True)]
        return [m, n], wf

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        dom = enc.domain
        a, b = node.inputs[0], node.inputs[1]
        a_dims, _ = enc.shape_of(a)
        trans_a, trans_b = attrs.get("transA", 0), attrs.get("transB", 0)
        _, k_len = self._mk(a_dims, trans_a)
        i, j = idx

        def body(t: list[Any]) -> Cell:
            va, da = enc.value_of(a, [t[0], i] if trans_a else [i, t[0]])
            vb, db = enc.value_of(b, [j, t[0]] if trans_b else [t[0], j])
            return dom.binop("*", va, vb), z3.And(da, db)

        total, defined = enc.reduce(node, idx, [k_len], body, "sum")
        alpha = attrs.get("alpha", 1.0)
        value = total if isinstance(alpha, float) and alpha == 1.0 else dom.binop(
            "*", enc.scalar_const(alpha), total)
        if len(node.inputs) > 2:
            c = node.inputs[2]
            vc, dc = enc.value_of(c, project(enc.shape_of(c)[0], idx))
            beta = attrs.get("beta", 1.0)
            term = vc if isinstance(beta, float) and beta == 1.0 else dom.binop(
                "*", enc.scalar_const(beta), vc)
            value, defined = dom.binop("+", value, term), z3.And(defined, dc)
        return value, defined

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        if inputs[0].ndim != 2 or inputs[1].ndim != 2:
            raise Illformed("gemm ranks")
        out = super().numpy(inputs, attrs)
        if out.shape != (self._mk(inputs[0].shape, attrs.get("transA", 0))[0],
                         self._mk(inputs[1].shape, attrs.get("transB", 0))[1]):
            raise Illformed("gemm C does not broadcast to the result")
        return out


OPAQUE = "<opaque>"  # an enumerated attribute kept symbolic as a whole (its expression)
_CONV_GEOMETRY = ("auto_pad", "dilations", "kernel_shape", "pads", "strides")


class Conv(Builtin):
    """ONNX Conv, abstract in its geometry: x [N, C, S...], w [Co, C/group, K...],
    b [Co] optional, ``C == group * dim(w, 1)`` and ``Co`` a multiple of group.
    ``out[n, co, s] = b[co] + sum over ci < C/group and k < K of
    (valid(s, k) ? x[n, chan(co, ci), pos(s, k)] : 0) * w[co, ci, k]``, where the
    output spatial dims, ``pos`` (in range) and ``valid`` (padding) are uninterpreted
    functions of the indices and dims, ``chan(co, ci) = (co // (Co / group)) *
    dim(w, 1) + ci`` (the input channels of co's group),
    one family per expression of the geometry attributes (auto_pad, dilations,
    kernel_shape, pads, strides are never enumerated, only compared as written).
    A proof thus holds for every padding, stride and dilation; a counterexample is
    replayed with the default geometry (no padding, stride and dilation 1)."""

    name, onnx = "conv", "Conv"
    reduces = True

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return [OPAQUE] if attr in _CONV_GEOMETRY else None

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if in_ranks[0] < 3 or in_ranks[1] != in_ranks[0] or (
                len(in_ranks) > 2 and in_ranks[2] != 1):
            raise Illformed("conv takes x and w of one rank >= 3 and a 1-D bias")
        return in_ranks[0]

    @staticmethod
    def _tag(node: ast.POp) -> str:
        return stable_key(tuple((k, v) for k, v in node.attrs if k in _CONV_GEOMETRY))

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        x, w = dims[0], dims[1]
        group = attrs.get("group", 1)
        spatial_in = [z3.IntVal(d) if isinstance(d, int) else d for d in x[2:] + w[2:]]
        tag = self._tag(node)
        out = [z3.Function(f"conv_dim{k}_{tag}", *([z3.IntSort()] * (len(spatial_in) + 1)))(
            *spatial_in) for k in range(len(x) - 2)]
        wf = [d >= 1 for d in out] + [group >= 1, x[1] == group * w[1],
                                      w[0] % group == 0 if not isinstance(group, int)
                                      or group != 1 else True]
        wf = [c for c in wf if not isinstance(c, bool)]
        if len(dims) > 2:
            wf.append(dims[2][0] == w[0])
        # models only: the default geometry, so that NumPy can replay a counterexample
        enc.hints.extend(o == s - k + 1 for o, s, k in zip(out, x[2:], w[2:], strict=True))
        return [x[0], w[0]] + out, wf

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        dom = enc.domain
        x_node, w_node = node.inputs[0], node.inputs[1]
        x, _ = enc.shape_of(x_node)
        w, _ = enc.shape_of(w_node)
        group = attrs.get("group", 1)
        tag = self._tag(node)
        n, co, out_s = idx[0], idx[1], idx[2:]
        # the geometry depends on the spatial dims only (not on batch or channels)
        dims = [z3.IntVal(d) if isinstance(d, int) else d for d in list(x[2:]) + list(w[2:])]
        ints = z3.IntSort()
        spatial = len(out_s)

        def body(t: list[Any]) -> Cell:
            ci, ks = t[0], t[1:]
            args = list(out_s) + list(ks) + dims
            if isinstance(group, int) and group == 1:
                chan = ci
            else:  # group(co) = co // (Co / group); its input channels follow
                chan = (co / (w[0] / group)) * w[1] + ci
            pos = [z3.Function(f"conv_pos{k}_{tag}", *([ints] * (len(args) + 1)))(*args)
                   for k in range(spatial)]
            valid = z3.Function(f"conv_valid_{tag}", *([ints] * len(args)), z3.BoolSort())(*args)
            enc.index_facts.extend(z3.And(p >= 0, p < d) for p, d in zip(pos, x[2:],
                                                                         strict=True))
            enc.hints.append(valid)
            enc.hints.extend(p == s + k for p, s, k in zip(pos, out_s, ks, strict=True))
            vx, dx = enc.value_of(x_node, [n, chan] + pos)
            vw, dw = enc.value_of(w_node, [co, ci] + list(ks))
            return z3.If(valid, dom.binop("*", vx, vw), dom.const(0)), z3.And(dx, dw)

        total, defined = enc.reduce(node, idx, [w[1]] + list(w[2:]), body, "sum")
        if len(node.inputs) > 2:
            vb, db = enc.value_of(node.inputs[2], [co])
            return dom.binop("+", total, vb), z3.And(defined, db)
        return total, defined

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        x, w = inputs[0], inputs[1]
        given = {k: attrs.get(k) for k in _CONV_GEOMETRY}
        if given["auto_pad"] not in (None, OPAQUE, "NOTSET", "VALID") or given[
                "kernel_shape"] not in (None, OPAQUE, list(w.shape[2:])) or any(
                v not in (None, OPAQUE) and any(int(e) != d for e in v) for v, d in
                ((given["dilations"], 1), (given["strides"], 1), (given["pads"], 0))):
            raise Unsupported("the NumPy Conv replays the default geometry only")
        group = int(attrs.get("group", 1))
        if x.ndim < 3 or w.ndim != x.ndim or x.shape[1] != group * w.shape[1] or \
                w.shape[0] % group:
            raise Illformed("conv shapes")
        if any(s < k for s, k in zip(x.shape[2:], w.shape[2:], strict=True)):
            raise Illformed("conv kernel larger than the input")
        if len(inputs) > 2 and inputs[2].shape != (w.shape[0],):
            raise Illformed("conv bias shape")
        return super().numpy(inputs, {"group": group})  # the default geometry


class Expand(_ToTarget):
    """ONNX Expand as an abstract broadcast: the output dims are uninterpreted functions
    of the input dims (one family per shape operand, as for `Reshape`) into which the
    input broadcasts (each input dim, right-aligned, is 1 or equal), and the output
    reads the input at the broadcast index. The shape operand's values are not
    modelled (a counterexample may be SPURIOUS); the target rank is enumerated."""

    name, onnx = "expand", "Expand"

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if len(in_ranks) < 2 or in_ranks[1] != 1:
            raise Illformed("expand takes a 1-D shape operand")
        if attrs.get("_target_len") is not None:
            return max(in_ranks[0], int(attrs["_target_len"]))
        if attrs.get("_out_rank") is None:
            raise Unsupported("expand to a shape that is not a pattern variable")
        rank = int(attrs["_out_rank"])
        if rank < in_ranks[0]:
            raise Illformed("expand to a lower rank")
        return rank

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        target = node.inputs[1]
        if isinstance(target, ast.PCompute) and target.func == "vector":
            # known target values: exact bidirectional broadcasting
            entries = enc.vector_entries(target)
            out, wf = broadcast([list(dims[0]), entries])
            return out, wf + [e >= 1 for e in entries if not isinstance(e, int)] + [
                dims[1][0] == len(entries)]
        tag = stable_key(node.inputs[1])
        in_dims = [z3.IntVal(d) if isinstance(d, int) else d for d in dims[0]]
        rank = int(attrs["_out_rank"])
        out = [z3.Function(f"expand_dim{k}_{tag}_{len(in_dims)}",
                           *([z3.IntSort()] * (len(in_dims) + 1)))(*in_dims)
               for k in range(rank)]
        offset = rank - len(in_dims)
        wf = [d >= 1 for d in out] + [dims[1][0] <= rank]
        wf += [z3.Or(d == 1, d == out[offset + k]) for k, d in enumerate(in_dims)]
        target = node.inputs[1]
        if isinstance(target, ast.PVar) and not target.name.startswith("#") \
                and enc.domain.name == "real":
            # models only (a counterexample NumPy can replay): the target is the dims
            enc.hints.append(dims[1][0] == rank)
            enc.hints.extend(enc.var_element(target.name, [k]) == z3.ToReal(d)
                             for k, d in enumerate(out))
        return out, wf

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        in_dims, _ = enc.shape_of(node.inputs[0])
        return enc.value_of(node.inputs[0], project(in_dims, idx))


class OneAxis(Builtin):
    """A built-in with one ``axis`` attribute in [-rank, rank), default -1 (Softmax,
    LayerNormalization)."""

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return list(range(-in_ranks[0], in_ranks[0])) if attr == "axis" else None

    def _axis(self, attrs: dict[str, Any], rank: int) -> int:
        axis = attrs.get("axis", -1)
        if not isinstance(axis, int) or not -rank <= axis < rank:
            raise Illformed(f"{self.onnx} axis out of range")
        return axis % rank


class Softmax(OneAxis):
    """ONNX (opset 13) Softmax / LogSoftmax along one axis: ``exp(x[i]) / S`` and
    ``x[i] - log(S)`` with ``S`` the sum of ``exp`` over the axis (``exp``/``log``
    uninterpreted with their axioms, see `scalar.Domain.axioms`). Over the reals, and
    in the uninterpreted-scalar pre-pass of the IEEE tiers (a rule that only moves
    the operator is bit-exact); a concrete IEEE encoding of exp does not exist."""

    reduces = True

    def __init__(self, log: bool) -> None:
        self.log = log
        self.name = "log_softmax" if log else "softmax"
        self.onnx = "LogSoftmax" if log else "Softmax"

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if in_ranks[0] < 1:
            raise Illformed("softmax of a scalar")
        self._axis(attrs, in_ranks[0])
        return in_ranks[0]

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        return list(dims[0]), []

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        dom = enc.domain
        if dom.name != "real" and not getattr(dom, "mirrors_float", False):
            # IEEE tiers: only the uninterpreted-scalar pre-pass (exp has no IEEE model)
            raise Unsupported(f"{self.name} is modelled over the reals only")
        child = node.inputs[0]
        dims, _ = enc.shape_of(child)
        axis = self._axis(attrs, len(dims))
        x, defined = enc.value_of(child, idx)

        def body(t: list[Any]) -> Cell:
            j = list(idx)
            j[axis] = t[0]
            v, d = enc.value_of(child, j)
            return dom.call("exp", (v,)), d

        outer = [i for k, i in enumerate(idx) if k != axis]
        total, all_defined = enc.reduce(node, outer, [dims[axis]], body, "sum")
        if dom.name == "real":
            enc.index_facts.append(total > 0)  # a sum of exponentials
        if self.log:
            return dom.binop("-", x, dom.call("log", (total,))), z3.And(defined, all_defined)
        return dom.binop("/", dom.call("exp", (x,)), total), z3.And(defined, all_defined)



# after every class the quantisation encodings reuse (Builtin, Undefined, OPAQUE)
from egraph_compiler.verify.layer_norm import NORM_BUILTINS  # noqa: E402
from egraph_compiler.verify.perm import SymbolicTranspose  # noqa: E402
from egraph_compiler.verify.quant_ops import QUANT_BUILTINS  # noqa: E402

BUILTINS: dict[str, Builtin] = {b.name: b for b in [
    Reduce("sum"), Reduce("prod"), Reduce("max"), Reduce("min"), Reduce("mean"),
    SymbolicTranspose(), Squeeze(), Unsqueeze(), MatMul(), BitShift(), Variadic("sum"),
    Variadic("max"), Variadic("min"), Variadic("mean"), Pow(), BatchNorm(), Reshape(), Cast(),
    Concat(), Slice(), Expand(), Flatten(), ConstantOfShape(), Gemm(), Conv(), Softmax(False),
    Softmax(True), *QUANT_BUILTINS, *NORM_BUILTINS,
]}
_ALIASES = {"reducesum": "reduce_sum", "reduceprod": "reduce_prod", "reducemax": "reduce_max",
            "reducemin": "reduce_min", "reducemean": "reduce_mean", "bit_shift": "bitshift",
            "mat_mul": "matmul"}


def lookup_builtin(name: str) -> Builtin | None:
    key = name.lower()
    return BUILTINS.get(_ALIASES.get(key, key))


def load_semantics(ops: dict[str, ast.OpDecl]) -> dict[str, OpSemantics]:
    """Every declared operator's meaning (elementwise expression, built-in or opaque)."""
    return {name: OpSemantics(decl, decl.semantics,
                              b.for_op(name) if (b := lookup_builtin(decl.builtin or "")) else None,
                              op_text(decl))
            for name, decl in ops.items()}
