"""Integer kernels: their specification, their HVX C code and a NumPy model of each.

Activations are uint8 (int8 tensors are shifted by 128 at the graph boundary), weights
int8, accumulation int32, requantisation as in `quant`. Tensors are NHWC, rows of a
GEMM are output pixels (or matrix rows), columns are output channels.

GEMM instruction families and their input layouts (GCD² §4.3, Fig. 4.2):
- ``vrmpy`` 4-column: panels of 32 rows, 4 consecutive K values of a row in one word;
  ``acc.w += vrmpy(x.ub, w.b)`` with the 4 weights of a column in a scalar.
- ``vmpa``  2-column: panels of 64 rows, two K columns side by side as int16;
  ``acc.w += vmpa(x.h, w.b)`` (the byte form would overflow its 16-bit sums).
- ``vmpy``  1-column: panels of 128 rows, one K column per vector;
  ``p.h = vmpy(x.ub, w.b)`` then ``acc.w += vadd(p0.h, p1.h)`` widening two columns.
- ``scalar``: plain C loops (the fallback for any shape).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egraph_compiler.backends.hexagon.quant import Requant, apply_requant

FAMILIES = ("vrmpy", "vmpa", "vmpy", "scalar")
# Rows per panel and K granularity of each family's layout.
PANEL_ROWS = {"vrmpy": 32, "vmpa": 64, "vmpy": 128, "scalar": 1}
K_STEP = {"vrmpy": 4, "vmpa": 2, "vmpy": 2, "scalar": 1}
# Bytes per packed element: the 2-column layout widens to int16.
PACK_BYTES = {"vrmpy": 1, "vmpa": 2, "vmpy": 1, "scalar": 1}


def ceil_to(value: int, step: int) -> int:
    return -(-value // step) * step


@dataclass(frozen=True, slots=True)
class ConvGeometry:
    """im2col view of an NHWC input: GEMM row = (b, oy, ox), column k = (ky, kx, c)."""

    batch: int
    height: int
    width: int
    channels: int
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int] = (0, 0)  # top, left (bottom/right follow from the output size)
    dilations: tuple[int, int] = (1, 1)
    out_hw: tuple[int, int] = (0, 0)

    @property
    def rows(self) -> int:
        return self.batch * self.out_hw[0] * self.out_hw[1]

    @property
    def depth(self) -> int:
        return self.kernel[0] * self.kernel[1] * self.channels


@dataclass(frozen=True, slots=True)
class QGemm:
    """``y[m, n] = rq(Σ_k x[m, k] · w[k, n] + bias[n])`` with ``x`` uint8 from ``geometry``."""

    geometry: ConvGeometry
    weights: np.ndarray  # int8 [K, N]
    bias: np.ndarray  # int32 [N], already holding −zx·Σ_k w[k, n]
    requant: Requant
    x_zero_point: int  # value of padding pixels
    family: str = "vrmpy"
    # Layout agreement with the next operator (see `writes_packed_input_of`): write the
    # output in ``into``'s packed input layout; read the input already packed.
    into: QGemm | None = None
    packed_input: bool = False

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.geometry.rows, self.geometry.depth, int(self.weights.shape[1])


def im2col(x: np.ndarray, g: ConvGeometry, pad_value: int) -> np.ndarray:
    """[B, H, W, C] uint8 → [B·OH·OW, KH·KW·C] uint8 (the NumPy model of the packers)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), (oh, ow) = g.kernel, g.strides, g.pads, g.dilations, g.out_hw
    padded = np.full((g.batch, g.height + 2 * ph + kh * dh, g.width + 2 * pw + kw * dw, g.channels),
                     pad_value, dtype=np.uint8)
    padded[:, ph:ph + g.height, pw:pw + g.width] = x
    cols = np.empty((g.batch, oh, ow, kh, kw, g.channels), dtype=np.uint8)
    for ky in range(kh):
        for kx in range(kw):
            cols[:, :, :, ky, kx] = padded[:, ky * dh: ky * dh + oh * sh: sh, kx * dw: kx * dw + ow * sw: sw][:, :oh, :ow]
    return cols.reshape(g.rows, g.depth)


def gemm_reference(op: QGemm, x: np.ndarray) -> np.ndarray:
    cols = im2col(x, op.geometry, op.x_zero_point).astype(np.int64)
    acc = cols @ op.weights.astype(np.int64) + op.bias.astype(np.int64)
    return apply_requant(acc, op.requant)


# ---- C generation --------------------------------------------------------------------


def _c_array(name: str, ctype: str, values: np.ndarray, align: int = 128) -> str:
    flat = np.asarray(values).reshape(-1)
    body = ",".join(str(int(v)) for v in flat) or "0"
    return f"static const {ctype} {name}[{max(1, flat.size)}] __attribute__((aligned({align}))) = {{{body}}};\n"


def packed_weights(op: QGemm) -> tuple[str, np.ndarray, int]:
    """Weights as the inner loop reads them: one scalar register per (column, K step)."""
    m, k, n = op.shape
    family = op.family
    if family == "scalar":
        return "i8", op.weights.astype(np.int8), n
    nu = unroll_for(op)
    n_pad = ceil_to(n, nu)
    k_pad = ceil_to(k, K_STEP[family])
    w = np.zeros((k_pad, n_pad), dtype=np.int64)
    w[:k, :n] = op.weights
    w &= 0xFF
    if family == "vrmpy":
        groups = w.reshape(k_pad // 4, 4, n_pad)
        words = groups[:, 0] | groups[:, 1] << 8 | groups[:, 2] << 16 | groups[:, 3] << 24
    elif family == "vmpa":
        pairs = w.reshape(k_pad // 2, 2, n_pad)
        words = pairs[:, 0] | pairs[:, 1] << 8 | pairs[:, 0] << 16 | pairs[:, 1] << 24
    else:  # vmpy: the byte replicated, one word per K column
        words = w | w << 8 | w << 16 | w << 24
    words = words.T.astype(np.uint32).view(np.int32)  # [n_pad, K steps]
    return "i32", words, n_pad


def unroll_for(op: QGemm) -> int:
    """Adaptive unrolling over output columns (GCD² §4.4.3): more for wide outputs."""
    _, _, n = op.shape
    limit = {"vrmpy": 4, "vmpa": 2, "vmpy": 2, "scalar": 1}[op.family]
    return max(1, min(limit, n))


def scratch_sizes(op: QGemm) -> tuple[int, int]:
    """Bytes of the packed input and of the int32 accumulators."""
    m, k, n = op.shape
    rows = ceil_to(m, PANEL_ROWS[op.family])
    k_pad = ceil_to(k, K_STEP[op.family])
    n_pad = ceil_to(n, unroll_for(op))
    if op.family == "scalar":
        return 0, 0
    return rows * k_pad * PACK_BYTES[op.family], rows * n_pad * 4


def packed_offset(op: QGemm) -> str:
    """C expression: where input element (row ``mm``, column ``kk``) of ``op`` lies in
    its family's packed layout (elements of type `packed_type`)."""
    fam = op.family
    k_pad = ceil_to(op.shape[1], K_STEP[fam])
    if fam == "vrmpy":
        return f"(mm / 32) * {k_pad * 32} + (kk / 4) * 128 + (mm % 32) * 4 + (kk % 4)"
    if fam == "vmpa":
        return f"(mm / 64) * {k_pad * 64} + (kk / 2) * 128 + (kk % 2) * 64 + (mm % 64)"
    return f"(mm / 128) * {k_pad * 128} + kk * 128 + (mm % 128)"


def packed_type(family: str) -> str:
    return "i16" if family == "vmpa" else "u8"


def writes_packed_input_of(producer: QGemm, consumer: QGemm) -> bool:
    """Whether ``producer``'s requantisation can store straight into ``consumer``'s packed
    input layout: the consumer is a 1×1, stride-1, unpadded convolution or a MatMul over
    the producer's output (its packing is then a pure relayout, no im2col), and both are
    HVX kernels. Padding rows/columns need no fill: padded K columns meet zero weights
    and padded rows are never requantised."""
    g = consumer.geometry
    return (producer.family != "scalar" and consumer.family != "scalar"
            and g.kernel == (1, 1) and g.strides == (1, 1) and g.pads == (0, 0) and g.dilations == (1, 1)
            and g.rows == producer.shape[0] and g.channels == producer.shape[2])


def _pack_c(op: QGemm, name: str) -> str:
    """Scalar C that writes the family layout straight from the NHWC input (im2col fused)."""
    g = op.geometry
    fam = op.family
    m, k, _ = op.shape
    k_pad = ceil_to(k, K_STEP[fam])
    etype = packed_type(fam)
    offset = packed_offset(op)
    kh, kw = g.kernel
    sh, sw = g.strides
    ph, pw = g.pads
    dh, dw = g.dilations
    oh, ow = g.out_hw
    return f"""
static void __attribute__((noinline)) {name}(const u8 *restrict x, {etype} *restrict packed) {{
  int mm = 0;
  for (int b = 0; b < {g.batch}; b++)
  for (int oy = 0; oy < {oh}; oy++)
  for (int ox = 0; ox < {ow}; ox++, mm++) {{
    int kk = 0;
    for (int ky = 0; ky < {kh}; ky++)
    for (int kx = 0; kx < {kw}; kx++) {{
      int iy = oy * {sh} - {ph} + ky * {dh}, ix = ox * {sw} - {pw} + kx * {dw};
      int inside = iy >= 0 && iy < {g.height} && ix >= 0 && ix < {g.width};
      const u8 *src = x + ((b * {g.height} + iy) * {g.width} + ix) * {g.channels};
      for (int c = 0; c < {g.channels}; c++, kk++)
        packed[{offset}] = inside ? src[c] : {op.x_zero_point};
    }}
    for (; kk < {k_pad}; kk++) packed[{offset}] = 0;
  }}
  (void)mm;
}}
"""


def _gemm_c(op: QGemm, name: str, n_pad: int) -> str:
    m, k, _ = op.shape
    fam = op.family
    nu = unroll_for(op)
    rows = ceil_to(m, PANEL_ROWS[fam])
    panels = rows // PANEL_ROWS[fam]
    k_steps = ceil_to(k, K_STEP[fam]) // K_STEP[fam]
    cols = range(nu)
    if fam in ("vrmpy", "vmpa"):  # one accumulator (pair) per column, one multiply-accumulate per step
        vec, zero, mac = ("HVX_Vector", "Q6_V_vzero()", "Q6_Vw_vrmpyacc_VwVubRb") if fam == "vrmpy" else \
            ("HVX_VectorPair", "Q6_W_vcombine_VV(Q6_V_vzero(), Q6_V_vzero())", "Q6_Ww_vmpaacc_WwWhRb")
        init = "".join(f"    {vec} a{j} = {zero};\n" for j in cols)
        body = f"      {vec} xv = xp[s];\n" + "".join(f"      a{j} = {mac}(a{j}, xv, w{j}[s]);\n" for j in cols)
        store = "".join(f"    (({vec} *)(acc + (n + {j}) * {rows}))[p] = a{j};\n" for j in cols)
        xdecl = f"const {vec} *xp = (const {vec} *)(packed + p * {k_steps * 128});"
    else:
        init = "".join(
            f"    HVX_VectorPair e{j} = Q6_W_vcombine_VV(Q6_V_vzero(), Q6_V_vzero()), o{j} = e{j};\n" for j in cols)
        body = "      HVX_Vector x0 = xp[2 * s], x1 = xp[2 * s + 1];\n" + "".join(
            f"      HVX_VectorPair p{j} = Q6_Wh_vmpy_VubRb(x0, w{j}[2 * s]), q{j} = Q6_Wh_vmpy_VubRb(x1, w{j}[2 * s + 1]);\n"
            f"      e{j} = Q6_Ww_vaddacc_WwVhVh(e{j}, Q6_V_lo_W(p{j}), Q6_V_lo_W(q{j}));\n"
            f"      o{j} = Q6_Ww_vaddacc_WwVhVh(o{j}, Q6_V_hi_W(p{j}), Q6_V_hi_W(q{j}));\n" for j in cols)
        store = "".join(
            f"    ((HVX_VectorPair *)(acc + (n + {j}) * {rows}))[2 * p] = e{j};\n"
            f"    ((HVX_VectorPair *)(acc + (n + {j}) * {rows}))[2 * p + 1] = o{j};\n" for j in cols)
        xdecl = f"const HVX_Vector *xp = (const HVX_Vector *)(packed + p * {k_steps * 2 * 128});"
    etype = "i16" if fam == "vmpa" else "u8"
    wdecl = "".join(f"    const i32 *w{j} = wp + (n + {j}) * {k_steps * (2 if fam == 'vmpy' else 1)};\n" for j in cols)
    return f"""
void __attribute__((noinline)) {name}(const {etype} *restrict packed, const i32 *restrict wp, i32 *restrict acc) {{
  for (int p = 0; p < {panels}; p++) {{
    {xdecl}
    for (int n = 0; n < {n_pad}; n += {nu}) {{
{wdecl}{init}      for (int s = 0; s < {k_steps}; s++) {{
{body}      }}
{store}    }}
  }}
}}
"""


def _acc_index(op: QGemm) -> str:
    """Where row ``m`` of column ``n`` lands in the accumulator buffer of each family."""
    rows = ceil_to(op.shape[0], PANEL_ROWS[op.family])
    if op.family == "vrmpy":
        return f"n * {rows} + m"
    if op.family == "vmpa":
        return f"n * {rows} + (m / 64) * 64 + (m % 2) * 32 + (m % 64) / 2"
    # vmpy: slots hold rows 4i, 4i+2, 4i+1, 4i+3
    return f"n * {rows} + (m / 128) * 128 + (((m % 4) >> 1) | ((m % 2) << 1)) * 32 + (m % 128) / 4"


def requant_c(mult: str, shift: str, channel: str, rq: Requant, value: str) -> str:
    return (f"{{ i64 t = (i64)({value}) * {mult}[{channel}]; t = (t + ((i64)1 << ({shift}[{channel}] - 1))) >> {shift}[{channel}];"
            f" t += {rq.zero_point}; t = t < {rq.lo} ? {rq.lo} : t > {rq.hi} ? {rq.hi} : t; y = (u8)t; }}")


def gemm_c(op: QGemm, prefix: str) -> tuple[str, str]:
    """(definitions, call) for one GEMM-shaped operator reading ``x`` and writing ``y``.

    ``op.into``: write the output in that consumer's packed input layout, into
    ``dnnr_scratch_pack`` (free once this operator's own GEMM has read it), instead of
    NHWC ``y`` (see `writes_packed_input_of`). ``op.packed_input``: the input is already
    there, written by the producer, so the packing step is skipped."""
    m, k, n = op.shape
    into, packed_input = op.into, op.packed_input
    if into is not None and not writes_packed_input_of(op, into):
        raise ValueError(f"{prefix}: cannot write the packed input of a {into.family} consumer")
    if packed_input and op.family == "scalar":
        raise ValueError(f"{prefix}: the scalar kernel reads NHWC input")
    wtype, wdata, n_pad = packed_weights(op)
    rq = op.requant
    per_channel = len(rq.multiplier) > 1
    ch = "n" if per_channel else "0"
    defs = [
        _c_array(f"{prefix}_w", wtype, wdata),
        _c_array(f"{prefix}_bias", "i32", op.bias.astype(np.int64)),
        _c_array(f"{prefix}_mult", "i32", np.asarray(rq.multiplier, dtype=np.int64)),
        _c_array(f"{prefix}_shift", "i32", np.asarray(rq.shift, dtype=np.int64)),
    ]
    if op.family == "scalar":
        g = op.geometry
        defs.append(f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, u8 *restrict out, u8 *restrict cols) {{
  {prefix}_im2col(x, cols);
  for (int m = 0; m < {m}; m++)
    for (int n = 0; n < {n}; n++) {{
      i32 a = {prefix}_bias[n];
      for (int kk = 0; kk < {k}; kk++) a += (i32)cols[m * {k} + kk] * {prefix}_w[kk * {n} + n];
      u8 y; {requant_c(prefix + "_mult", prefix + "_shift", ch, rq, "a")}
      out[m * {n} + n] = y;
    }}
}}
""")
        defs.insert(0, _im2col_plain_c(g, op.x_zero_point, f"{prefix}_im2col"))
        return "".join(defs), f"{prefix}({{x}}, {{y}}, (u8 *)dnnr_scratch_pack);"
    etype = packed_type(op.family)
    if not packed_input:
        defs.append(_pack_c(op, f"{prefix}_pack"))
    defs.append(_gemm_c(op, f"{prefix}_gemm", n_pad))
    out_type, store, out_arg = "u8", f"out[m * {n} + n] = y;", "{y}"
    if into is not None:
        out_type = packed_type(into.family)
        store = f"int mm = m, kk = n; out[{packed_offset(into)}] = y;"
        out_arg = f"({out_type} *)dnnr_scratch_pack"
    defs.append(f"""
static void __attribute__((noinline)) {prefix}_requant(const i32 *restrict acc, {out_type} *restrict out) {{
  for (int m = 0; m < {m}; m++)
    for (int n = 0; n < {n}; n++) {{
      u8 y; {requant_c(prefix + "_mult", prefix + "_shift", ch, rq, f"acc[{_acc_index(op)}] + {prefix}_bias[n]")}
      {store}
    }}
}}
""")
    pack = "" if packed_input else f"{prefix}_pack({{x}}, ({etype} *)dnnr_scratch_pack); "
    call = (pack + f"{prefix}_gemm(({etype} *)dnnr_scratch_pack, {prefix}_w, (i32 *)dnnr_scratch_acc); "
            f"{prefix}_requant((i32 *)dnnr_scratch_acc, {out_arg});")
    return "".join(defs), call


def _im2col_plain_c(g: ConvGeometry, pad_value: int, name: str) -> str:
    kh, kw = g.kernel
    return f"""
static void __attribute__((noinline)) {name}(const u8 *restrict x, u8 *restrict cols) {{
  int kk = 0;
  for (int b = 0; b < {g.batch}; b++)
  for (int oy = 0; oy < {g.out_hw[0]}; oy++)
  for (int ox = 0; ox < {g.out_hw[1]}; ox++)
    for (int ky = 0; ky < {kh}; ky++)
    for (int kx = 0; kx < {kw}; kx++) {{
      int iy = oy * {g.strides[0]} - {g.pads[0]} + ky * {g.dilations[0]}, ix = ox * {g.strides[1]} - {g.pads[1]} + kx * {g.dilations[1]};
      int inside = iy >= 0 && iy < {g.height} && ix >= 0 && ix < {g.width};
      const u8 *src = x + ((b * {g.height} + iy) * {g.width} + ix) * {g.channels};
      for (int c = 0; c < {g.channels}; c++) cols[kk++] = inside ? src[c] : {pad_value};
    }}
}}
"""


# ---- MatMul of two activations ----------------------------------------------------------

# The runtime B operand is uint8 with zero point zb; the multiply instructions take signed
# bytes on that side, so B is packed as b' = b − 128 (int8) with zb' = zb − 128, and
#   Σ_k (a − za)(b' − zb') = Σ_k a·b' − za·Σ_k b' − zb'·Σ_k a + K·za·zb'
# with the column sums Σ_k b' taken while packing B and the row sums Σ_k a of A, both on
# the device. Every term fits int32 for K ≤ MATMUL_ACT_MAX_K.
MATMUL_ACT_MAX_K = 16384


@dataclass(frozen=True, slots=True)
class QMatMulAct:
    """``y[i] = rq(Σ_k (a[i, m, k] − za)·(b[i, k, n] − zb))`` for ``batch`` pairs of row-major
    uint8 matrices (a: [batch, M, K], b: [batch, K, N], y: [batch, M, N])."""

    batch: int
    m: int
    k: int
    n: int
    a_zero_point: int
    b_zero_point: int
    requant: Requant  # per tensor
    family: str = "vrmpy"

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.m, self.k, self.n

    def as_gemm(self) -> QGemm:
        """The GEMM over one pair with A as a 1×1 convolution's input: its packing of A, its
        inner loops and accumulator layout are this kernel's (the weights, all zero, only
        give the shape; the runtime B takes their place)."""
        geometry = ConvGeometry(1, self.m, 1, self.k, (1, 1), out_hw=(self.m, 1))
        return QGemm(geometry, np.zeros((self.k, self.n), np.int8), np.zeros(self.n, np.int32), self.requant,
                     self.a_zero_point, self.family)


def matmul_act_reference(op: QMatMulAct, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy model: a [batch, M, K] and b [batch, K, N] uint8 → y [batch, M, N] uint8."""
    centred_a = a.reshape(op.batch, op.m, op.k).astype(np.int64) - op.a_zero_point
    centred_b = b.reshape(op.batch, op.k, op.n).astype(np.int64) - op.b_zero_point
    return apply_requant(centred_a @ centred_b, op.requant)


def matmul_act_scratch(op: QMatMulAct) -> tuple[int, int]:
    """Bytes of the packed A, and of the accumulators followed by the packed B, its column
    sums and A's row sums (all in ``dnnr_scratch_acc``)."""
    if op.family == "scalar":
        return 0, 0
    gemm = op.as_gemm()
    pack, acc = scratch_sizes(gemm)
    n_pad = ceil_to(op.n, unroll_for(gemm))
    words = n_pad * _words_per_column(op)
    return pack, ceil_to(acc, 128) + ceil_to(words * 4, 128) + ceil_to(n_pad * 4, 128) + op.m * 4


def _words_per_column(op: QMatMulAct) -> int:
    """Weight words per output column in the family's layout (`packed_weights`)."""
    k_pad = ceil_to(op.k, K_STEP[op.family])
    return k_pad if op.family == "vmpy" else k_pad // K_STEP[op.family]


def matmul_act_c(op: QMatMulAct, prefix: str) -> tuple[str, str]:
    """(definitions, call) reading ``a`` and ``b`` and writing ``y``."""
    m, k, n = op.shape
    rq = op.requant
    if len(rq.multiplier) != 1:
        raise ValueError(f"{prefix}: a MatMul of two activations is requantised per tensor")
    if k > MATMUL_ACT_MAX_K:
        raise ValueError(f"{prefix}: K = {k} > {MATMUL_ACT_MAX_K} could overflow the int32 accumulators")
    zb = op.b_zero_point - 128  # of b' = b − 128
    correction = k * op.a_zero_point * zb
    defs = [_c_array(f"{prefix}_mult", "i32", np.asarray(rq.multiplier, dtype=np.int64)),
            _c_array(f"{prefix}_shift", "i32", np.asarray(rq.shift, dtype=np.int64))]
    if op.family == "scalar":
        defs.append(f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict a, const u8 *restrict b, u8 *restrict out) {{
  for (int i = 0; i < {op.batch}; i++)
    for (int m = 0; m < {m}; m++)
      for (int n = 0; n < {n}; n++) {{
        i32 acc = 0;
        for (int kk = 0; kk < {k}; kk++)
          acc += ((i32)a[(i * {m} + m) * {k} + kk] - {op.a_zero_point}) * ((i32)b[(i * {k} + kk) * {n} + n] - {op.b_zero_point});
        u8 y; {requant_c(prefix + "_mult", prefix + "_shift", "0", rq, "acc")}
        out[(i * {m} + m) * {n} + n] = y;
      }}
}}
""")
        return "".join(defs), f"{prefix}({{a}}, {{b}}, {{y}});"
    gemm = op.as_gemm()
    fam = op.family
    n_pad = ceil_to(n, unroll_for(gemm))
    words = _words_per_column(op)
    acc_bytes = ceil_to(scratch_sizes(gemm)[1], 128)
    wp_offset, colsum_offset = acc_bytes, acc_bytes + ceil_to(n_pad * words * 4, 128)
    rowsum_offset = colsum_offset + ceil_to(n_pad * 4, 128)
    # Byte t of a word of the family's weight layout (`packed_weights`) holds K value
    # s·per_word + t mod per_word: 4 consecutive K (vrmpy), a pair twice (vmpa), one byte 4× (vmpy).
    per_word = {"vrmpy": 4, "vmpa": 2, "vmpy": 1}[fam]
    defs.append(_pack_c(gemm, f"{prefix}_pack"))
    defs.append(_gemm_c(gemm, f"{prefix}_gemm", n_pad))
    defs.append(f"""
static void __attribute__((noinline)) {prefix}_pack_b(const u8 *restrict b, u8 *restrict wp, i32 *restrict colsum) {{
  for (int n = 0; n < {n_pad}; n++) {{
    i32 sum = 0;
    for (int s = 0; s < {words}; s++)
      for (int t = 0; t < 4; t++) {{
        int kk = s * {per_word} + t % {per_word};
        i32 v = n < {n} && kk < {k} ? (i32)b[kk * {n} + n] - 128 : 0;
        wp[(n * {words} + s) * 4 + t] = (u8)v;
        if (t < {per_word}) sum += v;
      }}
    colsum[n] = sum;
  }}
}}

static void __attribute__((noinline)) {prefix}_row_sums(const u8 *restrict a, i32 *restrict rowsum) {{
  for (int m = 0; m < {m}; m++) {{
    i32 sum = 0;
    for (int kk = 0; kk < {k}; kk++) sum += a[m * {k} + kk];
    rowsum[m] = sum;
  }}
}}

static void __attribute__((noinline)) {prefix}_requant(const i32 *restrict acc, const i32 *restrict colsum,
                                                        const i32 *restrict rowsum, u8 *restrict out) {{
  for (int m = 0; m < {m}; m++)
    for (int n = 0; n < {n}; n++) {{
      i32 total = acc[{_acc_index(gemm)}] - {op.a_zero_point} * colsum[n] - ({zb}) * rowsum[m] + ({correction});
      u8 y; {requant_c(prefix + "_mult", prefix + "_shift", "0", rq, "total")}
      out[m * {n} + n] = y;
    }}
}}

static void __attribute__((noinline)) {prefix}(const u8 *restrict a, const u8 *restrict b, u8 *restrict out) {{
  i32 *acc = (i32 *)dnnr_scratch_acc, *wp = (i32 *)(dnnr_scratch_acc + {wp_offset});
  i32 *colsum = (i32 *)(dnnr_scratch_acc + {colsum_offset}), *rowsum = (i32 *)(dnnr_scratch_acc + {rowsum_offset});
  for (int i = 0; i < {op.batch}; i++) {{
    const u8 *ai = a + i * {m * k};
    {prefix}_pack(ai, ({packed_type(fam)} *)dnnr_scratch_pack);
    {prefix}_pack_b(b + i * {k * n}, (u8 *)wp, colsum);
    {prefix}_row_sums(ai, rowsum);
    {prefix}_gemm(({packed_type(fam)} *)dnnr_scratch_pack, wp, acc);
    {prefix}_requant(acc, colsum, rowsum, out + i * {m * n});
  }}
}}
""")
    return "".join(defs), f"{prefix}({{a}}, {{b}}, {{y}});"
