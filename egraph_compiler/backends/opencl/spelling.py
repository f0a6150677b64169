"""OpenCL C spellings, as data: element types, literals, scalar built-ins, the bodies of
operators without scalar semantics.

The shared walk (`emit.ValueEmitter`) asks this table how to write one scalar
operation; another C-like target would supply its own table. ``{0}``, ``{1}`` …
are the operands, ``{T}`` the element type, ``{a:NAME}`` a float attribute.
"""

from __future__ import annotations

import math

from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ops.scalar import Spelling

# The bitwise built-ins (ONNX opset 18's operators, integer operands) as C operators.
BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "bitwise_not": "~"}

C_TYPES = {
    "float32": "float", "float64": "double", "int64": "long", "int32": "int",
    "int16": "short", "int8": "char", "uint8": "uchar", "uint16": "ushort", "uint32": "uint",
    "uint64": "ulong", "bool": "uchar",
    "float16": "float",  # computed in float; stored as half (STORAGE_TYPES)
}
# Element types whose buffers hold another C type than their arithmetic: float16 tensors
# are read with vload_half and written with vstore_half (no cl_khr_fp16 needed).
STORAGE_TYPES = {"float16": "half"}

# How OpenCL C writes the scalar built-ins of ``op … = expr`` semantics: every operator
# with such semantics is generated from it (`ops.scalar.to_c`); `FLOAT_OPS` holds only
# operators without a scalar expression (`= builtin NAME`) and tuned spellings.
SPELLING = Spelling(
    functions={
        "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})", "abs": "fabs({0})",
        "tanh": "tanh({0})", "erf": "dnnr_erf({0})", "sin": "sin({0})", "cos": "cos({0})",
        "floor": "floor({0})", "ceil": "ceil({0})", "round": "rint({0})",
        "sign": "(({0} > 0) ? 1.0f : (({0} < 0) ? -1.0f : 0.0f))",
        # NumPy's minimum/maximum (a NaN operand wins, as `ops.scalar` and onnxruntime
        # say) as comparisons, not fmin/fmax: those lose NaN, and are calls on PoCL that
        # keep its work-item loops scalar (HardSwish epilogues ran 2-5× slower)
        "min": "((({0}) < ({1}) || ({0}) != ({0})) ? ({0}) : ({1}))",
        "max": "((({0}) > ({1}) || ({0}) != ({0})) ? ({0}) : ({1}))",
        # the elementwise built-ins of `= builtin NAME` operators
        "tan": "tan({0})", "asin": "asin({0})", "acos": "acos({0})", "atan": "atan({0})", "sinh": "sinh({0})",
        "cosh": "cosh({0})", "asinh": "asinh({0})", "acosh": "acosh({0})", "atanh": "atanh({0})",
    },
    literal=lambda value: literal(value, "float32"),
)

FLOAT_OPS = {
    "Pow": "pow((float){0}, (float){1})",
    # not fmax: builtins are calls on PoCL (see kernels._clamp_high); NaN stays NaN,
    # as onnxruntime's Relu and NumPy's maximum(x, 0) give
    "Relu": "(({0} < 0.0f) ? 0.0f : {0})",
    # not isnan: a builtin is a call on PoCL and keeps the work-item loop scalar (a
    # Softmax+IsNaN+Where row kernel ran 5x its Softmax alone); NaN is the one x != x
    "IsNaN": "((({0}) != ({0})) ? 1 : 0)",
    "BatchNormalization": "(({0} - {3}) * rsqrt({4} + {a:epsilon}) * {1} + {2})",
}
# Over integer operands an operator is generated from its scalar semantics where these
# suffice (C's + - * and truncating / are ONNX's integer arithmetic; literals integral);
# `INT_OPS` holds the integer spellings of the rest.
def _integer_literal(value: float) -> str:
    if not float(value).is_integer():
        raise ValueError(f"{value} has no integer literal")
    return str(int(value))


INT_SPELLING = Spelling(functions={}, literal=_integer_literal)
INT_OPS = {"Abs": "abs({0})", "Relu": "max({0}, ({T})0)", "Sign": "(({0} > 0) - ({0} < 0))",
           # an integer base (numpy's power, then astype): pow in double, exact integers
           # rounded where the exponent is integral (pow's last-ulp error), truncated otherwise
           "Pow": "(({T})(((double){1}) == floor((double){1}) ? rint(pow((double){0}, (double){1}))"
                  " : pow((double){0}, (double){1})))"}
# The variadic built-ins: a binary step folded over all operands (mean: then divided).
VARIADIC = {"sum": "({0} + {1})", "max": SPELLING.functions["max"], "min": SPELLING.functions["min"],
            "mean": "({0} + {1})"}
VARIADIC_INT = {"sum": "({0} + {1})", "max": "max({0}, {1})", "min": "min({0}, {1})", "mean": "({0} + {1})"}


def literal(value: float | int, dtype: str) -> str:
    """A C literal of ``dtype``."""
    if dtype in ("float32", "float64", "float16"):
        value = float(value)
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        text = repr(value)
        if "e" not in text and "." not in text:
            text += ".0"
        return text if dtype == "float64" else f"{text}f"
    if dtype == "bool":
        return "1" if value else "0"
    if dtype not in C_TYPES:  # float16, bfloat16, …: a clear refusal, not a KeyError
        raise ModelError(f"the OpenCL backend has no element type for {dtype}")
    return f"(({C_TYPES[dtype]}){int(value)})"


def multiply_add(a: str, b: str, c: str) -> str:
    """``a·b + c`` in plain operators, not ``mad()``/``fma()``: PoCL's built-ins are
    out-of-line calls here (92 ms per million 16-step chains against 20 as ``a * b + c``,
    which clang contracts into one fused multiply-add: the results were bit-identical to
    ``fma``), while NVIDIA's OpenCL compiles all three spellings to the same
    ``fma.rn.f32`` (PTX of an H200, checked for ``mad``, ``a * b + c`` and ``c + a * a``).
    One spelling for both device classes."""
    return f"({a} * {b} + {c})"


# ``erf``: PoCL's built-in is an out-of-line call that costs ~100 ns an element here and
# keeps a work-item loop scalar (BERT-tiny's MatMul+Gelu ran 3-4 % slower fused than
# MatMul then Gelu). `dnnr_erf` is straight-line float arithmetic (no fma, exp or fabs:
# those are calls on PoCL too): for |x| < 0.8, x + x·Q(x²); on [0.8, 3.92) in four
# pieces, 1 − P(|x| − centre) with P fitted to erfc (least squares on Chebyshev nodes,
# degree 10, float32 coefficients; its pieces' coefficients picked by selects, so a
# vectorised loop evaluates one polynomial); 1 beyond, the sign restored last. Measured
# against float64 erf over every 16th float in [1e-30, 6] with each operation rounded
# to float32: at most 1.07 ulp (at 0.8045); NaN stays NaN, ±0 and ±inf exact
# (`tests/backends/opencl/test_cpu_erf.py` checks it on PoCL). The GPU class keeps the
# built-in (`helper`).
ERF_SMALL = (9.260507067665458e-05, -0.0008323565125465393, 0.00521482527256012, -0.026864247396588326, 0.11283772438764572, -0.37612637877464294, 0.12837916612625122)  # Q's coefficients, the highest degree first
ERF_PIECES = (  # (from |x|, centre, P's coefficients, the highest degree first)
    (0.8, 1.1, (-0.001155878184363246, 0.0006836499087512493, 0.005913511384278536, -0.010805333964526653, -0.013750480487942696, 0.06352294981479645, -0.03577899932861328, -0.15926700830459595, 0.3701275587081909, -0.3364796042442322, 0.11979492753744125)),
    (1.4, 1.8, (0.00040954299038276076, -0.0006851137150079012, -0.0010783574543893337, 0.005694486200809479, -0.006902735680341721, -0.009001071564853191, 0.046136170625686646, -0.08072354644536972, 0.07954510301351547, -0.04419172182679176, 0.010909498669207096)),
    (2.2, 2.6, (-7.27239457773976e-05, 0.00017433211905881763, -7.173649646574631e-05, -0.00067078263964504, 0.002365224529057741, -0.00456377724185586, 0.005962962284684181, -0.00545892957597971, 0.00340093020349741, -0.0013080500066280365, 0.00023603442241437733)),
    (3.0, 3.46, (4.389927653392078e-06, -1.7255528291570954e-05, 4.020742926513776e-05, -7.007218664512038e-05, 9.564842912368476e-05, -0.00010285804455634207, 8.6144071246963e-05, -5.4549152991967276e-05, 2.4679207854205742e-05, -7.1327208388538565e-06, 9.922013077812153e-07)),
)
ERF_ONE = 3.92  # erf(|x|) rounds to 1 from here


def _erf_helper() -> str:
    def select(values: list[str]) -> str:  # the piece of a, the last region first
        text = values[0]
        for (start, _, _), value in zip(ERF_PIECES, values[1:], strict=True):
            text = f"(a >= {start!r}f ? {value} : {text})"
        return text

    # static: a plain C99 `inline` function stayed an out-of-line call on PoCL (13 ms per
    # million elements against 1.5)
    # (the signature's brace not at a line's end: `build.hoist_sizes` takes the first
    # ``) {`` that ends a line for the kernel's)
    lines = ["static inline float dnnr_erf(const float x) { const float a = x < 0.0f ? -x : x;",
             "  const float s = a * a;"]
    q = f"{ERF_SMALL[0]!r}f"
    for c in ERF_SMALL[1:]:
        q = f"({q} * s + {c!r}f)"
    lines.append(f"  const float small = a + a * {q};")
    lines.append(f"  const float t = a - {select(['0.0f'] + [f'{c!r}f' for _, c, _ in ERF_PIECES])};")
    degree = len(ERF_PIECES[0][2])
    lines.append(f"  float p = {select(['0.0f'] + [f'{cs[0]!r}f' for _, _, cs in ERF_PIECES])};")
    for k in range(1, degree):
        lines.append(f"  p = p * t + {select(['0.0f'] + [f'{cs[k]!r}f' for _, _, cs in ERF_PIECES])};")
    lines.append(f"  const float r = a >= {ERF_ONE!r}f ? 1.0f : (a >= {ERF_PIECES[0][0]!r}f ? 1.0f - p : small);")
    lines.append("  return x < 0.0f ? -r : r;")
    lines.append("}")
    return "#ifndef DNNR_ERF\n#define DNNR_ERF\n" + "\n".join(lines) + "\n#endif\n"


ERF_HELPER = _erf_helper()


def helpers(text: str, device: str) -> list[str]:
    """The helper functions a kernel body ``text`` calls, defined before the kernel. On
    the GPU class `dnnr_erf` is the built-in (fast and inline there)."""
    if "dnnr_erf(" not in text:
        return []
    if device == "cpu":
        return [ERF_HELPER]
    return ["#ifndef DNNR_ERF\n#define DNNR_ERF\nstatic inline float dnnr_erf(const float x) { return erf(x); }\n#endif\n"]


# function names a helper defines: scalar only, so no vector epilogue (`cpu_epilogue`) calls them
SCALAR_HELPERS = ("dnnr_erf(",)

# A float16 read from any float's address (4-byte aligned, as clang lowers it: one
# unaligned vector load). PoCL's ``vload16`` reads lane by lane (a GlobalAveragePool
# over 16 × 56² ran 0.0015 ms through this type, and ``vload16`` was as slow as scalar
# code in `cpu_channels`' prototype); a ``float16*`` cast would claim 64-byte alignment
UNALIGNED_FLOAT16 = "dnnr_float16u"
UNALIGNED_FLOAT16_HELPER = (
    "#ifndef DNNR_FLOAT16U\n#define DNNR_FLOAT16U\n"
    f"typedef float {UNALIGNED_FLOAT16} __attribute__((ext_vector_type(16), aligned(4)));\n"
    "#endif\n")
