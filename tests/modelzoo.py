"""Shared test helpers: real models, random weights/inputs, an onnxruntime oracle, blocks.

Other stages' tests import this module; the names below are a stable contract.

Models
- ``LIGHT_MODELS``: the nine ONNX "light" models shipped inside the onnx package (opset 9).
- ``light_model(name)``: a fresh ``onnx.ModelProto`` of one of them.
- ``randomize_weights(model, seed)``: a copy with every float constant tensor of rank >= 1
  (initializers and ConstantOfShape fills, which become initializers) replaced by seeded
  random values: He-scaled (variance 2/fan_in) for conv weights, 1/fan_in for Gemm/MatMul,
  uniform(0.5, 1.5) for BatchNormalization scale/variance and multipliers, 0.1·N(0, 1) for
  biases and means. Rank-0 floats (eps, 0.5, sqrt 2) are hyperparameters and stay.

Running
- ``random_inputs(model, seed, dims)``: seeded arrays for the model's real inputs; symbolic
  dims are bound from ``dims`` (e.g. ``{"batch": 2, "seq": 7}``).
- ``run_ort(model_or_bytes, inputs)``: onnxruntime on CPU with graph optimisations
  DISABLED, so it is an oracle, not another optimiser.
- ``assert_close(actual, expected, rtol, atol)``: arrays or dicts of arrays; the failure
  message gives max abs/rel error and where.

Blocks (opset 17, built with ``onnx.helper`` the way exporters emit them: symbolic input
dims, run-time shapes through Shape→Gather→Unsqueeze→Concat→Reshape)
- ``mha_block``, ``layernorm_block``, ``gelu_block``, ``transformer_encoder_block``:
  input ``x: [batch, seq, d_model]``.
- ``swin_window_block``: input ``x: [batch, H*W, C]``; window partition + reverse.
- ``conv_bn_relu_block``, ``depthwise_separable_block``, ``residual_block``:
  input ``x: [batch, C, height, width]``.
``BLOCKS`` maps each block's name to its builder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

LIGHT_MODELS: tuple[str, ...] = (
    "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
    "shufflenet", "squeezenet", "vgg19", "zfnet512",
)
LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
OPSET = 17


def light_model(name: str) -> onnx.ModelProto:
    """One of ``LIGHT_MODELS`` as a fresh ModelProto (weights are 0.02 ConstantOfShape fills)."""
    if name not in LIGHT_MODELS:
        raise KeyError(f"unknown light model {name!r}; choose from {', '.join(LIGHT_MODELS)}")
    return onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx"))


# -- random weights -----------------------------------------------------------------

_PASS_THROUGH = ("Unsqueeze", "Reshape", "Cast", "Identity", "Squeeze", "Transpose")


def _role(name: str, consumers: dict[str, list[tuple[onnx.NodeProto, int]]]) -> tuple[str, onnx.NodeProto | None, int]:
    """(op, node, input index) of the first real consumer, looking through reshapes."""
    seen = 0
    while seen < 8:
        users = consumers.get(name, [])
        if not users:
            return "", None, -1
        node, index = users[0]
        if node.op_type not in _PASS_THROUGH or index != 0:
            return node.op_type, node, index
        name, seen = node.output[0], seen + 1
    return "", None, -1


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], bound: float) -> np.ndarray:
    """uniform(-bound, bound) in float32, computed in place."""
    values = rng.random(shape, dtype=np.float32)
    values -= np.float32(0.5)
    values *= np.float32(2 * bound)
    return values


def _random_like(shape: tuple[int, ...], role: tuple[str, onnx.NodeProto | None, int], rng: np.random.Generator) -> np.ndarray:
    op, node, index = role
    if op == "BatchNormalization" and index in (1, 4):  # scale, variance: positive
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if op == "BatchNormalization":  # bias, mean
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if op == "Mul" or op == "Div":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if len(shape) <= 1 or op in ("Add", "Sub", "Sum"):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    fan_in = int(np.prod(shape[1:]))
    if op in ("Gemm", "MatMul"):
        # Classifier heads: LeCun scale (1/fan_in) keeps the logits from saturating softmax.
        trans_b = node is not None and any(a.name == "transB" and a.i for a in node.attribute)
        fan_in = shape[1] if op == "Gemm" and trans_b else shape[-2]
        return _uniform(rng, shape, math.sqrt(3.0 / fan_in))
    # He initialisation: variance 2/fan_in keeps ReLU activations at unit scale.
    # Uniform with the He variance: as good here and much faster to draw for VGG's 140M weights.
    bound = math.sqrt(3.0) * math.sqrt(2.0 / max(fan_in, 1))
    return _uniform(rng, shape, bound)


def randomize_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """Copy of ``model`` with seeded random float weights (ConstantOfShape fills become initializers)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    rng = np.random.default_rng(seed)
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, index))
    inits = {t.name: t for t in graph.initializer}
    # Float initializers are rewritten in place (raw_data), saving copies of big tensors.
    for init in graph.initializer:
        if init.data_type == TensorProto.FLOAT and len(init.dims) > 0:  # scalars are hyperparameters (eps, 0.5)
            array = _random_like(tuple(init.dims), _role(init.name, consumers), rng)
            del init.float_data[:]
            init.raw_data = array.tobytes()
    # ConstantOfShape(constant shape) fills → initializers, in node order.
    kept_nodes = []
    new_inits: list[str] = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            dtype = TensorProto.FLOAT if value is None else value.data_type
            if dtype == TensorProto.FLOAT:
                shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
                array = _random_like(shape, _role(node.output[0], consumers), rng)
                tensor = graph.initializer.add()
                tensor.name, tensor.data_type = node.output[0], TensorProto.FLOAT
                tensor.dims.extend(shape)
                tensor.raw_data = array.tobytes()
                new_inits.append(node.output[0])
                continue
        kept_nodes.append(node)
    kept_nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in kept_nodes]
    del graph.node[:]
    graph.node.extend(kept_nodes)
    # Shape initializers that fed only the removed fills are dropped (and from graph.input).
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    unused = {t.name for t in graph.initializer if t.name not in used}
    for index in reversed(range(len(graph.initializer))):
        if graph.initializer[index].name in unused:
            del graph.initializer[index]
    keep_inputs = [i for i in graph.input if i.name not in unused]
    if out.ir_version < 4:  # before IR 4 every initializer must also be listed as a graph input
        shapes = {t.name: list(t.dims) for t in graph.initializer}
        keep_inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[n]) for n in new_inits]
    del graph.input[:]
    graph.input.extend(keep_inputs)
    return out


# -- inputs, running, comparing -------------------------------------------------------

def _real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def random_inputs(model: onnx.ModelProto, seed: int, dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs for ``model``'s real inputs; symbolic dims come from ``dims``."""
    rng = np.random.default_rng(seed)
    dims = dict(dims or {})
    feeds: dict[str, np.ndarray] = {}
    for info in _real_inputs(model):
        shape = []
        for dim in info.type.tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(dim.dim_value)
            elif dim.dim_param in dims:
                shape.append(dims[dim.dim_param])
            else:
                raise KeyError(f"input {info.name!r}: bind symbolic dim {dim.dim_param!r} through dims=")
        dtype = helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[info.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[info.name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


def run_ort(model_or_bytes: onnx.ModelProto | bytes, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs by name from onnxruntime CPU with all graph optimisations disabled."""
    raw = model_or_bytes.SerializeToString() if isinstance(model_or_bytes, onnx.ModelProto) else model_or_bytes
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    # One thread, no spinning: tests run two workers on two cores, and an oracle needs no speed.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(raw, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(inputs)), strict=True))


def assert_close(actual: np.ndarray | Mapping[str, np.ndarray], expected: np.ndarray | Mapping[str, np.ndarray],
                 rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Like np.testing.assert_allclose, for arrays or dicts of arrays, with a locating message."""
    if isinstance(expected, Mapping):
        assert isinstance(actual, Mapping), "expected a dict of outputs"
        assert sorted(actual) == sorted(expected), f"output names differ: {sorted(actual)} vs {sorted(expected)}"
        for name in expected:
            _assert_array_close(np.asarray(actual[name]), np.asarray(expected[name]), rtol, atol, name)
        return
    _assert_array_close(np.asarray(actual), np.asarray(expected), rtol, atol, "value")


def _assert_array_close(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != expected {expected.shape}"
    if actual.size == 0:
        return
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    error = np.abs(a - e)
    bad = ~(error <= atol + rtol * np.abs(e)) & ~((a == e) | (np.isnan(a) & np.isnan(e)))
    if not bad.any():
        return
    worst = np.unravel_index(int(np.nanargmax(np.where(bad, error, -1))), a.shape)
    relative = error / np.maximum(np.abs(e), 1e-30)
    raise AssertionError(
        f"{what}: {int(bad.sum())}/{a.size} elements differ beyond rtol={rtol}, atol={atol}; "
        f"max abs error {np.nanmax(error):.3g}, max rel error {np.nanmax(relative):.3g}; "
        f"worst at index {tuple(int(i) for i in worst)}: actual {a[worst]!r} vs expected {e[worst]!r}"
    )


# -- block builders ---------------------------------------------------------------------

class _Builder:
    """Appends nodes and initializers with unique names; ``op`` returns the output name."""

    def __init__(self, seed: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, base: str, array: np.ndarray) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def ints(self, values: list[int]) -> str:
        return self.const("i64", np.asarray(values, dtype=np.int64))

    def weight(self, shape: tuple[int, ...], fan_in: int) -> str:
        return self.const("w", (self.rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32))

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: object) -> str:
        outs = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(f"n_{op_type}"), **attrs))
        return outs[0]

    def model(self, name: str, x: str, x_dims: list[int | str], y: str, out_dims: list[int | str] | None = None) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, x_dims)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, out_dims)],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="dnnr-tests")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def _dim(b: _Builder, shape: str, index: int) -> str:
    """Shape → Gather(scalar) → Unsqueeze: one run-time dim as a 1-element vector."""
    scalar = b.op("Gather", [shape, b.const("idx", np.asarray(index, dtype=np.int64))], axis=0)
    return b.op("Unsqueeze", [scalar, b.ints([0])])


def _layernorm(b: _Builder, x: str, d: int) -> str:
    mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
    centred = b.op("Sub", [x, mean])
    square = b.op("Pow", [centred, b.const("two", np.asarray(2.0, dtype=np.float32))])
    var = b.op("ReduceMean", [square], axes=[-1], keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, b.const("eps", np.asarray(1e-5, dtype=np.float32))])])
    normed = b.op("Div", [centred, std])
    gamma = b.const("gamma", b.rng.uniform(0.5, 1.5, d).astype(np.float32))
    beta = b.const("beta", (0.1 * b.rng.standard_normal(d)).astype(np.float32))
    return b.op("Add", [b.op("Mul", [normed, gamma]), beta])


def _gelu(b: _Builder, x: str) -> str:
    scaled = b.op("Div", [x, b.const("sqrt2", np.asarray(math.sqrt(2.0), dtype=np.float32))])
    erf = b.op("Erf", [scaled])
    one_plus = b.op("Add", [erf, b.const("one", np.asarray(1.0, dtype=np.float32))])
    return b.op("Mul", [b.op("Mul", [x, one_plus]), b.const("half", np.asarray(0.5, dtype=np.float32))])


def _linear(b: _Builder, x: str, d_in: int, d_out: int) -> str:
    y = b.op("MatMul", [x, b.weight((d_in, d_out), d_in)])
    return b.op("Add", [y, b.const("bias", (0.1 * b.rng.standard_normal(d_out)).astype(np.float32))])


def _mha(b: _Builder, x: str, d_model: int, heads: int) -> str:
    head_dim = d_model // heads
    shape = b.op("Shape", [x])
    batch, seq = _dim(b, shape, 0), _dim(b, shape, 1)
    split_shape = b.op("Concat", [batch, seq, b.ints([heads]), b.ints([head_dim])], axis=0)

    def heads_of(perm: list[int]) -> str:
        projected = _linear(b, x, d_model, d_model)
        return b.op("Transpose", [b.op("Reshape", [projected, split_shape])], perm=perm)

    q, k, v = heads_of([0, 2, 1, 3]), heads_of([0, 2, 3, 1]), heads_of([0, 2, 1, 3])
    scores = b.op("MatMul", [q, k])
    scaled = b.op("Div", [scores, b.const("scale", np.asarray(math.sqrt(head_dim), dtype=np.float32))])
    probs = b.op("Softmax", [scaled], axis=-1)
    context = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merge_shape = b.op("Concat", [batch, seq, b.ints([d_model])], axis=0)
    merged = b.op("Reshape", [context, merge_shape])
    return _linear(b, merged, d_model, d_model)


_SEQ_DIMS: list[int | str] = ["batch", "seq"]


def mha_block(d_model: int = 32, heads: int = 4, seed: int = 0) -> onnx.ModelProto:
    """Multi-head self-attention: Reshape/Transpose head split and merge, scaled softmax."""
    b = _Builder(seed)
    y = _mha(b, "x", d_model, heads)
    return b.model("mha", "x", [*_SEQ_DIMS, d_model], y, [*_SEQ_DIMS, d_model])


def layernorm_block(d_model: int = 32, seed: int = 0) -> onnx.ModelProto:
    """LayerNorm as exporters decompose it: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add."""
    b = _Builder(seed)
    y = _layernorm(b, "x", d_model)
    return b.model("layernorm", "x", [*_SEQ_DIMS, d_model], y, [*_SEQ_DIMS, d_model])


def softmax_block(d_model: int = 32, seed: int = 0) -> onnx.ModelProto:
    """Softmax over the last axis written out: ReduceMax, Sub, Exp, ReduceSum, Div."""
    b = _Builder(seed)
    shifted = b.op("Sub", ["x", b.op("ReduceMax", ["x"], axes=[-1], keepdims=1)])
    exp = b.op("Exp", [shifted])
    y = b.op("Div", [exp, b.op("ReduceSum", [exp, b.ints([-1])], keepdims=1)])
    return b.model("softmax", "x", [*_SEQ_DIMS, d_model], y, [*_SEQ_DIMS, d_model])


def gelu_block(d_model: int = 32, seed: int = 0) -> onnx.ModelProto:
    """GELU in its Erf form: x * (1 + erf(x / sqrt 2)) * 0.5."""
    b = _Builder(seed)
    y = _gelu(b, "x")
    return b.model("gelu", "x", [*_SEQ_DIMS, d_model], y, [*_SEQ_DIMS, d_model])


def transformer_encoder_block(d_model: int = 32, heads: int = 4, d_ff: int = 64, seed: int = 0) -> onnx.ModelProto:
    """Post-norm encoder layer: LN(x + MHA(x)), then LN(h + FFN(h)) with a GELU FFN."""
    b = _Builder(seed)
    h = _layernorm(b, b.op("Add", ["x", _mha(b, "x", d_model, heads)]), d_model)
    ffn = _linear(b, _gelu(b, _linear(b, h, d_model, d_ff)), d_ff, d_model)
    y = _layernorm(b, b.op("Add", [h, ffn]), d_model)
    return b.model("encoder", "x", [*_SEQ_DIMS, d_model], y, [*_SEQ_DIMS, d_model])


def swin_window_block(height: int = 8, width: int = 8, channels: int = 8, window: int = 4, seed: int = 0) -> onnx.ModelProto:
    """Swin window partition → per-window linear → window reverse, batch symbolic.

    The reverse recovers the batch at run time as windows // (H*W / window²), the way
    the Hugging Face exporter does.
    """
    b = _Builder(seed)
    nh, nw = height // window, width // window
    shape = b.op("Shape", ["x"])
    batch = _dim(b, shape, 0)
    image = b.op("Reshape", ["x", b.op("Concat", [batch, b.ints([height, width, channels])], axis=0)])
    split = b.op("Reshape", [image, b.op("Concat", [batch, b.ints([nh, window, nw, window, channels])], axis=0)])
    windows = b.op("Reshape", [b.op("Transpose", [split], perm=[0, 1, 3, 2, 4, 5]), b.ints([-1, window * window, channels])])
    mixed = _linear(b, windows, channels, channels)
    # reverse: batch = num_windows_total // (nh * nw)
    total = b.op("Gather", [b.op("Shape", [mixed]), b.const("idx", np.asarray(0, dtype=np.int64))], axis=0)
    batch_back = b.op("Unsqueeze", [b.op("Div", [total, b.const("nwin", np.asarray(nh * nw, dtype=np.int64))]), b.ints([0])])
    grid = b.op("Reshape", [mixed, b.op("Concat", [batch_back, b.ints([nh, nw, window, window, channels])], axis=0)])
    merged = b.op("Transpose", [grid], perm=[0, 1, 3, 2, 4, 5])
    y = b.op("Reshape", [merged, b.op("Concat", [batch_back, b.ints([height * width, channels])], axis=0)])
    return b.model("swin_window", "x", ["batch", height * width, channels], y, ["batch", height * width, channels])


def _conv_bn(b: _Builder, x: str, c_in: int, c_out: int, kernel: int, group: int = 1, relu: bool = True) -> str:
    w = b.weight((c_out, c_in // group, kernel, kernel), c_in // group * kernel * kernel / 2)
    y = b.op("Conv", [x, w], kernel_shape=[kernel, kernel], pads=[kernel // 2] * 4, group=group)
    params = [b.rng.uniform(0.5, 1.5, c_out), 0.1 * b.rng.standard_normal(c_out),
              0.1 * b.rng.standard_normal(c_out), b.rng.uniform(0.5, 1.5, c_out)]
    y = b.op("BatchNormalization", [y, *(b.const("bn", p.astype(np.float32)) for p in params)], epsilon=1e-5)
    return b.op("Relu", [y]) if relu else y


_IMAGE_DIMS: list[int | str] = ["batch", 0, "height", "width"]


def _image_dims(channels: int) -> list[int | str]:
    return [_IMAGE_DIMS[0], channels, *_IMAGE_DIMS[2:]]


def conv_bn_relu_block(channels: int = 8, out_channels: int = 16, seed: int = 0) -> onnx.ModelProto:
    """Conv 3×3 (pad 1) → BatchNormalization → Relu."""
    b = _Builder(seed)
    y = _conv_bn(b, "x", channels, out_channels, 3)
    return b.model("conv_bn_relu", "x", _image_dims(channels), y, _image_dims(out_channels))


def depthwise_separable_block(channels: int = 8, out_channels: int = 16, seed: int = 0) -> onnx.ModelProto:
    """MobileNet unit: depthwise 3×3 conv-BN-ReLU, then pointwise 1×1 conv-BN-ReLU."""
    b = _Builder(seed)
    y = _conv_bn(b, "x", channels, channels, 3, group=channels)
    y = _conv_bn(b, y, channels, out_channels, 1)
    return b.model("depthwise_separable", "x", _image_dims(channels), y, _image_dims(out_channels))


def conv_pointwise_block(channels: int = 8, out_channels: int = 16, seed: int = 0) -> onnx.ModelProto:
    """Conv 3×3-BN straight into a pointwise 1×1 conv-BN-ReLU (no activation between)."""
    b = _Builder(seed)
    y = _conv_bn(b, "x", channels, channels, 3, relu=False)
    y = _conv_bn(b, y, channels, out_channels, 1)
    return b.model("conv_pointwise", "x", _image_dims(channels), y, _image_dims(out_channels))


def residual_block(channels: int = 8, seed: int = 0) -> onnx.ModelProto:
    """ResNet basic block: conv-BN-ReLU, conv-BN, add the input, ReLU."""
    b = _Builder(seed)
    y = _conv_bn(b, "x", channels, channels, 3)
    y = _conv_bn(b, y, channels, channels, 3, relu=False)
    y = b.op("Relu", [b.op("Add", [y, "x"])])
    return b.model("residual", "x", _image_dims(channels), y, _image_dims(channels))


def channel_attention_block(channels: int = 8, out_channels: int = 48, seed: int = 0) -> onnx.ModelProto:
    """Conv-BN-ReLU, then a spatial attention map: Sigmoid of the mean over channels
    (a reduction over a non-innermost axis of an intermediate, SmartMem §3.2.2)."""
    b = _Builder(seed)
    y = _conv_bn(b, "x", channels, out_channels, 3)
    y = b.op("Sigmoid", [b.op("ReduceMean", [y], axes=[1], keepdims=1)])
    return b.model("channel_attention", "x", _image_dims(channels), y, _image_dims(1))


BLOCKS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mha": mha_block,
    "layernorm": layernorm_block,
    "gelu": gelu_block,
    "transformer_encoder": transformer_encoder_block,
    "swin_window": swin_window_block,
    "conv_bn_relu": conv_bn_relu_block,
    "depthwise_separable": depthwise_separable_block,
    "residual": residual_block,
}
