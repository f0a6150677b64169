"""Operators lowered to simpler ones, for a backend that has no kernel of their own.

The onnx target writes RNN, GRU, LSTM, GroupNormalization, DFT and STFT back whole
(onnxruntime runs them; the importer folds the window functions on constant inputs). The OpenCL backend has no kernel for
them, so before planning it replaces each by operators it compiles (`decompose`):

- ``RNN`` / ``GRU`` / ``LSTM``: unrolled over the static sequence length, each direction
  on its own (reverse: from the last step back), one MatMul of the whole input sequence
  with W, then per step a MatMul with R and the gates as elementwise operators (every
  activation ONNX lists, with ``activation_alpha`` / ``activation_beta``, ``clip``,
  peepholes, ``input_forget``, ``linear_before_reset``, ``layout``). Run-time
  ``sequence_lens`` mask each step (Where): a batch entry past its length keeps its state
  and outputs zeros, which is also what makes a reverse direction start at its own last step;
- ``GroupNormalization``: Reshape to [N, groups, -1], InstanceNormalization (one row per
  group), Reshape back, scale and bias per channel;
- ``DFT`` with a constant axis and length: a MatMul with a constant matrix (the transform
  applied to the unit vectors, so onesided, inverse and irfft forms are the reference's);
  ``STFT`` with a constant step and frame length: a Gather of the frames, the window, that DFT;
- ``LayerNormalization`` whose Mean or InvStdDev output is used: Y stays a
  LayerNormalization (the rownorm kernel), the statistics are ONNX's function body's;
- ``MaxPool`` of 8- or 16-bit integers or float16: Cast to float32, MaxPool, Cast back
  (exact); one whose Indices output is used: MaxPool and the dnnr-internal MaxPoolIndices beside it;
- ``DynamicQuantizeLinear``, ``MeanVarianceNormalization``: ONNX's own function body
  (GroupNormalization's gives 3 kernels where InstanceNormalization's rownorm gives 1);
- ``TopK`` whose indices are used: TopK for the values and the dnnr-internal TopKIndices
  (rules/operators.dnnr, block "opsk") for the indices;
- ``Col2Im`` stays (its kernel is ``anchor indexed``, backends/opencl/ops_extra.py) when
  image_shape and block_shape are constants.

A node whose structure is not static (a symbolic sequence length; a run-time
DFT axis or length, STFT step or frame length, Col2Im shape) is refused with a `ModelError`
naming the node, its operator and opset, and what would make it compile. Every operator has one function in `DECOMPOSERS`; the graph it
returns has the new values untyped (the caller infers shapes again).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnx.inliner

from egraph_compiler.ir import conv_transpose
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import AttrValue, Graph, Node, Value
from egraph_compiler.ir.names import fresh_name
from egraph_compiler.ir.onnx_export import to_onnx
from egraph_compiler.ir.onnx_import import load_onnx


class _Builder:
    """Collects the nodes and constants a decomposition emits, with fresh value names."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.used = {v.name for v in graph.inputs} | set(graph.constants) | set(graph.types)
        self.used |= {o for n in graph.nodes for o in n.outputs if o}
        self.nodes: list[Node] = []
        self.constants: dict[str, np.ndarray] = dict(graph.constants)
        self.prefix = "d"
        self.dtype_hint = "float32"  # the dtype of scalar constants a recurrence's gates use

    def fresh(self, base: str) -> str:
        return fresh_name(f"{self.prefix}/{base}", self.used)

    def const(self, array: np.ndarray, base: str = "c") -> str:
        name = self.fresh(base)
        self.constants[name] = np.asarray(array)
        return name

    def op(self, op: str, inputs: Sequence[str], outputs: int | Sequence[str] = 1,
           **attrs: AttrValue) -> str | list[str]:
        names = [self.fresh(op.lower()) for _ in range(outputs)] if isinstance(outputs, int) \
            else list(outputs)
        self.nodes.append(Node(op, tuple(inputs), tuple(names), tuple(sorted(attrs.items())),
                               name=names[0]))
        return names[0] if len(names) == 1 else names

    def shape(self, value: str, node: Node) -> tuple[int, ...]:
        value_type = self.graph.types.get(value)
        shape = value_type.shape if value_type is not None else None
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise ModelError(f"{_label(node, self.graph.opset)}: the OpenCL target decomposes "
                             f"{node.op} only with static shapes, and '{value}' has shape "
                             f"{_text(shape)}\n  hint: bind the input dims (--bind NAME=INT)")
        return tuple(int(d) for d in shape)

    def dtype(self, value: str) -> str:
        return self.graph.types[value].dtype

    def constant_value(self, value: str) -> np.ndarray | None:
        return self.graph.constants.get(value) if value else None

    def rename_output(self, value: str, target: str) -> None:
        """Make the node that computes ``value`` (emitted here, used nowhere yet) write ``target``."""
        for k, node in enumerate(self.nodes):
            if value in node.outputs:
                outputs = tuple(target if o == value else o for o in node.outputs)
                self.nodes[k] = dataclasses.replace(node, outputs=outputs)
                return
        raise AssertionError(f"{value} was not emitted by this decomposition")

    # -- IR forms (constant axes, slice bounds and clip bounds are attributes) --------------
    def gather(self, x: str, index: int, axis: int = 0) -> str:
        return self.op("Gather", [x, self.const(np.asarray(index, dtype=np.int64), "index")], axis=axis)

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        return self.op("Slice", [x], starts=(start,), ends=(end,), axes=(axis,))

    def unsqueeze(self, x: str, axis: int) -> str:
        return self.op("Unsqueeze", [x], axes=(axis,))

    def stack(self, pieces: Sequence[str], axis: int) -> str:
        """The pieces, each given a new axis ``axis``, concatenated along it (a fresh value)."""
        expanded = [self.unsqueeze(p, axis) for p in pieces]
        return expanded[0] if len(expanded) == 1 else self.op("Concat", expanded, axis=axis)

    def scalar(self, value: float, dtype: str) -> str:
        return self.const(np.asarray(value, dtype=dtype), "s")


def _text(shape: object) -> str:
    return "unknown" if shape is None else f"[{', '.join(str(d) for d in shape)}]"  # type: ignore[attr-defined]


def _label(node: Node, opset: int) -> str:
    return f"node '{node.name}' ({node.op}, opset {opset})"


def _refuse(b: _Builder, node: Node, what: str, hint: str) -> ModelError:
    return ModelError(f"{_label(node, b.graph.opset)}: the OpenCL target {what}\n  hint: {hint}")


# -- recurrent layers -------------------------------------------------------------------------
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# ONNX's recurrent activations (the RNN operators' doc). Their alpha / beta default to the
# operator's (its schema's); Affine's and ScaledTanh's, operators ONNX has dropped, are here.
_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
                "HardSigmoid", "Elu", "Softsign", "Softplus")
_DROPPED = {"Affine": {"alpha": 1.0, "beta": 0.0}, "ScaledTanh": {"alpha": 1.0, "beta": 1.0}}

Activation = Callable[[_Builder, str], str]


def _activations(node: Node, directions: int) -> list[list[Activation]]:
    """Per direction, the activation functions (f, g[, h]) with their alpha and beta."""
    names = list(node.attr("activations") or ()) or list(_DEFAULT_ACTIVATIONS[node.op]) * directions
    per_direction = len(_DEFAULT_ACTIVATIONS[node.op])
    if len(names) != per_direction * directions:
        raise ModelError(f"node '{node.name}' ({node.op}): {len(names)} activations for "
                         f"{directions} direction(s); ONNX wants {per_direction} per direction")
    given = {"alpha": list(node.attr("activation_alpha") or ()), "beta": list(node.attr("activation_beta") or ())}
    functions: list[Activation] = []
    for name in names:
        op = next((a for a in _ACTIVATIONS if a.lower() == str(name).lower()), None)
        if op is None:
            raise ModelError(f"node '{node.name}' ({node.op}): activation '{name}' is not one of "
                             "ONNX's recurrent activations")
        schema = _DROPPED.get(op) or {k: a.default_value.f for k, a in onnx.defs.get_schema(op).attributes.items()}
        params = {k: float(given[k].pop(0) if given[k] else schema[k]) for k in ("alpha", "beta") if k in schema}
        functions.append(_activation(op, params))
    return [functions[d * per_direction:(d + 1) * per_direction] for d in range(directions)]


def _activation(op: str, params: dict[str, float]) -> Activation:
    if op == "Affine":
        return lambda b, x: b.op("Add", [b.op("Mul", [x, b.scalar(params["alpha"], b.dtype_hint)]),
                                         b.scalar(params["beta"], b.dtype_hint)])
    if op == "ScaledTanh":
        return lambda b, x: b.op("Mul", [b.op("Tanh", [b.op("Mul", [x, b.scalar(params["beta"], b.dtype_hint)])]),
                                         b.scalar(params["alpha"], b.dtype_hint)])
    return lambda b, x: b.op(op, [x], **params)


def _recurrent(b: _Builder, node: Node) -> None:
    kind = node.op
    gates = _GATES[kind]
    inputs = list(node.inputs) + [""] * (8 - len(node.inputs))
    x, w, r, bias, lengths, initial_h = inputs[:6]
    initial_c, peephole = (inputs[6], inputs[7]) if kind == "LSTM" else ("", "")
    dtype = b.dtype(x)
    b.dtype_hint = dtype
    batch_first = int(node.attr("layout", 0) or 0) == 1
    if batch_first:  # the recurrence runs on [seq, batch, ...]
        x = b.op("Transpose", [x], perm=(1, 0, 2))
        initial_h = b.op("Transpose", [initial_h], perm=(1, 0, 2)) if initial_h else ""
        initial_c = b.op("Transpose", [initial_c], perm=(1, 0, 2)) if initial_c else ""
    shape = b.shape(inputs[0], node)
    steps, batch = (shape[1], shape[0]) if batch_first else (shape[0], shape[1])
    directions = b.shape(w, node)[0]
    hidden = int(node.attr("hidden_size") or b.shape(r, node)[2])
    direction = str(node.attr("direction", "forward") or "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ModelError(f"node '{node.name}' ({kind}): direction '{direction}' is not ONNX's")
    if directions != (2 if direction == "bidirectional" else 1):
        raise ModelError(f"node '{node.name}' ({kind}): W has {directions} directions for "
                         f"direction='{direction}'")
    clip = node.attr("clip")
    activations = _activations(node, directions)
    zeros = b.const(np.zeros((batch, hidden), dtype=dtype), "zeros")
    ys, last_h, last_c = [], [], []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        # step t counts for batch entry n while t < sequence_lens[n]; each direction has
        # masks of its own (the fusion planner met a cycle when two directions shared them)
        masks: list[str | None] = [None] * steps
        for t in range(steps if lengths else 0):
            t_value = b.const(np.asarray(t, dtype=b.dtype(lengths)), "t")
            masks[t] = b.unsqueeze(b.op("Less", [t_value, lengths]), 1)
        f = activations[d]

        def clipped(value: str) -> str:
            return b.op("Clip", [value], min=-float(clip), max=float(clip)) if clip is not None else value

        w_t = b.op("Transpose", [b.gather(w, d)], perm=(1, 0))  # [input, gates*hidden]
        r_t = b.op("Transpose", [b.gather(r, d)], perm=(1, 0))  # [hidden, gates*hidden]
        size = gates * hidden
        xw = b.op("MatMul", [x, w_t])  # the whole sequence at once: [seq, batch, gates*hidden]
        r_bias = ""
        if bias:
            b_d = b.gather(bias, d)
            w_bias, r_bias = b.slice(b_d, 0, size, 0), b.slice(b_d, size, 2 * size, 0)
            # W's bias always adds to the input term; R's too except GRU's h gate
            xw = b.op("Add", [xw, w_bias if kind == "GRU" else b.op("Add", [w_bias, r_bias])])
        h = b.gather(initial_h, d) if initial_h else zeros
        c = (b.gather(initial_c, d) if initial_c else zeros) if kind == "LSTM" else ""
        peep = [b.slice(b.gather(peephole, d), k * hidden, (k + 1) * hidden, 0) for k in range(3)] \
            if peephole else []
        outputs: list[str] = [""] * steps
        for t in (reversed(range(steps)) if reverse else range(steps)):
            xt = b.gather(xw, t)  # [batch, gates*hidden]

            def gate(value: str, k: int) -> str:
                return b.slice(value, k * hidden, (k + 1) * hidden, 1)

            if kind == "RNN":
                new_h = f[0](b, clipped(b.op("Add", [xt, b.op("MatMul", [h, r_t])])))
                new_c = ""
            elif kind == "GRU":
                new_h, new_c = _gru_step(b, node, xt, h, r_t, r_bias, hidden, f, clipped, gate), ""
            else:
                new_h, new_c = _lstm_step(b, node, xt, h, c, r_t, peep, f, clipped, gate)
            mask = masks[t]
            if mask is not None:  # past its length an entry keeps its state and outputs zeros
                outputs[t] = b.op("Where", [mask, new_h, zeros])
                new_h = b.op("Where", [mask, new_h, h])
                new_c = b.op("Where", [mask, new_c, c]) if new_c else ""
            else:
                outputs[t] = new_h
            h, c = new_h, new_c
        ys.append(b.stack(outputs, 0))  # [seq, batch, hidden]
        last_h.append(h)
        last_c.append(c)
    results = [b.stack(ys, 1), b.stack(last_h, 0)]  # [seq, dirs, batch, hidden], [dirs, batch, hidden]
    if kind == "LSTM":
        results.append(b.stack(last_c, 0))
    if batch_first:
        results = [b.op("Transpose", [results[0]], perm=(2, 0, 1, 3))] + \
            [b.op("Transpose", [v], perm=(1, 0, 2)) for v in results[1:]]
    for value, target in zip(results, node.outputs, strict=False):
        if target:
            b.rename_output(value, target)


def _gru_step(b: _Builder, node: Node, xt: str, h: str, r_t: str, r_bias: str, hidden: int,
              f: list[Activation], clipped: Callable[[str], str], gate: Callable[[str, int], str]) -> str:
    """z = f(x Wz + h Rz + b), r = f(x Wr + h Rr + b), h~ = g(x Wh + (r h) Rh + b) or, with
    linear_before_reset, g(x Wh + r (h Rh + Rbh)); h' = (1 - z) h~ + z h."""
    before_reset = int(node.attr("linear_before_reset", 0) or 0)
    hr = b.op("MatMul", [h, r_t])  # [batch, 3*hidden]
    if r_bias:
        hr = b.op("Add", [hr, r_bias])
    z = f[0](b, clipped(b.op("Add", [gate(xt, 0), gate(hr, 0)])))
    reset = f[0](b, clipped(b.op("Add", [gate(xt, 1), gate(hr, 1)])))
    if before_reset:
        recurrent = b.op("Mul", [reset, gate(hr, 2)])
    else:
        recurrent = b.op("MatMul", [b.op("Mul", [reset, h]), b.slice(r_t, 2 * hidden, 3 * hidden, 1)])
        if r_bias:
            recurrent = b.op("Add", [recurrent, b.slice(r_bias, 2 * hidden, 3 * hidden, 0)])
    candidate = f[1](b, clipped(b.op("Add", [gate(xt, 2), recurrent])))
    one = b.scalar(1.0, b.dtype_hint)
    keep = b.op("Mul", [b.op("Sub", [one, z]), candidate])
    return b.op("Add", [keep, b.op("Mul", [z, h])])


def _lstm_step(b: _Builder, node: Node, xt: str, h: str, c: str, r_t: str, peep: list[str],
               f: list[Activation], clipped: Callable[[str], str],
               gate: Callable[[str, int], str]) -> tuple[str, str]:
    """Gates i, o, f, c (ONNX's order), peepholes P = [Pi, Po, Pf]:
    i = f(x Wi + h Ri + Pi c + b), f = f(x Wf + h Rf + Pf c + b) (1 - i with input_forget),
    c' = f c + i g(x Wc + h Rc + b), o = f(x Wo + h Ro + Po c' + b), h' = o h(c')."""
    pre = b.op("Add", [xt, b.op("MatMul", [h, r_t])])
    i_pre, o_pre, f_pre, c_pre = (gate(pre, k) for k in range(4))
    if peep:
        i_pre = b.op("Add", [i_pre, b.op("Mul", [peep[0], c])])
        f_pre = b.op("Add", [f_pre, b.op("Mul", [peep[2], c])])
    i = f[0](b, clipped(i_pre))
    if int(node.attr("input_forget", 0) or 0):
        forget = b.op("Sub", [b.scalar(1.0, b.dtype_hint), i])
    else:
        forget = f[0](b, clipped(f_pre))
    new_c = b.op("Add", [b.op("Mul", [forget, c]), b.op("Mul", [i, f[1](b, clipped(c_pre))])])
    if peep:
        o_pre = b.op("Add", [o_pre, b.op("Mul", [peep[1], new_c])])
    o = f[0](b, clipped(o_pre))
    return b.op("Mul", [o, f[2](b, new_c)]), new_c


# -- normalisation ----------------------------------------------------------------------------
def _onnx_function_body(b: _Builder, node: Node, outputs: Sequence[str] = ()) -> None:
    """``node``'s ``outputs`` (default: all) as ONNX defines them: its schema's function body
    at the graph's opset (the schema's attribute defaults filled in), inlined by onnx and
    imported like any model (what the other outputs need alone is dropped), its own values
    renamed apart from the graph's."""
    outer = [v for v in (*node.inputs, *node.outputs) if v]
    inputs = tuple(Value(v, b.graph.types[v]) for v in dict.fromkeys(node.inputs) if v and v not in b.constants)
    wanted = tuple(Value(v, b.graph.types[v]) for v in outputs or node.outputs if v)
    one = Graph(node.name, inputs, wanted, (node,),
                {v: b.constants[v] for v in node.inputs if v in b.constants},
                {v: b.graph.types[v] for v in outer if v in b.graph.types}, b.graph.opset)
    model = to_onnx(one)
    model.graph.value_info.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                                  for t in model.graph.initializer)  # the inliner types its operands
    written = next(n for n in model.graph.node if n.op_type == node.op)
    given = {a.name for a in written.attribute}
    written.attribute.extend(a.default_value for name, a in onnx.defs.get_schema(node.op, model.opset_import[0].version)
                             .attributes.items() if a.default_value.type and name not in given)
    try:
        body = load_onnx(onnx.inliner.inline_selected_functions(model, [], exclude=True, inline_schema_functions=True))
    except (ModelError, RuntimeError) as error:  # onnx's inliner asserts in C++
        raise _refuse(b, node, f"cannot inline ONNX's function body of {node.op}: {str(error).splitlines()[0]}",
                      "bind the input dims (--bind NAME=INT)") from None
    rename = {v: v if v in outer else b.fresh(v) for v in (*body.constants, *(o for n in body.nodes for o in n.outputs))}
    b.constants.update({rename[k]: v for k, v in body.constants.items()})
    b.nodes += [dataclasses.replace(n, inputs=tuple(rename.get(i, i) for i in n.inputs), name=rename[n.outputs[0]],
                                    outputs=tuple(rename.get(o, o) for o in n.outputs)) for n in body.nodes]


def _group_normalization(b: _Builder, node: Node) -> None:
    x, scale, bias = node.inputs[:3]
    shape = b.shape(x, node)
    groups = int(node.attr("num_groups"))
    channels = shape[1]
    if groups <= 0 or channels % groups:
        raise ModelError(f"node '{node.name}' (GroupNormalization): {channels} channels do not "
                         f"split into num_groups={groups}")
    dtype = b.dtype(x)
    rows = b.op("Reshape", [x, b.const(np.asarray([shape[0], groups, -1], dtype=np.int64), "shape")])
    normalised = b.op("InstanceNormalization",
                      [rows, b.const(np.ones(groups, dtype=dtype), "ones"),
                       b.const(np.zeros(groups, dtype=dtype), "zeros")],
                      epsilon=float(node.attr("epsilon", 1e-5)))
    back = b.op("Reshape", [normalised, b.const(np.asarray(shape, dtype=np.int64), "shape")])
    per_channel = np.asarray([channels] + [1] * (len(shape) - 2), dtype=np.int64)
    scaled = b.op("Mul", [back, b.op("Reshape", [scale, b.const(per_channel, "shape")])])
    b.op("Add", [scaled, b.op("Reshape", [bias, b.const(per_channel, "shape")])], outputs=[node.outputs[0]])


def _layer_normalization(b: _Builder, node: Node) -> None:
    """LayerNormalization whose Mean or InvStdDev output is used: the rownorm kernel writes
    Y alone, so Y stays a LayerNormalization and the statistics are ONNX's function body's."""
    b.nodes.append(dataclasses.replace(node, outputs=node.outputs[:1]))
    _onnx_function_body(b, node, node.outputs[1:])


def _top_k(b: _Builder, node: Node) -> None:
    """TopK whose indices are used: TopK writes the values, the dnnr-internal TopKIndices
    (the same selection) the indices, since an OpenCL kernel writes one output."""
    values, indices = (*node.outputs, "")[:2]
    if values:
        b.nodes.append(dataclasses.replace(node, outputs=(values,)))
    b.nodes.append(dataclasses.replace(node, op="TopKIndices", outputs=(indices,),
                                       name=f"{node.name}/indices"))


# 8- and 16-bit integers and float16 are exact in float32, and max is monotone: MaxPool over
# them is the float32 MaxPool of their conversion (the pool kernels are generated for float32)
_EXACT_IN_FLOAT32 = {"int8": 3, "uint8": 2, "int16": 5, "uint16": 4, "float16": 10}  # ONNX type codes


def _max_pool(b: _Builder, node: Node) -> None:
    """MaxPool of 8/16-bit integers or float16: Cast to float32, MaxPool, Cast back (exact).
    MaxPool whose Indices output is used: MaxPool for the values and the dnnr-internal
    MaxPoolIndices (the same window walk) for the indices, since a kernel writes one output."""
    x = node.inputs[0]
    values, indices = (*node.outputs, "")[:2]
    integer = b.dtype(x) in _EXACT_IN_FLOAT32
    pooled = b.fresh("pooled") if integer else values
    source = b.op("Cast", [x], to=1) if integer else x
    b.nodes.append(dataclasses.replace(node, inputs=(source,), outputs=(pooled,)))
    if integer:
        b.op("Cast", [pooled], [values], to=_EXACT_IN_FLOAT32[b.dtype(x)])
    if indices:
        b.nodes.append(dataclasses.replace(node, op="MaxPoolIndices", inputs=(pooled, source),
                                           outputs=(indices,), name=f"{node.name}/indices"))


# -- signal -----------------------------------------------------------------------------------
def _dft(b: _Builder, node: Node) -> None:
    x = node.inputs[0]
    if len(node.inputs) > 2 and node.inputs[2]:
        raise _refuse(b, node, "needs DFT's axis as a compile-time constant",
                      "make the axis input an initializer (or write it as opset 17-19's attribute)")
    length_input = node.inputs[1] if len(node.inputs) > 1 else ""
    given = b.constant_value(length_input)
    if length_input and given is None:
        raise _refuse(b, node, "needs DFT's dft_length as a compile-time constant",
                      "make dft_length an initializer")
    shape = b.shape(x, node)
    axis = int(node.attr("axis", 1)) % len(shape)
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    n = shape[axis]
    length = int(np.asarray(given).reshape(-1)[0]) if given is not None else \
        (2 * (n - 1) if inverse and onesided else n)
    _dft_matmul(b, x, shape, b.dtype(x), axis, length, inverse, onesided, node.outputs[0])


def _dft_matmul(b: _Builder, x: str, shape: tuple[int, ...], dtype: str, axis: int, length: int,
                inverse: bool, onesided: bool, output: str) -> None:
    """``output`` = the DFT of ``x`` along ``axis``: the axis and the parts axis moved last,
    flattened, times the transform of the unit vectors, and moved back."""
    rank = len(shape)
    n, parts = shape[axis], shape[-1]
    basis = np.eye(n * parts).reshape(n * parts, n, parts)
    matrix = _reference_output("DFT", [basis, np.asarray(length, np.int64), np.asarray(1, np.int64)],
                               inverse=int(inverse), onesided=int(onesided))  # [n*parts, m, parts_out]
    m, parts_out = matrix.shape[1], matrix.shape[2]
    others = [k for k in range(rank - 1) if k != axis]
    perm = (*others, axis, rank - 1)
    moved = b.op("Transpose", [x], perm=perm)
    lead = [shape[k] for k in others]
    flat = b.op("Reshape", [moved, b.const(np.asarray([*lead, n * parts], dtype=np.int64), "shape")])
    product = b.op("MatMul", [flat, b.const(matrix.reshape(n * parts, m * parts_out).astype(dtype), "dft")])
    unflat = b.op("Reshape", [product, b.const(np.asarray([*lead, m, parts_out], dtype=np.int64), "shape")])
    inverse_perm = tuple(int(k) for k in np.argsort(perm))
    b.op("Transpose", [unflat], outputs=[output], perm=inverse_perm)


def _stft(b: _Builder, node: Node) -> None:
    """Frames (a Gather of constant positions), times the window, then the onesided DFT of
    each frame (`_dft_matmul`)."""
    inputs = list(node.inputs) + [""] * (4 - len(node.inputs))
    signal, step_input, window, length_input = inputs[:4]
    step = b.constant_value(step_input)
    if step is None or (length_input and b.constant_value(length_input) is None):
        raise _refuse(b, node, "needs STFT's frame_step and frame_length as compile-time "
                      "constants (the output shape is computed from them)",
                      "make them initializers")
    shape = b.shape(signal, node)
    if length_input:
        length = int(np.asarray(b.constant_value(length_input)).reshape(-1)[0])
    else:
        length = b.shape(window, node)[0] if window else shape[1]
    hop = int(np.asarray(step).reshape(-1)[0])
    frames = 1 + (shape[1] - length) // hop
    if hop <= 0 or frames <= 0 or (window and b.shape(window, node)[0] != length):
        raise ModelError(f"{_label(node, b.graph.opset)}: frame_step {hop}, frame_length {length} "
                         f"and a signal of {shape[1]} samples give no frames (or the window's "
                         "length differs from frame_length)")
    positions = np.arange(frames)[:, None] * hop + np.arange(length)[None, :]
    framed = b.op("Gather", [signal, b.const(positions.astype(np.int64), "frames")], axis=1)
    if window:  # [batch, frames, length, parts] times the window along length
        framed = b.op("Mul", [framed, b.op("Reshape", [window, b.const(np.asarray([length, 1], dtype=np.int64),
                                                                                "shape")])])
    onesided = bool(node.attr("onesided", 1))
    _dft_matmul(b, framed, (shape[0], frames, length, shape[2]), b.dtype(signal), 2, length, False,
                onesided, node.outputs[0])


def _reference_output(op: str, values: Sequence[np.ndarray], **attrs: AttrValue) -> np.ndarray:
    """``op``'s first output on constant ``values``, by ONNX's reference implementation."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"input{k}" for k in range(len(values))]
    evaluator = ReferenceEvaluator(helper.make_node(op, names, ["output"], **attrs))
    return np.asarray(evaluator.run(None, dict(zip(names, values, strict=True)))[0])


def _col2im(b: _Builder, node: Node) -> None:
    """Kept for its kernel (`anchor indexed`) when image_shape and block_shape are constants."""
    for position, what in ((1, "image_shape"), (2, "block_shape")):
        if b.constant_value(node.inputs[position]) is None:
            raise _refuse(b, node, f"needs Col2Im's {what} as a compile-time constant (the "
                          "output shape is its value)", f"make {what} an initializer")
    b.nodes.append(node)


# Every operator the OpenCL backend lowers before planning, one function each.
DECOMPOSERS: dict[str, Callable[[_Builder, Node], None]] = {
    "RNN": _recurrent, "GRU": _recurrent, "LSTM": _recurrent,
    "GroupNormalization": _group_normalization, "DFT": _dft,
    "STFT": _stft,
    "Col2Im": _col2im,
    "LayerNormalization": _layer_normalization,
    "TopK": _top_k,
    "MeanVarianceNormalization": _onnx_function_body,
    "DynamicQuantizeLinear": _onnx_function_body,
    "MaxPool": _max_pool,
    "ConvTranspose": conv_transpose.decompose,  # one Conv per stride phase
}
# Operators decomposed only in some forms (the others keep their kernel as they are).
_ONLY_WHEN: dict[str, Callable[[Graph, Node], bool]] = {
    "LayerNormalization": lambda _, node: any(node.outputs[1:]),  # Mean / InvStdDev used
    "TopK": lambda _, node: len(node.outputs) > 1 and bool(node.outputs[1]),  # indices used
    "MaxPool": lambda graph, node: (len(node.outputs) > 1 and bool(node.outputs[1])) or (
        node.inputs[0] in graph.types and graph.types[node.inputs[0]].dtype in _EXACT_IN_FLOAT32),
    "ConvTranspose": lambda graph, node: conv_transpose.plan(graph, node) is not None,
}


def _decomposed(graph: Graph, node: Node) -> bool:
    return node.op in DECOMPOSERS and _ONLY_WHEN.get(node.op, lambda _, __: True)(graph, node)


def decompose(graph: Graph) -> Graph | None:
    """``graph`` with every operator of `DECOMPOSERS` replaced by simpler ones (new values
    untyped: infer shapes again), or None when it has none."""
    if not any(_decomposed(graph, node) for node in graph.nodes):
        return None
    b = _Builder(graph)
    for index, node in enumerate(graph.nodes):
        function = DECOMPOSERS.get(node.op)
        if function is None or not _decomposed(graph, node):
            b.nodes.append(node)
            continue
        b.prefix = node.name or f"{node.op}_{index}"
        function(b, node)
    produced_constants = set(b.constants) - set(graph.constants)
    types = {k: v for k, v in graph.types.items() if k not in produced_constants}
    return dataclasses.replace(graph, nodes=tuple(b.nodes), constants=b.constants, types=types)
