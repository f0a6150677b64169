"""ConvTranspose on OpenCL (PoCL): the per-phase Convs (`ir/conv_transpose.py`, a constant
weight) against the gather kernel (`backends/opencl/ops_nn.py`, the same layer with its
weight given at run time) and onnxruntime's CPU kernel (prints; asserts nothing).

    PYTHONPATH=. python3 benchmarks/conv_transpose.py [--repeat 5]

Per layer: the sum of the launches' device seconds (OpenCL profiling events, median of
``--repeat`` runs), onnxruntime's median wall seconds, and each form's max |error|
against onnxruntime.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import ir, shapes
from egraph_compiler.backends import opencl

# (input channels, output channels, map size, kernel, stride, pad): the layer first
LAYERS = [(64, 32, 32, 4, 2, 1), (64, 32, 32, 3, 2, 1), (32, 16, 16, 3, 3, 0)]


def _model(cin: int, cout: int, size: int, kernel: int, stride: int, pad: int,
           weight_input: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, cin, size, size)).astype(np.float32)
    w = (rng.standard_normal((cin, cout, kernel, kernel)) * 0.1).astype(np.float32)
    out = (size - 1) * stride - 2 * pad + kernel
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[stride] * 2, pads=[pad] * 4)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
    feeds = {"x": x}
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)))
        feeds["w"] = w
    graph = helper.make_graph([node], "conv_transpose", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, out, out])],
                              [] if weight_input else [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


def _opencl(model: onnx.ModelProto, feeds: dict[str, np.ndarray], repeat: int) -> tuple[float, np.ndarray]:
    graph = shapes.infer_shapes(ir.load_onnx(model))
    with tempfile.TemporaryDirectory(prefix="dnnr-bench-") as out:
        opencl.compile_graph(graph, out)
        loaded = opencl.load(out)
        result = loaded.run(feeds)["y"]
        return sum(loaded.time_launches(repeat)), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'layer (cin>cout, map, k, stride, pad)':40} {'phases s':>9} {'gather s':>9} {'ort s':>8}"
          f" {'err phases':>10} {'err gather':>10}")
    for layer in LAYERS:
        model, feeds = _model(*layer, weight_input=False)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)[0]
        times = []
        for _ in range(args.repeat):
            began = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - began)
        phases, got = _opencl(model, feeds, args.repeat)
        gather_model, gather_feeds = _model(*layer, weight_input=True)
        gather, gathered = _opencl(gather_model, gather_feeds, args.repeat)
        cin, cout, size, kernel, stride, pad = layer
        print(f"{f'{cin}>{cout}, {size}x{size}, k{kernel}, s{stride}, p{pad}':40} {phases:9.4f} {gather:9.4f}"
              f" {statistics.median(times):8.4f} {np.abs(got - want).max():10.2e}"
              f" {np.abs(gathered - want).max():10.2e}")


if __name__ == "__main__":
    main()
