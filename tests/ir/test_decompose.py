"""Issue 17 item 6: the decompositions the OpenCL backend applies (ir/decompose.py).

Each model is imported, its shapes inferred, the operator decomposed, and the decomposed
graph written as ONNX and run in onnxruntime next to the original node (onnxruntime's own
kernel; for a layout onnxruntime lacks, its layout-0 twin; for DFT and the windows, onnx's
reference implementation). What cannot be decomposed is refused naming node, operator, opset.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from egraph_compiler import shapes
from egraph_compiler.ir import ModelError, load_onnx, to_onnx
from egraph_compiler.ir.decompose import decompose

F = TensorProto.FLOAT
RNG = np.random.default_rng(17)
_RANKS = {"Y_h": 3, "Y_c": 3, "w": 1, "mel": 2}  # the outputs' ranks (4 for the others)


def _model(node: onnx.NodeProto, inputs: dict[str, np.ndarray], outputs: list[str],
           opset: int = 21, constants: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    infos = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                           list(value.shape)) for name, value in inputs.items()]
    graph = helper.make_graph([node], "decompose", infos,
                              [helper.make_tensor_value_info(o, F, [None] * _RANKS.get(o, 4)) for o in outputs],
                              [onnx.numpy_helper.from_array(v, k) for k, v in (constants or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _decomposed(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = shapes.infer_shapes(load_onnx(model))
    lowered = decompose(graph)
    assert lowered is not None
    written = to_onnx(shapes.infer_shapes(lowered))
    assert {n.op_type for n in model.graph.node} & {n.op_type for n in written.graph.node} == set()
    return written


def _weights(kind: str, directions: int, hidden: int, size: int, peepholes: bool = False) -> dict:
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    found = {"W": RNG.normal(0, 0.5, (directions, gates * hidden, size)).astype(np.float32),
             "R": RNG.normal(0, 0.5, (directions, gates * hidden, hidden)).astype(np.float32),
             "B": RNG.normal(0, 0.5, (directions, 2 * gates * hidden)).astype(np.float32)}
    if peepholes:
        found["P"] = RNG.normal(0, 0.5, (directions, 3 * hidden)).astype(np.float32)
    return found


RECURRENT = [
    ("RNN", {"direction": "bidirectional", "activations": ["Relu", "LeakyRelu"], "activation_alpha": [0.3]}),
    ("RNN", {"direction": "reverse", "clip": 0.5}),
    ("GRU", {"direction": "bidirectional"}),
    ("GRU", {"linear_before_reset": 1, "activations": ["HardSigmoid", "Tanh"],
             "activation_alpha": [0.25], "activation_beta": [0.4]}),
    ("LSTM", {"direction": "bidirectional", "clip": 1.5}),
    ("LSTM", {"direction": "reverse", "peepholes": True, "activations": ["Sigmoid", "Elu", "Softsign"]}),
]


@pytest.mark.parametrize(("kind", "attrs"), RECURRENT, ids=[f"{k}-{i}" for i, (k, _) in enumerate(RECURRENT)])
def test_recurrent_layer_unrolled_matches_onnxruntime(kind: str, attrs: dict) -> None:
    """Every direction, run-time sequence lengths of 1..steps (a reverse direction then
    starts at each entry's own last step), initial states and biases."""
    attrs = dict(attrs)
    peepholes = attrs.pop("peepholes", False)
    steps, batch, size, hidden = 4, 3, 2, 3
    directions = 2 if attrs.get("direction") == "bidirectional" else 1
    feeds = {"X": RNG.normal(size=(steps, batch, size)).astype(np.float32),
             **_weights(kind, directions, hidden, size, peepholes),
             "sequence_lens": np.asarray([4, 1, 2], dtype=np.int32),
             "initial_h": RNG.normal(size=(directions, batch, hidden)).astype(np.float32)}
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h"]
    outputs = ["Y", "Y_h"]
    if kind == "LSTM":
        feeds["initial_c"] = RNG.normal(size=(directions, batch, hidden)).astype(np.float32)
        names += ["initial_c"] + (["P"] if peepholes else [])
        outputs.append("Y_c")
    node = helper.make_node(kind, names, outputs, hidden_size=hidden, **attrs)
    model = _model(node, feeds, outputs)
    want, got = _run(model, feeds), _run(_decomposed(model), feeds)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_batch_first_layout_matches_the_sequence_first_twin(kind: str) -> None:
    """layout=1 (onnxruntime has no kernel for it): the same numbers as layout=0 on the
    transposed input, transposed back."""
    steps, batch, size, hidden = 3, 2, 4, 5
    x = RNG.normal(size=(batch, steps, size)).astype(np.float32)
    weights = _weights(kind, 1, hidden, size)
    outputs = ["Y", "Y_h"]
    first = _model(helper.make_node(kind, ["X", "W", "R", "B"], outputs, hidden_size=hidden, layout=1),
                   {"X": x, **weights}, outputs)
    twin = _model(helper.make_node(kind, ["X", "W", "R", "B"], outputs, hidden_size=hidden),
                  {"X": x.transpose(1, 0, 2), **weights}, outputs)
    y, y_h = _run(_decomposed(first), {"X": x, **weights})
    want_y, want_h = _run(twin, {"X": x.transpose(1, 0, 2), **weights})
    np.testing.assert_allclose(y, want_y.transpose(2, 0, 1, 3), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_h, want_h.transpose(1, 0, 2), rtol=1e-5, atol=1e-6)


def test_group_normalization_matches_onnxruntime() -> None:
    feeds = {"x": RNG.normal(size=(2, 6, 3, 2)).astype(np.float32),
             "scale": RNG.normal(size=6).astype(np.float32), "bias": RNG.normal(size=6).astype(np.float32)}
    model = _model(helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=3,
                                    epsilon=0.01), feeds, ["y"])
    np.testing.assert_allclose(_run(_decomposed(model), feeds)[0], _run(model, feeds)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("node", "outputs", "opset"), [
    (helper.make_node("MeanVarianceNormalization", ["x"], ["y"]), ["y"], 17),  # default axes 0, 2, 3
    (helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[1, 3]), ["y"], 18),  # axes inputs
    (helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"]), ["y", "scale", "zero"], 18),
])
def test_onnx_function_body_matches_onnxruntime(node: onnx.NodeProto, outputs: list[str], opset: int) -> None:
    """Lowered through the operator's schema function body, attribute defaults filled in."""
    feeds = {"x": RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)}
    model = _model(node, feeds, outputs, opset)
    if node.op_type == "DynamicQuantizeLinear":
        del model.graph.output[:]
        model.graph.output.extend(helper.make_tensor_value_info(o, t, s) for o, t, s in
                                  [("y", TensorProto.UINT8, [2, 3, 4, 5]), ("scale", F, []), ("zero", TensorProto.UINT8, [])])
    for got, want in zip(_run(_decomposed(model), feeds), _run(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shape", "attrs", "length"), [
    ((2, 5, 3, 1), {"axis": 1}, None),
    ((2, 5, 3, 2), {"axis": 2, "inverse": 1}, None),
    ((2, 6, 3, 1), {"axis": 1, "onesided": 1}, 8),
    ((2, 4, 3, 2), {"axis": 1, "inverse": 1, "onesided": 1}, None),
])
def test_dft_as_a_matmul_matches_the_reference(shape: tuple, attrs: dict, length: int | None) -> None:
    """DFT-19: forward, inverse, onesided (zero-padded to dft_length) and irfft."""
    x = RNG.normal(size=shape).astype(np.float32)
    constants = {"n": np.asarray(length, dtype=np.int64)} if length is not None else {}
    node = helper.make_node("DFT", ["x", "n"] if length is not None else ["x"], ["y"], **attrs)
    model = _model(node, {"x": x}, ["y"], opset=19, constants=constants)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(_run(_decomposed(model), {"x": x})[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("parts", "window", "onesided"), [(1, True, 1), (2, False, 0)])
def test_stft_as_frames_and_a_matmul_matches_the_reference(parts: int, window: bool, onesided: int) -> None:
    """STFT-17 with a constant step and frame length, with and without a run-time window."""
    feeds = {"signal": RNG.normal(size=(2, 20, parts)).astype(np.float32)}
    if window:
        feeds["window"] = RNG.uniform(size=6).astype(np.float32)
    constants = {"step": np.asarray(3, dtype=np.int64), "length": np.asarray(6, dtype=np.int64)}
    node = helper.make_node("STFT", ["signal", "step", "window" if window else "", "length"], ["y"],
                            onesided=onesided)
    model = _model(node, feeds, ["y"], opset=17, constants=constants)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(_run(_decomposed(model), feeds)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_window_with_a_constant_size_folds_to_the_reference(op: str, periodic: int) -> None:
    constants = {"size": np.asarray(7, dtype=np.int64)}
    model = _model(helper.make_node(op, ["size"], ["w"], periodic=periodic), {}, ["w"], 17, constants)
    loaded = shapes.infer_shapes(load_onnx(model))
    graph = decompose(loaded) or loaded  # the importer folds it already (ONNX's reference)
    assert not graph.nodes
    want = ReferenceEvaluator(model).run(None, {})[0]
    np.testing.assert_allclose(graph.constants["w"], want, rtol=1e-6, atol=1e-7)


def test_mel_weight_matrix_of_constants_folds_to_the_reference() -> None:
    values = {"bins": (8, np.int64), "dft": (16, np.int64), "rate": (8000, np.int64),
              "low": (100.0, np.float32), "high": (3000.0, np.float32)}
    constants = {k: np.asarray(v, dtype=t) for k, (v, t) in values.items()}
    model = _model(helper.make_node("MelWeightMatrix", list(values), ["mel"]), {}, ["mel"], 17, constants)
    loaded = shapes.infer_shapes(load_onnx(model))
    graph = decompose(loaded) or loaded  # the importer folds it already (ONNX's reference)
    assert not graph.nodes
    np.testing.assert_allclose(graph.constants["mel"], ReferenceEvaluator(model).run(None, {})[0])


def test_dft_with_a_run_time_axis_is_refused_by_name() -> None:
    x = RNG.normal(size=(1, 4, 1)).astype(np.float32)
    model = _model(helper.make_node("DFT", ["x", "", "axis"], ["y"], name="fourier"),
                   {"x": x, "axis": np.asarray(1, dtype=np.int64)}, ["y"], opset=20)
    with pytest.raises(ModelError, match=r"(?s)node 'fourier' \(DFT, opset 20\).*axis"):
        decompose(shapes.infer_shapes(load_onnx(model)))


def test_recurrence_over_a_symbolic_length_is_refused_by_name() -> None:
    weights = _weights("RNN", 1, 2, 2)
    graph = helper.make_graph(
        [helper.make_node("RNN", ["X", "W", "R"], ["", "Y_h"], hidden_size=2, name="cell")], "rnn",
        [helper.make_tensor_value_info("X", F, ["seq", 1, 2])], [helper.make_tensor_value_info("Y_h", F, [None] * 3)],
        [onnx.numpy_helper.from_array(v, k) for k, v in weights.items() if k != "B"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    with pytest.raises(ModelError, match=r"(?s)node 'cell' \(RNN, opset 14\).*static shapes, and 'X' has shape \[seq, 1, 2\].*--bind"):
        decompose(shapes.infer_shapes(load_onnx(model)))


def test_dft_20_axis_input_round_trips_through_the_onnx_target() -> None:
    """A constant opset-20 axis becomes the IR's attribute and is written back as the input."""
    x = RNG.normal(size=(2, 5, 3, 1)).astype(np.float32)
    model = _model(helper.make_node("DFT", ["x", "", "axis"], ["y"]), {"x": x}, ["y"], opset=20,
                   constants={"axis": np.asarray(2, dtype=np.int64)})
    graph = load_onnx(model)
    assert graph.nodes[0].attr("axis") == 2 and len(graph.nodes[0].inputs) == 2
    written = to_onnx(shapes.infer_shapes(graph))
    np.testing.assert_allclose(_run(written, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
