"""Benchmark `dnnr verify` on the shipped library (prints, asserts nothing).

    python benchmarks/verify.py [--jobs 2] [--timeout 30] [PATHS...]

Verifies every rule in ``rules/`` (or PATHS) twice with a fresh cache directory:
cold (nothing cached) and warm (everything cached). Prints seconds per rule (cold),
the slowest rules, the number of rules per verdict and per failing stage, and the
whole-library seconds cold and warm (target: under 60 s cold on 2 cores).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from egraph_compiler import dsl, verify

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[str(ROOT / "rules")])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    ruleset = dsl.load_rules(args.paths)
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        cold = verify.verify_rules(ruleset, jobs=args.jobs, cache_dir=cache,
                                   timeout_s=args.timeout)
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        warm = verify.verify_rules(ruleset, jobs=args.jobs, cache_dir=cache,
                                   timeout_s=args.timeout)
        warm_s = time.perf_counter() - start
    print(f"{'rule':40s} {'verdict':8s} {'stage':12s} seconds")
    for v in cold:
        print(f"{v.rule:40s} {v.status:8s} {v.stage:12s} {v.seconds:7.2f}")
    print("\nslowest:")
    for v in sorted(cold, key=lambda v: -v.seconds)[:8]:
        print(f"  {v.rule:38s} {v.seconds:7.2f} s  {v.status}")
    counts = verify.summary(cold)
    stages = Counter(v.stage for v in cold if not v.ok)
    per_rule = sum(v.seconds for v in cold) / max(1, len(cold))
    print(f"\n{counts['rules']} rules: {counts['proved']} proved, {counts['failed']} failed, "
          f"{counts['unknown']} unknown; not proved by stage: {dict(stages)}")
    print(f"cold: {cold_s:.1f} s wall on {args.jobs} job(s) ({per_rule:.2f} s per rule, "
          f"summed over workers)")
    print(f"warm: {warm_s:.2f} s wall, {sum(v.cached for v in warm)} of {len(warm)} cached")


if __name__ == "__main__":
    main()
