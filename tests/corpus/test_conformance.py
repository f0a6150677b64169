"""Issue 17, item 5: onnx's per-operator node tests through ``dnnr compile`` (onnx target).

Every case dnnr compiles must reproduce onnx's expected outputs in onnxruntime, the
written model must load wherever the case's own model does, and nothing may raise a
traceback; a refusal (a clear error) is allowed. The operators and cases covered are
printed (``pytest -s`` shows them).
"""

from __future__ import annotations

from egraph_compiler import pipeline
from tests.corpus import conformance


def test_node_tests_never_give_a_wrong_answer() -> None:
    outcomes = conformance.run(conformance.node_cases(), pipeline.load_rules())
    ops = outcomes.covered_ops()
    print(f"\nonnx node tests, onnx target: {len(outcomes.match)} cases match, "
          f"{len(outcomes.refused)} refused, {len(outcomes.oracle)} not reproducible by "
          f"onnxruntime itself; {len(ops)} operators covered: {', '.join(ops)}")
    assert len(outcomes.match) >= 400, "the conformance run compiled far fewer cases than it did"
    assert not outcomes.wrong, "\n".join(f"{k}: {v}" for k, v in sorted(outcomes.wrong.items()))
