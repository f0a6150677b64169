"""Small builders shared by the egraph and extract tests: rule sets from text,
graphs from (op, inputs, output, attrs) tuples, and an onnxruntime run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from egraph_compiler import dsl, ir
from egraph_compiler.ir.graph import Graph, Node, TensorType, Value
from tests.modelzoo import run_ort

OPERATORS = Path(__file__).resolve().parents[2] / "rules" / "operators.dnnr"


def rules_from_text(tmp_path: Path, text: str, name: str = "test.dnnr") -> dsl.RuleSet:
    """A RuleSet from rule text; the real operator declarations come first."""
    path = tmp_path / name
    path.write_text(f'use "{OPERATORS}"\n' + text)
    return dsl.load_rules([path])


def graph(
    inputs: dict[str, tuple],
    nodes: list[tuple],
    outputs: list[str],
    constants: dict[str, np.ndarray] | None = None,
    types: dict[str, tuple] | None = None,
    dtype: str = "float32",
) -> Graph:
    """``nodes``: (op, inputs, outputs, attrs-dict[, name]); ``types``: value -> shape."""
    constants = constants or {}
    shapes = dict(inputs)
    shapes.update(types or {})
    built = []
    for i, spec in enumerate(nodes):
        op, ins, outs, attrs = spec[:4]
        name = spec[4] if len(spec) > 4 else f"n{i}"
        built.append(Node(op, tuple(ins), tuple(outs), tuple(sorted(attrs.items())), name))
    all_types = {k: TensorType(dtype, tuple(v)) for k, v in shapes.items()}
    for k, v in constants.items():
        all_types[k] = TensorType(str(v.dtype), tuple(v.shape))
    return Graph(
        "test",
        inputs=tuple(Value(k, all_types[k]) for k in inputs),
        outputs=tuple(Value(k, all_types.get(k, TensorType(dtype, None))) for k in outputs),
        nodes=tuple(built),
        constants=constants,
        types=all_types,
    )


def run(g: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return run_ort(ir.to_onnx(g), feeds)
