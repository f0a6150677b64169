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
Padding rows/columns (M to 32/64/128, K to 4/2/2) are paid for; so is packing the
input into the family's layout (one byte store per packet) and the requantisation.
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_compiler.backends.hexagon.kernels import K_STEP, PANEL_ROWS, ceil_to

REQUANT_CYCLES = 4  # per output element: 64-bit multiply, round, shift, clamp, store


@dataclass(frozen=True, slots=True)
class Option:
    family: str
    cycles: int
    detail: str


@dataclass(frozen=True, slots=True)
class Choice:
    op: str
    option: Option
    alternatives: tuple[Option, ...]
    reason: str


def _unroll(family: str, n: int) -> int:
    return max(1, min({"vrmpy": 4, "vmpa": 2, "vmpy": 2, "scalar": 1}[family], n))


def gemm_options(m: int, k: int, n: int) -> list[Option]:
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
        compute = panels * groups * (steps * per_step + 2) if family != "scalar" else m * n * (k + 3)
        pack = rows * k_pad if family != "scalar" else m * k
        cycles = compute + pack + m * n * REQUANT_CYCLES
        pad = (rows * k_pad * n_pad) / max(1, m * k * n) - 1
        options.append(Option(family, cycles, f"compute {compute}, pack {pack}, padding {pad:.0%}"))
    return options


def conversion_cost(producer: Option, consumer: Option) -> int:
    """Layout conversion on an edge. Every kernel reads and writes NHWC uint8 and packs
    its own input (that cost is inside the operator's option), so edges cost nothing
    today; a producer that writes its consumer's panel layout directly would make this
    matrix non-zero."""
    del producer, consumer
    return 0


def choose_chain(options: list[list[Option]], tc=conversion_cost) -> list[int]:
    """Eq. 4.2: Sol(i, j) = cost_i(j) + min_l Sol(i−1, l) + TC(l, j); returns the argmins."""
    if not options:
        return []
    sol = [opt.cycles for opt in options[0]]
    back: list[list[int]] = []
    for i in range(1, len(options)):
        row, arg = [], []
        for opt in options[i]:
            best = min(range(len(options[i - 1])), key=lambda prev, opt=opt: sol[prev] + tc(options[i - 1][prev], opt))
            row.append(sol[best] + tc(options[i - 1][best], opt) + opt.cycles)
            arg.append(best)
        sol, back = row, back + [arg]
    picks = [min(range(len(sol)), key=sol.__getitem__)]
    for arg in reversed(back):
        picks.append(arg[picks[-1]])
    return picks[::-1]


def choose(ops: list[tuple[str, list[Option]]], edges: list[tuple[str, str]]) -> dict[str, Choice]:
    """Choose one option per operator: chain DP over maximal chains of the producer→consumer
    graph (a node with one producer and whose producer has one consumer extends a chain)."""
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
        picks = choose_chain([table[n] for n in chain])
        for n, p in zip(chain, picks, strict=True):
            opts = table[n]
            best_alone = min(opts, key=lambda o: o.cycles)
            reason = (f"chain of {len(chain)}: cheapest alone" if opts[p] is best_alone
                      else f"chain of {len(chain)}: layout agreement beats {best_alone.family}")
            chosen[n] = Choice(n, opts[p], tuple(opts), reason)
    return chosen
