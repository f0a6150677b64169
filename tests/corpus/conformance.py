"""onnx's per-operator node tests through dnnr (onnx target): which compile, which match.

Compiling ~900 one-node models one by one costs a saturation each (about a second), so
cases of one opset are merged into one model (every value name prefixed by its case),
compiled once, and run once; a merged model that does not compile or load is split in
halves until the case at fault is alone. Every case ends in one outcome:

- ``refused``: dnnr's import or compile raised a clear `DnnrError` (an unsupported
  construct): allowed;
- ``match``: onnxruntime on the written model reproduces onnx's expected outputs;
- ``wrong``: it does not (a silent wrong answer), or the written model does not load in
  onnxruntime though the case's own model does, or dnnr raised something other than a
  `DnnrError` (a traceback): never allowed.

Cases onnxruntime itself cannot load or reproduce are ``oracle`` (not counted).
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort

from egraph_compiler import ir, pipeline
from egraph_compiler.dsl.ast import RuleSet


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    inputs: list[np.ndarray]
    expected: list[np.ndarray]
    rtol: float
    atol: float

    @property
    def opset(self) -> int:
        return next(o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx"))

    @property
    def op(self) -> str:
        return self.model.graph.node[0].op_type if self.model.graph.node else "?"

    def feeds(self) -> dict[str, np.ndarray]:
        names = [i.name for i in self.model.graph.input]
        return {n: np.asarray(v) for n, v in zip(names, self.inputs, strict=False)}


@dataclass
class Outcomes:
    match: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    wrong: dict[str, str] = field(default_factory=dict)
    oracle: dict[str, str] = field(default_factory=dict)
    ops: dict[str, str] = field(default_factory=dict)  # case -> its operator

    def covered_ops(self) -> list[str]:
        return sorted({self.ops[c] for c in self.match})


def node_cases() -> list[Case]:
    """onnx's node test cases with tensor inputs and outputs (onnx generates them)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collected = node.collect_testcases(None)
    cases = []
    for test in collected:
        if test.kind != "node" or not test.data_sets or test.model is None:
            continue
        inputs, expected = test.data_sets[0]
        if not all(isinstance(v, np.ndarray | np.generic) for v in [*inputs, *expected]):
            continue  # sequences / optionals: excluded by design (issue 17 item 6)
        cases.append(Case(test.name, test.model, list(inputs), list(expected),
                          max(test.rtol, 1e-4), max(test.atol, 1e-5)))
    return cases


def _close(got: list[np.ndarray], want: list[np.ndarray], rtol: float, atol: float) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return f"output {index}: shape {g.shape} != {w.shape}"
        if g.dtype != w.dtype:
            return f"output {index}: dtype {g.dtype} != {w.dtype}"
        if w.dtype.kind in "fc":
            if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
                return f"output {index}: max |error| {np.nanmax(np.abs(g.astype(float) - w)):.3g}"
        elif not np.array_equal(g, w):
            return f"output {index}: values differ"
    return None


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _prefixed(case: Case, prefix: str) -> tuple[onnx.GraphProto, dict[str, np.ndarray]]:
    graph = onnx.GraphProto()
    graph.CopyFrom(case.model.graph)
    rename = lambda n: f"{prefix}{n}" if n else n  # noqa: E731
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = rename(value.name)
    for init in graph.initializer:
        init.name = rename(init.name)
    for node in graph.node:
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
        node.name = rename(node.name or node.op_type)
    return graph, {rename(k): v for k, v in case.feeds().items()}


def _merged(cases: list[Case]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    graph = onnx.GraphProto(name="conformance")
    feeds: dict[str, np.ndarray] = {}
    for index, case in enumerate(cases):
        part, part_feeds = _prefixed(case, f"c{index}_")
        graph.node.extend(part.node)
        graph.input.extend(part.input)
        graph.output.extend(part.output)
        graph.initializer.extend(part.initializer)
        graph.value_info.extend(part.value_info)
        feeds.update(part_feeds)
    model = onnx.helper.make_model(graph, opset_imports=list(cases[0].model.opset_import))
    model.ir_version = max(c.model.ir_version for c in cases)
    return model, feeds


def _compile(model: onnx.ModelProto, rules: RuleSet) -> onnx.ModelProto:
    graph, _ = pipeline.optimize(ir.load_onnx(model), rules)
    return ir.to_onnx(graph)


def _settle(cases: list[Case], rules: RuleSet, outcomes: Outcomes) -> None:
    """Compile and run ``cases`` merged; split on any failure down to single cases."""
    model, feeds = _merged(cases)
    try:
        written = _compile(model, rules)
        results = _run(written, feeds)
    except Exception as error:
        if len(cases) > 1:
            half = len(cases) // 2
            _settle(cases[:half], rules, outcomes)
            _settle(cases[half:], rules, outcomes)
            return
        case = cases[0]
        message = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        if isinstance(error, ir.DnnrError):
            outcomes.refused[case.name] = message
        elif isinstance(error, ort.capi.onnxruntime_pybind11_state.Fail | RuntimeError) \
                and "written" not in message:
            outcomes.wrong[case.name] = f"onnxruntime refuses the written model: {message}"
        else:
            outcomes.wrong[case.name] = f"traceback: {type(error).__name__}: {message}"
        return
    position = 0
    for case in cases:
        count = len(case.expected)
        mismatch = _close(results[position:position + count], case.expected, case.rtol, case.atol)
        position += count
        if mismatch is None:
            outcomes.match.append(case.name)
        else:
            outcomes.wrong[case.name] = mismatch


def run(cases: list[Case], rules: RuleSet, batch: int = 64,
        log: Callable[[str], None] = lambda _: None) -> Outcomes:
    outcomes = Outcomes()
    by_opset: dict[int, list[Case]] = defaultdict(list)
    for case in cases:
        outcomes.ops[case.name] = case.op
        try:
            oracle = _close(_run(case.model, case.feeds()), case.expected, case.rtol, case.atol)
        except Exception as error:
            oracle = f"onnxruntime cannot run it: {str(error).splitlines()[0][:120]}"
        if oracle is not None:
            outcomes.oracle[case.name] = oracle
            continue
        try:
            ir.load_onnx(case.model)
        except ir.DnnrError as error:
            outcomes.refused[case.name] = str(error).splitlines()[0][:200]
            continue
        except Exception as error:
            outcomes.wrong[case.name] = f"traceback on import: {type(error).__name__}: {error}"
            continue
        by_opset[case.opset].append(case)
    for opset, group in sorted(by_opset.items()):
        for start in range(0, len(group), batch):
            _settle(group[start:start + batch], rules, outcomes)
            log(f"opset {opset}: {min(start + batch, len(group))}/{len(group)}")
    return outcomes
