"""The Pad kernel: a constant, edge or reflect Pad of a quantised tensor is a pure data
move, ``y[i] = x[table[i]]`` with the padded positions filled by one byte (the input's
quantisation of the pad value), so it stays on the integers (EfficientNet's stem Pad).

Registered here, beside `kinds` (which lists the kernels of the other operators), so the
lowering (`lower.QPad`) and the kernel stay one import each."""

from __future__ import annotations

import numpy as np

from egraph_compiler.backends.hexagon.kernels import _c_array
from egraph_compiler.backends.hexagon.kinds import Kernel, register
from egraph_compiler.backends.hexagon.lower import QPad


def pad_c(op: QPad, prefix: str) -> tuple[str, str]:
    code = _c_array(f"{prefix}_index", "i32", op.table.astype(np.int64)) + f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, u8 *restrict out) {{
  for (int i = 0; i < {op.table.size}; i++) {{ int k = {prefix}_index[i]; out[i] = k < 0 ? (u8){op.fill} : x[k]; }}
}}
"""
    return code, f"{prefix}((const u8 *){{x}}, (u8 *){{y}});"


@register
class PadKernel(Kernel):
    """Pad of a uint8 tensor (`lower.QPad`)."""

    kind, spec_type = "pad", QPad
    emit = staticmethod(pad_c)

    def reference(self, spec: QPad, *inputs: np.ndarray) -> np.ndarray:
        flat = inputs[0].reshape(-1)
        return np.where(spec.table < 0, np.uint8(spec.fill), flat[np.maximum(spec.table, 0)]).astype(np.uint8)

    def describe(self, spec: QPad) -> str:
        return "scalar C (pad: a table copy with the zero point's byte)"
