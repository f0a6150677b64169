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

from egraph_compiler.ir.graph import Graph, Node


def split_as_slices(graph: Graph) -> Graph:
    """``graph`` with every Split of a static shape replaced by one Slice per output
    it uses (its sizes along the axis from the outputs' inferred shapes); ``graph``
    itself when it has none."""
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        pieces = _pieces(graph, node) if node.op == "Split" else None
        if pieces is None:
            nodes.append(node)
            continue
        axis, sizes = pieces
        start = 0
        for output, size in zip(node.outputs, sizes, strict=True):
            if output:
                nodes.append(Node("Slice", (node.inputs[0],), (output,), (
                    ("axes", (axis,)), ("ends", (start + size,)), ("starts", (start,)),
                    ("steps", (1,))), name=f"{node.name or output}/slice{len(nodes)}"))
            start += size
        changed = True
    return replace(graph, nodes=tuple(nodes)) if changed else graph


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
