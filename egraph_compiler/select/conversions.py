"""Layout-conversion kernels: where the selection stores a tensor in a dimension order
one of its consumers cannot read (a tiled Conv/MatMul/pool kernel reads its operands
row-major), a conversion block between them copies it into row-major order.

The conversion is an ``Identity`` node of its own block: a pointwise kernel that
reads the tensor in the stored order through index comprehension (SmartMem §3.2.2)
and writes a row-major copy, which the consumer then reads instead — a transpose
(NCHW ↔ NHWC or any other permutation) in one launch. Its price (the edge cost
matrix of the PBQP) is one launch plus the sectors it reads and writes
(`conversion_sectors`); the backend gives the launch cost in the problem's unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from egraph_compiler.fusion import Block, FusionPlan
from egraph_compiler.fusion.index import Blocked, Layout, stored_numel
from egraph_compiler.fusion.layout import SECTOR, physical_strides
from egraph_compiler.fusion.structure import analyse
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node
from egraph_compiler.select.problem import SelectError

CONVERSION_OP = "Identity"  # a copy; the order change is in how it reads its input


@dataclass(frozen=True)
class Conversion:
    """Tensor ``value``, stored in order ``perm``, copied row-major for ``consumer``
    (a block id), which reads ``copy`` instead."""

    value: str
    perm: Layout
    consumer: int
    copy: str = ""
    target: Blocked | None = None  # the copy's layout: row-major (None) or blocked NCHWc


def conversion_sectors(shape: Sequence[int], perm: Layout, target: Blocked | None = None) -> int:
    """Sector transactions of a conversion kernel from ``perm`` order to row-major:
    its lanes walk the output in logical order (the last axis of size > 1), so they
    read the stored tensor at that axis's stride and write consecutive addresses. Into a
    blocked ``target``: the lanes walk the padded output in storage order (the block's
    axis innermost), reading the source at that axis's stride."""
    numel = int(np.prod(shape, dtype=np.int64))
    if target is not None:
        stride = physical_strides(shape, perm)[target.axis]
        return numel * min(stride, SECTOR) + stored_numel(tuple(shape), target)
    big = [a for a in range(len(shape)) if shape[a] > 1]
    lane = big[-1] if big else len(shape) - 1
    stride = physical_strides(shape, perm)[lane] if shape else 1
    return numel * min(stride, SECTOR) + numel


def insert_conversions(plan: FusionPlan, conversions: Sequence[Conversion]
                       ) -> tuple[FusionPlan, list[Conversion]]:
    """``plan`` with one conversion block per entry (its ``Identity`` node placed right
    after the tensor's producer, the consumer block's nodes reading the copy), and the
    conversions with the copies' names. The caller then applies the layouts
    (`fusion.relayout`): the conversion block reads the stored order, the copy is
    row-major."""
    if not conversions:
        return plan, []
    graph = plan.graph
    nodes = list(graph.nodes)
    types = dict(graph.types)
    producer = {out: k for k, n in enumerate(nodes) for out in n.outputs if out}
    blocks = {b.id: b for b in plan.blocks}
    # per original node index: the Identity nodes to place right after it
    after: dict[int, list[Node]] = {}
    renames: dict[int, dict[str, str]] = {}  # block id -> {value: copy}
    named = []
    for k, c in enumerate(conversions):
        if c.value not in producer or c.consumer not in blocks:
            raise SelectError(f"select: conversion of {c.value!r} for block {c.consumer}: "
                              "no such producer or block")
        copy = f"{c.value}@" + (f"nchw{c.target.block}c{'i' if c.target.image else ''}{k}"
                                if c.target is not None else f"rowmajor{k}")
        if copy in types:
            raise SelectError(f"select: conversion name {copy!r} is taken")
        types[copy] = types[c.value]
        after.setdefault(producer[c.value], []).append(
            Node(CONVERSION_OP, (c.value,), (copy,), (), f"convert_{k}"))
        renames.setdefault(c.consumer, {})[c.value] = copy
        named.append(replace(c, copy=copy))
    new_nodes: list[Node] = []
    index: dict[int, int] = {}
    inserted: list[int] = []
    for k, n in enumerate(nodes):
        index[k] = len(new_nodes)
        new_nodes.append(n)
        for conv in after.get(k, []):
            inserted.append(len(new_nodes))
            new_nodes.append(conv)
    for block_id, rename in renames.items():
        for k in blocks[block_id].nodes:
            n = new_nodes[index[k]]
            new_nodes[index[k]] = replace(n, inputs=tuple(rename.get(v, v) for v in n.inputs))
    graph = replace(graph, nodes=tuple(new_nodes), types=types)
    view = GraphView(graph)
    converted: dict[str, list[Block]] = {}  # value -> its conversion blocks
    next_id = max(blocks) + 1
    for k in inserted:
        shape = analyse(view, frozenset({k}))
        if isinstance(shape, str):
            raise ModelError(f"internal error: conversion node {new_nodes[k].name} cannot be "
                             f"generated: {shape}")
        converted.setdefault(new_nodes[k].inputs[0], []).append(
            Block(next_id, (k,), (CONVERSION_OP,), "one_to_one", shape.kind, shape.anchor,
                  shape.inputs, shape.outputs, shape.iteration_shape))
        next_id += 1
    # the block list is a topological order (`plan` schedules from it): each conversion
    # goes right after the block that produces its tensor
    new_blocks: list[Block] = []
    for b in plan.blocks:
        moved = tuple(index[k] for k in b.nodes)
        if b.id in renames:
            rename = renames[b.id]
            b = replace(b, inputs=tuple(rename.get(v, v) for v in b.inputs))
        # the anchor is a node index too: it moves with the nodes
        new_blocks.append(replace(b, nodes=moved, anchor=None if b.anchor is None else index[b.anchor]))
        for value in b.outputs:
            new_blocks += converted.get(value, [])
    return replace(plan, graph=graph, blocks=tuple(new_blocks)), named
