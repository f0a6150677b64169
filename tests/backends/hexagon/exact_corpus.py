"""A corpus model's QDQ quantisation run once in qemu, every quantised activation compared
with onnxruntime and every integer operator with the exact integer model fed dnnr's own
inputs (`integer_model.operator_by_operator`). Too slow for the suite (a minute or two
of build per model); run by hand:

    PYTHONPATH=. python3 -m tests.backends.hexagon.exact_corpus wav2vec2 segformer
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

from egraph_compiler import pipeline
from egraph_compiler.backends import hexagon
from tests.backends.opencl.helpers import with_static_inputs
from tests.corpus import build, check
from tests.modelzoo import run_ort

from .integer_model import operator_by_operator
from .test_models import _activation_tensors, _quantise


def check_model(name: str, tmp: Path) -> None:
    corpus = build.build(build.names_in("suite"), log=lambda _: None)
    model = check.load(corpus, name, "ts")
    feeds = model.feeds(0)
    path = _quantise(with_static_inputs(onnx.load(model.path), feeds), tmp, seed=2, feeds=feeds)
    exposed = onnx.load(path)
    outputs = {o.name for o in exposed.graph.output}
    for value, shape in _activation_tensors(path):
        exposed.graph.output.append(onnx.helper.make_tensor_value_info(value, onnx.TensorProto.FLOAT, shape))
    onnx.save(exposed, tmp / "exposed.onnx")
    artefact = hexagon.build(pipeline.compile_model(str(tmp / "exposed.onnx"), target="hexagon").graph, tmp / "artefact")
    x = {k: np.random.default_rng(3).standard_normal(v.shape).astype(np.float32) for k, v in feeds.items()}
    ours = hexagon.load(artefact.out_dir).run(x)
    expected = run_ort(exposed, x)
    scales = {n.output[0]: n.input[1] for n in exposed.graph.node if n.op_type == "DequantizeLinear"}
    constants = {i.name: onnx.numpy_helper.to_array(i) for i in exposed.graph.initializer}
    for value in sorted(outputs):
        lsb = np.rint(np.abs(ours[value].astype(np.float64) - expected[value]) / float(constants[scales[value]]))
        print(f"{name} {value}: worst {int(lsb.max())} LSB from onnxruntime, {(lsb == 0).mean():.1%} equal")
    rows = operator_by_operator(exposed, ours, x)
    wrong = [row for row in rows if row[2]]
    print(f"{name}: {len(rows)} integer operators against the exact model from dnnr's inputs "
          f"({dict(Counter(r[0] for r in rows))}); {len(wrong)} differ {wrong}")


if __name__ == "__main__":
    for model_name in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as directory:
            check_model(model_name, Path(directory))
