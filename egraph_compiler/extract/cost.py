"""The cost model: FLOPs + bytes moved, accounted as DNNFusion Table 3.4 does.

- elementwise: one FLOP per output element per arithmetic op (broadcasting is
  counted on the output);
- Conv / ConvTranspose / MatMul / Gemm: 2 x multiply-accumulates;
- the rest as their ``cost`` clause in rules/operators.dnnr says (the registry's
  `OpInfo.cost`): ``reduce`` one FLOP per input element, ``per_element(N)`` N per
  output element (1 when undeclared); windowed pools one per window element per output;
- ``cost movement`` (Concat, Slice, Transpose, Cast, ...): no FLOPs, only bytes;
- ``cost free`` (Reshape, Squeeze, Unsqueeze, Flatten, Identity: views of a contiguous
  tensor): a small fixed amount, no FLOPs and no bytes;
- bytes moved = every input read + every output written;
- constant-only subterms cost nothing: they are folded at compile time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from egraph_compiler import ops
from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.ir.graph import Graph

Shape = tuple[Dim, ...]



def cost_clause(op: str) -> tuple[str, float]:
    """``op``'s declared or derived ``cost`` (`ops.OpInfo.cost`); unknown ops: one per element."""
    info = ops.current().get(op)
    return info.cost if info is not None else ("per_element", 1.0)


@dataclass(frozen=True, slots=True)
class Cost:
    flops: float
    bytes: float

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.bytes + other.bytes)


ZERO = Cost(0.0, 0.0)


@dataclass(frozen=True, slots=True)
class CostModel:
    """Weights of the scalar cost extraction minimises: ``flop_weight * flops +
    byte_weight * bytes`` plus ``layout_cost`` per layout-only op and
    ``launch_cost`` per other operator. ``symbol_value`` stands in for a symbolic
    dim whose range gives no better guess.

    ``launch_cost`` is the dispatch overhead of one more kernel (about 5 µs, i.e.
    5e5 FLOPs at a mobile GPU's 100 GFLOP/s): without it, rewrites that trade a
    few bytes for extra operators (SERENITY's Concat→Conv partitioning, which is
    for peak memory, not speed) win and the graph grows."""

    flop_weight: float = 1.0
    byte_weight: float = 0.25
    layout_cost: float = 1.0
    launch_cost: float = 5e5
    symbol_value: int = 64
    improve_seconds: float = 10.0  # budget of extraction's DAG-aware improvement pass

    def scalar(self, cost: Cost, op: str | None = None) -> float:
        fixed = (self.layout_cost if cost_clause(op)[0] == "free" else self.launch_cost) if op else 0.0
        return self.flop_weight * cost.flops + self.byte_weight * cost.bytes + fixed


def dim_value(dim: Dim, symbols: Mapping[str, tuple[int, int]], default: int) -> int:
    if isinstance(dim, int):
        return max(dim, 0)
    env = {}
    for name in dim.symbols():
        low, high = symbols.get(name, (1, default))
        env[name] = max(low, min(high, default))
    try:
        return max(int(dim.evaluate(env)), 0)
    except (KeyError, ZeroDivisionError):
        return default


def numel(shape: Shape | None, symbols: Mapping[str, tuple[int, int]], default: int) -> float | None:
    if shape is None:
        return None
    total = 1.0
    for d in shape:
        total *= dim_value(d, symbols, default)
    return total


def itemsize(dtype: str | None) -> int:
    try:
        return np.dtype(dtype or "float32").itemsize
    except TypeError:
        return 4


def op_cost(
    op: str,
    attrs: Mapping[str, object],
    inputs: Sequence[tuple[Shape | None, str | None] | None],
    output: tuple[Shape | None, str | None],
    symbols: Mapping[str, tuple[int, int]] | None = None,
    default: int = 64,
) -> Cost:
    """Cost of one op application; ``inputs`` holds (shape, dtype) per input, None
    for an absent one. An unknown shape counts as its largest known neighbour."""
    symbols = symbols or {}
    if cost_clause(op)[0] == "free":
        return ZERO
    in_sizes = [numel(i[0], symbols, default) if i else 0.0 for i in inputs]
    out_size = numel(output[0], symbols, default)
    known = [s for s in in_sizes if s] + ([out_size] if out_size else [])
    guess = max(known) if known else 1.0
    in_sizes = [guess if (i and s is None) else (s or 0.0) for i, s in zip(inputs, in_sizes, strict=True)]
    out_elems = out_size if out_size is not None else guess
    moved = sum(s * itemsize(i[1]) for s, i in zip(in_sizes, inputs, strict=True) if i)
    moved += out_elems * itemsize(output[1])
    return Cost(_flops(op, attrs, inputs, in_sizes, out_elems, output, symbols, default), float(moved))


def _flops(op, attrs, inputs, in_sizes, out_elems, output, symbols, default) -> float:
    kind, amount = cost_clause(op)
    if kind == "movement":
        return 0.0
    if op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        w_index = 3 if op == "QLinearConv" else 1
        w = inputs[w_index][0] if len(inputs) > w_index and inputs[w_index] else None
        if w is None:
            return 2.0 * out_elems
        per_output = numel(w[1:], symbols, default) or 1.0
        if op == "ConvTranspose":
            x = inputs[0][0] if inputs[0] else None
            return 2.0 * (numel(x, symbols, default) or out_elems) * (numel(w[1:], symbols, default) or 1.0)
        return 2.0 * out_elems * per_output
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a = inputs[0][0] if inputs[0] else None
        k = dim_value(a[-1], symbols, default) if a else 1
        return 2.0 * out_elems * k
    if op == "Gemm":
        a = inputs[0][0] if inputs[0] else None
        if a is None or len(a) != 2:
            return 2.0 * out_elems
        k = dim_value(a[0] if attrs.get("transA") else a[1], symbols, default)
        return 2.0 * out_elems * k
    if op in ("MaxPool", "AveragePool"):
        kernel = attrs.get("kernel_shape") or ()
        window = float(np.prod(kernel)) if kernel else 1.0
        return out_elems * window
    if kind == "reduce":
        return float(in_sizes[0]) if in_sizes else out_elems
    return out_elems * (amount if kind == "per_element" else 1)


def graph_cost(graph: Graph, default: int = 64) -> Cost:
    """FLOPs and bytes of a whole graph (shared values counted once; nodes whose
    inputs are all constants cost nothing, as they fold at compile time)."""
    total = ZERO
    constant = set(graph.constants)
    for node in graph.nodes:
        if all((not name) or name in constant for name in node.inputs):
            constant.update(o for o in node.outputs if o)
            continue
        inputs = []
        for name in node.inputs:
            if not name:
                inputs.append(None)
                continue
            t = graph.types.get(name)
            if t is None and name in graph.constants:
                array = np.asarray(graph.constants[name])
                inputs.append((tuple(array.shape), str(array.dtype)))
            else:
                inputs.append((t.shape if t else None, t.dtype if t else None))
        out = graph.types.get(node.outputs[0]) if node.outputs and node.outputs[0] else None
        output = (out.shape if out else None, out.dtype if out else None)
        total = total + op_cost(node.op, node.attr_dict, inputs, output, graph.symbols, default)
    return total


__all__ = ["Cost", "CostModel", "DimExpr", "graph_cost", "op_cost"]
