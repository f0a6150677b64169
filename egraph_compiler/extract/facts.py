"""Per-class facts extraction needs beyond what egglog recorded: shapes inferred
in Python where no rule propagated one, dtypes, and which classes are constant."""

from __future__ import annotations

import numpy as np

from egraph_compiler.egraph import Saturation
from egraph_compiler.egraph.facts import term_shape
from egraph_compiler.extract.view import EGraphView, ENode
from egraph_compiler.ir.dims import Dim

Shape = tuple[Dim, ...]


def list_items(view: EGraphView, eclass: int, choose=None) -> list[int] | None:
    """Element classes of a variadic list class (first TCons chain, or the chosen one)."""
    items: list[int] = []
    seen: set[int] = set()
    while eclass not in seen:
        seen.add(eclass)
        nodes = view.classes.get(eclass, [])
        node = choose(eclass) if choose else (nodes[0] if nodes else None)
        if node is None:
            return None
        if node.op == "TNil":
            return items
        if node.op != "TCons":
            return None
        items.append(node.children[0])
        eclass = node.children[1]
    return None


def complete_facts(view: EGraphView, saturation: Saturation) -> tuple[dict[int, Shape], dict[int, str], set[int]]:
    tables = saturation.tables
    shapes: dict[int, Shape] = dict(view.shape)
    dtypes: dict[int, str] = dict(view.dtype)
    constant: set[int] = set()
    for node in view.nodes:
        if node.op == "Const":
            array = np.asarray(tables.constants[node.prims[0]])
            shapes.setdefault(node.eclass, tuple(int(d) for d in array.shape))
            dtypes.setdefault(node.eclass, str(array.dtype))
            constant.add(node.eclass)
        elif node.op == "ScalarConst":
            shapes.setdefault(node.eclass, ())
            dtypes.setdefault(node.eclass, str(node.prims[1]))
            constant.add(node.eclass)
        elif node.op == "VecConst":
            shapes.setdefault(node.eclass, (len(node.prims[0]),))
            dtypes.setdefault(node.eclass, "int64")
            constant.add(node.eclass)
        elif node.op in ("Absent", "TNil"):
            constant.add(node.eclass)
    changed = True
    while changed:
        changed = False
        for node in view.nodes:
            if node.is_leaf_op and node.op != "TCons":
                continue
            if node.eclass not in constant and node.children and all(c in constant for c in node.children):
                constant.add(node.eclass)
                changed = True
            if node.eclass in shapes or node.op == "TCons":
                continue
            shape = _infer(view, saturation, node, shapes)
            if shape is not None:
                shapes[node.eclass] = shape
                changed = True
            if node.eclass not in dtypes and node.children and node.children[0] in dtypes:
                dtypes[node.eclass] = dtypes[node.children[0]]
                changed = True
    return shapes, dtypes, constant


def _infer(view: EGraphView, saturation: Saturation, node: ENode, shapes: dict[int, Shape]) -> Shape | None:
    schema = saturation.schemas.get(node.op)
    if schema is None:
        return None
    args: list = []
    for param, child in zip(schema.decl.params, node.children, strict=False):
        if param.variadic:
            items = list_items(view, child)
            if items is None or any(i not in shapes for i in items):
                return None
            args.append([shapes[i] for i in items])
        elif child in shapes:
            args.append(shapes[child])
        elif param.optional:
            args.append(None)
        else:
            return None
    values = {i: view.ivalue[c] for i, c in enumerate(node.children) if c in view.ivalue}
    return term_shape(schema, args, view.attrs.get(node.index, {}), values)
