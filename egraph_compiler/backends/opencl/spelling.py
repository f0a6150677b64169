"""OpenCL C spellings, as data: element types, literals, scalar operator bodies.

The shared walk (`emit.ValueEmitter`) asks this table how to write one scalar
operation; another C-like target would supply its own table. ``{0}``, ``{1}`` …
are the operands, ``{T}`` the element type, ``{a:NAME}`` a float attribute.
"""

from __future__ import annotations

import math

C_TYPES = {
    "float32": "float", "float64": "double", "int64": "long", "int32": "int",
    "int16": "short", "int8": "char", "uint8": "uchar", "uint16": "ushort", "uint32": "uint",
    "uint64": "ulong", "bool": "uchar",
}

ATTR_DEFAULTS = {
    ("LeakyRelu", "alpha"): 0.01, ("Elu", "alpha"): 1.0, ("Celu", "alpha"): 1.0,
    ("Selu", "alpha"): 1.6732632423543772, ("Selu", "gamma"): 1.0507009873554805,
    ("HardSigmoid", "alpha"): 0.2, ("HardSigmoid", "beta"): 0.5,
    ("ThresholdedRelu", "alpha"): 1.0, ("BatchNormalization", "epsilon"): 1e-5,
}

FLOAT_OPS = {
    "Add": "({0} + {1})", "Sub": "({0} - {1})", "Mul": "({0} * {1})", "Div": "({0} / {1})",
    "Pow": "pow((float){0}, (float){1})",
    "Neg": "(-{0})", "Abs": "fabs({0})", "Reciprocal": "(1.0f / {0})", "Sqrt": "sqrt({0})",
    "Exp": "exp({0})", "Log": "log({0})", "Erf": "erf({0})", "Tanh": "tanh({0})",
    "Sigmoid": "(1.0f / (1.0f + exp(-{0})))", "Sin": "sin({0})", "Cos": "cos({0})",
    "Tan": "tan({0})", "Asin": "asin({0})", "Acos": "acos({0})", "Atan": "atan({0})",
    "Sinh": "sinh({0})", "Cosh": "cosh({0})", "Asinh": "asinh({0})", "Acosh": "acosh({0})",
    "Atanh": "atanh({0})", "Ceil": "ceil({0})", "Floor": "floor({0})", "Round": "rint({0})",
    "Sign": "(({0} > 0) ? 1.0f : (({0} < 0) ? -1.0f : 0.0f))",
    # not fmax: builtins are calls on PoCL (see kernels._clamp_high); NaN gives 0 either way
    "Relu": "(({0} > 0.0f) ? {0} : 0.0f)", "LeakyRelu": "(({0} >= 0) ? {0} : {a:alpha} * {0})",
    "Elu": "(({0} >= 0) ? {0} : {a:alpha} * (exp({0}) - 1.0f))",
    "Celu": "(fmax({0}, 0.0f) + fmin(0.0f, {a:alpha} * (exp({0} / {a:alpha}) - 1.0f)))",
    "Selu": "({a:gamma} * (({0} > 0) ? {0} : {a:alpha} * (exp({0}) - 1.0f)))",
    "ThresholdedRelu": "(({0} > {a:alpha}) ? {0} : 0.0f)",
    "HardSigmoid": "fmax(0.0f, fmin(1.0f, {a:alpha} * {0} + {a:beta}))",
    "HardSwish": "({0} * fmax(0.0f, fmin(1.0f, {0} / 6.0f + 0.5f)))",
    "Softplus": "log(exp({0}) + 1.0f)", "Softsign": "({0} / (1.0f + fabs({0})))",
    "Mish": "({0} * tanh(log(exp({0}) + 1.0f)))",
    "Square": "({0} * {0})", "Gelu": "(0.5f * {0} * (1.0f + erf({0} * 0.70710678118654752f)))",
    "GeluTanh": "(0.5f * {0} * (1.0f + tanh(0.79788456080286536f * ({0} + 0.044715f * {0} * {0} * {0}))))",
    "PRelu": "(({0} < 0) ? {1} * {0} : {0})",
    "Identity": "{0}", "Dropout": "{0}",
    "IsNaN": "(isnan({0}) ? 1 : 0)",
    "BatchNormalization": "(({0} - {3}) * rsqrt({4} + {a:epsilon}) * {1} + {2})",
}
INT_OPS = {
    "Add": "({0} + {1})", "Sub": "({0} - {1})", "Mul": "({0} * {1})", "Div": "({0} / {1})",
    "Neg": "(-{0})", "Abs": "abs({0})", "Identity": "{0}", "Dropout": "{0}",
    "Relu": "max({0}, ({T})0)", "Sign": "(({0} > 0) - ({0} < 0))",
}
COMPARE_OPS = {
    "Equal": "({0} == {1})", "Greater": "({0} > {1})", "Less": "({0} < {1})",
    "GreaterOrEqual": "({0} >= {1})", "LessOrEqual": "({0} <= {1})",
    "And": "({0} && {1})", "Or": "({0} || {1})", "Xor": "(({0} != 0) != ({1} != 0))",
    "Not": "(!{0})",
}
# Variadic operators: a binary step folded over all operands.
VARIADIC = {"Sum": "({0} + {1})", "Max": "fmax({0}, {1})", "Min": "fmin({0}, {1})",
            "Mean": "({0} + {1})"}
VARIADIC_INT = {"Sum": "({0} + {1})", "Max": "max({0}, {1})", "Min": "min({0}, {1})",
                "Mean": "({0} + {1})"}


def literal(value: float | int, dtype: str) -> str:
    """A C literal of ``dtype``."""
    if dtype in ("float32", "float64"):
        value = float(value)
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        text = repr(value)
        if "e" not in text and "." not in text:
            text += ".0"
        return f"{text}f" if dtype == "float32" else text
    if dtype == "bool":
        return "1" if value else "0"
    return f"(({C_TYPES[dtype]}){int(value)})"
