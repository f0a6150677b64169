"""Per-operator conformance: the onnx wheel's backend node tests, for every operator the
OpenCL backend generates code for, compiled one case at a time and run on PoCL."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import onnx
import pytest

from egraph_compiler.backends.opencl import compile_graph, load
from egraph_compiler.fusion.tables import ANCHOR_OPS, ELEMENTWISE_OPS, LAYOUT_OPS
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir import DnnrError, load_onnx
from tests.backends.opencl.helpers import infer_types

CACHE = Path(__file__).resolve().parents[3] / ".dnnr-cache" / "onnx_node_cases.pkl"
SUPPORTED = set(ELEMENTWISE_OPS) | set(LAYOUT_OPS) | set(ANCHOR_OPS)
CASES_PER_OPERATOR = 1
MAX_OPSET = 21  # what the importer reads
# Whole families the backend does not implement (listed, not skipped silently).
NOT_IMPLEMENTED = ("training", "expanded", "_mask", "ceil_mode", "reflect", "edge", "wrap",
                   "dilations", "_indices", "bfloat16", "float16", "double", "string",
                   "uint", "int8", "int16", "fp8", "FLOAT8", "INT4", "_stash_type", "_log_prob", "layer_normalization", "with_argmax")

Case = tuple[str, str, bytes, list[np.ndarray], list[np.ndarray]]


def _collect() -> list[Case]:
    """The onnx wheel's node test cases (generated in memory, cached on disk: it takes ~40 s)."""
    if CACHE.exists():
        return pickle.loads(CACHE.read_bytes())
    from onnx.backend.test.case import node

    picked: dict[str, list[Case]] = {}
    for case in node.collect_testcases(None):
        if any(tag in case.name for tag in NOT_IMPLEMENTED) or case.model is None:
            continue
        ops = {n.op_type for n in case.model.graph.node}
        opset = max((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")),
                    default=0)
        if len(ops) != 1 or not case.data_sets or opset > MAX_OPSET + 1:
            continue
        if opset == MAX_OPSET + 1:  # opset 22 only added bfloat16 to these operators
            for entry in case.model.opset_import:
                if entry.domain in ("", "ai.onnx"):
                    entry.version = MAX_OPSET
        op = ops.pop()
        inputs, outputs = case.data_sets[0]
        if not all(isinstance(x, np.ndarray) for x in [*inputs, *outputs]):
            continue
        if op in SUPPORTED and len(picked.setdefault(op, [])) < CASES_PER_OPERATOR and \
                _importable(case.model):
            picked[op].append((op, case.name, case.model.SerializeToString(),
                               list(inputs), list(outputs)))
    cases = [c for _, group in sorted(picked.items()) for c in group]
    CACHE.parent.mkdir(exist_ok=True)
    partial = CACHE.with_suffix(f".{os.getpid()}")
    partial.write_bytes(pickle.dumps(cases))
    partial.replace(CACHE)
    return cases


def _importable(model: onnx.ModelProto) -> bool:
    """Cases the importer and shape inference (other stages) turn into a static graph."""
    try:
        graph = infer_types(load_onnx(model))
        view = GraphView(graph)
        return all(view.shape(v.name) is not None for v in graph.outputs)
    except DnnrError:
        return False


CASES = _collect()


def test_conformance_coverage_is_reported() -> None:
    operators = sorted({case[0] for case in CASES})
    print(f"\nOpenCL conformance: {len(operators)} operators, {len(CASES)} cases")
    assert len(operators) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c[1] for c in CASES])
def test_node_case(case: Case, tmp_path: Path) -> None:
    op, name, raw, inputs, expected = case
    model = onnx.ModelProto.FromString(raw)
    try:
        graph = infer_types(load_onnx(model))
        GraphView(graph).shape(graph.outputs[0].name)
    except DnnrError as error:  # reported, not silent: the importer/shapes stage owns these
        pytest.skip(f"{name}: not importable with static shapes: {error}")
    compile_graph(graph, tmp_path)
    feeds = {info.name: array for info, array in zip(model.graph.input, inputs, strict=False)}
    outputs = load(tmp_path).run({v.name: feeds[v.name] for v in graph.inputs})
    for info, want in zip(model.graph.output, expected, strict=False):
        got = outputs[info.name]
        assert got.shape == want.shape, f"{name}: {info.name} shape {got.shape} != {want.shape}"
        if want.dtype == np.bool_:
            np.testing.assert_array_equal(got.astype(bool), want, err_msg=name)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=name)
