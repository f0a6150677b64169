"""A CPU-time cap on Z3 checks: the safety net behind the verifier's resource limits.

Z3's ``rlimit`` is the verifier's budget (`check.Budget`): counted by Z3 itself, so a
verdict does not depend on how busy the machine is. A few of Z3's procedures do not
count it, so a check still needs a second limit that always ends it. A wall-clock
``timeout`` made verdicts depend on the machine's load again (under a load of 10 on
two cores, checks that prove in seconds went ``unknown``); this cap counts the CPU
time of the thread that runs the check instead, which a busy machine does not inflate.

One daemon thread per process watches the armed check: it sleeps until the check
could have spent its CPU time (CPU time grows no faster than wall time on one thread),
reads the checking thread's CPU clock, and calls ``interrupt()`` on the check's Z3
context once the time is spent. Z3 then answers ``unknown`` with the reason
"interrupted". Arming and disarming are an attribute write under a lock: the thread
is woken only when it was idle, so a check of a millisecond costs no context switch.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

import z3

POLL_SECONDS = 0.1  # the longest the watchdog sleeps on one look: the cap's overshoot


def thread_cpu_clock() -> int:
    """The CPU clock of the calling thread, readable from another thread."""
    if hasattr(time, "pthread_getcpuclockid"):
        return time.pthread_getcpuclockid(threading.get_ident())
    return time.CLOCK_PROCESS_CPUTIME_ID  # (no per-thread clock: the process's)


@dataclass
class Cap:
    """One armed check: interrupt ``ctx`` once ``clock`` reads ``deadline``."""

    ctx: z3.Context
    clock: int
    deadline: float
    fired: bool = field(default=False)


class CpuWatchdog:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._armed: Cap | None = None
        self._idle = True  # the thread waits for a check to be armed
        self._thread: threading.Thread | None = None

    @contextmanager
    def cap(self, cpu_seconds: float, ctx: z3.Context | None = None) -> Iterator[Cap]:
        """Interrupt the Z3 checks of ``ctx`` (z3py's default context if None) run in
        this block once this thread has spent ``cpu_seconds`` of CPU time in it. The
        yielded `Cap` says whether it fired. Caps nest: an inner one holds while its
        block runs, the outer one again after it."""
        clock = thread_cpu_clock()
        cap = Cap(ctx or z3.main_ctx(), clock, time.clock_gettime(clock) + max(0.0, cpu_seconds))
        with self._lock:
            outer, self._armed = self._armed, cap
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="z3-cpu-watchdog",
                                                daemon=True)
                self._thread.start()
            elif self._idle:
                self._lock.notify()
        try:
            yield cap
        finally:
            with self._lock:  # (after this, no interrupt can reach the next check)
                if self._armed is cap:
                    self._armed = outer if outer is not None and not outer.fired else None

    def _watch(self) -> None:
        with self._lock:
            while True:
                cap = self._armed
                if cap is None:
                    self._idle = True
                    self._lock.wait()
                    self._idle = False
                    continue
                left = cap.deadline - time.clock_gettime(cap.clock)
                if left <= 0:
                    cap.ctx.interrupt()
                    cap.fired = True
                    self._armed = None
                    continue
                self._lock.wait(min(left, POLL_SECONDS))


_WATCHDOG = CpuWatchdog()


def _fresh_after_fork() -> None:
    """A forked child has no watchdog thread (and its lock may have been held at the
    fork): it starts its own."""
    global _WATCHDOG
    _WATCHDOG = CpuWatchdog()


os.register_at_fork(after_in_child=_fresh_after_fork)


def cpu_cap(cpu_seconds: float, ctx: z3.Context | None = None) -> AbstractContextManager[Cap]:
    """`CpuWatchdog.cap` of this process's watchdog."""
    return _WATCHDOG.cap(cpu_seconds, ctx)


def check_within(solver: z3.Solver, cpu_seconds: float, *assumptions: z3.BoolRef) -> z3.CheckSatResult:
    """``solver.check()``, ``unknown`` once it has spent ``cpu_seconds`` of CPU time."""
    with cpu_cap(cpu_seconds, solver.ctx):
        return solver.check(*assumptions)
