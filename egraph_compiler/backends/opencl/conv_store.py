"""The store of a conv read as a GEMM: output element (channel ``co``, column ``n``) with
its bias and the block's epilogue, shared by `gemm.conv_problem` (``tiled``, ``sgemm``
on a conv) and `conv_gemm` (``conv-gemm``).

A column ``n`` is the output's (image, spatial…) position flattened with the spatial
dimensions fastest, as both read the conv (N = batch × OH × OW columns).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl.emit import Scope

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.gemm import ConvGeometry
    from egraph_compiler.backends.opencl.kernels import _Gen


def conv_store(gen: _Gen, geo: ConvGeometry, group_first: str | None
               ) -> Callable[[Scope, str, str, str], None]:
    """``store(scope, m, n, value)``: the epilogue of output element (``co``, column
    ``n``), where ``co`` is row ``m`` of the product, offset by ``group_first`` (the
    expression of the group's first output channel, ``b0 * Cout/g``, where the product's
    batch runs over groups; None: the product has no group batch)."""
    node = gen.anchor()
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    cout, out_sp = geo.out_shape[1], geo.out_shape[2:]

    def store(scope: Scope, m: str, n: str, value: str) -> None:
        scope.emit(f"const int co = {m};" if group_first is None else
                   f"const int co = {group_first} + {m};")
        scope.emit(f"int c = {n};")
        for d in reversed(range(geo.spatial)):
            scope.emit(f"const int o{d} = c % {out_sp[d]}; c /= {out_sp[d]};")
        scope.emit("const int nb = c;")
        if bias is not None:
            value = f"({value} + {gen.em.value(scope, bias, (gen.ivar('co', cout),))})"
        gen.declare_iteration(scope, (gen.ivar("nb", geo.out_shape[0]), gen.ivar("co", cout),
                                      *(gen.ivar(f"o{d}", out_sp[d]) for d in range(geo.spatial))))
        gen.epilogue(scope, value)

    return store
