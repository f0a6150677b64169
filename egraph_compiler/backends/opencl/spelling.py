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
        "tanh": "tanh({0})", "erf": "erf({0})", "sin": "sin({0})", "cos": "cos({0})",
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
