"""Verifier encodings of the quantisation operators (real tier), registered in
`builtin_ops.BUILTINS`.

| name | inputs | meaning |
|---|---|---|
| dequantize_linear | x, scale, zero_point? | ``(x − z)·s``; x and z integers of z's type |
| quantize_linear | x, scale, zero_point? | ``saturate(round_half_to_even(x / s) + z)``, s ≠ 0 |
| max_pool | x | ONNX MaxPool, abstract in its geometry (see `MaxPool`) |
| global_average_pool | x | ONNX GlobalAveragePool, reals (see `GlobalAveragePool`) |
| average_pool | x | ONNX AveragePool, abstract in its geometry (see `AveragePool`) |
| requantize, qlinear_* | as their ops in quant.dnnr | Q(op(DQ(...))), from `ops.quantised` (`Defined`) |

Scales and zero points are per tensor (rank 0, or 1-D of one element) or, where the
Q/DQ writes a literal ``axis``, per axis: a 1-D tensor with one element per index of x
along ``axis`` (as ``quantize_static(per_channel=True)`` writes the weights: axis 0 of a
Conv's, axis 1 of a MatMul's / Gemm's). A Q/DQ that leaves ``axis`` out matches any axis
in a rule, so there a per-axis configuration is ill-formed: such a proof covers
per-tensor quantisation only. The integer operators' definitions write the axis their
ONNX counterparts quantise per channel (QLinearConv: w and bias along axis 0;
QLinearMatMul: b along axis 1, its columns).

The integer type of a zero point (and of the tensor it quantises) is one of uint8,
int8, int32, chosen by the solver (an Int ``qtype_<key>``, the key naming the zero
point's pattern, so both sides of a rule share it). NumPy cannot see that choice: it
takes the smallest of uint8, int8, int32 holding every zero-point value, and the
solver's models prefer the same choice (a hint), so a counterexample replays.

The integer operators are defined by the ONNX formulas they implement (QLinearConv,
QLinearMatMul, com.microsoft QLinearAdd / QLinearMul, ...): as the pattern of
QuantizeLinear over the float operator over DequantizeLinear, generated from their one
table (`ops.quantised`), encoded and run through the same encodings as any rule's pattern.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import z3

from egraph_compiler.dsl import ast
from egraph_compiler.ops import current as current_registry
from egraph_compiler.ops.evaluate import evaluate_node
from egraph_compiler.ops.quantised import INTEGER_SIGNATURES, float_operands
from egraph_compiler.verify.builtin_ops import OPAQUE, Builtin, Undefined
from egraph_compiler.verify.encode import Cell, Dims, Encoder, Illformed, Unsupported, stable_key
from egraph_compiler.verify.lemmas import quantize_is_monotone

# (lowest, highest) of each integer type a zero point may have, by `qtype` code
_QTYPES: tuple[tuple[int, int], ...] = ((0, 255), (-128, 127), (-2**31, 2**31 - 1))


def _numpy_range(zero_point: np.ndarray | None) -> tuple[int, int]:
    """The smallest integer type holding every zero-point value (uint8 without one)."""
    if zero_point is None or zero_point.size == 0:
        return _QTYPES[0]
    if np.any(zero_point != np.round(zero_point)):
        raise Illformed("a zero point is not an integer")
    for lo, hi in _QTYPES:
        if np.all((zero_point >= lo) & (zero_point <= hi)):
            return lo, hi
    raise Illformed("a zero point outside int32")


def _integer_facts(enc: Encoder, key_node: ast.Pattern, values: list[z3.ExprRef]) -> Any:
    """``values`` are integers of the type of ``key_node`` (a zero point, or the tensor
    itself where the zero point is absent): adds the facts, returns (lo, hi)."""
    qtype = z3.Int(f"qtype_{stable_key(key_node)}")
    lo = z3.If(qtype == 0, 0, z3.If(qtype == 1, -128, -2**31))
    hi = z3.If(qtype == 0, 255, z3.If(qtype == 1, 127, 2**31 - 1))
    enc.index_facts.append(z3.And(qtype >= 0, qtype <= 2))
    for v in values:
        enc.integers[v.get_id()] = v  # QuantizeLinear's rounding leaves them as they are
        # an Int behind the real (Z3 decides ToInt of it; of an IsInt fact, rarely)
        whole = z3.Int(f"int_{stable_key(v.sexpr())}")
        enc.index_facts.extend([v == z3.ToReal(whole), lo <= whole, whole <= hi])
    return z3.ToReal(lo), z3.ToReal(hi), qtype


def _prefer_numpy_type(enc: Encoder, qtype: Any, zero: z3.ExprRef) -> None:
    """Models only: the type NumPy deduces from a per-tensor zero point's value."""
    enc.hints.append(qtype == z3.If(z3.And(zero >= 0, zero <= 255), 0,
                                    z3.If(z3.And(zero >= -128, zero <= 127), 1, 2)))


def _factor_out(t: z3.ArithRef, s: z3.ArithRef) -> z3.ArithRef | None:
    """``u`` with ``t = u·s`` syntactically (through conditionals), or None."""
    if z3.is_app_of(t, z3.Z3_OP_ITE):
        a, b = _factor_out(t.arg(1), s), _factor_out(t.arg(2), s)
        return None if a is None or b is None else z3.If(t.arg(0), a, b)
    if z3.is_mul(t) and any(c.eq(s) for c in t.children()):
        rest = list(t.children())
        del rest[next(k for k, c in enumerate(rest) if c.eq(s))]
        return rest[0] if len(rest) == 1 else z3.Product(*rest)
    return None


def _divide(t: z3.ArithRef, s: z3.ArithRef) -> z3.ArithRef:
    """``t / s``, cancelling a factor ``s`` of a product (what DequantizeLinear wrote):
    exact wherever s ≠ 0, and QuantizeLinear is undefined where s = 0."""
    factor = _factor_out(t, s)
    return t / s if factor is None else factor


def _linear_condition(cond: z3.BoolRef, s: z3.ArithRef) -> z3.BoolRef:
    """``a·s >= b·s`` (a max of dequantised values) as the same condition without the
    product: a >= b for s > 0, a <= b for s < 0, true for s = 0."""
    if not z3.is_app_of(cond, z3.Z3_OP_GE):
        return cond
    a, b = _factor_out(cond.arg(0), s), _factor_out(cond.arg(1), s)
    if a is None or b is None:
        return cond
    return z3.Or(s == 0, z3.And(s > 0, a >= b), z3.And(s < 0, a <= b))


def _quantize(t: z3.ArithRef, s: z3.ArithRef, z: z3.ArithRef, lo: z3.ArithRef,
              hi: z3.ArithRef, integers: dict[int, Any]) -> z3.ArithRef:
    """saturate(round_half_to_even(t / s) + z), taken into the branches of a
    conditional ``t`` (a max or an unrolled reduction): the same value, whose
    divisions cancel against the scales DequantizeLinear multiplied by, as do the
    products in the conditions (`_linear_condition`). A max / min of two values
    becomes the max / min of their quantised values (min / max for s < 0), as
    `lemmas.quantize_is_monotone` proves: the comparison is then between integers,
    not between a partial maximum and a product with the scale."""
    if z3.is_app_of(t, z3.Z3_OP_ITE):
        a, b = t.arg(1), t.arg(2)
        qa, qb = _quantize(a, s, z, lo, hi, integers), _quantize(b, s, z, lo, hi, integers)
        picks = _max_or_min(t)
        if picks is not None and quantize_is_monotone():
            larger, smaller = z3.If(qa >= qb, qa, qb), z3.If(qa <= qb, qa, qb)
            if picks == "max":
                return z3.If(s > 0, larger, smaller)
            return z3.If(s > 0, smaller, larger)
        return z3.If(_linear_condition(t.arg(0), s), qa, qb)
    q = round_half_to_even(_divide(t, s), integers) + z
    return z3.If(q < lo, lo, z3.If(q > hi, hi, q))


def _max_or_min(t: z3.ExprRef) -> str | None:
    """"max" for ``If(a >= b, a, b)`` (or ``>``, or ``b <= a``), "min" for the
    reverse, None for any other conditional."""
    cond, a, b = t.arg(0), t.arg(1), t.arg(2)
    if cond.num_args() != 2:
        return None
    left, right = cond.arg(0), cond.arg(1)
    for ops, name in (((z3.Z3_OP_GE, z3.Z3_OP_GT), "max"), ((z3.Z3_OP_LE, z3.Z3_OP_LT), "min")):
        if any(z3.is_app_of(cond, op) for op in ops):
            if left.eq(a) and right.eq(b):
                return name
            if left.eq(b) and right.eq(a):
                return "min" if name == "max" else "max"
    return None


def _integral(t: z3.ArithRef, integers: dict[int, Any]) -> bool:
    """``t`` is an integer by its form: integer literals, ``ToReal`` of Ints and the
    terms `_integer_facts` declared integers (``integers``, by id), under + - * and
    conditionals."""
    if t.get_id() in integers or z3.is_int_value(t) or z3.is_app_of(t, z3.Z3_OP_TO_REAL):
        return True
    if z3.is_rational_value(t):
        return t.denominator_as_long() == 1
    if z3.is_app_of(t, z3.Z3_OP_ITE):
        return _integral(t.arg(1), integers) and _integral(t.arg(2), integers)
    if z3.is_add(t) or z3.is_sub(t) or z3.is_mul(t) or z3.is_app_of(t, z3.Z3_OP_UMINUS):
        return all(_integral(c, integers) for c in t.children())
    return False


def round_half_to_even(t: z3.ArithRef, integers: dict[int, Any] | None = None) -> z3.ArithRef:
    """The nearest integer to a real, ties to even (as ONNX QuantizeLinear, np.rint).
    An integer by its form (``integers``: terms known to be integers, by id) is itself:
    Z3 otherwise has to find that out through ToInt and IsInt, and returned unknown
    on the max of dequantised values."""
    if _integral(t, integers or {}):
        return t
    floor = z3.ToReal(z3.ToInt(t))
    frac = t - floor
    even_floor = z3.IsInt(floor / 2)
    return z3.If(frac > 0.5, floor + 1,
                 z3.If(frac < 0.5, floor, z3.If(even_floor, floor, floor + 1)))


def _axis(attrs: dict[str, Any], rank: int) -> int | None:
    """The literal `axis` of a Q/DQ, in [0, rank); None where it is left out or a
    variable (a pattern matches any axis there: the canonical rule binds a fresh
    variable), so only a per-tensor scale / zero point is modelled, or out of range
    (ONNX accepts that only for a per-tensor scale)."""
    axis = attrs.get("axis")
    if not isinstance(axis, int) or isinstance(axis, bool):
        return None
    return axis % rank if -rank <= axis < rank else None


class _Linear(Builtin):
    """DequantizeLinear / QuantizeLinear, per tensor: elementwise over x."""

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        # ONNX: a scale / zero point is a scalar or 1-D; one of a single element is per tensor
        if any(r > 1 or r > in_ranks[0] for r in in_ranks[1:]):
            raise Illformed(f"{self.name}: a scale / zero point of rank > 1")
        return in_ranks[0]

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        # A 1-D scale / zero point has one element (per tensor, whatever the axis) or,
        # with a written `axis`, one per index of x along it (per axis).
        axis = _axis(attrs, len(dims[0]))
        return list(dims[0]), [d[0] == 1 if axis is None else z3.Or(d[0] == 1, d[0] == dims[0][axis])
                               for d in dims[1:] if d]

    def _operands(self, enc: Encoder, node: ast.POp, idx: list[Any]
                  ) -> tuple[Cell, Cell, z3.ExprRef, z3.BoolRef, ast.Pattern]:
        if enc.domain.name != "real":
            raise Unsupported(f"{self.name} is modelled over the reals only")
        x = enc.value_of(node.inputs[0], idx)
        axis = _axis(enc.attrs(node), len(idx))

        def parameter(p: ast.Pattern) -> Cell:
            if enc.rank_of(p) == 0:
                return enc.value_of(p, [])
            (length,), _ = enc.shape_of(p)
            return enc.value_of(p, [0 if axis is None else z3.If(length == 1, 0, idx[axis])])

        scale = parameter(node.inputs[1])
        if len(node.inputs) > 2:
            zero, zero_ok = parameter(node.inputs[2])
            return x, scale, zero, zero_ok, node.inputs[2]
        return x, scale, z3.RealVal(0), z3.BoolVal(True), node.inputs[0]

    @staticmethod
    def _numpy_operands(inputs: list[np.ndarray], attrs: dict[str, Any]
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
        x, scale = inputs[0], inputs[1]
        zero = inputs[2] if len(inputs) > 2 else None
        axis = _axis(attrs, x.ndim)

        def along_axis(a: np.ndarray) -> np.ndarray:
            if a.ndim > min(1, x.ndim):
                raise Illformed("a scale / zero point of rank > 1")
            if a.size == 1:
                return a.reshape(())
            if axis is None or a.size != x.shape[axis]:
                raise Illformed("a per-axis scale / zero point without an axis of its length")
            return a.reshape([-1 if k == axis else 1 for k in range(x.ndim)])

        lo, hi = _numpy_range(zero)
        return x, along_axis(scale), np.zeros(()) if zero is None else along_axis(zero), (lo, hi)


class DequantizeLinear(_Linear):
    name = "dequantize_linear"

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        (x, x_ok), (s, s_ok), z, z_ok, key = self._operands(enc, node, idx)
        _lo, _hi, qtype = _integer_facts(enc, key, [x, z])  # x has its zero point's type
        _prefer_numpy_type(enc, qtype, z)
        return (x - z) * s, z3.And(x_ok, s_ok, z_ok)

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        x, scale, zero, (lo, hi) = self._numpy_operands(inputs, attrs)
        if np.any(x != np.round(x)) or np.any((x < lo) | (x > hi)):
            raise Illformed("DequantizeLinear reads integers of its zero point's type")
        return (x - zero) * scale


class QuantizeLinear(_Linear):
    name = "quantize_linear"

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        (x, x_ok), (s, s_ok), z, z_ok, key = self._operands(enc, node, idx)
        lo, hi, qtype = _integer_facts(enc, key, [z])
        _prefer_numpy_type(enc, qtype, z)
        return _quantize(x, s, z, lo, hi, enc.integers), z3.And(x_ok, s_ok, z_ok, s != 0)

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        x, scale, zero, (lo, hi) = self._numpy_operands(inputs, attrs)
        if np.any(scale == 0):
            raise Undefined("QuantizeLinear with a zero scale")
        return np.clip(np.rint(x / scale) + zero, lo, hi)


_POOL_GEOMETRY = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                  "storage_order", "strides")


class MaxPool(Builtin):
    """ONNX MaxPool (first output), abstract in its geometry: ``out[n, c, s] = max over
    k < K of x[n, c, pos(s, k)]`` with the kernel extents K (>= 1), the output spatial
    dims and ``pos`` (in range) uninterpreted, one family per expression of the
    geometry attributes. Padded window positions are absorbed into ``pos``: the
    maximum over the valid positions is the maximum with some of them repeated, so a
    proof for every ``pos`` holds for every padding, stride, dilation and ceil mode.
    NumPy replays the default geometry with a 1×…×1 kernel unless one is written."""

    name = "max_pool"
    reduces = True
    geometry = _POOL_GEOMETRY  # the attributes the encoding keeps abstract

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        return [OPAQUE] if attr in self.geometry else None

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if in_ranks[0] < 3:
            raise Illformed(f"{self.name} takes x of rank >= 3")
        return in_ranks[0]

    @staticmethod
    def _tag(node: ast.POp) -> str:
        return stable_key(tuple((k, v) for k, v in node.attrs if k in _POOL_GEOMETRY))

    @staticmethod
    def _kernel(node: ast.POp, attrs: dict[str, Any], spatial: int) -> list[Any]:
        written = attrs.get("kernel_shape")
        if isinstance(written, list) and all(isinstance(k, int) for k in written):
            if len(written) != spatial:
                raise Illformed("kernel_shape of another rank")
            return list(written)
        tag = MaxPool._tag(node)
        return [z3.Int(f"pool_kernel{k}_{tag}") for k in range(spatial)]

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        x = dims[0]
        spatial_in = [z3.IntVal(d) if isinstance(d, int) else d for d in x[2:]]
        tag = self._tag(node)
        out = [z3.Function(f"pool_dim{k}_{tag}", *([z3.IntSort()] * (len(spatial_in) + 1)))(
            *spatial_in) for k in range(len(x) - 2)]
        kernel = self._kernel(node, attrs, len(x) - 2)
        wf = [d >= 1 for d in out] + [k >= 1 for k in kernel if not isinstance(k, int)]
        # models only: a 1×…×1 kernel, stride 1 (what NumPy replays)
        enc.hints.extend(k == 1 for k in kernel if not isinstance(k, int))
        enc.hints.extend(o == s - k + 1 for o, s, k in zip(out, x[2:], kernel, strict=True))
        return [x[0], x[1]] + out, wf

    def _window(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any],
                idx: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
        """What every pool's window needs: the kernel, the input's spatial dims as Z3
        terms, and its own (symbolic) dims."""
        x, _ = enc.shape_of(node.inputs[0])
        kernel = self._kernel(node, attrs, len(idx) - 2)
        enc.index_facts.extend(k >= 1 for k in kernel if not isinstance(k, int))
        return kernel, [z3.IntVal(d) if isinstance(d, int) else d for d in x[2:]], list(x[2:])

    @staticmethod
    def _positions(enc: Encoder, family: str, args: list[Any], out_s: list[Any], t: list[Any],
                   x_spatial: list[Any]) -> list[Any]:
        """The input position of window tap ``t`` at output ``out_s``: uninterpreted, in range;
        ``out_s + t`` in models (what NumPy replays)."""
        pos = [z3.Function(f"{family}{k}", *([z3.IntSort()] * (len(args) + 1)))(*args) for k in range(len(out_s))]
        enc.index_facts.extend(z3.And(p >= 0, p < d) for p, d in zip(pos, x_spatial, strict=True))
        enc.hints.extend(p == s + k for p, s, k in zip(pos, out_s, t, strict=True))
        return pos

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        tag = self._tag(node)
        n, c, out_s = idx[0], idx[1], idx[2:]
        kernel, dims, x_spatial = self._window(enc, node, attrs, idx)

        def body(t: list[Any]) -> Cell:
            pos = self._positions(enc, f"pool_pos_{tag}_", list(out_s) + list(t) + dims, out_s, t, x_spatial)
            return enc.value_of(node.inputs[0], [n, c] + pos)

        return enc.reduce(node, idx, kernel, body, "max")

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        x = inputs[0]
        if x.ndim < 3:
            raise Illformed("max_pool takes x of rank >= 3")
        written = attrs.get("kernel_shape")
        kernel = [1] * (x.ndim - 2) if written in (None, OPAQUE) else [int(k) for k in written]
        for name, default in (("strides", 1), ("dilations", 1), ("pads", 0)):
            given = attrs.get(name)
            if given not in (None, OPAQUE) and any(int(v) != default for v in given):
                raise Unsupported("the NumPy MaxPool replays the default geometry only")
        if attrs.get("auto_pad") not in (None, OPAQUE, "NOTSET", "VALID") or \
                attrs.get("ceil_mode") not in (None, OPAQUE, 0):
            raise Unsupported("the NumPy MaxPool replays the default geometry only")
        windows = np.lib.stride_tricks.sliding_window_view(
            x, kernel, axis=tuple(range(2, x.ndim)))
        return np.max(windows, axis=tuple(range(x.ndim, windows.ndim)))


def _p(op: str, *inputs: ast.Pattern, attrs: tuple[tuple[str, ast.Expr], ...] = ()
       ) -> ast.POp:
    return ast.POp(op, tuple(inputs), attrs)


def _dq(x: ast.Pattern, scale: ast.Pattern, zero: ast.Pattern | None, axis: int | None = None) -> ast.POp:
    attrs = (("axis", ast.Num(axis)),) if axis is not None else ()
    return _p("DequantizeLinear", x, scale, *([zero] if zero is not None else []), attrs=attrs)


def _define(node: ast.POp) -> ast.POp:
    """An integer operator's ONNX formula, from its signature (`ops.quantised`):
    QuantizeLinear(float operator(DequantizeLinear of each operand, of the weights per
    channel, of the bias along axis 0), output scale, output zero point). The float
    operator's attributes the node leaves out (normalisation wrote every one the integer
    operator declares) take their defaults: QConvInt has explicit pads only, so its Conv
    gets auto_pad="NOTSET", as rule qdq-conv writes it."""
    float_op, operands, weights, bias, (y_scale, y_zero) = INTEGER_SIGNATURES[node.op]
    inputs = node.inputs
    dequantised = [_dq(inputs[v], inputs[s], inputs[z]) for v, s, z in operands]
    if weights is not None:
        w, ws, wz, axis = weights
        trans_b = dict(node.attrs).get("transB", ast.Num(0))  # Gemm: B's columns are axis 1 − transB
        axis = abs(axis - int(trans_b.value)) if isinstance(trans_b, ast.Num) else None
        dequantised.append(_dq(inputs[w], inputs[ws], inputs[wz] if wz is not None else None, axis))
    if bias is not None and bias[0] < len(inputs):
        b, bs, bz = bias
        scale = inputs[bs] if bs is not None else _p("Mul", inputs[operands[0][1]], inputs[weights[1]])
        dequantised.append(_dq(inputs[b], scale, inputs[bz] if bz is not None else None, axis=0))
    if float_op == "Identity":  # Requantize: Q(DQ(x)), no operator between
        return _p("QuantizeLinear", dequantised[0], inputs[y_scale], inputs[y_zero])
    written = {name for name, _ in node.attrs}
    defaults = tuple((a.name, a.default) for a in current_registry().ops[float_op].decl.attrs
                     if a.name not in written and a.default is not None)
    return _p("QuantizeLinear", _p(float_op, *dequantised, attrs=defaults + node.attrs),
              inputs[y_scale], inputs[y_zero])


class Defined(Builtin):
    """An integer operator defined as a pattern of other operators (its ONNX formula):
    shape, value and NumPy reference are those of the pattern."""

    reduces = True  # whatever its pattern does
    op = ""  # the integer operator (`for_op`): several share a built-in (QConvInt, QLinearConv)

    def __init__(self, name: str, rank: Callable[[list[int]], int], float_builtin: str = "") -> None:
        self.name = name
        self.rank = rank
        self.float_builtin = float_builtin  # whose attribute domains it takes, if any

    def for_op(self, op: str) -> Defined:
        bound = copy.copy(self)
        bound.op = op
        return bound

    def attr_domain(self, attr: str, in_ranks: list[int]) -> list[Any] | None:
        if not self.float_builtin:
            return [OPAQUE] if attr in _POOL_GEOMETRY else None
        from egraph_compiler.verify.builtin_ops import lookup_builtin

        ranks = [in_ranks[p] for p in float_operands(self.op) if p < len(in_ranks)]
        return lookup_builtin(self.float_builtin).attr_domain(attr, ranks)  # type: ignore[union-attr]

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        return self.rank(in_ranks)

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        return enc.shape_of(self._definition(enc, node))

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        return enc.value_of(self._definition(enc, node), idx)

    def _definition(self, enc: Encoder, node: ast.POp) -> ast.Pattern:
        """The defining pattern, or an already encoded pattern equal to it but for a Q/DQ
        `axis` one of them leaves out (that Q/DQ is then modelled per tensor only, where
        no value depends on the axis): the same encoding, reductions included, so a rule
        that writes the definition is proved by it. Two written axes must agree."""
        pattern = _define(node)
        erased = _erase_axis(pattern)
        for seen in list(enc._shape_memo):
            if isinstance(seen, ast.POp) and _erase_axis(seen) == erased and _axes_agree(seen, pattern):
                return seen
        return pattern

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        # the pattern over placeholders ?0, ?1, ... run by the builtins it names
        names = [f"_{k}" for k in range(len(inputs))]
        node = ast.POp(self.op, tuple(ast.PVar(n) for n in names),
                       tuple((k, ast.Str(v) if isinstance(v, str) else ast.Var(k))
                             for k, v in attrs.items()))
        tensors = dict(zip(names, inputs, strict=True))
        return _run_defined(_define(node), tensors, attrs)


# The Q/DQ attributes that say how scales are laid out over x; `_axes_agree` decides them.
_QDQ_LAYOUT = ("axis", "block_size")


def _erase_axis(p: ast.Pattern) -> ast.Pattern:
    """``p`` without Q/DQ `axis` attributes and source positions."""
    if isinstance(p, ast.PVar):
        return ast.PVar(p.name)
    if not isinstance(p, ast.POp):
        return p
    attrs = tuple((k, _plain(v)) for k, v in p.attrs
                  if not (k in _QDQ_LAYOUT and p.op in ("QuantizeLinear", "DequantizeLinear")))
    return ast.POp(p.op, tuple(_erase_axis(c) for c in p.inputs), attrs)


def _plain(v: ast.Expr) -> ast.Expr:
    """An attribute value without its source position."""
    if isinstance(v, ast.Str):
        return ast.Str(v.value)
    if isinstance(v, ast.Var):
        return ast.Var(v.name)
    return ast.Num(v.value) if isinstance(v, ast.Num) else v


def _axes_agree(seen: ast.Pattern, definition: ast.Pattern) -> bool:
    """Patterns equal up to `_erase_axis`: whether the encoded pattern ``seen`` may stand
    for ``definition``. A Q/DQ of ``seen`` whose axis is no literal (left out, or the
    canonical rule's fresh variable: it matches any axis, so it is modelled per tensor,
    `_axis`) agrees with any; a literal axis only with the same literal (a definition
    leaving it out means ONNX's default, and is modelled per tensor)."""
    if not (isinstance(seen, ast.POp) and isinstance(definition, ast.POp)):
        return True
    if seen.op in ("QuantizeLinear", "DequantizeLinear"):
        axis, own = dict(seen.attrs).get("axis"), dict(definition.attrs).get("axis")
        if isinstance(axis, ast.Num) and not (isinstance(own, ast.Num) and own.value == axis.value):
            return False
        # the definitions quantise per tensor or per axis: a blocked Q/DQ is not one of them
        block = dict(seen.attrs).get("block_size")
        if isinstance(block, ast.Num) and block.value != 0:
            return False
    return all(_axes_agree(x, y) for x, y in zip(seen.inputs, definition.inputs, strict=True))


def _run_defined(p: ast.Pattern, tensors: dict[str, np.ndarray],
                 attrs: dict[str, Any]) -> np.ndarray:
    if isinstance(p, ast.PVar):
        return tensors[p.name]
    assert isinstance(p, ast.POp)
    inputs = [_run_defined(c, tensors, attrs) for c in p.inputs]
    own = {k: (v.value if isinstance(v, (ast.Str, ast.Num)) else attrs.get(k)) for k, v in p.attrs}
    builtin_name = current_registry().ops[p.op].decl.builtin
    if builtin_name is None:  # an operator of scalar semantics (Add, Mul): the compiler's folding
        return evaluate_node(p.op, own, inputs)[0]
    from egraph_compiler.verify.builtin_ops import lookup_builtin  # defined after this module loads

    builtin = lookup_builtin(builtin_name)
    assert builtin is not None
    return builtin.numpy(inputs, own)


def _broadcast_rank(a: int, b: int) -> Callable[[list[int]], int]:
    return lambda ranks: max(ranks[a], ranks[b])


def _conv_rank(ranks: list[int]) -> int:
    if ranks[0] < 3 or ranks[3] != ranks[0]:
        raise Illformed("conv takes x and w of one rank >= 3")
    return ranks[0]


def _matmul_rank(ranks: list[int]) -> int:
    if min(ranks[0], ranks[3]) < 2:
        raise Illformed("matmul of rank < 2 is not modelled")
    return max(ranks[0], ranks[3])


QUANT_BUILTINS: list[Builtin] = [
    DequantizeLinear(), QuantizeLinear(), MaxPool(),
    Defined("qlinear_conv", _conv_rank),
    Defined("qlinear_matmul", _matmul_rank),
    Defined("qlinear_add", _broadcast_rank(0, 3)),
    Defined("qlinear_mul", _broadcast_rank(0, 3)),
    Defined("requantize", lambda ranks: ranks[0]),
]


# --- pooling, Gemm, Concat and Softmax: the encodings and integer operators that
# rules/quant.dnnr's qdq-gemm, qdq-avgpool, qdq-gap, qdq-concat and qdq-softmax need.

# dilations (AveragePool has them since opset 19): a dilated window is one more `pos`
_AVERAGE_POOL_GEOMETRY = ("auto_pad", "ceil_mode", "count_include_pad", "dilations",
                          "kernel_shape", "pads", "strides")


class GlobalAveragePool(Builtin):
    """ONNX GlobalAveragePool: ``out[n, c, 0, …] = mean of x[n, c, …]`` over every
    spatial axis (rank >= 3), over the reals; the reduction is `Encoder.reduce`'s, as
    for ReduceMean."""

    name = "global_average_pool"

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if in_ranks[0] < 3:
            raise Illformed("global_average_pool takes x of rank >= 3")
        return in_ranks[0]

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        return [dims[0][0], dims[0][1]] + [1] * (len(dims[0]) - 2), []

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        if enc.domain.name != "real":
            raise Unsupported("global_average_pool is modelled over the reals only")
        child = node.inputs[0]
        dims, _ = enc.shape_of(child)
        total, defined = enc.reduce(node, idx[:2], list(dims[2:]),
                                    lambda t: enc.value_of(child, idx[:2] + list(t)), "sum")
        count = 1
        for d in dims[2:]:
            count = count * d
        return total / z3.ToReal(z3.IntVal(count) if isinstance(count, int) else count), defined

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        x = inputs[0]
        if x.ndim < 3:
            raise Illformed("global_average_pool takes x of rank >= 3")
        return np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


class AveragePool(MaxPool):
    """ONNX AveragePool, abstract in its geometry as `MaxPool` is: ``out[n, c, s] =
    (sum over k < K of (valid(s, k) ? x[n, c, pos(s, k)] : 0)) / count(s)``, with the
    output dims, ``pos`` (in range), ``valid`` (not a padded position) and the divisor
    ``count(s) >= 1`` (the window positions counted: the valid ones, or all of them with
    count_include_pad) uninterpreted, one family per expression of the geometry
    attributes. A proof holds for every padding, stride, dilation and ceil mode; NumPy replays the
    default geometry (no padding, stride 1, K×… kernel written or 1×…×1)."""

    name = "average_pool"
    geometry = _AVERAGE_POOL_GEOMETRY

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        if enc.domain.name != "real":
            raise Unsupported("average_pool is modelled over the reals only")
        tag = stable_key(tuple((k, v) for k, v in node.attrs if k in _AVERAGE_POOL_GEOMETRY))
        n, c, out_s = idx[0], idx[1], idx[2:]
        kernel, dims, x_spatial = self._window(enc, node, attrs, idx)
        ints = z3.IntSort()

        def body(t: list[Any]) -> Cell:
            args = list(out_s) + list(t) + dims
            pos = self._positions(enc, f"avg_pool_pos_{tag}_", args, out_s, t, x_spatial)
            valid = z3.Function(f"avg_pool_valid_{tag}", *([ints] * len(args)), z3.BoolSort())(*args)
            enc.hints.append(valid)
            v, defined = enc.value_of(node.inputs[0], [n, c] + pos)
            return z3.If(valid, v, z3.RealVal(0)), defined

        total, defined = enc.reduce(node, idx, kernel, body, "sum")
        count_args = list(out_s) + dims
        count = z3.Function(f"avg_pool_count_{tag}", *([ints] * (len(count_args) + 1)))(*count_args)
        enc.index_facts.append(count >= 1)
        size = 1
        for k in kernel:
            size = size * k
        enc.hints.append(count == size)  # models only: every position counted, as NumPy replays
        return total / z3.ToReal(count), defined

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        x = inputs[0]
        if x.ndim < 3:
            raise Illformed("average_pool takes x of rank >= 3")
        written = attrs.get("kernel_shape")
        kernel = [1] * (x.ndim - 2) if written in (None, OPAQUE) else [int(k) for k in written]
        for name, default in (("strides", 1), ("pads", 0)):
            given = attrs.get(name)
            if given not in (None, OPAQUE) and any(int(v) != default for v in given):
                raise Unsupported("the NumPy AveragePool replays the default geometry only")
        if attrs.get("auto_pad") not in (None, OPAQUE, "NOTSET", "VALID") or \
                attrs.get("ceil_mode") not in (None, OPAQUE, 0):
            raise Unsupported("the NumPy AveragePool replays the default geometry only")
        windows = np.lib.stride_tricks.sliding_window_view(x, kernel, axis=tuple(range(2, x.ndim)))
        return np.mean(windows, axis=tuple(range(x.ndim, windows.ndim)))


def _gemm_rank(ranks: list[int]) -> int:
    if ranks[0] != 2 or ranks[3] != 2 or ranks[6] > 2:
        raise Illformed("gemm takes rank-2 A, B and C of rank <= 2")
    return 2


def _pool_rank(ranks: list[int]) -> int:
    if ranks[0] < 3:
        raise Illformed("pooling takes x of rank >= 3")
    return ranks[0]


def _concat_rank(ranks: list[int]) -> int:
    if ranks[0] < 1 or ranks[3] != ranks[0]:
        raise Illformed("concat takes inputs of one rank >= 1")
    return ranks[0]


def _softmax_rank(ranks: list[int]) -> int:
    if ranks[0] < 1:
        raise Illformed("softmax of a scalar")
    return ranks[0]


QUANT_BUILTINS.extend([
    GlobalAveragePool(), AveragePool(),
    Defined("qlinear_gemm", _gemm_rank, "gemm"),
    Defined("qlinear_average_pool", _pool_rank, "average_pool"),
    Defined("qlinear_global_average_pool", _pool_rank),
    Defined("qlinear_concat", _concat_rank, "concat"),
    Defined("qlinear_softmax", _softmax_rank, "softmax"),
    Defined("qlinear_clip", lambda ranks: ranks[0]),
])
