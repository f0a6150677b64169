"""``auto_pad`` made explicit before the e-graph runs the Hexagon schedule.

rules/quant.dnnr's integer convolution (QConvInt) has explicit pads only, so its
qdq-conv rules match ``auto_pad="NOTSET"``; exporters write VALID / SAME_UPPER /
SAME_LOWER instead (the TorchScript export of TF-style "same" padding in EfficientNet).
Where the input's spatial size is static, each is exactly a list of pads (ONNX's
definition: total = max((⌈in/s⌉ − 1)·s + (k − 1)·d + 1 − in, 0), the odd pad at the end
for SAME_UPPER, at the start for SAME_LOWER; VALID: none), so the node is rewritten
with them and the rules see the form they match. A symbolic size is left as it is."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node, TensorType
from egraph_compiler.ops.evaluate import NEVER_FOLD, evaluate_node
from egraph_compiler.shapes import infer_node

_WINDOWED = ("Conv", "MaxPool", "AveragePool")


def _explicit(node: Node, spatial: tuple[int, ...], kernel: tuple[int, ...]) -> tuple[int, ...]:
    mode = str(node.attr("auto_pad", "NOTSET"))
    n = len(spatial)
    strides = tuple(int(s) for s in node.attr("strides", (1,) * n))  # type: ignore[union-attr]
    dilations = tuple(int(d) for d in node.attr("dilations", (1,) * n))  # type: ignore[union-attr]
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        begins.append(small if mode == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return (*begins, *ends)


def _static_types(graph: Graph) -> dict[str, TensorType]:
    """Every value's type, the integer compile-time values evaluated on the way (a Pad's
    pads computed by a Shape → … → Reshape chain: the e-graph folds them later, the
    sizes after it must be known now); a value left unknown has no entry."""
    types: dict[str, TensorType] = {v.name: v.type for v in graph.inputs}
    known: dict[str, np.ndarray] = {}
    for name, array in graph.constants.items():
        known[name] = np.asarray(array)
        types[name] = TensorType(str(known[name].dtype), tuple(known[name].shape))
    for node in graph.nodes:
        data = [i for i in node.inputs if i]
        source = types.get(node.inputs[0]) if node.inputs else None
        if node.op == "Shape" and source is not None and source.shape is not None and \
                all(isinstance(d, int) for d in source.shape):
            start, end = int(node.attr("start", 0)), node.attr("end", None)  # type: ignore[arg-type]
            known[node.outputs[0]] = np.asarray(source.shape, np.int64)[start:None if end is None else int(end)]  # type: ignore[arg-type]
            types[node.outputs[0]] = TensorType("int64", tuple(known[node.outputs[0]].shape))
            continue
        try:
            if data and node.op not in NEVER_FOLD and all(i in known for i in data) and \
                    all(np.issubdtype(known[i].dtype, np.integer) for i in data):
                values = evaluate_node(node.op, node.attrs, [known[i] if i else None for i in node.inputs],
                                       len(node.outputs))
                for name, value in zip(node.outputs, values, strict=False):
                    known[name] = np.asarray(value)
                    types[name] = TensorType(str(known[name].dtype), tuple(known[name].shape))
                continue
            attrs = node.attr_dict
            if node.op == "Pad" and len(node.inputs) > 1 and node.inputs[1] in known:  # the rule reads the attribute
                attrs = {**attrs, "pads": tuple(int(v) for v in known[node.inputs[1]].reshape(-1))}
            outputs, _ = infer_node(node.op, attrs, [types.get(i) if i else None for i in node.inputs],
                                    num_outputs=len(node.outputs),
                                    constants={k: known[i] for k, i in enumerate(node.inputs) if i in known},
                                    values={k: tuple(int(v) for v in known[i].reshape(-1))
                                            for k, i in enumerate(node.inputs)
                                            if i in known and known[i].ndim <= 1 and
                                            np.issubdtype(known[i].dtype, np.integer)})
        except (ModelError, ValueError, TypeError, KeyError):
            continue
        for name, value_type in zip(node.outputs, outputs, strict=False):
            if name:
                types[name] = value_type
    return types


def explicit_pads(graph: Graph) -> Graph:
    """``graph`` with every Conv / MaxPool / AveragePool of static spatial size and an
    ``auto_pad`` other than NOTSET rewritten with the equivalent explicit ``pads``."""
    if not any(n.op in _WINDOWED and str(n.attr("auto_pad", "NOTSET")) not in ("NOTSET", "VALID")
               for n in graph.nodes):
        types = graph.types
    else:  # SAME_*: the pads depend on the input's size
        types = _static_types(graph)
    nodes, changed = [], False
    for node in graph.nodes:
        mode = str(node.attr("auto_pad", "NOTSET"))
        kernel = node.attr("kernel_shape", None)
        if kernel is None and node.op == "Conv" and len(node.inputs) > 1:
            w = types.get(node.inputs[1])
            kernel = w.shape[2:] if w is not None and w.shape is not None else None
        x = types.get(node.inputs[0]) if node.inputs else None
        spatial = tuple(x.shape[2:]) if x is not None and x.shape is not None else ()
        static = kernel is not None and all(isinstance(d, int) for d in (*spatial, *kernel)) \
            and len(spatial) == len(kernel)  # type: ignore[arg-type]
        if node.op not in _WINDOWED or mode == "NOTSET" or kernel is None or \
                not (mode == "VALID" or static):  # VALID needs no size: no pads at all
            nodes.append(node)
            continue
        pads = (0,) * (2 * len(kernel)) if mode == "VALID" else \
            _explicit(node, spatial, tuple(int(k) for k in kernel))  # type: ignore[arg-type, union-attr]
        attrs = {**node.attr_dict, "auto_pad": "NOTSET", "pads": pads}
        nodes.append(replace(node, attrs=tuple(sorted(attrs.items()))))
        changed = True
    return replace(graph, nodes=tuple(nodes)) if changed else graph
