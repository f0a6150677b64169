"""Instruction and layout choice per operator (GCD² §4.4.1–4.4.2).

Each operator offers options (instruction family ⇒ input layout, × the layout it
writes) with an estimated cost in cycles; each producer→consumer edge has a conversion
cost matrix. `choose` minimises eq. 4.1 over the whole graph, forks and joins
included, as a PBQP solved exactly by the `select` stage (the chain DP of eq. 4.2,
which gave up at forks and forced NHWC at every chain's end, is now only the
baseline the report compares with).

The costs are resource bounds of the generated loops, per K step of one panel and
one group of NU output columns (NU from the adaptive unrolling):
- vrmpy: 1 vector load + NU weight words over slots 0–1, NU ``vrmpy`` over 2 multiply units;
- vmpa:  2 vector loads + NU words, NU ``vmpa`` (both multiply units each);
- vmpy:  2 vector loads + 2·NU words, 2·NU ``vmpy`` and 2·NU widening ``vadd`` (both units each);
- scalar: one multiply-accumulate per packet (2 multiply slots, 2 loads).
Padding rows/columns (M to 32/64/128, K to 4/2/2) are paid for; so is the
requantisation (REQUANT_CYCLES per output element).

Layouts: an HVX GEMM reads its input in its family's packed layout (1-, 2- or
4-column panels). Packing it from NHWC (one store per packet, padding included) is the
conversion cost of the edge into it (`conversion_cost`), not part of the operator:
a producer whose requantisation writes the consumer's packed layout directly
(`kernels.writes_packed_input_of`, options with ``writes="packed:<family>"``) makes
that edge free, and only to a consumer of that family. So the best choice of one
operator depends on its neighbours': the report gives the objective of the local
choice (each operator's cheapest option alone) and of the chain DP beside the PBQP's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from egraph_compiler.backends.hexagon.kernels import K_STEP, PANEL_ROWS, ceil_to
from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.ir.graph import Graph
from egraph_compiler.select import Problem, Selection, edge, node, solve
from egraph_compiler.select.symbolic import Dominance, SymbolicNode, binding, dominance

REQUANT_CYCLES = 4  # per output element: 64-bit multiply, round, shift, clamp, store


INFEASIBLE = 1 << 40  # conversion between layouts no kernel implements
NHWC = "nhwc"


@dataclass(frozen=True, slots=True)
class Option:
    family: str
    cycles: int  # the operator itself: compute and requantisation, padding included
    detail: str
    writes: str = NHWC  # output layout: "nhwc" or "packed:<family>" of the consumer's input
    pack: int = 0  # cycles to pack this operator's input from NHWC (0: reads NHWC)

    @property
    def label(self) -> str:
        return self.family if self.writes == NHWC else f"{self.family}>{self.writes.split(':')[1]}"


@dataclass(frozen=True, slots=True)
class Choice:
    op: str
    option: Option
    alternatives: tuple[Option, ...]
    reason: str


FAMILIES = ("vrmpy", "vmpa", "vmpy", "scalar")


def family_dominance(name: str, m: Dim, k: int, n: int, ranges: Mapping[str, tuple[int, int]]) -> Dominance:
    """With a symbolic row count ``m`` (over the declared ``ranges``): the family proved
    cheapest (its own cycles and packing from NHWC) for every value, or none — then
    the GEMM is a multi-version candidate (`select.symbolic`)."""
    costs = [sum(gemm_cycles(f, m, k, n), start=pack_cycles(f, m, k)) for f in FAMILIES]
    return dominance(name, FAMILIES, costs, ranges)


def _unroll(family: str, n: int) -> int:
    return max(1, min({"vrmpy": 4, "vmpa": 2, "vmpy": 2, "scalar": 1}[family], n))


def _ceil(value: Dim, step: int) -> Dim:
    """``value`` rounded up to a multiple of ``step`` (an int or a symbolic dim, ≥ 0)."""
    return (value + (step - 1)) // step * step


def pack_cycles(family: str, m: Dim, k: int) -> Dim:
    """Packing an [m, k] NHWC input into ``family``'s layout: one store per packet over
    the padded panel (the scalar kernel's im2col copy is counted in its option)."""
    if family == "scalar":
        return 0
    return _ceil(m, PANEL_ROWS[family]) * _ceil(k, K_STEP[family])


def gemm_cycles(family: str, m: Dim, k: int, n: int) -> tuple[Dim, Dim]:
    """(compute, requantisation) cycles of an [m, k] × [k, n] GEMM in ``family``; ``m``
    may be symbolic (a batch or sequence dim), the result then is too."""
    nu = _unroll(family, n)
    k_pad, n_pad = _ceil(k, K_STEP[family]), _ceil(n, nu)
    steps = k_pad // K_STEP[family]
    panels = (m + (PANEL_ROWS[family] - 1)) // PANEL_ROWS[family]
    groups = n_pad // nu
    if family == "vrmpy":
        per_step = max(-(-(1 + nu) // 2), -(-nu // 2))
    elif family == "vmpa":
        per_step = max(-(-(2 + nu) // 2), nu)
    elif family == "vmpy":
        per_step = max(-(-(2 + 2 * nu) // 2), 4 * nu)
    else:
        per_step = 1
    compute = panels * (groups * (steps * per_step + 2)) if family != "scalar" else m * (n * (k + 3) + k)
    return compute, m * (n * REQUANT_CYCLES)


def gemm_options(m: int, k: int, n: int, packed_consumer: tuple[int, int, int] | None = None) -> list[Option]:
    """Options of an [m, k] × [k, n] GEMM; with ``packed_consumer`` (the shape of a 1×1
    consumer that may read this operator's output packed), also one option per
    (family, consumer family) whose requantisation writes that packed layout."""
    options = []
    for family in FAMILIES:
        compute, requant = gemm_cycles(family, m, k, n)
        cycles = compute + requant
        rows, k_pad, n_pad = ceil_to(m, PANEL_ROWS[family]), ceil_to(k, K_STEP[family]), ceil_to(n, _unroll(family, n))
        pad = (rows * k_pad * n_pad) / max(1, m * k * n) - 1
        pack = pack_cycles(family, m, k)
        detail = f"compute {compute}, requant {requant}, padding {pad:.0%}"
        options.append(Option(family, cycles, detail, NHWC, pack))
        if packed_consumer is not None and family != "scalar":
            for target in ("vrmpy", "vmpa", "vmpy"):
                options.append(Option(family, cycles, detail + f"; writes the {target} panels of its consumer",
                                      f"packed:{target}", pack))
    return options


def conversion_cost(producer: Option, consumer: Option) -> int:
    """Cycles to bring the producer's output into the layout the consumer reads."""
    if producer.writes == NHWC:
        return consumer.pack
    if consumer.pack and producer.writes == f"packed:{consumer.family}":
        return 0
    return INFEASIBLE


def choose(ops: list[tuple[str, list[Option]]], uses: list[tuple[str, str | None, int]],
           time_limit: float = 1.0, policy: str = "pbqp") -> tuple[dict[str, Choice], Selection]:
    """One option per operator: eq. 4.1 as a PBQP (`egraph_compiler.select`), solved exactly.

    ``ops`` are the operators with a choice and their options; ``uses`` lists every read
    of their outputs as (producer, consumer or None, input position): None is a reader
    without a choice (an elementwise kernel, the float fallback, a graph output), which
    reads NHWC. An operator whose packed input (position 0) comes from outside pays its
    packing itself; from a chosen producer, the edge pays it (`conversion_cost`).
    ``policy`` "local" / "chain-dp" applies that baseline's picks (to measure the gain)."""
    table = dict(ops)
    fed = {c for p, c, pos in uses if c is not None and pos == 0 and p in table}
    exits = {p for p, c, _ in uses if c is None or c not in table}
    nodes = []
    for name, options in ops:
        costs = [o.cycles + (0 if name in fed else o.pack)
                 + (INFEASIBLE if name in exits and o.writes != NHWC else 0) for o in options]
        nodes.append(node(name, [o.label for o in options], [_cost(c) for c in costs]))
    edges = []
    for p, c, pos in uses:
        if c is None or p not in table or c not in table:
            continue
        matrix = [[_cost(conversion_cost(a, b) if pos == 0 else 0 if a.writes == NHWC else INFEASIBLE)
                   for b in table[c]] for a in table[p]]
        edges.append(edge(p, c, matrix, tensor=f"{p}->{c}#{pos}"))
    selection = solve(Problem(tuple(nodes), tuple(edges), unit="cycles"), time_limit).apply(policy)
    picks = selection.chosen
    into: dict[str, tuple[str, int] | None] = {}
    for p, c, pos in uses:
        if c in table and p in table and pos == 0:
            into[c] = (p, picks[p])
    summary = (f"{'PBQP' if policy == 'pbqp' else policy} {selection.solver}: objective {selection.objective:.0f} cycles, "
               f"local {selection.local_objective:.0f}, chain DP "
               f"{'-' if selection.chain_objective is None else f'{selection.chain_objective:.0f}'}")
    chosen = {}
    for name, options in ops:
        source = into.get(name)
        entry = [conversion_cost(table[source[0]][source[1]], o) if source else o.pack for o in options]
        costs = ", ".join(f"{o.label}={o.cycles}+{e}" for o, e in zip(options, entry, strict=True)
                          if e < INFEASIBLE)
        chosen[name] = Choice(name, options[picks[name]], tuple(options),
                              f"{summary}; own+conversion cycles: {costs}")
    return chosen, selection


def _cost(cycles: int | float) -> float:
    return float("inf") if cycles >= INFEASIBLE else float(cycles)


def _symbolic_rows(shape: tuple[Dim, ...], rows: int, env: dict[str, int]) -> Dim | None:
    """The GEMM row count as a Dim of the symbolic output ``shape`` (N·H·W of an NCHW conv
    output, or every dim but the last of a matmul's), checked against the static count."""
    candidates = []
    if len(shape) == 4:
        candidates.append(shape[0] * shape[2] * shape[3] if isinstance(shape[0], DimExpr)
                          else shape[2] * shape[0] * shape[3])
    product: Dim = 1
    for d in shape[:-1]:
        product = d * product if isinstance(d, DimExpr) else product * d
    candidates.append(product)
    for m in candidates:
        if isinstance(m, DimExpr) and m.evaluate(env) == rows:
            return m
    return None


def symbolic_gemms(ops: Sequence[tuple[str, list[Option]]], rows: Mapping[str, tuple[int, int, int]],
                   static: Graph, symbolic: Graph) -> list[SymbolicNode]:
    """Every GEMM (``rows``: op name -> static (m, k, n)) whose row count is symbolic in
    ``symbolic`` (the graph before binding, its node of the same name): its options' own
    cycles and packing from NHWC as Dims of the same cost functions (`gemm_cycles`,
    `pack_cycles`), for Z3 to compare over the declared ranges."""
    env = binding(static, symbolic)
    shapes = {out: symbolic.types[out].shape for n in symbolic.nodes for out in n.outputs[:1]
              if out in symbolic.types}
    outputs = {n.name: n.outputs[0] for n in symbolic.nodes if n.outputs}
    table = dict(ops)
    result = []
    for name, (m, k, n) in sorted(rows.items()):
        shape = shapes.get(outputs.get(name, ""))
        m_sym = _symbolic_rows(tuple(shape), m, env) if shape else None
        if m_sym is None or name not in table:
            continue
        costs = tuple(sum(gemm_cycles(o.family, m_sym, k, n), start=pack_cycles(o.family, m_sym, k))
                      for o in table[name])
        result.append(SymbolicNode(name, costs))
    return result
