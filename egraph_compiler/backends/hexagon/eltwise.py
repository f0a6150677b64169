"""Non-GEMM integer operators: depthwise convolution, Add/Mul with requantisation,
Clip (Relu), max/average pooling and channel Concat — C code plus NumPy models.

Every operator has an HVX form (128-byte vectors, integer only) and a scalar C form
(``family="scalar"``, also the fallback where the HVX form does not apply):
- depthwise convolution: per-lane ``vmpy(x.ub, w.b)`` over 128 channels, two taps
  widened into int32 by ``vadd``;
- Add/Mul/requantising Concat: the 64-bit requantisation ``(acc·m + 2^23) >> 24`` done
  exactly in 32-bit lanes by splitting ``m = mh·2^15 + ml`` (see `_split_multiplier`);
- Clip: ``vmax``/``vmin``; max pooling: ``vmax`` over taps; average pooling: taps
  summed in 16-bit lanes, widened to 32 bits, requantised per channel in scalar C.
Ragged sizes: the HVX forms run whole vectors and rely on every buffer having at least
127 bytes of slack past its end (`program.Program` allocates 256); a partial vector's
extra lanes are written into the slack or into bytes a later store overwrites.
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
    family: str = "hvx"  # "hvx" where `binary_hvx_applies`, else (or "scalar") scalar C


def binary_reference(op: QBinary, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64 = a.astype(np.int64) - op.a_zero
    b64 = b.astype(np.int64) - op.b_zero
    if op.kind == "Add":
        acc = a64 * op.multipliers[0] + b64 * op.multipliers[1]
    else:
        acc = a64 * b64 * op.multipliers[0]
    y = (acc + (1 << (ELEMENTWISE_SHIFT - 1))) >> ELEMENTWISE_SHIFT
    return np.clip(y + op.y_zero, op.lo, op.hi).astype(np.uint8).reshape(op.out_shape)


# ---- exact requantisation in 32-bit HVX lanes ----------------------------------------
#
# acc = Σ A_i·m_i with |A_i| ≤ 255 (or A = a·b for Mul, |A| ≤ 65025), m_i < 2^30.
# With m = mh·2^15 + ml (0 ≤ ml < 2^15): acc + 2^23 = H·2^15 + L for H = Σ A·mh and
# L = Σ A·ml + 2^23, and floor((H·2^15 + L) / 2^24) = (H + (L >> 15)) >> 9 exactly
# (write L = q·2^15 + r, 0 ≤ r < 2^15). Every term fits int32 for the bounds above.
SPLIT_BITS = 15


def _split_multiplier(m: int) -> tuple[int, int]:
    return m >> SPLIT_BITS, m & ((1 << SPLIT_BITS) - 1)


def multiplier_fits(m: int) -> bool:
    return 0 <= m < 1 << (2 * SPLIT_BITS)


def _halfword_pair(value: int) -> str:
    """A scalar register holding ``value`` in both halfwords (operand of ``vmpy(V.h, R.h)``)."""
    return f"0x{(value & 0xFFFF) * 0x10001:08x}"


def _vector_requant_c(name: str, zero_points: tuple[int, ...], multipliers: tuple[int, ...], product: bool,
                      y_zero: int, lo: int, hi: int) -> str:
    """``static inline HVX_Vector name(HVX_Vector x0, …)``: 128 uint8 lanes in, 128 out.

    Sum (or, with ``product``, the product of two inputs) of (x_i − z_i)·m_i,
    requantised with shift 24 and clamped to [lo, hi]. Byte lanes are widened to
    halfwords (even/odd lanes apart), halfwords to words (even/odd halfwords apart) and
    narrowed back with ``vsat`` in the opposite order, which restores the lane order."""
    inputs = range(len(zero_points))
    args = ", ".join(f"HVX_Vector x{i}" for i in inputs)
    body = [f"static inline HVX_Vector {name}({args}) {{"]
    for i in inputs:
        body.append(f"  HVX_VectorPair w{i} = Q6_Wuh_vzxt_Vub(x{i}); HVX_Vector z{i} = Q6_Vh_vsplat_R({zero_points[i]});")
        body.append(f"  HVX_Vector e{i} = Q6_Vh_vsub_VhVh(Q6_V_lo_W(w{i}), z{i}), o{i} = Q6_Vh_vsub_VhVh(Q6_V_hi_W(w{i}), z{i});")
    body.append(f"  HVX_Vector round = Q6_V_vsplat_R({1 << (ELEMENTWISE_SHIFT - 1)}), yz = Q6_V_vsplat_R({y_zero});")
    words = []
    for half in ("e", "o"):
        if product:
            mh, ml = _split_multiplier(multipliers[0])
            body.append(f"  HVX_VectorPair p{half} = Q6_Ww_vmpy_VhVh({half}0, {half}1);")
            for part in ("lo", "hi"):
                v = f"Q6_V_{part}_W(p{half})"
                body.append(f"  HVX_Vector h{half}{part} = Q6_Vw_vmpyi_VwRh({v}, {_halfword_pair(mh)});")
                body.append(f"  HVX_Vector l{half}{part} = Q6_Vw_vmpyi_VwRh({v}, {_halfword_pair(ml)});")
                words.append(f"{half}{part}")
        else:
            for kind, pick in (("h", 0), ("l", 1)):
                acc = f"{kind}{half}"
                for i in inputs:
                    factor = _halfword_pair(_split_multiplier(multipliers[i])[pick])
                    if i == 0:
                        body.append(f"  HVX_VectorPair {acc} = Q6_Ww_vmpy_VhRh({half}{i}, {factor});")
                    else:
                        body.append(f"  {acc} = Q6_Ww_vmpyacc_WwVhRh({acc}, {half}{i}, {factor});")
                for part in ("lo", "hi"):
                    body.append(f"  HVX_Vector {kind}{half}{part} = Q6_V_{part}_W({acc});")
            words += [f"{half}lo", f"{half}hi"]
    for w in words:
        body.append(f"  HVX_Vector t{w} = Q6_Vw_vasr_VwR(Q6_Vw_vadd_VwVw(l{w}, round), {SPLIT_BITS});")
        body.append(f"  t{w} = Q6_Vw_vadd_VwVw(Q6_Vw_vasr_VwR(Q6_Vw_vadd_VwVw(h{w}, t{w}), "
                    f"{ELEMENTWISE_SHIFT - SPLIT_BITS}), yz);")
    body.append("  HVX_Vector even = Q6_Vh_vsat_VwVw(tehi, telo), odd = Q6_Vh_vsat_VwVw(tohi, tolo);")
    body.append("  HVX_Vector y = Q6_Vub_vsat_VhVh(odd, even);")
    if lo > 0:
        body.append(f"  y = Q6_Vub_vmax_VubVub(y, Q6_Vb_vsplat_R({lo}));")
    if hi < 255:
        body.append(f"  y = Q6_Vub_vmin_VubVub(y, Q6_Vb_vsplat_R({hi}));")
    body.append("  return y;\n}\n")
    return "\n".join(body)


def binary_hvx_applies(op: QBinary) -> bool:
    """Same-shape operands (or one a single element) and multipliers below 2^30."""
    size = int(np.prod(op.out_shape or (1,)))
    shapes_ok = all(int(np.prod(s or (1,))) in (1, size) for s in (op.a_shape, op.b_shape))
    if op.kind == "Mul":
        return shapes_ok and multiplier_fits(op.multipliers[0])
    return shapes_ok and all(multiplier_fits(m) for m in op.multipliers)


def _binary_hvx_c(op: QBinary, prefix: str) -> str:
    size = int(np.prod(op.out_shape or (1,)))
    vectors = -(-size // 128)

    def operand(name: str, shape: tuple[int, ...]) -> str:
        if int(np.prod(shape or (1,))) == 1 and size != 1:
            return f"Q6_Vb_vsplat_R({name}[0])"
        return f"((const HVX_Vector *){name})[i]"  # whole buffers: 256-byte aligned (`program`)

    vec = _vector_requant_c(f"{prefix}_vec", (op.a_zero, op.b_zero), op.multipliers, op.kind == "Mul",
                            op.y_zero, op.lo, op.hi)
    code = vec + f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict a, const u8 *restrict b, u8 *restrict out) {{
  for (int i = 0; i < {vectors}; i++)
    ((HVX_Vector *)out)[i] = {prefix}_vec({operand("a", op.a_shape)}, {operand("b", op.b_shape)});
}}
"""
    return code, f"{prefix}({{a}}, {{b}}, {{y}});"


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
    if op.family == "hvx" and binary_hvx_applies(op):
        return _binary_hvx_c(op, prefix)
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
    family: str = "hvx"  # or "scalar"


def pool_reference(op: QPool, x: np.ndarray) -> np.ndarray:
    g = op.geometry
    taps = g.kernel[0] * g.kernel[1]
    if op.kind == "MaxPool":
        cols = im2col(x, g, 0).reshape(g.rows, taps, g.channels)
        return cols.max(axis=1).astype(np.uint8)
    assert op.requant is not None
    cols = im2col(x, g, 0).reshape(g.rows, taps, g.channels).astype(np.int64)
    return apply_requant(cols.sum(axis=1) - taps * op.x_zero, op.requant)


def _pool_loops(g: ConvGeometry, per_pixel: str) -> str:
    """Loops over output pixels, ``pix`` counting them, around ``per_pixel``; the tap
    loop inside it is written as ``TAPS { … }`` and sees ``inside`` and ``src``."""
    taps = f"""for (int ky = 0, t = 0; ky < {g.kernel[0]}; ky++)
      for (int kx = 0; kx < {g.kernel[1]}; kx++, t++) {{
        int iy = oy * {g.strides[0]} - {g.pads[0]} + ky, ix = ox * {g.strides[1]} - {g.pads[1]} + kx;
        int inside = iy >= 0 && iy < {g.height} && ix >= 0 && ix < {g.width};
        const u8 *src = x + ((b * {g.height} + iy) * {g.width} + ix) * {g.channels};
        (void)t;"""
    return f"""  int pix = 0;
  for (int b = 0; b < {g.batch}; b++)
  for (int oy = 0; oy < {g.out_hw[0]}; oy++)
  for (int ox = 0; ox < {g.out_hw[1]}; ox++, pix++) {{
{per_pixel.replace("TAPS {", taps)}
  }}
"""


# Taps summed in 16-bit lanes before widening: 128 · 255 < 2^15.
POOL_CHUNK_TAPS = 128


def _pool_hvx_c(op: QPool, prefix: str) -> tuple[str, str]:
    g = op.geometry
    c = g.channels
    blocks = -(-c // 128)
    if op.kind == "MaxPool":
        per_pixel = f"""    for (int blk = 0; blk < {blocks}; blk++) {{
      HVX_Vector m = Q6_V_vzero();
      TAPS {{
        if (inside) m = Q6_Vub_vmax_VubVub(m, ((const HVX_UVector *)src)[blk]);
      }}
      ((HVX_UVector *)(out + pix * {c}))[blk] = m;
    }}"""
        code = f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, u8 *restrict out) {{
{_pool_loops(g, per_pixel)}}}
"""
        return code, f"{prefix}({{x}}, {{y}});"
    rq = op.requant
    assert rq is not None
    taps = g.kernel[0] * g.kernel[1]
    # Word j of a block's sums: lane (j % 4)·32 + j / 4 (even/odd bytes, then halfwords).
    per_pixel = f"""    for (int blk = 0; blk < {blocks}; blk++) {{
      HVX_Vector zero = Q6_V_vzero();
      HVX_VectorPair part = Q6_W_vcombine_VV(zero, zero), even = part, odd = part;
      TAPS {{
        if (inside) part = Q6_Wh_vadd_WhWh(part, Q6_Wuh_vzxt_Vub(((const HVX_UVector *)src)[blk]));
        if (t % {POOL_CHUNK_TAPS} == {POOL_CHUNK_TAPS - 1} || t == {taps - 1}) {{
          even = Q6_Ww_vaddacc_WwVhVh(even, Q6_V_lo_W(part), zero);
          odd = Q6_Ww_vaddacc_WwVhVh(odd, Q6_V_hi_W(part), zero);
          part = Q6_W_vcombine_VV(zero, zero);
        }}
      }}
      HVX_Vector *sums = (HVX_Vector *){prefix}_sums + 4 * blk;
      sums[0] = Q6_V_lo_W(even);
      sums[1] = Q6_V_lo_W(odd);
      sums[2] = Q6_V_hi_W(even);
      sums[3] = Q6_V_hi_W(odd);
    }}
    for (int c = 0; c < {c}; c++) {{
      i32 a = {prefix}_sums[(c / 128) * 128 + (c % 4) * 32 + (c % 128) / 4] - {taps * op.x_zero};
      u8 y; {requant_c(prefix + "_mult", prefix + "_shift", "0", rq, "a")}
      out[pix * {c} + c] = y;
    }}"""
    code = (_c_array(f"{prefix}_mult", "i32", np.asarray(rq.multiplier, dtype=np.int64))
            + _c_array(f"{prefix}_shift", "i32", np.asarray(rq.shift, dtype=np.int64))
            + f"static i32 {prefix}_sums[{blocks * 128}] __attribute__((aligned(128)));\n"
            + f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, u8 *restrict out) {{
{_pool_loops(g, per_pixel)}}}
""")
    return code, f"{prefix}({{x}}, {{y}});"


def pool_c(op: QPool, prefix: str) -> tuple[str, str]:
    if op.family == "hvx":
        return _pool_hvx_c(op, prefix)
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


def _per_row_function(rows: int, inputs: int, prefix: str, body: str) -> tuple[str, str]:
    """A C function over ``rows`` rows of inputs ``x0..`` and ``out`` (``body`` is the loop
    body for row ``r``), and its call with ``{x0}``…/``{y}`` buffer placeholders."""
    args = ", ".join(f"const u8 *restrict x{i}" for i in range(inputs))
    code = f"""
static void __attribute__((noinline)) {prefix}({args}, u8 *restrict out) {{
  for (int r = 0; r < {rows}; r++) {{
{body}  }}
}}
"""
    call_args = ", ".join(f"{{x{i}}}" for i in range(inputs))
    return code, f"{prefix}({call_args}, {{y}});"


def _channel_concat_c(rows: int, channels: tuple[int, ...], prefix: str, element) -> tuple[str, str]:  # noqa: ANN001
    """Channel concat of row-major [rows, ch_i] inputs; ``element(i, ch)`` is the C
    statement storing input ``i``'s element ``c`` of row ``r`` into ``out``."""
    total = sum(channels)
    body, offset = "", 0
    for i, ch in enumerate(channels):
        body += f"    for (int c = 0; c < {ch}; c++) {element(i, ch, f'out[r * {total} + {offset} + c]')}\n"
        offset += ch
    return _per_row_function(rows, len(channels), prefix, body)


def _channel_concat_hvx_c(rows: int, channels: tuple[int, ...], prefix: str,
                          converters: list[str | None]) -> tuple[str, str]:
    """Channel concat by whole unaligned vectors per (row, input), in increasing output
    address order, so a partial vector's extra lanes are overwritten by the next store
    (or land in the buffer's slack); ``converters[i]`` names a lane-wise C function
    applied to input ``i`` (None: copy)."""
    total = sum(channels)
    body, offset = "", 0
    for i, (ch, convert) in enumerate(zip(channels, converters, strict=True)):
        load = f"((const HVX_UVector *)(x{i} + r * {ch}))[v]"
        value = f"{convert}({load})" if convert else load
        body += (f"    for (int v = 0; v < {-(-ch // 128)}; v++) "
                 f"((HVX_UVector *)(out + r * {total} + {offset}))[v] = {value};\n")
        offset += ch
    return _per_row_function(rows, len(channels), prefix, body)


def concat_rq_c(op, prefix: str, family: str = "hvx") -> tuple[str, str]:  # noqa: ANN001
    """Channel concat; inputs whose scale differs from the output's are requantised
    (HVX unless a multiplier is 2^30 or more, or ``family`` is "scalar")."""
    if family == "hvx" and all(multiplier_fits(m) for m in op.multipliers):
        identity = 1 << ELEMENTWISE_SHIFT
        defs, converters = "", []
        for i, (zp, m) in enumerate(zip(op.zero_points, op.multipliers, strict=True)):
            if m == identity and zp == op.y_zero:
                converters.append(None)
                continue
            converters.append(f"{prefix}_rq{i}")
            defs += _vector_requant_c(f"{prefix}_rq{i}", (zp,), (m,), False, op.y_zero, 0, 255)
        code, call = _channel_concat_hvx_c(op.rows, op.channels, prefix, converters)
        return defs + code, call

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
