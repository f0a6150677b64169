"""Lower a QDQ-quantised graph to integer operators with explicit requantisation.

The patterns (also declared in ``rules/quant.dnnr``) are matched here in Python
because the e-graph engine does not yet run the quantisation rules:
``Q(op(DQ(x), DQ(w), DQ(b)))`` becomes an integer operator reading the quantised
``x`` and writing the quantised output, with multiplier/shift computed from the
scales. QLinearConv / QLinearMatMul / MatMulInteger are not lowered yet.

All activations are uint8 on the device (int8 tensors are shifted by 128 and their
zero point with them); tensors are NHWC on the device, NCHW at the graph boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from egraph_compiler.backends.hexagon.eltwise import QBinary, QClip, QDepthwise, QPool
from egraph_compiler.backends.hexagon.kernels import ConvGeometry, QGemm
from egraph_compiler.backends.hexagon.quant import ELEMENTWISE_SHIFT, requant_from_scales
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node


@dataclass(frozen=True, slots=True)
class QParams:
    scale: float
    zero_point: int  # in the device's uint8 domain
    signed: bool  # the ONNX tensor is int8 (device value = onnx value + 128)


@dataclass(frozen=True, slots=True)
class QConcatRq:
    """Channel concat whose inputs are requantised to the output's scale."""

    rows: int
    channels: tuple[int, ...]
    zero_points: tuple[int, ...]
    multipliers: tuple[int, ...]  # 2^S · s_in / s_out
    y_zero: int


@dataclass(frozen=True, slots=True)
class QSoftmax:
    """Softmax over the last axis through a table exp(−d·s_x) (as onnxruntime's QLinearSoftmax)."""

    rows: int
    length: int
    table: tuple[float, ...]  # 256 entries
    inv_y_scale: float
    y_zero: int


@dataclass(frozen=True, slots=True)
class IntOp:
    name: str  # the ONNX node it came from
    kind: str
    spec: object
    inputs: tuple[str, ...]  # device tensor names
    output: str


@dataclass(slots=True)
class Lowered:
    ops: list[IntOp] = field(default_factory=list)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # NCHW shape of device tensors
    qparams: dict[str, QParams] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)  # graph input -> device tensor
    outputs: dict[str, str] = field(default_factory=dict)  # graph output -> device tensor


def _const(graph: Graph, name: str) -> np.ndarray:
    if name not in graph.constants:
        raise ModelError(f"hexagon backend: {name} must be a constant")
    return np.asarray(graph.constants[name])


def _qparams(graph: Graph, node: Node) -> QParams:
    scale = _const(graph, node.inputs[1]).astype(np.float64)
    zp = _const(graph, node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros((), np.uint8)
    if scale.size != 1:
        raise ModelError(f"hexagon backend: per-channel activation quantisation in {node.name} is not supported")
    signed = zp.dtype == np.int8
    return QParams(float(scale.reshape(-1)[0]), int(zp.reshape(-1)[0]) + (128 if signed else 0), signed)


def _nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], *shape[2:], shape[1]) if len(shape) == 4 else shape


def lower_qdq(graph: Graph) -> Lowered:
    consumers = graph.consumers()
    out = Lowered()
    dq_source: dict[str, str] = {}  # DQ output -> quantised tensor (activation or constant)
    float_alias: dict[str, str] = {}  # float value -> the DQ output it equals (Dropout, Flatten…)
    quantised_of: dict[str, str] = {}  # float value feeding a Q -> the Q output
    for node in graph.nodes:
        if node.op == "QuantizeLinear":
            quantised_of[node.inputs[0]] = node.outputs[0]
            out.qparams[node.outputs[0]] = _qparams(graph, node)
    graph_inputs = {v.name: v for v in graph.inputs}
    graph_outputs = {v.name for v in graph.outputs}

    def source(value: str) -> str:
        value = float_alias.get(value, value)
        if value not in dq_source:
            raise ModelError(f"hexagon backend: {value} is not dequantised from an int8/uint8 tensor")
        return dq_source[value]

    for node in graph.nodes:
        op = node.op
        if op == "QuantizeLinear":
            q = _qparams(graph, node)
            if node.inputs[0] in graph_inputs:
                shape = tuple(int(d) for d in graph_inputs[node.inputs[0]].type.shape or ())
                out.inputs[node.inputs[0]] = node.outputs[0]
                out.shapes[node.outputs[0]] = shape
            out.qparams[node.outputs[0]] = q
            src = float_alias.get(node.inputs[0], node.inputs[0])
            if src in dq_source:  # Q(DQ(x)): a requantisation from one scale to another
                x = dq_source[src]
                xq, shape = out.qparams[x], out.shapes[x]
                rows = int(np.prod(shape)) // (shape[1] if len(shape) == 4 else shape[-1])
                ch = shape[1] if len(shape) == 4 else shape[-1]
                spec = QConcatRq(rows, (ch,), (xq.zero_point,), (round(xq.scale / q.scale * 2**ELEMENTWISE_SHIFT),),
                                 q.zero_point)
                out.shapes[node.outputs[0]] = shape
                out.ops.append(IntOp(node.name, "concat", spec, (x,), node.outputs[0]))
            continue
        if op == "DequantizeLinear":
            dq_source[node.outputs[0]] = node.inputs[0]
            if node.outputs[0] in graph_outputs:
                out.outputs[node.outputs[0]] = node.inputs[0]
            continue
        if op in ("Dropout", "Identity") or op == "Shape":
            if op != "Shape":
                float_alias[node.outputs[0]] = float_alias.get(node.inputs[0], node.inputs[0])
            continue
        if op in ("Flatten", "Reshape"):
            src = float_alias.get(node.inputs[0], node.inputs[0])
            shape = out.shapes.get(dq_source.get(src, ""), ())
            if len(shape) == 4 and shape[2:] != (1, 1):
                raise ModelError(f"hexagon backend: {op} {node.name} changes the NHWC element order")
            float_alias[node.outputs[0]] = src
            continue
        y_float = node.outputs[0]
        while y_float not in quantised_of:  # through layout-neutral ops (Reshape back, Flatten…)
            users = [n for n in consumers.get(y_float, []) if n.op != "Shape"]
            if len(users) != 1 or users[0].op not in ("Reshape", "Flatten", "Identity", "Dropout"):
                break
            y_float = users[0].outputs[0]
        if y_float not in quantised_of:
            raise ModelError(f"hexagon backend: the output of {op} {node.name} is not quantised (QDQ expected)")
        y = quantised_of[y_float]
        yq = out.qparams[y]
        _lower_op(graph, node, [source(i) if i else "" for i in node.inputs], y, yq, out)
    return out


def _lower_op(graph: Graph, node: Node, inputs: list[str], y: str, yq: QParams, out: Lowered) -> None:
    op = node.op
    x = inputs[0]
    xq = out.qparams[x]
    xs = out.shapes[x]
    if op in ("Conv", "MatMul", "Gemm"):
        w_q = _const(graph, inputs[1])
        w_dq = next(n for n in graph.nodes if n.op == "DequantizeLinear" and n.inputs[0] == inputs[1])
        w_scale = _const(graph, w_dq.inputs[1]).astype(np.float64).reshape(-1)
        if len(w_dq.inputs) > 2 and w_dq.inputs[2] and np.any(_const(graph, w_dq.inputs[2]) != 0):
            raise ModelError(f"hexagon backend: {node.name}: asymmetric weights are not supported")
        if w_q.dtype != np.int8:
            raise ModelError(f"hexagon backend: {node.name}: weights must be int8")
        bias = _const(graph, inputs[2]).astype(np.int64) if len(inputs) > 2 and inputs[2] else None
        if op == "Conv":
            group = int(node.attr("group", 1))
            kh, kw = (int(v) for v in node.attr("kernel_shape", w_q.shape[2:]))
            sh, sw = (int(v) for v in node.attr("strides", (1, 1)))
            dh, dw = (int(v) for v in node.attr("dilations", (1, 1)))
            pads = tuple(int(v) for v in node.attr("pads", (0, 0, 0, 0)))
            b, c, h, w = xs
            oh = (h + pads[0] + pads[2] - dh * (kh - 1) - 1) // sh + 1
            ow = (w + pads[1] + pads[3] - dw * (kw - 1) - 1) // sw + 1
            cout = int(w_q.shape[0])
            geometry = ConvGeometry(b, h, w, c, (kh, kw), (sh, sw), (pads[0], pads[1]), (dh, dw), (oh, ow))
            out.shapes[y] = (b, cout, oh, ow)
            if group == 1:
                weights = w_q.transpose(2, 3, 1, 0).reshape(kh * kw * c, cout).astype(np.int8)
            elif group == c == cout:
                weights = w_q.reshape(cout, kh * kw).T.astype(np.int8)
            else:
                raise ModelError(f"hexagon backend: grouped convolution {node.name} (group={group}) is not supported")
        else:
            if op == "Gemm":
                if node.attr("transA", 0) or float(node.attr("alpha", 1.0)) != 1.0 or float(node.attr("beta", 1.0)) != 1.0:
                    raise ModelError(f"hexagon backend: Gemm {node.name} with transA/alpha/beta is not supported")
                w_q = w_q.T if node.attr("transB", 0) else w_q
            rows = int(np.prod(xs[:-1]))
            geometry = ConvGeometry(1, rows, 1, int(xs[-1]), (1, 1), out_hw=(rows, 1))
            weights = w_q.astype(np.int8)
            cout = int(weights.shape[1])
            out.shapes[y] = (*xs[:-1], cout)
            group = 1
        col_sums = weights.astype(np.int64).sum(axis=0)
        total_bias = (bias if bias is not None else 0) - xq.zero_point * col_sums
        scales = xq.scale * w_scale / yq.scale
        rq = requant_from_scales(scales, yq.zero_point)
        if op == "Conv" and group != 1:
            spec: object = QDepthwise(geometry, weights, total_bias.astype(np.int32), rq, xq.zero_point)
            kind = "depthwise"
        else:
            spec = QGemm(geometry, weights, total_bias.astype(np.int32), rq, xq.zero_point)
            kind = "gemm"
        out.ops.append(IntOp(node.name, kind, spec, (x,), y))
        return
    if op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
        b, c, h, w = xs
        if op == "GlobalAveragePool":
            kh, kw, sh, sw, pads = h, w, 1, 1, (0, 0, 0, 0)
        else:
            kh, kw = (int(v) for v in node.attr("kernel_shape"))
            sh, sw = (int(v) for v in node.attr("strides", (1, 1)))
            pads = tuple(int(v) for v in node.attr("pads", (0, 0, 0, 0)))
        oh, ow = (h + pads[0] + pads[2] - kh) // sh + 1, (w + pads[1] + pads[3] - kw) // sw + 1
        if node.attr("ceil_mode", 0):
            raise ModelError(f"hexagon backend: {op} {node.name} with ceil_mode is not supported")
        geometry = ConvGeometry(b, h, w, c, (kh, kw), (sh, sw), (pads[0], pads[1]), (1, 1), (oh, ow))
        out.shapes[y] = (b, c, oh, ow)
        if op == "MaxPool":
            if (xq.scale, xq.zero_point) != (yq.scale, yq.zero_point):
                raise ModelError(f"hexagon backend: MaxPool {node.name} changes quantisation parameters")
            out.ops.append(IntOp(node.name, "pool", QPool("MaxPool", geometry), (x,), y))
        else:
            if any(pads):
                raise ModelError(f"hexagon backend: padded AveragePool {node.name} is not supported")
            rq = requant_from_scales(np.array([xq.scale / (yq.scale * kh * kw)]), yq.zero_point)
            out.ops.append(IntOp(node.name, "pool", QPool("AveragePool", geometry, rq, xq.zero_point), (x,), y))
        return
    if op == "Concat":
        axis = int(node.attr("axis", 1))
        shapes = [out.shapes[i] for i in inputs]
        if axis not in (1, -3) or any(len(s) != 4 for s in shapes):
            raise ModelError(f"hexagon backend: Concat {node.name} must join NCHW channels")
        b, _, h, w = shapes[0]
        chans = tuple(int(s[1]) for s in shapes)
        mults = tuple(round(out.qparams[i].scale / yq.scale * 2**ELEMENTWISE_SHIFT) for i in inputs)
        spec = QConcatRq(b * h * w, chans, tuple(out.qparams[i].zero_point for i in inputs), mults, yq.zero_point)
        out.shapes[y] = (b, sum(chans), h, w)
        out.ops.append(IntOp(node.name, "concat", spec, tuple(inputs), y))
        return
    if op in ("Add", "Mul"):
        a, bb = inputs[0], inputs[1]
        aq, bq = out.qparams[a], out.qparams[bb]
        a_shape, b_shape = out.shapes[a], out.shapes[bb]
        y_shape = tuple(np.broadcast_shapes(a_shape, b_shape))
        rank = len(y_shape)
        pad = lambda s: (1,) * (rank - len(s)) + tuple(s)  # noqa: E731
        if op == "Add":
            mults = (round(aq.scale / yq.scale * 2**ELEMENTWISE_SHIFT), round(bq.scale / yq.scale * 2**ELEMENTWISE_SHIFT))
        else:
            mults = (round(aq.scale * bq.scale / yq.scale * 2**ELEMENTWISE_SHIFT),)
        spec = QBinary(op, _nhwc(pad(a_shape)), _nhwc(pad(b_shape)), _nhwc(y_shape), aq.zero_point, bq.zero_point,
                       mults, yq.zero_point)
        out.shapes[y] = y_shape
        out.ops.append(IntOp(node.name, "binary", spec, (a, bb), y))
        return
    if op in ("Relu", "Clip"):
        lo_real = 0.0 if op == "Relu" else float(node.attr("min", -np.inf))
        hi_real = np.inf if op == "Relu" else float(node.attr("max", np.inf))
        if (xq.scale, xq.zero_point) != (yq.scale, yq.zero_point):
            raise ModelError(f"hexagon backend: {op} {node.name} changes quantisation parameters")
        lo = int(np.clip(np.round(lo_real / xq.scale) + xq.zero_point, 0, 255)) if np.isfinite(lo_real) else 0
        hi = int(np.clip(np.round(hi_real / xq.scale) + xq.zero_point, 0, 255)) if np.isfinite(hi_real) else 255
        out.shapes[y] = xs
        out.ops.append(IntOp(node.name, "clip", QClip(int(np.prod(xs)), lo, hi), (x,), y))
        return
    if op == "Softmax":
        length = int(xs[1]) if len(xs) == 4 else int(xs[-1])
        if len(xs) == 4 and xs[2:] != (1, 1):
            raise ModelError(f"hexagon backend: Softmax {node.name} must run over channels of a 1×1 map")
        table = tuple(float(np.float32(np.exp(-d * xq.scale))) for d in range(256))
        spec = QSoftmax(int(np.prod(xs)) // length, length, table, 1.0 / yq.scale, yq.zero_point)
        out.shapes[y] = xs
        out.ops.append(IntOp(node.name, "softmax", spec, (x,), y))
        return
    raise ModelError(f"hexagon backend: no integer lowering for {op} ({node.name})")
