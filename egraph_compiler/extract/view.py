"""A read-once Python view of a saturated e-graph (egglog `freeze()`).

DESIGN §3: every access to `freeze()`'s ``.functions``/``.rows`` copies
everything, so we read it once here and keep plain Python data: e-classes as
ints, e-nodes with decoded primitive arguments, and the facts extraction needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from egraph_compiler.egraph import Saturation
from egraph_compiler.egraph.facts import decode_attrs
from egraph_compiler.egraph.saturate import TERM_CONSTRUCTORS as LEAVES
from egraph_compiler.egraph.schema import OpSchema
from egraph_compiler.ir.dims import Dim


@dataclass(frozen=True, slots=True)
class ENode:
    eclass: int
    op: str  # operator name, or a leaf constructor name from LEAVES
    children: tuple[int, ...]  # e-classes (T or TList) in argument order
    prims: tuple  # decoded primitive arguments (attributes / leaf payload)
    index: int  # position in a deterministic order

    @property
    def is_leaf_op(self) -> bool:
        return self.op in LEAVES


@dataclass
class EGraphView:
    nodes: list[ENode]
    classes: dict[int, list[ENode]]
    value_class: dict[int, int]  # graph value id (V) -> e-class
    list_class: dict[int, int]  # variadic list id (LV) -> e-class
    shape: dict[int, tuple[Dim, ...]]
    dtype: dict[int, str]
    provenance: dict[int, tuple[str, ...]]
    ivalue: dict[int, tuple[Dim, ...]] = field(default_factory=dict)
    attrs: dict[int, dict] = field(default_factory=dict)  # node index -> decoded attrs


def _class_id(value: object) -> int:
    text = str(value)
    return int(text[text.index("(") + 1 : text.rindex(")")])


def read(saturation: Saturation) -> EGraphView:
    egraph = saturation.egraph
    tables = saturation.tables
    functions = egraph.freeze().functions
    by_constructor: dict[str, OpSchema] = {s.egglog: s for s in saturation.schemas.values()}

    def decode(sort: str, value: object) -> object:
        if sort == "i64":
            return egraph.value_to_i64(value)
        if sort == "f64":
            return egraph.value_to_f64(value)
        if sort == "String":
            return egraph.value_to_string(value)
        if sort == "IVec":
            return tuple(egraph.value_to_i64(v) for v in egraph.value_to_vec(value))
        if sort == "FVec":
            return tuple(egraph.value_to_f64(v) for v in egraph.value_to_vec(value))
        if sort == "SVec":
            return tuple(egraph.value_to_string(v) for v in egraph.value_to_vec(value))
        if sort == "bool":
            return egraph.value_to_bool(value)
        return _class_id(value)

    raw: list[tuple[str, tuple[int, ...], tuple, int]] = []
    for name in sorted(functions):
        function = functions[name]
        if function.output_sort not in ("T", "TList"):
            continue
        if name in ("V", "LV"):
            continue
        schema = by_constructor.get(name)
        if schema is None and name not in LEAVES:
            continue
        sorts = list(function.input_sorts)
        for row in function.rows:
            if row.subsumed:
                continue
            children, prims = [], []
            for sort, value in zip(sorts, row.inputs, strict=True):
                if sort in ("T", "TList"):
                    children.append(_class_id(value))
                else:
                    prims.append(decode(sort, value))
            op = schema.name if schema else name
            raw.append((op, tuple(children), tuple(prims), _class_id(row.output)))
    raw.sort(key=lambda r: (r[3], r[0], r[1], repr(r[2])))
    nodes = [ENode(eclass, op, children, prims, i) for i, (op, children, prims, eclass) in enumerate(raw)]
    classes: dict[int, list[ENode]] = {}
    attrs: dict[int, dict] = {}
    for node in nodes:
        classes.setdefault(node.eclass, []).append(node)
        schema = saturation.schemas.get(node.op)
        if schema is not None and not node.is_leaf_op:
            attrs[node.index] = decode_attrs(schema, list(node.prims))

    def handles(name: str) -> dict[int, int]:
        return {
            egraph.value_to_i64(row.inputs[0]): _class_id(row.output)
            for row in functions[name].rows
        } if name in functions else {}

    shape: dict[int, tuple[Dim, ...]] = {}
    for row in functions["shape"].rows:
        shape[_class_id(row.inputs[0])] = tables.shape_of(decode("IVec", row.output))  # type: ignore[arg-type]
    dtype = {_class_id(r.inputs[0]): egraph.value_to_string(r.output) for r in functions["dtype"].rows}
    ivalue = {
        _class_id(r.inputs[0]): tables.shape_of(decode("IVec", r.output))  # type: ignore[arg-type]
        for r in functions["ivalue"].rows
    }
    provenance: dict[int, set[str]] = {}
    for row in functions["Prov"].rows:
        provenance.setdefault(_class_id(row.inputs[0]), set()).add(egraph.value_to_string(row.inputs[1]))
    return EGraphView(
        nodes, classes, handles("V"), handles("LV"), shape, dtype,
        {c: tuple(sorted(r)) for c, r in provenance.items()}, ivalue, attrs,
    )
