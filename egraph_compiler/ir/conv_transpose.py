"""ConvTranspose as one ordinary Conv per stride phase (issue 17: the gather kernel took
0.36 s on a 64→32 stride-2 layer of 32×32 where onnxruntime takes 14 ms).

Along one spatial dim, output ``o`` sits at ``q = o + pad_begin`` in the scattered frame;
input ``p`` and tap ``k`` land there when ``p·stride + k·dilation = q``. For the outputs
of one phase ``c`` (``o = stride·j + c``) the taps that land are ``k0, k0 + step, …``
(``step = stride / gcd(dilation, stride)``, ``k0·dilation ≡ c + pad_begin`` mod stride),
and tap ``k0 + step·t`` reads input ``j + δ − e·t`` (``e = dilation / gcd``): an ordinary
correlation over the input with the reversed sub-kernel, dilation ``e`` and stride 1. So
ConvTranspose = Π stride Convs (each a dense kernel of ``⌈(K − k0) / step⌉`` taps, run by
the backend's own Conv kernels), interleaved (Concat → Reshape → Transpose → Reshape)
and cropped to the output size. The same construction is TVM's/cuDNN's
"deconvolution as sub-pixel convolution".

Taken when the weight is a constant, shapes are static and every phase has a tap (else
the OpenCL gather kernel runs, `backends/opencl/ops_nn.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from egraph_compiler.ir.graph import Graph, Node


def _ints(node: Node, name: str, default: list[int]) -> list[int]:
    given = node.attr(name)
    return [int(v) for v in given] if given else default  # type: ignore[union-attr]


def pad_begin(node: Node, in_size: list[int], out_size: list[int], kernel: list[int]) -> list[int]:
    """The leading pad of each spatial dim of a ConvTranspose (onnx's reference: explicit
    ``pads``; else, with SAME_* or an ``output_shape``, from the total padding that makes
    the output that size — SAME_UPPER puts the odd one at the end, the others at the start).
    Positions past the scattered extent (a negative total) get only the bias."""
    dims = len(in_size)
    pads = node.attr("pads")
    auto_pad = str(node.attr("auto_pad", "NOTSET"))
    if pads and auto_pad in ("NOTSET", ""):
        return [int(p) for p in pads[:dims]]  # type: ignore[index]
    if auto_pad == "VALID" or (auto_pad in ("NOTSET", "") and not node.attr("output_shape")):
        return [0] * dims
    strides = _ints(node, "strides", [1] * dims)
    dilations = _ints(node, "dilations", [1] * dims)
    extra = _ints(node, "output_padding", [0] * dims)
    begin = []
    for i in range(dims):
        total = max(strides[i] * (in_size[i] - 1) + extra[i] + (kernel[i] - 1) * dilations[i] + 1
                    - out_size[i], 0)
        begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
    return begin


@dataclass(frozen=True)
class Phase:
    """One dim's phase ``c``: the taps read (in Conv order), the Conv's dilation, and the
    input crop and Conv pads that make its output ``length`` long."""

    taps: tuple[int, ...]
    dilation: int
    crop: tuple[int, int]
    pads: tuple[int, int]


@dataclass(frozen=True)
class PhasePlan:
    strides: tuple[int, ...]
    lengths: tuple[int, ...]  # each phase's output length per dim (⌈out / stride⌉)
    out: tuple[int, ...]
    phases: tuple[tuple[Phase, ...], ...]  # per dim, per phase c


def plan(graph: Graph, node: Node) -> PhasePlan | None:
    """The phase Convs of ``node``, or None where the gather kernel stays (a run-time
    weight, unknown shapes, a phase no tap reaches, a crop past the input)."""
    x, w = node.inputs[:2]
    if w not in graph.constants or x not in graph.types or node.outputs[0] not in graph.types:
        return None
    shape, out_shape = graph.types[x].shape, graph.types[node.outputs[0]].shape
    if shape is None or out_shape is None or not all(isinstance(d, int) for d in (*shape, *out_shape)):
        return None
    if not graph.types[x].dtype.startswith("float"):
        return None
    kernel = list(np.shape(graph.constants[w])[2:])
    dims = len(shape) - 2
    if dims < 1 or len(kernel) != dims:
        return None
    strides = _ints(node, "strides", [1] * dims)
    dilations = _ints(node, "dilations", [1] * dims)
    begin = pad_begin(node, list(shape[2:]), list(out_shape[2:]), kernel)
    per_dim, lengths = [], []
    for i in range(dims):
        size, stride, dilation, extent = kernel[i], strides[i], dilations[i], int(shape[2 + i])
        out = int(out_shape[2 + i])
        step, e = stride // math.gcd(dilation, stride), dilation // math.gcd(dilation, stride)
        length = -(-out // stride)
        phases = []
        for c in range(stride):
            first = next((t for t in range(min(size, step)) if (t * dilation - c - begin[i]) % stride == 0), None)
            if first is None:
                return None  # no tap reaches this phase: bias only (the gather kernel does that)
            count = -(-(size - first) // step)
            delta = (c + begin[i] - first * dilation) // stride
            lead = e * (count - 1) - delta  # the Conv's leading pad (negative: crop the input)
            trail = length - extent - lead + e * (count - 1)
            crop = (max(-lead, 0), max(-trail, 0))
            if extent - crop[0] - crop[1] < 1:
                return None
            taps = tuple(first + step * (count - 1 - u) for u in range(count))
            phases.append(Phase(taps, e, crop, (max(lead, 0), max(trail, 0))))
        per_dim.append(tuple(phases))
        lengths.append(length)
    return PhasePlan(tuple(strides), tuple(lengths), tuple(int(d) for d in out_shape[2:]), tuple(per_dim))


def decompose(b: Any, node: Node) -> None:
    """Emit the phase Convs of ``node`` and their interleaving into the builder ``b``
    (`ir.decompose._Builder`)."""
    found = plan(b.graph, node)
    assert found is not None  # `decompose` asks `plan` first
    x, w = node.inputs[:2]
    bias = node.inputs[2] if len(node.inputs) > 2 else ""
    weight = np.asarray(b.graph.constants[w])
    group = int(node.attr("group", 1))
    cin, cout_per_group = weight.shape[0], weight.shape[1]
    shape = b.shape(x, node)
    dims = len(found.strides)
    outputs = []
    for combination in np.ndindex(*found.strides):
        phases = [found.phases[i][c] for i, c in enumerate(combination)]
        # [Cin, Cout/g, taps...] -> Conv's [Cout, Cin/g, taps...]
        picked = weight[np.ix_(range(cin), range(cout_per_group), *[p.taps for p in phases])]
        taps = [len(p.taps) for p in phases]
        conv_weight = picked.reshape(group, cin // group, cout_per_group, *taps).swapaxes(1, 2) \
            .reshape(group * cout_per_group, cin // group, *taps)
        source = x
        for i, phase in enumerate(phases):
            if phase.crop != (0, 0):
                source = b.slice(source, phase.crop[0], shape[2 + i] - phase.crop[1], 2 + i)
        operands = [source, b.const(np.ascontiguousarray(conv_weight, dtype=weight.dtype), "w")]
        if bias:
            operands.append(bias)
        outputs.append(b.op("Conv", operands, group=group, strides=(1,) * dims,
                            dilations=tuple(p.dilation for p in phases), kernel_shape=tuple(taps),
                            pads=tuple(p.pads[0] for p in phases) + tuple(p.pads[1] for p in phases)))
    n, cout = shape[0], group * cout_per_group
    if len(outputs) == 1:
        joined = outputs[0]
    else:
        stacked = b.op("Concat", [b.unsqueeze(y, 2) for y in outputs], axis=2)
        grid = b.op("Reshape", [stacked, b.const(np.asarray([n, cout, *found.strides, *found.lengths],
                                                            dtype=np.int64), "shape")])
        # [N, C, s1..sD, J1..JD] -> [N, C, J1, s1, ..., JD, sD]
        perm = (0, 1, *[axis for i in range(dims) for axis in (2 + dims + i, 2 + i)])
        joined = b.op("Reshape", [b.op("Transpose", [grid], perm=perm), b.const(np.asarray(
            [n, cout, *[s * j for s, j in zip(found.strides, found.lengths, strict=True)]], dtype=np.int64),
            "shape")])
    for i in range(dims):
        if found.strides[i] * found.lengths[i] != found.out[i]:
            joined = b.slice(joined, 0, found.out[i], 2 + i)
    b.rename_output(joined, node.outputs[0])
