"""Turn the chosen e-nodes back into a `Graph`.

Nodes come out in topological order (post-order from the outputs), with ONNX
semantics as `ir/graph.py` documents. A kept original node keeps its name and
its output names; a new node takes the name of an original node of the same
operator in its e-class that is not emitted itself, else a fresh unique name. Subterms over constants
are folded with `ops.evaluate.evaluate_node`; unused constants are dropped; graph
input and output names are preserved (an Identity node is added where an
output's class is an input, a constant or another output).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from egraph_compiler.egraph import Saturation
from egraph_compiler.extract.facts import list_items
from egraph_compiler.extract.view import EGraphView, ENode
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node, TensorAttr, TensorType, Value
from egraph_compiler.ops.evaluate import NEVER_FOLD, evaluate_node


class Decoder:
    def __init__(self, saturation: Saturation, view: EGraphView, choice: dict[int, ENode],
                 shapes: dict, dtypes: dict):
        self.sat, self.view, self.choice = saturation, view, choice
        self.shapes, self.dtypes = shapes, dtypes
        graph = saturation.graph
        self.names_used: set[str] = {v.name for v in graph.inputs} | set(graph.constants)
        self.names_used |= {o for n in graph.nodes for o in n.outputs} | {n.name for n in graph.nodes}
        self.nodes: list[Node] = []
        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, TensorType] = {}
        self.value_of: dict[int, str] = {}
        self.multi: dict[int, list[str]] = {}  # class of a multi-output term -> its output names
        self.provenance: dict[str, tuple[str, ...]] = {}
        self.max_out: dict[int, int] = {}  # class -> highest output index projected from it
        for enode in view.nodes:
            if enode.op == "Out":
                self.max_out[enode.children[0]] = max(self.max_out.get(enode.children[0], 0), enode.prims[0])
        self.counter = 0
        self.taken: set[str] = set()  # value names already given to an emitted value
        self.taken_nodes: set[str] = set()  # original node names already reused
        # recognise kept original nodes: (op, class, child classes) -> (name, outputs)
        self.original: dict[tuple, Node] = {}
        by_label = {(n.name or f"#{i} ({n.op})"): n for i, n in enumerate(graph.nodes)}
        for label, (op, out0, cells) in saturation.signatures.items():
            node = by_label[label]
            params = saturation.schemas[op].decl.params
            children = []
            for param, cell in zip(params, cells, strict=True):
                table = view.list_class if param.variadic else view.value_class
                children.append(table.get(cell, -1))
            key = (op, view.value_class.get(out0, -1), tuple(children))
            self.original.setdefault(key, node)
        # class -> the original nodes computing it: a rewritten node of the same
        # operator keeps the first one's name (onnxruntime and TVM keep node names
        # too), and `explain` starts its derivation from them
        self.class_originals: dict[int, list[Node]] = {}
        for (_, eclass, _), node in self.original.items():
            self.class_originals.setdefault(eclass, []).append(node)
        self.origins: dict[str, tuple[str, ...]] = {}
        # an original value name per class, to keep names stable where possible
        produced = {o for n in graph.nodes for o in n.outputs if o}
        self.class_names: dict[int, list[str]] = {}
        for name, vid in sorted(saturation.value_ids.items(), key=lambda kv: kv[1]):
            if name in produced and vid in view.value_class:
                self.class_names.setdefault(view.value_class[vid], []).append(name)

    # -- names -------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        while True:
            self.counter += 1
            name = f"{base}_{self.counter}"
            if name not in self.names_used:
                self.names_used.add(name)
                return name

    def _claim(self, eclass: int) -> str | None:
        for name in self.class_names.get(eclass, []):
            if name not in self.taken:
                self.taken.add(name)
                return name
        return None

    # -- types -------------------------------------------------------------------
    def _type(self, eclass: int, name: str) -> TensorType:
        original = self.sat.graph.types.get(name)
        if original is not None:
            return original
        return TensorType(self.dtypes.get(eclass, "float32"), self.shapes.get(eclass))

    # -- emission ----------------------------------------------------------------
    def run(self) -> Graph:
        graph = self.sat.graph
        outputs: list[Value] = []
        for value in graph.outputs:
            handle = int(self.sat.outputs[value.name][3:-1])
            eclass = self.view.value_class[handle]
            name = self.emit(eclass)
            if name != value.name:
                self._output_alias(name, value.name)
            outputs.append(value)
        used = {i for n in self.nodes for i in n.inputs} | {v.name for v in outputs}
        constants = {k: v for k, v in self.constants.items() if k in used}
        types = {k: t for k, t in self.types.items() if k in used or k in self._produced()}
        for name, array in constants.items():
            types[name] = graph.types.get(name) or TensorType(str(array.dtype), tuple(int(d) for d in array.shape))
        for value in graph.inputs:
            types[value.name] = graph.types.get(value.name, value.type)
        for value in outputs:
            types[value.name] = graph.types.get(value.name, value.type)
        shape_values = {k: v for k, v in graph.shape_values.items() if k in types}
        return replace(graph, outputs=tuple(outputs), nodes=tuple(self.nodes), constants=constants,
                       types=types, shape_values=shape_values)

    def _produced(self) -> set[str]:
        return {o for n in self.nodes for o in n.outputs if o}

    def _output_alias(self, source: str, target: str) -> None:
        # rename the producing node's output when it is ours to rename, else copy
        producer = next((i for i, n in enumerate(self.nodes) if source in n.outputs), None)
        other_uses = any(source in n.inputs for n in self.nodes)
        if producer is not None and not other_uses and source not in {v.name for v in self.sat.graph.outputs}:
            node = self.nodes[producer]
            self.nodes[producer] = replace(node, outputs=tuple(target if o == source else o for o in node.outputs))
            self.types[target] = self.types.pop(source, self.sat.graph.types.get(target))
            for eclass, name in list(self.value_of.items()):
                if name == source:
                    self.value_of[eclass] = target
            return
        self.nodes.append(Node("Identity", (source,), (target,), (), self.fresh("Identity")))
        self.types[target] = self.sat.graph.types.get(target) or self.types.get(source)  # type: ignore[assignment]

    def emit(self, eclass: int) -> str:
        if eclass in self.value_of:
            return self.value_of[eclass]
        # iterative post-order over the chosen DAG (graphs are deep)
        stack: list[tuple[int, bool]] = [(eclass, False)]
        open_classes: set[int] = set()
        while stack:
            current, ready = stack.pop()
            if current in self.value_of:
                continue
            node = self.choice[current]
            if not ready:
                if current in open_classes:
                    raise ModelError(f"internal: the chosen program has a cycle through e-class {current}")
                open_classes.add(current)
                stack.append((current, True))
                stack.extend((d, False) for d in self._deps(node) if d not in self.value_of)
                continue
            open_classes.discard(current)
            self.value_of[current] = self._emit_node(current, node)
        return self.value_of[eclass]

    def _deps(self, node: ENode) -> list[int]:
        if node.op == "Out":
            return self._deps(self._multi_node(node.children[0])) if node.children[0] not in self.multi else []
        deps: list[int] = []
        for child in node.children:
            if self.view.classes.get(child) and self.choice[child].op in ("TCons", "TNil"):
                deps.extend(list_items(self.view, child, self.choice.get) or [])
            else:
                deps.append(child)
        return deps

    def _multi_node(self, eclass: int) -> ENode:
        chosen = self.choice[eclass]
        if self._is_multi(chosen):
            return chosen
        for node in self.view.classes[eclass]:
            if self._is_multi(node) and all(c in self.choice for c in node.children):
                return node
        raise ModelError(f"internal: e-class {eclass} has no multi-output operator for a projection")

    def _is_multi(self, node: ENode) -> bool:
        schema = self.sat.schemas.get(node.op)
        return schema is not None and (schema.multi_output or node.op == "Split")

    def _emit_node(self, eclass: int, node: ENode) -> str:
        tables = self.sat.tables
        if node.op == "Input":
            return str(node.prims[0])
        if node.op == "Const":
            name = tables.constant_names[node.prims[0]]
            self.constants[name] = tables.constants[node.prims[0]]
            return name
        if node.op == "ScalarConst":
            return self._constant(np.array(node.prims[0], dtype=np.dtype(node.prims[1])), eclass)
        if node.op == "VecConst":
            return self._constant(np.array(node.prims[0], dtype=np.int64), eclass)
        if node.op == "Absent":
            return ""
        if node.op == "Out":
            names = self._emit_multi(node.children[0])
            return names[node.prims[0]]
        if self._is_multi(node):
            self.multi.pop(eclass, None)
            return self._emit_op(eclass, node, multi=True)[0]
        return self._emit_op(eclass, node)[0]

    def _emit_multi(self, eclass: int) -> list[str]:
        if eclass not in self.multi:
            node = self._multi_node(eclass)
            for dep in self._deps(node):
                self.emit(dep)
            names = self._emit_op(eclass, node, multi=True)
            if self.choice[eclass] is node and eclass not in self.value_of:
                self.value_of[eclass] = names[0]
        return self.multi[eclass]

    def _inputs(self, node: ENode) -> list[str]:
        names: list[str] = []
        schema = self.sat.schemas[node.op]
        for param, child in zip(schema.decl.params, node.children, strict=True):
            if param.variadic:
                names.extend(self.value_of[i] for i in (list_items(self.view, child, self.choice.get) or []))
            else:
                names.append(self.emit(child) if child not in self.value_of else self.value_of[child])
        while names and names[-1] == "":
            names.pop()
        return names

    def _attrs(self, node: ENode) -> tuple:
        schema = self.sat.schemas[node.op]
        attrs = dict(self.view.attrs.get(node.index, {}))
        for attr in schema.attrs:
            if attr.type == "tensor" and attr.name in attrs:
                attrs[attr.name] = self.sat.tables.tensor_attrs[attrs[attr.name]]
        return tuple(sorted(attrs.items()))

    def _emit_op(self, eclass: int, node: ENode, multi: bool = False) -> list[str]:
        if multi and eclass in self.multi:
            return self.multi[eclass]
        inputs = self._inputs(node)
        attrs = self._attrs(node)
        key = (node.op, node.eclass, node.children)
        original = self.original.get(key)
        outputs_needed = self._output_count(node, attrs, original)
        if not multi and node.op not in NEVER_FOLD and self._foldable(inputs):
            folded = self._fold(node, inputs, attrs, outputs_needed)
            if folded is not None:
                return [self._constant(folded, eclass)]
        if original is not None and original.name and original.name not in self.taken_nodes:
            self.taken_nodes.add(original.name)
            node_name = original.name
            outputs = [o if o and o not in self.taken else "" for o in original.outputs]
            self.taken.update(o for o in outputs if o)
            provenance: tuple[str, ...] = ()
            merged = [n for n in self.class_originals.get(eclass, []) if n.name]
            if len(merged) > 1:  # a rule proved other input nodes equal to this one: it replaces them
                provenance = self.view.provenance.get(eclass, ())
                self.origins[node_name] = tuple(f"{n.name} ({n.op})" for n in merged)
        else:
            originals = self.class_originals.get(eclass, [])
            # same operator only: a node of another operator (Pow → Square, a QDQ
            # pattern → QGemmInt) gets a name of its own; `origins` keeps the link
            free = [n for n in originals if n.name and n.name not in self.taken_nodes and n.op == node.op]
            if free:
                node_name = free[0].name
                self.taken_nodes.add(node_name)
            else:
                node_name = self.fresh(node.op)
            self.origins[node_name] = tuple(f"{n.name} ({n.op})" for n in originals if n.name)
            claimed = self._claim(eclass)
            outputs = [claimed or self.fresh(f"{node.op.lower()}_out")]
            provenance = self.view.provenance.get(eclass, ())
        while len(outputs) < outputs_needed:
            outputs.append("")
        outputs = [o if o or k == 0 else self.fresh(f"{node.op.lower()}_out") for k, o in enumerate(outputs[:outputs_needed])]
        if not outputs[0]:
            outputs[0] = self.fresh(f"{node.op.lower()}_out")
        self.nodes.append(Node(node.op, tuple(inputs), tuple(outputs), attrs, node_name))
        self.provenance[node_name] = provenance
        for k, out in enumerate(outputs):
            self.types[out] = self._type(eclass if k == 0 else -1, out)
        if multi:
            self.multi[eclass] = outputs
        return outputs

    def _output_count(self, node: ENode, attrs: tuple, original: Node | None) -> int:
        schema = self.sat.schemas[node.op]
        if node.op == "Split":
            split = dict(attrs).get("split")
            if split:
                return len(split)
            return len(original.outputs) if original else 1
        used = 1 + self.max_out.get(node.eclass, 0)
        if original is not None:
            return max(min(len(original.outputs), schema.decl.outputs), 1)
        return min(max(used, 1), schema.decl.outputs)

    def _foldable(self, inputs: list[str]) -> bool:
        return bool(inputs) and all((not i) or i in self.constants for i in inputs)

    def _fold(self, node: ENode, inputs: list[str], attrs: tuple, outputs: int) -> np.ndarray | None:
        arrays = [self.constants[i] if i else None for i in inputs]
        try:
            return evaluate_node(node.op, attrs, arrays, outputs)[0]
        except ModelError:
            return None

    def _constant(self, array: np.ndarray, eclass: int) -> str:
        name = self.fresh("const")
        self.constants[name] = np.asarray(array)
        return name


def decode(saturation: Saturation, view: EGraphView, choice: dict[int, ENode], shapes: dict, dtypes: dict
           ) -> tuple[Graph, dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """The graph, each node's provenance (rules that built its e-class's terms) and,
    for each node a rewrite produced, the original nodes of its e-class."""
    decoder = Decoder(saturation, view, choice, shapes, dtypes)
    graph = decoder.run()
    provenance = {n.name: decoder.provenance.get(n.name, ()) for n in graph.nodes}
    origins = {n.name: decoder.origins[n.name] for n in graph.nodes if n.name in decoder.origins}
    return graph, provenance, origins


__all__ = ["TensorAttr", "decode"]
