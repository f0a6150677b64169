"""SoD² Rank and Dimension Propagation (seed 000 §5.4.1, Algorithm 2; seed 004 §4.1).

The lattice of one dim (or one element of a small int tensor's value), top to bottom:

    undef (⊤)  >  known constant (7) | symbolic constant (S) | op-inferred (S*B, (H-1)//2+1)  >  nac (⊥)

A tensor's fact is the product lattice over its dims: `UNDEF` (nothing known yet, not
even the rank), a tuple of dims, or `NAC` (no constant rank). `meet` is the usual
constant-propagation meet: undef ∧ x = x, x ∧ x = x, anything else is nac; tuples meet
dim by dim and tuples of different ranks meet to nac. `merge` is SoD²'s Merge transfer
of the outputs of control-flow branches (an ``If``'s two subgraphs) — dnnr's importer
does not take control flow yet, so only its unit tests call it today.

In `ir` terms: a value absent from the state's types, or typed with ``shape=None``, is
undef; a dim that is a fresh symbol (``d0, d1, ...``: a dim no transfer can express) is
nac; an int is known; one model symbol is symbolic; any other expression is op-inferred.

`solve` iterates the transfer functions to a fixpoint. Which transfer applies is the
dynamism class each operator declares in ``rules/operators.dnnr`` (seed 000 Table 5.2),
passed in as ``dynamism`` (op -> class): the classes decide when a forward transfer may
fire, what the output's value map is made of and which backward transfer exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from egraph_compiler.ir.dims import Dim, DimExpr, dim_add, dim_mul
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node, TensorType
from egraph_compiler.shapes import rules

# SoD² Table 5.2, as rules/operators.dnnr spells the classes (dsl/builtins.py documents them).
SHAPE_DETERMINED_OUTPUT = "shape_determined_output"  # Input Shape Determined Output (Shape)
SHAPE_DETERMINED = "shape_determined"  # Input Shape Determined Output Shape (Conv, Add)
SHAPE_VALUE_DETERMINED = "shape_value_determined"  # Input Shape & Value Determined Output Shape (Reshape)
EXECUTION_DETERMINED = "execution_determined"  # Execution Determined Output (NonZero, If)
# An operator the rule set does not declare (or a caller without a rule set): Table 5.2's
# most common class. Safe for any op: its backward transfers are op-specific inverses
# that exist only where the shape function is one-to-one, and its value map is the
# forward value propagation's, which knows only arithmetic and indexing ops.
UNDECLARED = SHAPE_DETERMINED


class _Undef:
    """⊤: no fact yet."""

    def __repr__(self) -> str:
        return "undef"


class _Nac:
    """⊥: not a constant."""

    def __repr__(self) -> str:
        return "nac"


UNDEF = _Undef()
NAC = _Nac()
Element = Dim | _Undef | _Nac  # one dim, or one element of a value map
Fact = tuple[Element, ...] | _Undef | _Nac  # a tensor's shape map or value map


def declared_classes(op_decls: Mapping[str, Any]) -> dict[str, str]:
    """op -> dynamism class of a rule set's ``op`` declarations (a dsl `RuleSet`'s ``ops``)."""
    return {name: str(decl.dynamism) for name, decl in op_decls.items()}


def is_fresh(name: str) -> bool:
    """A symbol the shape rules made up for a dim they cannot express (``d0``, ``d17``)."""
    return name.startswith("d") and name[1:].isdigit()


def kind(element: Element) -> str:
    """``undef`` | ``known`` | ``symbolic`` | ``op-inferred`` | ``nac`` (Figure 5.2)."""
    if element is UNDEF:
        return "undef"
    if element is NAC:
        return "nac"
    if isinstance(element, int):
        return "known"
    assert isinstance(element, DimExpr)
    if any(is_fresh(s) for s in element.symbols()):
        return "nac"
    if len(element.terms) == 1 and element.terms[0][1] == 1 and len(element.terms[0][0]) == 1 \
            and isinstance(element.terms[0][0][0][0], str) and element.terms[0][0][0][1] == 1:
        return "symbolic"
    return "op-inferred"


def meet(a: Element, b: Element) -> Element:
    """The meet of two lattice elements."""
    if a is UNDEF:
        return b
    if b is UNDEF:
        return a
    if a is NAC or b is NAC or kind(a) == "nac" or kind(b) == "nac":
        return NAC
    return a if a == b else NAC


def meet_fact(a: Fact, b: Fact) -> Fact:
    """The product-lattice meet of two tensor facts (rank first, then dim by dim)."""
    if a is UNDEF:
        return b
    if b is UNDEF:
        return a
    if a is NAC or b is NAC:
        return NAC
    assert isinstance(a, tuple) and isinstance(b, tuple)
    if len(a) != len(b):
        return NAC
    return tuple(meet(x, y) for x, y in zip(a, b, strict=True))


def merge(branches: Sequence[Fact]) -> Fact:
    """SoD²'s Merge transfer: the fact of a value that any of ``branches`` may produce."""
    merged: Fact = UNDEF
    for fact in branches:
        merged = meet_fact(merged, fact)
    return merged


class State(Protocol):
    """What `solve` needs of the shape walk's state (`infer._State`)."""

    types: dict[str, TensorType]
    values: dict[str, tuple[Dim, ...]]

    def forward(self, node: Node) -> None: ...

    def fresh(self) -> Dim: ...


def shape_fact(state: State, name: str) -> Fact:
    """The lattice fact of value ``name``'s shape."""
    known = state.types.get(name)
    if known is None or known.shape is None:
        return UNDEF
    return tuple(NAC if kind(d) == "nac" else d for d in known.shape)


def _defined(state: State, name: str) -> bool:
    known = state.types.get(name) if name else None
    return not name or (known is not None and known.shape is not None)


# ------------------------------------------------------------------ forward transfers
# Each returns True when it moved an output from undef to a fact. The shape itself is
# the op's forward rule (`rules.rule_for`); the class decides when it may fire and what
# the output's value map is made of.

def _forward_inputs_shapes(state: State, node: Node) -> bool:
    """Input Shape Determined Output / Output Shape: fire once every input shape is known
    (the value map of a Shape-like op is its input's dims: Algorithm 2, line 23)."""
    if not all(_defined(state, i) for i in node.inputs):
        return False
    return _fire(state, node)


def _forward_execution(state: State, node: Node) -> bool:
    """Execution Determined Output: the rule gives the rank and what is structural (NonZero's
    row count is the input's rank); the rest is nac, and so is the value map."""
    fired = _forward_inputs_shapes(state, node)
    for name in node.outputs:
        state.values.pop(name, None)
    return fired


def _fire(state: State, node: Node) -> bool:
    def facts() -> list[object]:
        return [(shape_fact(state, o), state.values.get(o)) for o in node.outputs if o]

    before = facts()
    state.forward(node)
    return facts() != before


FORWARD: dict[str, Callable[[State, Node], bool]] = {
    SHAPE_DETERMINED_OUTPUT: _forward_inputs_shapes,
    SHAPE_DETERMINED: _forward_inputs_shapes,
    # The value-carrying inputs' maps are ready with their shapes (a producer sets both);
    # the op's rule reads them, and a nac map gives nac dims.
    SHAPE_VALUE_DETERMINED: _forward_inputs_shapes,
    EXECUTION_DETERMINED: _forward_execution,
}


# ------------------------------------------------------------------ backward transfers
# F^bs: an undef input's shape (or value map) from the node's output facts. Each returns
# the facts it can establish, by input index; an input it cannot pin stays undef.

def _out(state: State, node: Node, index: int = 0) -> tuple[Dim, ...] | None:
    fact = shape_fact(state, node.outputs[index]) if index < len(node.outputs) and node.outputs[index] else UNDEF
    if not isinstance(fact, tuple):
        return None
    shape = state.types[node.outputs[index]].shape
    assert shape is not None
    return shape


def _backward_shape_output(state: State, node: Node) -> dict[int, tuple[Dim, ...]]:
    """Input Shape Determined Output: ``Shape(x)``'s value map is x's dims, so a known value
    map gives x's shape (x's rank and dims at once)."""
    out = node.outputs[0]
    if node.op == "Shape" and out in state.values and node.attr("start") in (None, 0) \
            and node.attr("end") is None:
        return {0: tuple(state.values[out])}
    return {}


def _backward_shape_determined(state: State, node: Node) -> dict[int, tuple[Dim, ...]]:
    """Input Shape Determined Output Shape: invert the shape function where it is one-to-one
    (same shape, a permutation, inserted/removed unit axes, concatenation, broadcasting
    where no other operand supplies a dim)."""
    out = _out(state, node)
    if out is None:
        return {}
    op = node.op
    if op in rules.SAME_SHAPE:
        return {0: out}
    if op == "Transpose":
        perm = node.attr("perm") or tuple(reversed(range(len(out))))
        inverse = [0] * len(perm)
        for i, p in enumerate(perm):
            inverse[p] = i
        return {0: tuple(out[i] for i in inverse)}
    if op == "Unsqueeze" and node.attr("axes") is not None:
        axes = {a % len(out) for a in node.attr("axes")}
        return {0: tuple(d for i, d in enumerate(out) if i not in axes)}
    if op == "Squeeze" and node.attr("axes") is not None:
        rank = len(out) + len(node.attr("axes"))
        axes = {a % rank for a in node.attr("axes")}
        dims = iter(out)
        return {0: tuple(1 if i in axes else next(dims) for i in range(rank))}
    if op == "Concat":
        return _backward_concat(state, node, out)
    if op in rules.BROADCAST:
        return _backward_broadcast(state, node, out)
    return {}


def _backward_concat(state: State, node: Node, out: tuple[Dim, ...]) -> dict[int, tuple[Dim, ...]]:
    missing = [i for i, name in enumerate(node.inputs) if name and not _defined(state, name)]
    if len(missing) != 1:
        return {}
    axis = int(node.attr("axis")) % len(out)
    rest: Dim = out[axis]
    for i, name in enumerate(node.inputs):
        if name and i != missing[0]:
            shape = state.types[name].shape
            assert shape is not None
            if len(shape) != len(out):
                return {}
            rest = dim_add(rest, dim_mul(shape[axis], -1))
    return {missing[0]: out[:axis] + (rest,) + out[axis + 1:]}


def _backward_broadcast(state: State, node: Node, out: tuple[Dim, ...]) -> dict[int, tuple[Dim, ...]]:
    """An operand must supply every output dim no other operand supplies (others are 1 or
    absent there); where another operand has the dim, this one may be 1 or it: unknown."""
    missing = [i for i, name in enumerate(node.inputs) if name and not _defined(state, name)]
    if len(missing) != 1:
        return {}
    others = [state.types[name].shape for i, name in enumerate(node.inputs) if name and i != missing[0]]
    for axis in range(len(out)):
        for shape in others:
            assert shape is not None
            offset = len(out) - len(shape)
            if axis >= offset and shape[axis - offset] != 1:
                return {}
    return {missing[0]: out}


def _backward_none(state: State, node: Node) -> dict[int, tuple[Dim, ...]]:
    """Input Shape & Value Determined / Execution Determined: the output shape says nothing
    about the data input's rank (Reshape, Expand, Range, NonZero): no backward transfer."""
    return {}


BACKWARD: dict[str, Callable[[State, Node], dict[int, tuple[Dim, ...]]]] = {
    SHAPE_DETERMINED_OUTPUT: _backward_shape_output,
    SHAPE_DETERMINED: _backward_shape_determined,
    SHAPE_VALUE_DETERMINED: _backward_none,
    EXECUTION_DETERMINED: _backward_none,
}


def _backward_value_from_shape(state: State, node: Node) -> dict[int, tuple[Dim, ...]]:
    """F^bv of an op whose output shape *is* an input's value map (``ConstantOfShape``,
    declared Input Shape & Value Determined here, Input Shape Determined Output in Table
    5.2): a known output shape is that input's value map."""
    if node.op != "ConstantOfShape" or not node.inputs or _defined(state, node.inputs[0]):
        return {}
    out = _out(state, node)
    return {} if out is None else {0: out}


BACKWARD_VALUE: dict[str, Callable[[State, Node], dict[int, tuple[Dim, ...]]]] = {
    SHAPE_DETERMINED_OUTPUT: _backward_value_from_shape,
    SHAPE_DETERMINED: _backward_none,
    SHAPE_VALUE_DETERMINED: _backward_value_from_shape,
    EXECUTION_DETERMINED: _backward_none,
}


# ------------------------------------------------------------------ the fixpoint

@dataclass
class RdpStats:
    """What one `solve` did: rounds until nothing changed, transfers that changed a fact."""

    rounds: int = 0
    forward: int = 0
    backward: int = 0


def solve(state: State, nodes: Sequence[Node], dynamism: Mapping[str, str] | None) -> RdpStats:
    """Algorithm 2: forward transfers in topological order, then backward transfers to
    undef predecessors, repeated until no fact changes. Every change moves a value from
    undef to a fact, so the number of rounds is bounded by the number of values."""
    stats = RdpStats()
    classes = {n.op: (dynamism or {}).get(n.op, UNDECLARED) for n in nodes}
    for node in nodes:  # round 0: every node's forward rule once (outputs start as undef)
        if all(_defined(state, i) for i in node.inputs):
            FORWARD[classes[node.op]](state, node)
        else:
            _forward_partial(state, node)
    changed = True
    while changed and stats.rounds <= len(nodes) + 1:
        stats.rounds += 1
        changed = False
        for node in reversed(nodes):
            if not node.outputs or not node.outputs[0]:
                continue
            filled = BACKWARD[classes[node.op]](state, node)
            for index, shape in filled.items():
                name = node.inputs[index]
                if name and not _defined(state, name):
                    dtype = state.types[name].dtype if name in state.types else "float32"
                    state.types[name] = TensorType(dtype, shape)
                    stats.backward += 1
                    changed = True
            for index, value in BACKWARD_VALUE[classes[node.op]](state, node).items():
                name = node.inputs[index]
                state.values[name] = value
                if not _defined(state, name):
                    state.types[name] = TensorType("int64", (len(value),))
                stats.backward += 1
                changed = True
        for node in nodes:
            if all(_defined(state, o) for o in node.outputs) and not _value_pending(state, node, classes):
                continue
            if FORWARD[classes[node.op]](state, node):
                stats.forward += 1
                changed = True
    return stats


def _forward_partial(state: State, node: Node) -> None:
    """A node with an undef input: its rule may still tell dtypes (and a rank); one that
    rejects the node may be wrong about a shape it has not seen, so its outputs stay
    undef until a backward transfer defines the input (then a rejection is the model's)."""
    try:
        state.forward(node)
    except ModelError:
        for name in node.outputs:
            if name and name not in state.types:
                source = state.types.get(node.inputs[0]) if node.inputs and node.inputs[0] else None
                state.types[name] = TensorType(source.dtype if source else "float32", None)


def _value_pending(state: State, node: Node, classes: Mapping[str, str]) -> bool:
    """An Input Shape Determined Output node whose value map is still undef though its input
    is typed (it was typed by a backward transfer after the node fired)."""
    return classes[node.op] == SHAPE_DETERMINED_OUTPUT and bool(node.outputs[0]) \
        and node.outputs[0] not in state.values and _defined(state, node.inputs[0])


def census(graph: Any, dynamism: Mapping[str, str] | None) -> dict[str, dict[str, int]]:
    """What RDP established for a typed graph: dims by lattice kind (``undef`` counts a
    value of unknown rank once), nodes by declared class, and by the class they act in
    once constants are propagated (SoD² §5.3: an Input Shape & Value Determined op whose
    value inputs are all known acts as Input Shape Determined Output Shape)."""
    dims: dict[str, int] = {k: 0 for k in ("known", "symbolic", "op-inferred", "nac", "undef")}
    for tensor_type in graph.types.values():
        if tensor_type.shape is None:
            dims["undef"] += 1
        for dim in tensor_type.shape or ():
            dims[kind(dim)] += 1
    declared: dict[str, int] = {}
    acting: dict[str, int] = {}
    for node in graph.nodes:
        cls = (dynamism or {}).get(node.op, UNDECLARED)
        declared[cls] = declared.get(cls, 0) + 1
        if cls == SHAPE_VALUE_DETERMINED and _values_known(graph, node):
            cls = SHAPE_DETERMINED
        acting[cls] = acting.get(cls, 0) + 1
    return {"dims": dims, "declared": dict(sorted(declared.items())), "acting": dict(sorted(acting.items()))}


def _values_known(graph: Any, node: Node) -> bool:
    """Every value-carrying input of ``node`` has a value map free of nac elements."""
    for index in rules.value_inputs(node.op):
        if index >= len(node.inputs) or not node.inputs[index]:
            continue
        value = graph.shape_values.get(node.inputs[index])
        if value is None or any(kind(v) == "nac" for v in value):
            return False
    return True
