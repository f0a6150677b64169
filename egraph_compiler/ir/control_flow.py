"""If / Loop / Scan with a static trip structure, inlined at import.

The IR has no subgraphs, so a control-flow node is replaced by the nodes of its body,
instantiated with fresh names (values the body reads from the outer scope keep theirs):

- ``If`` whose condition folds to a constant: the chosen branch;
- ``Loop`` whose trip count is a constant (or absent) and whose condition, before and
  after every iteration, folds to a constant: the body once per iteration (unrolled),
  loop-carried values threaded through, scan outputs stacked (Unsqueeze + Concat);
- ``Scan`` (opset 9+) over inputs whose scanned axis has a static length: the body
  once per element (Gather of that element), scan outputs stacked.

Anything else is a `ModelError` naming the node, its operator and opset, and what
would make it inline. The importer processes the instantiated nodes as if the model
held them (conversion, constant folding, nested control flow), which is what lets a
condition computed from constants fold before the next iteration is decided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import onnx
from onnx import helper

from egraph_compiler.ir.convert import ImportContext
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.onnx_types import tensor_to_numpy

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
# Unrolling copies the body once per iteration: past this many copied nodes the graph
# would swamp saturation, so such a loop is refused (with the count) instead.
MAX_UNROLLED_NODES = 4096


class InlineContext(ImportContext, Protocol):
    origins: dict[str, str]  # an instantiated body value -> its name in the body

    def value_of(self, name: str) -> np.ndarray | None: ...
    def static_shape(self, name: str) -> tuple[int | None, ...] | None: ...


Process = Callable[[Sequence[onnx.NodeProto]], None]


def _defined_names(graph: onnx.GraphProto) -> set[str]:
    names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    return names | {o for n in graph.node for o in n.output if o}


def _rename_nested(graph: onnx.GraphProto, rename: dict[str, str]) -> None:
    """Rename the outer-scope references of a nested subgraph (in place)."""
    visible = {k: v for k, v in rename.items() if k not in _defined_names(graph)}
    for node in graph.node:
        node.input[:] = [visible.get(i, i) for i in node.input]
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                _rename_nested(sub, visible)
    for out in graph.output:
        out.name = visible.get(out.name, out.name)


class Inliner:
    """Expands one control-flow node into plain nodes through ``process``."""

    def __init__(self, ctx: InlineContext, process: Process) -> None:
        self.ctx = ctx
        self.process = process

    def expand(self, node: onnx.NodeProto, label: str) -> None:
        getattr(self, f"_{node.op_type.lower()}")(node, label)  # the label names node, op, opset

    # -- shared -------------------------------------------------------------------------
    def _value(self, name: str) -> np.ndarray | None:
        return self.ctx.value_of(name) if name else None

    def _instantiate(self, body: onnx.GraphProto, prefix: str, bindings: Sequence[str]) -> list[str]:
        """Process a copy of ``body`` with its inputs bound to ``bindings``; its outputs' names."""
        rename = {i.name: bound for i, bound in zip(body.input, bindings, strict=True)}
        for init in body.initializer:
            rename[init.name] = self.ctx.add_constant(f"{prefix}{init.name}",
                                                      tensor_to_numpy(init, "subgraph initializer"))
        nodes = []
        for original in body.node:
            node = onnx.NodeProto()
            node.CopyFrom(original)
            node.input[:] = [rename.get(i, i) for i in node.input]
            for attr in node.attribute:
                for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                    _rename_nested(sub, rename)
            for k, out in enumerate(node.output):
                if out:
                    rename[out] = self.ctx.fresh_value(f"{prefix}{out}")
                    node.output[k] = rename[out]
                    self.ctx.origins[rename[out]] = out  # where onnx typed it
            node.name = f"{prefix}{original.name or original.op_type}"
            nodes.append(node)
        self.process(nodes)
        return [rename.get(o.name, o.name) for o in body.output]

    def _identity(self, source: str, target: str, name: str) -> None:
        if target:
            self.process([helper.make_node("Identity", [source], [target], name=name)])

    def _constant(self, base: str, array: np.ndarray) -> str:
        return self.ctx.add_constant(base, array)

    def _stack(self, pieces: list[str], axis: int, target: str, name: str) -> None:
        """``target`` = the pieces, each given a new axis ``axis``, concatenated along it."""
        unsqueezed = []
        for k, piece in enumerate(pieces):
            out = self.ctx.fresh_value(f"{target}_{k}")  # axes as the IR holds them, at any opset
            self.process([helper.make_node("Unsqueeze", [piece], [out], name=f"{name}_unsqueeze{k}", axes=[axis])])
            unsqueezed.append(out)
        self.process([helper.make_node("Concat", unsqueezed, [target], name=f"{name}_stack", axis=axis)])

    # -- If -----------------------------------------------------------------------------
    def _if(self, node: onnx.NodeProto, where: str) -> None:
        cond = self._value(node.input[0])
        if cond is None:
            raise ModelError(
                f"{where}: If's condition '{node.input[0]}' is computed at run time; dnnr inlines "
                "an If only when its condition folds to a constant\n"
                "  hint: export the model with the branch decided (e.g. torch.jit.trace / "
                "dynamo with static control flow), or make the condition a constant")
        branch_name = "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"
        branch = next(a.g for a in node.attribute if a.name == branch_name)
        outputs = self._instantiate(branch, f"{node.name or 'If'}/{branch_name[:4]}/", [])
        for k, (source, target) in enumerate(zip(outputs, node.output, strict=False)):
            self._identity(source, target, f"{node.name or 'If'}_out{k}")

    # -- Loop ---------------------------------------------------------------------------
    def _loop(self, node: onnx.NodeProto, where: str) -> None:
        body = next(a.g for a in node.attribute if a.name == "body")
        trip_name = node.input[0] if node.input else ""
        cond_name = node.input[1] if len(node.input) > 1 else ""
        trip = self._value(trip_name)
        if trip_name and trip is None:
            raise ModelError(
                f"{where}: Loop's trip count '{trip_name}' is computed at run time; dnnr unrolls a "
                "Loop only with a constant trip count\n"
                "  hint: export with a fixed number of iterations, or bind the input dims it is "
                "computed from (--bind) before compiling")
        cond = self._value(cond_name) if cond_name else np.asarray(True)
        if cond is None:
            raise ModelError(f"{where}: Loop's initial condition '{cond_name}' is computed at run "
                             "time; dnnr unrolls a Loop only when its condition folds to a constant")
        if trip is None and not cond_name:
            raise ModelError(f"{where}: Loop with neither a trip count nor a condition never ends")
        limit = int(np.asarray(trip).reshape(-1)[0]) if trip is not None else None
        carried = list(node.input[2:])
        n_carried = len(carried)
        scans: list[list[str]] = [[] for _ in node.output[n_carried:]]
        iteration = 0
        keep_going = bool(np.asarray(cond).reshape(-1)[0])
        while keep_going and (limit is None or iteration < limit):
            if (iteration + 1) * max(len(body.node), 1) > MAX_UNROLLED_NODES:
                raise ModelError(
                    f"{where}: unrolling this Loop exceeds {MAX_UNROLLED_NODES} nodes "
                    f"({len(body.node)} per iteration, {limit if limit is not None else 'unbounded'} "
                    "iterations)\n  hint: a loop this long needs run-time control flow, which dnnr "
                    "does not have; compile the body as a model of its own")
            prefix = f"{node.name or 'Loop'}/it{iteration}/"
            iteration_value = self._constant(f"{prefix}iteration", np.asarray(iteration, dtype=np.int64))
            cond_value = self._constant(f"{prefix}cond", np.asarray(True))
            outputs = self._instantiate(body, prefix, [iteration_value, cond_value, *carried])
            next_cond = self._value(outputs[0])
            if next_cond is None:
                raise ModelError(
                    f"{where}: Loop's condition (body output '{body.output[0].name}') is computed "
                    "from data; dnnr unrolls a Loop only when its condition folds to a constant "
                    "after every iteration\n  hint: use a constant trip count with a constant-true "
                    "condition")
            keep_going = bool(np.asarray(next_cond).reshape(-1)[0])
            carried = outputs[1:1 + n_carried]
            for pieces, value in zip(scans, outputs[1 + n_carried:], strict=True):
                pieces.append(value)
            iteration += 1
        for k, (source, target) in enumerate(zip(carried, node.output, strict=False)):
            self._identity(source, target, f"{node.name or 'Loop'}_out{k}")
        for k, (pieces, target) in enumerate(zip(scans, node.output[n_carried:], strict=True)):
            if not target:
                continue
            if not pieces:
                raise ModelError(f"{where}: Loop runs zero iterations, so its scan output "
                                 f"'{target}' is empty with a shape dnnr cannot infer")
            self._stack(pieces, 0, target, f"{node.name or 'Loop'}_scan{k}")

    # -- Scan ---------------------------------------------------------------------------
    def _scan(self, node: onnx.NodeProto, where: str) -> None:
        if self.ctx.opset < 9:
            raise ModelError(f"{where}: Scan-8 (with a batch axis and sequence_lens) is not "
                             "supported; re-export at opset 9 or later")
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        body: onnx.GraphProto = attrs["body"]
        n_scan = int(attrs["num_scan_inputs"])
        n_state = len(node.input) - n_scan
        scan_inputs = list(node.input[n_state:])
        in_axes = list(attrs.get("scan_input_axes", [0] * n_scan))
        in_directions = list(attrs.get("scan_input_directions", [0] * n_scan))
        n_outputs = len(body.output) - n_state
        out_axes = list(attrs.get("scan_output_axes", [0] * n_outputs))
        out_directions = list(attrs.get("scan_output_directions", [0] * n_outputs))
        lengths = set()
        for name, axis in zip(scan_inputs, in_axes, strict=True):
            shape = self.ctx.static_shape(name)
            size = shape[axis] if shape is not None and -len(shape) <= axis < len(shape) else None
            if size is None:
                raise ModelError(
                    f"{where}: the scanned axis {axis} of Scan input '{name}' has no static "
                    "length; dnnr unrolls a Scan only over a static sequence length\n"
                    "  hint: bind the input's symbolic dims (--bind) or export with a fixed length")
            lengths.add(int(size))
        if len(lengths) != 1:
            raise ModelError(f"{where}: Scan inputs have different sequence lengths {sorted(lengths)}")
        length = lengths.pop()
        if length * max(len(body.node), 1) > MAX_UNROLLED_NODES:
            raise ModelError(f"{where}: unrolling this Scan ({length} steps of {len(body.node)} "
                             f"nodes) exceeds {MAX_UNROLLED_NODES} nodes")
        state = list(node.input[:n_state])
        pieces: list[list[str]] = [[] for _ in range(n_outputs)]
        name = node.name or "Scan"
        for step in range(length):
            prefix = f"{name}/step{step}/"
            elements = []
            for k, (source, axis, direction) in enumerate(zip(scan_inputs, in_axes, in_directions,
                                                              strict=True)):
                index = self._constant(f"{prefix}index{k}",
                                       np.asarray(length - 1 - step if direction else step, dtype=np.int64))
                element = self.ctx.fresh_value(f"{prefix}element{k}")
                self.process([helper.make_node("Gather", [source, index], [element],
                                               name=f"{prefix}gather{k}", axis=axis)])
                elements.append(element)
            outputs = self._instantiate(body, prefix, [*state, *elements])
            state = outputs[:n_state]
            for collected, value in zip(pieces, outputs[n_state:], strict=True):
                collected.append(value)
        for k, (source, target) in enumerate(zip(state, node.output, strict=False)):
            self._identity(source, target, f"{name}_out{k}")
        for k, target in enumerate(node.output[n_state:]):
            if not target:
                continue
            if length == 0:
                raise ModelError(f"{where}: Scan over an empty sequence gives empty scan outputs "
                                 "with shapes dnnr cannot infer")
            ordered = pieces[k][::-1] if out_directions[k] else pieces[k]
            self._stack(ordered, int(out_axes[k]), target, f"{name}_scan{k}")
