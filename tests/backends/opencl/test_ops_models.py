"""The OpenCL code of the real-model operators (`backends/opencl/ops_models.py`):
GatherND and Resize as index maps, InstanceNormalization as a row normalisation —
each against onnxruntime, alone and fused with a neighbour, on PoCL."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler.backends.opencl import compile_graph, load
from egraph_compiler.ir import ModelError
from tests.backends.opencl.helpers import static_graph

RNG = np.random.default_rng(17)


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], output: str,
           initializers: dict[str, np.ndarray] | None = None, opset: int = 20) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "ops_models",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(a, n) for n, a in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)  # the output's type
    model.graph.output[0].CopyFrom(inferred.graph.output[0])
    return model


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: Path) -> int:
    """Compile for OpenCL, run on PoCL, compare with onnxruntime; the kernel count."""
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    artefact = compile_graph(static_graph(model, feeds), tmp_path)
    got = load(tmp_path).run(feeds)[model.graph.output[0].name]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return artefact.kernels


@pytest.mark.parametrize(("data_shape", "indices", "batch_dims"), [
    ((4, 5, 3), [[0, 1], [3, -1], [2, 4]], 0),  # tuples of 2: rows of the last axis
    ((4, 5), [[[1]], [[-2]]], 0),  # whole rows, negative index
    ((2, 3, 4), [[1], [0]], 1),  # one tuple per batch entry
])
def test_gather_nd_matches_onnxruntime(tmp_path: Path, data_shape: tuple[int, ...],
                                       indices: list, batch_dims: int) -> None:
    data = RNG.standard_normal(data_shape).astype(np.float32)
    index = np.array(indices, dtype=np.int64)
    model = _model([helper.make_node("GatherND", ["x", "i"], ["y0"], batch_dims=batch_dims),
                    helper.make_node("Relu", ["y0"], ["y"])], {"x": data, "i": index}, "y")
    _check(model, {"x": data, "i": index}, tmp_path)


RESIZE_CASES = [
    ("linear", "half_pixel", "round_prefer_floor", (1, 3, 5, 7), (1, 3, 11, 9)),  # SegFormer
    ("linear", "half_pixel", "round_prefer_floor", (1, 2, 8, 8), (1, 2, 3, 5)),  # downsample
    ("linear", "align_corners", "round_prefer_floor", (2, 2, 4, 3), (2, 2, 7, 6)),
    ("linear", "asymmetric", "round_prefer_floor", (1, 2, 4, 4), (1, 2, 8, 8)),
    ("linear", "pytorch_half_pixel", "round_prefer_floor", (1, 1, 4, 4), (1, 1, 1, 8)),
    ("nearest", "asymmetric", "floor", (1, 2, 3, 4), (1, 2, 6, 8)),
    ("nearest", "half_pixel", "round_prefer_floor", (1, 2, 5, 4), (1, 2, 7, 3)),
    ("nearest", "align_corners", "round_prefer_ceil", (1, 1, 4, 5), (1, 1, 9, 7)),
    ("nearest", "half_pixel", "ceil", (1, 3, 4), (1, 3, 9)),
]


@pytest.mark.parametrize(("mode", "coordinates", "nearest", "in_shape", "out_shape"),
                         RESIZE_CASES)
def test_resize_with_sizes_matches_onnxruntime(tmp_path: Path, mode: str, coordinates: str,
                                               nearest: str, in_shape: tuple[int, ...],
                                               out_shape: tuple[int, ...]) -> None:
    data = RNG.standard_normal(in_shape).astype(np.float32)
    sizes = np.array(out_shape, dtype=np.int64)
    # a pointwise producer (read at every corner) and consumer, fused around the Resize
    model = _model([helper.make_node("Sigmoid", ["x"], ["s"]),
                    helper.make_node("Resize", ["s", "", "", "sizes"], ["r"], mode=mode,
                                     coordinate_transformation_mode=coordinates,
                                     nearest_mode=nearest),
                    helper.make_node("Mul", ["r", "r"], ["y"])],
                   {"x": data}, "y", {"sizes": sizes})
    _check(model, {"x": data}, tmp_path)


@pytest.mark.parametrize(("mode", "scales"), [("linear", [1.0, 1.0, 2.0, 1.5]),
                                               ("nearest", [1.0, 1.0, 0.6, 2.5])])
def test_resize_with_scales_uses_the_scales(tmp_path: Path, mode: str, scales: list[float]
                                             ) -> None:
    """With ``scales`` ONNX maps coordinates by the given scale, not the size ratio (they
    differ when in × scale is not an integer)."""
    data = RNG.standard_normal((1, 2, 5, 4)).astype(np.float32)
    model = _model([helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)],
                   {"x": data}, "y", {"scales": np.array(scales, dtype=np.float32)})
    _check(model, {"x": data}, tmp_path)


def test_resize_on_integers_is_refused_by_name(tmp_path: Path) -> None:
    """Blending taps (linear, cubic) is for floats; an integer tensor is refused by name."""
    data = RNG.standard_normal((1, 1, 4, 4)).astype(np.float32)
    model = _model([helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT32),
                    helper.make_node("Resize", ["i", "", "", "sizes"], ["r"], mode="cubic",
                                     name="upsample"),
                    helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)],
                   {"x": data}, "y", {"sizes": np.array([1, 1, 8, 8], dtype=np.int64)})
    with pytest.raises(ModelError, match="Resize \\(node 'upsample'\\): cubic mode on int32"):
        compile_graph(static_graph(model, {"x": data}), tmp_path)


@pytest.mark.parametrize("shape", [(2, 3, 10), (1, 4, 5, 6), (3, 2, 300)])
def test_instance_norm_matches_onnxruntime(tmp_path: Path, shape: tuple[int, ...]) -> None:
    data = RNG.standard_normal(shape).astype(np.float32) * 3 + 1
    channels = shape[1]
    params = {"scale": RNG.standard_normal(channels).astype(np.float32),
              "bias": RNG.standard_normal(channels).astype(np.float32)}
    model = _model([helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["n"],
                                     epsilon=1e-5),
                    helper.make_node("Tanh", ["n"], ["y"])], {"x": data}, "y", params)
    _check(model, {"x": data}, tmp_path)


def test_group_norm_export_is_one_kernel(tmp_path: Path) -> None:
    """The TorchScript export of GroupNorm: Reshape, InstanceNormalization, Reshape, Mul,
    Add — the Reshapes and the affine step fold into the row normalisation's kernel."""
    data = RNG.standard_normal((2, 6, 20)).astype(np.float32)
    init = {"grouped": np.array([2, 3, -1], dtype=np.int64),
            "back": np.array([2, 6, 20], dtype=np.int64),
            "ones": np.ones(3, np.float32), "zeros": np.zeros(3, np.float32),
            "gamma": RNG.standard_normal((6, 1)).astype(np.float32),
            "beta": RNG.standard_normal((6, 1)).astype(np.float32)}
    model = _model([helper.make_node("Reshape", ["x", "grouped"], ["g"]),
                    helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"]),
                    helper.make_node("Reshape", ["n", "back"], ["r"]),
                    helper.make_node("Mul", ["r", "gamma"], ["m"]),
                    helper.make_node("Add", ["m", "beta"], ["y"])], {"x": data}, "y", init)
    feeds = {"x": data}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    artefact = compile_graph(static_graph(model, feeds), tmp_path)
    np.testing.assert_allclose(load(tmp_path).run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
    assert artefact.kernels == 1, artefact.kernels
