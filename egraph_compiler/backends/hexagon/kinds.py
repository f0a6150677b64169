"""Every kernel the Hexagon lowering emits, one class each, registered by kind in `KERNELS`.

A kernel class says everything the backend needs about one `IntOp.kind` (issue 11 item 4):
its C emitter (`emit`), its NumPy reference (`reference`, bit-exact for the integer
kernels), its scratch bytes (`scratch`), its instruction-family × layout options for
`select` (`options`; None where there is no choice), which input buffers its call reads
(`operands`), and the report's description of what it became (`describe`). The program
builder, the selection and the report in `__init__` read these, never the kind string;
a new HVX operator is its spec dataclass, its class here, and the lowering that makes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

import numpy as np

from egraph_compiler.backends.hexagon import eltwise, fallback, kernels
from egraph_compiler.backends.hexagon.lower import IntOp, Lowered, QConcatRq, QSoftmax
from egraph_compiler.backends.hexagon.select import Option, gemm_options


class Kernel:
    """One integer (or float-boundary) kernel of the Hexagon backend."""

    kind: ClassVar[str]
    spec_type: ClassVar[type]
    # reads or writes float32 buffers, so the program needs the float helpers (`fallback.FLOAT_C`)
    float_boundary: ClassVar[bool] = False

    # (spec, prefix) -> (C definitions, the call with ``{x}``/``{a}``/``{b}``/``{x0}``… and ``{y}`` slots)
    emit: ClassVar[Callable[[object, str], tuple[str, str]]]

    def reference(self, spec: object, *inputs: np.ndarray) -> np.ndarray:
        """What the kernel computes, in NumPy on the device's values."""
        raise NotImplementedError(f"hexagon kernel {self.kind} has no NumPy reference")

    def scratch(self, spec: object) -> tuple[int, int]:
        """Bytes of ``dnnr_scratch_pack`` and ``dnnr_scratch_acc`` it needs."""
        return 0, 0

    def options(self, lowered: Lowered, index: int) -> list[Option] | None:
        """Instruction-family × layout options of ``lowered.ops[index]``; None: no choice."""
        return None

    @property
    def has_options(self) -> bool:
        return type(self).options is not Kernel.options

    def operands(self, op: IntOp) -> list[str]:
        """The call's buffer slot per input of ``op``."""
        return ["x"]

    def label(self, spec: object) -> str:
        return self.kind

    def describe(self, spec: object) -> str:
        """The report's "what it became, and why" for an operator without a family choice."""
        return "scalar C (no HVX form)"


KERNELS: dict[str, Kernel] = {}


def register(cls: type[Kernel]) -> type[Kernel]:
    if cls.kind in KERNELS:
        raise ValueError(f"hexagon kernel kind {cls.kind!r} registered twice")
    KERNELS[cls.kind] = cls()
    return cls


def kernel(op: IntOp) -> Kernel:
    """The class of ``op``, checked against its spec (a lowering that pairs a kind with
    another kind's spec fails here, not in the C compiler)."""
    found = KERNELS.get(op.kind)
    if found is None or not isinstance(op.spec, found.spec_type):
        raise TypeError(f"hexagon backend: {op.name} has kind {op.kind!r} and a {type(op.spec).__name__} spec")
    return found


def _ab(op: IntOp) -> list[str]:
    return ["a", "b"]


def _numbered(op: IntOp) -> list[str]:
    return [f"x{i}" for i in range(len(op.inputs))]


@register
class GemmKernel(Kernel):
    """Convolution / GEMM with int8 weights (`kernels.QGemm`): vrmpy, vmpa, vmpy or scalar."""

    kind, spec_type = "gemm", kernels.QGemm
    emit = staticmethod(kernels.gemm_c)

    reference = staticmethod(kernels.gemm_reference)

    def scratch(self, spec: kernels.QGemm) -> tuple[int, int]:
        pack, acc = kernels.scratch_sizes(spec)
        g = spec.geometry
        return max(pack, g.rows * g.depth), acc  # the scalar family's im2col needs rows × depth

    def options(self, lowered: Lowered, index: int) -> list[Option] | None:
        consumer = _packed_consumer(lowered, index)
        return gemm_options(*lowered.ops[index].spec.shape, packed_consumer=consumer and consumer.spec.shape)


def _packed_consumer(lowered: Lowered, index: int) -> IntOp | None:
    """The next GEMM when it alone reads this GEMM's output, right after it, as a pure
    relayout (`writes_packed_input_of`): then this one may write its packed input."""
    op = lowered.ops[index]
    if index + 1 >= len(lowered.ops) or op.output in lowered.outputs.values():
        return None
    after = lowered.ops[index + 1]
    readers = [o for o in lowered.ops if op.output in o.inputs]
    if after.kind != GemmKernel.kind or after.inputs != (op.output,) or readers != [after]:
        return None
    as_hvx = [replace(o.spec, family="vrmpy") for o in (op, after)]
    return after if kernels.writes_packed_input_of(*as_hvx) else None


@register
class MatMulActKernel(Kernel):
    """Batched matrix product of two activations (`kernels.QMatMulAct`), B packed on the device."""

    kind, spec_type = "matmul_act", kernels.QMatMulAct
    emit = staticmethod(kernels.matmul_act_c)
    operands = staticmethod(_ab)

    reference = staticmethod(kernels.matmul_act_reference)
    scratch = staticmethod(kernels.matmul_act_scratch)

    def options(self, lowered: Lowered, index: int) -> list[Option] | None:
        spec = lowered.ops[index].spec  # per pair of matrices, plus packing B (one store per byte)
        m, k, n = spec.shape
        return [replace(o, cycles=spec.batch * (o.cycles + kernels.ceil_to(n, 4) * kernels.ceil_to(k, 4)),
                        pack=spec.batch * o.pack, detail=f"{spec.batch} matrices, each {o.detail}, B packed on the device")
                for o in gemm_options(m, k, n)]


@register
class DepthwiseKernel(Kernel):
    """Depthwise convolution (`eltwise.QDepthwise`): per-lane vmpy or scalar MACs."""

    kind, spec_type = "depthwise", eltwise.QDepthwise
    emit = staticmethod(eltwise.depthwise_c)

    reference = staticmethod(eltwise.depthwise_reference)
    scratch = staticmethod(eltwise.depthwise_scratch)

    def options(self, lowered: Lowered, index: int) -> list[Option] | None:
        g = lowered.ops[index].spec.geometry
        taps = g.kernel[0] * g.kernel[1]
        ceil = kernels.ceil_to
        vector = g.rows * (ceil(g.channels, 128) // 128) * (ceil(taps, 2) // 2) * 4 + g.rows * taps * g.channels
        return [Option("vmpy", vector, "per-lane vmpy, channels padded to 128"),
                Option("scalar", g.rows * taps * g.channels * 2, "scalar MACs")]


@register
class BinaryKernel(Kernel):
    """Requantising Add or Mul (`eltwise.QBinary`)."""

    kind, spec_type = "binary", eltwise.QBinary
    emit = staticmethod(eltwise.binary_c)
    operands = staticmethod(_ab)

    reference = staticmethod(eltwise.binary_reference)

    def describe(self, spec: eltwise.QBinary) -> str:
        if spec.family == "hvx" and eltwise.binary_hvx_applies(spec):
            return f"HVX {spec.kind} (exact 32-bit lane requantisation)"
        return f"scalar C {spec.kind} (operands broadcast, or a multiplier ≥ 2^30)"


@register
class ClipKernel(Kernel):
    """Clamp on the quantised values (`eltwise.QClip`)."""

    kind, spec_type = "clip", eltwise.QClip
    emit = staticmethod(eltwise.clip_c)

    reference = staticmethod(eltwise.clip_reference)

    def describe(self, spec: object) -> str:
        return "HVX vmax/vmin"


@register
class PoolKernel(Kernel):
    """Max / average pooling (`eltwise.QPool`)."""

    kind, spec_type = "pool", eltwise.QPool
    emit = staticmethod(eltwise.pool_c)

    reference = staticmethod(eltwise.pool_reference)

    def describe(self, spec: eltwise.QPool) -> str:
        return f"HVX {spec.kind} (128 channels a vector)" if spec.family == "hvx" else f"scalar C {spec.kind}"


@register
class ConcatKernel(Kernel):
    """Channel concatenation requantising each input to the output's scale (`lower.QConcatRq`)."""

    kind, spec_type = "concat", QConcatRq
    emit = staticmethod(eltwise.concat_rq_c)
    operands = staticmethod(_numbered)

    def reference(self, spec: object, *inputs: np.ndarray) -> np.ndarray:
        return eltwise.concat_rq_reference(spec, list(inputs))

    def describe(self, spec: object) -> str:
        return ("HVX channel concat" if all(eltwise.multiplier_fits(m) for m in spec.multipliers)
                else "scalar C channel concat (a multiplier ≥ 2^30)")


@register
class SoftmaxKernel(Kernel):
    """Softmax over the last axis through an exp table (`lower.QSoftmax`)."""

    kind, spec_type = "softmax", QSoftmax
    emit = staticmethod(eltwise.softmax_c)


@register
class GatherKernel(Kernel):
    """A layout change ``y[i] = x[table[i]]`` (`fallback.Gather`); zero-byte elements alias."""

    kind, spec_type = "gather", fallback.Gather
    emit = staticmethod(fallback.gather_c)

    def reference(self, spec: fallback.Gather, *inputs: np.ndarray) -> np.ndarray:
        return inputs[0].reshape(-1)[spec.table]

    def describe(self, spec: fallback.Gather) -> str:
        what = "same bytes, no copy" if spec.element_bytes == 0 else "layout copy"
        return f"{'scalar C' if spec.element_bytes else 'alias'} ({what})"


@register
class DequantizeKernel(Kernel):
    """uint8 → float32 at the scalar float fallback's boundary (`fallback.Dequantize`)."""

    kind, spec_type, float_boundary = "dequant", fallback.Dequantize, True
    emit = staticmethod(fallback.dequantize_c)

    def reference(self, spec: fallback.Dequantize, *inputs: np.ndarray) -> np.ndarray:
        return (inputs[0].astype(np.int32) - spec.zero_point).astype(np.float32) * np.float32(spec.scale)

    def describe(self, spec: object) -> str:
        return "scalar C (float boundary of the fallback)"


@register
class QuantizeKernel(DequantizeKernel):
    """float32 → uint8, rounding half to even (`fallback.Quantize`)."""

    kind, spec_type = "quant", fallback.Quantize
    emit = staticmethod(fallback.quantize_c)

    def reference(self, spec: fallback.Quantize, *inputs: np.ndarray) -> np.ndarray:
        q = np.rint(inputs[0].astype(np.float32) / np.float32(spec.scale)) + spec.zero_point
        return np.clip(q, 0, 255).astype(np.uint8)


@register
class FloatKernel(Kernel):
    """One ONNX operator in scalar float C (`fallback.FloatOp`)."""

    kind, spec_type, float_boundary = "float", fallback.FloatOp, True
    emit = staticmethod(fallback.float_op_c)
    operands = staticmethod(_numbered)

    def label(self, spec: fallback.FloatOp) -> str:
        return spec.op

    def describe(self, spec: object) -> str:
        return "scalar C float fallback (no integer kernel)"
