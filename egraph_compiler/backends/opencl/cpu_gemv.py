"""A one-row product (M = 1) against constant weights, each work-item streaming its own
packed block of them: the ``gemv-packed`` option (CPU devices only).

The ``direct`` kernel's 1 × 16 block (`cost.options`, ``gemv_columns``) reads, per k
step, 16 consecutive columns of B's row k: a work-item walks the whole weight matrix at
a stride of a row (4 KB for MobileNetV3's 1024 → 1000 classifier), one 64-byte line per
page, and its 63 work-items fit one work-group, so one PoCL thread runs it all. Here the
weights are *packed* at generation as ``[N/columns][K][columns]`` (columns zero-padded
to whole blocks): a work-item's weights are one contiguous run, read in order as
``float{columns}`` vectors, one multiply-add of the broadcast A element each, and the
grid is cut into several work-groups (`cpu_window.vec_group`) so every thread takes
some. The epilogue runs per output element (a row has at most ``columns`` of them per
work-item).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.backends.opencl import gemm
from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.cpu_window import vec_group
from egraph_compiler.backends.opencl.depthwise import cdiv
from egraph_compiler.backends.opencl.emit import Scope

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

VARIANT = "gemv-packed"


@dataclass(frozen=True)
class PackedGemv:
    """``gemv-packed`` parameters: output columns per work-item (one ``float{columns}``
    accumulator)."""

    columns: int = 16

    def describe(self) -> str:
        return f"{VARIANT} {self.columns}"


PACKED_GEMVS = (PackedGemv(16),)  # 8 columns measured 7-15 % slower (`cost`)


def applies(gen: _Gen) -> bool:
    """A MatMul/Gemm of one row (M = 1, no batch) at bound sizes whose B is a 2-D
    float32 constant read by this block only.

    Symbolic sizes (`SymInt`, even where a version makes them 1) are refused before
    any comparison: the kernel declares no row or batch index, which the views of a
    symbolic build still reference."""
    node = gen.anchor()
    b_name = node.inputs[1]
    weights = gen.view.constants.get(b_name)
    _, sizes = gemm.matmul_problem(gen)
    bound = all(type(sizes[d]) is int for d in ("m", "batch", "n", "k"))
    return bound and weights is not None and np.asarray(weights).dtype == np.float32 and \
        np.ndim(weights) == 2 and gen.single_use(b_name) and sizes["m"] == 1 and \
        sizes["batch"] == 1


def gemv_packed(gen: _Gen, params: PackedGemv) -> Kernel | None:
    """The kernel, or None where it does not apply (`applies`)."""
    if not applies(gen) or params.columns not in (2, 4, 8, 16):
        return None
    node = gen.anchor()
    b_name = node.inputs[1]
    trans_b = node.op == "Gemm" and bool(node.attr("transB", 0))
    problem, sizes = gemm.matmul_problem(gen)
    n_size, k_size, columns = sizes["n"], sizes["k"], params.columns
    weights = np.asarray(gen.view.constants[b_name])
    packed = gen.derive(b_name, _packed(weights if trans_b else weights.T, columns),
                        f"g{columns}")
    total = cdiv(n_size, columns)
    vec = f"float{columns}"
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    s.emit(f"__global const float* wk = {gen.em.params[packed]} + gid * {k_size * columns};")
    s.emit(f"{vec} acc = ({vec})(0.0f);")
    step = Scope(s)
    problem.a.setup(step, "a", "0")
    value = problem.a.load(step, "a", "0", "k")
    # a pointer cast, not vload: PoCL's vloadN is an out-of-line call (like its mad);
    # every block starts a whole vector into the packed constant
    step.emit(f"acc = {sp.multiply_add(f'({vec})({value})', f'*(__global const {vec}*)(wk + k * {columns})', 'acc')};")
    s.nest(f"for (int k = 0; k < {k_size}; ++k)", step)
    lanes = "0123456789abcdef"
    for j in range(columns):
        fin = Scope(s)
        fin.emit(f"const int nn = gid * {columns} + {j};")
        done = Scope(fin)
        problem.store(done, "m", "nn", f"acc.s{lanes[j]}")
        fin.nest(f"if (nn < {n_size})" if n_size % columns else "", done)
        s.nest("", fin)
    return gen.finish(s, total, vec_group(total, gen.params.work_group))


def _packed(weights: np.ndarray, columns: int) -> np.ndarray:
    """``[N][K]`` as ``[N/columns][K][columns]``, N zero-padded to whole blocks."""
    n = weights.shape[0]
    padded = cdiv(n, columns) * columns
    if padded > n:
        weights = np.concatenate([weights, np.zeros((padded - n, weights.shape[1]), weights.dtype)])
    blocks = weights.reshape(padded // columns, columns, weights.shape[1])
    return np.ascontiguousarray(np.moveaxis(blocks, 1, -1))
