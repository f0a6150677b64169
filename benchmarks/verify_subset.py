"""CPU seconds of `dnnr verify` on some rules, in this process (prints, asserts nothing).

    python benchmarks/verify_subset.py [--paths rules] PATTERN...

Verifies every rule of ``--paths`` whose name matches a PATTERN (``transpose-*``) with
`verify_rule` (no cache, no worker processes) and prints its verdict, its CPU seconds
(Z3 included: it runs in this process), the proof methods, the rank guard the e-graph
adds, and the total. CPU seconds, unlike wall time, mean something on a shared
machine: compare two checkouts with ``PYTHONPATH=<checkout>``.
"""

from __future__ import annotations

import argparse
import fnmatch
import time

from egraph_compiler import dsl
from egraph_compiler.verify import rank_guard
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.rule_check import verify_rule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patterns", nargs="+")
    parser.add_argument("--paths", action="append", help="rule file or folder (repeatable; "
                        "default: rules)")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    ruleset = dsl.load_rules(args.paths or ["rules"])
    sems = load_semantics(ruleset.ops)
    total = 0.0
    for rule in ruleset.rules:
        if not any(fnmatch.fnmatch(rule.name, p) for p in args.patterns):
            continue
        start = time.process_time()
        verdict = verify_rule(rule, sems, args.timeout)
        spent = time.process_time() - start
        total += spent
        methods = ",".join(getattr(verdict, "methods", ())) or "-"
        print(f"{rule.name:36s} {verdict.status:8s} {spent:6.2f} CPU s  {methods:24s} "
              f"{rank_guard(rule, ruleset.ops)}")
    print(f"total: {total:.2f} CPU s")


if __name__ == "__main__":
    main()
