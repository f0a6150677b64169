"""Instruction and layout choice per operator (GCD² §4.4.1–4.4.2).

Each operator offers options (instruction family ⇒ input layout) with an estimated
cost in cycles; each producer→consumer edge has a conversion cost matrix. `choose`
minimises eq. 4.1 with the chain dynamic programme of eq. 4.2 along each maximal
chain of single-consumer operators; a later PBQP solver can replace `choose` (same
inputs, same output).

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
operator depends on its neighbours', and the chain DP can beat the greedy
per-operator choice (`choose_greedy`), which is kept to show it in the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_compiler.backends.hexagon.kernels import K_STEP, PANEL_ROWS, ceil_to

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


def _unroll(family: str, n: int) -> int:
    return max(1, min({"vrmpy": 4, "vmpa": 2, "vmpy": 2, "scalar": 1}[family], n))


def pack_cycles(family: str, m: int, k: int) -> int:
    """Packing an [m, k] NHWC input into ``family``'s layout: one store per packet over
    the padded panel (the scalar kernel's im2col copy is counted in its option)."""
    if family == "scalar":
        return 0
    return ceil_to(m, PANEL_ROWS[family]) * ceil_to(k, K_STEP[family])


def gemm_options(m: int, k: int, n: int, packed_consumer: tuple[int, int, int] | None = None) -> list[Option]:
    """Options of an [m, k] × [k, n] GEMM; with ``packed_consumer`` (the shape of a 1×1
    consumer that may read this operator's output packed), also one option per
    (family, consumer family) whose requantisation writes that packed layout."""
    options = []
    for family in ("vrmpy", "vmpa", "vmpy", "scalar"):
        nu = _unroll(family, n)
        rows, k_pad, n_pad = ceil_to(m, PANEL_ROWS[family]), ceil_to(k, K_STEP[family]), ceil_to(n, nu)
        steps = k_pad // K_STEP[family]
        panels = rows // PANEL_ROWS[family]
        groups = n_pad // nu
        if family == "vrmpy":
            per_step = max(-(-(1 + nu) // 2), -(-nu // 2))
        elif family == "vmpa":
            per_step = max(-(-(2 + nu) // 2), nu)
        elif family == "vmpy":
            per_step = max(-(-(2 + 2 * nu) // 2), 4 * nu)
        else:
            per_step = 1
        compute = panels * groups * (steps * per_step + 2) if family != "scalar" else m * n * (k + 3) + m * k
        cycles = compute + m * n * REQUANT_CYCLES
        pad = (rows * k_pad * n_pad) / max(1, m * k * n) - 1
        pack = pack_cycles(family, m, k)
        detail = f"compute {compute}, requant {m * n * REQUANT_CYCLES}, padding {pad:.0%}"
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


def chain_cost(options: list[list[Option]], picks: list[int], tc=conversion_cost) -> int:
    """Eq. 4.1 along a chain: operators, conversions, NHWC in and out."""
    total = options[0][picks[0]].cycles + options[0][picks[0]].pack
    for i in range(1, len(picks)):
        total += tc(options[i - 1][picks[i - 1]], options[i][picks[i]]) + options[i][picks[i]].cycles
    return total + _exit_cost(options[-1][picks[-1]])


def _exit_cost(last: Option) -> int:
    # A chain's last operator feeds operators outside it (or the graph's outputs): NHWC.
    return 0 if last.writes == NHWC else INFEASIBLE


def choose_chain(options: list[list[Option]], tc=conversion_cost) -> list[int]:
    """Eq. 4.2: Sol(i, j) = cost_i(j) + min_l Sol(i−1, l) + TC(l, j); returns the argmins.
    The chain's input arrives in NHWC (its first operator packs it) and its output must
    leave in NHWC."""
    if not options:
        return []
    sol = [opt.cycles + opt.pack for opt in options[0]]
    back: list[list[int]] = []
    for i in range(1, len(options)):
        row, arg = [], []
        for opt in options[i]:
            best = min(range(len(options[i - 1])), key=lambda prev, opt=opt: sol[prev] + tc(options[i - 1][prev], opt))
            row.append(sol[best] + tc(options[i - 1][best], opt) + opt.cycles)
            arg.append(best)
        sol, back = row, back + [arg]
    sol = [value + _exit_cost(opt) for value, opt in zip(sol, options[-1], strict=True)]
    picks = [min(range(len(sol)), key=sol.__getitem__)]
    for arg in reversed(back):
        picks.append(arg[picks[-1]])
    return picks[::-1]


def choose_greedy(options: list[list[Option]], tc=conversion_cost) -> list[int]:
    """Per operator in order, the option cheapest given its producer's pick (what a
    compiler without the DP would do): it never pays now to save its consumer's time."""
    picks: list[int] = []
    for i, opts in enumerate(options):
        def cost(j: int, i: int = i, opts: list[Option] = opts) -> int:
            entry = opts[j].pack if i == 0 else tc(options[i - 1][picks[-1]], opts[j])
            exit_ = _exit_cost(opts[j]) if i == len(options) - 1 else 0
            return opts[j].cycles + entry + exit_
        picks.append(min(range(len(opts)), key=cost))
    return picks


def choose(ops: list[tuple[str, list[Option]]], edges: list[tuple[str, str]]) -> dict[str, Choice]:
    """Choose one option per operator: chain DP over maximal chains of the producer→consumer
    graph (a node with one producer and whose producer has one consumer extends a chain).
    Each choice's reason gives the chain's total against the greedy choice's and the cost
    of every option of the operator given its producer's pick."""
    names = [name for name, _ in ops]
    table = dict(ops)
    succ: dict[str, list[str]] = {n: [] for n in names}
    pred: dict[str, list[str]] = {n: [] for n in names}
    for a, b in edges:
        if a in table and b in table:
            succ[a].append(b)
            pred[b].append(a)
    chosen: dict[str, Choice] = {}
    for name in names:
        if name in chosen or (len(pred[name]) == 1 and len(succ[pred[name][0]]) == 1):
            continue
        chain = [name]
        while len(succ[chain[-1]]) == 1 and len(pred[succ[chain[-1]][0]]) == 1:
            chain.append(succ[chain[-1]][0])
        options = [table[n] for n in chain]
        picks = choose_chain(options)
        greedy = choose_greedy(options)
        total, greedy_total = chain_cost(options, picks), chain_cost(options, greedy)
        for i, (n, p) in enumerate(zip(chain, picks, strict=True)):
            opts = options[i]
            entry = [o.pack if i == 0 else conversion_cost(options[i - 1][picks[i - 1]], o) for o in opts]
            costs = ", ".join(f"{o.label}={o.cycles}+{e}" for o, e in zip(opts, entry, strict=True) if e < INFEASIBLE)
            verdict = "as greedy" if picks == greedy else f"greedy {greedy_total} picks {opts[greedy[i]].label}"
            reason = (f"chain of {len(chain)}: DP total {total} ({verdict}); "
                      f"own+conversion cycles: {costs}")
            chosen[n] = Choice(n, opts[p], tuple(opts), reason)
    return chosen
