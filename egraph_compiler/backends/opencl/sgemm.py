"""``sgemm``: the register-blocked FP32 GEMM for GPUs (an anchor option beside ``tiled``).

The same product as `gemm.tiled` (a `gemm.Problem`: MatMul/Gemm, or a conv as implicit
GEMM), written the way the fast SGEMMs are (CLBlast's xgemm, the "how to optimise a CUDA
SGEMM" register-blocking recipe):

- a work-group computes a ``bm × bn`` tile of C (128 × 128 or 128 × 64 …) and each
  work-item an ``tm × tn`` register block (8 × 8, 8 × 4, 4 × 4) as explicit scalar
  accumulators (no array the compiler could leave in memory);
- a work-item's rows are two runs of 4, ``bm / 2`` apart (8 × 8) — ``ty·4 + i`` and
  ``bm/2 + ty·4 + i`` — so each K step reads its A and B values from local memory as
  ``float4``\\ s whose warp-wide reads are conflict-free (two rows of work-items read the
  same four words: a broadcast); columns likewise;
- A is stored K-major in local memory (``As[k][m]``, transposed from a row-major A as it
  is loaded, a row pad of 4 against bank conflicts on those stores), B as ``Bs[k][n]``;
- global loads are ``float4`` wherever the operand is a plain strided view of a kernel
  argument (after the block's layout operators: Reshape, Transpose, Slice … only move
  the index) that is contiguous along the loaded dimension and aligned to 4 elements
  (`vector_view` proves it from the index expression); other operands (a conv's
  window, a prologue with arithmetic) load scalars through the block's value walk, the
  prologue evaluated once per loaded element;
- double buffering: the next K tile is fetched into registers while the current one is
  multiplied out of one of two local buffers, so each K step has one barrier and its
  global loads' latency hides behind ``bk·tm·tn`` multiply-adds;
- no bounds checks where the shape fills whole tiles (every check is decided at
  generation: a BERT-base GEMM has none); ragged edges clamp the load index and select
  zero, and the store checks only the dimension that is ragged;
- split-K across work-groups (``groups``) for few C tiles over a long K: each group
  sums one contiguous K range into scratch and a second launch adds the partials and
  runs the epilogue (`gemm.sum_partials`).

The epilogue (bias, Gelu, a residual Add, a Transpose back …) runs in the store loop,
per element, through the block's value walk (`gemm.Problem.store`); where it reads an
operand per element (GPT-2's broadcast attention mask, a residual) and every read and
store steps by one along a work-item's run of 4 columns, it runs on the run at once:
4-wide loads, the epilogue per lane, a float4 store (`vector_epilogue`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from egraph_compiler import ops
from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.emit import Scope, ValueEmitter
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.gemm import Operand, Problem
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

VARIANT = "sgemm"
VECTOR = 4  # float4 global and local reads


@dataclass(frozen=True)
class Sgemm:
    """``sgemm`` parameters: C tile ``bm × bn``, K step ``bk``, ``tm × tn`` per work-item
    (4 or 8 each), K ranges across work-groups ``groups``."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    groups: int = 1

    @property
    def work_group(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def valid(self) -> bool:
        threads = self.work_group
        return (self.tm in (4, 8) and self.tn in (4, 8) and self.bm % (self.tm * 4) == 0 and
                self.bn % (self.tn * 4) == 0 and 32 <= threads <= 256 and self.bk % VECTOR == 0 and
                self.groups >= 1 and
                # every load slot maps whole vectors (and whole scalars) onto the work-group
                all((extent * self.bk) % (VECTOR * threads) == 0 for extent in (self.bm, self.bn)))

    def describe(self) -> str:
        return f"{VARIANT} {self.bm}x{self.bn}x{self.bk} per-item {self.tm}x{self.tn}" + \
            (f" k-groups {self.groups}" if self.groups > 1 else "")


# -- proving an operand is a float4-loadable view --------------------------------------

class _NotView(Exception):
    pass


class _Probe(ValueEmitter):
    """The block's value walk, following only index-moving (``layout``) operators down
    to one kernel argument: where an operand's element is read from."""

    MARK = "__probe__"

    def __init__(self, em: ValueEmitter) -> None:
        super().__init__(em.view, tuple(em.members), em.params)
        self.derived, self.layouts = em.derived, em.layouts
        self.leaf: tuple[str, ix.IExpr] | None = None

    def value(self, scope: Scope, name: str, index: tuple[ix.IExpr, ...]) -> str:
        if name in self.pinned or self.leaf is not None:
            raise _NotView
        if name in self.params:
            array = self.derived.get(name)
            shape = tuple(array.shape) if array is not None else self.view.shape(name)
            dtype = str(array.dtype) if array is not None else self.view.dtype(name)
            if dtype != "float32":
                raise _NotView
            self.leaf = (self.params[name], ix.physical_offset(index, shape, self.layouts.get(name)))
            return self.MARK
        producer = self.view.producer_index.get(name)
        info = ops.current().get(self.view.nodes[producer].op) if producer is not None else None
        if producer not in self.members or info is None or info.role != "layout":
            raise _NotView
        return self.node_value(scope, self.view.nodes[producer], name, index)


def _whole_runs(operand: Operand, along_k: bool) -> bool:
    """Whether ``operand`` is read through a view of static sizes whose extent along
    ``k`` (or the row, ``along_k`` False) is whole runs of 4: the precondition of any
    4-wide load (`vector_view`, `prologue_leaves`)."""
    extent = operand.k_size if along_k else operand.rows
    return operand.view is not None and all(isinstance(v, int) for v in (operand.rows, operand.k_size)) \
        and extent % VECTOR == 0


def vector_view(gen: _Gen, operand: Operand, along_k: bool) -> tuple[str, ix.IExpr] | None:
    """``(argument, offset)`` of ``operand``'s element (row ``r``, k ``k``) where it is a
    plain read of one float32 argument whose offset steps by one along ``k`` (or the row,
    ``along_k`` False) inside every aligned run of 4 and is a multiple of 4 at the run's
    start; None where that is not proven (then the kernel loads scalars)."""
    if not _whole_runs(operand, along_k):
        return None
    name, index = operand.view
    row, k = ix.IVar("r", 0, operand.rows - 1), ix.IVar("k", 0, operand.k_size - 1)
    probe = _Probe(gen.em)
    scope = Scope()
    try:
        result = probe.value(scope, name, index(row, k))
    except (_NotView, KeyError, ValueError, TypeError):
        return None
    if result != _Probe.MARK or scope.lines or probe.leaf is None:
        return None
    param, offset = probe.leaf
    kind = _classify(offset, "k" if along_k else "r")
    return (param, offset) if kind == ("inc", 1, True) else None


@dataclass(frozen=True)
class _Leaf:
    """One kernel argument read by a prologue or epilogue: a ``vector`` (its offset steps
    by one inside each aligned run of 4: one 4-wide load) or a value constant over the
    run (a broadcast row or scalar: one load, used by every lane). ``key``: the read as
    the value walk spells it (`_Lanes` looks it up), ``offset``: where the run's load is."""

    param: str
    offset: ix.IExpr
    dtype: str
    vector: bool
    key: str


class _ReadProbe(_Probe):
    """The block's value walk through elementwise and layout operators, recording every
    kernel argument it reads (``reads``: key -> argument, offset, dtype): where each is a
    vector or constant over an aligned run of 4 (`_classified`), an operand loads 4
    elements at once and evaluates its prologue once per lane (`_Loader.fetch`), or the
    store loop runs the epilogue once per lane of 4 columns (`_VectorEpilogue`)."""

    def __init__(self, em: ValueEmitter) -> None:
        super().__init__(em)
        self.reads: dict[str, tuple[str, ix.IExpr, str]] = {}

    def assign(self, scope: Scope, dtype: str, expr: str) -> str:
        return self.fresh("p")  # only where values are read from matters here

    def index_var(self, scope: Scope, expr: ix.IExpr, lo: int, hi: int) -> ix.IExpr:
        raise _NotView  # an index bound at run time (Concat, Pad): not a view

    def value(self, scope: Scope, name: str, index: tuple[ix.IExpr, ...]) -> str:
        if name in self.pinned:  # the epilogue's accumulator and the spine before it
            return self.pinned[name]
        constant = self.view.constants.get(name)
        if constant is not None and np.size(constant) == 1:
            return "c"
        if name in self.params:
            array = self.derived.get(name)
            shape = tuple(array.shape) if array is not None else self.view.shape(name)
            dtype = str(array.dtype) if array is not None else self.view.dtype(name)
            if dtype not in sp.C_TYPES or dtype in sp.STORAGE_TYPES:
                raise _NotView  # float16 is stored as half: not a plain 4-wide load
            offset = ix.physical_offset(index, shape, self.layouts.get(name))
            self.reads.setdefault(_leaf_key(self.params[name], offset),
                                  (self.params[name], offset, dtype))
            return self.params[name]
        producer = self.view.producer_index.get(name)
        info = ops.current().get(self.view.nodes[producer].op) if producer is not None else None
        if producer not in self.members or info is None or info.role not in ("layout", "elementwise"):
            raise _NotView
        return self.node_value(scope, self.view.nodes[producer], name, index)


def _leaf_key(param: str, offset: ix.IExpr) -> str:
    return f"{param}[{ix.render(offset)}]"


def _classified(reads: dict[str, tuple[str, ix.IExpr, str]], var: str,
                where: dict[str, ix.IExpr] | None = None) -> list[_Leaf] | None:
    """The probe's reads as `_Leaf` objects along ``var`` (each offset with the variables of
    ``where`` replaced by their expressions first); None where one is neither a vector
    nor constant over an aligned run of 4."""
    leaves = []
    for key, (param, offset, dtype) in reads.items():
        if where:
            offset = ix.substitute(offset, lambda v: where.get(v.name, v))
        kind = _classify(offset, var)
        if kind is None or (kind[0] == "inc" and kind[1:] != (1, True)):
            return None
        leaves.append(_Leaf(param, offset, dtype, kind[0] == "inc", key))
    return leaves


class _Lanes(ValueEmitter):
    """The block's value walk with every kernel argument read replaced by one lane of
    its 4-wide load (or the broadcast value): the prologue's scalar code per lane."""

    def __init__(self, em: ValueEmitter, reads: dict[str, str]) -> None:
        super().__init__(em.view, tuple(em.members), em.params)
        self.derived, self.layouts, self.counter = em.derived, em.layouts, em.counter
        self.reads = reads

    def value(self, scope: Scope, name: str, index: tuple[ix.IExpr, ...]) -> str:
        constant = self.view.constants.get(name)
        if name in self.params and not (constant is not None and np.size(constant) == 1):
            array = self.derived.get(name)
            shape = tuple(array.shape) if array is not None else self.view.shape(name)
            return self.reads[_leaf_key(self.params[name],
                                        ix.physical_offset(index, shape, self.layouts.get(name)))]
        return super().value(scope, name, index)


def _index_vars(operand: Operand, row: str, k: str) -> tuple[ix.IExpr, ix.IExpr]:
    """The operand's (row, k) index variables, as `gemm._value_operand` binds them."""
    return (ix.IVar(row, 0, operand.rows - 1) if operand.rows > 1 else 0,
            ix.IVar(k, 0, operand.k_size - 1) if operand.k_size > 1 else 0)


def prologue_leaves(gen: _Gen, operand: Operand, along_k: bool, row: str = "r",
                    k: str = "k") -> list[_Leaf] | None:
    """The kernel arguments ``operand``'s prologue reads, where it is elementwise and
    layout operators only and every read is a vector along ``k`` (or the row) or
    constant over aligned runs of 4 (at least one a float32 vector); None otherwise."""
    if not _whole_runs(operand, along_k):
        return None
    name, index = operand.view
    probe = _ReadProbe(gen.em)
    scope = Scope()
    try:
        probe.value(scope, name, index(*_index_vars(operand, row, k)))
    except (_NotView, KeyError, ValueError, TypeError):
        return None
    if gen.view.dtype(name) != "float32":
        return None
    leaves = _classified(probe.reads, k if along_k else row)
    if scope.lines or leaves is None or \
            not any(leaf.vector and leaf.dtype == "float32" for leaf in leaves):
        return None
    return leaves


def _classify(expr: ix.IExpr, var: str) -> tuple[str, int, bool] | None:
    """How ``expr`` moves inside an aligned run of ``VECTOR`` values of ``var`` (its
    start a multiple of ``VECTOR``): ("free", 0, aligned) does not depend on it,
    ("block", 0, aligned) is constant over the run, ("inc", c, aligned) grows by ``c``
    per step; ``aligned``: a multiple of ``VECTOR`` at the run's start. None: none of these."""
    v = VECTOR
    if isinstance(expr, int):
        return ("free", 0, expr % v == 0)
    if isinstance(expr, ix.IVar):
        return ("inc", 1, True) if expr.name == var else ("free", 0, False)
    if isinstance(expr, ix.IOpaque):
        return None if var in expr.deps else ("free", 0, False)
    if isinstance(expr, ix.IDiv | ix.IMod):
        inner = _classify(expr.num, var)
        if inner is None:
            return None
        if inner[0] == "free":
            return ("free", 0, False)
        if inner[0] == "block":
            return ("block", 0, False)
        if inner[1] != 1 or not inner[2] or expr.den % v:
            return None
        return ("block", 0, False) if isinstance(expr, ix.IDiv) else ("inc", 1, True)
    step, aligned, moves = 0, expr.const % v == 0, False
    for atom, coeff in expr.terms:
        part = _classify(atom, var)
        if part is None:
            return None
        moves |= part[0] != "free"
        step += coeff * part[1]
        aligned &= part[2] or coeff % v == 0
    if not moves:
        return ("free", 0, aligned)
    return ("inc", step, aligned) if step else ("block", 0, aligned)


# -- the kernel ---------------------------------------------------------------------------

def sgemm(gen: _Gen, problem: Problem, tile: Sgemm) -> Kernel:
    """The ``sgemm`` option: one launch, or two with K groups (module docstring)."""
    from egraph_compiler.backends.opencl.gemm import sum_partials

    if tile.groups == 1:
        return _kernel(gen, problem, tile)
    batch_total = math.prod(problem.batch)
    gen.use_scratch(tile.groups * batch_total * problem.a.rows * problem.b.rows)
    return sum_partials(gen, problem, tile.groups, _kernel(gen, problem, tile))


@dataclass(frozen=True)
class KRange:
    """How a work-group's K range is written into `schedule`'s kernel: the statements
    that bind it (none without K groups), the first fetch's K offset, the K offset of
    step ``ahead`` in the loop, the step count, whether the first fetch is guarded by
    the count, and whether the statements follow the accumulators' declarations (each
    caller's spelling as measured: `sgemm`'s and `conv_gemm`'s kernels stay as they were)."""

    lines: tuple[str, ...]
    first: str
    step: str
    count: str
    guarded: bool = True
    after_accumulators: bool = False


class TileLoader(Protocol):
    """What `schedule` asks of an operand's tile loader (`_Loader`, `conv_gemm`'s gather):
    its local array and row stride, per-work-item setup, a fetch of the K step at ``k0``
    into registers and their store into local buffer ``buffer``."""

    array: str
    stride: int

    def setup(self, s: Scope) -> None: ...

    def fetch(self, s: Scope, k0: str) -> None: ...

    def place(self, s: Scope, buffer: str) -> None: ...


def _k_range(tile: Sgemm, k_size: int) -> KRange:
    """`sgemm`'s K range: K groups of whole K steps (only the last is ragged)."""
    steps = -(-k_size // tile.bk)
    if tile.groups == 1:
        return KRange((), "0", f"0 + ahead * {tile.bk}", str(steps))
    chunk = -(-steps // tile.groups) * tile.bk
    end = f"({k_size} < k_first + {chunk} ? {k_size} : k_first + {chunk})"
    return KRange((f"const int k_first = kg * {chunk};",
                   f"const int k_steps = {end} > k_first ? ({end} - k_first + {tile.bk - 1}) / "
                   f"{tile.bk} : 0;"), "k_first", f"k_first + ahead * {tile.bk}", "k_steps")


def schedule(gen: _Gen, tile: Sgemm, sizes: tuple[int, int, int], batch: tuple[int, ...],
             a: Operand, make_b: Callable[[], TileLoader], k_range: KRange, prefix: str
             ) -> tuple[Scope, list[str], list[str]]:
    """The register-blocked schedule up to the store (module docstring): A's tiles from
    ``a``, B's from the loader ``make_b`` builds (an operand's `_Loader`, or
    `conv_gemm`'s window gather), K steps of ``tile.bk`` over ``k_range``; the scope,
    then a work-item's row and column runs (`_runs`) for the caller's store loop.
    ``prefix`` names the kernel's defines (``{prefix}_BK``)."""
    from egraph_compiler.backends.opencl.gemm import bind_tile_indices

    m_size, n_size, k_size = sizes
    threads = tile.work_group
    wn = tile.bn // tile.tn
    # defines: `build.hoist_sizes` would make a literal here a kernel argument
    gen.defines += [f"{prefix}_BK {tile.bk}", f"{prefix}_ALIGN 16"]
    s = Scope()
    s.emit("const int lid = get_local_id(0);")
    bind_tile_indices(s, tile.groups, -(-n_size // tile.bn), -(-m_size // tile.bm), batch)
    s.emit(f"const int tx = lid % {wn}; const int ty = lid / {wn};")
    loaders: list[TileLoader] = [_Loader(gen, "a", a, tile.bm, tile.bk, threads, k_size, "mt"),
                                 make_b()]
    for loader in loaders:
        s.emit(f"__local float {loader.array}[2][{tile.bk}][{loader.stride}] "
               f"__attribute__((aligned({prefix}_ALIGN)));")
        loader.setup(s)
    if not k_range.after_accumulators:
        for line in k_range.lines:
            s.emit(line)
    rows_a = _runs(tile.tm, tile.bm, "ty")
    cols_b = _runs(tile.tn, tile.bn, "tx")
    for i in range(tile.tm):
        s.emit(" ".join(f"float c{i}_{j} = 0.0f;" for j in range(tile.tn)))
    if k_range.after_accumulators:
        for line in k_range.lines:
            s.emit(line)
    # the first tile, then one K step per iteration: fetch the next, multiply this one
    first_fetch = Scope(s)
    for loader in loaders:
        loader.fetch(first_fetch, k_range.first)
    for loader in loaders:
        loader.place(first_fetch, "0")
    s.nest(f"if ({k_range.count} > 0)" if k_range.guarded else "", first_fetch)
    s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    step = Scope(s)
    step.emit("const int cur = t & 1;")
    # the last step fetches its own tile again (into the buffer no one reads any more):
    # no branch around the loads, and no load past K (a guarded fetch and store also
    # miscompiled on PoCL behind a Relu prologue)
    step.emit(f"const int ahead = t + 1 < {k_range.count} ? t + 1 : t;")
    for loader in loaders:
        loader.fetch(step, k_range.step)
    mul = Scope(step)
    for run, offset in enumerate(rows_a):
        mul.emit(f"const float4 a{run} = *(__local const float4*)&As[cur][kk][{offset}];")
    for run, offset in enumerate(cols_b):
        mul.emit(f"const float4 b{run} = *(__local const float4*)&Bs[cur][kk][{offset}];")
    for i in range(tile.tm):
        a_value = f"a{i // 4}.s{i % 4}"
        mul.emit(" ".join(f"c{i}_{j} = mad({a_value}, b{j // 4}.s{j % 4}, c{i}_{j});"
                          for j in range(tile.tn)))
    step.nest(f"__attribute__((opencl_unroll_hint({prefix}_BK))) "
              f"for (int kk = 0; kk < {prefix}_BK; ++kk)", mul)
    for loader in loaders:
        loader.place(step, "cur ^ 1")
    # one barrier per step: the buffer written above was last read a step ago
    step.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    s.nest(f"for (int t = 0; t < {k_range.count}; ++t)", step)
    return s, rows_a, cols_b


def store_elements(s: Scope, tile: Sgemm, rows_a: list[str], cols_b: list[str],
                   m_size: int, n_size: int, store: Callable[[Scope, str], None]) -> None:
    """`schedule`'s store loop, an element at a time: ``store(scope, accumulator)``
    with ``m``, ``n`` bound, checked only along a ragged dimension."""
    checks = [c for c, ragged in ((f"m < {m_size}", m_size % tile.bm != 0),
                                  (f"n < {n_size}", n_size % tile.bn != 0)) if ragged]
    for i in range(tile.tm):
        for j in range(tile.tn):
            out = Scope(s)
            out.emit(f"const int m = mt * {tile.bm} + {_element(rows_a, i)};")
            out.emit(f"const int n = nt * {tile.bn} + {_element(cols_b, j)};")
            done = Scope(out)
            store(done, f"c{i}_{j}")
            out.nest(f"if ({' && '.join(checks)})" if checks else "", done)
            s.nest("", out)


def _kernel(gen: _Gen, problem: Problem, tile: Sgemm) -> Kernel:
    m_size, n_size, k_size = problem.a.rows, problem.b.rows, problem.k
    threads = tile.work_group
    batch_total = math.prod(problem.batch)
    groups = batch_total * -(-m_size // tile.bm) * -(-n_size // tile.bn) * tile.groups
    s, rows_a, cols_b = schedule(
        gen, tile, (m_size, n_size, k_size), problem.batch, problem.a,
        lambda: _Loader(gen, "b", problem.b, tile.bn, tile.bk, threads, k_size, "nt"),
        _k_range(tile, k_size), "SG")
    epilogue = vector_epilogue(gen, problem) if tile.groups == 1 else None
    if epilogue is not None:  # a run of 4 columns at once (N is whole runs: one check)
        def emit_run(out: Scope, guard: str, values: list[str]) -> None:
            done = Scope(out)
            epilogue.emit(gen, problem, done, values)
            out.nest(f"if ({guard})" if guard else "", done)

        store_runs(s, tile, rows_a, cols_b, m_size, n_size, emit_run)
        return gen.finish(s, groups * threads, threads)

    def store(done: Scope, value: str) -> None:
        if tile.groups > 1:  # the partial tile to scratch [kg][batch][m][n]
            done.emit(f"{gen.scratch_param}[((kg * {batch_total} + gb) * {m_size} + m) * "
                      f"{n_size} + n] = {value};")
        else:
            problem.store(done, "m", "n", value)

    store_elements(s, tile, rows_a, cols_b, m_size, n_size, store)
    return gen.finish(s, groups * threads, threads)


def _runs(per_item: int, extent: int, coord: str) -> list[str]:
    """The local-memory offsets of a work-item's runs of 4 (rows or columns)."""
    return [f"{coord} * 4 + {run * extent // (per_item // 4)}" for run in range(per_item // 4)]


def store_runs(s: Scope, tile: Sgemm, rows_a: list[str], cols_b: list[str], m_size: int,
               n_size: int, emit_run: Callable[[Scope, str, list[str]], None]) -> None:
    """The work-item's tile a run of 4 columns at a time (N is whole runs, so a run that
    starts inside N ends inside it): each run in its own scope declaring ``m`` and ``n``,
    then ``emit_run(scope, guard, values)`` with the bounds check ("" when no edge is
    ragged) and the run's 4 accumulators."""
    checks = [c for c, ragged in ((f"m < {m_size}", m_size % tile.bm != 0),
                                  (f"n < {n_size}", n_size % tile.bn != 0)) if ragged]
    for i in range(tile.tm):
        for run in range(tile.tn // VECTOR):
            out = Scope(s)
            out.emit(f"const int m = mt * {tile.bm} + {_element(rows_a, i)};")
            out.emit(f"const int n = nt * {tile.bn} + {cols_b[run]};")
            emit_run(out, " && ".join(checks), [f"c{i}_{run * VECTOR + lane}" for lane in range(VECTOR)])
            s.nest("", out)


def _element(runs: list[str], i: int) -> str:
    return f"{runs[i // 4]} + {i % 4}"


class _Loader:
    """One operand's global → register → local-memory path (a register per slot)."""

    def __init__(self, gen: _Gen, name: str, operand: Operand, extent: int, bk: int,
                 threads: int, k_size: int, tile_var: str) -> None:
        self.gen, self.name, self.operand = gen, name, operand
        self.extent, self.bk, self.k_size, self.tile_var = extent, bk, k_size, tile_var
        self.array = "As" if name == "a" else "Bs"
        # the direction the operand is contiguous along decides how work-items map onto
        # its tile (K^T read through a Transpose is contiguous along k, not its rows)
        self.k_fast = operand.k_fast
        self.view = vector_view(gen, operand, self.k_fast)
        if self.view is None:
            self.view = vector_view(gen, operand, not self.k_fast)
            self.k_fast ^= self.view is not None
        # an arithmetic prologue (a scale, a mask's Where) over vector reads: 4-wide
        # loads, the prologue once per lane
        self.lanes = False
        for along_k in (self.k_fast, not self.k_fast):
            if self.view is None and not self.lanes and \
                    prologue_leaves(gen, operand, along_k) is not None:
                self.lanes, self.k_fast = True, along_k
        self.width = VECTOR if self.view is not None or self.lanes else 1
        self.slots = extent * bk // (self.width * threads)
        self.threads = threads
        # a row pad where stores go down a column (k-fast: transposed into As[k][m]),
        # keeping rows whole float4s
        self.stride = extent + (4 if self.k_fast else 0)
        self.rows = operand.rows

    def _tag(self, slot: int) -> str:
        return f"{self.name}{slot}"

    def setup(self, s: Scope) -> None:
        w, bk, extent = self.width, self.bk, self.extent
        for slot in range(self.slots):
            tag = self._tag(slot)
            s.emit(f"const int {tag}_f = lid + {slot * self.threads};")
            if self.k_fast:  # runs along k: a slot reads one row, k offset fixed
                s.emit(f"const int {tag}_kk = ({tag}_f % {bk // w}) * {w};")
                s.emit(f"const int {tag}_rr = {tag}_f / {bk // w};")
            else:  # runs along the rows: a slot reads one K offset
                s.emit(f"const int {tag}_rr = ({tag}_f % {extent // w}) * {w};")
                s.emit(f"const int {tag}_kk = {tag}_f / {extent // w};")
            s.emit(f"const int {tag}_row = {self.tile_var} * {extent} + {tag}_rr;")
            top = self.rows - (w if not self.k_fast else 1)
            if self.rows % extent:
                s.emit(f"const bool {tag}_in = {tag}_row < {self.rows};")
                s.emit(f"const int {tag}_r = {tag}_row < {top} ? {tag}_row : {top};")
            else:
                s.emit(f"const int {tag}_r = {tag}_row;")
            if self.view is None and not self.lanes:
                self.operand.setup(s, tag, f"{tag}_r")
            # initialised: a value left undefined on the loop's last step miscompiled
            # on PoCL (nondeterministic results for a Relu prologue)
            s.emit(f"float{w if w > 1 else ''} {tag}_v = {'(float4)(0.0f)' if w > 1 else '0.0f'};")

    def fetch(self, s: Scope, k0: str) -> None:
        w = self.width
        for slot in range(self.slots):
            tag = self._tag(slot)
            body = Scope(s)
            body.emit(f"const int k = {k0} + {tag}_kk;")
            checks = [f"{tag}_in"] if self.rows % self.extent else []
            if self.k_size % self.bk:
                top = self.k_size - (w if self.k_fast else 1)
                body.emit(f"const int kc = k < {top} ? k : {top};")
                checks.append(f"k < {self.k_size}")
            else:
                body.emit("const int kc = k;")
            if self.view is not None:
                param, offset = self.view
                text = ix.render(_renamed(offset, {"r": f"{tag}_r", "k": "kc"}))
                value = f"*(__global const float4*)({param} + {text})"
                zero = "(float4)(0.0f)"
            elif self.lanes:
                value, zero = self._lanes(body, tag), "(float4)(0.0f)"
            else:
                value = self.operand.load(body, tag, f"{tag}_r", "kc")
                zero = "0.0f"
            body.emit(f"{tag}_v = {' && '.join(checks)} ? {value} : {zero};" if checks else
                      f"{tag}_v = {value};")
            s.nest("", body)

    def _lanes(self, body: Scope, tag: str) -> str:
        """Load the prologue's arguments 4 wide (or once, where constant over the run)
        and evaluate it per lane into ``{tag}_p``."""
        leaves = prologue_leaves(self.gen, self.operand, self.k_fast, f"{tag}_r", "kc")
        if leaves is None:  # decided on the same walk in __init__
            raise AssertionError(f"sgemm: operand {self.name}'s prologue is no longer a vector view")
        reads = _load_leaves(self.gen, body, leaves, f"{tag}_l")
        name, index = self.operand.view  # type: ignore[misc]
        body.emit(f"float4 {tag}_p;")
        for lane in range(VECTOR):
            walk = _Lanes(self.gen.em, _lane_reads(reads, lane))
            scope = Scope(body)
            result = walk.value(scope, name, index(*_index_vars(self.operand, f"{tag}_r", "kc")))
            scope.emit(f"{tag}_p.s{lane} = {result};")
            body.nest("", scope)
            self.gen.em.counter = walk.counter
        return f"{tag}_p"

    def place(self, s: Scope, buffer: str) -> None:
        for slot in range(self.slots):
            tag = self._tag(slot)
            target = f"{self.array}[{buffer}]"
            if self.width == 1:
                s.emit(f"{target}[{tag}_kk][{tag}_rr] = {tag}_v;")
            elif self.k_fast:  # transposed: four k's of one row
                s.emit(" ".join(f"{target}[{tag}_kk + {e}][{tag}_rr] = {tag}_v.s{e};"
                                for e in range(self.width)))
            else:
                s.emit(f"*(__local float4*)&{target}[{tag}_kk][{tag}_rr] = {tag}_v;")


def _renamed(expr: ix.IExpr, names: dict[str, str]) -> ix.IExpr:
    """``expr`` with the probe's variables renamed to the kernel's (their ranges kept)."""
    return ix.substitute(expr, lambda v: ix.IVar(names[v.name], v.lo, v.hi) if v.name in names else v)


def _load_leaves(gen: _Gen, body: Scope, leaves: list[_Leaf], stem: str) -> list[tuple[_Leaf, str]]:
    """Load each leaf at its run's offset into a fresh variable: 4 wide (``float4`` from
    a float32 argument, ``vload4`` from another type) or, constant over the run, once."""
    reads = []
    for leaf in leaves:
        var = gen.em.fresh(stem)
        at = f"{leaf.param} + {ix.render(leaf.offset)}"
        load = (f"*(__global const float4*)({at})" if leaf.dtype == "float32" else
                f"vload4(0, {at})") if leaf.vector else f"{leaf.param}[{ix.render(leaf.offset)}]"
        body.emit(f"const {sp.C_TYPES[leaf.dtype]}{VECTOR if leaf.vector else ''} {var} = {load};")
        reads.append((leaf, var))
    return reads


def _lane_reads(reads: list[tuple[_Leaf, str]], lane: int) -> dict[str, str]:
    """What `_Lanes` reads for each leaf in ``lane``: its lane of the vector, or the value."""
    return {leaf.key: f"{var}.s{lane}" if leaf.vector else var for leaf, var in reads}


# -- the epilogue on runs of 4 columns ----------------------------------------------------

LANE = "nv"  # the column of a lane's epilogue: the run's first (``n``) plus the lane
# see `vector_epilogue`: measured faster at K 64-768, slower at 3072 (a register over 128)
VECTOR_EPILOGUE_MAX_K = 1024


@contextmanager
def _walking(gen: _Gen, em: ValueEmitter, stored: dict[str, str]) -> Iterator[None]:
    """Run the block's epilogue (`gen.epilogue`, through `Problem.store`) with value walk
    ``em``, handing its stored values to ``stored`` instead of storing them."""
    saved = gen.em
    gen.em, gen.stored = em, stored
    try:
        yield
    finally:
        gen.em, gen.stored = saved, None


@dataclass(frozen=True)
class _VectorEpilogue:
    """The store loop on 4 adjacent columns of one row at once: every kernel argument
    the epilogue reads is a vector along the columns (one 4-wide load) or constant over
    the run (one load), the epilogue runs once per lane (the same walk as the scalar
    store loop, each read replaced by its lane), and each output is stored 4 wide.
    Offsets are at the run's first column ``n``."""

    leaves: list[_Leaf]
    stores: dict[str, ix.IExpr]

    def emit(self, gen: _Gen, problem: Problem, s: Scope, accumulators: list[str]) -> None:
        reads = _load_leaves(gen, s, self.leaves, "e")
        results = {value: gen.em.fresh("o") for value in self.stores}
        for var in results.values():
            s.emit(f"float4 {var};")
        for lane, accumulator in enumerate(accumulators):
            scope = Scope(s)
            scope.emit(f"const int {LANE} = n + {lane};")
            walk = _Lanes(gen.em, _lane_reads(reads, lane))
            stored: dict[str, str] = {}
            with _walking(gen, walk, stored):
                problem.store(scope, "m", LANE, accumulator)
            gen.em.counter = walk.counter
            for value, var in results.items():
                scope.emit(f"{var}.s{lane} = {stored[value]};")
            s.nest("", scope)
        for value, var in results.items():
            s.emit(f"*(__global float4*)({gen.stores[value]} + {ix.render(self.stores[value])}) = {var};")


def vector_epilogue(gen: _Gen, problem: Problem) -> _VectorEpilogue | None:
    """The store loop's plan for runs of 4 columns (`_VectorEpilogue`), where N is whole
    runs of 4, every output is float32 and stored at offsets that step by one along the
    run, and every kernel argument the epilogue reads is a vector or constant over the
    run (one walk of the epilogue decides, the scalar store loop's own); None otherwise
    (a ragged N, a Transpose in the epilogue, a Gather …: one element per store).

    Offered only where it measured faster (H200, GPT-2/BERT-base width at batch 8,
    every GEMM of both models timed with and without it in one call): where the epilogue
    reads an operand per element (varying along the rows too: an attention mask, a
    residual — the scalar loop read them one word per lane at a stride of 4: the masked
    scores GEMM went 0.149 → 0.114 ms, the residual output projection 0.130 → 0.123)
    over a K of at most `VECTOR_EPILOGUE_MAX_K`. Where it only stores, or reads a bias
    row, the scalar loop was as fast or faster (0.098 vs 0.101 ms, QKV 0.339 vs 0.347),
    and the K = 3072 GEMMs ran 5 % slower with it, with or without a residual read
    (0.437 → 0.459 ms; session 11: GPT-2's FFN2 with its residual 0.447 → 0.467 ms).
    The cause is occupancy: NVIDIA's ptxas (sm_90, the driver's PTX) gives the 128×64
    8×8 kernel (128 work-items) 129 registers with the vector epilogue, 128 with the
    scalar one, no spills either way. Registers go in steps of 8 per work-item: 136 ×
    128 leaves room for 3 work-groups in an SM's 65,536 instead of 4 (derived, not
    measured), and a K loop of 3072 (384 steps) is where fewer warps show; a K of 768
    spends relatively longer in the epilogue, which the vector form shortens. GPT-2's
    output projection (a Transpose prologue, bias and residual) takes 141 registers with
    either epilogue, 0.123 ms against BERT's plain one's 0.114 (its registers not
    dumped): the same cliff is the likely cause there. Lifting the gate
    needs a register cap (``-cl-nv-maxrregcount`` is per program) or an epilogue one
    register lighter; neither is done."""
    n_size = problem.b.rows
    if not isinstance(n_size, int) or n_size % VECTOR or problem.k > VECTOR_EPILOGUE_MAX_K or \
            any(gen.view.dtype(value) != "float32" for value in gen.stores):
        return None
    probe, scope, stored = _ReadProbe(gen.em), Scope(), {}
    try:
        with _walking(gen, probe, stored):
            problem.store(scope, "m", LANE, "acc")
    except (_NotView, KeyError, ValueError, TypeError):
        return None
    where = dict(gen.iteration)
    # the walk emitted nothing but the iteration variables' bindings: no index computed
    # from a value (Gather), no guarded read (Pad), no conv column split into C variables
    if len(scope.lines) != len(where) or set(stored) != set(gen.stores):
        return None
    known = {"m", LANE, *(f"b{d}" for d in range(len(problem.batch)))}
    leaves = _classified(probe.reads, LANE, where)
    if leaves is None or not any(leaf.vector and "m" in ix.free_vars(leaf.offset) for leaf in leaves):
        return None
    stores = {value: ix.substitute(gen.store_index(value, gen.shape.forward[value]),
                                 lambda v: where.get(v.name, v)) for value in gen.stores}
    offsets = [leaf.offset for leaf in leaves] + list(stores.values())
    if any(not ix.free_vars(offset) <= known for offset in offsets) or \
            any(_classify(offset, LANE) != ("inc", 1, True) for offset in stores.values()):
        return None
    first = {LANE: "n"}
    return _VectorEpilogue([replace(leaf, offset=_renamed(leaf.offset, first)) for leaf in leaves],
                           {value: _renamed(offset, first) for value, offset in stores.items()})
