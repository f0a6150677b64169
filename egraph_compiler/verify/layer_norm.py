"""The verifier's encoding of ONNX LayerNormalization (`= builtin layer_norm`).

| name | inputs | attributes | meaning |
|---|---|---|---|
| layer_norm | x, scale, b? | axis: int, epsilon: float | ``(x - μ) / sqrt(σ² + ε) · scale + b``, ``μ`` and ``σ²`` the mean and the (biased) variance over the axes ``axis ..= rank - 1`` |

The element is written as ONNX's own function body for the operator (opset 17):
``μ = Σ x / n``, ``σ² = Σ (x - μ)·(x - μ) / n`` over the normalised axes, then the
registry's Sub, Add, Sqrt, Div, Mul and Add on the result, so it is defined exactly
where the spelled-out form is (``σ² + ε > 0``; over the reals that is every input
when ``ε > 0``). ``scale`` and ``b`` broadcast onto the normalised shape only
(unidirectionally: a rank at most ``rank - axis``, each dim 1 or the input's).

The reductions are the encoder's (`Encoder.reduce`): the variance's body reads the
mean, a reduction nested in a reduction, which the induction modes encode as one
opaque value named by what it reduces (`Encoder._opaque_reduction`), the same value
a spelled-out ``ReduceMean(Sub(?x, ReduceMean(?x)) ...)`` nests. Modelled over the
reals only, like ``reduce_mean``: a rule that folds the spelled-out form is not
bit-exact (the kernel sums in another order).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import z3

from egraph_compiler.dsl import ast
from egraph_compiler.verify.builtin_ops import Builtin, OneAxis, Undefined
from egraph_compiler.verify.encode import Cell, Dims, Encoder, Illformed, Unsupported, project


class LayerNorm(OneAxis):
    name = "layer_norm"
    onnx = "LayerNormalization"
    reduces = True

    def out_rank(self, in_ranks: list[int], attrs: dict[str, Any]) -> int:
        if in_ranks[0] < 1:
            raise Illformed("LayerNormalization of a scalar")
        axis = self._axis(attrs, in_ranks[0])
        if any(r > in_ranks[0] - axis for r in in_ranks[1:]):
            raise Illformed("LayerNormalization scale/bias of a higher rank than the "
                            "normalised shape")
        return in_ranks[0]

    def shape(self, enc: Encoder, node: ast.POp, dims: list[Dims],
              attrs: dict[str, Any]) -> tuple[Dims, list[Any]]:
        x = dims[0]
        normalised = x[self._axis(attrs, len(x)):]
        wf: list[Any] = []
        for operand in dims[1:]:  # unidirectional broadcast onto the normalised shape
            for have, want in zip(reversed(operand), reversed(normalised), strict=False):
                wf.append(z3.Or(have == 1, have == want))
        return list(x), wf

    def value(self, enc: Encoder, node: ast.POp, attrs: dict[str, Any], idx: list[Any]) -> Cell:
        if enc.domain.name != "real":
            raise Unsupported("layer_norm is modelled over the reals only")
        x = node.inputs[0]
        dims, _ = enc.shape_of(x)
        axis = self._axis(attrs, len(dims))
        outer, extents = list(idx[:axis]), list(dims[axis:])
        # the count exactly as `Reduce` divides a ReduceMean over these axes by it
        size = math.prod(dims[k] for k in range(axis, len(dims)))
        count = z3.ToReal(z3.IntVal(size) if isinstance(size, int) else size)

        def ew(op: str, *operands: Cell) -> Cell:
            """The registry's elementwise operator ``op`` on cells (its `requires` too)."""
            defined = z3.And(*[d for _, d in operands])
            return enc.scalar_semantics(ast.POp(op, ()), enc.sems[op], [v for v, _ in operands],
                                        defined)

        def element(t: list[Any]) -> Cell:
            return enc.value_of(x, outer + list(t))

        mean_node = dataclasses.replace(node, op=f"{node.op}.mean")

        def mean() -> Cell:
            total, defined = enc.reduce(mean_node, outer, extents, element, "mean")
            return total / count, defined

        def squared_deviation(t: list[Any]) -> Cell:
            deviation = ew("Sub", element(t), mean())
            return ew("Mul", deviation, deviation)

        centre = ew("Sub", enc.value_of(x, list(idx)), mean())
        total, defined = enc.reduce(dataclasses.replace(node, op=f"{node.op}.variance"), outer,
                                    extents, squared_deviation, "mean")
        epsilon = (enc.scalar_const(attrs.get("epsilon", 1e-5)), z3.BoolVal(True))
        spread = ew("Sqrt", ew("Add", (total / count, defined), epsilon))
        out = ew("Div", centre, spread)
        for k, operand in enumerate(node.inputs[1:]):
            operand_dims, _ = enc.shape_of(operand)
            out = ew("Mul" if k == 0 else "Add", out,
                     enc.value_of(operand, project(operand_dims, list(idx))))
        return out

    def numpy(self, inputs: list[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        x = inputs[0]
        if x.ndim < 1:
            raise Illformed("LayerNormalization of a scalar")
        axes = tuple(range(self._axis(attrs, x.ndim), x.ndim))
        deviation = x - np.mean(x, axis=axes, keepdims=True)
        spread = np.mean(deviation * deviation, axis=axes, keepdims=True) + np.asarray(
            attrs.get("epsilon", 1e-5), dtype=x.dtype)
        if np.any(spread <= 0):
            raise Undefined("LayerNormalization of a constant row with epsilon <= 0")
        out = deviation / np.sqrt(spread) * inputs[1]
        if len(inputs) > 2 and inputs[2] is not None:
            out = out + inputs[2]
        return np.asarray(out, dtype=x.dtype)


NORM_BUILTINS: list[Builtin] = [LayerNorm()]
