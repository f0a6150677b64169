"""A sum over each row's trailing elements on explicit vectors (CPU devices only).

The generic serial reduction (`kernels._Gen.reduce`) gives a work-item one output and
walks its row with scalar loads; PoCL vectorises a work-group's items only when their
addresses are consecutive in the item's id, and rows are a row apart, so the loop stays
scalar (MobileNetV3-small's GlobalAveragePools: 16 × 56² 0.021-0.029 ms, 576 × 7²
0.010-0.014, against onnxruntime's 0.006 and 0.004). Here a work-item sums its row as
``float16`` unaligned vector loads into a few vector accumulators (independent add
chains), then the lanes and the row's last ``length % 16`` elements: 16 × 56² ran
0.0015 ms, 240 × 14² 0.0023, 576 × 7² 0.0021-0.0031 in the prototype on PoCL's calling
thread here. It applies where the row is contiguous in memory (the reduced axes are the
input's trailing ones, stored in the default layout) and read as it is (no prologue
fused into the block evaluates per element), and only to sums (GlobalAveragePool,
ReduceMean, ReduceSum): the vector adds reassociate the sum, as the work-group tree
reduction already does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.cpu_window import vec_group
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

LANES = 16
SUMS = frozenset({"GlobalAveragePool", "ReduceMean", "ReduceSum"})


def applies(gen: _Gen, x_name: str, axes: tuple[int, ...]) -> bool:
    """A CPU-class bound sum over the trailing axes of a block input read as stored
    (not where `KernelParams.row_split` forces the split form)."""
    node = gen.anchor()
    shape = gen.view.shape(x_name)
    rank = len(shape)
    produced = {o for n in gen.block.nodes for o in gen.view.nodes[n].outputs}
    return gen.params.device == "cpu" and not gen.params.shape_stable and \
        gen.params.row_split is None and \
        node.op in SUMS and axes == tuple(range(rank - len(axes), rank)) and \
        all(isinstance(d, int) for d in shape) and x_name in gen.em.params and \
        x_name not in produced and gen.em.layouts.get(x_name) is None and \
        gen.view.dtype(x_name) == "float32" and x_name not in gen.view.constants


def row_sum(gen: _Gen, x_name: str, axes: tuple[int, ...], final: str) -> Kernel | None:
    """The kernel, or None where it does not apply (the caller keeps its own forms);
    ``final`` spells the result from the sum and the count (`kernels._REDUCERS`)."""
    if not applies(gen, x_name, axes):
        return None
    shape = gen.view.shape(x_name)
    out_shape = gen.view.shape(gen.anchor().outputs[0])
    length = 1
    for a in axes:
        length *= shape[a]
    if length < LANES:
        return None
    rows = 1
    for d in out_shape:
        rows *= d
    # independent add chains: a vector add's latency over its throughput
    chains = 4 if length >= 64 * LANES else 2 if length >= 4 * LANES else 1
    whole = length // LANES * LANES
    step = chains * LANES
    gen.helpers.append(sp.UNALIGNED_FLOAT16_HELPER)
    vec = sp.UNALIGNED_FLOAT16
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {rows}) return;")
    s.emit(f"__global const float* row = {gen.em.params[x_name]} + gid * {length};")
    s.emit(" ".join(f"float16 v{c} = (float16)(0.0f);" for c in range(chains)))
    s.emit("int e = 0;")
    body = Scope(s)
    for c in range(chains):
        body.emit(f"v{c} += *(__global const {vec}*)(row + e + {c * LANES});")
    s.nest(f"for (; e + {step} <= {whole}; e += {step})", body)
    if chains > 1:
        rest = Scope(s)
        rest.emit(f"v0 += *(__global const {vec}*)(row + e);")
        s.nest(f"for (; e < {whole}; e += {LANES})", rest)
    total = " + ".join(f"v{c}" for c in range(chains))
    s.emit(f"const float16 v = {total};")
    s.emit("const float8 h8 = v.lo + v.hi; const float4 h4 = h8.lo + h8.hi; "
           "const float2 h2 = h4.lo + h4.hi; float sum = h2.x + h2.y;")
    for j in range(whole, length):
        s.emit(f"sum += row[{j}];")
    gen.declare_iteration(s, ix.delinearize(gen.ivar("gid", rows), out_shape))
    gen.epilogue(s, final.format("sum", float(length)))
    return gen.finish(s, rows, vec_group(rows, gen.params.work_group))
