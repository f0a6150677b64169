"""The verifier's safety net under Z3's resource limit (egraph_compiler/verify/watchdog.py)
caps the CPU time of the checking thread, not wall time: a check that Z3's own
accounting would let run on ends once its CPU time is spent, and time the thread
spends not running (sleeping, or waiting for a busy machine's cores) does not count."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import z3

from egraph_compiler.verify import check, watchdog


def _hard_query() -> list[z3.BoolRef]:
    """Fermat's cubic case over the integers: Z3 searches without end (nonlinear)."""
    x, y, z = z3.Ints("wd_x wd_y wd_z")
    return [x > 0, y > 0, z > 0, x * x * x + y * y * y == z * z * z]


def _easy_query() -> list[z3.BoolRef]:
    a = z3.Int("wd_a")
    return [a > 1, a < 3]


def test_a_hard_check_ends_when_its_cpu_time_is_spent() -> None:
    solver = z3.Solver()
    solver.add(*_hard_query())
    cpu, wall = time.thread_time(), time.monotonic()
    with watchdog.cpu_cap(0.3, solver.ctx) as cap:
        result = solver.check()
    spent = time.thread_time() - cpu
    assert result == z3.unknown and "interrupt" in solver.reason_unknown()
    assert cap.fired
    assert spent >= 0.25  # it ran its CPU time, and was not cut short by the wall clock
    assert time.monotonic() - wall < 30  # and then ended
    # the interrupt does not reach the next check of the same context
    after = z3.Solver()
    after.add(*_easy_query())
    assert after.check() == z3.sat


def test_sleeping_does_not_count() -> None:
    solver = z3.Solver()
    solver.add(*_easy_query())
    with watchdog.cpu_cap(0.2, solver.ctx) as cap:
        time.sleep(0.6)  # three times the cap in wall time, almost no CPU time
        result = solver.check()
    assert result == z3.sat
    assert not cap.fired


def test_the_verifier_solver_caps_a_check_whose_resource_count_does_not_bind(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a resource limit so large that it never binds: only the CPU cap can end the check
    monkeypatch.setattr(check, "RLIMIT_PER_SECOND", 10**12)
    check._SOLVER.clear()
    budget = check.Budget.of_seconds(0.1)  # a CPU cap of 0.1 s x CPU_SLACK
    cpu = time.thread_time()
    status, _ = check._Solver(0.1, budget).check(_hard_query())
    spent = time.thread_time() - cpu
    check._SOLVER.clear()
    assert status == "unknown"
    assert 0.1 * check.CPU_SLACK * 0.8 <= spent < 0.1 * check.CPU_SLACK * 5  # no retry seeds
    assert budget.exhausted()  # the tier's check loop stops here


def test_nested_caps_restore_the_outer_one() -> None:
    solver = z3.Solver()
    solver.add(*_hard_query())
    with watchdog.cpu_cap(0.3, solver.ctx) as outer:
        with watchdog.cpu_cap(60.0, solver.ctx) as inner:
            pass
        result = solver.check()
    assert result == z3.unknown and outer.fired and not inner.fired


def _capped_in_child(queue: multiprocessing.Queue) -> None:
    z3.z3._main_ctx = None  # as the verifier's workers do (`verify._fresh_z3_context`)
    solver = z3.Solver()
    solver.add(*_hard_query())
    queue.put(str(watchdog.check_within(solver, 0.2)))


def test_a_forked_worker_gets_its_own_watchdog() -> None:
    # the parent's watchdog thread exists (the tests above started it) and is not
    # inherited by a fork: `verify_rules`' forked workers must start their own
    with watchdog.cpu_cap(10.0):
        pass
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_capped_in_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert queue.get(timeout=1) == "unknown"
