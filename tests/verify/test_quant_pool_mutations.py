"""The encodings quant.dnnr's pooling / Gemm / Concat rules rest on
(verify/quant_ops.py: average_pool, global_average_pool and the integer operators
QGemmInt, QConcatInt, QGlobalAveragePoolInt defined as Q(op(DQ(...)))): wrong rules
over them are rejected with a counterexample that NumPy confirms."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from egraph_compiler import dsl, verify
from egraph_compiler.dsl.ast import RuleSet
from egraph_compiler.verify import Verdict

from .conftest import ROOT

QUANT = ROOT / "rules" / "quant.dnnr"
MUTATIONS = """
# The mean without its division.
rule m-gap-sum: GlobalAveragePool(?x) => ReduceSum(?x, axes=[2, 3], keepdims=1) when rank(?x) == 4
# Relu does not commute with a mean (it is not linear).
rule m-avgpool-relu: AveragePool(Relu(?x), kernel_shape=[2, 2]) => Relu(AveragePool(?x, kernel_shape=[2, 2])) when rank(?x) == 4
# A 2×2 average is not the window's maximum.
rule m-avgpool-max: AveragePool(?x, kernel_shape=[2, 2]) => MaxPool(?x, kernel_shape=[2, 2]) when rank(?x) == 4
# The inputs' scales swapped.
rule m-qdq-concat-swap-scales: QuantizeLinear(Concat(DequantizeLinear(?a, ?as, ?az), DequantizeLinear(?b, ?bs, ?bz), axis=?ax), ?ys, ?yz) => QConcatInt(?a, ?bs, ?az, ?b, ?as, ?bz, ?ys, ?yz, axis=?ax)
# The bias's zero point replaced by the input's.
rule m-qdq-gemm-bias-zero: QuantizeLinear(Gemm(DequantizeLinear(?a, ?as, ?az), DequantizeLinear(?b, ?bs, ?bz), DequantizeLinear(?c, ?cs, ?cz)), ?ys, ?yz) => QGemmInt(?a, ?as, ?az, ?b, ?bs, ?bz, ?c, ?cs, ?az, ?ys, ?yz) when rank(?c) == 1 and rank(?as) == 0 and rank(?az) == 0 and rank(?bs) == 0 and rank(?bz) == 0 and rank(?cs) == 0 and rank(?cz) == 0 and rank(?ys) == 0 and rank(?yz) == 0
# The pooled value kept in the input's quantisation.
rule m-qdq-gap-input-params: QuantizeLinear(GlobalAveragePool(DequantizeLinear(?x, ?xs, ?xz)), ?ys, ?yz) => QGlobalAveragePoolInt(?x, ?xs, ?xz, ?xs, ?xz)
"""


@pytest.fixture(scope="module")
def ruleset(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    path: Path = tmp_path_factory.mktemp("rules") / "quant_mutations.dnnr"
    path.write_text(f'use "{QUANT}"\nruleset quant_mutations\n{MUTATIONS}')
    return dsl.load_rules([str(path)])


@pytest.fixture(scope="module")
def verdicts(ruleset: RuleSet, tmp_path_factory: pytest.TempPathFactory) -> list[Verdict]:
    # the mutations only (the shipped quant rules they load are proved by test_library)
    mutations = dataclasses.replace(ruleset, rules=[r for r in ruleset.rules if r.ruleset == "quant_mutations"])
    result = verify.verify_rules(mutations, jobs=2, cache_dir=tmp_path_factory.mktemp("c"),
                                 timeout_s=60, suggest_guards=False)  # each fails in ~2 s; slack for CI
    print(verify.render_text(result))
    return result


def test_every_quant_mutation_is_rejected_with_a_confirmed_counterexample(verdicts: list[Verdict]) -> None:
    assert len(verdicts) == MUTATIONS.count("\nrule ")
    for v in verdicts:
        assert v.status == "failed", v
        assert v.counterexample is not None and v.counterexample.replay == "CONFIRMED", v
