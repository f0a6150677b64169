"""The shipped library (rules/): every rule whose operators have a verifier encoding
is proved in its exact tier (reals, or unbounded integers), with its guards."""

from __future__ import annotations

import time

import pytest

from egraph_compiler import dsl, verify
from egraph_compiler.verify import Verdict

from .conftest import ROOT

# Shipped rules that use an operator or built-in without a verifier encoding, by what is
# missing: they must stay `unknown` (never proved); a rule leaving this set (a new
# encoding) or joining it (a new rule, a lost encoding) fails the test on purpose.
WITHOUT_ENCODING: dict[str, set[str]] = {
    "Conv / Gemm": {"bn-fold-conv", "bn-fold-conv-nobias", "bn-fold-gemm", "bn-fold-gemm-transb",
                    "scale-fold-conv", "scale-fold-conv-nobias", "bias-fold-conv",
                    "bias-fold-conv-nobias", "scale-fold-conv-left", "bias-fold-conv-left",
                    "scale-fold-gemm", "scale-fold-gemm-transb", "concat-conv-partition",
                    "concat-conv-partition-nobias", "concat-depthwise-partition"},
    "Reshape target values (vector, reshape_shape)": {
        "reshape-id", "reshape-reshape", "unsqueeze-to-reshape", "squeeze-to-reshape",
        "flatten-to-reshape", "reshape-const-target", "constant-of-shape-fold"},
    "Softmax / LogSoftmax / Flatten": {"softmax-unflatten", "logsoftmax-unflatten"},
    "QuantizeLinear / DequantizeLinear": {"qdq-conv", "qdq-matmul", "qdq-add", "qdq-mul",
                                          "qdq-requantize", "qdq-maxpool"},
}

# Shipped rules the verifier refutes, reported to the rules' owner (none today; an
# entry must keep failing, so the list cannot go stale).
KNOWN_REFUTED: set[str] = set()


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> list[Verdict]:
    ruleset = dsl.load_rules([str(ROOT / "rules")])
    start = time.perf_counter()
    result = verify.verify_rules(ruleset, jobs=2, cache_dir=tmp_path_factory.mktemp("c"),
                                 timeout_s=30, suggest_guards=False, machine_tiers=False)
    print(f"\nshipped library, exact tier, cold cache: {time.perf_counter() - start:.1f} s")
    print(verify.render_text([v for v in result if not v.ok]))
    return result


def test_encoded_rules_are_proved(verdicts: list[Verdict]) -> None:
    encoded = [v for v in verdicts if v.stage != "semantics"]
    assert len(encoded) >= 90
    for v in encoded:
        if v.rule in KNOWN_REFUTED:
            continue
        assert v.ok, verify.render_text([v])


def test_known_refuted_rules_still_fail(verdicts: list[Verdict]) -> None:
    by_name = {v.rule: v for v in verdicts}
    for name in KNOWN_REFUTED:
        v = by_name[name]
        assert v.status == "failed" and v.stage == "shape", v
        assert v.counterexample is not None and v.counterexample.replay == "CONFIRMED"


def test_rules_without_encodings_are_unknown_not_passed(verdicts: list[Verdict]) -> None:
    missing = [v for v in verdicts if v.stage == "semantics"]
    print(f"{len(missing)} rules use operators without an encoding:",
          sorted({v.message for v in missing}))
    assert all(v.status == "unknown" and not v.ok and "encoding" in v.message
               for v in missing), verify.render_text(missing)


def test_exactly_the_rules_without_encodings_are_unknown(verdicts: list[Verdict]) -> None:
    expected = set().union(*WITHOUT_ENCODING.values())
    missing = {v.rule for v in verdicts if v.stage == "semantics"}
    assert missing == expected, (sorted(missing - expected), sorted(expected - missing))
    assert len(verdicts) - len(missing) >= 127
