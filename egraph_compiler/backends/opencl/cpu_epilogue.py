"""A CPU kernel's epilogue computed on a whole vector of outputs at once.

The CPU conv kernels (`cpu_window.py`'s ``conv-vec``) hold each output channel's
results as one ``floatN`` of consecutive output pixels (`cpu_channels.py`'s
``conv-channels``: one pixel's consecutive output channels, ``lane_dim`` 1), and emitted
their fused epilogue once per element: ``N`` scalar copies of the same expression,
which PoCL's LLVM left scalar. A Relu is a compare and a select per element, so it
hardly mattered; MobileNetV3's HardSwish, ``x · max(0, min(1, x / 6 + 0.5))``, is a
division among them, and its stem (16 channels × 112², conv-vec 16×16) ran 0.55 ms
against 0.21 ms with a Relu (PoCL here).

Here the spine is emitted once per output channel on the vector itself — the same
expressions (`emit.ValueEmitter` with ``vector`` set declares its float32 values
``floatN``; the spellings are OpenCL C that reads the same on vectors: arithmetic,
the built-ins, comparisons with ``?:``, which on vectors is a per-lane select), so
the operator's semantics are unchanged lane by lane: the division stays a division,
no reciprocal is substituted. Every value the spine reads besides the chain is either
the same for all the vector's lanes (a per-channel bias or scale, a scalar): such an operand is loaded once as a scalar and broadcast; one that
differs (a residual Add's other input) is gathered lane by lane into a vector. Only elementwise
float32 operators qualify (no index-changing operator, no comparison result, no
Cast/Where/Mod: their spellings are scalar-only or their types are not float). The
values the block stores are then written lane by lane (each lane's own address).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from egraph_compiler import ops
from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import _Gen
    from egraph_compiler.ir.graph import Node

# operators of the elementwise walk whose spelling is not vector C (or not float)
_SCALAR_ONLY = frozenset({"Cast", "IsInf", "Where", "Mod", "BitShift"})
LANE_NAMES = "0123456789abcdef"


def applies(gen: _Gen, lane_dim: int = 3) -> bool:
    """The block's epilogue can run on vectors whose lanes run along iteration dim
    ``lane_dim`` (3: an NCHW map's columns, 1: its channels): every spine node is a float32
    elementwise operator that `emit.ValueEmitter` spells without an index-changing
    handler and without a scalar-only helper (`spelling.SCALAR_HELPERS`: a trial
    emission says), and every operand it reads besides the chain is float32."""
    if _gathered(gen, lane_dim) is None:
        return False
    trial, pinned = Scope(), gen.em.pinned
    gen.em.vector = "float16"
    try:
        gen.em.pinned = {gen.anchor().outputs[0]: "v"}
        for n in gen.shape.spine:
            node = gen.view.nodes[n]
            gen.em.pinned[node.outputs[0]] = gen.em.node_value(
                trial, node, node.outputs[0], gen.shape.forward[node.outputs[0]])
    finally:
        gen.em.vector, gen.em.pinned = None, pinned
    text = "\n".join(trial.lines)
    return not any(name in text for name in sp.SCALAR_HELPERS)


def vector_node(gen: _Gen, node: Node) -> bool:
    """``node`` is a float32 elementwise operator whose spelling reads the same on
    vectors: no index-changing handler, not scalar-only, not bitwise."""
    info = ops.current().get(node.op)
    builtin = info.decl.builtin if info is not None else None
    return not hasattr(gen.em, f"_op_{node.op}") and node.op not in _SCALAR_ONLY and \
        builtin not in sp.BITWISE and gen.view.dtype(node.outputs[0]) == "float32"


def _gathered(gen: _Gen, lane_dim: int = 3) -> list[tuple[str, tuple[ix.IExpr, ...]]] | None:
    """The operands besides the chain that differ across the lanes (those indexed
    with iteration dim ``lane_dim``, a residual Add's other input), each with the index
    the spine reads it at; None where the epilogue cannot run on vectors."""
    lane_var = f"i{lane_dim}"
    gathered: list[tuple[str, tuple[ix.IExpr, ...]]] = []
    view, forward = gen.view, gen.shape.forward
    anchor_out = gen.anchor().outputs[0]
    if view.dtype(anchor_out) != "float32":
        return None
    for n in gen.shape.spine:
        node = view.nodes[n]
        out = node.outputs[0]
        if not vector_node(gen, node):
            return None
        for k, name in enumerate(node.inputs):
            if not name or name in forward:
                continue
            if view.dtype(name) != "float32":
                return None
            if node.op == "BatchNormalization" and k > 0:
                if lane_dim == 1:
                    return None  # its per-channel parameters differ across the lanes
                continue  # per-channel parameters (`emit._operands`)
            index = ix.broadcast_index(forward[out], tuple(view.shape(out)),
                                       tuple(view.shape(name)))
            used = set(re.findall(r"\bi\d+\b", " ".join(ix.render(e) for e in index)))
            if lane_var in used and (name, index) not in gathered:
                gathered.append((name, index))
    if not all(value == anchor_out or value in forward for value in gen.stores):
        return None
    return gathered


def vector_epilogue(gen: _Gen, scope: Scope, value: str, vector: str,
                    lane: Callable[[Scope, int], str | None], lane_dim: int = 3
                    ) -> dict[str, str]:
    """Emit the spine on ``value`` (a ``vector`` expression: the anchor's outputs of
    one channel, bias added) into ``scope``, where the iteration variables are
    declared; returns each stored value's vector variable. Call only where `applies`.
    An operand that differs across the lanes is gathered into a vector first, lane by
    lane: ``lane(scope, j)`` declares lane ``j``'s iteration variables in ``scope``
    and returns the condition that the lane is inside the output (None: always). The
    lanes run along iteration dim ``lane_dim`` (as `applies`)."""
    node = gen.anchor()
    lanes = int(vector.removeprefix("float"))
    for name, index in _gathered(gen, lane_dim) or ():
        var = gen.em.fresh("g")
        scope.emit(f"{vector} {var} = ({vector})(0.0f);")
        for j in range(lanes):
            inner = Scope(scope)
            inside = lane(inner, j)
            inner.emit(f"{var}.s{LANE_NAMES[j]} = {gen.em.value(inner, name, index)};")
            scope.nest(f"if ({inside})" if inside else "", inner)
        scope.memo[(name, index)] = var  # what the spine's operand walk looks up
    gen.em.vector = vector
    try:
        held = gen.em.assign(scope, "float32", value)
        gen.em.pinned = {node.outputs[0]: held}
        for n in gen.shape.spine:
            spine_node = gen.view.nodes[n]
            out = spine_node.outputs[0]
            gen.em.pinned[out] = gen.em.node_value(scope, spine_node, out, gen.shape.forward[out])
    finally:
        gen.em.vector = None
    return {name: gen.em.pinned[name] for name in gen.stores}


def store_vector(gen: _Gen, scope: Scope, value: str, vector: str,
                 lane: Callable[[Scope, int], str | None], count: int, lane_dim: int = 3) -> None:
    """`vector_epilogue` on ``value``, then its first ``count`` lanes stored one by
    one, each inside the output (``lane``'s condition)."""
    vectors = vector_epilogue(gen, scope, value, vector, lane, lane_dim)
    for j in range(count):
        store = Scope(scope)
        inside = lane(store, j)
        store_lane(gen, store, vectors, j)
        scope.nest(f"if ({inside})" if inside else "", store)


def store_lane(gen: _Gen, scope: Scope, vectors: dict[str, str], lane: int) -> None:
    """Write lane ``lane`` of each stored vector at its own address (the iteration
    variables of that lane declared in ``scope``)."""
    for name, store in gen.stores.items():
        offset = gen.store_offset(name, gen.shape.forward[name])
        scope.emit(gen.store_line(name, store, offset, f"{vectors[name]}.s{LANE_NAMES[lane]}"))
