"""Per-op conversion of ONNX opset 7–21 nodes to the IR's opset-17 meaning.

Each rule takes a node as read (attributes decoded, inputs already renamed
through removed Identity/Dropout nodes) and returns the IR nodes that replace
it. Constant inputs that opset 17 (or later) takes for axes, splits, slice
bounds, pads and clip bounds become attributes; a rule that meets a
non-constant one keeps it as an input (opset-17 form).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np
import onnx

from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node, TensorAttr

# Sequence and optional operators (If / Loop / Scan are inlined first: ir/control_flow.py).
CONTROL_FLOW = frozenset({
    "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
    "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence",
    "Optional", "OptionalGetElement", "OptionalHasElement",
})
_REDUCE = frozenset({
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp",
})
# IR operators with no opset-17 schema: opset 20's Gelu in its two forms
# (rules/operators.dnnr declares them; onnx_export writes them back).
INTERNAL_OPS = frozenset({"Gelu", "GeluTanh"})
# Operators of opsets 18+ that rules/operators.dnnr declares with their ONNX meaning: the
# importer keeps them (there is no opset-17 schema to check them against) and the
# exporter writes them at the input model's opset, which has them.
LATER_OPSET_OPS = frozenset({"Mish", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
                             "CenterCropPad", "DeformConv", "AffineGrid", "Col2Im", "GroupNormalization"})
# Attributes the IR holds that opset 17 takes as inputs (see Graph's docstring).
IR_ONLY_ATTRS: dict[str, frozenset[str]] = {
    "Unsqueeze": frozenset({"axes"}),
    "Squeeze": frozenset({"axes"}),
    "ReduceSum": frozenset({"axes"}),
    "Split": frozenset({"split"}),
    "Slice": frozenset({"starts", "ends", "axes", "steps"}),
    "Pad": frozenset({"pads", "value", "axes"}),
    "Clip": frozenset({"min", "max"}),
}
# Opset-11+ inputs that stand for an IR attribute of another name (Pad's opset-2 ``value``).
_INPUT_ATTRS = {("Pad", "constant_value"): "value"}
# Attributes of opsets 18+ the IR keeps (declared in rules/operators.dnnr without a default,
# so only a node that has them writes them back, at the input model's opset).
LATER_OPSET_ATTRS: dict[str, frozenset[str]] = {
    "Resize": frozenset({"axes", "antialias", "keep_aspect_ratio_policy"}),
    "AveragePool": frozenset({"dilations"}),  # opset 19
    "LpPool": frozenset({"dilations", "ceil_mode"}),  # opset 18
    "QuantizeLinear": frozenset({"block_size"}),  # opset 21: blocked quantisation
    "DequantizeLinear": frozenset({"block_size"}),
}
# Attributes of later opsets that are harmless to drop at their default value.
# (BatchNormalization's and CastLike's are removed by their rules, Resize's kept: `LATER_OPSET_ATTRS`.)
_DROPPABLE = {("Cast", "saturate"): None, ("QuantizeLinear", "saturate"): None,
              ("QuantizeLinear", "output_dtype"): 0, ("Split", "num_outputs"): None}


class ImportContext(Protocol):
    opset: int
    constants: dict[str, np.ndarray]
    alias: dict[str, str]

    def fresh_value(self, base: str) -> str: ...
    def add_constant(self, base: str, array: np.ndarray) -> str: ...
    def rank_hint(self, name: str) -> int | None: ...
    def elem_type(self, name: str) -> int | None: ...


def _with(node: Node, **changes: object) -> Node:
    attrs = node.attr_dict
    for key, value in changes.pop("attrs", {}).items():  # type: ignore[union-attr]
        if value is None:
            attrs.pop(key, None)
        else:
            attrs[key] = value
    fields = {"op": node.op, "inputs": node.inputs, "outputs": node.outputs, "name": node.name}
    fields.update(changes)
    return Node(fields["op"], tuple(fields["inputs"]), tuple(fields["outputs"]),
                tuple(sorted(attrs.items())), str(fields["name"]))


def operands_as_attrs(node: Node, moved: Mapping[int, tuple[str, str]],
                      constant: Callable[[str], np.ndarray | None]) -> Node:
    """``node`` with its operands at ``moved``'s positions made the attributes named there
    (of type "ints", "int" or "float"; an empty float operand absent) once every one given
    is a known constant (``constant`` gives None otherwise); with one computed at run time,
    ``node`` unchanged (it keeps its opset-17+ form). The importer moves the operands ONNX's
    schemas name like an IR attribute, constant folding and the fusion planner those the
    registry declares (`ops.OpInfo.operand_attributes`)."""
    present = [k for k in moved if k < len(node.inputs)]
    values = {k: constant(node.inputs[k]) for k in present if node.inputs[k]}
    if not present or any(v is None for v in values.values()):
        return node
    attrs: dict[str, object] = {}
    for k, value in values.items():
        name, kind = moved[k]
        flat = value.reshape(-1)  # type: ignore[union-attr]
        attrs[name] = tuple(int(i) for i in flat) if kind == "ints" else int(flat[0]) if kind == "int" else \
            float(flat[0]) if flat.size else None
    return _with(node, inputs=[name for k, name in enumerate(node.inputs) if k not in moved], attrs=attrs)


class NodeConverter:
    def __init__(self, ctx: ImportContext) -> None:
        self.ctx = ctx

    def convert(self, node: Node, label: str) -> list[Node]:
        op = node.op
        if op in CONTROL_FLOW:
            raise ModelError(f"{label}: sequence and optional values are not supported (dnnr's IR "
                             "holds tensors only)")
        node = self._constant_inputs_as_attrs(node)
        rule = getattr(self, f"_convert_{op}", None)
        if rule is None and op in _REDUCE:
            rule = self._convert_reduce
        converted = rule(node, label) if rule is not None else [node]
        return [_opset17_attrs(out, label) for out in converted]

    # -- helpers ---------------------------------------------------------------
    def _const(self, name: str) -> np.ndarray | None:
        return self.ctx.constants.get(name) if name else None

    def _constant_inputs_as_attrs(self, node: Node) -> Node:
        """The inputs ``node``'s schema (at the model's opset) names like an attribute the
        IR holds (opset 17's attributes, `IR_ONLY_ATTRS`, `_INPUT_ATTRS`) become that
        attribute (`operands_as_attrs`): a scalar of the data's type ("T") a float, an int
        list one opset 17 takes as a single int (DFT's axis) that int."""
        try:
            formals = onnx.defs.get_schema(node.op, self.ctx.opset).inputs
            kinds = onnx.defs.get_schema(node.op, 17).attributes
        except onnx.defs.SchemaError:  # an operator later than 17 or no longer defined
            return node
        held = set(kinds) | IR_ONLY_ATTRS.get(node.op, frozenset())
        moved = {k: (name, "float" if f.type_str == "T" else "int" if name in kinds and
                     kinds[name].type == onnx.AttributeProto.INT else "ints")
                 for k, f in enumerate(formals) if k and (name := _INPUT_ATTRS.get((node.op, f.name), f.name)) in held}
        return operands_as_attrs(node, moved, self._const)

    # -- rules -----------------------------------------------------------------
    def _convert_Identity(self, node: Node, label: str) -> list[Node]:
        self.ctx.alias[node.outputs[0]] = node.inputs[0]
        return []

    def _convert_Dropout(self, node: Node, label: str) -> list[Node]:
        if len(node.inputs) > 2 and node.inputs[2]:
            training = self._const(node.inputs[2])
            if training is None or bool(training.reshape(-1)[0]):
                raise ModelError(f"{label}: Dropout in training mode is not supported")
        self.ctx.alias[node.outputs[0]] = node.inputs[0]
        if len(node.outputs) < 2 or not node.outputs[1]:
            return []
        # The inference-mode mask is all true: same shape as the input.
        shape = self.ctx.fresh_value(f"{node.outputs[1]}_shape")
        return [
            Node("Shape", (node.inputs[0],), (shape,), name=f"{node.name}_mask_shape"),
            Node("ConstantOfShape", (shape,), (node.outputs[1],),
                 (("value", TensorAttr.from_numpy(np.ones(1, dtype=bool))),), f"{node.name}_mask"),
        ]

    def _convert_reduce(self, node: Node, label: str) -> list[Node]:
        noop = node.attr("noop_with_empty_axes", 0)
        converted = _with(node, attrs={"noop_with_empty_axes": None})
        axes = converted.attr("axes")
        if len(converted.inputs) > 1:  # run-time axes (ReduceSum opset 13+, the others 18+)
            if noop and node.op != "ReduceSum":  # the IR declares the flag on ReduceSum only
                raise ModelError(f"{label}: {node.op} with run-time axes and noop_with_empty_axes=1 "
                                 "is not supported (ReduceSum is)")
            return [_with(converted, attrs={"noop_with_empty_axes": noop or None})]
        if not axes and noop:
            self.ctx.alias[node.outputs[0]] = node.inputs[0]
            return []
        if axes == ():
            converted = _with(converted, attrs={"axes": None})
        return [converted]

    def _convert_Pad(self, node: Node, label: str) -> list[Node]:
        mode = node.attr("mode", "constant")
        if mode not in ("constant", "reflect", "edge", "wrap"):  # wrap: opset 19
            raise ModelError(f"{label}: Pad mode {mode!r} is not supported")
        value = float(node.attr("value", 0.0))  # opset 2's attribute, or opset 11's constant input
        return [_with(node, attrs={"value": value or None})]

    def _convert_Softmax(self, node: Node, label: str) -> list[Node]:
        if self.ctx.opset >= 13:
            return [_with(node, attrs={"axis": int(node.attr("axis", -1))})]
        # Before opset 13 the input is coerced to 2-D at `axis`: flatten, normalise rows, reshape back.
        axis = int(node.attr("axis", 1))
        rank = self.ctx.rank_hint(node.inputs[0])
        if rank is not None and axis in (-1, rank - 1):
            return [_with(node, attrs={"axis": -1})]
        x, out = node.inputs[0], node.outputs[0]
        shape, flat, rows = (self.ctx.fresh_value(f"{out}_{s}") for s in ("shape", "flat", "rows"))
        return [
            Node("Shape", (x,), (shape,), name=f"{node.name}_shape"),
            Node("Flatten", (x,), (flat,), (("axis", axis),), f"{node.name}_flatten"),
            Node(node.op, (flat,), (rows,), (("axis", -1),), node.name),
            Node("Reshape", (rows, shape), (out,), name=f"{node.name}_reshape"),
        ]

    _convert_LogSoftmax = _convert_Softmax
    _convert_Hardmax = _convert_Softmax

    def _convert_BatchNormalization(self, node: Node, label: str) -> list[Node]:
        if node.attr("training_mode", 0):
            raise ModelError(f"{label}: BatchNormalization in training mode is not supported")
        if any(node.outputs[1:]):
            raise ModelError(f"{label}: BatchNormalization's training outputs are not supported")
        spatial = node.attr("spatial", 1)
        base = _with(node, outputs=node.outputs[:1],
                     attrs={"spatial": None, "is_test": None, "consumed_inputs": None, "training_mode": None})
        if spatial:
            return [base]
        # spatial=0 (opset 7/8): statistics have shape (C, D1, ...), i.e. plain broadcasting.
        x, scale, bias, mean, var = node.inputs[:5]
        eps = self.ctx.add_constant(f"{node.name or 'bn'}_eps",
                                    np.asarray(node.attr("epsilon", 1e-5), dtype=np.float32))
        names = [self.ctx.fresh_value(f"{node.outputs[0]}_{s}") for s in ("centred", "var_eps", "std", "norm", "scaled")]
        centred, var_eps, std, norm, scaled = names
        return [
            Node("Sub", (x, mean), (centred,), name=f"{node.name}_sub"),
            Node("Add", (var, eps), (var_eps,), name=f"{node.name}_add_eps"),
            Node("Sqrt", (var_eps,), (std,), name=f"{node.name}_sqrt"),
            Node("Div", (centred, std), (norm,), name=f"{node.name}_div"),
            Node("Mul", (norm, scale), (scaled,), name=f"{node.name}_scale"),
            Node("Add", (scaled, bias), (node.outputs[0],), name=f"{node.name}_bias"),
        ]

    def _convert_Upsample(self, node: Node, label: str) -> list[Node]:
        """Upsample (and Resize-10, Upsample-9 renamed) as opset-17 Resize: asymmetric
        coordinates, floor rounding; its scales an attribute (opset 7–8), a constant or a
        run-time input (the same Resize, reading them as they come)."""
        scales = node.inputs[1] if self.ctx.opset >= 9 else ""
        constant = self._const(scales) if scales else np.asarray(node.attr("scales", ()), dtype=np.float32)
        if constant is not None:
            if np.any(constant < 1):
                raise ModelError(f"{label}: downsampling {node.op} before opset 11 is not supported")
            scales = self.ctx.add_constant(f"{node.outputs[0]}_scales", constant.astype(np.float32))
        mode = str(node.attr("mode", "nearest"))
        if mode not in ("nearest", "linear"):
            raise ModelError(f"{label}: {node.op} mode {mode!r} is not supported")
        attrs = (("coordinate_transformation_mode", "asymmetric"), ("mode", mode), ("nearest_mode", "floor"))
        return [Node("Resize", (node.inputs[0], "", scales), node.outputs, attrs, node.name)]

    def _convert_Resize(self, node: Node, label: str) -> list[Node]:
        # opset 18/19's axes, antialias, aspect policy and modes: the OpenCL backend checks them
        return self._convert_Upsample(node, label) if self.ctx.opset < 11 else [node]

    def _convert_Scatter(self, node: Node, label: str) -> list[Node]:
        return [_with(node, op="ScatterElements")]

    def _convert_TopK(self, node: Node, label: str) -> list[Node]:
        if self.ctx.opset >= 10:
            return [node]
        k = self.ctx.add_constant(f"{node.outputs[0]}_k", np.asarray([node.attr("k")], dtype=np.int64))
        return [_with(node, inputs=(node.inputs[0], k), attrs={"k": None})]

    def _convert_Gelu(self, node: Node, label: str) -> list[Node]:
        """Opset 20's Gelu: dnnr's Gelu (exact, erf form) or GeluTanh (tanh approximation)."""
        approximate = node.attr("approximate", "none")
        if approximate not in ("none", "tanh"):
            raise ModelError(f"{label}: Gelu approximate={approximate!r} is not an ONNX value "
                             "(expected 'none' or 'tanh')")
        op = "Gelu" if approximate == "none" else "GeluTanh"
        return [_with(node, op=op, attrs={"approximate": None})]

    def _convert_CastLike(self, node: Node, label: str) -> list[Node]:
        """CastLike(x, like) = Cast(x, to = like's element type), which import knows."""
        to = self.ctx.elem_type(node.inputs[1])
        if to is None:
            raise ModelError(f"{label}: CastLike's target '{node.inputs[1]}' has no known element "
                             "type\n  hint: give the model's inputs their element types")
        return [_with(node, op="Cast", inputs=node.inputs[:1], attrs={"to": to})]

    def _convert_DFT(self, node: Node, label: str) -> list[Node]:
        """Opset 20 moved DFT's axis to an input, by default -2 (opset 17's attribute: 1)."""
        if self.ctx.opset < 20 or node.attr("axis") is not None or (len(node.inputs) > 2 and node.inputs[2]):
            return [node]
        return [_with(node, inputs=node.inputs[:2], attrs={"axis": -2})]

    def _convert_Compress(self, node: Node, label: str) -> list[Node]:
        """Compress by a constant condition is a Gather of the kept positions (static
        output size; the OpenCL backend refuses a run-time condition)."""
        condition = self._const(node.inputs[1])
        if condition is None:
            return [node]
        kept = self.ctx.add_constant(f"{node.outputs[0]}_kept",
                                     np.flatnonzero(condition.reshape(-1)).astype(np.int64))
        axis = node.attr("axis")
        if axis is not None:
            return [Node("Gather", (node.inputs[0], kept), node.outputs, (("axis", int(axis)),), node.name)]
        flat = self.ctx.fresh_value(f"{node.outputs[0]}_flat")
        target = self.ctx.add_constant(f"{node.outputs[0]}_shape", np.asarray([-1], np.int64))
        return [Node("Reshape", (node.inputs[0], target), (flat,), name=f"{node.name}_flatten"),
                Node("Gather", (flat, kept), node.outputs, (("axis", 0),), node.name)]

    def _convert_GridSample(self, node: Node, label: str) -> list[Node]:
        """The mode explicitly: its default and names changed in opset 20 (bilinear → linear)."""
        if node.attr("mode") is not None:
            return [node]
        return [_with(node, attrs={"mode": "linear" if self.ctx.opset >= 20 else "bilinear"})]

    def _convert_RoiAlign(self, node: Node, label: str) -> list[Node]:
        """Opset 10's RoiAlign samples as opset 16's "output_half_pixel" mode does."""
        if self.ctx.opset >= 16:
            return [node]
        return [_with(node, attrs={"coordinate_transformation_mode": "output_half_pixel"})]

    def _convert_EyeLike(self, node: Node, label: str) -> list[Node]:
        """The output element type explicitly (the input's when ``dtype`` is absent)."""
        if node.attr("dtype") is not None:
            return [node]
        dtype = self.ctx.elem_type(node.inputs[0])
        if dtype is None:
            raise ModelError(f"{label}: EyeLike's input '{node.inputs[0]}' has no known element "
                             "type\n  hint: give the model's inputs their element types")
        return [_with(node, attrs={"dtype": dtype})]

    def _convert_Constant(self, node: Node, label: str) -> list[Node]:
        if node.attr("sparse_value") is not None or node.attr("value_string") is not None \
                or node.attr("value_strings") is not None:
            raise ModelError(f"{label}: sparse or string constants are not supported")
        return [node]


def _opset17_attrs(node: Node, label: str) -> Node:
    """Drop later-opset attributes at their defaults; reject ops and attributes opset 17 lacks."""
    if node.op == "Constant" or node.op in INTERNAL_OPS or node.op in LATER_OPSET_OPS:
        return node
    try:
        schema = onnx.defs.get_schema(node.op, 17, "")
    except Exception:  # SchemaError: the op does not exist at opset 17
        raise ModelError(f"{label}: op {node.op} has no import support in dnnr") from None
    if schema.deprecated:
        raise ModelError(f"{label}: op {node.op} is deprecated and has no import support")
    allowed = set(schema.attributes) | IR_ONLY_ATTRS.get(node.op, frozenset()) | LATER_OPSET_ATTRS.get(node.op, frozenset())
    dropped: dict[str, None] = {}
    for key, value in node.attrs:
        if key in allowed:
            continue
        default = _DROPPABLE.get((node.op, key), "<keep>")
        if default is None or default == value:
            dropped[key] = None
            continue
        raise ModelError(f"{label}: attribute {key}={value!r} has no opset-17 equivalent in dnnr")
    return _with(node, attrs=dropped) if dropped else node
