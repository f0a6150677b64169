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
per element, through the block's value walk (`gemm.Problem.store`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    """One kernel argument read by a prologue: a ``vector`` (its offset steps by one
    inside each aligned run of 4: one 4-wide load) or a value constant over the run
    (a broadcast row or scalar: one load, used by every lane)."""

    param: str
    offset: ix.IExpr
    dtype: str
    vector: bool


class _PrologueProbe(_Probe):
    """The block's value walk through elementwise and layout operators, recording every
    kernel argument it reads and how the read moves along ``var``: where each is a
    vector or constant over an aligned run of 4, the operand loads 4 elements at once and
    evaluates its prologue once per lane (`_Loader.fetch`)."""

    def __init__(self, em: ValueEmitter, var: str) -> None:
        super().__init__(em)
        self.var = var
        self.leaves: dict[str, _Leaf] = {}

    def assign(self, scope: Scope, dtype: str, expr: str) -> str:
        return self.fresh("p")  # only where values are read from matters here

    def index_var(self, scope: Scope, expr: ix.IExpr, lo: int, hi: int) -> ix.IExpr:
        raise _NotView  # an index bound at run time (Concat, Pad): not a view

    def value(self, scope: Scope, name: str, index: tuple[ix.IExpr, ...]) -> str:
        if name in self.pinned:
            raise _NotView
        constant = self.view.constants.get(name)
        if constant is not None and np.size(constant) == 1:
            return "c"
        if name in self.params:
            array = self.derived.get(name)
            shape = tuple(array.shape) if array is not None else self.view.shape(name)
            dtype = str(array.dtype) if array is not None else self.view.dtype(name)
            if dtype not in sp.C_TYPES or dtype in sp.STORAGE_TYPES:
                raise _NotView  # float16 is stored as half: not a plain 4-wide load
            offset = self.offset(ix.physical_offset(index, shape, self.layouts.get(name)))
            kind = _classify(offset, self.var)
            if kind is None or (kind[0] == "inc" and kind[1:] != (1, True)):
                raise _NotView
            leaf = _Leaf(self.params[name], offset, dtype, kind[0] == "inc")
            return self.leaves.setdefault(_leaf_key(leaf.param, offset), leaf).param
        producer = self.view.producer_index.get(name)
        info = ops.current().get(self.view.nodes[producer].op) if producer is not None else None
        if producer not in self.members or info is None or info.role not in ("layout", "elementwise"):
            raise _NotView
        return self.node_value(scope, self.view.nodes[producer], name, index)


def _leaf_key(param: str, offset: ix.IExpr) -> str:
    return f"{param}[{ix.render(offset)}]"


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
            offset = self.offset(ix.physical_offset(index, shape, self.layouts.get(name)))
            return self.reads[_leaf_key(self.params[name], offset)]
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
    probe = _PrologueProbe(gen.em, k if along_k else row)
    scope = Scope()
    try:
        probe.value(scope, name, index(*_index_vars(operand, row, k)))
    except (_NotView, KeyError, ValueError, TypeError):
        return None
    if gen.view.dtype(name) != "float32":
        return None
    leaves = list(probe.leaves.values())
    if scope.lines or not any(leaf.vector and leaf.dtype == "float32" for leaf in leaves):
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


def _kernel(gen: _Gen, problem: Problem, tile: Sgemm) -> Kernel:
    m_size, n_size, k_size = problem.a.rows, problem.b.rows, problem.k
    threads = tile.work_group
    wn = tile.bn // tile.tn
    n_mt, n_nt = -(-m_size // tile.bm), -(-n_size // tile.bn)
    batch_total = math.prod(problem.batch)
    split = tile.groups
    steps = -(-k_size // tile.bk)
    chunk = -(-steps // split) * tile.bk  # whole K steps per group: only the last is ragged
    groups = batch_total * n_mt * n_nt * split
    from egraph_compiler.backends.opencl.gemm import bind_tile_indices
    # defines: `build.hoist_sizes` would make a literal here a kernel argument
    gen.defines += [f"SG_BK {tile.bk}", "SG_ALIGN 16"]
    s = Scope()
    s.emit("const int lid = get_local_id(0);")
    bind_tile_indices(s, split, n_nt, n_mt, problem.batch)
    s.emit(f"const int tx = lid % {wn}; const int ty = lid / {wn};")
    loaders = [_Loader(gen, "a", problem.a, tile.bm, tile.bk, threads, k_size, "mt"),
               _Loader(gen, "b", problem.b, tile.bn, tile.bk, threads, k_size, "nt")]
    for loader in loaders:
        s.emit(f"__local float {loader.array}[2][{tile.bk}][{loader.stride}] "
               "__attribute__((aligned(SG_ALIGN)));")
        loader.setup(s)
    if split > 1:
        s.emit(f"const int k_first = kg * {chunk};")
        s.emit(f"const int k_steps = ({k_size} < k_first + {chunk} ? {k_size} : k_first + {chunk})"
               f" > k_first ? (({k_size} < k_first + {chunk} ? {k_size} : k_first + {chunk})"
               f" - k_first + {tile.bk - 1}) / {tile.bk} : 0;")
        first, count = "k_first", "k_steps"
    else:
        first, count = "0", str(steps)
    rows_a = _runs(tile.tm, tile.bm, "ty")
    cols_b = _runs(tile.tn, tile.bn, "tx")
    for i in range(tile.tm):
        s.emit(" ".join(f"float c{i}_{j} = 0.0f;" for j in range(tile.tn)))
    # the first tile, then one K step per iteration: fetch the next, multiply this one
    first_fetch = Scope(s)
    for loader in loaders:
        loader.fetch(first_fetch, first)
    for loader in loaders:
        loader.place(first_fetch, "0")
    s.nest(f"if ({count} > 0)", first_fetch)
    s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    step = Scope(s)
    step.emit("const int cur = t & 1;")
    # the last step fetches its own tile again (into the buffer no one reads any more):
    # no branch around the loads, and no load past K (a guarded fetch and store also
    # miscompiled on PoCL behind a Relu prologue)
    step.emit(f"const int ahead = t + 1 < {count} ? t + 1 : t;")
    for loader in loaders:
        loader.fetch(step, f"{first} + ahead * {tile.bk}")
    mul = Scope(step)
    for run, offset in enumerate(rows_a):
        mul.emit(f"const float4 a{run} = *(__local const float4*)&As[cur][kk][{offset}];")
    for run, offset in enumerate(cols_b):
        mul.emit(f"const float4 b{run} = *(__local const float4*)&Bs[cur][kk][{offset}];")
    for i in range(tile.tm):
        a = f"a{i // 4}.s{i % 4}"
        mul.emit(" ".join(f"c{i}_{j} = mad({a}, b{j // 4}.s{j % 4}, c{i}_{j});"
                          for j in range(tile.tn)))
    step.nest("__attribute__((opencl_unroll_hint(SG_BK))) for (int kk = 0; kk < SG_BK; ++kk)", mul)
    for loader in loaders:
        loader.place(step, "cur ^ 1")
    # one barrier per step: the buffer written above was last read a step ago
    step.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    s.nest(f"for (int t = 0; t < {count}; ++t)", step)
    ragged_m, ragged_n = m_size % tile.bm != 0, n_size % tile.bn != 0
    for i in range(tile.tm):
        for j in range(tile.tn):
            out = Scope(s)
            out.emit(f"const int m = mt * {tile.bm} + {_element(rows_a, i)};")
            out.emit(f"const int n = nt * {tile.bn} + {_element(cols_b, j)};")
            done = Scope(out)
            if split > 1:
                done.emit(f"{gen.scratch_param}[((kg * {batch_total} + gb) * {m_size} + m) * "
                          f"{n_size} + n] = c{i}_{j};")
            else:
                problem.store(done, "m", "n", f"c{i}_{j}")
            checks = [c for c, ragged in ((f"m < {m_size}", ragged_m), (f"n < {n_size}", ragged_n))
                      if ragged]
            out.nest(f"if ({' && '.join(checks)})" if checks else "", done)
            s.nest("", out)
    return gen.finish(s, groups * threads, threads)


def _runs(per_item: int, extent: int, coord: str) -> list[str]:
    """The local-memory offsets of a work-item's runs of 4 (rows or columns)."""
    return [f"{coord} * 4 + {run * extent // (per_item // 4)}" for run in range(per_item // 4)]


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
                text = ix.render(_substitute(offset, {"r": f"{tag}_r", "k": "kc"},
                                             self.rows, self.k_size))
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
        reads: list[tuple[_Leaf, str]] = []
        for leaf in leaves:
            var = self.gen.em.fresh(f"{tag}_l")
            c_type = sp.C_TYPES[leaf.dtype]
            at = f"{leaf.param} + {ix.render(leaf.offset)}"
            load = (f"*(__global const float4*)({at})" if leaf.dtype == "float32" else
                    f"vload4(0, {at})") if leaf.vector else f"{leaf.param}[{ix.render(leaf.offset)}]"
            body.emit(f"const {c_type}{VECTOR if leaf.vector else ''} {var} = {load};")
            reads.append((leaf, var))
        name, index = self.operand.view  # type: ignore[misc]
        body.emit(f"float4 {tag}_p;")
        for lane in range(VECTOR):
            walk = _Lanes(self.gen.em, {_leaf_key(leaf.param, leaf.offset):
                                        f"{var}.s{lane}" if leaf.vector else var
                                        for leaf, var in reads})
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


def _substitute(expr: ix.IExpr, names: dict[str, str], rows: int, k_size: int) -> ix.IExpr:
    """``expr`` with the probe's variables renamed to the kernel's (their ranges kept)."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, ix.IVar):
        return ix.IVar(names[expr.name], expr.lo, expr.hi) if expr.name in names else expr
    if isinstance(expr, ix.IOpaque):
        return expr
    if isinstance(expr, ix.IDiv):
        return ix.floordiv(_substitute(expr.num, names, rows, k_size), expr.den)
    if isinstance(expr, ix.IMod):
        return ix.mod(_substitute(expr.num, names, rows, k_size), expr.den)
    return ix.add(expr.const, *(ix.mul(_substitute(atom, names, rows, k_size), coeff)
                                for atom, coeff in expr.terms))
