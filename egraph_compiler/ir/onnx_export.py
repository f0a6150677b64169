"""`Graph` → ONNX opset 17, or the input model's opset when newer (`export_opset`).

The IR holds constant axes, splits, slice bounds, pads and clip bounds as
attributes; opset 17 wants most of them as inputs, so they become int64 (or
element-typed) initializers here. Symbolic dims are written as ``dim_param``
strings. Constants that are zero-stride broadcast views (folded
ConstantOfShape fills) go back out as ConstantOfShape so a 500 MB fill stays a
few bytes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node, TensorType
from egraph_compiler.ir.names import fresh_name
from egraph_compiler.ir.onnx_types import (
    dims_to_onnx,
    dtype_to_onnx,
    make_attribute,
    numpy_to_tensor,
)

EXPORT_OPSET = 17
# The domain of operators that rule files declare and ONNX does not define.
CUSTOM_DOMAIN = "ai.dnnr"
_IR_VERSION = 8


GELU_OPSET = 20  # the first opset with a Gelu operator


def export_opset(graph: Graph) -> int:
    """The opset the model is written in: the input model's when newer than 17 (so
    Gelu and friends survive), else 17."""
    return max(EXPORT_OPSET, graph.opset)


def to_onnx(graph: Graph) -> onnx.ModelProto:
    """Export a `Graph` as a `ModelProto` (opset `export_opset`) that passes ``onnx.checker``."""
    return _Exporter(graph).run()


def _is_splat(array: np.ndarray) -> bool:
    return array.size > 1 and all(stride == 0 for stride in array.strides)


class _Exporter:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.opset = export_opset(graph)
        self.initializers: list[tuple[str, np.ndarray]] = []
        self.nodes: list[onnx.NodeProto] = []
        self.names = {v.name for v in graph.inputs} | set(graph.constants)
        self.names |= {o for n in graph.nodes for o in n.outputs}

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.names)

    def constant(self, base: str, array: np.ndarray) -> str:
        name = self.fresh(base)
        self.initializers.append((name, array))
        return name

    def dtype_of(self, value: str) -> str:
        known = self.graph.types.get(value)
        if known is not None:
            return known.dtype
        if value in self.graph.constants:
            return str(self.graph.constants[value].dtype)
        for v in self.graph.inputs:
            if v.name == value:
                return v.type.dtype
        return "float32"

    def rank_of(self, value: str) -> int | None:
        known = self.graph.types.get(value)
        if known is not None and known.shape is not None:
            return len(known.shape)
        if value in self.graph.constants:
            return self.graph.constants[value].ndim
        return None

    def run(self) -> onnx.ModelProto:
        graph = self.graph
        for name in sorted(graph.constants):
            array = graph.constants[name]
            if _is_splat(array):
                shape = self.constant(f"{name}_shape", np.asarray(array.shape, dtype=np.int64))
                fill = numpy_to_tensor(np.asarray([array[(0,) * array.ndim]], dtype=array.dtype), "")
                self.nodes.append(helper.make_node("ConstantOfShape", [shape], [name], name=self.fresh(f"{name}_fill"), value=fill))
            else:
                self.initializers.append((name, array))
        for node in graph.nodes:
            if node.op in _QUANT_INTERNAL:
                self.nodes.extend(self.export_quantised(node))
            elif node.op in ("Gelu", "GeluTanh") and self.opset < GELU_OPSET:
                self.nodes.extend(self.export_gelu_below_20(node))
            else:
                self.nodes.append(self.export_node(node))
        inputs = [_value_info(v.name, v.type) for v in graph.inputs]
        outputs = [_value_info(v.name, graph.types.get(v.name, v.type)) for v in graph.outputs]
        proto = helper.make_graph(self.nodes, graph.name or "model", inputs, outputs)
        opsets = [helper.make_opsetid("", self.opset)]
        if any(n.domain == CUSTOM_DOMAIN for n in self.nodes):
            opsets.append(helper.make_opsetid(CUSTOM_DOMAIN, 1))
        model = helper.make_model(proto, opset_imports=opsets, producer_name="dnnr")
        model.ir_version = max(_IR_VERSION, helper.find_min_ir_version_for(opsets[:1]))
        if any(not o.type.tensor_type.HasField("shape") for o in model.graph.output):
            _fill_output_shapes(model, self.initializers)
        for name, array in self.initializers:
            _add_initializer(model.graph, name, array)
        return model

    def export_quantised(self, node: Node) -> list[onnx.NodeProto]:
        """rules/quant.dnnr's integer operators as the ONNX operators they are defined by:
        QMatMulInt is QLinearMatMul (same operands), QConvInt DequantizeLinear → Conv →
        QuantizeLinear (its bias may have any scale and zero point, which QLinearConv's
        cannot), QAddInt/QMulInt (and QGemmInt, QAveragePoolInt, QGlobalAveragePoolInt,
        QConcatInt, QSoftmaxInt) DequantizeLinear → Add/Mul/… → QuantizeLinear and
        Requantize DequantizeLinear → QuantizeLinear."""
        ins, out, name = list(node.inputs), node.outputs[0], node.name or self.fresh(node.op)
        if node.op == "QMatMulInt":
            return [helper.make_node("QLinearMatMul", ins, [out], name=name)]
        float_op = {"QConvInt": "Conv", "QAddInt": "Add", "QMulInt": "Mul", "QGemmInt": "Gemm",
                    "QAveragePoolInt": "AveragePool", "QGlobalAveragePoolInt": "GlobalAveragePool",
                    "QConcatInt": "Concat", "QSoftmaxInt": "Softmax", "QClipInt": "Clip"}.get(node.op)
        quantised = [tuple(ins[k:k + 3]) for k in range(0, len(ins) - 2, 3)]
        nodes, floats = [], []
        for value, scale, zero in quantised:
            floats.append(self.fresh(f"{value}_dq"))
            nodes.append(helper.make_node("DequantizeLinear", [value, scale, zero], [floats[-1]], name=self.fresh(f"{name}_dq")))
        y_scale, y_zero = ins[-2:]
        attrs = dict(node.attr_dict)
        if float_op == "Clip":  # QClipInt keeps x's parameters; opset 17 Clip takes its bounds as inputs
            floats += [self.constant(f"{name}_{k}", np.asarray(attrs.pop(k), np.float32)) if k in attrs else ""
                       for k in ("min", "max")]
        if float_op is not None:
            result = self.fresh(f"{name}_float")
            nodes.append(helper.make_node(float_op, floats, [result], name=self.fresh(f"{name}_op"), **attrs))
            floats = [result]
        nodes.append(helper.make_node("QuantizeLinear", [floats[0], y_scale, y_zero], [out], name=name))
        return nodes

    def export_node(self, node: Node) -> onnx.NodeProto:
        if node.domain not in ("", "ai.onnx"):
            raise ModelError(f"node '{node.name}' ({node.op}) is in domain {node.domain!r}; cannot export")
        attrs = node.attr_dict
        inputs = list(node.inputs)
        op = node.op
        if op == "Square":  # a rule-language op with no ONNX counterpart
            op, inputs = "Mul", inputs + inputs
        elif op == "GeluTanh":  # opset 20's Gelu with the tanh approximation
            op, attrs["approximate"] = "Gelu", "tanh"
        if op == "Pad" and "pads" in attrs:
            inputs = inputs[:1] + self._pad_inputs(node, attrs)
        elif op == "Pad":  # run-time pads: the fill value and axes are inputs as well
            attrs = {k: v for k, v in attrs.items() if k not in ("value", "axes")}
        elif op == "Clip":
            inputs = self._clip_inputs(node, attrs)
        elif op == "Split" and "split" not in attrs and len(inputs) == 1:
            sizes = self._uneven_split(node)
            if sizes is not None:  # opset 18's last-chunk-smaller split needs explicit sizes at 17
                inputs.append(self.constant(f"{node.name}_split", np.asarray(sizes, dtype=np.int64)))
            elif self.opset >= 18:  # opset 18 wants the sizes or their count
                attrs["num_outputs"] = len(node.outputs)
        elif op == "DFT" and self.opset >= 20 and "axis" not in attrs and len(inputs) < 3:
            attrs["axis"] = 1  # opset 20's default axis is -2; the IR's (opset 17's) is 1
        inputs = self._attributes_as_inputs(node, op, inputs, attrs)
        # An operator ONNX does not define (one declared only in a rule file) is written in
        # dnnr's own domain, so the model stays well-formed and says where it came from.
        proto = helper.make_node(op, inputs, list(node.outputs), name=node.name,
                                 domain=None if onnx.defs.has(op) else CUSTOM_DOMAIN)
        proto.attribute.extend(make_attribute(op, key, value) for key, value in sorted(attrs.items()))
        return proto

    def _attributes_as_inputs(self, node: Node, op: str, inputs: list[str], attrs: dict) -> list[str]:
        """The IR's constant attributes that ONNX's ``op`` at the export opset takes as inputs
        of the same name (Squeeze's axes, the reductions' from opset 18, Split's split,
        Slice's bounds, DFT's axis from opset 20), as int64 initializers at those positions
        ('' for an absent one before them)."""
        try:
            formals = onnx.defs.get_schema(op, self.opset).inputs
        except onnx.defs.SchemaError:  # a rule file's operator, or one newer than the opset
            formals = []
        for position, formal in enumerate(formals):
            if formal.name in attrs:
                value = np.asarray(attrs.pop(formal.name), dtype=np.int64)
                inputs = (inputs + [""] * position)[:position] + [self.constant(f"{node.name}_{formal.name}", value)]
        return inputs

    def _clip_inputs(self, node: Node, attrs: dict) -> list[str]:
        """Opset-17 Clip inputs: constant bounds (IR attributes; ±inf = absent) become
        initializers, run-time bounds (IR inputs) stay inputs. A node with both on one
        side clips by the constant first (a Clip node of its own), then by the run-time
        bound — dropping either would be a silent wrong answer."""
        dtype = self.dtype_of(node.inputs[0])
        runtime = [node.inputs[i] if len(node.inputs) > i else "" for i in (1, 2)]
        constant = [attrs.pop(k, None) for k in ("min", "max")]
        constant = [None if b is None or np.isinf(b) else b for b in constant]
        x = node.inputs[0]
        if any(c is not None and r for c, r in zip(constant, runtime, strict=True)):
            inner = self.fresh(f"{node.outputs[0]}_const_clip")
            bounds = [self.constant(f"{node.name}_{k}", np.asarray(c, dtype=dtype)) if c is not None else ""
                      for c, k in zip(constant, ("min", "max"), strict=True)]
            self.nodes.append(helper.make_node("Clip", [x, *bounds], [inner],
                                               name=self.fresh(f"{node.name}_const")))
            x, constant = inner, [None, None]
        inputs = [x] + [
            r or ("" if c is None else self.constant(f"{node.name}_{k}", np.asarray(c, dtype=dtype)))
            for r, c, k in zip(runtime, constant, ("min", "max"), strict=True)
        ]
        while inputs and inputs[-1] == "":
            inputs.pop()
        return inputs

    def export_gelu_below_20(self, node: Node) -> list[onnx.NodeProto]:
        """Gelu before opset 20: 0.5·x·(1 + erf(x/√2)), or with the tanh approximation
        0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) — torch's and ONNX's definitions."""
        x, out, name = node.inputs[0], node.outputs[0], node.name or self.fresh(node.op)
        dtype = self.dtype_of(x)
        const = lambda base, v: self.constant(f"{name}_{base}", np.asarray(v, dtype=dtype))  # noqa: E731
        nodes: list[onnx.NodeProto] = []

        def emit(op: str, *args: str) -> str:
            result = self.fresh(f"{name}_{op.lower()}")
            nodes.append(helper.make_node(op, list(args), [result], name=self.fresh(f"{name}_{op}")))
            return result

        if node.op == "Gelu":
            inner = emit("Erf", emit("Mul", x, const("rsqrt2", 0.7071067811865476)))
        else:
            cube = emit("Mul", emit("Mul", x, x), x)
            poly = emit("Add", x, emit("Mul", cube, const("c", 0.044715)))
            inner = emit("Tanh", emit("Mul", poly, const("sqrt_2_pi", 0.7978845608028654)))
        half_x = emit("Mul", x, const("half", 0.5))
        nodes.append(helper.make_node("Mul", [half_x, emit("Add", inner, const("one", 1.0))],
                                      [out], name=name))
        return nodes

    def _uneven_split(self, node: Node) -> list[int] | None:
        known = self.graph.types.get(node.inputs[0])
        if known is None or known.shape is None:
            return None
        axis = int(node.attr("axis", 0))
        dim = known.shape[axis]
        count = len(node.outputs)
        if not isinstance(dim, int) or dim % count == 0:
            return None
        chunk = -(-dim // count)
        return [min(chunk, max(dim - i * chunk, 0)) for i in range(count)]

    def _pad_inputs(self, node: Node, attrs: dict) -> list[str]:
        pads = list(attrs.pop("pads"))
        axes = attrs.pop("axes", None)
        if axes is not None:
            rank = self.rank_of(node.inputs[0])
            if rank is None:
                raise ModelError(f"node '{node.name}' (Pad): pads on some axes need the input rank to export")
            full = [0] * (2 * rank)
            for i, axis in enumerate(axes):
                axis = axis + rank if axis < 0 else axis
                full[axis], full[axis + rank] = pads[i], pads[i + len(axes)]
            pads = full
        inputs = [self.constant(f"{node.name}_pads", np.asarray(pads, dtype=np.int64))]
        value = attrs.pop("value", None)
        if value is not None:
            dtype = self.dtype_of(node.inputs[0])
            inputs.append(self.constant(f"{node.name}_value", np.asarray(value, dtype=dtype)))
        return inputs


# Integer operators of rules/quant.dnnr (dnnr-internal; exported by their ONNX definitions).
_QUANT_INTERNAL = frozenset({"QConvInt", "QMatMulInt", "QAddInt", "QMulInt", "Requantize", "QGemmInt",
                             "QAveragePoolInt", "QGlobalAveragePoolInt", "QConcatInt", "QSoftmaxInt",
                             "QClipInt"})


def _fill_output_shapes(model: onnx.ModelProto, constants: list[tuple[str, np.ndarray]]) -> None:
    """Graph outputs need a shape for the checker; without `shapes` types, ask ONNX's inference.

    Called before the initializers are added, so no weight data is serialised here; the
    constants are declared as typed inputs for the duration of the inference.
    """
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.input.extend(
        helper.make_tensor_value_info(name, dtype_to_onnx(str(array.dtype)), list(array.shape))
        for name, array in constants
    )
    try:
        inferred = onnx.shape_inference.infer_shapes(probe).graph
    except Exception:  # inference is a convenience here; the missing shape is reported below
        inferred = probe.graph
    known = {v.name: v for v in list(inferred.value_info) + list(inferred.output)}
    for output in model.graph.output:
        found = known.get(output.name)
        if not output.type.tensor_type.HasField("shape") and found is not None \
                and found.type.tensor_type.HasField("shape"):
            output.type.tensor_type.shape.CopyFrom(found.type.tensor_type.shape)
        if not output.type.tensor_type.HasField("shape"):
            raise ModelError(f"graph output {output.name!r} has no known shape; run `shapes` before export")


def _add_initializer(graph: onnx.GraphProto, name: str, array: np.ndarray) -> None:
    """Write the tensor straight into the graph: one copy of the data, not three."""
    array = np.asarray(array)
    tensor = graph.initializer.add()
    tensor.name = name
    tensor.data_type = dtype_to_onnx(str(array.dtype))
    tensor.dims.extend(int(d) for d in array.shape)
    tensor.raw_data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes(order="C")


def _value_info(name: str, tensor_type: TensorType) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype_to_onnx(tensor_type.dtype), dims_to_onnx(tensor_type.shape))
