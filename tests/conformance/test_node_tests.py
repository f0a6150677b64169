"""Issue 17 items 5–7: every onnx node-test case through dnnr, onnx target and OpenCL.

One run (`coverage.measure`, cases merged per opset, one saturation shared by both
targets) gives each in-scope case an outcome per target: match, or a clear refusal.
A wrong answer — values, shapes or dtypes that differ, a written model onnxruntime
will not load, a traceback — fails, naming the case. Every case of onnx's node tests,
in scope or not, is also imported at its own opset: it loads or is refused with a
`DnnrError`, never a traceback. The coverage lines are printed (``pytest -s``).
"""

from __future__ import annotations

import pytest

from egraph_compiler import ir
from tests.conformance import cases, coverage, runner

# Measured with onnx 1.23.2 / onnxruntime 1.32: session 5 onnx target 902 cases, OpenCL
# 718; session 6 (sequence, signal, vision operators, run-time axes) about 1,208 and 810;
# session 7 rtshape (sizes from input values specialised at run time) OpenCL 1,004 (+194);
# session 7 opsk (ConvTranspose, TopK, LpPool, Q/DQ, the integer operators, float16,
# LayerNorm statistics, ...) onnx +13 (1,221) and, merged with rtshape, OpenCL 1,105 (+101);
# session 7 opsk2 (Pad edge/reflect/wrap; Resize cubic, antialias, tf_crop_and_resize,
# axes, keep_aspect_ratio_policy) OpenCL 1,132 (+27: all 6 Pad and 37 Resize cases);
# session 8 opsk3 OpenCL 1,173 (+41: NonZero, Compress, Unique, NonMaxSuppression in
# segments, 21; reductions over an empty set, 14; LayerNormalization expansions whose
# Concat of shapes reads an empty piece, 6), onnx unchanged; then the lead's change
# (an output that folds to a constant once the input values are known is served from the
# weights: the windows, MelWeightMatrix, Range) OpenCL 1,190 (+17).
# A floor, so a change that quietly refuses much more fails here instead of passing.
FLOOR = {"onnx": 1113, "opencl": 1190}


@pytest.fixture(scope="module")
def measured() -> coverage.Coverage:
    result = coverage.measure()
    for target in runner.TARGETS:
        print("\n" + result.summary(target))
    return result


@pytest.mark.parametrize("target", runner.TARGETS)
def test_node_tests_never_give_a_wrong_answer(measured: coverage.Coverage, target: str) -> None:
    outcomes = measured.results.by_target[target]
    assert not outcomes.wrong, "\n".join(f"{target} {k}: {v}" for k, v in sorted(outcomes.wrong.items()))
    assert len(outcomes.match) >= FLOOR[target], measured.summary(target)


def test_every_node_test_model_imports_or_is_refused_clearly() -> None:
    """All of onnx's node tests (sequences, opsets past 21 and excluded operators too)."""
    tracebacks = {}
    for case in cases.all_cases():
        try:
            ir.load_onnx(case.model)
        except ir.DnnrError:
            pass
        except Exception as error:  # noqa: BLE001 - the very thing this test looks for
            tracebacks[case.name] = f"{type(error).__name__}: {error}"
    assert not tracebacks, "\n".join(f"{k}: {v}" for k, v in sorted(tracebacks.items()))
