"""Integer operators (rules/quant.dnnr's Q*Int, ONNX's QLinearConv / QLinearMatMul) as the
float operator each computes between dequantised operands and a quantised output: one
table for shape inference (the float operator's shape, the output zero point's dtype)
and the Hexagon lowering (its kernels and requantisation)."""

from __future__ import annotations

# op: (float operator, quantised operands as (value, scale, zero point) positions, weights
# (value, scale, zero point or None), bias position, the output's (scale, zero point)).
INTEGER_SIGNATURES: dict[str, tuple[str, tuple[tuple[int, int, int], ...], tuple[int, int, int | None] | None,
                                    int | None, tuple[int, int]]] = {
    "QLinearConv": ("Conv", ((0, 1, 2),), (3, 4, 5), 8, (6, 7)),
    "QLinearMatMul": ("MatMul", ((0, 1, 2),), (3, 4, 5), None, (6, 7)),
    "QConvInt": ("Conv", ((0, 1, 2),), (3, 4, 5), 6, (9, 10)),
    "QMatMulInt": ("MatMul", ((0, 1, 2),), (3, 4, 5), None, (6, 7)),
    "QAddInt": ("Add", ((0, 1, 2), (3, 4, 5)), None, None, (6, 7)),
    "QMulInt": ("Mul", ((0, 1, 2), (3, 4, 5)), None, None, (6, 7)),
    "Requantize": ("Identity", ((0, 1, 2),), None, None, (3, 4)),
    "QGemmInt": ("Gemm", ((0, 1, 2),), (3, 4, 5), 6, (9, 10)),
    "QAveragePoolInt": ("AveragePool", ((0, 1, 2),), None, None, (3, 4)),
    "QGlobalAveragePoolInt": ("GlobalAveragePool", ((0, 1, 2),), None, None, (3, 4)),
    "QConcatInt": ("Concat", ((0, 1, 2), (3, 4, 5)), None, None, (6, 7)),
    "QSoftmaxInt": ("Softmax", ((0, 1, 2),), None, None, (3, 4)),
    "QClipInt": ("Clip", ((0, 1, 2),), None, None, (1, 2)),
}


def float_operands(op: str) -> tuple[int, ...]:
    """The input positions of ``op``'s float operator's operands (values, weights, bias)."""
    _, operands, weights, bias, _ = INTEGER_SIGNATURES[op]
    return tuple(v for v, _, _ in operands) + ((weights[0],) if weights else ()) + (
        (bias,) if bias is not None else ())
