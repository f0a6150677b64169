"""Non-GEMM integer operators: depthwise convolution, Add/Mul with requantisation,
Clip (Relu), max/average pooling and channel Concat — C code plus NumPy models.

Depthwise convolution has an HVX form (``vmpy``: per-lane ``vmpy(x.ub, w.b)`` over 128
channels, two taps widened into int32 by ``vadd``) and a scalar one; the others are
scalar C that clang may auto-vectorise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egraph_compiler.backends.hexagon.kernels import (
    ConvGeometry,
    _c_array,
    ceil_to,
    im2col,
    requant_c,
)
from egraph_compiler.backends.hexagon.quant import ELEMENTWISE_SHIFT, Requant, apply_requant

DEPTHWISE_FAMILIES = ("vmpy", "scalar")


@dataclass(frozen=True, slots=True)
class QDepthwise:
    geometry: ConvGeometry  # channels = groups = output channels
    weights: np.ndarray  # int8 [KH·KW, C]
    bias: np.ndarray  # int32 [C], already holding −zx·Σ w
    requant: Requant
    x_zero_point: int
    family: str = "vmpy"


def depthwise_reference(op: QDepthwise, x: np.ndarray) -> np.ndarray:
    g = op.geometry
    cols = im2col(x, g, op.x_zero_point).reshape(g.rows, g.kernel[0] * g.kernel[1], g.channels).astype(np.int64)
    acc = np.einsum("mtc,tc->mc", cols, op.weights.astype(np.int64)) + op.bias.astype(np.int64)
    return apply_requant(acc, op.requant)


def depthwise_c(op: QDepthwise, prefix: str) -> tuple[str, str]:
    g = op.geometry
    c = g.channels
    taps = g.kernel[0] * g.kernel[1]
    rq = op.requant
    ch = "c" if len(rq.multiplier) > 1 else "0"
    defs = [
        _c_array(f"{prefix}_bias", "i32", op.bias.astype(np.int64)),
        _c_array(f"{prefix}_mult", "i32", np.asarray(rq.multiplier, dtype=np.int64)),
        _c_array(f"{prefix}_shift", "i32", np.asarray(rq.shift, dtype=np.int64)),
    ]
    loops = f"""
  int pix = 0;
  for (int b = 0; b < {g.batch}; b++)
  for (int oy = 0; oy < {g.out_hw[0]}; oy++)
  for (int ox = 0; ox < {g.out_hw[1]}; ox++, pix++) {{"""
    tap = f"""
      int iy = oy * {g.strides[0]} - {g.pads[0]} + ky * {g.dilations[0]}, ix = ox * {g.strides[1]} - {g.pads[1]} + kx * {g.dilations[1]};
      int inside = iy >= 0 && iy < {g.height} && ix >= 0 && ix < {g.width};
      const u8 *src = x + ((b * {g.height} + iy) * {g.width} + ix) * {c};"""
    if op.family == "scalar":
        defs.append(_c_array(f"{prefix}_w", "i8", op.weights))
        defs.append(f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, u8 *restrict out) {{{loops}
    for (int c = 0; c < {c}; c++) {{
      i32 a = {prefix}_bias[c];
      for (int ky = 0, t = 0; ky < {g.kernel[0]}; ky++)
      for (int kx = 0; kx < {g.kernel[1]}; kx++, t++) {{{tap}
        a += (i32)(inside ? src[c] : {op.x_zero_point}) * {prefix}_w[t * {c} + c];
      }}
      u8 y; {requant_c(prefix + "_mult", prefix + "_shift", ch, rq, "a")}
      out[pix * {c} + c] = y;
    }}
  }}
}}
""")
        return "".join(defs), f"{prefix}({{x}}, {{y}});"
    # HVX: channels padded to blocks of 128 lanes, taps padded to an even count.
    c_pad = ceil_to(c, 128)
    t_pad = ceil_to(taps, 2)
    w = np.zeros((t_pad, c_pad), dtype=np.int8)
    w[:taps, :c] = op.weights
    defs.append(_c_array(f"{prefix}_w", "i8", w))
    blocks = c_pad // 128
    defs.append(f"""
static void __attribute__((noinline)) {prefix}_gather(const u8 *restrict x, u8 *restrict cols) {{{loops}
    for (int ky = 0, t = 0; ky < {g.kernel[0]}; ky++)
    for (int kx = 0; kx < {g.kernel[1]}; kx++, t++) {{{tap}
      u8 *dst = cols + (pix * {t_pad} + t) * {c_pad};
      for (int c = 0; c < {c}; c++) dst[c] = inside ? src[c] : {op.x_zero_point};
    }}
  }}
}}

void __attribute__((noinline)) {prefix}_mac(const u8 *restrict cols, const i8 *restrict w, i32 *restrict acc) {{
  for (int pix = 0; pix < {g.rows}; pix++)
    for (int blk = 0; blk < {blocks}; blk++) {{
      HVX_VectorPair e = Q6_W_vcombine_VV(Q6_V_vzero(), Q6_V_vzero()), o = e;
      const HVX_Vector *xv = (const HVX_Vector *)(cols + pix * {t_pad * c_pad}) + blk;
      const HVX_Vector *wv = (const HVX_Vector *)w + blk;
      for (int t = 0; t < {t_pad}; t += 2) {{
        HVX_VectorPair p = Q6_Wh_vmpy_VubVb(xv[t * {blocks}], wv[t * {blocks}]);
        HVX_VectorPair q = Q6_Wh_vmpy_VubVb(xv[(t + 1) * {blocks}], wv[(t + 1) * {blocks}]);
        e = Q6_Ww_vaddacc_WwVhVh(e, Q6_V_lo_W(p), Q6_V_lo_W(q));
        o = Q6_Ww_vaddacc_WwVhVh(o, Q6_V_hi_W(p), Q6_V_hi_W(q));
      }}
      HVX_VectorPair *dst = (HVX_VectorPair *)(acc + (pix * {blocks} + blk) * 128);
      dst[0] = e;
      dst[1] = o;
    }}
}}

static void __attribute__((noinline)) {prefix}_requant(const i32 *restrict acc, u8 *restrict out) {{
  for (int pix = 0; pix < {g.rows}; pix++)
    for (int c = 0; c < {c}; c++) {{
      int lane = c % 128;
      i32 a = acc[pix * {c_pad} + (c / 128) * 128 + (((lane % 4) >> 1) | ((lane % 2) << 1)) * 32 + lane / 4] + {prefix}_bias[c];
      u8 y; {requant_c(prefix + "_mult", prefix + "_shift", ch, rq, "a")}
      out[pix * {c} + c] = y;
    }}
}}
""")
    call = (f"{prefix}_gather({{x}}, dnnr_scratch_pack); {prefix}_mac(dnnr_scratch_pack, {prefix}_w, (i32 *)dnnr_scratch_acc); "
            f"{prefix}_requant((i32 *)dnnr_scratch_acc, {{y}});")
    return "".join(defs), call


def depthwise_scratch(op: QDepthwise) -> tuple[int, int]:
    g = op.geometry
    c_pad = ceil_to(g.channels, 128)
    t_pad = ceil_to(g.kernel[0] * g.kernel[1], 2)
    return g.rows * t_pad * c_pad, g.rows * c_pad * 4


@dataclass(frozen=True, slots=True)
class QBinary:
    """Add or Mul of two uint8 tensors (NumPy broadcasting) with requantisation.

    Add: ``acc = (a−za)·ma + (b−zb)·mb`` with ``ma, mb = round(s_a/s_y·2^S), round(s_b/s_y·2^S)``;
    Mul: ``acc = (a−za)·(b−zb)·m`` with ``m = round(s_a·s_b/s_y·2^S)``; then
    ``y = clamp(zy + ((acc + 2^(S−1)) >> S))``, S = ELEMENTWISE_SHIFT, in 64-bit.
    """

    kind: str  # "Add" | "Mul"
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    a_zero: int
    b_zero: int
    multipliers: tuple[int, ...]  # (ma, mb) for Add, (m,) for Mul
    y_zero: int
    lo: int = 0
    hi: int = 255


def binary_reference(op: QBinary, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64 = a.astype(np.int64) - op.a_zero
    b64 = b.astype(np.int64) - op.b_zero
    if op.kind == "Add":
        acc = a64 * op.multipliers[0] + b64 * op.multipliers[1]
    else:
        acc = a64 * b64 * op.multipliers[0]
    y = (acc + (1 << (ELEMENTWISE_SHIFT - 1))) >> ELEMENTWISE_SHIFT
    return np.clip(y + op.y_zero, op.lo, op.hi).astype(np.uint8).reshape(op.out_shape)


def _broadcast_index(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    """C expression of the flat index into ``shape`` for output indices i0..i{n-1}."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    terms, stride = [], 1
    for axis in reversed(range(len(out_shape))):
        if shape[axis] != 1:
            terms.append(f"i{axis} * {stride}")
        stride *= shape[axis]
    return " + ".join(terms) or "0"


def _nested(out_shape: tuple[int, ...], body: str) -> str:
    loops = "".join(f"  for (int i{a} = 0; i{a} < {n}; i{a}++)\n" for a, n in enumerate(out_shape))
    return loops + f"  {{ {body} }}\n"


def binary_c(op: QBinary, prefix: str) -> tuple[str, str]:
    shape = op.out_shape or (1,)
    ia, ib = _broadcast_index(op.a_shape or (1,), shape), _broadcast_index(op.b_shape or (1,), shape)
    io = _broadcast_index(shape, shape)
    if op.kind == "Add":
        acc = f"(i64)((i32)a[{ia}] - {op.a_zero}) * {op.multipliers[0]} + (i64)((i32)b[{ib}] - {op.b_zero}) * {op.multipliers[1]}"
    else:
        acc = f"(i64)(((i32)a[{ia}] - {op.a_zero}) * ((i32)b[{ib}] - {op.b_zero})) * {op.multipliers[0]}"
    body = (f"i64 t = ({acc} + ((i64)1 << {ELEMENTWISE_SHIFT - 1})) >> {ELEMENTWISE_SHIFT}; t += {op.y_zero};"
            f" out[{io}] = (u8)(t < {op.lo} ? {op.lo} : t > {op.hi} ? {op.hi} : t);")
    code = f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict a, const u8 *restrict b, u8 *restrict out) {{
{_nested(shape, body)}}}
"""
    return code, f"{prefix}({{a}}, {{b}}, {{y}});"


@dataclass(frozen=True, slots=True)
class QClip:
    """Clip/Relu on a uint8 tensor with unchanged scale: ``y = min(max(x, lo), hi)``."""

    size: int
    lo: int
    hi: int


def clip_reference(op: QClip, x: np.ndarray) -> np.ndarray:
    return np.clip(x, op.lo, op.hi).astype(np.uint8)


def clip_c(op: QClip, prefix: str) -> tuple[str, str]:
    vectors = op.size // 128
    code = f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, u8 *restrict out) {{
  HVX_Vector lo = Q6_Vb_vsplat_R({op.lo}), hi = Q6_Vb_vsplat_R({op.hi});
  const HVX_UVector *xv = (const HVX_UVector *)x;
  HVX_UVector *yv = (HVX_UVector *)out;
  for (int i = 0; i < {vectors}; i++) yv[i] = Q6_Vub_vmin_VubVub(Q6_Vub_vmax_VubVub(xv[i], lo), hi);
  for (int i = {vectors * 128}; i < {op.size}; i++) {{
    u8 v = x[i];
    out[i] = v < {op.lo} ? {op.lo} : v > {op.hi} ? {op.hi} : v;
  }}
}}
"""
    return code, f"{prefix}({{x}}, {{y}});"


@dataclass(frozen=True, slots=True)
class QPool:
    """Max or average pooling over NHWC uint8. Average pooling is lowered only without
    padding, so every window has the same count: ``y = rq(Σ x − taps·zx)``."""

    kind: str  # "MaxPool" | "AveragePool"
    geometry: ConvGeometry
    requant: Requant | None = None  # average: scale s_x/(s_y·window)
    x_zero: int = 0  # average: subtracted once per tap


def pool_reference(op: QPool, x: np.ndarray) -> np.ndarray:
    g = op.geometry
    taps = g.kernel[0] * g.kernel[1]
    if op.kind == "MaxPool":
        cols = im2col(x, g, 0).reshape(g.rows, taps, g.channels)
        return cols.max(axis=1).astype(np.uint8)
    assert op.requant is not None
    cols = im2col(x, g, 0).reshape(g.rows, taps, g.channels).astype(np.int64)
    return apply_requant(cols.sum(axis=1) - taps * op.x_zero, op.requant)


def pool_c(op: QPool, prefix: str) -> tuple[str, str]:
    g = op.geometry
    c = g.channels
    defs = ""
    if op.kind == "MaxPool":
        init, update, finish = "i32 a = 0;", "if (inside && src[c] > a) a = src[c];", f"out[pix * {c} + c] = (u8)a;"
    else:
        rq = op.requant
        assert rq is not None
        defs = (_c_array(f"{prefix}_mult", "i32", np.asarray(rq.multiplier, dtype=np.int64))
                + _c_array(f"{prefix}_shift", "i32", np.asarray(rq.shift, dtype=np.int64)))
        init, update = f"i32 a = {-g.kernel[0] * g.kernel[1] * op.x_zero};", "if (inside) a += src[c];"
        finish = f"u8 y; {requant_c(prefix + '_mult', prefix + '_shift', '0', rq, 'a')} out[pix * {c} + c] = y;"
    code = defs + f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, u8 *restrict out) {{
  int pix = 0;
  for (int b = 0; b < {g.batch}; b++)
  for (int oy = 0; oy < {g.out_hw[0]}; oy++)
  for (int ox = 0; ox < {g.out_hw[1]}; ox++, pix++)
    for (int c = 0; c < {c}; c++) {{
      {init}
      for (int ky = 0; ky < {g.kernel[0]}; ky++)
      for (int kx = 0; kx < {g.kernel[1]}; kx++) {{
        int iy = oy * {g.strides[0]} - {g.pads[0]} + ky, ix = ox * {g.strides[1]} - {g.pads[1]} + kx;
        int inside = iy >= 0 && iy < {g.height} && ix >= 0 && ix < {g.width};
        const u8 *src = x + ((b * {g.height} + iy) * {g.width} + ix) * {c};
        {update}
      }}
      {finish}
    }}
}}
"""
    return code, f"{prefix}({{x}}, {{y}});"


@dataclass(frozen=True, slots=True)
class QConcat:
    """Concatenate NHWC uint8 tensors of equal scale along channels (rows = B·H·W)."""

    rows: int
    channels: tuple[int, ...]


def _channel_concat_c(rows: int, channels: tuple[int, ...], prefix: str, element) -> tuple[str, str]:  # noqa: ANN001
    """Channel concat of row-major [rows, ch_i] inputs; ``element(i, ch)`` is the C
    statement storing input ``i``'s element ``c`` of row ``r`` into ``out``."""
    total = sum(channels)
    args = ", ".join(f"const u8 *restrict x{i}" for i in range(len(channels)))
    body, offset = "", 0
    for i, ch in enumerate(channels):
        body += f"    for (int c = 0; c < {ch}; c++) {element(i, ch, f'out[r * {total} + {offset} + c]')}\n"
        offset += ch
    code = f"""
static void __attribute__((noinline)) {prefix}({args}, u8 *restrict out) {{
  for (int r = 0; r < {rows}; r++) {{
{body}  }}
}}
"""
    call_args = ", ".join(f"{{x{i}}}" for i in range(len(channels)))
    return code, f"{prefix}({call_args}, {{y}});"


def concat_c(op: QConcat, prefix: str) -> tuple[str, str]:
    return _channel_concat_c(op.rows, op.channels, prefix,
                             lambda i, ch, dst: f"{dst} = x{i}[r * {ch} + c];")


def concat_rq_c(op, prefix: str) -> tuple[str, str]:
    """Channel concat; inputs whose scale differs from the output's are requantised."""
    def element(i: int, ch: int, dst: str) -> str:
        value = f"(i64)((i32)x{i}[r * {ch} + c] - {op.zero_points[i]}) * {op.multipliers[i]}"
        return (f"{{ i64 t = (({value}) + ((i64)1 << {ELEMENTWISE_SHIFT - 1})) >> {ELEMENTWISE_SHIFT};"
                f" t += {op.y_zero}; {dst} = (u8)(t < 0 ? 0 : t > 255 ? 255 : t); }}")

    return _channel_concat_c(op.rows, op.channels, prefix, element)


def concat_rq_reference(op, xs: list[np.ndarray]) -> np.ndarray:
    parts = []
    for x, zp, m in zip(xs, op.zero_points, op.multipliers, strict=True):
        t = ((x.astype(np.int64).reshape(op.rows, -1) - zp) * m + (1 << (ELEMENTWISE_SHIFT - 1))) >> ELEMENTWISE_SHIFT
        parts.append(np.clip(t + op.y_zero, 0, 255))
    return np.concatenate(parts, axis=1).astype(np.uint8)


def softmax_c(op, prefix: str) -> tuple[str, str]:
    """exp through a 256-entry table of exp(−d·s_x); 1/sum by Newton steps (no division)."""
    table = ",".join(f"{v:.9e}f" for v in op.table)
    code = f"""
static const float {prefix}_exp[256] = {{{table}}};
static float {prefix}_recip(float s) {{
  union {{ float f; u32 u; }} v = {{ s }};
  v.u = 0x7EF311C7u - v.u;
  float r = v.f;
  for (int i = 0; i < 4; i++) r = r * (2.0f - s * r);
  return r;
}}
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, u8 *restrict out) {{
  for (int row = 0; row < {op.rows}; row++) {{
    const u8 *xr = x + row * {op.length};
    int mx = 0;
    for (int i = 0; i < {op.length}; i++) if (xr[i] > mx) mx = xr[i];
    float sum = 0.0f;
    for (int i = 0; i < {op.length}; i++) sum += {prefix}_exp[mx - xr[i]];
    float k = {prefix}_recip(sum) * {op.inv_y_scale:.9e}f;
    for (int i = 0; i < {op.length}; i++) {{
      float v = {prefix}_exp[mx - xr[i]] * k + 0.5f;
      i32 q = (i32)v + {op.y_zero};
      out[row * {op.length} + i] = (u8)(q > 255 ? 255 : q);
    }}
  }}
}}
"""
    return code, f"{prefix}({{x}}, {{y}});"
