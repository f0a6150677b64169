"""Write `examples/encoder.onnx`: one transformer encoder layer, exported-style.

Symbolic ``batch`` and ``seq`` dims; head split/merge shapes computed at run time
through Shape → Gather → Concat → Reshape, LayerNorm decomposed into
ReduceMean/Sub/Pow/Sqrt/Div and GELU written with Erf — the way PyTorch's
exporter emits them. Weights are seeded random tensors.

    python3 examples/make_example.py [--out examples/encoder.onnx]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN, HEADS, FFN = 64, 4, 128


class Builder:
    def __init__(self, seed: int) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint: str, value: np.ndarray) -> str:
        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, hint: str, *shape: int) -> str:
        scale = 1.0 / np.sqrt(shape[0])
        return self.const(hint, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out + "_node", **attrs))
        return out

    def layernorm(self, x: str) -> str:
        mean = self.op("ReduceMean", [x], axes=[-1])
        centred = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [centred, self.const("two", np.array(2.0, np.float32))])], axes=[-1])
        std = self.op("Sqrt", [self.op("Add", [var, self.const("eps", np.array(1e-5, np.float32))])])
        normed = self.op("Div", [centred, std])
        gamma = self.const("gamma", self.rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32))
        beta = self.const("beta", self.rng.uniform(-0.1, 0.1, HIDDEN).astype(np.float32))
        return self.op("Add", [self.op("Mul", [normed, gamma]), beta])

    def dim(self, x: str, index: int) -> str:
        shape = self.op("Shape", [x])
        return self.op("Unsqueeze", [self.op("Gather", [shape, self.const("idx", np.array(index, np.int64))], axis=0),
                                     self.const("axes", np.array([0], np.int64))])

    def attention(self, x: str) -> str:
        batch, seq = self.dim(x, 0), self.dim(x, 1)
        heads = self.const("heads", np.array([HEADS, HIDDEN // HEADS], np.int64))
        split = self.op("Concat", [batch, seq, heads], axis=0)

        def project(hint: str, perm: list[int]) -> str:
            y = self.op("Add", [self.op("MatMul", [x, self.weight(hint, HIDDEN, HIDDEN)]),
                                self.const(hint + "_b", np.zeros(HIDDEN, np.float32))])
            return self.op("Transpose", [self.op("Reshape", [y, split])], perm=perm)

        q, k, v = project("wq", [0, 2, 1, 3]), project("wk", [0, 2, 3, 1]), project("wv", [0, 2, 1, 3])
        scores = self.op("Div", [self.op("MatMul", [q, k]), self.const("scale", np.array(np.sqrt(HIDDEN // HEADS), np.float32))])
        context = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v])
        merged_shape = self.op("Concat", [batch, seq, self.const("hidden", np.array([HIDDEN], np.int64))], axis=0)
        merged = self.op("Reshape", [self.op("Transpose", [context], perm=[0, 2, 1, 3]), merged_shape])
        return self.op("MatMul", [merged, self.weight("wo", HIDDEN, HIDDEN)])

    def gelu(self, x: str) -> str:
        erf = self.op("Erf", [self.op("Div", [x, self.const("sqrt2", np.array(np.sqrt(2.0), np.float32))])])
        one_plus = self.op("Add", [erf, self.const("one", np.array(1.0, np.float32))])
        return self.op("Mul", [self.op("Mul", [x, one_plus]), self.const("half", np.array(0.5, np.float32))])


def build_encoder(seed: int = 0) -> onnx.ModelProto:
    b = Builder(seed)
    x = "x"
    h = b.op("Add", [x, b.attention(b.layernorm(x))])
    ffn = b.op("MatMul", [b.gelu(b.op("MatMul", [b.layernorm(h), b.weight("w1", HIDDEN, FFN)])), b.weight("w2", FFN, HIDDEN)])
    y = b.op("Add", [h, ffn])
    b.nodes.append(helper.make_node("Identity", [y], ["y"], name="output"))
    dims = ["batch", "seq", HIDDEN]
    graph = helper.make_graph(
        b.nodes, "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "encoder.onnx"))
    args = parser.parse_args()
    Path(args.out).write_bytes(build_encoder().SerializeToString())
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
