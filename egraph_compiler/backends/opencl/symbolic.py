"""One OpenCL artefact for every shape in the declared dim ranges (no ``--bind``).

The backend (fusion, select, plan, kernels; the e-graph ran once, symbolically) runs
on a graph whose dims are `shapes.symint.SymInt`s: each dim is its value at one shape
and carries its `DimExpr` from symbolic shape inference, so every size the kernel
generator computes (extents, strides, work-item counts) and every offset the memory
planner computes arrives with its DERIVATION over the dims. In the kernel text a
derived size is a ``const int`` argument (`build.hoist_sizes`), whatever its value,
so one kernel source serves every shape of a version.

The backend is NOT run at every shape: `versions.py` records each compile's path
condition (its comparisons of derived sizes, and the cost model's floating-point picks
as `symint.Choice`s), and one compile serves every shape where the path comes out the
same (`_generate`): one compile per distinct path, plus a check of each region at its
lowest shape. Specialisations that are optional (an index simplification, a dim of 1
dropped) are made only where the prover establishes them over the ranges
(`symint.everywhere`), the launch order is chosen once (`plan.memory.orders_chosen_once`)
and memory planning is off the path (its placement is proved per box), so none of
them splits a version. The shapes then group into

- **versions**: points whose launches have the same kernels, work-groups and
  arguments (the same code). Where the generator's code depends on a dim (row-serial
  vs work-group rows at `KernelParams.row_serial_min_rows`, a register tile clamped to
  a short dim, a GEMV where a dim is 1), the points split into several versions;
- **boxes**: the ranges are cut into boxes, each inside one version, on which every
  size, work-item count and output dim has ONE expression exact at every point of
  the box: a probe's derivation (checked at every point), else a polynomial fitted
  to the values (`dimpoly.fit`, where the generator computed a size outside the
  tracking: ``int()``, NumPy); the report counts both. A box's memory plan is the
  upper corner's offsets as expressions, proved a valid placement on the whole box by
  the shapes prover with the corner as its peak (`plan.symbolic`), else the corner's
  numbers where no tensor outgrows its corner size.

Where an anchor's variant depends on the dims, the cost model's own expressions are
traced and Z3 decides, per box, that the version's variant is the cheapest at every
shape of it (or names the crossover shape), and along a single varying dim solves the
crossover intervals and checks the dispatch follows them (`crossover.py`).

A size argument costs more than the literal it replaces where the literal let the
OpenCL compiler simplify: each division or remainder by one is a multiply by the
divisor's magic number, two more arguments the run time computes per shape
(`magicdiv`); a matmul tile that divides its dim keeps no clamp (`kernels.matmul_direct`:
a version per divisibility), which a literal size let LLVM drop.

``plan.json`` (version 3) holds the versions, and per box its condition, the
expressions and the offsets; the run time binds the dims from the input shapes,
refuses a shape outside the ranges (naming the input, the dim and the range), picks
the box (the multi-version dispatch) and evaluates the expressions. The regions are
found over the grid of the ranges, so they must be bounded: dims without ``--dim``
get `DEFAULT_HIGH`, and at most `MAX_POINTS` shapes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler import shapes
from egraph_compiler.backends.opencl import cost, crossover, dimpoly, magicdiv, versions
from egraph_compiler.backends.opencl.build import (
    ARG_BYTES_LIMIT,
    SIZE_ARG_BYTES,
    TENSOR_ARG_BYTES,
    Artefact,
    Assembled,
    assemble,
    write_files,
)
from egraph_compiler.backends.opencl.kernels import KernelParams, anchor_shape
from egraph_compiler.backends.opencl.planning import execution_plan
from egraph_compiler.backends.static_checks import prepare_static_graph
from egraph_compiler.fusion import ProfileDb
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.ir.graph import Graph
from egraph_compiler.plan.memory import ExecutionPlan, lifetimes, orders_chosen_once
from egraph_compiler.plan.symbolic import SymbolicPlacement, prove_placement
from egraph_compiler.shapes import symint

SYMBOLIC_PLAN_VERSION = 3
# keep every window bounds check (`KernelParams.shape_stable`): code the same at more
# shapes (MobileNetV2 over 4x4 heights/widths: 4 versions instead of 16), at the cost
# of a compare per load where a bound compile has none (ResNet-50 up to 15 % slower)
SHAPE_STABLE = False
DEFAULT_HIGH = 16  # a dim without --dim (or with an unbounded one) is compiled for 1..16
# divide by size arguments through their magic numbers (`magicdiv`): a multiply where a
# bound kernel's literal divisor is one; without it PoCL scalarises the division
# (benchmarks/dynamic.py --no-magic measures the difference)
MAGIC_DIVISION = True
# a version's divisors that are powers of two at every shape it serves: kernel copies
# dividing by shifts and masks (`_power_of_two_kernels`; benchmarks/dynamic.py
# --no-shift-mask measures without them)
SHIFT_MASK_VERSIONS = True
MAX_POINTS = 2048  # shapes compiled: about 0.1-0.7 s each (BERT-tiny to ResNet-50 on PoCL hosts)

Point = tuple[int, ...]
Box = tuple[tuple[int, int], ...]


def symbolic_dims(graph: Graph) -> list[str]:
    """The symbolic dim names of ``graph``'s inputs, sorted."""
    return sorted({s for v in graph.inputs for d in v.type.shape or () if isinstance(d, DimExpr)
                   for s in d.symbols()})


def compile_ranges(graph: Graph, dims: Sequence[str], steps: Mapping[str, int] | None = None
                   ) -> dict[str, tuple[int, int, int]]:
    """The range each dim is compiled for, ``(low, high, step)``: ``--dim``'s, or
    1..`DEFAULT_HIGH` (from the dim's low end) where the model's range is unbounded;
    ``steps`` (``--dim height=32..64:8``) keeps every step-th value from the low end."""
    steps = steps or {}
    unknown = sorted(set(steps) - set(dims))
    if unknown:
        raise DnnrError(f"error: --dim {unknown[0]}=..:STEP names no symbolic input dim of the "
                        f"model (it has {', '.join(dims) or 'none'})")
    ranges = {}
    for name in dims:
        low, high = graph.symbols.get(name, (1, shapes.infer.DEFAULT_RANGE[1]))
        if high >= shapes.infer.DEFAULT_RANGE[1]:
            high = max(low, DEFAULT_HIGH)
        low = max(low, 1)
        step = steps.get(name, 1)
        ranges[name] = (low, low + (high - low) // step * step, step)
    points = int(np.prod([len(range(lo, h + 1, st)) for lo, h, st in ranges.values()],
                         dtype=np.int64))
    if points > MAX_POINTS:
        text = ", ".join(f"{n}={_range_text(r)}" for n, r in ranges.items())
        raise DnnrError(f"error: a symbolic OpenCL artefact compiles every shape of its dim "
                        f"ranges; {text} has {points} (at most {MAX_POINTS})\n"
                        f"  hint: narrow them with --dim NAME=LO..HI (or LO..HI:STEP), or "
                        f"--bind some dims")
    return ranges


def _range_text(r: tuple[int, int, int]) -> str:
    return f"{r[0]}..{r[1]}" + (f":{r[2]}" if r[2] != 1 else "")


@dataclass
class _Probe:
    signature: str
    built: Assembled
    numbers: dict[str, int]  # quantity name -> value at this point
    # quantity name -> its derivation over the dims (`shapes.symint`), where the
    # generator carried one (else the constant it computed at this point)
    derived: dict[str, Dim] = dataclasses.field(default_factory=dict)
    spans: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # arena lifetimes
    plan: ExecutionPlan | None = None  # its anchors' costs are traced (`crossover`) per box
    # False: not compiled at this shape but served by its region's compile
    # (`_generate`): ``numbers`` are that compile's derivations evaluated here
    compiled: bool = True
    env: dict[str, int] = dataclasses.field(default_factory=dict)  # the shape compiled


def _probe(graph: Graph, dims: Sequence[str], point: Point, tables: object,
           profile_db: ProfileDb | None, params: KernelParams) -> _Probe:
    env = dict(zip(dims, point, strict=True))
    # the dims are `SymInt`s: every size the backend computes carries its derivation
    bound = symint.with_derivations(shapes.bind_symbols(graph, env), graph, env)
    static = prepare_static_graph(bound, "opencl")
    # fusion's legality facts about the dims hold for every shape of the ranges or not at all
    # (and the code's optional specialisations, `symint.everywhere`, too)
    with shapes.prover.using_ranges({n: graph.symbols.get(n, (1, shapes.infer.DEFAULT_RANGE[1]))
                                     for n in dims}):
        plan, selection = execution_plan(static, tables, profile_db, params=params)
        with symint.tracking():  # the kernel text marks where each derived size sits
            built = assemble(plan, params, selection)
    doc = built.doc
    tensors = doc["tensors"]
    quantities: dict[str, int] = {}
    for k, launch in enumerate(doc["launches"]):
        for j, size in enumerate(launch["sizes"]):
            quantities[f"size/{k}/{j}"] = size
        quantities[f"items/{k}"] = built.work_items[k]
    for name in doc["outputs"]:
        for j, d in enumerate(tensors[name]["shape"]):
            quantities[f"shape/{name}/{j}"] = d
    for name, offset in plan.offsets.items():
        quantities[f"offset/{name}"] = offset
        quantities[f"nbytes/{name}"] = plan.sizes[name]
    return _Probe("", built, {n: int(v) for n, v in quantities.items()},
                  {n: symint.expr_of(v) for n, v in quantities.items()}, lifetimes(plan), plan,
                  env=env)


def _probe_or_explain(graph: Graph, dims: Sequence[str], point: Point, tables: object,
                      profile_db: ProfileDb | None, params: KernelParams) -> _Probe:
    """`_probe`, naming the shape when the model cannot be compiled there (a ConvNeXt
    with a height its patchify stride empties, say)."""
    try:
        return _probe(graph, dims, point, tables, profile_db, params)
    except DnnrError as error:
        shape = ", ".join(f"{n}={v}" for n, v in zip(dims, point, strict=True))
        first = str(error).removeprefix("error: ").splitlines()[0]
        raise DnnrError(f"error: the symbolic OpenCL artefact covers every shape of its --dim "
                        f"ranges, and at {shape}: {first}\n  hint: narrow the ranges with "
                        "--dim NAME=LO..HI to shapes the model accepts") from None


def _sign(probe: _Probe, computed: set[str], graph: Graph | None = None) -> None:
    """The probe's version: its code, the constants it reads (their shapes, except the
    dim-dependent ones computed at run time) and its images. A computed constant's
    shape is derived over the dims from ``graph``'s symbolic shapes where its folded
    array lost the derivation."""
    doc = probe.built.doc
    code = {
        "launches": [(la["block"], la["kernel"], la["local"], la["args"], la["kind"], la["variant"])
                     for la in doc["launches"]],
        "tensors": sorted((n, t["kind"], t["dtype"]) + ((tuple(t["shape"]),) if t["kind"] ==
                                                          "constant" and n not in computed else ())
                          for n, t in doc["tensors"].items()),
        "images": sorted(doc["images"]),
    }
    probe.signature = hashlib.sha1(json.dumps(code, sort_keys=True).encode()).hexdigest()[:12]
    for name in computed:
        if name in doc["tensors"]:
            for j, d in enumerate(doc["tensors"][name]["shape"]):
                probe.numbers[f"shape/{name}/{j}"] = int(d)
                probe.derived[f"shape/{name}/{j}"] = _shape_derivation(graph, probe, name, j, d)


def _shape_derivation(graph: Graph | None, probe: _Probe, name: str, axis: int, dim: int) -> Dim:
    expr = symint.expr_of(dim)
    known = graph.types.get(name) if graph is not None else None
    if isinstance(expr, DimExpr) or known is None or known.shape is None or \
            len(known.shape) <= axis or not isinstance(known.shape[axis], DimExpr):
        return expr
    symbolic = known.shape[axis]
    if probe.env and symbolic.symbols() <= set(probe.env) and \
            symbolic.evaluate(dict(probe.env)) == int(dim):
        return symbolic
    return expr


def dim_dependent_constants(probes: Sequence[_Probe]) -> set[str]:
    """Constants folded from the dims (index tensors built by Shape → Range → …): their
    value differs between shapes, so the run time computes them (`_shape_model`)."""
    first: dict[str, np.ndarray] = {}
    varying: set[str] = set()
    for probe in probes:
        for name, array in probe.built.arrays.items():
            seen = first.setdefault(name, array)
            if seen is not array and (seen.shape != array.shape or not np.array_equal(seen, array)):
                varying.add(name)
    return varying


def _shape_model(graph: Graph, names: set[str]) -> bytes:
    """An ONNX model computing ``names`` from the model's inputs (only their shapes are
    read: a value that depended on input data would not have folded to a constant)."""
    from dataclasses import replace

    from egraph_compiler import ir

    producer = {o: n for n in graph.nodes for o in n.outputs}
    needed: set[str] = set()
    stack = list(names)
    while stack:
        value = stack.pop()
        node = producer.get(value)
        if node is None or value in needed:
            continue
        needed.add(value)
        stack.extend(i for i in node.inputs if i)
    nodes = tuple(n for n in graph.nodes if any(o in needed for o in n.outputs))
    read = {i for n in nodes for i in n.inputs}
    missing = sorted(n for n in names if n not in producer)
    if missing:
        raise DnnrError(f"error: the symbolic OpenCL artefact cannot compute '{missing[0]}' at "
                        "run time (it differs between shapes but no node of the model makes it)")
    outputs = tuple(next(v for v in _values(graph) if v.name == n) for n in sorted(names))
    sub = replace(graph, nodes=nodes, inputs=tuple(v for v in graph.inputs if v.name in read),
                  outputs=outputs,
                  constants={k: a for k, a in graph.constants.items() if k in read})
    return ir.to_onnx(sub).SerializeToString()


def _values(graph: Graph) -> list[Any]:
    from egraph_compiler.ir.graph import TensorType, Value

    return [Value(name, TensorType(t.dtype, t.shape)) for name, t in graph.types.items()]


@dataclass(frozen=True)
class _Leaf:
    box: Box
    signature: str
    expressions: dict[str, str]


class _Partition:
    """Cuts the ranges into boxes of one version on which every quantity fits."""

    def __init__(self, dims: Sequence[str], probes: Mapping[Point, _Probe],
                 materialize: Callable[[Sequence[Point]], None] | None = None) -> None:
        self.dims, self.probes = list(dims), probes
        # compiles the given shapes where ``probes`` holds only their region's
        # compile (`_generate`): a box whose memory plan is not proved over the dims
        # uses its corner's numbers, which must then be that shape's own
        self.materialize = materialize
        # quantities that vary with the dims: derived (an expression a probe carried) /
        # fitted (none carried; `dimpoly.fit` found one), by name, over all boxes
        self.derivations: list[str] = []
        self.fitted: list[str] = []
        self.proved_boxes = 0  # boxes whose memory plan is over the dims (`placement`)
        # the values each dim takes (every one of its range, or every step-th)
        self.values = [sorted({p[k] for p in probes}) for k in range(len(dims))]

    def axis_values(self, box: Box, axis: int) -> list[int]:
        lo, hi = box[axis]
        return [v for v in self.values[axis] if lo <= v <= hi]

    def points(self, box: Box) -> list[Point]:
        return list(itertools.product(*(self.axis_values(box, k) for k in range(len(box)))))

    def leaves(self, box: Box) -> list[_Leaf]:
        points = self.points(box)
        signatures = {self.probes[p].signature for p in points}
        if len(signatures) == 1:
            expressions = self.fit(points)
            if expressions is not None:  # bounds on the values the box holds
                return [_Leaf(self.corner_box(points), signatures.pop(), expressions)]
        axis, cut = self.cut(box, len(signatures) > 1)
        low = tuple((r[0], cut - 1) if k == axis else r for k, r in enumerate(box))
        high = tuple((cut, r[1]) if k == axis else r for k, r in enumerate(box))
        return self.leaves(low) + self.leaves(high)

    def cut(self, box: Box, by_signature: bool) -> tuple[int, int]:
        """Where the version changes along some dim (the dim with fewest changes),
        else the middle of the longest dim (a quantity that is not one polynomial)."""
        if by_signature:
            best: tuple[int, int, int] | None = None
            for axis in range(len(box)):
                values = self.axis_values(box, axis)
                slices = []
                for value in values:
                    sub = tuple((value, value) if k == axis else r for k, r in enumerate(box))
                    slices.append(frozenset(self.probes[p].signature for p in self.points(sub)))
                changes = [values[k] for k in range(1, len(slices)) if slices[k] != slices[k - 1]]
                if changes and (best is None or len(changes) < best[0]):
                    best = (len(changes), axis, changes[0])
            if best is not None:
                return best[1], best[2]
        axis = max(range(len(box)), key=lambda k: len(self.axis_values(box, k)))
        values = self.axis_values(box, axis)
        return axis, values[len(values) // 2]

    def fit(self, points: list[Point]) -> dict[str, str] | None:
        """Every quantity's expression over the box of ``points``: the derivation a probe
        carried (`shapes.symint`) that gives the exact value at EVERY point, else a
        fitted polynomial (`dimpoly.fit`, for a size computed outside the tracking);
        None when some quantity has neither (the box is cut)."""
        first = self.probes[points[0]].numbers
        expressions = {}
        for name in first:
            if name.startswith(("offset/", "nbytes/")):
                continue  # the memory plan: `placement`
            found = self.derived(name, points)
            if found is not None:
                expressions[name] = found
                continue
            text = dimpoly.fit(self.dims, points, [self.probes[p].numbers[name] for p in points])
            if text is None:
                return None
            self.fitted.append(name)
            expressions[name] = text
        placement = self.placement(points)
        if placement is not None:  # offsets over the dims, proved valid on the box
            self.proved_boxes += 1
            expressions.update({f"offset/{n}": dimpoly.render(o)
                                for n, o in placement.offsets.items()})
            expressions["arena"] = str(placement.arena_bytes)
            return expressions
        # else the box uses its upper corner's offsets, numbers valid there (checked
        # where the corner was not compiled itself but served by its region's
        # compile), and no tensor may be larger elsewhere in the box
        corner = self.probes[tuple(hi for _, hi in self.corner_box(points))]
        arena = [n for n, t in corner.built.doc["tensors"].items() if t["kind"] == "arena"]
        if not corner.compiled and not _placement_valid_at(corner, arena):
            if self.materialize is None:
                return None
            self.materialize(points)
            return None if len({self.probes[p].signature for p in points}) > 1 else \
                self.fit(points)
        if corner.compiled:  # its own plan: build_symbolic reads its offsets
            for p in points:
                for name, info in self.probes[p].built.doc["tensors"].items():
                    if info["kind"] == "arena" and info["nbytes"] > \
                            corner.built.doc["tensors"][name]["nbytes"]:
                        return None
            return expressions
        for p in points:
            numbers = self.probes[p].numbers
            if any(numbers[f"nbytes/{n}"] > corner.numbers[f"nbytes/{n}"] for n in arena):
                return None
        expressions.update({f"offset/{n}": str(corner.numbers[f"offset/{n}"]) for n in arena})
        expressions["arena"] = str(max((corner.numbers[f"offset/{n}"] + corner.numbers[f"nbytes/{n}"]
                                        for n in arena), default=0))
        return expressions

    def placement(self, points: list[Point]) -> SymbolicPlacement | None:
        """The upper corner's memory plan with its offsets and sizes over the dims
        (`plan.symbolic`), when its sizes are exact at every point of the box and the
        prover establishes the placement on the box's ranges."""
        box = self.corner_box(points)
        corner = self.probes[tuple(hi for _, hi in box)]
        names = [n for n, t in corner.built.doc["tensors"].items() if t["kind"] == "arena"]
        if any(f"offset/{n}" not in corner.derived for n in names):
            return None
        offsets, sizes = {}, {}
        for name in names:
            size = corner.derived[f"nbytes/{name}"]
            if not all(_value(size, self.dims, p) == self.probes[p].numbers.get(f"nbytes/{name}")
                       for p in points):
                return None
            offsets[name], sizes[name] = corner.derived[f"offset/{name}"], size
        return prove_placement(offsets, sizes, corner.spans,
                               dict(zip(self.dims, box, strict=True)))

    def derived(self, name: str, points: list[Point]) -> str | None:
        """The first derivation of ``name`` among the probes of ``points`` that is exact
        at every one of them, as `dimpoly` text."""
        tried: set[str] = set()
        for p in points:
            expr = self.probes[p].derived.get(name)
            if expr is None or str(expr) in tried:
                continue
            tried.add(str(expr))
            if all(_value(expr, self.dims, q) == self.probes[q].numbers[name] for q in points):
                if isinstance(expr, DimExpr):
                    self.derivations.append(name)
                return dimpoly.render(expr)
        return None

    def corner_box(self, points: list[Point]) -> Box:
        return tuple((min(p[k] for p in points), max(p[k] for p in points))
                     for k in range(len(self.dims)))


def _placement_valid_at(probe: _Probe, names: Sequence[str]) -> bool:
    """``probe``'s arena offsets (numbers at its shape) place ``names`` without two
    tensors live at the same step sharing a byte."""
    placed = [(probe.numbers[f"offset/{n}"], probe.numbers[f"nbytes/{n}"], *probe.spans[n])
              for n in names]
    if any(offset < 0 for offset, *_ in placed):
        return False
    return all(a_end < b_start or b_end < a_start or a_off + a_size <= b_off or
               b_off + b_size <= a_off
               for k, (a_off, a_size, a_start, a_end) in enumerate(placed)
               for b_off, b_size, b_start, b_end in placed[k + 1:])


def _value(expr: Dim, dims: Sequence[str], point: Point) -> int:
    return expr.evaluate(dict(zip(dims, point, strict=True))) if isinstance(expr, DimExpr) \
        else int(expr)


def describe_box(dims: Sequence[str], box: Box, steps: Sequence[int] | None = None) -> str:
    steps = steps or [1] * len(dims)
    return " and ".join(f"{n} == {lo}" if lo == hi else f"{lo} <= {n} <= {hi}" +
                        (f" (step {st})" if st != 1 else "")
                        for n, (lo, hi), st in zip(dims, box, steps, strict=True))


@dataclass
class _Generated:
    probes: dict[Point, _Probe]  # every shape: its own compile, or its region's served
    computed: set[str]  # `dim_dependent_constants`
    compiled: dict[Point, _Probe]  # the shapes compiled
    materialize: Callable[[Sequence[Point]], None]
    report: dict[str, Any]


def _generate(graph: Graph, dims: Sequence[str], grid: Sequence[Point], tables: object,
              profile_db: ProfileDb | None, params: KernelParams) -> _Generated:
    """Compile once per path of the backend over the grid (`versions.Explorer`): each
    compile records its comparisons on the dims and the cost model's variant picks, and
    serves every shape where they come out the same. A region of several shapes is
    compiled again at its lowest shape, which must have the same code and every
    quantity where the region's derivations put it; a region that fails (a size the
    generator computed outside the tracking) has every shape compiled."""
    compiled: dict[Point, _Probe] = {}
    paths: dict[Point, list] = {}

    def compile_at(point: Point) -> list:
        if point not in compiled:
            with symint.recording() as facts:
                probe = _probe_or_explain(graph, dims, point, tables, profile_db, params)
            compiled[point] = probe
            paths[point] = [*facts, *_choice_atoms(probe, dims, point, params)]
        return paths[point]

    regions = versions.Explorer(dims, grid).explore(compile_at)
    for region in regions:
        if len(region.points) > 1:
            compile_at(min(region.points, key=lambda p: (sum(p), p)))
    enumerated: set[int] = set()
    while True:
        computed = dim_dependent_constants([compiled[p] for p in grid if p in compiled])
        for probe in compiled.values():
            _sign(probe, computed, graph)
        probes: dict[Point, _Probe] = {}
        failed = False
        for k, region in enumerate(regions):
            served = compiled[region.at]
            for p in region.points:
                probes[p] = compiled[p] if p in compiled else _served(served, dims, p)
            if k in enumerated:
                continue
            if any(not _agrees(served, compiled[p], dims, p) for p in region.points
                   if p in compiled and p != region.at):
                enumerated.add(k)
                failed = True
                for p in region.points:
                    compile_at(p)
        if not failed:
            break

    def materialize(points: Sequence[Point]) -> None:
        for p in points:
            if not probes[p].compiled:
                compile_at(p)
                _sign(compiled[p], computed, graph)
                probes[p] = compiled[p]

    ranges = {n: (min(p[k] for p in grid), max(p[k] for p in grid)) for k, n in enumerate(dims)}
    report = {"paths": len(regions), "checked": sum(len(r.points) > 1 for r in regions),
              "compiled_every_shape": len(enumerated),
              "conditions": [{"compiled_at": dict(zip(dims, r.at, strict=True)),
                              "shapes": len(r.points),
                              "condition": versions.describe(r, ranges)} for r in regions]}
    return _Generated(probes, computed, compiled, materialize, report)


def _served(probe: _Probe, dims: Sequence[str], point: Point) -> _Probe:
    """``probe``'s compile serving ``point`` of its region: its quantities' derivations
    evaluated there."""
    numbers = {n: _value(probe.derived.get(n, v), dims, point) for n, v in probe.numbers.items()}
    return dataclasses.replace(probe, numbers=numbers, compiled=False)


def _agrees(served: _Probe, check: _Probe, dims: Sequence[str], point: Point) -> bool:
    """The region's compile predicts ``check``'s (at ``point``): the same code, and
    every quantity its derivation's value (offsets aside: the plan over the dims is
    proved per box, `plan.symbolic`)."""
    if served.signature != check.signature or served.numbers.keys() != check.numbers.keys():
        return False
    return all(_value(served.derived.get(n, v), dims, point) == check.numbers[n]
               for n, v in served.numbers.items() if not n.startswith("offset/"))


def _choice_atoms(probe: _Probe, dims: Sequence[str], point: Point,
                  params: KernelParams) -> list[versions.ChoiceAtom]:
    """Per conv/matmul anchor whose sizes depend on the dims: the variant the cost
    model picks (`cost.choose` over `cost.options`, as `kernels._Gen.pick` prices it),
    as a function of the dims through the sizes' derivations."""
    if probe.plan is None:
        return []
    device = cost.DEVICES[params.device]
    view = GraphView(probe.plan.fusion.graph)
    atoms = []
    for block in probe.plan.fusion.blocks:
        if block.kind not in ("conv", "matmul") or block.anchor is None:
            continue
        sizes, items, tiled_ok, gemv_side, depthwise_ok, taps = anchor_shape(view, block, params)
        exprs: dict[str, Dim] = {**{k: symint.expr_of(v) for k, v in sizes.items()},
                                 "@items": symint.expr_of(items), "@taps": symint.expr_of(taps)}
        if not any(isinstance(e, DimExpr) for e in exprs.values()):
            continue

        def pick(env: Mapping[str, int], exprs: dict[str, Dim] = exprs, tiled_ok: bool = tiled_ok,
                 gemv_side: str | None = gemv_side, depthwise_ok: bool = depthwise_ok) -> str:
            v = {k: e.evaluate(dict(env)) if isinstance(e, DimExpr) else int(e)
                 for k, e in exprs.items()}
            return cost.choose(cost.options(
                device, v["m"], v["n"], v["k"], v["batch"], v["@items"], tiled_ok, gemv_side,
                depthwise=depthwise_ok, window_taps=v["@taps"], width=v.get("width", 0))).describe()

        signature = repr(sorted((k, str(e)) for k, e in exprs.items())) + \
            repr((tiled_ok, gemv_side, depthwise_ok))
        label = pick(dict(zip(dims, point, strict=True)))
        atoms.append(versions.ChoiceAtom(view.nodes[block.anchor].name, label, pick, signature))
    return atoms


def build_symbolic(graph: Graph, out_dir: Path, tables: object = None,
                   profile_db: ProfileDb | None = None, params: KernelParams | None = None,
                   progress: Callable[[str], None] | None = None,
                   steps: Mapping[str, int] | None = None) -> Artefact:
    """Write the symbolic artefact of ``graph`` (symbolic input dims) into ``out_dir``."""
    # the CPU class keeps sizes as kernel arguments here, as before bound CPU compiles
    # turned them into literals (`KernelParams.for_device`); other classes as given
    base = params or KernelParams()
    params = dataclasses.replace(base, shape_stable=SHAPE_STABLE,
                                 hoist_sizes=base.hoist_sizes or base.device == "cpu")
    dims = symbolic_dims(graph)
    ranges = compile_ranges(graph, dims, steps)
    box: Box = tuple(ranges[n][:2] for n in dims)
    dim_steps = [ranges[n][2] for n in dims]
    grid = list(itertools.product(*(range(lo, hi + 1, st) for lo, hi, st in ranges.values())))
    if progress:
        progress(f"symbolic OpenCL: compiling {len(grid)} shapes of "
                 f"{', '.join(f'{n}={_range_text(r)}' for n, r in ranges.items())} ...")
    with orders_chosen_once():  # one launch order for the whole ranges (item 5)
        generated = _generate(graph, dims, grid, tables, profile_db, params)
        probes, computed, compiled = generated.probes, generated.computed, generated.compiled
        partition = _Partition(dims, probes, materialize=generated.materialize)
        leaves = partition.leaves(box)
    versions = sorted({leaf.signature for leaf in leaves})
    sources: dict[str, str] = {}
    arrays: dict[str, np.ndarray] = {}
    version_docs = []
    for signature in versions:
        sample = next(probes[p] for p in grid if probes[p].signature == signature)
        sources.update(sample.built.sources)
        arrays.update({n: a for n, a in sample.built.arrays.items() if n not in computed})
        version_docs.append({
            "id": signature,
            "launches": [{k: v for k, v in la.items() if k not in ("global", "sizes", "shape_key")}
                         for la in sample.built.doc["launches"]]})
    plain_sources = dict(sources)
    divisors = _magic_divisions(sources, version_docs) if MAGIC_DIVISION else {}
    shift_kernels = 0 if not SHIFT_MASK_VERSIONS else _power_of_two_kernels(plain_sources, sources, version_docs, divisors, dims,
                                          [[partition.points(leaf.box) for leaf in leaves
                                            if leaf.signature == v] for v in versions],
                                          [[leaf for leaf in leaves if leaf.signature == v]
                                           for v in versions])
    box_docs = []
    arena_bytes = 0
    for leaf in leaves:
        corner = probes[tuple(hi for _, hi in leaf.box)].built.doc
        symbolic_offsets = {n.removeprefix("offset/"): e for n, e in leaf.expressions.items()
                            if n.startswith("offset/")}
        box_arena = int(leaf.expressions.get("arena", corner["arena_bytes"]))
        arena_bytes = max(arena_bytes, box_arena)
        launches = corner["launches"]
        box_docs.append({
            "condition": describe_box(dims, leaf.box, dim_steps),
            "box": {n: list(r) for n, r in zip(dims, leaf.box, strict=True)},
            "version": versions.index(leaf.signature),
            "arena_bytes": box_arena,
            # byte offsets over the dims (proved on the box, `plan.symbolic`), or the
            # upper corner's numbers
            "offsets": symbolic_offsets or {n: t["offset"] for n, t in corner["tensors"].items()
                                            if t["kind"] == "arena"},
            # each size a kernel divides by is followed by its magic (`magicdiv`)
            "sizes": [_with_magic([leaf.expressions[f"size/{k}/{j}"]
                                   for j in range(len(la["sizes"]))],
                                  divisors.get(version_docs[versions.index(leaf.signature)]
                                               ["launches"][k]["kernel"], ()))
                      for k, la in enumerate(launches)],
            "items": [leaf.expressions[f"items/{k}"] for k in range(len(launches))],
            "output_shapes": {n: [leaf.expressions[f"shape/{n}/{j}"]
                                  for j in range(len(corner["tensors"][n]["shape"]))]
                              for n in [*corner["outputs"], *sorted(computed & set(corner["tensors"]))]},
        })
    crossovers = _crossovers(dims, leaves, probes, versions, params)
    top = probes[tuple(hi for _, hi in box)].built.doc
    tensors: dict[str, dict[str, Any]] = {}
    real = [p for p in grid if p in compiled]  # the shapes compiled (`_generate`)
    for name in sorted(computed):
        info = next(compiled[p].built.doc["tensors"][name] for p in real
                    if name in compiled[p].built.doc["tensors"])
        tensors[name] = {"kind": "computed", "dtype": info["dtype"],
                         "nbytes": max(int(compiled[p].built.doc["tensors"].get(name, info)["nbytes"])
                                       for p in real)}
    for name, info in top["tensors"].items():
        if name in computed:
            continue
        if info["kind"] == "constant":
            tensors[name] = info
        elif info["kind"] in ("input", "output"):  # buffers hold the largest shape
            # inputs and outputs grow with every dim: the top corner, compiled
            # first, is the largest (`_generate`)
            tensors[name] = {**info, "shape": _dims(graph, name, info["shape"]),
                             "nbytes": max(int(compiled[p].built.doc["tensors"][name]["nbytes"])
                                           for p in real)}
        else:
            tensors[name] = {"kind": "arena", "dtype": info["dtype"]}
    for doc in version_docs:  # a constant one version reads (a derived layout) is declared
        for launch in doc["launches"]:
            for arg in launch["args"]:
                if arg in arrays and arg not in tensors:
                    array = arrays[arg]
                    tensors[arg] = {"kind": "constant", "dtype": str(array.dtype),
                                    "shape": list(array.shape), "nbytes": int(array.nbytes)}
    for leaf in leaves:  # every version's intermediates, not only the top corner's
        for name, info in probes[tuple(hi for _, hi in leaf.box)].built.doc["tensors"].items():
            if info["kind"] == "arena" and name not in tensors:
                tensors[name] = {"kind": "arena", "dtype": info["dtype"]}
    images: dict[str, Any] = {}
    for p in real:
        images.update(compiled[p].built.images)
    # the run time reads a constant as an image in every kernel or in none: where the
    # versions disagree, every kernel reads buffers (its DNNR_IMAGE_ARG compiles to one)
    if len({frozenset(compiled[p].built.images) for p in real}) > 1:
        images = {}
    plan = {
        "version": SYMBOLIC_PLAN_VERSION, "graph": graph.name,
        "inputs": top["inputs"], "outputs": top["outputs"],
        "dims": {n: list(r[:2]) if r[2] == 1 else list(r) for n, r in ranges.items()},
        "arena_bytes": arena_bytes, "tensors": tensors, "images": images,
        "versions": version_docs, "boxes": box_docs, "operators": top["operators"],
        "select": top["select"],
    }
    if computed:
        plan["computed"] = {"model": "shapes.onnx", "values": sorted(computed)}
    write_files(out_dir, plan, {n: _always_inline(t) for n, t in sources.items()}, arrays)
    if computed:
        (out_dir / "shapes.onnx").write_bytes(_shape_model(graph, computed))
    dynamic = {
        "dims": {n: list(r[:2]) if r[2] == 1 else list(r) for n, r in ranges.items()},
        "shapes": len(grid),
        # one compile per path of the backend (`versions.py`), plus one per region
        # checking the path at its lowest shape; every shape of a region that failed it
        "shapes_compiled": len(compiled),
        "regions": generated.report,
        "arena_bytes_peak": arena_bytes,
        "versions": [{"id": v, "conditions": [b["condition"] for b in box_docs
                                              if b["version"] == k],
                      "choices": _choices(version_docs[k], version_docs, sources)}
                     for k, v in enumerate(versions)],
        "boxes": len(box_docs),
        # per box, the quantities that vary with the dims: derived from the symbolic
        # shapes by the generator (`shapes.symint`) or, where it computed one without
        # them, fitted (`dimpoly.fit`)
        "memory_plan": {"boxes_over_the_dims": partition.proved_boxes,
                        "boxes_at_the_corner": len(box_docs) - partition.proved_boxes},
        "expressions": {"derived": len(partition.derivations), "fitted": len(partition.fitted),
                        "fitted_names": sorted(set(partition.fitted))[:20]},
        "computed_at_run_time": sorted(computed),
        "crossovers": crossovers,
        # divisions by size arguments done by multiplication (`magicdiv`)
        "magic_division": {"kernels": len(divisors),
                           "divisors": sum(len(d) for d in divisors.values()),
                           "sites": sum(len(re.findall(r"\bDNNR_U?(?:DIV|REM)\(", sources[k]))
                                        for k in divisors),
                           # of which unsigned (a dividend never negative, `magicdiv`)
                           "unsigned": sum(len(re.findall(r"\bDNNR_U(?:DIV|REM)\(", sources[k]))
                                           for k in divisors),
                           # kernel copies whose divisors are powers of two at every
                           # shape of their version: shifts and masks
                           "power_of_two_kernels": shift_kernels,
                           "shifts_and_masks": sum(len(re.findall(r"\bDNNR_P2(?:DIV|REM)\(",
                                                                  sources[k])) for k in divisors)},
    }
    return Artefact(out_dir, len(top["launches"]), len(sources), int(top["operators"]),
                    arena_bytes, int(top["naive_bytes"]), int(top["lower_bound_bytes"]),
                    {n: str(i["reason"]) for n, i in images.items()}, None, top["select"],
                    dynamic)


def _magic_divisions(sources: dict[str, str], version_docs: Sequence[dict]
                     ) -> dict[str, list[int]]:
    """Rewrite ``sources`` in place so that each kernel divides by its size arguments
    through their magic numbers (`magicdiv.rewrite`), where the extra arguments stay
    within the portable limit; per kernel rewritten, the indices of those sizes."""
    tensor_args = {la["kernel"]: len(la["args"]) for doc in version_docs for la in doc["launches"]}
    divisors: dict[str, list[int]] = {}
    for name, source in sources.items():
        rewritten, used = magicdiv.rewrite(source)
        sizes = len(magicdiv.size_parameters(source))
        if used and TENSOR_ARG_BYTES * tensor_args.get(name, 0) + \
                SIZE_ARG_BYTES * (sizes + 2 * len(used)) <= ARG_BYTES_LIMIT:
            sources[name] = rewritten
            divisors[name] = [int(s.removeprefix("s")) for s in used]
    return divisors


def _power_of_two_kernels(plain: Mapping[str, str], sources: dict[str, str],
                          version_docs: Sequence[dict], divisors: dict[str, list[int]],
                          dims: Sequence[str], points: Sequence[Sequence[Sequence[Point]]],
                          leaves: Sequence[Sequence[_Leaf]]) -> int:
    """Per version (``points`` and ``leaves``: its boxes'), each launch whose kernel
    divides by sizes that are powers of two at EVERY shape the version serves runs a
    copy dividing those by a shift and a mask (`magicdiv.rewrite`'s powers_of_two), as
    a per-shape compile's literal divisor does; the condition is the version's own
    (its boxes), so no shape is compiled for it. The copies made (a kernel the
    versions no longer launch is dropped)."""
    copies: dict[tuple[str, frozenset[str]], str] = {}
    for doc, version_points, version_leaves in zip(version_docs, points, leaves, strict=True):
        for k, launch in enumerate(doc["launches"]):
            name = launch["kernel"]
            if name not in divisors:
                continue
            powers = frozenset(
                f"s{j}" for j in divisors[name]
                if all(magicdiv.is_power_of_two(dimpoly.evaluate(
                    leaf.expressions[f"size/{k}/{j}"], dict(zip(dims, p, strict=True))))
                       for leaf, box_points in zip(version_leaves, version_points, strict=True)
                       for p in box_points))
            if not powers:
                continue
            if (name, powers) not in copies:
                rewritten, used = magicdiv.rewrite(plain[name], powers)
                assert used == [f"s{j}" for j in divisors[name]]  # the same magic arguments
                copy = "k_" + hashlib.sha1(rewritten.encode()).hexdigest()[:12]
                sources[copy] = rewritten.replace(f"void {name}(", f"void {copy}(")
                divisors[copy] = divisors[name]
                copies[(name, powers)] = copy
            launch["kernel"] = copies[(name, powers)]
    launched = {la["kernel"] for doc in version_docs for la in doc["launches"]}
    for name in [n for n in sources if n not in launched]:
        del sources[name]
        divisors.pop(name, None)
    return len(copies)


def _always_inline(source: str) -> str:
    """``source`` with its helper functions (`spelling`'s ``static inline dnnr_erf``)
    always inlined. The symbolic program holds every version's kernels, so a helper
    has many more callers than in a per-shape compile's program, and past some count
    LLVM's inliner keeps it a call, which PoCL's work-group vectoriser cannot widen
    (BERT's Gelu matmul at 3x16: 33 µs, 16.9 inlined, 16.9 bound)."""
    return source.replace("static inline ", "static inline __attribute__((always_inline)) ")


def _with_magic(sizes: list[str], divisors: Sequence[int]) -> list[str]:
    """A launch's size expressions and, per divisor (in `magicdiv.rewrite`'s parameter
    order), its magic's two expressions, which the run time evaluates per shape."""
    return sizes + [f"magic_{part}({sizes[k]})" for k in divisors for part in "ms"]


def _anchor_choices(probe: _Probe) -> dict[str, str]:
    """anchor node name -> the variant its block runs at ``probe``'s shape."""
    if probe.plan is None:
        return {}
    launched = {la["block"]: la["variant"] for la in probe.built.doc["launches"]}
    nodes = probe.plan.fusion.graph.nodes
    return {nodes[b.anchor].name: b.implementation or launched.get(b.id, "")
            for b in probe.plan.fusion.blocks
            if b.kind in ("conv", "matmul") and b.anchor is not None}


def _varying_anchors(probes: Sequence[_Probe]) -> set[str]:
    """The anchors whose variant differs between shapes: where the best variant depends
    on a dim (the others run one variant everywhere and need no dispatch)."""
    seen: dict[str, set[str]] = {}
    for probe in probes:
        for name, variant in _anchor_choices(probe).items():
            seen.setdefault(name, set()).add(variant)
    return {name for name, variants in seen.items() if len(variants) > 1}


def _crossovers(dims: Sequence[str], leaves: Sequence[_Leaf], probes: Mapping[Point, _Probe],
                versions: Sequence[str], params: KernelParams) -> dict[str, Any]:
    """Per box and conv/matmul anchor whose variant depends on the dims: the cost model's
    expressions traced at the box's upper corner and Z3's verdict on the box
    (`crossover.decide`): the variant the version runs is proved cheapest at every
    shape of the box, or the crossover shape where another option is cheaper."""
    device = cost.DEVICES[params.device]
    varying = _varying_anchors(list(probes.values()))
    verdicts = []
    # a region's boxes share its compile's plan: each anchor is traced once per plan
    traces: dict[tuple[int, int], crossover.TracedCosts | None] = {}
    for leaf in leaves:
        probe = probes[tuple(hi for _, hi in leaf.box)]
        if probe.plan is None or not varying:
            continue
        view = GraphView(probe.plan.fusion.graph)
        choices = _anchor_choices(probe)
        for block in probe.plan.fusion.blocks:
            if block.kind not in ("conv", "matmul") or block.anchor is None or \
                    view.nodes[block.anchor].name not in varying:
                continue
            key = (id(probe.plan), block.id)
            if key not in traces:
                with symint.recording() as branches:
                    shape = anchor_shape(view, block, params)
                traces[key] = crossover.trace_costs(device, shape, branches)
            traced = traces[key]
            if traced is None:
                continue
            chosen = choices[view.nodes[block.anchor].name]
            verdict = crossover.decide(traced, chosen, dict(zip(dims, leaf.box, strict=True)))
            verdicts.append({"version": versions.index(leaf.signature), "block": block.id,
                             "anchor": view.nodes[block.anchor].name,
                             "condition": describe_box(dims, leaf.box), "variant": chosen,
                             "options": len(traced.labels), "proved": verdict.proved,
                             "note": verdict.note})
    return {"anchors_with_a_dim_dependent_variant": len(varying),
            "proved": sum(v["proved"] for v in verdicts),
            "not_proved": sum(not v["proved"] for v in verdicts), "verdicts": verdicts,
            "solved": _solved_crossovers(dims, probes, params) if varying else []}


MAX_SOLVED_VALUES = 64  # a longer single dim: only the per-box verdicts (Z3 takes ~0.1 s a step)


def _solved_crossovers(dims: Sequence[str], probes: Mapping[Point, _Probe],
                       params: KernelParams) -> list[dict[str, Any]]:
    """Where one dim varies (the others are fixed by their ranges): per anchor, the
    intervals of that dim on which Z3 proves one variant cheapest over the traced cost
    expressions (`crossover.solve_intervals`), and whether the artefact's versions run
    that variant at every value of each interval (the dispatch follows the crossover)."""
    varying = [k for k in range(len(dims)) if len({p[k] for p in probes}) > 1]
    if len(varying) != 1:
        return []
    axis = varying[0]
    values = sorted({p[axis] for p in probes})
    if len(values) > MAX_SOLVED_VALUES or values != list(range(values[0], values[-1] + 1)):
        return []
    by_value = {p[axis]: probe for p, probe in probes.items()}
    device = cost.DEVICES[params.device]
    varying = _varying_anchors(list(by_value.values()))

    def anchors(value: int) -> dict[str, tuple[Any, str]]:
        """anchor node name -> (its traced costs, the variant the compile chose)."""
        plan = by_value[value].plan
        if plan is None:
            return {}
        view = GraphView(plan.fusion.graph)
        found = {}
        for block in plan.fusion.blocks:
            if block.kind in ("conv", "matmul") and block.anchor is not None and \
                    view.nodes[block.anchor].name in varying:
                with symint.recording() as branches:
                    shape = anchor_shape(view, block, params)
                traced = crossover.trace_costs(device, shape, branches)
                if traced is not None:
                    found[view.nodes[block.anchor].name] = (
                        traced, block.implementation or crossover.cheapest(traced))
        return found

    per_value = {v: anchors(v) for v in values}
    solved = []
    for name in sorted(per_value[values[0]]):
        if name not in varying or not all(name in per_value[v] for v in values):
            continue
        intervals = crossover.solve_intervals(lambda v, n=name: per_value[v][n][0], dims[axis],
                                              values[0], values[-1])
        if intervals is None or len(intervals) < 2:
            continue  # one variant over the whole range: no crossover to dispatch on
        agrees = all(per_value[v][name][1] == i.variant for i in intervals
                     for v in range(i.low, i.high + 1))
        solved.append({"anchor": name, "dispatch_follows": agrees, "intervals": [
            {"condition": f"{i.low} <= {dims[axis]} <= {i.high}", "variant": i.variant}
            for i in intervals]})
    return solved


def _choices(version: dict, versions: Sequence[dict], sources: Mapping[str, str]) -> list[str]:
    """What ``version`` generates at each launch where the versions differ: its
    variant, work-group and the kernel's tile defines, or only its literals (a dim of
    1 stays a literal 0/1 in the code)."""
    notes = []
    for k, mine in enumerate(version["launches"]):
        # versions may differ in launch count (an RNN unrolled over a symbolic length)
        if len({v["launches"][k]["kernel"] if k < len(v["launches"]) else None for v in versions}) == 1:
            continue
        defines = [line[len("#define "):] for line in sources[mine["kernel"]].splitlines()
                   if line.startswith("#define ") and "(" not in line.split()[1]]
        what = [mine["variant"], f"work-group {mine['local']}", ", ".join(defines)]
        notes.append(f"launch {k} ({mine['kind']}): " + "; ".join(w for w in what if w))
    return notes


def _dims(graph: Graph, name: str, shape: list[int]) -> list[int | str]:
    """An input's or output's shape as plan.json declares it: ints, or dim names."""
    for value in (*graph.inputs, *graph.outputs):
        if value.name == name and value.type.shape is not None:
            return [d if isinstance(d, int) else str(d) for d in value.type.shape]
    return list(shape)
