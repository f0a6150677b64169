"""The shared walk: a block's data-flow tree, evaluated lazily at an index.

``value(scope, name, index)`` returns a C expression for element ``index`` of
value ``name``: a load from a kernel argument, or the operator that produces it
applied to its operands read at their own (backward-mapped) indices. Layout
operators only transform the index (SmartMem index comprehension), so Reshape,
Transpose, Slice, Concat, Pad, Expand, Gather, Tile never touch memory.
Results are memoised per scope on (value, index): a common sub-tree of the DFT
is emitted once (DNNFusion §3.4.4). Spine values (downstream of the anchor) are
*pinned* to the variable holding them for the current work-item.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from egraph_compiler import ops
from egraph_compiler.backends.opencl import images, ops_models
from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.fusion import index as ix
from egraph_compiler.fusion.index_merge import merge_splits, substitute
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node
from egraph_compiler.ops.scalar import to_c

Index = tuple[ix.IExpr, ...]


class Scope:
    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self.lines: list[str] = []
        self.memo: dict[tuple[str, Index], str] = {}

    def find(self, key: tuple[str, Index]) -> str | None:
        scope: Scope | None = self
        while scope is not None:
            if key in scope.memo:
                return scope.memo[key]
            scope = scope.parent
        return None

    def child(self) -> Scope:
        return Scope(self)

    def emit(self, line: str) -> None:
        self.lines.append(line)

    def nest(self, header: str, body: Scope) -> None:
        self.lines.append(header + " {")
        self.lines.extend("  " + line for line in body.lines)
        self.lines.append("}")


def ctype(dtype: str) -> str:
    try:
        return sp.C_TYPES[dtype]
    except KeyError:
        raise ModelError(f"the OpenCL backend has no element type for {dtype}") from None


class ValueEmitter:
    def __init__(self, view: GraphView, members: Sequence[int], params: dict[str, str]) -> None:
        self.view = view
        self.members = set(members)
        self.params = params
        self.pinned: dict[str, str] = {}
        self.counter = 0
        # constants re-laid-out for their consumer (name -> array), see kernels.relayout
        self.derived: dict[str, np.ndarray] = {}
        # intermediates stored in another dimension order (fusion.layout): name -> perm
        self.layouts: dict[str, tuple[int, ...]] = {}
        # a float32 value's C type while a CPU kernel computes its epilogue on a whole
        # vector of outputs at once (`cpu_epilogue.vector_epilogue`), else None
        self.vector: str | None = None
        # offsets with split index terms merged back (`index_merge`): the GPU class's
        # memory-bound kernels, where the divisions cost issue slots (CPU code unchanged)
        self.merge_splits = False
        # with merge_splits: the iteration variables bound so far (`_Gen.declare_iteration`)
        self.bound: dict[str, ix.IExpr] = {}

    def fresh(self, stem: str = "t") -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    # -- the walk ------------------------------------------------------------------
    def value(self, scope: Scope, name: str, index: Index) -> str:
        if name in self.pinned:
            return self.pinned[name]
        key = (name, index)
        found = scope.find(key)
        if found is not None:
            return found
        constant = self.view.constants.get(name)
        if constant is not None and np.size(constant) == 1:
            return sp.literal(np.asarray(constant).reshape(()).item(), str(np.asarray(constant).dtype))
        if name in self.params:
            array = self.derived.get(name)
            shape = tuple(array.shape) if array is not None else self.view.shape(name)
            dtype = str(array.dtype) if array is not None else self.view.dtype(name)
            offset = ix.render(self.offset(ix.physical_offset(index, shape, self.layouts.get(name))))
            load = f"{self.params[name]}[{offset}]" if dtype != "float16" else \
                f"vload_half({offset}, {self.params[name]})"  # halves computed in float
            constant = array is not None or name in self.view.constants
            if constant and images.candidate(shape, dtype):  # the kernel decides (images.py)
                row = ix.render(ix.linearize(index[:-1], shape[:-1]))
                load = images.mark(self.params[name], ix.render(index[-1]), row, shape[-1],
                                   offset)
            result = self.assign(scope, dtype, load)
        else:
            producer = self.view.producer_index.get(name)
            if producer is None or producer not in self.members:
                raise ModelError(f"internal error: value '{name}' is not reachable in its block")
            result = self.node_value(scope, self.view.nodes[producer], name, index)
        scope.memo[key] = result
        return result

    def offset(self, expr: ix.IExpr) -> ix.IExpr:
        """A load's or store's flat offset as the kernel computes it (`merge_splits`)."""
        return merge_splits(substitute(expr, self.bound)) if self.merge_splits else expr

    def assign(self, scope: Scope, dtype: str, expr: str) -> str:
        var = self.fresh()
        ctype_ = self.vector if self.vector is not None and dtype == "float32" else ctype(dtype)
        scope.emit(f"const {ctype_} {var} = {expr};")
        return var

    def index_var(self, scope: Scope, expr: ix.IExpr, lo: int, hi: int) -> ix.IExpr:
        """Bind an index to a C variable whose range a guard has established."""
        if isinstance(expr, int):
            return expr
        var = self.fresh("j")
        scope.emit(f"const int {var} = {ix.render(expr)};")
        return ix.IVar(var, lo, hi)

    def node_value(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        op = node.op
        handler = getattr(self, f"_op_{op}", None)
        if handler is not None:
            return handler(scope, node, out, index)
        return self._elementwise(scope, node, out, index)

    # -- elementwise ----------------------------------------------------------------
    def _operands(self, scope: Scope, node: Node, out: str, index: Index) -> list[str]:
        out_shape = self.view.shape(out)
        operands = []
        for k, name in enumerate(node.inputs):
            if not name:
                operands.append("")
                continue
            if node.op == "BatchNormalization" and k > 0:  # per-channel parameters
                in_index: Index = (index[1] if len(index) > 1 else 0,)
            else:
                in_index = ix.broadcast_index(index, out_shape, self.view.shape(name))
            operands.append(self.value(scope, name, in_index))
        return operands

    def _elementwise(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        dtype = self.view.dtype(out)
        in_dtype = self.view.dtype(node.inputs[0]) if node.inputs else dtype
        args = self._operands(scope, node, out, index)
        op = node.op
        info = ops.current().get(op)
        builtin = info.decl.builtin if info is not None else None  # `= builtin NAME`
        if op == "Cast":
            expr = f"(({ctype(dtype)})({args[0]} != 0))" if dtype == "bool" else \
                f"(({ctype(dtype)}){args[0]})"
        elif op == "Clip":
            # bounds: constant attributes, or run-time inputs (opset 11+); an infinite
            # attribute is no bound (and has no integer literal)
            expr = args[0]
            for k, (attr, pick) in enumerate((("min", "max"), ("max", "min")), start=1):
                bound = args[k] if k < len(args) and args[k] else None
                value = node.attr(attr)
                if bound is None and value is not None and not math.isinf(float(value)):
                    bound = sp.literal(value, dtype)
                if bound is not None:  # float: the spelling's min/max (not PoCL's calls)
                    expr = sp.SPELLING.functions[pick].format(expr, bound) if \
                        dtype.startswith("float") else f"{pick}({expr}, {bound})"
        elif op == "IsInf":
            sides = [f"{args[0]} > 0"] if node.attr("detect_positive", 1) else []
            sides += [f"{args[0]} < 0"] if node.attr("detect_negative", 1) else []
            expr = f"((isinf({args[0]}) && ({' || '.join(sides) or '0'})) ? 1 : 0)"
        elif op == "Where":
            expr = f"(({args[0]}) ? {args[1]} : {args[2]})"
        elif op == "Pow" and dtype.startswith("float") and _is_two(self.view.constants.get(
                node.inputs[1])):  # LayerNorm's variance: pow is a slow call on PoCL
            expr = f"({args[0]} * {args[0]})"
        elif op == "Mod" and dtype.startswith("float"):
            expr = f"fmod({args[0]}, {args[1]})"
        elif op == "Mod":  # C's % truncates (fmod=1); fmod=0 takes the divisor's sign
            rem = self.assign(scope, dtype, f"({args[0]} % {args[1]})")
            expr = rem if node.attr("fmod", 0) else \
                f"(({rem} != 0 && (({rem} < 0) != ({args[1]} < 0))) ? {rem} + {args[1]} : {rem})"
        elif builtin in sp.BITWISE:  # integer operands (ONNX opset 18)
            expr = f"({sp.BITWISE[builtin]}{args[0]})" if len(args) == 1 else \
                f"({args[0]} {sp.BITWISE[builtin]} {args[1]})"
        elif op == "BitShift":
            expr = f"({args[0]} {'<<' if node.attr('direction') == 'LEFT' else '>>'} {args[1]})"
        elif builtin in sp.VARIADIC:
            table = sp.VARIADIC if dtype.startswith("float") else sp.VARIADIC_INT
            expr = args[0]
            for arg in args[1:]:
                expr = table[builtin].format(expr, arg)
            if builtin == "mean":
                expr = f"({expr} / {sp.literal(len(args), dtype)})"
        elif dtype == "bool" and op not in sp.FLOAT_OPS:  # comparisons and logic, 0 or 1
            expr = f"(({ctype(dtype)}){_from_semantics(node, args, in_dtype, any_dtype=True)})"
        else:
            table = sp.FLOAT_OPS if in_dtype.startswith("float") else sp.INT_OPS
            if op in table:
                expr = self._format(table[op], node, args, dtype)
            else:
                expr = _from_semantics(node, args, in_dtype)
        return self.assign(scope, dtype, expr)

    @staticmethod
    def _format(template: str, node: Node, args: list[str], dtype: str) -> str:
        text = template.replace("{T}", ctype(dtype))
        while "{a:" in text:
            start = text.index("{a:")
            end = text.index("}", start)
            name = text[start + 3:end]
            info = ops.current().get(node.op)
            value = node.attr(name) if info is None else info.attr(node.attr_dict, name)
            text = text[:start] + sp.literal(float(value), "float32") + text[end + 1:]
        return text.format(*args)

    # -- layout: index comprehension -------------------------------------------------
    # the real-model operators' index maps live in `ops_models` (issue 17)
    _op_GatherND = ops_models.gather_nd
    _op_Resize = ops_models.resize

    def _reshape(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        source = node.inputs[0]
        in_index = ix.reshape_index(index, self.view.shape(out), self.view.shape(source))
        return self.value(scope, source, in_index)

    _op_Reshape = _op_Flatten = _op_Squeeze = _op_Unsqueeze = _reshape

    def _op_Transpose(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        rank = len(index)
        perm = node.attr("perm") or tuple(reversed(range(rank)))
        in_index: list[ix.IExpr] = [0] * rank
        for k, p in enumerate(perm):  # type: ignore[union-attr]
            in_index[p] = index[k]
        return self.value(scope, node.inputs[0], tuple(in_index))

    def _op_Expand(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        source = node.inputs[0]
        return self.value(scope, source, ix.broadcast_index(index, self.view.shape(out),
                                                             self.view.shape(source)))

    def _op_Tile(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        source = node.inputs[0]
        shape = self.view.shape(source)
        return self.value(scope, source, tuple(ix.mod(i, s) for i, s in zip(index, shape, strict=False)))

    def _op_Slice(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        source = node.inputs[0]
        shape = self.view.shape(source)
        rank = len(shape)
        starts, ends = node.attr("starts", ()), node.attr("ends", ())
        axes = node.attr("axes") or tuple(range(len(starts)))  # type: ignore[arg-type]
        steps = node.attr("steps") or (1,) * len(starts)  # type: ignore[arg-type]
        in_index = list(index)
        for start, end, axis, step in zip(starts, ends, axes, steps, strict=False):  # type: ignore[arg-type]
            axis = axis + rank if axis < 0 else axis
            first, _, stride = slice(start, end, step).indices(shape[axis])
            in_index[axis] = ix.add(first, ix.mul(index[axis], stride))
        return self.value(scope, source, tuple(in_index))

    def _op_Split(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        source = node.inputs[0]
        rank = len(index)
        axis = int(node.attr("axis", 0))  # type: ignore[arg-type]
        axis = axis + rank if axis < 0 else axis
        offset = 0
        for name in node.outputs:
            if name == out:
                break
            offset += self.view.shape(name)[axis] if name else 0
        in_index = list(index)
        in_index[axis] = ix.add(index[axis], offset)
        return self.value(scope, source, tuple(in_index))

    def _op_Concat(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        rank = len(index)
        axis = int(node.attr("axis", 0))  # type: ignore[arg-type]
        axis = axis + rank if axis < 0 else axis
        dtype = self.view.dtype(out)
        result = self.fresh()
        scope.emit(f"{ctype(dtype)} {result};")
        pos = self.index_var(scope, index[axis], *ix.value_range(index[axis]))
        offset, first = 0, True
        parts = [name for name in node.inputs if name and self.view.shape(name)[axis] > 0]
        for k, name in enumerate(parts):
            size = self.view.shape(name)[axis]
            body = scope.child()
            local = list(index)
            local[axis] = self.index_var(body, ix.add(pos, -offset), 0, size - 1)
            body.emit(f"{result} = {self.value(body, name, tuple(local))};")
            last = k == len(parts) - 1
            cond = "" if last else f"if ({ix.render(pos)} < {offset + size})"
            header = cond if first else ("else" if last else "else " + cond)
            scope.nest(header or "", body) if header else scope.lines.extend(body.lines)
            first = False
            offset += size
        return result

    def _op_Pad(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        source = node.inputs[0]
        shape = self.view.shape(source)
        rank = len(shape)
        pads = tuple(node.attr("pads", (0,) * 2 * rank))  # type: ignore[arg-type]
        axes = node.attr("axes")
        begin = [0] * rank
        if axes is not None:
            for k, axis in enumerate(axes):  # type: ignore[union-attr]
                begin[axis % rank] = pads[k]
        else:
            begin = list(pads[:rank])
        if node.attr("mode", "constant") != "constant":  # edge, reflect, wrap: no guard
            return self.value(scope, source, tuple(
                ops_models.pad_source(self, scope, node, ix.add(i, -b), s)
                for i, b, s in zip(index, begin, shape, strict=True)))
        dtype = self.view.dtype(out)
        result = self.fresh()
        scope.emit(f"{ctype(dtype)} {result} = {sp.literal(float(node.attr('value', 0.0)), dtype)};")
        raw = [ix.add(i, -b) for i, b in zip(index, begin, strict=False)]
        conds = [f"({ix.render(r)}) >= 0 && ({ix.render(r)}) < {s}"
                 for r, s, b in zip(raw, shape, begin, strict=False) if not _within(r, s)]
        body = scope.child()
        local = tuple(r if _within(r, s) else self.index_var(body, r, 0, s - 1)
                      for r, s in zip(raw, shape, strict=False))
        body.emit(f"{result} = {self.value(body, source, local)};")
        if conds:
            scope.nest(f"if ({' && '.join(conds)})", body)
        else:
            scope.lines.extend(body.lines)
        return result

    def _op_Gather(self, scope: Scope, node: Node, out: str, index: Index) -> str:
        data, indices = node.inputs[0], node.inputs[1]
        shape = self.view.shape(data)
        axis = int(node.attr("axis", 0)) % len(shape)  # type: ignore[arg-type]
        rank_i = len(self.view.shape(indices))
        raw = self.value(scope, indices, tuple(index[axis:axis + rank_i]))
        var = self.fresh("g")
        scope.emit(f"int {var} = (int)({raw}); if ({var} < 0) {var} += {shape[axis]};")
        position = ix.IOpaque(var, 0, shape[axis] - 1, frozenset({var}))
        in_index = (*index[:axis], position, *index[axis + rank_i:])
        return self.value(scope, data, in_index)


def _within(expr: ix.IExpr, size: int) -> bool:
    lo, hi = ix.value_range(expr)
    return lo >= 0 and hi < size


def _is_two(constant: np.ndarray | None) -> bool:
    """A constant exponent of 2 (every element), so Pow is one multiply, exactly."""
    return constant is not None and np.size(constant) > 0 and bool(np.all(constant == 2))


def _from_semantics(node: Node, args: list[str], in_dtype: str, any_dtype: bool = False) -> str:
    """C text of an operator's declared scalar semantics (`ops.scalar.to_c`): over floats,
    over integers where it needs only integer arithmetic (`spelling.INT_SPELLING`), over any
    operand type with ``any_dtype`` (a comparison)."""
    info = ops.current().get(node.op)
    builtin = sp.SPELLING.functions.get(info.decl.builtin or "") if info is not None else None
    if builtin is not None and in_dtype.startswith("float"):  # `= builtin tan`: a scalar function
        return builtin.format(*args)
    spelling = sp.SPELLING if any_dtype or in_dtype.startswith("float") else sp.INT_SPELLING
    attrs = {name: info.attr(node.attr_dict, name) for name in info.defaults} if info is not None else {}
    numbers = {k: float(v) for k, v in attrs.items() if isinstance(v, (int, float))
               and (spelling is sp.SPELLING or float(v).is_integer())}  # else unbound: refused below
    try:
        if info is None or info.semantics is None:
            raise ValueError("no scalar semantics")
        operands = dict(zip((p.name for p in info.decl.params), args, strict=False))
        return to_c(info.semantics, operands, numbers, spelling)
    except (KeyError, ValueError):
        raise ModelError(f"the OpenCL backend cannot generate {node.op} for {in_dtype}") from None
