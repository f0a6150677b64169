"""onnx's per-operator node tests, every one of them, read once and cached on disk.

`all_cases()` gives each node-test case of the installed onnx wheel (about 1,600; onnx
generates them in ~40 s, so they are pickled under ``~/.cache/dnnr/conformance`` keyed by
the onnx version). A case keeps its model as bytes, its first data set, its tolerances
and whether every input and output is a tensor (the others hold sequences or optionals,
which dnnr's IR does not represent: `coverage.EXCLUDED`).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import onnx

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dnnr" / "conformance"
_FORMAT = 1  # bump when `NodeCase` changes


@dataclass(frozen=True)
class NodeCase:
    name: str
    op: str  # the operator under test (the first node's; "expanded" cases hold several)
    opset: int  # the default-domain opset the case's model imports
    model: bytes
    inputs: tuple[np.ndarray, ...]
    expected: tuple[np.ndarray, ...]
    rtol: float
    atol: float
    tensors_only: bool  # every input and output is a tensor

    def proto(self) -> onnx.ModelProto:
        return onnx.ModelProto.FromString(self.model)

    def feeds(self) -> dict[str, np.ndarray]:
        names = [i.name for i in self.proto().graph.input]
        return {n: np.asarray(v) for n, v in zip(names, self.inputs, strict=False)}


def _is_tensor(value: object) -> bool:
    return isinstance(value, np.ndarray | np.generic)


def _collect() -> list[NodeCase]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = node.collect_testcases(None)
    cases = []
    for test in collected:
        if test.kind != "node" or test.model is None:
            continue
        model = test.model
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        inputs, expected = test.data_sets[0] if test.data_sets else ([], [])
        values = [*inputs, *expected]
        tensors = bool(test.data_sets) and all(_is_tensor(v) for v in values)
        cases.append(NodeCase(
            test.name, model.graph.node[0].op_type if model.graph.node else "?", opset,
            model.SerializeToString(),
            tuple(np.asarray(v) for v in inputs) if tensors else (),
            tuple(np.asarray(v) for v in expected) if tensors else (),
            max(test.rtol, 1e-4), max(test.atol, 1e-5), tensors))
    return sorted(cases, key=lambda c: c.name)


@cache
def all_cases() -> tuple[NodeCase, ...]:
    """Every node-test case of the installed onnx (cached per onnx version).

    The cases are collected in a fresh interpreter: onnx registers a case when its module
    is first imported, so a process where another test already called
    ``collect_testcases("Clip")`` would collect only the Clip cases (and cache them)."""
    path = CACHE_DIR / f"node-cases-{onnx.__version__}-{_FORMAT}.pkl"
    root = Path(__file__).resolve().parents[2]
    for attempt in range(2):
        if not path.exists():
            subprocess.run([sys.executable, "-c", "from tests.conformance.cases import write_cache; "
                            f"write_cache({str(path)!r})"], cwd=root, check=True,
                           env={**os.environ, "PYTHONPATH": str(root)})
        try:
            return tuple(pickle.loads(path.read_bytes()))
        except Exception:  # a damaged or foreign cache file: collect it again, once
            if attempt:
                raise
            path.unlink(missing_ok=True)
    raise AssertionError("unreachable")


def write_cache(path: str) -> None:
    """Collect every case (in a process that has imported no node-test module yet) and
    write them to ``path`` atomically."""
    from onnx.backend.test.case import node

    if node._NodeTestCases:  # noqa: SLF001 - onnx keeps the registry module-global
        raise RuntimeError("node-test cases were collected before write_cache ran")
    cases = _collect()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}")
    partial.write_bytes(pickle.dumps(cases))
    partial.replace(target)
