"""Lower a QDQ-quantised graph to integer operators with explicit requantisation.

The e-graph (``rules/quant.dnnr``, run by the ``--target hexagon`` schedule) has already
turned ``Q(op(DQ(x), DQ(w), DQ(b)))`` into integer operators (QConvInt, QMatMulInt,
QGemmInt, QAddInt, QMulInt, QAveragePoolInt, QGlobalAveragePoolInt, QConcatInt,
QSoftmaxInt, QClipInt, Requantize) or into operators on the integers themselves (MaxPool,
Concat of tensors quantised alike, Max(x, zero point) for Relu); they, and ONNX's
QLinearConv / QLinearMatMul, lower here to kernels reading the quantised ``x`` and writing
the quantised output, with multiplier/shift computed from the constant scales; so does
MatMulInteger / ConvInteger → Cast → Mul(constant scale) → QuantizeLinear. Nothing is
pattern-matched here: an operator the rules left between DequantizeLinear and
QuantizeLinear runs in the scalar float fallback (`fallback`): Dequantize → float
operator → Quantize, as onnxruntime executes the QDQ graph, or is reported.

Weights may be quantised per output channel (a 1-D scale along the DequantizeLinear's
axis): the requantisation then has one multiplier per output channel and the int32 bias
scale x_scale·w_scale[c]. A QMatMulInt whose b is an activation (attention's Q·Kᵀ, P·V)
lowers to `kernels.QMatMulAct`, which packs b on the device.

All activations are uint8 on the device (int8 tensors are shifted by 128 and their
zero point with them). Rank-4 tensors of the convolutional operators are NHWC on the
device (`Lowered.nhwc`), everything else row-major in ONNX order; graph inputs of
rank 4 arrive NHWC. `Gather` operators convert where a consumer needs the other order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from egraph_compiler import ops
from egraph_compiler.backends.hexagon.before_lowering import before_lowering
from egraph_compiler.backends.hexagon.eltwise import QBinary, QClip, QDepthwise, QPool
from egraph_compiler.backends.hexagon.fallback import (
    Dequantize,
    FloatOp,
    Gather,
    Quantize,
    float_op_c,
    has_float_fallback,
)
from egraph_compiler.backends.hexagon.index_ops import (
    ELEMENT_TYPES,
    FIRST_FAIL_CODE,
    INT32_INPUTS,
    IntElementwise,
    Lookup,
    Take,
)
from egraph_compiler.backends.hexagon.kernels import (
    MATMUL_ACT_MAX_K,
    ConvGeometry,
    QGemm,
    QMatMulAct,
)
from egraph_compiler.backends.hexagon.quant import ELEMENTWISE_SHIFT, requant_from_scales
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node, TensorType
from egraph_compiler.ops.evaluate import NEVER_FOLD, evaluate_node
from egraph_compiler.ops.quantised import INTEGER_SIGNATURES as _INTEGER_SIGNATURES
from egraph_compiler.shapes import infer_node


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
class QPad:
    """``y[i] = x[table[i]]``, or ``fill`` where ``table[i] < 0`` (`padding`: Pad on uint8)."""

    table: np.ndarray  # int32 source element per output element, −1 for a padded one
    fill: int  # the pad value quantised with the input's parameters


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
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # ONNX (NCHW) shape of device tensors
    qparams: dict[str, QParams] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)  # graph input -> device tensor
    outputs: dict[str, str] = field(default_factory=dict)  # graph output -> device tensor
    nhwc: set[str] = field(default_factory=set)  # rank-4 device tensors stored NHWC
    floats: set[str] = field(default_factory=set)  # float32 device tensors (the scalar fallback's)
    constants: dict[str, np.ndarray] = field(default_factory=dict)  # initialised device tensors (device layout)
    integer_io: set[str] = field(default_factory=set)  # graph inputs/outputs that are int8/uint8 in the model
    # device tensors of token ids and masks (`index_ops`): "int32" or "bool"; absent: uint8 or float32
    element_types: dict[str, str] = field(default_factory=dict)
    index_checks: dict[int, str] = field(default_factory=dict)  # program exit code -> the Gather whose index failed

    def element_bytes(self, tensor: str) -> int:
        if tensor in self.element_types:
            return ELEMENT_TYPES[self.element_types[tensor]][2]
        return 4 if tensor in self.floats else 1


class _NoKernel(Exception):
    """The operator has no integer lowering here; the reason goes into the error if
    the float fallback cannot run it either."""


def _const(graph: Graph, name: str) -> np.ndarray:
    if name not in graph.constants:
        raise ModelError(f"hexagon backend: {name} must be a constant")
    return np.asarray(graph.constants[name])


def _qparams(graph: Graph, node: Node) -> QParams:
    return _qparams_of(graph, node.inputs[1], node.inputs[2] if len(node.inputs) > 2 else "", node.name)


def _qparams_of(graph: Graph, scale_name: str, zero_name: str, where: str) -> QParams:
    scale = _const(graph, scale_name).astype(np.float64)
    zp = _const(graph, zero_name) if zero_name else np.zeros((), np.uint8)
    if scale.size != 1:
        raise ModelError(f"hexagon backend: per-channel activation quantisation in {where} is not supported")
    if not np.isfinite(scale).all() or not scale.reshape(-1)[0] > 0:
        raise ModelError(f"hexagon backend: {where}: quantisation scale {scale_name} is {scale.reshape(-1)[0]} "
                         "(the quantiser calibrated a tensor holding ±inf, e.g. a causal mask's −inf; exclude it)")
    signed = zp.dtype == np.int8
    return QParams(float(scale.reshape(-1)[0]), int(zp.reshape(-1)[0]) + (128 if signed else 0), signed)


def _dequantize_per_axis(graph: Graph, node: Node) -> np.ndarray:
    """A constant's DequantizeLinear with a 1-D scale (and zero point) along ``axis``, in
    float32 as onnxruntime computes it, (x − z)·s: the registry's evaluator."""
    try:
        (values,) = evaluate_node(node.op, node.attrs, [_const(graph, i) if i else None for i in node.inputs])
    except ModelError as error:
        raise ModelError(f"hexagon backend: DequantizeLinear {node.name}: {error}") from None
    return values.astype(np.float32)


def _nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], *shape[2:], shape[1]) if len(shape) == 4 else shape


# Operators whose quantised form arrives as the e-graph's integer operators
# (`_INTEGER_SIGNATURES`) or, where rules/quant.dnnr rewrites DQ → op → Q into an
# operator on the integers themselves, as MaxPool / Concat / Max of integer tensors
# (`lower_on_integers`). Left in QDQ form (no rule matched) they run in the float
# fallback where it has the operator (MatMul, Add, Mul, Softmax, Relu) or are reported.
# Operators rules/quant.dnnr writes over integer tensors (qdq-maxpool, qdq-concat-same, qdq-relu).
_ON_INTEGERS = ("MaxPool", "Concat", "Max")
_RULE_LOWERED_OPS = {signature[0] for signature in _INTEGER_SIGNATURES.values()} | {"MaxPool", "Relu"}


class _Lowering:
    """One pass over the nodes in order. ONNX float values are known either as the
    dequantisation of a device uint8 tensor (``quantised``) or as a device float32
    tensor (``device_float``); quantised constants stay graph constants until an
    operator needs them on the device."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.out = Lowered()
        self.consumers = graph.consumers()
        self.quantised: dict[str, str] = {}  # float value -> uint8 tensor (device or constant) it dequantises
        self.device_float: dict[str, str] = {}
        self.alias: dict[str, str] = {}  # QuantizeLinear output -> the device tensor holding it
        self.layouts: dict[tuple[str, bool, tuple[int, ...]], str] = {}
        self.dequantised: dict[str, str] = {}  # uint8 device tensor -> its float copy
        self.q_of = {n.inputs[0]: n for n in graph.nodes if n.op == "QuantizeLinear"}
        self.dq_params: dict[str, QParams] = {}  # DequantizeLinear output of a constant -> its parameters
        # DequantizeLinear output of a constant quantised per axis -> its float values (as ONNX computes them)
        self.dq_per_axis: dict[str, np.ndarray] = {}
        self.consumed: set[str] = set()  # nodes lowered as part of an earlier one (MatMulInteger's Cast, Mul)
        self.known: dict[str, np.ndarray] = dict(graph.constants)  # constants and static Shape results
        self.graph_inputs = {v.name: v for v in graph.inputs}
        self.ints: dict[str, str] = {}  # integer / bool ONNX value -> its int32 / bool device tensor

    # -- device tensors ------------------------------------------------------------
    def new_tensor(self, name: str, shape: tuple[int, ...], qparams: QParams | None = None,
                   nhwc: bool = False, is_float: bool = False, element_type: str | None = None) -> str:
        while name in self.out.shapes:
            name += "_"
        self.out.shapes[name] = tuple(int(d) for d in shape)
        if element_type is not None:
            self.out.element_types[name] = element_type
        if qparams is not None:
            self.out.qparams[name] = qparams
        if nhwc and len(shape) == 4:
            self.out.nhwc.add(name)
        if is_float:
            self.out.floats.add(name)
        return name

    def device(self, tensor: str) -> str:
        """The device tensor a quantised tensor name (or its alias) stands for."""
        tensor = self.alias.get(tensor, tensor)
        if tensor not in self.out.shapes:
            raise ModelError(f"hexagon backend: {tensor} is not computed on the device")
        return tensor

    def quantised_device(self, value: str, where: str) -> str:
        """The uint8 device tensor whose dequantisation is the float ``value``; a quantised
        constant is put on the device with the parameters of the DequantizeLinear reading it."""
        source = self.quantised[value]
        if source in self.graph.constants and source not in self.out.shapes:
            if value not in self.dq_params:
                raise ModelError(f"hexagon backend: {where} reads {source}, quantised per axis, as an integer "
                                 "operand (only weights may be quantised per channel)")
            return self.integer_tensor(source, self.dq_params[value], where)
        return self.device(source)

    def physical_index(self, tensor: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Array of ``shape`` (default: the tensor's ONNX shape) holding each element's device offset."""
        logical = shape or self.out.shapes[tensor]
        size = int(np.prod(logical))
        if tensor in self.out.nhwc:
            b, c, h, w = self.out.shapes[tensor]
            return np.arange(size).reshape(b, h, w, c).transpose(0, 3, 1, 2).reshape(logical)
        return np.arange(size).reshape(logical)

    def gather(self, node_name: str, tensor: str, table: np.ndarray, shape: tuple[int, ...], nhwc: bool) -> str:
        table = table.reshape(-1)
        if np.array_equal(table, np.arange(table.size)) and self.out.shapes[tensor] == shape and \
                (tensor in self.out.nhwc) == (nhwc and len(shape) == 4):
            return tensor
        is_float = tensor in self.out.floats
        y = self.new_tensor(f"{tensor}_g", shape, self.out.qparams.get(tensor), nhwc, is_float,
                            self.out.element_types.get(tensor))
        if np.array_equal(table, np.arange(table.size)):  # same bytes, another shape or layout flag
            self.out.ops.append(IntOp(node_name, "gather", Gather(table, 0), (tensor,), y))
        else:
            self.out.ops.append(IntOp(node_name, "gather", Gather(table.astype(np.int32), self.out.element_bytes(tensor)),
                                      (tensor,), y))
        return y

    def in_layout(self, node_name: str, tensor: str, nhwc: bool, shape: tuple[int, ...] | None = None) -> str:
        """``tensor`` viewed as ``shape`` (same size) in NHWC (rank 4) or row-major order."""
        shape = shape or self.out.shapes[tensor]
        key = (tensor, nhwc, shape)
        if key not in self.layouts:
            index = self.physical_index(tensor, shape)
            table = index.transpose(0, 2, 3, 1) if nhwc and len(shape) == 4 else index
            self.layouts[key] = self.gather(node_name, tensor, table, shape, nhwc)
        return self.layouts[key]

    def float_input(self, node_name: str, value: str) -> str:
        """A float32 device tensor (row-major) holding ``value``."""
        if value in self.device_float:
            return self.device_float[value]
        if value in self.quantised:
            source = self.alias.get(self.quantised[value], self.quantised[value])
            if value in self.dq_per_axis:
                return self.float_constant(value, self.dq_per_axis[value])
            if source not in self.out.shapes:  # a quantised constant: dequantise it now, as ONNX does
                q = self.dq_params[value]
                data = _const(self.graph, source).astype(np.int32) + (128 if q.signed else 0)
                values = ((data - q.zero_point).astype(np.float32) * np.float32(q.scale)).astype(np.float32)
                return self.float_constant(value, values)
            if source not in self.dequantised:
                x = self.in_layout(node_name, source, False)
                q = self.out.qparams[x]
                y = self.new_tensor(f"{x}_f", self.out.shapes[x], is_float=True)
                self.out.ops.append(IntOp(node_name, "dequant", Dequantize(int(np.prod(self.out.shapes[x])), q.zero_point,
                                                                           q.scale), (x,), y))
                self.dequantised[source] = y
            return self.dequantised[source]
        if value in self.graph.constants:
            return self.float_constant(value, np.asarray(self.graph.constants[value]).astype(np.float32))
        raise ModelError(f"hexagon backend: {value} is neither quantised nor computed on the device")

    def float_constant(self, name: str, values: np.ndarray) -> str:
        key = f"{name}_fc"
        if key not in self.out.shapes:
            self.new_tensor(key, values.shape, is_float=True)
            self.out.constants[key] = values.astype(np.float32)
        return key

    # -- nodes -----------------------------------------------------------------------
    def run(self) -> Lowered:
        graph_inputs = {v.name: v for v in self.graph.inputs}
        if not any(n.op in ("QuantizeLinear", *_INTEGER_SIGNATURES) for n in self.graph.nodes):
            raise ModelError("hexagon backend: the model is not quantised; the Hexagon target runs int8 models "
                             "(quantize it first, e.g. onnxruntime.quantization.quantize_static)")
        for node in self.graph.nodes:
            if node.op == "QuantizeLinear":
                self.quantize(node, graph_inputs)
            elif node.op == "DequantizeLinear":
                self.dequantize(node)
            elif self.compile_time(node):
                continue
            elif getattr(ops.current().get(node.op), "moves_elements", False) or node.op in ("Split", "Expand") or (
                    node.op in ("Gather", "Slice") and all(i in self.known for i in node.inputs[1:] if i)):
                self.move(node)
            elif node.op == "Shape":
                self.shape_of(node)
            elif node.op in _INTEGER_SIGNATURES:
                self.integer_node(node)
            elif node.op in ("MatMulInteger", "ConvInteger"):
                self.integer_accumulation(node)
            elif node.name in self.consumed:
                continue
            elif node.op in _ON_INTEGERS and node.inputs[0] in self.alias:
                self.lower_on_integers(node)
            elif node.op == "Pad" and (node.inputs[0] in self.quantised or node.inputs[0] in self.alias):
                self.pad(node)
            elif node.op == "Resize" and (node.inputs[0] in self.quantised or node.inputs[0] in self.alias):
                # `resize` registers its kernel with `kinds`, which imports this module: imported on use
                from egraph_compiler.backends.hexagon.resize import lower_resize
                lower_resize(self, node)
            elif node.op in ("IsNaN", "IsInf") and node.inputs[0] in self.quantised:
                self.never_special(node)
            elif node.op == "IsNaN" and node.inputs[0] in self.device_float:
                self.is_nan(node)
            elif node.op == "Where" and node.inputs[0] in self.known:
                self.where_known(node)
            elif node.op == "Gather" and self.integer_value(node.inputs[1]) is not None:
                self.take(node)
            elif any(self.integer_value(i) is not None for i in node.inputs if i):
                self.on_integers(node)
            else:
                self.compute(node)
        for value in self.graph.outputs:
            if value.name in self.alias:  # an integer output (of a QLinear operator)
                self.out.outputs[value.name] = self.alias[value.name]
                self.out.integer_io.add(value.name)
                continue
            if value.name in self.device_float and value.name not in self.quantised:  # a float output
                self.out.outputs[value.name] = self.device_float[value.name]
                continue
            if value.name in self.ints:  # an int32 / bool output (a mask)
                self.out.outputs[value.name] = self.ints[value.name]
                continue
            if value.name not in self.quantised:
                raise ModelError(f"hexagon backend: graph output {value.name} must be dequantised (QDQ expected)")
            self.out.outputs[value.name] = self.quantised_device(value.name, value.name)
        return self.out

    def compile_time(self, node: Node) -> bool:
        """Integer arithmetic on compile-time values (Shape → Gather → Unsqueeze →
        Concat → a Reshape's target: the quant-only schedule leaves it unfolded) is
        evaluated here into ``known``, never run on the device. False for anything
        else, including float results and quantisation operators."""
        data = [i for i in node.inputs if i]
        if node.op in NEVER_FOLD or not data or not all(i in self.known for i in data):
            return False
        try:
            values = evaluate_node(node.op, node.attrs, [self.known[i] if i else None for i in node.inputs],
                                   len(node.outputs))
        except ModelError:
            return False
        if not all(np.issubdtype(np.asarray(v).dtype, np.integer) for v in values):
            return False
        for name, value in zip(node.outputs, values, strict=False):
            if name:
                self.known[name] = np.asarray(value)
        return True

    def shape_of(self, node: Node) -> None:
        """Shapes are static here: Shape(x) is a constant for the operators reading it (Reshape)."""
        x = node.inputs[0]
        tensor = self.quantised_device(x, node.name) if x in self.quantised else \
            self.device_float.get(x) or self.integer_value(x)
        if tensor is None:
            raise ModelError(f"hexagon backend: Shape {node.name} reads {x}, which is not computed on the device")
        shape = np.asarray(self.out.shapes[tensor], dtype=np.int64)
        start, end = int(node.attr("start", 0)), node.attr("end", None)  # type: ignore[arg-type]
        self.known[node.outputs[0]] = shape[start:None if end is None else int(end)]  # type: ignore[arg-type]

    def quantize(self, node: Node, graph_inputs: dict) -> None:
        q = _qparams(self.graph, node)
        x, y = node.inputs[0], node.outputs[0]
        if x in graph_inputs and x in self.out.inputs:  # the host quantises each graph input once
            first = self.out.qparams[self.out.inputs[x]]
            if (first.scale, first.zero_point, first.signed) != (q.scale, q.zero_point, q.signed):
                raise ModelError(f"hexagon backend: graph input {x} is quantised twice with different parameters "
                                 f"(QuantizeLinear {node.name}); quantise it once and requantise the copy")
            self.alias[y] = self.out.inputs[x]
        elif x in graph_inputs:
            shape = tuple(int(d) for d in graph_inputs[x].type.shape or ())
            self.out.inputs[x] = self.new_tensor(y, shape, q, nhwc=True)
            self.alias[y] = self.out.inputs[x]
        elif x in self.quantised:
            self.alias[y] = self.requantize(node.name, self.quantised_device(x, node.name), q, y)
        elif x in self.device_float:
            source = self.device_float[x]
            shape = self.out.shapes[source]
            self.alias[y] = self.new_tensor(y, shape, q)
            self.out.ops.append(IntOp(node.name, "quant", Quantize(int(np.prod(shape)), q.zero_point, q.scale),
                                      (source,), self.alias[y]))
        elif x in self.graph.constants:
            raise ModelError(f"hexagon backend: QuantizeLinear {node.name} of a float constant (fold it first)")
        else:
            raise ModelError(f"hexagon backend: the input of QuantizeLinear {node.name} is not computed on the device")
        self.out.qparams.setdefault(y, q)

    def dequantize(self, node: Node) -> None:
        x = node.inputs[0]
        if x in self.graph.constants and _const(self.graph, node.inputs[1]).size > 1:
            self.dq_per_axis[node.outputs[0]] = _dequantize_per_axis(self.graph, node)
        elif x in self.graph.constants:
            self.dq_params[node.outputs[0]] = _qparams(self.graph, node)
        elif self.alias.get(x, x) not in self.out.shapes:
            raise ModelError(f"hexagon backend: DequantizeLinear {node.name} reads {x}, which is not quantised here")
        self.quantised[node.outputs[0]] = self.alias.get(x, x)

    def device_source(self, node: Node, x: str) -> str:
        """The device tensor holding ``x`` for a data-moving ``node``: an integer tensor (the
        rules move DequantizeLinear / QuantizeLinear past layout ops), or the fallback's float."""
        if x in self.alias:
            return self.alias[x]
        if x in self.quantised:
            return self.quantised_device(x, node.name)
        if x in self.device_float:
            return self.device_float[x]
        if (tensor := self.integer_value(x)) is not None:
            return tensor
        raise ModelError(f"hexagon backend: {node.op} {node.name} reads {x}, which is not computed on the device")

    def domain_of(self, x: str) -> dict[str, str]:
        """Where a data-moving operator's result is known: the domain its input ``x`` is in."""
        if x in self.alias:
            return self.alias
        if x in self.quantised:
            return self.quantised
        return self.ints if x in self.ints else self.device_float

    # -- token ids and masks: int32 / bool device tensors (`index_ops`) ---------------------
    def integer_value(self, name: str) -> str | None:
        """The int32 / bool device tensor holding the integer ONNX value ``name``, or None.
        An integer graph input (int64 token ids, an attention mask) becomes an int32 device
        input the first time an operator reads it (the host converts it, `_to_device`)."""
        if name in self.ints:
            return self.ints[name]
        graph_input = self.graph_inputs.get(name)
        if graph_input is None or name in self.out.inputs:
            return None
        dtype = graph_input.type.dtype
        if dtype not in (*INT32_INPUTS, "bool"):
            return None
        shape = tuple(int(d) for d in graph_input.type.shape or ())
        element_type = "bool" if dtype == "bool" else "int32"
        self.ints[name] = self.out.inputs[name] = self.new_tensor(name, shape, element_type=element_type)
        return self.ints[name]

    def is_integer(self, name: str) -> bool:
        """Whether ``name`` is an integer or bool value (on the device or known at compile time)."""
        if self.integer_value(name) is not None:
            return True
        return name in self.known and np.asarray(self.known[name]).dtype.kind in "biu"

    def integer_operand(self, name: str, node: Node) -> str:
        """An integer operand on the device: a run-time value, or a compile-time one copied there."""
        tensor = self.integer_value(name)
        if tensor is not None:
            return tensor
        if name not in self.known:
            raise ModelError(f"hexagon backend: {node.op} {node.name} reads {name}, which is neither an integer "
                             "computed on the device nor known at compile time")
        values = np.asarray(self.known[name])
        if values.dtype == np.bool_:
            element_type, data = "bool", values.astype(np.uint8)
        elif np.issubdtype(values.dtype, np.integer):
            if values.size and (values.min() < np.iinfo(np.int32).min or values.max() > np.iinfo(np.int32).max):
                raise ModelError(f"hexagon backend: {node.op} {node.name}: constant {name} does not fit int32")
            element_type, data = "int32", values.astype(np.int32)
        else:
            raise ModelError(f"hexagon backend: {node.op} {node.name}: constant {name} of {values.dtype} is "
                             "read as an integer operand")
        key = f"{name}_{element_type}"
        if key not in self.out.shapes:
            self.out.constants[self.new_tensor(key, values.shape, element_type=element_type)] = data
        return key

    def take(self, node: Node) -> None:
        """Gather at run-time indices (the embedding lookup): rows of whatever the data holds,
        so a quantised table gives its quantised rows with the table's own parameters."""
        x, y = node.inputs[0], node.outputs[0]
        ids = self.integer_value(node.inputs[1])
        assert ids is not None
        if self.out.element_types[ids] != "int32":
            raise ModelError(f"hexagon backend: Gather {node.name}: the indices {node.inputs[1]} are not integers")
        source = self.in_layout(node.name, self.device_source(node, x), False)
        shape = self.out.shapes[source]
        if not shape:
            raise ModelError(f"hexagon backend: Gather {node.name} of a scalar")
        axis = int(node.attr("axis", 0)) % len(shape)  # type: ignore[arg-type]
        id_shape = self.out.shapes[ids]
        code = FIRST_FAIL_CODE + len(self.out.index_checks)
        self.out.index_checks[code] = node.name
        spec = Take(int(np.prod(shape[:axis])), int(shape[axis]), int(np.prod(shape[axis + 1:])),
                    int(np.prod(id_shape)), self.out.element_bytes(source), code)
        result = self.new_tensor(y, (*shape[:axis], *id_shape, *shape[axis + 1:]), self.out.qparams.get(source),
                                 is_float=source in self.out.floats,
                                 element_type=self.out.element_types.get(source))
        self.out.ops.append(IntOp(node.name, "take", spec, (source, ids), result))
        self.domain_of(x)[y] = result

    def on_integers(self, node: Node) -> None:
        """An elementwise operator reading a device integer (mask logic, Cast to bool, Where).
        A Where whose operands are real numbers (quantised or float constants) picks between
        quantised values (`select_quantised`)."""
        if node.op == "Where" and not all(self.is_integer(v) for v in node.inputs[1:3]):
            readers = self.consumers.get(node.outputs[0], [])
            if readers and all(r.op == "QuantizeLinear" for r in readers):
                self.select_quantised(node)
            else:  # the quantiser left it in float (a causal mask's −inf): select float32 values
                self.select_float(node)
            return
        tensors = [self.integer_operand(i, node) for i in node.inputs if i]
        types = [self.out.element_types[t] for t in tensors]
        shapes = [self.out.shapes[t] for t in tensors]
        attrs = dict(node.attr_dict)
        if node.op == "Cast":
            to = int(attrs.get("to", 0))  # type: ignore[arg-type]
            if to not in (9, 6, 7):  # bool, int32, int64
                raise ModelError(f"hexagon backend: Cast {node.name} of a device integer to ONNX type {to} "
                                 "(only to bool, int32 or int64 on the device)")
            output_type = "bool" if to == 9 else "int32"
        else:  # the registry's evaluator says what the operator makes of these operand types
            probe = [np.zeros(1, bool if t == "bool" else np.int32) for t in types]
            try:
                (sample,) = evaluate_node(node.op, node.attrs, probe)
            except ModelError as error:
                raise ModelError(f"hexagon backend: {node.op} {node.name} on device integers: {error}") from None
            kind = np.asarray(sample).dtype
            if kind != np.bool_ and not np.issubdtype(kind, np.integer):
                raise ModelError(f"hexagon backend: {node.op} {node.name} makes {kind} from device integers "
                                 "(only integer and bool results stay on the device)")
            output_type = "bool" if kind == np.bool_ else "int32"
        tensors = [self.in_layout(node.name, t, False) for t in tensors]
        out_shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
        spec = IntElementwise(node.op, tuple(sorted(attrs.items())), tuple(shapes), tuple(types), out_shape, output_type)
        y = self.new_tensor(node.outputs[0], out_shape, element_type=output_type)
        self.out.ops.append(IntOp(node.name, "int_eltwise", spec, tuple(tensors), y))
        self.ints[node.outputs[0]] = y

    def never_special(self, node: Node) -> None:
        """IsNaN / IsInf of a dequantised value: (q − z)·s with finite s is never NaN or
        infinite, so the result is known to be all false (BERT's SDPA guards its Softmax so)."""
        x = node.inputs[0]
        source = self.quantised[x]
        shape = self.out.shapes[self.device(source)] if source not in self.graph.constants else \
            np.shape(self.graph.constants[source])
        scale = self.dq_params[x].scale if x in self.dq_params else self.out.qparams[self.device(source)].scale
        if not np.isfinite(scale):
            raise ModelError(f"hexagon backend: {node.op} {node.name}: {x} is dequantised with scale {scale}")
        self.known[node.outputs[0]] = np.zeros(shape, bool)

    def is_nan(self, node: Node) -> None:
        """IsNaN of a float32 device tensor (a Softmax left in float by the quantiser): a bool tensor."""
        x = self.device_float[node.inputs[0]]
        shape = self.out.shapes[x]
        y = self.new_tensor(node.outputs[0], shape, element_type="bool")
        spec = IntElementwise("IsNaN", (), (shape,), ("float32",), shape, "bool")
        self.out.ops.append(IntOp(node.name, "int_eltwise", spec, (x,), y))
        self.ints[node.outputs[0]] = y

    def where_known(self, node: Node) -> None:
        """Where at a compile-time condition: one branch when the condition is uniform and
        that branch has the result's shape (nothing runs), else a select on the device."""
        condition = np.asarray(self.known[node.inputs[0]])
        branch = node.inputs[1] if condition.size and condition.reshape(-1)[0] else node.inputs[2]
        if self.is_integer(node.inputs[1]) and self.is_integer(node.inputs[2]):
            self.on_integers(node)
            return
        shapes = [np.shape(condition)] + [self.value_shape(v, node) for v in node.inputs[1:3]]
        uniform = condition.size and np.all(condition == condition.reshape(-1)[0])
        if not uniform or tuple(self.value_shape(branch, node)) != tuple(np.broadcast_shapes(*shapes)):
            self.select_quantised(node)
            return
        y = node.outputs[0]
        for table in (self.quantised, self.device_float, self.dq_params, self.dq_per_axis):
            if branch in table:
                table[y] = table[branch]  # type: ignore[index]
        if y not in self.quantised and y not in self.device_float:
            self.select_quantised(node)

    def value_shape(self, value: str, node: Node) -> tuple[int, ...]:
        """The ONNX shape of a real value the lowering knows (device, quantised constant or constant)."""
        if value in self.quantised:
            source = self.quantised[value]
            if source in self.graph.constants and self.alias.get(source, source) not in self.out.shapes:
                return tuple(np.shape(self.graph.constants[source]))
            return self.out.shapes[self.device(source)]
        if value in self.device_float:
            return self.out.shapes[self.device_float[value]]
        if value in self.graph.constants:
            return tuple(np.shape(self.graph.constants[value]))
        raise ModelError(f"hexagon backend: {node.op} {node.name} reads {value}, which is not computed on the device")

    def select_quantised(self, node: Node) -> None:
        """Where(c, a, b) read only by QuantizeLinear(s, z): Q(where(c, a, b)) = where(c, Q(a), Q(b))
        element by element, so each of a, b is quantised (a constant, as QuantizeLinear does)
        or requantised (a quantised tensor) to (s, z) and the kernel picks bytes."""
        y = node.outputs[0]
        readers = self.consumers.get(y, [])
        if not readers or any(r.op != "QuantizeLinear" for r in readers) or y in {v.name for v in self.graph.outputs}:
            raise ModelError(f"hexagon backend: Where {node.name}: its real-valued result must be read only by "
                             "QuantizeLinear to run on the integers")
        params = {(q.scale, q.zero_point, q.signed) for q in (_qparams(self.graph, r) for r in readers)}
        if len(params) != 1:
            raise ModelError(f"hexagon backend: Where {node.name} is quantised with different parameters")
        yq = QParams(*params.pop())
        condition = self.integer_operand(node.inputs[0], node)
        if self.out.element_types[condition] != "bool":
            raise ModelError(f"hexagon backend: Where {node.name}: the condition is not bool")
        picks = [self.quantised_to(value, yq, node) for value in node.inputs[1:3]]
        tensors = [self.in_layout(node.name, t, False) for t in (condition, *picks)]
        shapes = tuple(self.out.shapes[t] for t in tensors)
        out_shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
        spec = IntElementwise("Where", (), shapes, ("bool", "uint8", "uint8"), out_shape, "uint8")
        result = self.new_tensor(y, out_shape, yq)
        self.out.ops.append(IntOp(node.name, "int_eltwise", spec, tuple(tensors), result))
        self.quantised[y] = result

    def select_float(self, node: Node) -> None:
        """Where(c, a, b) on real values the quantiser left in float: picks float32 values."""
        condition = self.integer_operand(node.inputs[0], node)
        if self.out.element_types[condition] != "bool":
            raise ModelError(f"hexagon backend: Where {node.name}: the condition is not bool")
        tensors = [self.in_layout(node.name, condition, False)] + [self.float_input(node.name, v)
                                                                   for v in node.inputs[1:3]]
        shapes = tuple(self.out.shapes[t] for t in tensors)
        out_shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
        spec = IntElementwise("Where", (), shapes, ("bool", "float32", "float32"), out_shape, "float32")
        y = self.new_tensor(node.outputs[0], out_shape, is_float=True)
        self.out.ops.append(IntOp(node.name, "int_eltwise", spec, tuple(tensors), y))
        self.device_float[node.outputs[0]] = y

    def quantised_to(self, value: str, q: QParams, node: Node) -> str:
        """``value`` (a real-valued ONNX value) as a uint8 device tensor quantised with ``q``."""
        if value in self.quantised:
            return self.requantize(node.name, self.in_layout(node.name, self.quantised_device(value, node.name), False),
                                   q, f"{value}_rq")
        if value in self.device_float:
            source = self.device_float[value]
            shape = self.out.shapes[source]
            y = self.new_tensor(f"{value}_q", shape, q)
            self.out.ops.append(IntOp(node.name, "quant", Quantize(int(np.prod(shape)), q.zero_point, q.scale),
                                      (source,), y))
            return y
        if value in self.graph.constants:
            values = np.asarray(self.graph.constants[value], np.float32)
            if np.isnan(values).any():
                raise ModelError(f"hexagon backend: {node.op} {node.name}: constant {value} holds NaN")
            with np.errstate(over="ignore"):  # QuantizeLinear saturates; −inf and float32's lowest give 0
                scaled = np.rint(values / np.float32(q.scale))
            data = np.clip(scaled.astype(np.float64) + q.zero_point, 0, 255).astype(np.uint8)
            key = f"{value}_q{q.scale:.9g}_{q.zero_point}"
            if key not in self.out.shapes:
                self.out.constants[self.new_tensor(key, values.shape, q)] = data
            return key
        raise ModelError(f"hexagon backend: {node.op} {node.name} reads {value}, which is not computed on the device")

    def move(self, node: Node) -> None:
        """A data-moving operator of a device tensor (Reshape, Transpose, Split, Expand,
        Slice, Gather at constant indices, …; GPT-2's fused QKV split, LLaMA's rotate_half
        and key/value repeat): the registry's evaluation of the operator on the tensor's
        element offsets is each output's gather table, exact. Its other operands must be
        known at compile time."""
        x = node.inputs[0]
        source = self.device_source(node, x)
        for value in node.inputs[1:]:
            if value and value not in self.known:
                raise ModelError(f"hexagon backend: {node.op} {node.name}: {value} must be known at compile time")
        operands = [self.physical_index(source)] + [np.asarray(self.known[i]) if i else None for i in node.inputs[1:]]
        try:
            tables = evaluate_node(node.op, node.attrs, operands, len(node.outputs))
        except ModelError as error:
            raise ModelError(f"hexagon backend: {node.op} {node.name} of a {self.out.shapes[source]} tensor: "
                             f"{error}") from None
        for y, table in zip(node.outputs, tables, strict=False):
            if y:
                shape = tuple(int(d) for d in table.shape)
                self.domain_of(x)[y] = self.gather(node.name, source, np.asarray(table), shape, False)

    def pad(self, node: Node) -> None:
        """Pad of a quantised tensor (DQ → Pad → Q, or Pad on the integers): a table copy with
        the pad value quantised exactly with the input's parameters; pads (and axes) must
        be known at compile time (a Shape chain of static shapes counts)."""
        x, y = node.inputs[0], node.outputs[0]
        source = self.device_source(node, x)
        q = self.out.qparams[source]
        operands = [node.inputs[i] if len(node.inputs) > i else "" for i in (1, 2, 3)]
        for value in (operands[0], operands[2]):
            if value and value not in self.known:
                raise ModelError(f"hexagon backend: Pad {node.name}: {value} must be known at compile time")
        mode = str(node.attr("mode", "constant"))
        fill = q.zero_point
        if mode == "constant" and operands[1]:
            value = self.constant_float(operands[1], node)
            fill = int(np.rint(value / q.scale)) + q.zero_point
            if not 0 <= fill <= 255 or np.float32((fill - q.zero_point) * q.scale) != np.float32(value):
                raise ModelError(f"hexagon backend: Pad {node.name}: the pad value {value} is not exactly "
                                 "representable in its input's quantisation")
        # the registry's evaluation of this Pad on the element offsets, -1 where it fills, is the table
        operands = [self.physical_index(source), *(np.asarray(self.known[v]) if v and k != 1 else None
                                                     for k, v in enumerate(operands))]
        try:
            (table,) = evaluate_node("Pad", {**node.attr_dict, "value": -1}, operands)
        except ModelError as error:
            raise ModelError(f"hexagon backend: Pad {node.name} of a {self.out.shapes[source]} tensor: {error}") from None
        out_shape = tuple(int(d) for d in table.shape)
        result = self.new_tensor(f"{y}_pad", out_shape, q)
        self.out.ops.append(IntOp(node.name, "pad", QPad(table.reshape(-1).astype(np.int32), fill), (source,), result))
        (self.alias if x in self.alias else self.quantised)[y] = result

    def constant_float(self, value: str, node: Node) -> float:
        """The one float value of a compile-time scalar (a constant, or a quantised constant's DequantizeLinear)."""
        if value in self.quantised and value in self.dq_params:
            q = self.dq_params[value]
            data = _const(self.graph, self.quantised[value]).astype(np.int64) + (128 if q.signed else 0)
            values = (data - q.zero_point).astype(np.float32) * np.float32(q.scale)
        elif value in self.graph.constants:
            values = np.asarray(self.graph.constants[value], np.float32)
        else:
            raise ModelError(f"hexagon backend: {node.op} {node.name}: {value} must be a constant")
        if values.size != 1:
            raise ModelError(f"hexagon backend: {node.op} {node.name}: {value} must be one value")
        return float(values.reshape(-1)[0])

    def compute(self, node: Node) -> None:
        try:
            self.integer_op(node)
        except _NoKernel as reason:
            if not has_float_fallback(node.op, len(node.inputs)):
                if not self.lookup(node):
                    raise ModelError(f"hexagon backend: {node.op} {node.name}: {reason}") from None
                return
            self.float_op(node)

    def lookup(self, node: Node) -> bool:
        """A one-input elementwise operator (other operands compile-time scalars) with no float
        fallback, from a quantised tensor to values read only by QuantizeLinear: a 256-entry table (`index_ops.Lookup`), each
        entry DQ → the registry's evaluation of the operator → Q. False where that does not apply."""
        info = ops.current().get(node.op)
        inputs = [i for i in node.inputs if i]
        y_name = node.outputs[0]
        readers = self.consumers.get(y_name, [])
        float_output = not readers and y_name in {v.name for v in self.graph.outputs}
        # operands after the first: compile-time scalars (Pow's exponent)
        scalars = [np.asarray(self.graph.constants[i]) for i in inputs[1:] if i in self.graph.constants]
        if info is None or not info.elementwise or not inputs or inputs[0] not in self.quantised \
                or len(scalars) != len(inputs) - 1 or any(v.size != 1 for v in scalars) \
                or not (float_output or readers) or any(r.op != "QuantizeLinear" for r in readers):
            return False
        x = self.in_layout(node.name, self.quantised_device(inputs[0], node.name), False)
        xq = self.out.qparams[x]
        real = ((np.arange(256) - xq.zero_point).astype(np.float32) * np.float32(xq.scale)).astype(np.float32)
        (values,) = evaluate_node(node.op, node.attrs, [real, *(v.reshape(()) for v in scalars)])
        values = np.asarray(values, np.float32)
        if np.isnan(values).any():
            raise ModelError(f"hexagon backend: {node.op} {node.name} is NaN at a quantised input value")
        shape = self.out.shapes[x]
        if float_output:  # a graph output the quantiser left in float (BERT's pooler Tanh): float entries
            y = self.new_tensor(y_name, shape, is_float=True)
            self.out.ops.append(IntOp(node.name, "lookup", Lookup(int(np.prod(shape)), values), (x,), y))
            self.device_float[y_name] = y
            return True
        params = {(q.scale, q.zero_point, q.signed) for q in (_qparams(self.graph, r) for r in readers)}
        if len(params) != 1:
            return False
        yq = QParams(*params.pop())
        with np.errstate(over="ignore"):
            scaled = np.rint(values / np.float32(yq.scale)).astype(np.float64)
        table = np.clip(scaled + yq.zero_point, 0, 255).astype(np.uint8)
        y = self.new_tensor(node.outputs[0], shape, yq)
        self.out.ops.append(IntOp(node.name, "lookup", Lookup(int(np.prod(shape)), table), (x,), y))
        self.quantised[node.outputs[0]] = y
        return True

    def integer_op(self, node: Node) -> None:
        """A float operator between DequantizeLinear and QuantizeLinear: the rules did not
        turn it into an integer operator, so it has no integer kernel here."""
        if node.op in _RULE_LOWERED_OPS:
            raise _NoKernel(f"a quantised {node.op} reaches the backend as rules/quant.dnnr's integer operator "
                            "(compile with `dnnr compile --target hexagon`, whose schedule runs them); this one "
                            "did not match a rule")
        raise _NoKernel(f"no integer kernel for {node.op}")

    def lower_on_integers(self, node: Node) -> None:
        """An operator the rules wrote over integer tensors, keeping their quantisation:
        MaxPool (qdq-maxpool), Concat of tensors quantised alike (qdq-concat-same), and
        Max(x, zero point) (qdq-relu: Relu on the integers, a clip at the zero point)."""
        x = self.alias[node.inputs[0]]
        xq = self.out.qparams[x]
        y = node.outputs[0]
        if node.op == "Max":
            if len(node.inputs) != 2 or node.inputs[1] not in self.graph.constants:
                raise ModelError(f"hexagon backend: Max {node.name}: only Max(integer tensor, constant) lowers")
            bound = _const(self.graph, node.inputs[1])
            if bound.size != 1 or (bound.dtype == np.int8) != xq.signed:
                raise ModelError(f"hexagon backend: Max {node.name}: the bound must be one value of the input's type")
            lo = int(bound.reshape(-1)[0]) + (128 if xq.signed else 0)
            shape = self.out.shapes[x]
            self.alias[y] = self.new_tensor(y, shape, xq, nhwc=x in self.out.nhwc)
            self.out.ops.append(IntOp(node.name, "clip", QClip(int(np.prod(shape)), lo, 255), (x,), self.alias[y]))
            return
        inputs = [self.integer_tensor(i, xq, f"{node.op} {node.name}") for i in node.inputs if i]
        if node.op == "Concat":  # qdq-concat3/4 requantise each input first: the concat kernel does that itself
            inputs = [self.unrequantised(value, tensor) for value, tensor in zip(node.inputs, inputs, strict=True)]
        as_float_op = Node(node.op, tuple(inputs), node.outputs, node.attrs, node.name)
        try:
            self.alias[y] = _lower_op(self, as_float_op, inputs, y, xq)
        except _NoKernel as reason:
            raise ModelError(f"hexagon backend: {node.op} {node.name} on integers: {reason}") from None

    def unrequantised(self, value: str, tensor: str) -> str:
        """``tensor``'s source when ``tensor`` is a requantisation (`requantize`'s one-input
        concat op) read only through ``value``: the op is dropped and its reader requantises."""
        producer = next((k for k, op in enumerate(self.out.ops) if op.output == tensor), None)
        if producer is None or self.out.ops[producer].kind != "concat" or len(self.out.ops[producer].inputs) != 1 \
                or len(self.consumers.get(value, [])) != 1 or value in {v.name for v in self.graph.outputs}:
            return tensor
        return self.out.ops.pop(producer).inputs[0]

    def integer_tensor(self, name: str, declared: QParams, where: str) -> str:
        """The device tensor (or quantised constant) an integer operator reads as ``name``,
        checked against the quantisation parameters the operator declares for it."""
        if name in self.graph.constants:  # one device copy per quantisation it is read with
            key = f"{name}_q{declared.scale:.9g}_{declared.zero_point}"
            if key not in self.out.shapes:
                data = _const(self.graph, name)
                device_data = (data.astype(np.int16) + 128).astype(np.uint8) if declared.signed else data.astype(np.uint8)
                self.out.constants[self.new_tensor(key, data.shape, declared)] = device_data
            return key
        graph_input = next((v for v in self.graph.inputs if v.name == name), None)
        if graph_input is not None and name not in self.alias:  # an integer graph input
            shape = tuple(int(d) for d in graph_input.type.shape or ())
            self.alias[name] = self.out.inputs[name] = self.new_tensor(name, shape, declared, nhwc=True)
            self.out.integer_io.add(name)
        source = self.alias.get(name, name)
        if source not in self.out.qparams:
            raise ModelError(f"hexagon backend: {where} reads {name}, which is not computed on the device")
        actual = self.out.qparams[source]
        if (declared.scale, declared.zero_point) != (actual.scale, actual.zero_point):
            raise ModelError(f"hexagon backend: {where} reads {name} with other quantisation "
                             "parameters than it was written with")
        return source

    def integer_node(self, node: Node) -> None:
        """An operator on quantised tensors: ONNX QLinearConv/QLinearMatMul, or the integer
        operators `rules/quant.dnnr` rewrites DQ→op→Q into (QConvInt, QMatMulInt, QAddInt,
        QMulInt, Requantize). Each lowers as the float operator it stands for."""
        float_op, operands, weights, bias, y = _INTEGER_SIGNATURES[node.op]
        inputs = list(node.inputs) + [""] * 10
        yq = _qparams_of(self.graph, inputs[y[0]], inputs[y[1]], node.name)
        tensors = [self.integer_tensor(inputs[i], _qparams_of(self.graph, inputs[s], inputs[z], node.name),
                                       f"{node.op} {node.name}")
                   for i, s, z in operands]
        if node.op == "Requantize":
            self.alias[node.outputs[0]] = self.requantize(node.name, tensors[0], yq, node.outputs[0])
            return
        weight_quant = None
        if float_op == "MatMul" and weights is not None and inputs[weights[0]] not in self.graph.constants:
            w, w_scale, w_zero = (inputs[i] for i in weights[:3])  # a MatMul of two activations
            b = self.integer_tensor(w, _qparams_of(self.graph, w_scale, w_zero, node.name), f"{node.op} {node.name}")
            self.alias[node.outputs[0]] = _lower_matmul_act(self, node.name, tensors[0], b, node.outputs[0], yq)
            return
        if weights is not None:
            w, w_scale, w_zero = (inputs[i] if i is not None else "" for i in weights[:3])
            if w not in self.graph.constants:
                raise ModelError(f"hexagon backend: {node.op} {node.name}: the weights must be a constant")
            tensors.append(w)
            weight_quant = (_const(self.graph, w_scale), _const(self.graph, w_zero) if w_zero else None)
        if weights is not None:
            tensors.append(inputs[bias[0]] if bias is not None else "")
        bias_quant = None
        if bias is not None and bias[1] is not None:  # a bias with its own scale and zero point
            b_scale, b_zero = inputs[bias[1]], inputs[bias[2]] if bias[2] is not None else ""
            bias_quant = (_const(self.graph, b_scale), _const(self.graph, b_zero) if b_zero else None)
        as_float_op = Node(float_op, tuple(tensors), node.outputs, node.attrs, node.name)
        try:
            y_tensor = _lower_op(self, as_float_op, tensors, node.outputs[0], yq, weight_quant, bias_quant)
        except _NoKernel as reason:
            raise ModelError(f"hexagon backend: {node.op} {node.name}: {reason}") from None
        self.alias[node.outputs[0]] = y_tensor

    def integer_accumulation(self, node: Node) -> None:
        """MatMulInteger / ConvInteger → Cast(float) → Mul(constant scale) → QuantizeLinear, as
        written by hand or by a static version of quantize_dynamic: the same integer GEMM
        with the requantisation scale ``c / s_y`` (int32 tensors do not live on the device)."""
        conv = node.op == "ConvInteger"
        pattern = f"{node.op} {node.name}: only {node.op} → Cast(to float) → Mul(constant) → QuantizeLinear lowers"
        chain, value = [], node.outputs[0]
        for op in ("Cast", "Mul"):
            users = self.consumers.get(value, [])
            if len(users) != 1 or users[0].op != op:
                raise ModelError(f"hexagon backend: {pattern}")
            chain.append(users[0])
            value = users[0].outputs[0]
        cast, mul = chain
        scale_name = next((i for i in mul.inputs if i != cast.outputs[0]), "")
        if int(cast.attr("to", 0)) != 1 or scale_name not in self.graph.constants or value not in self.q_of:
            raise ModelError(f"hexagon backend: {pattern}")
        a, w = node.inputs[0], node.inputs[1]
        a_zero, w_zero = (node.inputs[i] if len(node.inputs) > i else "" for i in (2, 3))
        source = self.device(a) if self.alias.get(a, a) in self.out.shapes else ""
        if not source or w not in self.graph.constants:
            raise ModelError(f"hexagon backend: {node.op} {node.name}: A must be quantised on the device, B constant")
        aq = self.out.qparams[source]
        declared_zero = _const(self.graph, a_zero) if a_zero else np.zeros((), np.uint8)
        if int(declared_zero.reshape(-1)[0]) + (128 if declared_zero.dtype == np.int8 else 0) != aq.zero_point:
            raise ModelError(f"hexagon backend: {node.op} {node.name}: a_zero_point differs from its input's")
        scale = _const(self.graph, scale_name).astype(np.float64).reshape(-1)
        # The requantisation scale is c / s_y = s_a · (c / s_a) / s_y: c / s_a plays the weights' scale.
        weight_quant = (scale / aq.scale, _const(self.graph, w_zero) if w_zero else None)
        as_float_op = Node("Conv" if conv else "MatMul", (source, w, ""), node.outputs, node.attrs, node.name)
        yq = _qparams(self.graph, self.q_of[value])
        self.quantised[value] = _lower_op(self, as_float_op, [source, w, ""], value, yq, weight_quant)
        self.consumed.update((cast.name, mul.name))

    def requantize(self, node_name: str, source: str, q: QParams, y_name: str) -> str:
        """``source`` requantised to ``q`` (the same tensor when the parameters agree)."""
        sq = self.out.qparams[source]
        if (sq.scale, sq.zero_point) == (q.scale, q.zero_point):
            return source
        shape = self.out.shapes[source]
        ch = shape[-1] if source not in self.out.nhwc else shape[1]
        spec = QConcatRq(int(np.prod(shape)) // max(ch, 1), (ch,), (sq.zero_point,),
                         (round(sq.scale / q.scale * 2**ELEMENTWISE_SHIFT),), q.zero_point)
        y = self.new_tensor(y_name, shape, q, nhwc=source in self.out.nhwc)
        self.out.ops.append(IntOp(node_name, "concat", spec, (source,), y))
        return y

    def float_op(self, node: Node) -> None:
        attrs = dict(node.attr_dict)
        inputs = [i for i in node.inputs if i]
        if node.op == "Pow":
            exponent = _const(self.graph, inputs[1]) if inputs[1] in self.graph.constants else None
            if exponent is None or exponent.size != 1:
                raise ModelError(f"hexagon backend: Pow {node.name} needs a constant scalar exponent")
            attrs["exponent"] = float(exponent.reshape(-1)[0])
        if node.op == "ReduceMean" and len(inputs) > 1:
            attrs["axes"] = tuple(int(a) for a in _const(self.graph, inputs[1]).reshape(-1))
            inputs = inputs[:1]
        if any(o for o in node.outputs[1:] if self.consumers.get(o)):
            raise ModelError(f"hexagon backend: {node.op} {node.name}: only the first output is supported")
        shapes = [self.value_shape(i, node) for i in inputs]
        outputs, _ = infer_node(node.op, attrs, [TensorType("float32", s) for s in shapes],
                                num_outputs=len(node.outputs))  # the compiler's one shape rule
        shape = outputs[0].shape
        spec = FloatOp(node.op, tuple(shapes), tuple(int(d) for d in shape), tuple(sorted(attrs.items())))
        try:  # the fallback may lack this form (Pow with exponent 3, GPT-2's GELU): a table then
            float_op_c(spec, "probe")
        except ModelError:  # or, where no table applies, the fallback's error when the program is written
            if self.lookup(node):
                return
        tensors = [self.float_input(node.name, i) for i in inputs]
        y = self.new_tensor(node.outputs[0], shape, is_float=True)
        self.out.ops.append(IntOp(node.name, "float", spec, tuple(tensors), y))
        self.device_float[node.outputs[0]] = y


def lower_qdq(graph: Graph) -> Lowered:
    return _Lowering(before_lowering(graph)).run()


def _lower_op(low: _Lowering, node: Node, inputs: list[str], y_name: str, yq: QParams,
              weight_quant: tuple[np.ndarray, np.ndarray | None] | None = None,
              bias_quant: tuple[np.ndarray, np.ndarray | None] | None = None) -> str:
    """Lower one operator whose output is quantised with ``yq``; returns its device tensor.
    ``weight_quant`` is the weights' scale and zero point (QLinear operators); otherwise
    they are those of the DequantizeLinear reading the weights, and an int32 bias too.
    ``bias_quant`` is the int32 bias's scale and zero point where the operator carries
    them (QConvInt)."""
    graph, out, op = low.graph, low.out, node.op
    if op in ("Conv", "MatMul", "Gemm"):
        if str(node.attr("auto_pad", "NOTSET")) != "NOTSET":
            raise ModelError(f"hexagon backend: {node.name}: auto_pad={node.attr('auto_pad')} is not supported "
                             "(explicit pads only)")
        if inputs[1] not in graph.constants:
            raise _NoKernel("the right operand is not a constant (a MatMul of two activations lowers as "
                            "QMatMulInt, rules/quant.dnnr's qdq-matmul)")
        w_q = _const(graph, inputs[1])
        if weight_quant is None:
            w_dq = next(n for n in graph.nodes if n.op == "DequantizeLinear" and n.inputs[0] == inputs[1])
            zero = _const(graph, w_dq.inputs[2]) if len(w_dq.inputs) > 2 and w_dq.inputs[2] else None
            weight_quant = (_const(graph, w_dq.inputs[1]), zero)
        w_scale = np.asarray(weight_quant[0]).astype(np.float64).reshape(-1)
        if weight_quant[1] is not None and np.any(np.asarray(weight_quant[1]) != 0):
            raise ModelError(f"hexagon backend: {node.name}: asymmetric weights are not supported")
        if w_q.dtype != np.int8:
            raise ModelError(f"hexagon backend: {node.name}: weights must be int8")
        if op == "MatMul" and w_q.ndim != 2:
            raise _NoKernel("the MatMul weight is not a matrix")
        x = low.device(inputs[0])
        xq = out.qparams[x]
        if op == "Conv":
            x = low.in_layout(node.name, x, True)
            xs = out.shapes[x]
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
            y_shape: tuple[int, ...] = (b, cout, oh, ow)
            if group == 1:
                weights = w_q.transpose(2, 3, 1, 0).reshape(kh * kw * c, cout).astype(np.int8)
            elif group == c == cout:
                weights = w_q.reshape(cout, kh * kw).T.astype(np.int8)
            else:
                raise ModelError(f"hexagon backend: grouped convolution {node.name} (group={group}) is not supported")
        else:
            x = low.in_layout(node.name, x, False)
            xs = out.shapes[x]
            if op == "Gemm":
                if node.attr("transA", 0) or float(node.attr("alpha", 1.0)) != 1.0 or float(node.attr("beta", 1.0)) != 1.0:
                    raise ModelError(f"hexagon backend: Gemm {node.name} with transA/alpha/beta is not supported")
                w_q = w_q.T if node.attr("transB", 0) else w_q
                c_size = _const(graph, inputs[2]).size if len(inputs) > 2 and inputs[2] else 1
                if c_size not in (1, w_q.shape[1]):  # the kernels add one bias per column
                    raise ModelError(f"hexagon backend: Gemm {node.name}: C has {c_size} elements, not one per column")
            rows = int(np.prod(xs[:-1]))
            geometry = ConvGeometry(1, rows, 1, int(xs[-1]), (1, 1), out_hw=(rows, 1))
            weights = w_q.astype(np.int8)
            cout = int(weights.shape[1])
            y_shape = (*xs[:-1], cout)
            group = 1
        bias = _bias(graph, inputs[2] if len(inputs) > 2 else "", xq.scale * w_scale, cout, node, bias_quant)
        col_sums = weights.astype(np.int64).sum(axis=0)
        total_bias = bias - xq.zero_point * col_sums
        rq = requant_from_scales(xq.scale * w_scale / yq.scale, yq.zero_point)
        y = low.new_tensor(y_name, y_shape, yq, nhwc=op == "Conv")
        if op == "Conv" and group != 1:
            spec: object = QDepthwise(geometry, weights, total_bias.astype(np.int32), rq, xq.zero_point)
            kind = "depthwise"
        else:
            spec = QGemm(geometry, weights, total_bias.astype(np.int32), rq, xq.zero_point)
            kind = "gemm"
        out.ops.append(IntOp(node.name, kind, spec, (x,), y))
        return y
    if op in ("MaxPool", "AveragePool", "GlobalAveragePool"):
        x = low.in_layout(node.name, low.device(inputs[0]), True)
        xq, xs = out.qparams[x], out.shapes[x]
        b, c, h, w = xs
        if op == "GlobalAveragePool":
            kh, kw, sh, sw, pads = h, w, 1, 1, (0, 0, 0, 0)
        else:
            kh, kw = (int(v) for v in node.attr("kernel_shape"))
            sh, sw = (int(v) for v in node.attr("strides", (1, 1)))
            pads = tuple(int(v) for v in node.attr("pads", (0, 0, 0, 0)))
        if op != "GlobalAveragePool" and any(int(v) != 1 for v in node.attr("dilations", (1, 1))):
            raise ModelError(f"hexagon backend: dilated {op} {node.name} is not supported")
        oh, ow = (h + pads[0] + pads[2] - kh) // sh + 1, (w + pads[1] + pads[3] - kw) // sw + 1
        if node.attr("ceil_mode", 0) and ((h + pads[0] + pads[2] - kh) % sh or (w + pads[1] + pads[3] - kw) % sw):
            # ceil_mode adds partial windows, clipped to the input (onnxruntime and torch count
            # only the clipped window's elements). One unpadded window at least as large as the
            # input is the input itself, a global pool (HF EfficientNet's AvgPool2d(1280,
            # ceil_mode=True) over a small map); other partial windows are refused.
            if any(pads) or kh < h or kw < w or -(-(h - kh) // sh) + 1 != 1 or -(-(w - kw) // sw) + 1 != 1:
                raise ModelError(f"hexagon backend: {op} {node.name} with ceil_mode adding a partial window "
                                 "is not supported")
            kh, kw, sh, sw, oh, ow = h, w, 1, 1, 1, 1
        geometry = ConvGeometry(b, h, w, c, (kh, kw), (sh, sw), (pads[0], pads[1]), (1, 1), (oh, ow))
        if op == "MaxPool":
            if (xq.scale, xq.zero_point) != (yq.scale, yq.zero_point):
                raise ModelError(f"hexagon backend: MaxPool {node.name} changes quantisation parameters")
            spec = QPool("MaxPool", geometry)
        else:
            if any(pads):
                raise ModelError(f"hexagon backend: padded AveragePool {node.name} is not supported")
            rq = requant_from_scales(np.array([xq.scale / (yq.scale * kh * kw)]), yq.zero_point)
            spec = QPool("AveragePool", geometry, rq, xq.zero_point)
        y = low.new_tensor(y_name, (b, c, oh, ow), yq, nhwc=True)
        out.ops.append(IntOp(node.name, "pool", spec, (x,), y))
        return y
    if op == "Concat":
        axis = int(node.attr("axis", 1))
        xs = [low.device(i) for i in inputs]
        ranks = {len(out.shapes[i]) for i in xs}
        if len(ranks) != 1 or not -min(ranks) <= axis < min(ranks):
            raise ModelError(f"hexagon backend: Concat {node.name}: axis {axis} of inputs of ranks {sorted(ranks)}")
        if axis % 4 != 1 or ranks != {4}:  # any other axis: row-major, each input a [outer, inner] block
            return _concat_row_major(low, node.name, xs, axis % ranks.pop(), y_name, yq)
        xs = [low.in_layout(node.name, i, True) for i in xs]
        shapes = [out.shapes[i] for i in xs]
        b, _, h, w = shapes[0]
        chans = tuple(int(s[1]) for s in shapes)
        mults = tuple(round(out.qparams[i].scale / yq.scale * 2**ELEMENTWISE_SHIFT) for i in xs)
        spec = QConcatRq(b * h * w, chans, tuple(out.qparams[i].zero_point for i in xs), mults, yq.zero_point)
        y = low.new_tensor(y_name, (b, sum(chans), h, w), yq, nhwc=True)
        out.ops.append(IntOp(node.name, "concat", spec, tuple(xs), y))
        return y
    if op in ("Add", "Mul"):
        a, bb = low.device(inputs[0]), low.device(inputs[1])
        aq, bq = out.qparams[a], out.qparams[bb]
        y_shape = tuple(np.broadcast_shapes(out.shapes[a], out.shapes[bb]))
        rank = len(y_shape)
        nhwc = rank == 4 and (a in out.nhwc or bb in out.nhwc)

        def operand(t: str) -> str:
            padded = (1,) * (rank - len(out.shapes[t])) + tuple(out.shapes[t])
            return low.in_layout(node.name, t, nhwc, padded)

        a, bb = operand(a), operand(bb)
        view = _nhwc if nhwc else (lambda s: s)  # noqa: E731
        if op == "Add":
            mults = (round(aq.scale / yq.scale * 2**ELEMENTWISE_SHIFT), round(bq.scale / yq.scale * 2**ELEMENTWISE_SHIFT))
        else:
            mults = (round(aq.scale * bq.scale / yq.scale * 2**ELEMENTWISE_SHIFT),)
        spec = QBinary(op, view(out.shapes[a]), view(out.shapes[bb]), view(y_shape), aq.zero_point, bq.zero_point,
                       mults, yq.zero_point)
        y = low.new_tensor(y_name, y_shape, yq, nhwc=nhwc)
        out.ops.append(IntOp(node.name, "binary", spec, (a, bb), y))
        return y
    if op == "Clip":  # QClipInt: Q is monotone, so Q(clip(v, lo, hi)) = clip(Q(v), Q(lo), Q(hi))
        x = low.device(inputs[0])
        xq, xs = out.qparams[x], out.shapes[x]
        lo_real, hi_real = float(node.attr("min", -np.inf)), float(node.attr("max", np.inf))  # type: ignore[arg-type]
        if (xq.scale, xq.zero_point) != (yq.scale, yq.zero_point) or xq.scale <= 0:
            raise ModelError(f"hexagon backend: {op} {node.name} changes quantisation parameters")
        lo = int(np.clip(np.round(lo_real / xq.scale) + xq.zero_point, 0, 255)) if np.isfinite(lo_real) else 0
        hi = int(np.clip(np.round(hi_real / xq.scale) + xq.zero_point, 0, 255)) if np.isfinite(hi_real) else 255
        y = low.new_tensor(y_name, xs, yq, nhwc=x in out.nhwc)
        out.ops.append(IntOp(node.name, "clip", QClip(int(np.prod(xs)), lo, hi), (x,), y))
        return y
    if op == "Softmax":
        x = low.device(inputs[0])
        rank = len(out.shapes[x])
        if int(node.attr("axis", -1)) % rank != rank - 1:
            raise _NoKernel("the integer Softmax runs over the last axis only")
        x = low.in_layout(node.name, x, False)
        xq, xs = out.qparams[x], out.shapes[x]
        length = int(xs[-1])
        table = tuple(float(np.float32(np.exp(-d * xq.scale))) for d in range(256))
        spec = QSoftmax(int(np.prod(xs)) // length, length, table, 1.0 / yq.scale, yq.zero_point)
        y = low.new_tensor(y_name, xs, yq)
        out.ops.append(IntOp(node.name, "softmax", spec, (x,), y))
        return y
    raise _NoKernel(f"no integer kernel for {op}")


def _concat_row_major(low: _Lowering, name: str, xs: list[str], axis: int, y_name: str, yq: QParams) -> str:
    """Concat along ``axis`` of row-major tensors (ViT's class token before the patches): the
    channel-concat kernel with rows = the product of the dims before ``axis`` and each
    input's row its dims from ``axis`` on."""
    out = low.out
    xs = [low.in_layout(name, i, False) for i in xs]
    shapes = [out.shapes[i] for i in xs]
    if any(s[:axis] != shapes[0][:axis] or s[axis + 1:] != shapes[0][axis + 1:] for s in shapes):
        raise ModelError(f"hexagon backend: Concat {name}: shapes {shapes} differ off axis {axis}")
    rows = int(np.prod(shapes[0][:axis]))
    chunks = tuple(int(np.prod(s[axis:])) for s in shapes)
    mults = tuple(round(out.qparams[i].scale / yq.scale * 2**ELEMENTWISE_SHIFT) for i in xs)
    spec = QConcatRq(rows, chunks, tuple(out.qparams[i].zero_point for i in xs), mults, yq.zero_point)
    y_shape = (*shapes[0][:axis], sum(int(s[axis]) for s in shapes), *shapes[0][axis + 1:])
    y = low.new_tensor(y_name, y_shape, yq)
    out.ops.append(IntOp(name, "concat", spec, tuple(xs), y))
    return y


def _lower_matmul_act(low: _Lowering, name: str, a: str, b: str, y_name: str, yq: QParams) -> str:
    """MatMul of two quantised device tensors (ONNX broadcasting of the batch dims): one
    integer GEMM per pair of matrices with B packed on the device (`kernels.QMatMulAct`)."""
    out = low.out
    sa, sb = out.shapes[a], out.shapes[b]
    if len(sa) < 2 or len(sb) < 2:
        raise ModelError(f"hexagon backend: MatMul {name} of a vector is not supported")
    m, k, n = int(sa[-2]), int(sa[-1]), int(sb[-1])
    if int(sb[-2]) != k:
        raise ModelError(f"hexagon backend: MatMul {name}: inner dimensions {sa} × {sb} differ")
    if k > MATMUL_ACT_MAX_K:
        raise ModelError(f"hexagon backend: MatMul {name}: K = {k} > {MATMUL_ACT_MAX_K} would overflow int32")
    batch_shape = tuple(int(d) for d in np.broadcast_shapes(sa[:-2], sb[:-2]))

    def operand(t: str, rows: int, cols: int) -> str:
        """``t`` row-major as [*batch_shape, rows, cols] (broadcast by a gather where needed)."""
        shape = out.shapes[t]
        padded = (1,) * (len(batch_shape) + 2 - len(shape)) + tuple(shape)
        t = low.in_layout(name, t, False, padded)
        full = (*batch_shape, rows, cols)
        if padded != full:
            table = np.broadcast_to(np.arange(int(np.prod(padded))).reshape(padded), full)
            t = low.gather(name, t, table, full, False)
        return t

    a, b = operand(a, m, k), operand(b, k, n)
    aq, bq = out.qparams[a], out.qparams[b]
    rq = requant_from_scales(np.array([aq.scale * bq.scale / yq.scale]), yq.zero_point)
    spec = QMatMulAct(int(np.prod(batch_shape)), m, k, n, aq.zero_point, bq.zero_point, rq)
    y = low.new_tensor(y_name, (*batch_shape, m, n), yq)
    out.ops.append(IntOp(name, "matmul_act", spec, (a, b), y))
    return y


def _bias(graph: Graph, name: str, acc_scale: np.ndarray, channels: int, node: Node,
          bias_quant: tuple[np.ndarray, np.ndarray | None] | None = None) -> np.ndarray:
    """The bias in accumulator units (scale s_x·s_w): an int32 DQ input, or a float
    constant the quantiser left unquantised (rounded to the nearest unit). With
    ``bias_quant`` (the operator's own bias scale and zero point) the bias is exact or
    refused: the kernels add it unscaled, so its scale must be s_x·s_w."""
    if not name:
        return np.zeros(channels, np.int64)
    values = _const(graph, name)
    if bias_quant is not None:
        scale = np.asarray(bias_quant[0]).astype(np.float64).reshape(-1)
        zero = np.zeros((), np.int64) if bias_quant[1] is None else np.asarray(bias_quant[1]).astype(np.int64)
        if not np.any(values.astype(np.int64).reshape(-1) - zero.reshape(-1)):  # zero in any scale (wav2vec2's)
            return np.zeros(channels, np.int64)
        if values.dtype in (np.uint8, np.int8):
            # A bias quantised as an activation (the quantiser shares one constant — BERT's zero
            # biases — between an Add and a Gemm): its real values, rounded to accumulator units
            # (within half a unit of s_x·s_w, far below one output step), as a float bias is.
            real = (values.astype(np.int64).reshape(-1) - zero.reshape(-1)).astype(np.float64) * scale
            return np.rint(real / acc_scale).astype(np.int64) * np.ones(channels, np.int64)
        if values.dtype != np.int32 or not np.allclose(scale, acc_scale, rtol=1e-6, atol=0.0):
            raise ModelError(f"hexagon backend: {node.name}: the bias must be int32 with scale x_scale·w_scale "
                             f"(got {values.dtype}, scale {scale.tolist()} vs {np.atleast_1d(acc_scale).tolist()})")
        return (values.astype(np.int64).reshape(-1) - zero.reshape(-1)) * np.ones(channels, np.int64)
    if values.dtype == np.int32:
        dq = next((n for n in graph.nodes if n.op == "DequantizeLinear" and n.inputs[0] == name), None)
        if dq is None:  # QLinearConv: int32 in accumulator units by definition
            return values.astype(np.int64).reshape(-1) * np.ones(channels, np.int64)
        scale = _const(graph, dq.inputs[1]).astype(np.float64).reshape(-1)
        if np.allclose(scale, acc_scale, rtol=1e-6):
            return values.astype(np.int64).reshape(-1) * np.ones(channels, np.int64)
        values = values.astype(np.float64) * scale
    return np.rint(values.astype(np.float64).reshape(-1) / acc_scale).astype(np.int64) * np.ones(channels, np.int64)
