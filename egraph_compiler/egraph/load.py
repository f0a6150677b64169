"""Bulk-load a `Graph` into egglog through TSV files and egglog's `input` command.

Each value gets an integer id; each node becomes one row of a per-op relation
``Row_<Op>(out, inputs..., attrs...)`` and one `load` rule per op turns rows into
terms: ``(union (V out) (Op_<Op> (V a) (V b) attrs...))``. DESIGN §3: `input` costs
~5-7 µs a row, one command per node ~1 ms, and big programs parse quadratically.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from egraph_compiler.egraph import text
from egraph_compiler.egraph.schema import ABSENT, OpSchema, coerce
from egraph_compiler.egraph.tables import Tables
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node, TensorAttr

# attribute kind -> (row column sort, conversion function from the column to the value)
_COLUMN: dict[str, tuple[str, str | None]] = {
    "int": ("i64", None),
    "float": ("f64", None),
    "string": ("i64", "STR"),
    "ints": ("i64", "IV"),
    "floats": ("i64", "FV"),
    "strings": ("i64", "SV"),
    "tensor": ("i64", None),
}

IVALUE_MAX = 64  # int constants up to this size get their value as a fact


def row_relation(schema: OpSchema) -> str:
    return f"Row_{schema.name}"


def load_rule(schema: OpSchema) -> str:
    """Declaration of the op's row relation and the `load` rule that builds its terms."""
    params = schema.decl.params
    columns = ["i64"] + ["i64"] * len(params) + [_COLUMN[a.type][0] for a in schema.attrs]
    row_vars = ["o"] + [f"p{i}" for i in range(len(params))] + [f"c{i}" for i in range(len(schema.attrs))]
    query = [f"({row_relation(schema)} {' '.join(row_vars)})"]
    args: list[str] = []
    for i, param in enumerate(params):
        args.append(f"(LV p{i})" if param.variadic else f"(V p{i})")
    for i, attr in enumerate(schema.attrs):
        table = _COLUMN[attr.type][1]
        if table is None:
            args.append(f"c{i}")
        else:
            query.append(f"(= a{i} ({table} c{i}))")
            args.append(f"a{i}")
    term = f"({schema.egglog} {' '.join(args)})" if args else f"({schema.egglog})"
    return (
        f"(relation {row_relation(schema)} ({' '.join(columns)}))\n"
        f"(rule ({' '.join(query)}) ((union (V o) {term})) :ruleset load)"
    )


@dataclass
class LoadedGraph:
    value_ids: dict[str, int]
    node_ids: dict[str, int]  # node name -> value id of its term (output 0)
    rows: dict[str, list[str]] = field(default_factory=dict)
    # node label -> (op, output-0 id, input cells: value ids / list ids / -1)
    signatures: dict[str, tuple[str, int, tuple[int, ...]]] = field(default_factory=dict)


def load_rows(graph: Graph, schemas: dict[str, OpSchema], tables: Tables) -> LoadedGraph:
    """Turn the graph into TSV rows per relation (and interned tables in ``tables``)."""
    ids: dict[str, int] = {}
    rows: dict[str, list[str]] = {}

    unnamed: list[int] = []

    def fresh() -> int:
        # a term whose output 0 has no name still needs a handle
        unnamed.append(1_000_000_000 + len(unnamed))
        return unnamed[-1]

    def value_id(name: str) -> int:
        if name not in ids:
            ids[name] = len(ids)
        return ids[name]

    def emit(relation: str, *cells: object) -> None:
        rows.setdefault(relation, []).append("\t".join(_cell(c) for c in cells))

    for value in graph.inputs:
        emit("InputRow", value_id(value.name), tables.string(value.name))
    for name, array in graph.constants.items():
        vid = value_id(name)
        emit("ConstRow", vid, tables.constant(name, np.asarray(array)))
        _constant_facts(vid, np.asarray(array), emit, tables)

    produced = {v.name for v in graph.inputs} | set(graph.constants)
    node_ids: dict[str, int] = {}
    signatures: dict[str, tuple[str, int, tuple[int, ...]]] = {}
    for index, node in enumerate(graph.nodes):
        schema = schemas.get(node.op)
        label = node.name or f"#{index} ({node.op})"
        if schema is None:
            raise ModelError(
                f"node '{label}' uses operator '{node.op}' which no rule file declares "
                f"(declare it in rules/operators.dnnr)"
            )
        cells = _node_cells(node, label, schema, tables, value_id, produced, emit)
        outputs = node.outputs
        declared = schema.decl.outputs
        if len(outputs) > declared and node.op != "Split":
            if any(outputs[declared:]):
                raise ModelError(
                    f"node '{label}': operator '{node.op}' is declared with {declared} "
                    f"output(s) but the node has {len(outputs)}"
                )
            outputs = outputs[:declared]
        out0 = value_id(outputs[0]) if outputs and outputs[0] else fresh()
        node_ids[label] = out0
        signatures[label] = (node.op, out0, tuple(int(c) for c in cells[: len(schema.decl.params)]))
        emit(row_relation(schema), out0, *cells)
        for k, out in enumerate(outputs):
            if out:
                produced.add(out)
                if k > 0:
                    emit("OutRow", value_id(out), out0, k)
    for value in graph.outputs:
        if value.name not in produced:
            raise ModelError(f"graph output '{value.name}' is not produced by any node")
    for name, vid in ids.items():
        ttype = graph.types.get(name)
        if ttype is None and name in graph.constants:
            array = np.asarray(graph.constants[name])
            emit("DtypeRow", vid, tables.string(str(array.dtype)))
            emit("ShapeRow", vid, tables.vector("IV", tuple(int(d) for d in array.shape)))
            continue
        if ttype is None:
            continue
        emit("DtypeRow", vid, tables.string(ttype.dtype))
        if ttype.shape is not None:
            emit("ShapeRow", vid, tables.vector("IV", tables.shape_ids(ttype.shape)))
        if name in graph.shape_values and name not in graph.constants:
            emit("IValueRow", vid, tables.vector("IV", tables.shape_ids(graph.shape_values[name])))
    return LoadedGraph(ids, node_ids, rows, signatures)


def _node_cells(node: Node, label: str, schema: OpSchema, tables: Tables, value_id, produced, emit) -> list[object]:
    params = schema.decl.params
    inputs = list(node.inputs)
    cells: list[object] = []
    for i, param in enumerate(params):
        if param.variadic:
            list_id = -1
            for name in reversed(inputs[i:]):
                _check_input(name, label, produced)
                cell_id = tables.list_id()
                emit("ListRow", cell_id, value_id(name), list_id)
                list_id = cell_id
            cells.append(list_id)
            continue
        name = inputs[i] if i < len(inputs) else ""
        if not name:
            if not param.optional:
                raise ModelError(f"node '{label}': required input '{param.name}' of {node.op} is missing")
            cells.append(-1)
            continue
        _check_input(name, label, produced)
        cells.append(value_id(name))
    if schema.variadic_index is None and len(node.inputs) > len(params):
        raise ModelError(
            f"node '{label}': {node.op} takes {len(params)} input(s), the node has {len(node.inputs)}"
        )
    given = dict(node.attrs)
    declared = {a.name for a in schema.attrs}
    for key in given:
        if key not in declared:
            raise ModelError(
                f"node '{label}': attribute '{key}' of {node.op} is not declared "
                f"(add it to the op declaration in rules/operators.dnnr)"
            )
    for attr in schema.attrs:
        value = given.get(attr.name)
        if value is None:
            value = schema.default(attr)
        cells.append(_attr_cell(attr.type, value, label, attr.name, tables))
    return cells


def _check_input(name: str, label: str, produced: set[str]) -> None:
    if name not in produced:
        raise ModelError(f"node '{label}' reads '{name}', which no earlier node, input or constant produces")


def _attr_cell(kind: str, value: object, label: str, attr: str, tables: Tables) -> object:
    try:
        if kind == "tensor":
            if isinstance(value, TensorAttr):
                return tables.tensor_attr(value)
            return int(value)  # the absent handle
        if kind in ("ints", "floats", "strings") and not isinstance(value, tuple):
            value = (value,)
        value = coerce(kind, value)
    except (TypeError, ValueError):
        raise ModelError(f"node '{label}': attribute '{attr}' = {value!r} is not of kind {kind}") from None
    if kind == "float" and math.isnan(value):  # type: ignore[arg-type]
        raise ModelError(f"node '{label}': attribute '{attr}' is NaN")
    if kind == "string":
        return tables.string(value)  # type: ignore[arg-type]
    if kind == "ints":
        return tables.vector("IV", value)  # type: ignore[arg-type]
    if kind == "floats":
        return tables.vector("FV", value)  # type: ignore[arg-type]
    if kind == "strings":
        return tables.vector("SV", value)  # type: ignore[arg-type]
    return value


def _cell(value: object) -> str:
    if isinstance(value, float):
        return text.tsv_f64(value)
    return str(value)


def _constant_facts(vid: int, array: np.ndarray, emit, tables: Tables) -> None:
    emit("FactRow", vid, 0)
    if array.dtype.kind not in "biuf" or array.size == 0:
        return
    values = array.astype(np.float64) if array.dtype.kind != "f" else array
    if np.isnan(values).any():
        return
    first = float(values.flat[0])
    if np.all(values == first):
        emit("SplatRow", vid, first)
    if np.all(values > 0):
        emit("FactRow", vid, 2)
    if np.all(values >= 0):
        emit("FactRow", vid, 1)
    if np.all(values != 0):
        emit("FactRow", vid, 3)
    if array.dtype.kind in "iu" and array.ndim <= 1 and array.size <= IVALUE_MAX:
        emit("IValueRow", vid, tables.vector("IV", tuple(int(x) for x in array.reshape(-1))))


def write_tsv(loaded: LoadedGraph, directory: str) -> str:
    """Write one TSV per relation; return the `input` commands that read them."""
    commands = []
    for relation, lines in sorted(loaded.rows.items()):
        path = os.path.join(directory, f"{relation}.tsv")
        with open(path, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        commands.append(f'(input {relation} "{path}")')
    return "\n".join(commands)


__all__ = ["ABSENT", "LoadedGraph", "load_rows", "load_rule", "write_tsv"]
