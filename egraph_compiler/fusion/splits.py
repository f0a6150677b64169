"""A Split whose pieces go to different kernels, as one Slice per piece (GPU class).

GPT-2's attention splits its fused QKV projection with one Split: a node with three
outputs, read by two different MatMul blocks (Q and K by the scores, V by the
context). A multi-output node cannot be a prologue of either (the other block needs
its other outputs), so the Split (with the head Reshape/Transpose and the 1/√d scale)
was a kernel of its own that read the projection and wrote it again in three pieces:
0.031 ms per layer at batch 8 on an H200. As three Slices each piece is one-to-one
index arithmetic (a layout operator) that its own reader fuses as a prologue, as BERT's
merged projections already are (`fusion.projections`). The planner keeps the sliced
graph only where its plan has fewer kernels (`planner.plan_blocks`).
"""

from __future__ import annotations

from dataclasses import replace

from egraph_compiler.fusion.tables import role_of
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.graph import Graph, Node


def split_as_slices(graph: Graph) -> Graph:
    """``graph`` with every Split of a static shape replaced by one Slice per output
    it uses (its sizes along the axis from the outputs' inferred shapes); ``graph``
    itself when it has none. A chain of layout operators that feeds only the Split
    (GPT-2: the Reshape of the projection's ``[B·T, 3C]`` to ``[B, T, 3C]``) is copied
    once per piece: shared, it would be a kernel of its own (a prologue value one
    block cannot keep from the others)."""
    view = GraphView(graph)
    nodes: list[Node] = []
    types = dict(graph.types)
    dropped: set[int] = set()
    added: dict[int, list[Node]] = {}
    for n, node in enumerate(graph.nodes):
        pieces = _pieces(graph, node) if node.op == "Split" else None
        if pieces is None:
            continue
        axis, sizes = pieces
        chain = _feeding_chain(view, node.inputs[0])
        dropped |= {n, *chain}
        start, replacement = 0, []
        for k, (output, size) in enumerate(zip(node.outputs, sizes, strict=True)):
            source = view.graph.nodes[chain[-1]].inputs[0] if chain else node.inputs[0]
            for c in reversed(chain):  # the chain's own copy for this piece
                link = view.nodes[c]
                copy = f"{link.outputs[0]}/piece{k}"
                types[copy] = graph.types[link.outputs[0]]
                replacement.append(replace(link, inputs=(source, *link.inputs[1:]), outputs=(copy,),
                                           name=f"{link.name or copy}/piece{k}"))
                source = copy
            replacement.append(Node("Slice", (source,), (output,), (
                ("axes", (axis,)), ("ends", (start + size,)), ("starts", (start,)),
                ("steps", (1,))), name=f"{node.name or output}/slice{k}"))
            start += size
        added[n] = replacement
    if not added:
        return graph
    for n, node in enumerate(graph.nodes):
        if n not in dropped:
            nodes.append(node)
        nodes.extend(added.get(n, []))
    return replace(graph, nodes=tuple(nodes), types=types)


def _feeding_chain(view: GraphView, value: str) -> list[int]:
    """The layout operators (one data input each) producing ``value`` whose outputs are
    read by nothing else, nearest first."""
    chain: list[int] = []
    while True:
        n = view.producer_index.get(value)
        if n is None or role_of(view.nodes[n].op) != "layout" or \
                len(view.data_inputs(view.nodes[n])) != 1 or \
                view.nodes[n].inputs[0] != view.data_inputs(view.nodes[n])[0] or \
                value in view.graph_outputs or len(view.consumer_indices.get(value, [])) != 1:
            return chain
        chain.append(n)
        value = view.nodes[n].inputs[0]


def _pieces(graph: Graph, node: Node) -> tuple[int, list[int]] | None:
    """(axis, size of each output along it) of a Split whose shapes are all static."""
    source = graph.types.get(node.inputs[0])
    if source is None or source.shape is None or not all(isinstance(d, int) for d in source.shape):
        return None
    rank = len(source.shape)
    axis = int(node.attr("axis", 0)) % rank  # type: ignore[arg-type]
    sizes = []
    for output in node.outputs:
        kind = graph.types.get(output) if output else None
        if output and (kind is None or kind.shape is None or len(kind.shape) != rank or
                       not isinstance(kind.shape[axis], int)):
            return None
        sizes.append(int(kind.shape[axis]) if kind is not None and kind.shape else 0)
    if any(not output for output in node.outputs) or sum(sizes) != source.shape[axis]:
        return None  # an unnamed output's size is not known: left as a Split
    return axis, sizes
