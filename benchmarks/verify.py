"""Benchmark `dnnr verify` on the shipped library (prints, asserts nothing).

    python benchmarks/verify.py [--jobs 2] [--timeout 30] [PATHS...]

Verifies every rule in ``rules/`` (or PATHS) twice with a fresh cache directory:
cold (nothing cached) and warm (everything cached). Prints seconds per rule (cold),
the slowest rules, the number of rules per verdict and per failing stage, and the
whole-library seconds cold and warm (target: under 60 s cold on 2 cores).

    python benchmarks/verify.py --per-rule [--profile FILE] [PATHS...]

instead verifies every rule in this process, one after the other, each in a fresh Z3
context, and prints each rule's CPU seconds and how many of them Z3's checks took (the
rest is building the encodings in Python), slowest first; ``--profile FILE`` writes a
cProfile of it (read it with ``python -m pstats FILE``).

    python benchmarks/verify.py --calibrate [PATHS...]

instead verifies every rule in this process and prints how many Z3 resource units
("rlimit") a CPU second of its longer checks is: the rate behind
``check.RLIMIT_PER_SECOND``, which turns the verifier's budgets in seconds into
deterministic resource limits.
"""

from __future__ import annotations

import argparse
import cProfile
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path

import z3

from egraph_compiler import dsl, verify
from egraph_compiler.dsl.ast import RuleSet
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.check import RLIMIT_PER_SECOND, rlimit_count
from egraph_compiler.verify.rule_check import verify_rule

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[str(ROOT / "rules")])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--per-rule", action="store_true")
    parser.add_argument("--profile", metavar="FILE")
    args = parser.parse_args()
    ruleset = dsl.load_rules(args.paths)
    if args.calibrate:
        calibrate(ruleset, args.timeout)
        return
    if args.per_rule:
        cpu_per_rule(ruleset, args.timeout, args.profile)
        return
    with tempfile.TemporaryDirectory() as cache:
        start, cpu_start = time.perf_counter(), _cpu_seconds()
        cold = verify.verify_rules(ruleset, jobs=args.jobs, cache_dir=cache,
                                   timeout_s=args.timeout)
        cold_s, cold_cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
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
          f"summed over workers), {cold_cpu:.1f} CPU s (this process and its workers; "
          "the wall time on idle cores is about this over the jobs)")
    print(f"warm: {warm_s:.2f} s wall, {sum(v.cached for v in warm)} of {len(warm)} cached")


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished workers."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def cpu_per_rule(ruleset: RuleSet, timeout_s: float, profile: str | None) -> None:
    """CPU seconds per rule, and the part of them spent in Z3's checks."""
    in_z3 = [0.0, 0]
    plain_check = z3.Solver.check

    def timed(solver: z3.Solver, *assumptions: z3.ExprRef) -> z3.CheckSatResult:
        cpu = time.process_time()
        try:
            return plain_check(solver, *assumptions)
        finally:
            in_z3[0] += time.process_time() - cpu
            in_z3[1] += 1

    profiler = cProfile.Profile() if profile else None
    rows: list[tuple[float, float, int, str, str]] = []
    z3.Solver.check = timed  # type: ignore[method-assign]
    try:
        for rule in ruleset.rules:
            z3.z3._main_ctx = None  # a fresh Z3 context, as in verify_rules' workers
            in_z3[:] = [0.0, 0]
            cpu = time.process_time()
            if profiler is not None:
                profiler.enable()
            verdict = verify_rule(rule, load_semantics(ruleset.ops), timeout_s)
            if profiler is not None:
                profiler.disable()
            rows.append((time.process_time() - cpu, in_z3[0], int(in_z3[1]), rule.name,
                         verdict.status))
    finally:
        z3.Solver.check = plain_check  # type: ignore[method-assign]
    print(f"{'rule':40s} {'verdict':8s}   CPU s   in Z3  checks")
    for cpu, z3_cpu, checks, name, status in sorted(rows, reverse=True):
        print(f"{name:40s} {status:8s} {cpu:7.2f} {z3_cpu:7.2f} {checks:7d}")
    total, total_z3 = sum(r[0] for r in rows), sum(r[1] for r in rows)
    print(f"\n{len(rows)} rules: {total:.1f} CPU s, {total_z3:.1f} of them in Z3's checks "
          "(special-value records not included)")
    if profiler is not None and profile:
        profiler.dump_stats(profile)


def calibrate(ruleset: RuleSet, timeout_s: float) -> None:
    """Z3 resource units per CPU second over every check longer than 0.2 s."""
    samples: list[tuple[float, int]] = []
    plain_check = z3.Solver.check

    def measured(solver: z3.Solver, *assumptions: z3.ExprRef) -> z3.CheckSatResult:
        before, cpu = rlimit_count(solver), time.process_time()
        result = plain_check(solver, *assumptions)
        samples.append((time.process_time() - cpu, rlimit_count(solver) - before))
        return result

    z3.Solver.check = measured  # type: ignore[method-assign]
    try:
        sems = load_semantics(ruleset.ops)
        for rule in ruleset.rules:
            verify_rule(rule, sems, timeout_s, suggest=False)
    finally:
        z3.Solver.check = plain_check  # type: ignore[method-assign]
    long = [(cpu, units) for cpu, units in samples if cpu > 0.2]
    rates = sorted(units / cpu for cpu, units in long)
    cpu_total, units_total = sum(c for c, _ in long), sum(u for _, u in long)
    print(f"{len(samples)} checks, {len(long)} over 0.2 s: {cpu_total:.1f} CPU s, "
          f"{units_total / 1e6:.1f} M units")
    if rates:
        print(f"units per CPU second: {units_total / cpu_total / 1e6:.2f} M overall, "
              f"{rates[0] / 1e6:.2f} to {rates[-1] / 1e6:.2f} M per check "
              f"(median {rates[len(rates) // 2] / 1e6:.2f} M); "
              f"in use: {RLIMIT_PER_SECOND / 1e6:.2f} M")


if __name__ == "__main__":
    main()
