"""Operator and case coverage of onnx's node tests, per stage and per target.

    PYTHONPATH=. python3 -m tests.conformance.coverage [--table]

prints, for the onnx target and for OpenCL, "operators covered N/M, cases covered K/L"
(M: the default-domain operators of opsets 7–21 less the excluded families of
`scope.EXCLUDED`; L: their node-test cases that are tensor-only, valid at an opset
7–21 and reproduced by onnxruntime), and with ``--table`` one line per operator:
its cases, how many import, get shapes, match on each target, and the first refusal.
An operator is covered when at least one of its cases matches.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from egraph_compiler import ir, ops, pipeline, shapes
from tests.conformance import cases as node_cases
from tests.conformance import runner, scope


@dataclass
class Coverage:
    results: runner.Results
    in_scope: list[runner.Case]
    out_of_scope: dict[str, str] = field(default_factory=dict)  # case -> why
    imported: set[str] = field(default_factory=set)
    shaped: set[str] = field(default_factory=set)
    first_refusal: dict[str, str] = field(default_factory=dict)  # op -> a refusal message

    def counted(self) -> list[runner.Case]:
        """In-scope cases onnxruntime reproduces (the L of "cases covered K/L")."""
        return [c for c in self.in_scope if c.name not in self.results.oracle]

    def summary(self, target: str) -> str:
        outcomes = self.results.by_target[target]
        universe = scope.in_scope_ops()
        counted = self.counted()
        return (f"{target}: operators covered {len(outcomes.covered_ops())}/{len(universe)}, "
                f"cases covered {len(outcomes.match)}/{len(counted)} "
                f"({len(outcomes.refused)} refused, {len(outcomes.wrong)} wrong; "
                f"{len(self.results.oracle)} not reproduced by onnxruntime, "
                f"{len(self.out_of_scope)} out of scope; "
                f"{self.results.seconds.get(target, 0):.0f} s)")

    def table(self) -> list[str]:
        per_op: dict[str, list[str]] = defaultdict(list)
        for case in self.counted():
            per_op[case.op].append(case.name)
        matched = {t: Counter(self.results.by_target[t].ops[c]
                              for c in self.results.by_target[t].match) for t in runner.TARGETS}
        lines = [f"{'operator':28} cases import shapes onnx opencl  first refusal"]
        for op, why in scope.operators().items():
            if why is not None:
                lines.append(f"{op:28} excluded: {why}")
                continue
            names = per_op.get(op, [])
            lines.append(f"{op:28} {len(names):5} {sum(n in self.imported for n in names):6} "
                         f"{sum(n in self.shaped for n in names):6} {matched['onnx'][op]:4} "
                         f"{matched['opencl'][op]:6}  {self.first_refusal.get(op, '')[:110]}")
        return lines


def in_scope_cases() -> tuple[list[runner.Case], dict[str, str]]:
    """The node-test cases of in-scope operators valid at opsets 7–21, and why the others are not."""
    universe = scope.operators()
    kept, dropped = [], {}
    for case in node_cases.all_cases():
        op = scope.operator_of(case)
        if universe.get(op, "") is None and not case.tensors_only:
            dropped[case.name] = "non-tensor inputs or outputs"
            continue
        if op not in universe:
            dropped[case.name] = f"{op} is not an operator of opsets 7–21"
            continue
        if universe[op] is not None:
            dropped[case.name] = f"{op}: excluded ({universe[op]})"
            continue
        model = scope.at_supported_opset(case)
        if model is None:
            dropped[case.name] = f"not a valid model at opsets {scope.MIN_OPSET}–{scope.MAX_OPSET}"
            continue
        kept.append(runner.Case(case.name, op, model, list(case.inputs), list(case.expected),
                                case.rtol, case.atol))
    return kept, dropped


def measure(targets: tuple[str, ...] = runner.TARGETS, log=lambda _: None) -> Coverage:
    rules = pipeline.load_rules()
    kept, dropped = in_scope_cases()
    coverage = Coverage(runner.run(kept, rules, targets, log=log), kept, dropped)
    with ops.using(rules):
        for case in coverage.counted():
            try:
                graph = ir.load_onnx(case.model)
                coverage.imported.add(case.name)
                shapes.infer_shapes(graph)
                coverage.shaped.add(case.name)
            except Exception as error:  # noqa: BLE001 - measured, the tests judge it
                coverage.first_refusal.setdefault(case.op, str(error).strip().splitlines()[0])
    for target in targets:
        for name, why in sorted(coverage.results.by_target[target].refused.items()):
            op = coverage.results.by_target[target].ops[name]
            coverage.first_refusal.setdefault(op, f"[{target}] {why}")
    return coverage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="one line per operator")
    parser.add_argument("--target", choices=runner.TARGETS, action="append")
    args = parser.parse_args(argv)
    coverage = measure(tuple(args.target or runner.TARGETS), log=lambda m: print(m, file=sys.stderr))
    for target in args.target or runner.TARGETS:
        print(coverage.summary(target))
        for name, why in sorted(coverage.results.by_target[target].wrong.items()):
            print(f"  WRONG {target} {name}: {why}")
    if args.table:
        print("\n".join(coverage.table()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
