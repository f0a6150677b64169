"""The scalar float fallback under qemu against NumPy: Dequantize/Quantize bit-exact
to ONNX's DequantizeLinear/QuantizeLinear (round half to even), division correctly
rounded, square root and exp within a few float32 ulp, erf within 4e-7, layout gathers exact."""

from __future__ import annotations

import numpy as np

from egraph_compiler.backends.hexagon.fallback import (
    FLOAT_C,
    Dequantize,
    FloatOp,
    Gather,
    Quantize,
    dequantize_c,
    float_op_c,
    gather_c,
    quantize_c,
)
from egraph_compiler.backends.hexagon.program import Step

from .conftest import needs_toolchain, run_steps


def _ulps(got: np.ndarray, want: np.ndarray) -> int:
    a, b = got.astype(np.float32).view(np.int32).astype(np.int64), want.astype(np.float32).view(np.int32).astype(np.int64)
    return int(np.abs(a - b).max())


@needs_toolchain
def test_float_fallback_kernels_match_numpy(tmp_path):
    rng = np.random.default_rng(0)
    n = 1000
    q = rng.integers(0, 256, n).astype(np.uint8)
    # Quantize inputs hit exact ties (k + 0.5)·s, where half-to-even and half-up differ.
    ties = ((rng.integers(-300, 300, n) + 0.5) * 0.25).astype(np.float32)
    a = (rng.standard_normal(n) * 10).astype(np.float32)
    b = (rng.uniform(0.1, 10, n) * rng.choice([-1, 1], n)).astype(np.float32)
    e = rng.uniform(-6, 6, n).astype(np.float32)
    table = rng.permutation(n).astype(np.int32)
    steps = [
        Step(*dequantize_c(Dequantize(n, 77, 0.0371), "k_dq"), {"x": "q", "y": "dq"}),
        Step(*quantize_c(Quantize(n, 130, 0.25), "k_q"), {"x": "ties", "y": "qt"}),
        Step(*float_op_c(FloatOp("Div", ((n,), (n,)), (n,)), "k_div"), {"x0": "a", "x1": "b", "y": "div"}),
        Step(*float_op_c(FloatOp("Sqrt", ((n,),), (n,)), "k_sqrt"), {"x0": "b", "y": "sqrt"}),
        Step(*float_op_c(FloatOp("Exp", ((n,),), (n,)), "k_exp"), {"x0": "e", "y": "exp"}),
        Step(*float_op_c(FloatOp("Erf", ((n,),), (n,)), "k_erf"), {"x0": "e", "y": "erf"}),
        Step(*gather_c(Gather(table, 4), "k_gather"), {"x": "a", "y": "gathered"}),
    ]
    steps[0] = Step(FLOAT_C + steps[0].definitions, steps[0].call, steps[0].buffers)
    out = run_steps(tmp_path, {"q": q, "ties": ties, "a": a, "b": b, "e": e},
                    {name: 4 * n for name in ("dq", "div", "sqrt", "exp", "erf", "gathered")} | {"qt": n}, steps)
    f32 = {k: v.view(np.float32) for k, v in out.items() if k != "qt"}
    np.testing.assert_array_equal(f32["dq"], (q.astype(np.int32) - 77).astype(np.float32) * np.float32(0.0371))
    np.testing.assert_array_equal(out["qt"], np.clip(np.rint(ties / np.float32(0.25)) + 130, 0, 255).astype(np.uint8))
    np.testing.assert_array_equal(f32["div"], a / b)
    np.testing.assert_array_equal(f32["gathered"], a[table])
    assert np.isnan(f32["sqrt"][b < 0]).all()  # as sqrtf and onnxruntime
    assert _ulps(f32["sqrt"][b > 0], np.sqrt(b[b > 0])) <= 1
    assert _ulps(f32["exp"], np.exp(e.astype(np.float64)).astype(np.float32)) <= 4
    erf = np.vectorize(__import__("math").erf)(e.astype(np.float64))
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7) evaluated in float32: measured 3.6e-7,
    # about 6 ulp near ±1, against a quantisation step of ~1e-2 after Erf.
    assert np.abs(f32["erf"] - erf).max() <= 4e-7
