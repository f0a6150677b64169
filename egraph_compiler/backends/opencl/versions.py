"""Versions of a symbolic artefact generated from the backend's path conditions
(issue 15 item 1, seed 000 §5.4.4.2), not found by compiling every shape.

The symbolic build compiles the backend at a shape whose dims are `shapes.symint.SymInt`s.
Inside `symint.recording()` every comparison the backend makes on a size derived from
the dims (a row count against `row_serial_min_rows`, a register tile clamped to a short
dim, a dim of 1 dropped from an index, a row length divisible by the vector width, the
cost model's picks) is noted with its outcome: the conjunction is the compile's PATH
CONDITION. The backend is deterministic and sees the dims only through those values,
so at every shape where each comparison comes out the same it takes the same path:
the same kernels, with every size the same expression over the dims.

`explore` therefore compiles one shape, keeps the atoms whose truth varies over the
declared ranges (the others hold everywhere and split nothing), takes as the version's
REGION every shape not yet covered where all of them come out as at the compiled shape,
and compiles next at the highest shape outside every region, until the ranges are
covered: one compile per distinct path (the choice vector of every dim-dependent
decision), not one per shape. Each region's condition is its atoms; Z3 (`describe`)
drops the ones the others imply over the ranges, and the run time dispatches on the
boxes the partition cuts from the regions.

A value computed outside the tracking (``int()``, NumPy, a constant folded from the
dims) makes no atom, so each region of more than one shape is compiled a second time
at its lowest shape and the two compiles must agree (`symbolic.py` checks the code and
every quantity's expression there); where they do not, every shape of the region is
compiled, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.shapes import prover
from egraph_compiler.shapes.symint import Choice

Point = tuple[int, ...]
Fact = tuple[Dim, str, Dim, bool]  # `symint.recording`: left, operator, right, outcome
_OPS: dict[str, Callable[[int, int], bool]] = {
    "<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__,
    "==": int.__eq__, "!=": int.__ne__}
_NEGATION = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


@dataclass(frozen=True)
class Atom:
    """One comparison the backend made, normalised to the form that came out true."""

    left: Dim
    op: str
    right: Dim

    def holds(self, env: Mapping[str, int]) -> bool:
        return _OPS[self.op](_value(self.left, env), _value(self.right, env))

    @property
    def key(self) -> Hashable:
        return (str(self.left), self.op, str(self.right))

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


# an anchor's or a row kernel's variant as the cost model picks it (`symint.Choice`)
ChoiceAtom = Choice


def _value(dim: Dim, env: Mapping[str, int]) -> int:
    return dim.evaluate(dict(env)) if isinstance(dim, DimExpr) else int(dim)


def atom_of(fact: Fact) -> Atom:
    left, op, right, outcome = fact
    return Atom(left, op if outcome else _NEGATION[op], right)


@dataclass
class Region:
    """The shapes one compile serves: where every splitting atom holds."""

    at: Point  # the compiled shape
    atoms: tuple[Atom | ChoiceAtom, ...]  # its path's atoms that vary over the ranges
    points: list[Point]


class Explorer:
    """Covers ``grid`` with regions of one path each (`explore`)."""

    def __init__(self, dims: Sequence[str], grid: Sequence[Point]) -> None:
        self.dims, self.grid = list(dims), list(grid)
        # atom key -> its truth at each point (a choice's key: its pick at each point)
        self.truth: dict[Hashable, tuple] = {}
        self.index = {p: k for k, p in enumerate(self.grid)}

    def truth_of(self, atom: Atom | ChoiceAtom) -> tuple[bool, ...]:
        key = atom.key
        found = self.truth.get(key)
        if found is None:
            if isinstance(atom, Choice):  # the pick at every point, once per decision
                picks = self.truth.get(("picks", atom.what, atom.signature))
                if picks is None:
                    picks = tuple(atom.decide(dict(zip(self.dims, p, strict=True)))
                                  for p in self.grid)
                    self.truth[("picks", atom.what, atom.signature)] = picks
                found = tuple(pick == atom.label for pick in picks)
            else:
                found = tuple(atom.holds(dict(zip(self.dims, p, strict=True))) for p in self.grid)
            self.truth[key] = found
        return found

    def splitting(self, facts: Sequence[Fact | ChoiceAtom], at: Point
                  ) -> tuple[Atom | ChoiceAtom, ...]:
        """The distinct atoms of ``facts`` whose truth varies over the grid, each as it
        came out at ``at`` (a comparison that is the same at every shape splits nothing)."""
        seen: dict[Hashable, Atom | ChoiceAtom] = {}
        for fact in facts:
            if isinstance(fact, ChoiceAtom):
                atom: Atom | ChoiceAtom = fact
            else:
                left, _, right, _ = fact
                if not (isinstance(left, DimExpr) or isinstance(right, DimExpr)):
                    continue
                atom = atom_of(fact)
            key = atom.key
            if key in seen:
                continue
            truth = self.truth_of(atom)
            if not truth[self.index[at]]:
                raise AssertionError(f"recorded comparison {atom} is false where it was made")
            if not all(truth):
                seen[key] = atom
        return tuple(seen.values())

    def explore(self, compile_at: Callable[[Point], Sequence[Fact | ChoiceAtom]]
                ) -> list[Region]:
        """Regions covering the grid, from the highest shape down: ``compile_at(point)``
        compiles there and returns the comparisons it made and the variants it chose
        (its path)."""
        uncovered = sorted(self.grid, key=lambda p: (-sum(p), tuple(-v for v in p)))
        regions: list[Region] = []
        while uncovered:
            at = uncovered[0]
            atoms = self.splitting(compile_at(at), at)
            columns = [self.truth_of(a) for a in atoms]
            points = [p for p in uncovered if all(c[self.index[p]] for c in columns)]
            regions.append(Region(at, atoms, points))
            taken = set(points)
            uncovered = [p for p in uncovered if p not in taken]
        return regions


def describe(region: Region, ranges: Mapping[str, tuple[int, int]]) -> list[str]:
    """The region's condition: its atoms less those the others imply over ``ranges``
    (Z3), as text; ``[]`` for the whole ranges."""
    z3 = prover.z3
    names = sorted(ranges)
    symbols = {n: z3.Int(n) for n in names}
    encoder = prover._Encoder(z3.Solver(), {})
    terms, texts = [], []
    choices = sorted(str(a) for a in region.atoms if isinstance(a, ChoiceAtom))
    for atom in region.atoms:
        if isinstance(atom, ChoiceAtom):
            continue
        texts.append(str(atom))
        a, b = encoder(atom.left), encoder(atom.right)
        terms.append({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b,
                      "!=": a != b}[atom.op])
    within = [c for n in names for c in (symbols[n] >= ranges[n][0], symbols[n] <= ranges[n][1])]
    within += list(encoder.solver.assertions())
    kept = list(range(len(terms)))
    for k in range(len(terms)):
        others = [terms[j] for j in kept if j != k]
        solver = z3.Solver()
        solver.set("timeout", 2000)
        solver.add(*within, *others, z3.Not(terms[k]))
        if solver.check() == z3.unsat:
            kept.remove(k)
    return sorted({texts[k] for k in kept}) + choices
