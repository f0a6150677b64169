"""Rewrites before the Hexagon lowering, so that operators the lowering has kernels (or a
float fallback) for cover forms they do not take directly (wav2vec2's feature extractor);
each computes the same values:

- a layout operator (Unsqueeze, Reshape, …) of a float graph input read only by one
  QuantizeLinear: quantisation is elementwise, so ``Q(view(x)) = view(Q(x))``; the host
  quantises the input as it arrives and the view runs on the integers (exact);
- a grouped integer convolution that is not depthwise (wav2vec2's positional conv): one
  convolution per group on a Gather of its input channels, the outputs concatenated
  (quantised alike, so the concat copies);
- a 1-D integer convolution (QConvInt, QLinearConv with a rank-3 weight): the 2-D one over
  a map of height 1, between an Unsqueeze and a Squeeze of axis 2 (the same sums, so
  exact), which the lowering then treats as any 2-D convolution (GEMM or depthwise);
- Slice with constant starts/ends/axes/steps of a tensor of static shape (wav2vec2's
  trim after its positional conv): a Gather of the flattened tensor at the elements the
  registry's Slice selects (its evaluator applied to their positions), a table copy;
- InstanceNormalization (GroupNormalization with one group per channel, as exported) of
  an [N, C, spatial…] tensor: LayerNormalization over the spatial axes (axis 2, whose
  float fallback exists), then the per-channel scale and bias as Mul and Add of constants
  (left out where they are ones and zeros). Float operators either way: the quantised
  output is onnxruntime's within its float rounding."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from egraph_compiler import ops
from egraph_compiler.ir.graph import Graph, Node, TensorType
from egraph_compiler.ops.evaluate import evaluate_node
from egraph_compiler.ops.quantised import INTEGER_SIGNATURES

_HEIGHT_AXIS = 2  # where the 1-D convolution's map gains its height of 1


def _fresh(taken: set[str], name: str) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def before_lowering(graph: Graph) -> Graph:
    """``graph`` with the rewrites applied (the same graph where none applies)."""
    consumers = graph.consumers()
    graph_inputs = {v.name for v in graph.inputs} - set(graph.constants)
    taken = {n for node in graph.nodes for n in (*node.inputs, *node.outputs)} | set(graph.constants)
    constants = dict(graph.constants)
    nodes: list[Node] = []
    skipped: set[int] = set()
    for node in graph.nodes:
        if id(node) in skipped:
            continue
        readers = consumers.get(node.outputs[0], []) if node.outputs else []
        moves = getattr(ops.current().get(node.op), "moves_elements", False)  # a view of its input
        if moves and node.inputs[0] in graph_inputs and len(readers) == 1 and readers[0].op == "QuantizeLinear":
            (quantize,) = readers
            quantised = _fresh(taken, f"{node.inputs[0]}_quantised")
            nodes.append(replace(quantize, inputs=(node.inputs[0], *quantize.inputs[1:]), outputs=(quantised,)))
            nodes.append(replace(node, inputs=(quantised, *node.inputs[1:]), outputs=quantize.outputs))
            skipped.add(id(quantize))
            continue
        signature = INTEGER_SIGNATURES.get(node.op)
        weight = node.inputs[signature[2][0]] if signature is not None and signature[0] == "Conv" else ""
        if weight in constants:
            x_position = signature[1][0][0]  # type: ignore[index]
            for part in _per_group(node, x_position, signature, constants, taken):  # type: ignore[arg-type]
                if part.op != node.op:  # the groups' Gathers and Concat
                    nodes.append(part)
                    continue
                part_weight = part.inputs[signature[2][0]]  # type: ignore[index]
                nodes.extend(_as_2d(part, x_position, part_weight, constants, taken)
                             if np.ndim(constants[part_weight]) == 3 else [part])
            continue
        x_type = graph.types.get(node.inputs[0]) if node.inputs else None
        static = x_type is not None and x_type.shape is not None and all(isinstance(d, int) for d in x_type.shape)
        if node.op == "Slice" and static and all(i in constants for i in node.inputs[1:] if i):
            nodes.extend(_as_gather(node, x_type, constants, taken))  # type: ignore[arg-type]
            continue
        if node.op == "InstanceNormalization" and static and len(x_type.shape) >= 3:  # type: ignore[union-attr]
            affine = [_float_constant(graph, name) for name in node.inputs[1:3]]
            if all(a is not None for a in affine):
                nodes.extend(_as_layer_norm(node, x_type, affine, constants, taken))  # type: ignore[arg-type]
                continue
        nodes.append(node)
    if len(nodes) == len(graph.nodes) and all(a is b for a, b in zip(nodes, graph.nodes, strict=True)):
        return graph
    return replace(graph, nodes=tuple(nodes), constants=constants)


def _per_group(node: Node, x_position: int, signature: tuple, constants: dict[str, np.ndarray],
               taken: set[str]) -> list[Node]:
    """A grouped, not depthwise, convolution as one per group (``[node]`` otherwise)."""
    group = int(node.attr("group", 1))  # type: ignore[arg-type]
    w = np.asarray(constants[node.inputs[signature[2][0]]])
    if group == 1 or (w.shape[1] == 1 and w.shape[0] == group):
        return [node]
    in_per_group, out_per_group = w.shape[1], w.shape[0] // group
    # operands cut per group: the weight and, where per channel, its scale and zero point; the bias and its scale
    per_output = [signature[2][0]] + [
        i for i in (*signature[2][1:3], *(signature[3] or ())) if i is not None and i < len(node.inputs)
        and node.inputs[i] in constants and np.size(constants[node.inputs[i]]) == w.shape[0] > 1]
    parts, outputs = [], []
    for k in range(group):
        indices = _fresh(taken, f"{node.name}_group{k}_channels")
        constants[indices] = np.arange(k * in_per_group, (k + 1) * in_per_group, dtype=np.int64)
        x_k = _fresh(taken, f"{node.inputs[x_position]}_group{k}")
        parts.append(Node("Gather", (node.inputs[x_position], indices), (x_k,), (("axis", 1),), f"{node.name}_group{k}_in"))
        inputs = list(node.inputs)
        inputs[x_position] = x_k
        for i in per_output:
            cut = _fresh(taken, f"{node.inputs[i]}_group{k}")
            constants[cut] = np.asarray(constants[node.inputs[i]])[k * out_per_group:(k + 1) * out_per_group]
            inputs[i] = cut
        outputs.append(_fresh(taken, f"{node.outputs[0]}_group{k}"))
        attrs = {**node.attr_dict, "group": 1}
        parts.append(replace(node, inputs=tuple(inputs), outputs=(outputs[-1],), attrs=tuple(sorted(attrs.items())),
                             name=f"{node.name}_group{k}"))
    return [*parts, Node("Concat", tuple(outputs), node.outputs, (("axis", 1),), f"{node.name}_groups")]


def _as_2d(node: Node, x_position: int, weight: str, constants: dict[str, np.ndarray], taken: set[str]
           ) -> list[Node]:
    """Unsqueeze(x, 2) → the convolution with H = 1 → Squeeze(·, 2)."""
    axes = _fresh(taken, f"{node.name}_height_axis")
    constants[axes] = np.array([_HEIGHT_AXIS], np.int64)
    weight_2d = _fresh(taken, f"{weight}_2d")
    constants[weight_2d] = np.asarray(constants[weight])[:, :, None, :]
    x = node.inputs[x_position]
    x_2d, y_2d = _fresh(taken, f"{x}_2d"), _fresh(taken, f"{node.outputs[0]}_2d")
    attrs = node.attr_dict
    (begin, end) = tuple(attrs.get("pads", (0, 0)))  # type: ignore[misc]
    widened = {"kernel_shape": (1, *tuple(attrs.get("kernel_shape", constants[weight].shape[2:]))),  # type: ignore[arg-type]
               "strides": (1, *tuple(attrs.get("strides", (1,)))),  # type: ignore[arg-type]
               "dilations": (1, *tuple(attrs.get("dilations", (1,)))),  # type: ignore[arg-type]
               "pads": (0, begin, 0, end)}
    inputs = list(node.inputs)
    inputs[x_position] = x_2d
    inputs[inputs.index(weight)] = weight_2d
    return [Node("Unsqueeze", (x, axes), (x_2d,), name=f"{node.name}_to_2d"),
            replace(node, inputs=tuple(inputs), outputs=(y_2d,), attrs=tuple(sorted({**attrs, **widened}.items()))),
            Node("Squeeze", (y_2d, axes), node.outputs, name=f"{node.name}_to_1d")]


def _float_constant(graph: Graph, name: str) -> np.ndarray | None:
    """The float32 value of a constant, or of a DequantizeLinear of constants (as ONNX
    computes it: (q − z)·s); None for anything computed at run time."""
    if name in graph.constants:
        return np.asarray(graph.constants[name], np.float32)
    producer = graph.producer().get(name)
    if producer is None or producer.op != "DequantizeLinear" or \
            not all(i in graph.constants for i in producer.inputs if i):
        return None
    q, scale = (np.asarray(graph.constants[i]) for i in producer.inputs[:2])
    zero = np.asarray(graph.constants[producer.inputs[2]]) if len(producer.inputs) > 2 and producer.inputs[2] \
        else np.zeros((), np.int64)
    if scale.size != 1 or zero.size != 1:
        return None
    return ((q.astype(np.int64) - zero.astype(np.int64)).astype(np.float32) * scale.astype(np.float32))


def _as_layer_norm(node: Node, x_type: TensorType, affine: list[np.ndarray], constants: dict[str, np.ndarray],
                   taken: set[str]) -> list[Node]:
    """LayerNormalization(x, ones, axis=2) · scale[c] + bias[c]."""
    shape = tuple(int(d) for d in x_type.shape)  # type: ignore[union-attr]
    ones = _fresh(taken, f"{node.name}_ones")
    constants[ones] = np.ones(shape[2:], np.float32)
    per_channel = (shape[1],) + (1,) * (len(shape) - 2)
    steps = [("Mul", affine[0], 1.0), ("Add", affine[1], 0.0)]
    steps = [(op, value, neutral) for op, value, neutral in steps if not np.all(value == neutral)]
    value = _fresh(taken, f"{node.outputs[0]}_normalised") if steps else node.outputs[0]
    epsilon = float(node.attr("epsilon", 1e-5))  # type: ignore[arg-type]
    nodes = [Node("LayerNormalization", (node.inputs[0], ones), (value,),
                  (("axis", 2), ("epsilon", epsilon)), f"{node.name}_rows")]
    for k, (op, data, _) in enumerate(steps):
        operand = _fresh(taken, f"{node.name}_{op.lower()}")
        constants[operand] = np.asarray(data, np.float32).reshape(per_channel)
        out = node.outputs[0] if k == len(steps) - 1 else _fresh(taken, f"{node.outputs[0]}_{op.lower()}")
        nodes.append(Node(op, (value, operand), (out,), name=f"{node.name}_{op.lower()}"))
        value = out
    return nodes


def _as_gather(node: Node, x_type: TensorType, constants: dict[str, np.ndarray], taken: set[str]) -> list[Node]:
    """Reshape(x, [-1]) → Gather at the flat positions Slice selects (shaped as its output)."""
    positions = np.arange(int(np.prod(x_type.shape)), dtype=np.int64).reshape(x_type.shape)  # type: ignore[arg-type]
    (table,) = evaluate_node(node.op, node.attrs, [positions, *(constants[i] if i else None for i in node.inputs[1:])])
    flat_shape, indices = _fresh(taken, f"{node.name}_flat_shape"), _fresh(taken, f"{node.name}_positions")
    constants[flat_shape] = np.array([-1], np.int64)
    constants[indices] = np.asarray(table, np.int64)
    flat = _fresh(taken, f"{node.inputs[0]}_flat")
    return [Node("Reshape", (node.inputs[0], flat_shape), (flat,), name=f"{node.name}_flatten"),
            Node("Gather", (flat, indices), node.outputs, (("axis", 0),), node.name)]
