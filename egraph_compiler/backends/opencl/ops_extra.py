"""OpenCL code for the simple non-elementwise operators (``anchor indexed`` in
rules/operators.dnnr): each work item computes one output element from its index,
looping over the input elements it depends on, and the block's epilogue (fused
elementwise consumers) follows as for any anchor (`kernels._Gen.indexed`).

`GENERATORS` is the one place an operator is registered: name → a function that
emits the code of the element at ``out`` (the iteration variables) into ``scope``
and returns the C variable holding it. Operands are read through the block's value
emitter, so fused producers and chosen layouts apply. An operand the operator needs
as a compile-time constant (CumSum's axis, Trilu's k) that is not one is refused by
name, saying what would make it compile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_compiler.backends.opencl import ops_nn, ops_quant, ops_vision
from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.emit import Scope, ctype
from egraph_compiler.fusion import index as ix
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node

Index = tuple[ix.IExpr, ...]
Generator = Callable[[Any, Scope, Node, Index], str]  # (the kernel generator, scope, node, out)


def _constant_int(gen: Any, node: Node, position: int, what: str, default: int | None) -> int:
    name = node.inputs[position] if position < len(node.inputs) else ""
    if not name:
        if default is None:
            raise ModelError(f"node '{node.name}' ({node.op}): {what} is missing")
        return default
    value = gen.view.constants.get(name)
    if value is None:
        raise ModelError(f"node '{node.name}' ({node.op}): the OpenCL backend needs {what} "
                         f"('{name}') as a compile-time constant\n  hint: make it an initializer "
                         "or a value that folds from constants and static shapes")
    return int(np.asarray(value).reshape(-1)[0])


def _axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ModelError(f"node '{node.name}' ({node.op}): axis {axis} is out of range for rank {rank}")
    return axis % rank


def _with_axis(index: Index, axis: int, value: ix.IExpr) -> Index:
    return tuple(value if k == axis else v for k, v in enumerate(index))


def _loop_var(name: str, size: int) -> ix.IExpr:
    return ix.IVar(name, 0, size - 1) if size > 1 else 0


def _zero(dtype: str) -> str:
    return sp.literal(0, dtype)


def _runtime_scalar(gen: Any, scope: Scope, node: Node, position: int) -> str | None:
    """The C value of operand ``position`` read in the kernel when it is given at run time
    (not a constant), else None. For scalars that only enter index arithmetic (issue 17)."""
    name = node.inputs[position] if position < len(node.inputs) else ""
    if not name or name in gen.view.constants:
        return None
    return f"(long)({gen.em.value(scope, name, tuple(0 for _ in gen.view.shape(name)))})"


def _cumsum(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """CumSum: the sum of x along axis up to (or, reversed, from) the element. An axis
    given at run time picks one of the rank's loops in the kernel."""
    x = node.inputs[0]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    acc = gen.em.fresh("acc")
    scope.emit(f"{ctype(dtype)} {acc} = {_zero(dtype)};")
    runtime = _runtime_scalar(gen, scope, node, 1)
    if runtime is None:
        _cumsum_along(gen, scope, node, out, _axis(node, _constant_int(gen, node, 1, "the axis", None),
                                                   len(shape)), acc)
        return acc
    picked = gen.em.fresh("ax")
    scope.emit(f"int {picked} = (int){runtime}; if ({picked} < 0) {picked} += {len(shape)};")
    for axis in range(len(shape)):
        branch = scope.child()
        _cumsum_along(gen, branch, node, out, axis, acc)
        scope.nest(f"{'else ' if axis else ''}if ({picked} == {axis})", branch)
    return acc


def _cumsum_along(gen: Any, scope: Scope, node: Node, out: Index, axis: int, acc: str) -> None:
    x = node.inputs[0]
    n = gen.view.shape(x)[axis]
    here = ix.render(out[axis])
    compare = ">" if node.attr("reverse", 0) else "<"
    compare += "" if node.attr("exclusive", 0) else "="
    body = scope.child()
    value = gen.em.value(body, x, _with_axis(out, axis, _loop_var("r", n)))
    body.emit(f"if (r {compare} {here}) {acc} += {value};")
    scope.nest(f"for (int r = 0; r < {n}; ++r)", body)


def _trilu(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """Trilu: x where the column minus the row is >= k (upper) or <= k (lower), else 0."""
    x = node.inputs[0]
    dtype = gen.view.dtype(x)
    k = _runtime_scalar(gen, scope, node, 1) or _constant_int(gen, node, 1, "the diagonal k", 0)
    row, col = ix.render(out[-2]), ix.render(out[-1])
    keep = f"(({col}) - ({row}) {'>=' if node.attr('upper', 1) else '<='} {k})"
    value = gen.em.value(scope, x, out)
    return gen.em.assign(scope, dtype, f"({keep} ? {value} : {_zero(dtype)})")


def _hardmax(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """Hardmax: 1 at the first maximum along axis, 0 elsewhere."""
    x = node.inputs[0]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    axis = _axis(node, int(node.attr("axis", -1)), len(shape))
    best, at = gen.em.fresh("best"), gen.em.fresh("at")
    scope.emit(f"{ctype(dtype)} {best} = {_zero(dtype)}; int {at} = 0;")
    body = scope.child()
    value = gen.em.value(body, x, _with_axis(out, axis, _loop_var("r", shape[axis])))
    body.emit(f"if (r == 0 || {value} > {best}) {{ {best} = {value}; {at} = r; }}")
    scope.nest(f"for (int r = 0; r < {shape[axis]}; ++r)", body)
    one = sp.literal(1, dtype)
    return gen.em.assign(scope, dtype, f"({at} == {ix.render(out[axis])} ? {one} : {_zero(dtype)})")


def _lp_normalization(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """LpNormalization: x over its L1 (p=1) or L2 (p=2) norm along axis (1 where it is 0)."""
    x = node.inputs[0]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    if not dtype.startswith("float"):
        raise ModelError(f"node '{node.name}' (LpNormalization): {dtype} is not a float type")
    axis = _axis(node, int(node.attr("axis", -1)), len(shape))
    p = int(node.attr("p", 2))
    if p not in (1, 2):
        raise ModelError(f"node '{node.name}' (LpNormalization): p={p} (ONNX allows 1 or 2)")
    acc = gen.em.fresh("norm")
    scope.emit(f"{ctype(dtype)} {acc} = {_zero(dtype)};")
    body = scope.child()
    value = gen.em.value(body, x, _with_axis(out, axis, _loop_var("r", shape[axis])))
    body.emit(f"{acc} += {'fabs(' + value + ')' if p == 1 else f'{value} * {value}'};")
    scope.nest(f"for (int r = 0; r < {shape[axis]}; ++r)", body)
    norm = acc if p == 1 else f"sqrt({acc})"
    norm = f"({acc} == 0 ? {sp.literal(1, dtype)} : {norm})"  # a zero line stays zero (ONNX's reference)
    return gen.em.assign(scope, dtype, f"({gen.em.value(scope, x, out)} / {norm})")


def _element_index(gen: Any, scope: Scope, node: Node, indices: str, at: Index, size: int) -> str:
    """The int index read from ``indices`` at ``at``, negative values counted from ``size``."""
    raw = gen.em.value(scope, indices, at)
    var = gen.em.fresh("g")
    scope.emit(f"int {var} = (int)({raw}); if ({var} < 0) {var} += {size};")
    return var


def _gather_elements(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """GatherElements: x at the element's index with axis replaced by indices' value."""
    x, indices = node.inputs[:2]
    shape = gen.view.shape(x)
    axis = _axis(node, int(node.attr("axis", 0)), len(shape))
    where = _element_index(gen, scope, node, indices, out, shape[axis])
    # `where` is in range for a valid model (ONNX: indices within [-s, s-1])
    return gen.em.value(scope, x, _with_axis(out, axis, ix.IVar(where, 0, shape[axis] - 1)))


_SCATTER_REDUCTIONS = {"none": "{u}", "add": "{a} + {u}", "mul": "{a} * {u}",
                       "max": "({a} > {u} ? {a} : {u})", "min": "({a} < {u} ? {a} : {u})"}


def _scatter_elements(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """ScatterElements: data, with each update whose target is this element applied in
    order (the updates of this element's line along axis are the only candidates)."""
    data, indices, updates = node.inputs[:3]
    shape, dtype = gen.view.shape(data), gen.view.dtype(data)
    upd_shape = gen.view.shape(updates)
    axis = _axis(node, int(node.attr("axis", 0)), len(shape))
    reduction = str(node.attr("reduction", "none"))
    if reduction not in _SCATTER_REDUCTIONS:
        raise ModelError(f"node '{node.name}' (ScatterElements): reduction '{reduction}' is not ONNX's")
    acc = gen.em.fresh("acc")
    scope.emit(f"{ctype(dtype)} {acc} = {gen.em.value(scope, data, out)};")
    inside = [f"{ix.render(out[d])} < {upd_shape[d]}" for d in range(len(shape))
              if d != axis and upd_shape[d] < shape[d]]
    body = scope.child()
    at = _with_axis(out, axis, _loop_var("r", upd_shape[axis]))
    target = _element_index(gen, body, node, indices, at, shape[axis])
    update = gen.em.value(body, updates, at)
    body.emit(f"if ({target} == {ix.render(out[axis])}) "
              f"{acc} = {_SCATTER_REDUCTIONS[reduction].format(a=acc, u=update)};")
    loop = Scope(scope)
    loop.nest(f"for (int r = 0; r < {upd_shape[axis]}; ++r)", body)
    if inside:
        scope.nest(f"if ({' && '.join(inside)})", loop)
    else:
        scope.lines.extend(loop.lines)
    return acc


def _scatter_nd(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """ScatterND: data, with each update row whose index tuple addresses this element's
    leading axes applied in order (its value at the element's trailing axes)."""
    data, indices, updates = node.inputs[:3]
    shape, dtype = gen.view.shape(data), gen.view.dtype(data)
    idx_shape = gen.view.shape(indices)
    depth = idx_shape[-1]
    rows = int(np.prod(idx_shape[:-1], dtype=np.int64))
    reduction = str(node.attr("reduction", "none"))
    if reduction not in _SCATTER_REDUCTIONS:
        raise ModelError(f"node '{node.name}' (ScatterND): reduction '{reduction}' is not ONNX's")
    acc = gen.em.fresh("acc")
    scope.emit(f"{ctype(dtype)} {acc} = {gen.em.value(scope, data, out)};")
    body = scope.child()
    row = ix.delinearize(_loop_var("r", rows), tuple(idx_shape[:-1]))
    hits = []
    for d in range(depth):
        target = _element_index(gen, body, node, indices, (*row, d), shape[d])
        hits.append(f"{target} == {ix.render(out[d])}")
    update = gen.em.value(body, updates, (*row, *out[depth:]))
    body.emit(f"if ({' && '.join(hits) or '1'}) "
              f"{acc} = {_SCATTER_REDUCTIONS[reduction].format(a=acc, u=update)};")
    scope.nest(f"for (int r = 0; r < {rows}; ++r)", body)
    return acc


def _einsum(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """Einsum: the sum over the contracted letters of the product of the operands."""
    equation = str(node.attr("equation")).replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if "..." in equation or len(terms) != len(node.inputs):
        raise ModelError(f"node '{node.name}' (Einsum): equation '{equation}' (an ellipsis) is "
                         "not supported by the OpenCL backend")
    if not arrow:  # implicit output: the letters used once, in alphabetical order
        rhs = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    sizes: dict[str, int] = {}
    for term, name in zip(terms, node.inputs, strict=True):
        for letter, size in zip(term, gen.view.shape(name), strict=True):
            sizes[letter] = max(sizes.get(letter, 1), size)
    contracted = sorted(set(lhs) - set(rhs) - {","})
    dtype = gen.view.dtype(node.outputs[0])
    acc = gen.em.fresh("acc")
    scope.emit(f"{ctype(dtype)} {acc} = {_zero(dtype)};")
    total = int(np.prod([sizes[c] for c in contracted], dtype=np.int64)) if contracted else 1
    body = scope.child()
    inner = ix.delinearize(_loop_var("r", total), tuple(sizes[c] for c in contracted))
    letters = {c: out[k] for k, c in enumerate(rhs)} | dict(zip(contracted, inner, strict=True))
    factors = []
    for term, name in zip(terms, node.inputs, strict=True):
        shape = gen.view.shape(name)
        at = tuple(letters[c] if size > 1 else 0 for c, size in zip(term, shape, strict=True))
        factors.append(gen.em.value(body, name, at))
    body.emit(f"{acc} += {' * '.join(factors)};")
    scope.nest(f"for (int r = 0; r < {total}; ++r)", body)
    return acc


GENERATORS: dict[str, Generator] = {
    "ScatterND": _scatter_nd,
    "Einsum": _einsum,
    "CumSum": _cumsum,
    "Trilu": _trilu,
    "Hardmax": _hardmax,
    "LpNormalization": _lp_normalization,
    "GatherElements": _gather_elements,
    "ScatterElements": _scatter_elements,
}
GENERATORS.update(ops_vision.GENERATORS)  # the vision and indexing operators (issue 17)
GENERATORS.update(ops_nn.GENERATORS)  # ConvTranspose, TopK, DepthToSpace, SpaceToDepth
GENERATORS.update(ops_quant.GENERATORS)  # MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv


def generate(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """The C variable holding ``node``'s output element at ``out``."""
    generator = GENERATORS.get(node.op)
    if generator is None:
        raise ModelError(f"node '{node.name}' ({node.op}) is declared `anchor indexed` but "
                         "backends/opencl/ops_extra.py has no generator for it")
    return generator(gen, scope, node, out)


# -- issue 17 item 6 (helper opsa) ---------------------------------------------------------------
def _reverse_sequence(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """ReverseSequence: x with the first sequence_lens[b] steps of each time line reversed
    (the element at step t < len reads step len - 1 - t; later steps read themselves)."""
    x, lengths = node.inputs[:2]
    shape = gen.view.shape(x)
    time_axis = _axis(node, int(node.attr("time_axis", 0)), len(shape))
    batch_axis = _axis(node, int(node.attr("batch_axis", 1)), len(shape))
    raw = gen.em.value(scope, lengths, (out[batch_axis],))
    length, source = gen.em.fresh("len"), gen.em.fresh("src")
    step = ix.render(out[time_axis])
    # a valid model's lengths are in [0, steps]: the source step stays in range
    scope.emit(f"int {length} = (int)({raw}); "
               f"int {source} = ({step}) < {length} ? {length} - 1 - ({step}) : ({step});")
    return gen.em.value(scope, x, _with_axis(out, time_axis, ix.IVar(source, 0, shape[time_axis] - 1)))


# A work item keeps one whole matrix in private memory: past this size Det is refused.
DET_MAX_SIZE = 32


def _det(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """Det: Gaussian elimination with partial pivoting of one matrix per work item (the
    determinant is the product of the pivots, negated per row swap)."""
    x = node.inputs[0]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    size = shape[-1]
    if not dtype.startswith("float"):
        raise ModelError(f"node '{node.name}' (Det): {dtype} is not a float type")
    if size > DET_MAX_SIZE:
        raise ModelError(f"node '{node.name}' (Det): {size}x{size} matrices exceed the OpenCL "
                         f"kernel's private-memory bound of {DET_MAX_SIZE}x{DET_MAX_SIZE}\n"
                         "  hint: compile this model for the onnx target")
    c = ctype(dtype)
    a, det, k, i, j, p, t = (gen.em.fresh(n) for n in ("m", "det", "k", "i", "j", "p", "t"))
    scope.emit(f"{c} {a}[{size * size}];")
    body = scope.child()
    row, col = ix.delinearize(_loop_var("r", size * size), (size, size))
    body.emit(f"{a}[r] = {gen.em.value(body, x, (*out, row, col))};")
    scope.nest(f"for (int r = 0; r < {size * size}; ++r)", body)
    n = size
    scope.emit(f"{c} {det} = {sp.literal(1, dtype)};")
    scope.emit(
        f"for (int {k} = 0; {k} < {n}; ++{k}) {{ int {p} = {k}; "
        f"for (int {i} = {k} + 1; {i} < {n}; ++{i}) "
        f"if (fabs({a}[{i} * {n} + {k}]) > fabs({a}[{p} * {n} + {k}])) {p} = {i}; "
        f"if ({p} != {k}) {{ {det} = -{det}; for (int {j} = 0; {j} < {n}; ++{j}) {{ "
        f"{c} {t} = {a}[{k} * {n} + {j}]; {a}[{k} * {n} + {j}] = {a}[{p} * {n} + {j}]; "
        f"{a}[{p} * {n} + {j}] = {t}; }} }} "
        f"{det} *= {a}[{k} * {n} + {k}]; "
        f"if ({a}[{k} * {n} + {k}] != 0) for (int {i} = {k} + 1; {i} < {n}; ++{i}) {{ "
        f"{c} {t} = {a}[{i} * {n} + {k}] / {a}[{k} * {n} + {k}]; "
        f"for (int {j} = {k} + 1; {j} < {n}; ++{j}) {a}[{i} * {n} + {j}] -= {t} * {a}[{k} * {n} + {j}]; }} }}")
    return det


GENERATORS.update({"ReverseSequence": _reverse_sequence, "Det": _det})


def _constant_ints(gen: Any, node: Node, position: int, what: str) -> list[int]:
    value = gen.view.constants.get(node.inputs[position])
    if value is None:
        raise ModelError(f"node '{node.name}' ({node.op}): the OpenCL backend needs {what} "
                         f"('{node.inputs[position]}') as a compile-time constant (the output "
                         "shape is its value)\n  hint: make it an initializer")
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _col2im(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """Col2Im: the sum of the column entries that land on this pixel. Block offset k puts
    column l of a dim on pixel p = l * stride - pad_begin + k * dilation."""
    x = node.inputs[0]
    dtype = gen.view.dtype(x)
    image = _constant_ints(gen, node, 1, "image_shape")
    block = _constant_ints(gen, node, 2, "block_shape")
    dims = len(image)
    strides = list(node.attr("strides") or [1] * dims)
    dilations = list(node.attr("dilations") or [1] * dims)
    pads = list(node.attr("pads") or [0] * (2 * dims))
    columns = [(image[i] + pads[i] + pads[i + dims] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1
               for i in range(dims)]
    per_block = int(np.prod(block))
    acc = gen.em.fresh("acc")
    scope.emit(f"{ctype(dtype)} {acc} = {_zero(dtype)};")
    body = scope.child()
    offsets = ix.delinearize(_loop_var("r", per_block), tuple(block))
    column, valid = gen.em.fresh("col"), gen.em.fresh("ok")
    body.emit(f"int {column} = 0; int {valid} = 1;")
    for i in range(dims):
        q = gen.em.fresh("q")
        body.emit(f"int {q} = ({ix.render(out[2 + i])}) + {pads[i]} - ({ix.render(offsets[i])}) * {dilations[i]};")
        body.emit(f"{valid} = {valid} && {q} >= 0 && {q} % {strides[i]} == 0 && "
                  f"{q} / {strides[i]} < {columns[i]};")
        body.emit(f"{column} = {column} * {columns[i]} + ({q} >= 0 ? {q} / {strides[i]} : 0);")
    channel = gen.em.fresh("ch")
    body.emit(f"int {channel} = ({ix.render(out[1])}) * {per_block} + r;")
    inside = body.child()
    total = int(np.prod(columns))
    value = gen.em.value(inside, x, (out[0], ix.IVar(channel, 0, gen.view.shape(x)[1] - 1),
                                     ix.IVar(column, 0, total - 1)))
    inside.emit(f"{acc} += {value};")
    body.nest(f"if ({valid})", inside)
    scope.nest(f"for (int r = 0; r < {per_block}; ++r)", body)
    return acc


GENERATORS["Col2Im"] = _col2im
