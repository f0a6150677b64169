"""Which PoCL device runs a model's launches: the worker threads or the calling thread.

PoCL's ``pthread`` device hands every launch to a pool of worker threads (one per
core) that sleep on a condition variable between launches; its ``basic`` device runs
the work-groups inside the enqueue call, on the thread that enqueues. On an idle
machine the pool is up to one core faster. On a loaded one every hand-over waits for
the scheduler: MobileNetV3-small (64 launches) at load 7-9 on this 2-core machine ran
3.3-20 ms a run on the pool (median 8.8 ms) for 3.3-4.3 ms of process CPU time, against
3.2-3.7 ms on the calling thread (wall ≈ CPU: nothing waits), where onnxruntime took
1.9-2.7 ms. Neither is faster everywhere and the load changes by the minute, so the
runtime measures: `ThreadChoice` times the recent runs on each and runs the faster,
trying the other now and then.

A model runs on both only when its work-group functions fit PoCL's cache twice
(`both_fit`). Both devices are exposed by ``POCL_DEVICES=pthread basic`` (`expose_caller_device`,
dnnr's default when the variable is unset; it takes effect only before PoCL's first
platform query in the process). They share the host's memory, so one context holds
both and every buffer serves either queue.
"""

from __future__ import annotations

import os
import statistics
from collections import deque
from dataclasses import dataclass, field

WORKERS, CALLER = "workers", "caller"
POCL_DEVICES = "pthread basic"
# PoCL keeps this many loaded work-group functions per process (its dlhandle cache,
# least recently used out), each device's its own: a model whose functions on both
# devices overflow it would reload them at every change of mode (MobileNetV3-small
# fusion-off, 90 distinct kernels: 13-16 ms runs among 4.5-5.5 ms ones)
POCL_CACHED_FUNCTIONS = 128


def both_fit(distinct_kernels: int) -> bool:
    """Whether a model's work-group functions fit PoCL's cache on both devices."""
    return 2 * distinct_kernels <= POCL_CACHED_FUNCTIONS


def expose_caller_device() -> None:
    """Ask PoCL for its calling-thread device beside the worker pool, unless the user
    chose PoCL's devices (``POCL_DEVICES``)."""
    os.environ.setdefault("POCL_DEVICES", POCL_DEVICES)


def is_caller_device(name: str) -> bool:
    """PoCL names its devices after the driver: ``basic-<cpu>``, ``pthread-<cpu>``."""
    return name.lower().startswith("basic-")


def is_worker_pool_device(name: str) -> bool:
    """Whether ``name`` is PoCL's worker-pool device (see `is_caller_device`)."""
    return name.lower().startswith("pthread-")


@dataclass
class ThreadChoice:
    """Picks ``WORKERS`` or ``CALLER`` for each run from the wall times `record`ed.

    The first ``warm`` runs go to the workers (a model run once or twice never builds
    the calling thread's program), the next ``warm`` to the calling thread; then the
    mode whose last ``warm`` runs have the lower median, and every ``explore_every``-th
    run the other mode, so a change of load is seen within a few of its samples. The
    median of three keeps one slow run (a first launch compiling its work-group
    function, a preemption) from deciding."""

    warm: int = 3
    explore_every: int = 8
    runs: int = 0
    recent: dict[str, deque[float]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # runs per mode, for reports
    fixed: str | None = None  # one mode for every run (benchmarks comparing the two)

    def __post_init__(self) -> None:
        self.recent = {mode: deque(maxlen=self.warm) for mode in (WORKERS, CALLER)}

    def next(self) -> str:
        self.runs += 1
        if self.fixed is not None:
            return self.fixed
        for mode in (WORKERS, CALLER):
            if len(self.recent[mode]) < self.warm:
                return mode
        best, other = sorted((WORKERS, CALLER),
                             key=lambda mode: statistics.median(self.recent[mode]))
        return other if self.runs % self.explore_every == 0 else best

    def record(self, mode: str, seconds: float) -> None:
        self.recent[mode].append(seconds)
        self.counts[mode] = self.counts.get(mode, 0) + 1

    @property
    def preferred(self) -> str | None:
        """The mode the recent runs favour (None before both have been timed)."""
        if any(len(times) < self.warm for times in self.recent.values()):
            return None
        return min((WORKERS, CALLER), key=lambda mode: statistics.median(self.recent[mode]))
