"""Budgets that bind inside an iteration: saturation in processes that can be stopped.

egglog 13.2 cannot stop inside ``run`` (DESIGN §3), and one iteration of
associativity can take minutes and gigabytes. So the e-graph never grows in a
process we cannot afford to lose:

- `run_in_worker` forks a *holder* process that loads and saturates the e-graph and
  finally runs ``finish`` (extraction) on it; the caller waits for the pickled
  result until the hard deadline, then kills every worker and uses ``fallback``.
- Each iteration runs in a fork of the holder (`IterationForker`). The holder waits
  for it until the time left for iterations runs out, and watches its memory as a
  proxy for e-nodes. An iteration that finishes within the budgets becomes the new
  holder (the old one exits); one that does not is killed, and the holder, still at
  the last good state, stops with the limit that stopped it. So the e-graph that is
  extracted never has more than ``NODE_SLACK`` × the node budget, and no iteration
  runs past the time budget.

Forking needs POSIX ``fork``; without it (`supported`) the caller saturates in process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
NODE_SLACK = 1.10  # an iteration may end at most 10 % over the node budget
# memory an e-node costs in egglog's tables (measured ~2 KB with Python's share): an
# iteration whose process grows past (budget - e-nodes) × this, plus a floor, is killed
BYTES_PER_ENODE = 1536
MEMORY_FLOOR = 256 << 20
HOLDER_SIZE_FACTOR = 1.0  # an iteration may also grow by the holder's own size
_POLL_SECONDS = 0.02
_PR_SET_CHILD_SUBREAPER = 36


def supported() -> bool:
    return hasattr(os, "fork") and os.path.exists("/proc/self/statm")


class IterationStopped(Exception):
    """The forked iteration was stopped (or rejected); the holder keeps its state."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Channel:
    """The pipe from every worker back to the caller: pids to reap, then one result."""

    fd: int

    def send(self, kind: str, payload: Any) -> None:
        data = pickle.dumps((kind, payload))
        view = memoryview(struct.pack("<Q", len(data)) + data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]


@dataclass
class IterationForker:
    """Runs one iteration in a fork of the holder, within the deadline and memory."""

    channel: Channel
    deadline: float  # perf_counter time by which saturation and extraction must be done
    node_limit: int

    def run(self, body: Callable[[], tuple[bool, int, str | None]], e_nodes: int,
            reserve: Callable[[int], float]) -> tuple[bool, str | None]:
        """``body`` runs the iteration and returns (changed, e-nodes, stop reason or
        None). Here it returns the same in the process that now holds the result
        (the fork); the old holder exits. ``reserve(e_nodes)`` is the time extraction
        of that many e-nodes needs before the deadline."""
        kill_at = self.deadline - reserve(e_nodes)  # the last good state must still be extracted
        if kill_at <= time.perf_counter():
            raise IterationStopped("limit:seconds")
        status_r, status_w = os.pipe()
        verdict_r, verdict_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(status_r)
            os.close(verdict_w)
            try:
                outcome: tuple[Any, ...] = ("done", *body())
            except BaseException as error:  # noqa: BLE001 - the holder decides what it means
                outcome = ("error", _portable(error))
            _write_all(status_w, pickle.dumps(outcome))
            os.close(status_w)
            verdict = os.read(verdict_r, 1)
            os.close(verdict_r)
            if verdict != b"c":
                os._exit(0)
            if outcome[0] == "error":
                raise outcome[1]
            return outcome[1], outcome[3]
        os.close(status_w)
        os.close(verdict_r)
        self.channel.send("pid", pid)
        try:
            outcome = self._wait(pid, status_r, e_nodes, kill_at)
        finally:
            os.close(status_r)
        if outcome[0] == "error":
            os.write(verdict_w, b"x")
            os.close(verdict_w)
            os.waitpid(pid, 0)
            raise outcome[1]
        _, changed, nodes, _reason = outcome
        if nodes > self.node_limit * NODE_SLACK:
            reject = "limit:nodes"
        elif time.perf_counter() + reserve(nodes) > self.deadline:
            reject = "limit:seconds"  # its extraction would not fit: keep the smaller e-graph
        else:
            os.write(verdict_w, b"c")  # the fork holds the e-graph now
            os.close(verdict_w)
            os._exit(0)
        os.write(verdict_w, b"x")
        os.close(verdict_w)
        os.waitpid(pid, 0)
        raise IterationStopped(reject)

    def _wait(self, pid: int, fd: int, e_nodes: int, kill_at: float) -> tuple[Any, ...]:
        base = _rss(pid)
        # constant folding legitimately allocates in proportion to the model's weights
        # (densenet121's first iteration: +93 MB at 1.6k e-nodes): the floor scales
        # with the holder's own size; beyond it, growth is e-nodes past the budget
        floor = max(MEMORY_FLOOR, int((base or 0) * HOLDER_SIZE_FACTOR))
        allowance = floor + max(0, int((self.node_limit * NODE_SLACK - e_nodes) * BYTES_PER_ENODE))
        data = bytearray()
        while True:
            left = kill_at - time.perf_counter()
            if left <= 0:
                _kill(pid)
                raise IterationStopped("limit:seconds")
            ready, _, _ = select.select([fd], [], [], min(left, _POLL_SECONDS))
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                data += chunk
                continue
            rss = _rss(pid)
            if rss is not None and base is not None and rss - base > allowance:
                _kill(pid)
                raise IterationStopped("limit:nodes")
        if not data:  # the fork died without a word (killed by the OOM killer, …)
            os.waitpid(pid, 0)
            raise IterationStopped("limit:nodes")
        return tuple(pickle.loads(bytes(data)))


def run_in_worker(work: Callable[[Channel], T], fallback: Callable[[str], T], hard_deadline: float) -> T:
    """``work(channel)`` in a forked holder process; its result (sent by whichever
    process holds the e-graph at the end). At ``hard_deadline`` every worker is
    killed and ``fallback(reason)`` is returned instead."""
    read_fd, write_fd = os.pipe()
    restore = _become_subreaper()
    pids: set[int] = set()
    try:
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            channel = Channel(write_fd)
            code = 0
            try:
                channel.send("result", work(channel))
            except BaseException as error:  # noqa: BLE001 - the caller re-raises it
                try:
                    channel.send("error", _portable(error))
                except BaseException:  # noqa: BLE001
                    code = 1
            os._exit(code)
        pids.add(pid)
        os.close(write_fd)
        write_fd = -1
        kind, payload = _receive(read_fd, pids, hard_deadline)
        if kind == "result":
            return payload  # type: ignore[no-any-return]
        if kind == "error":
            raise payload
        return fallback(str(payload))
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        os.close(read_fd)
        for pid in pids:
            _kill(pid)
        restore()


def _receive(fd: int, pids: set[int], deadline: float) -> tuple[str, Any]:
    # a bytearray with a moving start: a result of hundreds of MB arrives in 64 KB
    # pipe reads, and re-concatenating bytes for each would copy it thousands of times
    buffer, start = bytearray(), 0
    while True:
        while len(buffer) - start >= 8:
            (size,) = struct.unpack_from("<Q", buffer, start)
            if len(buffer) - start < 8 + size:
                break
            kind, payload = pickle.loads(memoryview(buffer)[start + 8:start + 8 + size])
            start += 8 + size
            if kind == "pid":
                pids.add(payload)
            else:
                return kind, payload
        if start and start == len(buffer):
            buffer, start = bytearray(), 0
        left = deadline - time.perf_counter()
        if left <= 0:
            return "fallback", "limit:seconds"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:  # every worker died without a result
                return "fallback", "limit:nodes"
            buffer += chunk


def _portable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling, else a `DnnrError`/`RuntimeError` with its text."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any unpicklable exception
        from egraph_compiler.ir.errors import DnnrError

        return DnnrError(str(error)) if isinstance(error, DnnrError) else RuntimeError(f"{type(error).__name__}: {error}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as stream:
            return int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


def _become_subreaper() -> Callable[[], None]:
    """Orphaned workers (a holder exits when its fork takes over) are re-parented to
    this process, so `_kill` can reap them; undone afterwards."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return lambda: None
    except (OSError, AttributeError):
        return lambda: None
    return lambda: libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) and None
