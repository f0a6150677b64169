"""The scalar C fallback: operators without an integer kernel run in float.

A quantised model often has operators onnxruntime's quantiser leaves in float
(LayerNormalization, Erf, Div by a constant, a MatMul of two activations…). They run
here as plain C on Hexagon's scalar float unit: ``Dequantize`` (uint8 → float, exactly
``(q − zp)·s`` as ONNX DequantizeLinear), the float operator, then ``Quantize`` (float →
uint8, ``round_half_even(x / s) + zp`` saturated, as ONNX QuantizeLinear). Float tensors
are row-major in their ONNX (logical) layout.

The freestanding program has no libm and clang lowers ``/`` to a library call, so
division, square root, exp and erf are written here with Hexagon's fused multiply-add
(`dnnr_fdiv` rounds correctly, the others are within a few ulp). `Gather` also moves
uint8 tensors between layouts (Transpose/Reshape of quantised tensors, NHWC ↔ logical).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egraph_compiler import ops
from egraph_compiler.backends.hexagon.eltwise import _broadcast_index, _nested
from egraph_compiler.backends.hexagon.kernels import _c_array
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ops.scalar import Spelling, to_c, unwrap

FLOAT_C = r"""
/* Float helpers for the scalar fallback: no libm, no division instruction. */
static inline float dnnr_fma(float a, float b, float c) { return Q6_R_sfmpyacc_RR(c, a, b); }
static inline float dnnr_fnma(float a, float b, float c) { return Q6_R_sfmpynac_RR(c, a, b); }  /* c - a*b */
static inline float dnnr_bits_f(u32 u) { union { u32 u; float f; } v = { u }; return v.f; }
static inline u32 dnnr_f_bits(float f) { union { float f; u32 u; } v = { f }; return v.u; }
static inline float dnnr_frecip(float b) {
  float r = dnnr_bits_f(0x7EF311C7u - dnnr_f_bits(b));
  for (int i = 0; i < 4; i++) r = dnnr_fma(r, dnnr_fnma(b, r, 1.0f), r);
  return r;
}
/* a / b correctly rounded: quotient, exact residual by FMA, one correction. */
static inline float dnnr_fdiv(float a, float b) {
  float r = dnnr_frecip(b);
  float q = a * r;
  float e = dnnr_fnma(q, b, a);
  return dnnr_fma(e, r, q);
}
static inline float dnnr_fsqrt(float v) {
  if (v < 0.0f) return dnnr_bits_f(0x7FC00000u);  /* NaN, as sqrtf */
  if (v == 0.0f) return v;
  float y = dnnr_bits_f(0x5F3759DFu - (dnnr_f_bits(v) >> 1));  /* 1/sqrt(v) */
  for (int i = 0; i < 4; i++) y = y * (1.5f - 0.5f * v * y * y);
  float s = v * y;
  return dnnr_fma(dnnr_fnma(s, s, v), 0.5f * y, s);  /* one Newton step on s, residual exact */
}
static inline float dnnr_fexp(float x) {
  if (x != x) return x;  /* NaN stays NaN (a fully masked Softmax row: −inf − −inf), as expf */
  if (x < -87.0f) return 0.0f;
  if (x > 88.0f) x = 88.0f;
  float n = Q6_R_convert_w2sf_R(Q6_R_convert_sf2w_R(x * 1.44269504f));  /* round to nearest */
  float r = dnnr_fnma(n, 0.693145752f, x);  /* ln 2 split in two for an exact first step */
  r = dnnr_fnma(n, 1.42860677e-6f, r);
  float p = 1.0f / 5040.0f;
  p = dnnr_fma(p, r, 1.0f / 720.0f);
  p = dnnr_fma(p, r, 1.0f / 120.0f);
  p = dnnr_fma(p, r, 1.0f / 24.0f);
  p = dnnr_fma(p, r, 1.0f / 6.0f);
  p = dnnr_fma(p, r, 0.5f);
  p = dnnr_fma(p, r, 1.0f);
  p = dnnr_fma(p, r, 1.0f);
  return p * dnnr_bits_f((u32)(Q6_R_convert_sf2w_R(n) + 127) << 23);
}
/* Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7). */
static inline float dnnr_ferf(float x) {
  float a = x < 0.0f ? -x : x;
  float t = dnnr_frecip(dnnr_fma(0.3275911f, a, 1.0f));
  float p = 1.061405429f;
  p = dnnr_fma(p, t, -1.453152027f);
  p = dnnr_fma(p, t, 1.421413741f);
  p = dnnr_fma(p, t, -0.284496736f);
  p = dnnr_fma(p, t, 0.254829592f);
  float y = 1.0f - p * t * dnnr_fexp(-a * a);
  return x < 0.0f ? -y : y;
}
"""

# How the fallback writes scalar semantics (`ops.scalar.to_c`): no libm, so only the
# built-ins FLOAT_C implements; an operator using another has no fallback (a clear error).
# ``1 / y`` is a reciprocal (Sigmoid), cheaper than a correctly rounded division.
SPELLING = Spelling(
    functions={"exp": "dnnr_fexp({0})", "sqrt": "dnnr_fsqrt({0})", "erf": "dnnr_ferf({0})",
               "abs": "({0} < 0.0f ? -{0} : {0})", "max": "({0} > {1} ? {0} : {1})",
               "min": "({0} < {1} ? {0} : {1})"},
    literal=lambda value: f"{value!r}f",
    binary={"/": "dnnr_fdiv({0}, {1})"},
    reciprocal="dnnr_frecip({0})",
)
# The float operators Pow becomes for the exponents it has a fallback for (no libm pow).
_POW = {2.0: "a * a", 1.0: "a", 0.5: "dnnr_fsqrt(a)"}


def _operand_names(count: int) -> list[str]:
    return ["v"] if count == 1 else ["a", "b"] if count == 2 else [f"a{i}" for i in range(count)]


def _generated(op: str, attrs: dict[str, object], operands: list[str]) -> str | None:
    """C of ``op``'s declared scalar semantics over ``operands``, or None without one."""
    info = ops.current().get(op)
    if info is None or info.semantics is None or not info.elementwise:
        return None
    values = {name: info.attr(attrs, name) for name in info.defaults}
    numbers = {k: float(v) for k, v in values.items() if isinstance(v, (int, float))}
    names = [p.name for p in info.decl.params]
    try:
        return unwrap(to_c(info.semantics, dict(zip(names, operands, strict=False)), numbers, SPELLING))
    except (KeyError, ValueError):
        return None  # a built-in this target cannot spell (tanh, log, …)


def has_float_fallback(op: str, arity: int = 1) -> bool:
    """Whether the scalar float fallback computes ``op`` (with its default attributes)."""
    return op == "Pow" or op in WHOLE_TENSOR_BODIES or _generated(op, {}, _operand_names(arity)) is not None


@dataclass(frozen=True, slots=True)
class Gather:
    """``y[i] = x[table[i]]``: a layout change (Transpose, Reshape of NHWC, …) of 1- or 4-byte elements."""

    table: np.ndarray  # int32 source element per output element
    element_bytes: int


def gather_c(op: Gather, prefix: str) -> tuple[str, str]:
    ctype = "u8" if op.element_bytes == 1 else "float"
    code = _c_array(f"{prefix}_index", "i32", op.table.astype(np.int64)) + f"""
static void __attribute__((noinline)) {prefix}(const {ctype} *restrict x, {ctype} *restrict out) {{
  for (int i = 0; i < {op.table.size}; i++) out[i] = x[{prefix}_index[i]];
}}
"""
    return code, f"{prefix}((const {ctype} *){{x}}, ({ctype} *){{y}});"


@dataclass(frozen=True, slots=True)
class _AffineMap:
    """``size`` elements between uint8 and float: ``real = (q - zero_point) * scale``."""

    size: int
    zero_point: int  # device (uint8) domain
    scale: float


class Dequantize(_AffineMap):
    __slots__ = ()


def dequantize_c(op: Dequantize, prefix: str) -> tuple[str, str]:
    code = f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, float *restrict out) {{
  for (int i = 0; i < {op.size}; i++) out[i] = (float)((i32)x[i] - {op.zero_point}) * {_f(op.scale)};
}}
"""
    return code, f"{prefix}({{x}}, (float *){{y}});"


class Quantize(_AffineMap):
    __slots__ = ()


def quantize_c(op: Quantize, prefix: str) -> tuple[str, str]:
    # Q6_R_convert_sf2w_R rounds half to even (the default rounding mode), as ONNX's QuantizeLinear.
    code = f"""
static void __attribute__((noinline)) {prefix}(const float *restrict x, u8 *restrict out) {{
  for (int i = 0; i < {op.size}; i++) {{
    float v = dnnr_fdiv(x[i], {_f(op.scale)});
    v = v < -1.0e9f ? -1.0e9f : v > 1.0e9f ? 1.0e9f : v;
    i32 q = Q6_R_convert_sf2w_R(v) + {op.zero_point};
    out[i] = (u8)(q < 0 ? 0 : q > 255 ? 255 : q);
  }}
}}
"""
    return code, f"{prefix}((const float *){{x}}, {{y}});"


@dataclass(frozen=True, slots=True)
class FloatOp:
    """One ONNX operator computed in float on row-major tensors."""

    op: str
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]
    attrs: tuple[tuple[str, object], ...] = ()

    def attr(self, key: str, default: object = None) -> object:
        return dict(self.attrs).get(key, default)


def _f(value: float) -> str:
    return f"{float(np.float32(value)):.9e}f"


def float_op_c(op: FloatOp, prefix: str) -> tuple[str, str]:
    shapes, out_shape = op.input_shapes, op.output_shape or (1,)
    params = ", ".join(f"const float *restrict x{i}" for i in range(len(shapes)))
    names = _operand_names(len(shapes))
    generated = _generated(op.op, dict(op.attrs), names)
    if op.op == "Pow":
        exponent = op.attr("exponent")
        generated = _POW.get(exponent)  # type: ignore[arg-type]
        if generated is None:
            raise ModelError(f"hexagon backend: Pow with exponent {exponent} has no scalar fallback (2, 1, 0.5 only)")
    if generated is not None and len(shapes) == 1:
        body = f"  for (int i = 0; i < {int(np.prod(out_shape))}; i++) {{ float v = x0[i]; out[i] = {generated}; }}\n"
    elif generated is not None:
        reads = " ".join(f"float {n} = x{i}[{_broadcast_index(s or (1,), out_shape)}];"
                         for i, (n, s) in enumerate(zip(names, shapes, strict=True)))
        unused = " (void)b;" if len(shapes) == 2 else ""  # Pow's exponent b is a constant
        body = _nested(out_shape, f"{reads}{unused} out[{_broadcast_index(out_shape, out_shape)}] = {generated};")
    elif op.op in WHOLE_TENSOR_BODIES:
        body = WHOLE_TENSOR_BODIES[op.op](op, shapes, out_shape)
    else:
        raise ModelError(f"hexagon backend: {op.op} has neither an integer kernel nor a scalar float fallback")
    args = ", ".join(f"(const float *){{x{i}}}" for i in range(len(shapes)))
    code = f"""
static void __attribute__((noinline)) {prefix}({params}, float *restrict out) {{
{body}}}
"""
    return code, f"{prefix}({args}, (float *){{y}});"


def _matmul_body(op: FloatOp, shapes: tuple[tuple[int, ...], ...], out_shape: tuple[int, ...]) -> str:
    a_shape, b_shape = shapes[0], shapes[1]
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ModelError("hexagon backend: MatMul fallback needs operands of rank 2 or more")
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    batch = out_shape[:-2]
    ia = _broadcast_index(tuple(a_shape[:-2]) or (1,), batch or (1,))
    ib = _broadcast_index(tuple(b_shape[:-2]) or (1,), batch or (1,))
    io = _broadcast_index(batch or (1,), batch or (1,))
    inner = (f"const float *a = x0 + ({ia}) * {m * k}; const float *b = x1 + ({ib}) * {k * n};"
             f" float *o = out + ({io}) * {m * n};\n"
             f"    for (int i = 0; i < {m}; i++) for (int j = 0; j < {n}; j++) {{\n"
             f"      float s = 0.0f;\n"
             f"      for (int t = 0; t < {k}; t++) s += a[i * {k} + t] * b[t * {n} + j];\n"
             f"      o[i * {n} + j] = s;\n    }}")
    return _nested(batch or (1,), inner)


def _last_axis_body(op: FloatOp, shapes: tuple[tuple[int, ...], ...], out_shape: tuple[int, ...]) -> str:
    x_shape = shapes[0]
    rank = len(x_shape)
    axis = int(op.attr("axis", -1))  # type: ignore[arg-type]
    if op.op == "ReduceMean":
        axes = tuple(int(a) % rank for a in op.attr("axes", ()))  # type: ignore[union-attr]
        if axes != (rank - 1,):
            raise ModelError("hexagon backend: the ReduceMean fallback reduces the last axis only")
        length = x_shape[-1]
        return (f"  for (int r = 0; r < {int(np.prod(x_shape)) // length}; r++) {{\n"
                f"    float s = 0.0f;\n    for (int i = 0; i < {length}; i++) s += x0[r * {length} + i];\n"
                f"    out[r] = dnnr_fdiv(s, {length}.0f);\n  }}\n")
    first = axis % rank
    if op.op == "Softmax" and first != rank - 1:
        raise ModelError("hexagon backend: the Softmax fallback runs over the last axis only")
    length = int(np.prod(x_shape[first:]))
    rows = int(np.prod(x_shape)) // length
    if op.op == "Softmax":
        return (f"  for (int r = 0; r < {rows}; r++) {{\n    const float *x = x0 + r * {length}; float *y = out + r * {length};\n"
                f"    float mx = x[0];\n    for (int i = 1; i < {length}; i++) if (x[i] > mx) mx = x[i];\n"
                f"    float s = 0.0f;\n    for (int i = 0; i < {length}; i++) {{ y[i] = dnnr_fexp(x[i] - mx); s += y[i]; }}\n"
                f"    for (int i = 0; i < {length}; i++) y[i] = dnnr_fdiv(y[i], s);\n  }}\n")
    # LayerNormalization as onnxruntime's CPU kernel computes it (mean and mean of squares in one pass).
    if any(int(np.prod(s)) not in (1, length) for s in shapes[1:]):
        raise ModelError("hexagon backend: LayerNormalization scale/bias must cover the normalised axes")
    epsilon = _f(float(op.attr("epsilon", 1e-5)))  # type: ignore[arg-type]
    scale = "x1[i]" if int(np.prod(shapes[1])) == length else "x1[0]"
    bias = "" if len(shapes) < 3 else (" + x2[i]" if int(np.prod(shapes[2])) == length else " + x2[0]")
    return (f"  for (int r = 0; r < {rows}; r++) {{\n    const float *x = x0 + r * {length}; float *y = out + r * {length};\n"
            f"    float mean = 0.0f, square = 0.0f;\n"
            f"    for (int i = 0; i < {length}; i++) {{ mean += x[i]; float p = x[i] * x[i]; square += p; }}\n"
            f"    mean = dnnr_fdiv(mean, {length}.0f);\n"
            f"    float std = dnnr_fsqrt(dnnr_fdiv(square, {length}.0f) - mean * mean + {epsilon});\n"
            f"    for (int i = 0; i < {length}; i++) y[i] = dnnr_fdiv(x[i] - mean, std) * {scale}{bias};\n  }}\n")


# The operators whose fallback is a loop nest of its own (the per-operator C bodies above).
WHOLE_TENSOR_BODIES = {"MatMul": _matmul_body, "Softmax": _last_axis_body,
                       "LayerNormalization": _last_axis_body, "ReduceMean": _last_axis_body}
