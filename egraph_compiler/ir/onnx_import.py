"""ONNX → `Graph`: read, validate, convert to the IR's opset-17 semantics, fold.

`load_onnx` accepts a path, raw bytes or a `ModelProto` of default-domain opset
7–21. Version differences are converted here (`convert.py` holds the per-op
rules), so later stages only ever see opset-17 meaning with constant axes,
splits, slice bounds, pads and clip bounds as attributes. Everything the model
gets wrong is a `ModelError`; no protobuf or checker exception escapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from egraph_compiler.ir.control_flow import CONTROL_FLOW_OPS, Inliner
from egraph_compiler.ir.convert import NodeConverter
from egraph_compiler.ir.dims import DimExpr
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node, TensorType, Value
from egraph_compiler.ir.names import fresh_name
from egraph_compiler.ir.onnx_types import (
    attribute_value,
    dims_from_onnx,
    dtype_from_onnx,
    tensor_to_numpy,
)
from egraph_compiler.ir.validate import check_types

MIN_OPSET, MAX_OPSET = 7, 21
DEFAULT_SYMBOL_RANGE = (1, 2**31 - 1)
# Folding is skipped for results above this many elements (ConstantOfShape is
# exempt: it folds to a zero-stride broadcast view that costs no memory).
FOLD_LIMIT = 1 << 26
_DEFAULT_DOMAINS = ("", "ai.onnx")
_ELEM_TYPE = "\0elem_type:"  # shape hints also hold element types under this prefix
_CHECKER_LIMIT = 2**31 - 1  # protobuf's serialisation limit: bigger models skip the checker


class Folder(Protocol):
    """Constant folding, supplied from above the IR (`egraph_compiler.ops.evaluate`, which
    knows operators from the registry): whether an operator may fold, and its outputs."""

    def can_fold(self, op: str) -> bool: ...

    def evaluate_node(self, op: str, attrs: tuple, inputs: Sequence[np.ndarray | None],
                      num_outputs: int = 1) -> list[np.ndarray]: ...


_installed: list[Folder] = []


def install_folder(folder: Folder) -> None:
    """Make ``folder`` the default of `load_onnx`. `egraph_compiler.ops` installs its
    evaluator when it is imported (every stage above the IR imports it): the IR, below the
    operator registry, knows no operator's semantics itself."""
    _installed[:] = [folder]


def load_onnx(source: str | Path | bytes | onnx.ModelProto, folder: Folder | None = None) -> Graph:
    """Import an ONNX model as a `Graph` (opset-17 semantics); nodes of constant inputs
    fold into constants through ``folder``, by default the installed one (`install_folder`;
    with none, only ``Constant`` nodes fold)."""
    model, raw = _read(source)
    where = str(source) if isinstance(source, (str, Path)) else "<model>"
    opset = _default_opset(model)
    _reject_non_utf8_names(model)
    _reject_unsupported_nodes(model, opset)
    _run_checker(model, raw, where)
    check_types(model, where)
    return _Importer(model, opset, folder or next(iter(_installed), None)).run()


def _read(source: str | Path | bytes | onnx.ModelProto) -> tuple[onnx.ModelProto, bytes | None]:
    """The model, and its serialised bytes when we have them (the checker then skips re-serialising)."""
    if isinstance(source, onnx.ModelProto):
        return source, None
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
        return _parse(raw, "<bytes>"), raw
    path = Path(source)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ModelError(f"cannot read ONNX model {str(path)!r}: {error.strerror or error}") from None
    model = _parse(raw, str(path))
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        try:
            onnx.load_external_data_for_model(model, str(path.parent))
        except Exception as error:  # missing or unreadable side files
            raise ModelError(f"{path}: cannot load external tensor data: {error}") from None
        return model, None
    return model, raw


def _parse(raw: bytes, where: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(raw)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise ModelError(f"not a valid ONNX model: {where}: {error}") from None
    if not model.HasField("graph"):
        raise ModelError(f"not a valid ONNX model: {where}: no graph (truncated or not an ONNX file)")
    return model


def _default_opset(model: onnx.ModelProto) -> int:
    versions = [op.version for op in model.opset_import if op.domain in _DEFAULT_DOMAINS]
    if not versions:
        raise ModelError("not a valid ONNX model: no opset import for the default ONNX domain")
    opset = versions[0]
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ModelError(f"ONNX opset {opset} is not supported (dnnr reads opsets {MIN_OPSET}–{MAX_OPSET})")
    return opset


def _node_label(node: onnx.NodeProto, index: int, opset: int) -> str:
    """How errors name a node: its name (or position), operator and the model's opset."""
    return f"node '{node.name or f'#{index}'}' ({node.op_type}, opset {opset})"


def _reject_non_utf8_names(model: onnx.ModelProto) -> None:
    """ONNX strings are UTF-8; protobuf hands back ``bytes`` for a name that is not."""
    graph = model.graph
    named = [(f"graph value #{i}", v.name) for i, v in
             enumerate([*graph.input, *graph.output, *graph.value_info, *graph.initializer])]
    named += [(f"node #{i}", text) for i, n in enumerate(graph.node)
              for text in (n.name, n.op_type, n.domain, *n.input, *n.output)]
    for where, name in named:
        if not isinstance(name, str):
            raise ModelError(f"not a valid ONNX model: {where}: name {name!r} is not valid UTF-8")


def _reject_unsupported_nodes(model: onnx.ModelProto, opset: int) -> None:
    """Domains and subgraphs first: they get a clearer message than the checker's."""
    for index, node in enumerate(model.graph.node):
        if node.domain not in _DEFAULT_DOMAINS:
            raise ModelError(
                f"{_node_label(node, index, opset)} is in domain {node.domain!r}; "
                "dnnr supports only the default ONNX domain"
            )
        if node.op_type not in CONTROL_FLOW_OPS and any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise ModelError(f"{_node_label(node, index, opset)} has a subgraph; control flow other than "
                             "If / Loop / Scan is not supported")


def _run_checker(model: onnx.ModelProto, raw: bytes | None, where: str) -> None:
    inputs = {i.name for i in model.graph.input}
    if model.ir_version < 4 and any(t.name not in inputs for t in model.graph.initializer):
        # IR 3 lists every initializer among the graph inputs; tools that edit old models
        # (onnxruntime's quantize_static) keep IR 3 but add initializers the IR-4 way. That
        # is the only IR-4 rule such a model relies on: check it as IR 4 (a copy).
        model = onnx.ModelProto.FromString(raw) if raw is not None else onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = 4
        raw = None
    if raw is None:
        if model.ByteSize() > _CHECKER_LIMIT:
            return
        raw = model.SerializeToString()
    if len(raw) > _CHECKER_LIMIT:
        return
    try:
        onnx.checker.check_model(raw)
    except Exception as error:  # ValidationError, or anything the C++ checker throws on bad input
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]  # its first line
        raise ModelError(f"not a valid ONNX model: {where}: {detail}") from None


class _Importer:
    def __init__(self, model: onnx.ModelProto, opset: int, folder: Folder | None) -> None:
        self.model = model
        self.opset = opset
        self.folder = folder
        self.graph = model.graph
        self.constants: dict[str, np.ndarray] = {}
        self.alias: dict[str, str] = {}
        # a value an inlined If/Loop/Scan body computes -> its name in that body, where
        # onnx's shape inference typed it (the element type a CastLike needs)
        self.origins: dict[str, str] = {}
        self.symbols: dict[str, tuple[int, int]] = {}
        self.used_names: set[str] = set()
        self.unknown_dims = 0
        self._shape_hints: dict[str, tuple[int | None, ...]] | None = None
        self.nodes: list[Node] = []
        self._processed = 0
        self.converter = NodeConverter(self)
        self.inliner = Inliner(self, self._process)

    # -- helpers used by NodeConverter ---------------------------------------
    def fresh_value(self, base: str) -> str:
        return fresh_name(base, self.used_names)

    def add_constant(self, base: str, array: np.ndarray) -> str:
        name = self.fresh_value(base)
        self.constants[name] = array
        return name

    def rank_hint(self, name: str) -> int | None:
        """Rank of an original ONNX value from onnx.shape_inference, when it knows it."""
        shape = self._hints().get(name)
        return None if shape is None else len(shape)

    def static_shape(self, name: str) -> tuple[int | None, ...] | None:
        """Shape of a value: a constant's, else onnx.shape_inference's (None for an unknown dim)."""
        name = self.alias.get(name, name)
        if name in self.constants:
            return tuple(int(d) for d in self.constants[name].shape)
        return self._hints().get(name)

    def value_of(self, name: str, depth: int = 0) -> np.ndarray | None:
        """The value of ``name`` when it is computable at import: a constant, or a node
        kept so far whose inputs are (a Shape or Size of a statically shaped value
        included). What control flow's conditions and trip counts need to fold; the
        kept nodes themselves stay (later stages fold them too)."""
        name = self.alias.get(name, name)
        if name in self.constants:
            return self.constants[name]
        producer = next((n for n in reversed(self.nodes) if name in n.outputs), None)
        if producer is None or depth > 64:
            return None
        if producer.op in ("Shape", "Size"):
            shape = self.static_shape(producer.inputs[0])
            if shape is None or any(d is None for d in shape):
                return None
            args = [np.zeros(shape, dtype=np.uint8)]  # only its shape is read
        elif self.folder is None or not self.folder.can_fold(producer.op):
            return None
        else:
            args = [self.value_of(i, depth + 1) if i else None for i in producer.inputs]
            if any(a is None for a, i in zip(args, producer.inputs, strict=True) if i):
                return None
        try:
            if self.folder is None:
                return None
            results = self.folder.evaluate_node(producer.op, producer.attrs, args,
                                                num_outputs=len(producer.outputs))
        except ModelError:
            return None
        return dict(zip(producer.outputs, results, strict=False)).get(name)

    def elem_type(self, name: str) -> int | None:
        """ONNX element type of a value (a constant's, else onnx.shape_inference's)."""
        name = self.alias.get(name, name)
        if name in self.constants:
            return onnx.helper.np_dtype_to_tensor_dtype(self.constants[name].dtype)
        hint = self._hints().get(f"{_ELEM_TYPE}{name}") or \
            self._hints().get(f"{_ELEM_TYPE}{self.origins.get(name, name)}")
        return int(hint[0]) if hint and hint[0] is not None else None

    def _hints(self) -> dict[str, tuple[int | None, ...]]:
        if self._shape_hints is None:
            self._shape_hints = _infer_shapes(self.model)
        return self._shape_hints

    def _fresh_dim(self) -> DimExpr:
        self.unknown_dims += 1
        name = f"unk{self.unknown_dims}"
        while name in self.symbols:
            self.unknown_dims += 1
            name = f"unk{self.unknown_dims}"
        self.symbols[name] = DEFAULT_SYMBOL_RANGE
        return DimExpr.symbol(name)

    def _value(self, info: onnx.ValueInfoProto, where: str) -> Value:
        if not info.type.HasField("tensor_type"):
            raise ModelError(f"{where} {info.name!r} is not a tensor; only tensor values are supported")
        dtype = dtype_from_onnx(info.type.tensor_type.elem_type, f"{where} {info.name!r}")
        shape = dims_from_onnx(info.type, self._fresh_dim)
        for dim in shape or ():
            if isinstance(dim, DimExpr):
                for symbol in dim.symbols():
                    self.symbols.setdefault(symbol, DEFAULT_SYMBOL_RANGE)
        return Value(info.name, TensorType(dtype, shape))

    # -- the walk --------------------------------------------------------------
    def run(self) -> Graph:
        graph = self.graph
        if graph.sparse_initializer:
            raise ModelError("sparse initializers are not supported")
        for init in graph.initializer:
            self.constants[init.name] = tensor_to_numpy(init, "initializer")
        self.used_names = {i.name for i in graph.input} | set(self.constants)
        self.used_names |= {o for n in graph.node for o in n.output if o}
        inputs = tuple(self._value(i, "graph input") for i in graph.input if i.name not in self.constants)
        self._process(graph.node)
        outputs = tuple(self._value(o, "graph output") for o in graph.output)
        nodes = self._keep_output_names(self.nodes, outputs)
        nodes = _dead_code_eliminated(nodes, {o.name for o in outputs})
        return self._finish(inputs, outputs, nodes)

    def _process(self, protos: Sequence[onnx.NodeProto]) -> None:
        """Convert, fold and keep each node; control flow is inlined (its body processed)."""
        for proto in protos:
            index = self._processed  # the node's position in the model (its default name)
            self._processed += 1
            label = _node_label(proto, index, self.opset)
            if proto.op_type in CONTROL_FLOW_OPS:
                self.inliner.expand(proto, label)
                continue
            node = Node(
                op=proto.op_type,
                inputs=tuple(self.alias.get(i, i) for i in proto.input),
                outputs=tuple(proto.output),
                attrs=tuple(sorted((a.name, attribute_value(a, label)) for a in proto.attribute)),
                name=proto.name or f"{proto.op_type}_{index}",
            )
            for converted in self.converter.convert(node, label):
                if not self._fold(converted, label):
                    self.nodes.append(converted)

    def _fold(self, node: Node, label: str) -> bool:
        """Evaluate a node whose inputs are all constants; True when folded away."""
        if node.op == "Constant":
            self.constants[node.outputs[0]] = _constant_value(node, label)
            return True
        present = [i for i in node.inputs if i]
        if self.folder is None or not self.folder.can_fold(node.op):
            return False
        if not all(i in self.constants for i in present):
            return False
        args = [self.constants[i] if i else None for i in node.inputs]
        if node.op != "ConstantOfShape" and not _small_enough(node.op, args):
            return False
        try:
            results = self.folder.evaluate_node(node.op, node.attrs, args, num_outputs=len(node.outputs))
        except ModelError as error:
            raise ModelError(f"{label}: {error}") from None
        for name, result in zip(node.outputs, results, strict=False):
            if name:
                self.constants[name] = result
        return True

    def _keep_output_names(self, nodes: list[Node], outputs: tuple[Value, ...]) -> list[Node]:
        """A removed Identity/Dropout must not rename a graph output: rename its source instead."""
        produced = {o for n in nodes for o in n.outputs}
        output_names = {o.name for o in outputs}
        renames: dict[str, str] = {}
        extra: list[Node] = []
        for out in outputs:
            source = self.alias.get(out.name, out.name)
            if source == out.name:
                continue
            if source in produced and source not in output_names and source not in renames:
                renames[source] = out.name
            else:
                extra.append(Node("Identity", (source,), (out.name,)))
        if renames:
            nodes = [
                Node(n.op, tuple(renames.get(i, i) for i in n.inputs), tuple(renames.get(o, o) for o in n.outputs),
                     n.attrs, n.name, n.domain)
                for n in nodes
            ]
            extra = [Node(n.op, tuple(renames.get(i, i) for i in n.inputs), n.outputs) for n in extra]
        return nodes + extra

    def _finish(self, inputs: tuple[Value, ...], outputs: tuple[Value, ...], nodes: list[Node]) -> Graph:
        used = {i for n in nodes for i in n.inputs if i} | {o.name for o in outputs}
        constants = {k: v for k, v in self.constants.items() if k in used}
        # a graph output may be a constant (legal ONNX, even for every output): the onnx
        # target writes it as an initializer, OpenCL serves it from the artefact's weights
        output_values = list(outputs)
        types: dict[str, TensorType] = {v.name: v.type for v in inputs}
        for name, array in constants.items():
            types[name] = TensorType(str(array.dtype), tuple(int(d) for d in array.shape))
        for out in output_values:
            types.setdefault(out.name, out.type)
        return Graph(
            name=self.graph.name or "model",
            inputs=inputs,
            outputs=tuple(output_values),
            nodes=tuple(_named(nodes)),
            constants=constants,
            types=types,
            opset=self.opset,
            symbols=dict(sorted(self.symbols.items())),
        )


def _small_enough(op: str, args: list[np.ndarray | None]) -> bool:
    total = sum(a.size for a in args if a is not None)
    if total > FOLD_LIMIT:
        return False
    if op in ("Expand", "Tile") and len(args) > 1 and args[1] is not None:
        target = [int(d) for d in args[1].reshape(-1)]
        if args[0] is None or any(d < 0 for d in target):
            return True  # evaluate_node reports the bad shape
        reps = np.prod(target, dtype=object) if target else 1
        return int(reps) * max(args[0].size, 1) <= FOLD_LIMIT
    return True


def _constant_value(node: Node, label: str) -> np.ndarray:
    attrs = node.attr_dict
    if "value" in attrs:
        return attrs["value"].to_numpy()
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise ModelError(f"{label}: Constant without a numeric value is not supported")


def _dead_code_eliminated(nodes: list[Node], outputs: set[str]) -> list[Node]:
    live = set(outputs)
    kept: list[Node] = []
    for node in reversed(nodes):
        if any(o in live for o in node.outputs if o):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    kept.reverse()
    return kept


def _named(nodes: list[Node]) -> list[Node]:
    """Give every node a unique non-empty name (keeping the model's where it is unique)."""
    counts: dict[str, int] = {}
    for node in nodes:
        if node.name:
            counts[node.name] = counts.get(node.name, 0) + 1
    taken: set[str] = set()
    named: list[Node] = []
    for index, node in enumerate(nodes):
        name = node.name if node.name and counts[node.name] == 1 else ""
        if not name:
            base = node.name or f"{node.op}_{index}"
            name, suffix = base, 0
            while name in taken or counts.get(name, 0):
                suffix += 1
                name = f"{base}_{suffix}"
        taken.add(name)
        named.append(Node(node.op, node.inputs, node.outputs, node.attrs, name, node.domain))
    return named


def _infer_shapes(model: onnx.ModelProto) -> dict[str, tuple[int | None, ...]]:
    # Infer on a data-free copy: initializers become typed inputs, so a 500 MB model
    # is not serialised twice just to learn shapes.
    light = onnx.ModelProto()
    light.ir_version = max(model.ir_version, 4)
    light.opset_import.extend(model.opset_import)
    graph = light.graph
    graph.node.extend(model.graph.node)
    graph.output.extend(model.graph.output)
    inits = {t.name for t in model.graph.initializer}
    graph.input.extend(i for i in model.graph.input if i.name not in inits)
    graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in model.graph.initializer)
    try:
        inferred = onnx.shape_inference.infer_shapes(light)
    except Exception:  # only a hint: a model onnx cannot infer simply gets the general form
        return {}
    found: dict[str, tuple[int | None, ...]] = {}
    graph = inferred.graph
    for info in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor_type = info.type.tensor_type
        if tensor_type.HasField("shape"):
            found[info.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                     for d in tensor_type.shape.dim)
        if tensor_type.elem_type:
            found[f"{_ELEM_TYPE}{info.name}"] = (tensor_type.elem_type,)
    # the element types onnx inferred inside If/Loop/Scan bodies, under their body names
    # (the inliner's `origins` map an instantiated value back); the outer graph's win
    bodies = [a.g if a.type == onnx.AttributeProto.GRAPH else sub for node in graph.node
              for a in node.attribute for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)]
    while bodies:
        body = bodies.pop()
        for info in list(body.value_info) + list(body.output) + list(body.input):
            if info.type.tensor_type.elem_type:
                found.setdefault(f"{_ELEM_TYPE}{info.name}", (info.type.tensor_type.elem_type,))
        bodies.extend(sub for node in body.node for a in node.attribute
                      for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs))
    return found
