"""The kernels of `index_ops` (run-time Gather, elementwise operators on integers),
registered beside `kinds` as `padding` is, so `lower` imports only their specs."""

from __future__ import annotations

import numpy as np

from egraph_compiler.backends.hexagon import index_ops
from egraph_compiler.backends.hexagon.index_ops import IntElementwise, Lookup, Take
from egraph_compiler.backends.hexagon.kinds import Kernel, _numbered, register
from egraph_compiler.backends.hexagon.lower import IntOp


@register
class TakeKernel(Kernel):
    """Gather at run-time int32 indices (`index_ops.Take`): a row copy, indices checked."""

    kind, spec_type = "take", Take
    emit = staticmethod(index_ops.take_c)
    reference = staticmethod(index_ops.take_reference)

    def operands(self, op: IntOp) -> list[str]:
        return ["x", "ids"]

    def describe(self, spec: Take) -> str:
        return f"scalar C (row copy of {spec.inner * spec.element_bytes} bytes per index, indices checked)"


@register
class IntElementwiseKernel(Kernel):
    """An elementwise operator on int32/bool/uint8 tensors (`index_ops.IntElementwise`)."""

    kind, spec_type = "int_eltwise", IntElementwise
    emit = staticmethod(index_ops.int_elementwise_c)
    operands = staticmethod(_numbered)
    reference = staticmethod(index_ops.int_elementwise_reference)

    def label(self, spec: IntElementwise) -> str:
        return spec.op

    def describe(self, spec: IntElementwise) -> str:
        return f"scalar C on {'/'.join(sorted(set(spec.input_types)))} (declared semantics)"


@register
class LookupKernel(Kernel):
    """A unary operator on uint8 through its 256-entry table (`index_ops.Lookup`)."""

    kind, spec_type = "lookup", Lookup
    emit = staticmethod(index_ops.lookup_c)

    def reference(self, spec: Lookup, *inputs: np.ndarray) -> np.ndarray:
        return spec.table[inputs[0].reshape(-1)]

    def describe(self, spec: Lookup) -> str:
        return "scalar C (256-entry table of DQ → operator → Q)"
