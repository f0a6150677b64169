"""The two choices the PBQP is compared against (both evaluated with eq. 4.1).

- local: every node takes its cheapest option on its own (ties: the first listed);
  the conversions this forces are then paid.
- chain DP (seed 000 eq. 4.2, GCD²'s solution for single-consumer chains): the
  producer→consumer graph is cut into maximal chains (a node extends its producer's
  chain when it has that one producer and is that producer's one consumer); chains are
  solved exactly in topological order, each given the picks already made upstream and
  seeing its consumers outside the chain only through their cheapest reply (a chain
  must leave in a layout its consumers can read, as the Hexagon backend's DP did).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from egraph_compiler.select.problem import Problem


def local_picks(problem: Problem) -> dict[str, int]:
    return {n.name: int(np.argmin(n.costs)) for n in problem.nodes}


def _topological(problem: Problem) -> list[str]:
    names = [n.name for n in problem.nodes]
    indegree = dict.fromkeys(names, 0)
    succ: dict[str, list[str]] = defaultdict(list)
    for e in problem.edges:
        indegree[e.target] += 1
        succ[e.source].append(e.target)
    ready = [n for n in names if indegree[n] == 0]
    order: list[str] = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for m in succ[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
    return order if len(order) == len(names) else names  # a cycle: keep the given order


def chains(problem: Problem) -> list[list[str]]:
    """Maximal single-producer/single-consumer chains, in topological order."""
    into: dict[str, list[str]] = defaultdict(list)
    out: dict[str, list[str]] = defaultdict(list)
    for e in problem.edges:
        into[e.target].append(e.source)
        out[e.source].append(e.target)

    def extends(n: str) -> bool:
        return len(into[n]) == 1 and len(out[into[n][0]]) == 1

    result = []
    for n in _topological(problem):
        if extends(n):
            continue
        chain = [n]
        while len(out[chain[-1]]) == 1 and extends(out[chain[-1]][0]):
            chain.append(out[chain[-1]][0])
        result.append(chain)
    return result


def chain_dp_picks(problem: Problem) -> dict[str, int]:
    nodes = {n.name: n for n in problem.nodes}
    edges_in: dict[str, list] = defaultdict(list)
    edges_out: dict[str, list] = defaultdict(list)
    for e in problem.edges:
        edges_in[e.target].append(e)
        edges_out[e.source].append(e)
    picks: dict[str, int] = {}
    for chain in chains(problem):
        members = set(chain)
        unary = []
        for name in chain:
            cost = np.array(nodes[name].costs, dtype=float)
            for e in edges_in[name]:
                if e.source in members:
                    continue
                m = np.array(e.costs, dtype=float)
                cost = cost + (m[picks[e.source]] if e.source in picks else m.min(axis=0))
            for e in edges_out[name]:
                if e.target not in members:
                    m = np.array(e.costs, dtype=float)
                    cost = cost + (m[:, picks[e.target]] if e.target in picks else m.min(axis=1))
            unary.append(cost)
        sol = unary[0]
        back = []
        for k in range(1, len(chain)):
            link = next(e for e in edges_out[chain[k - 1]] if e.target == chain[k])
            total = sol[:, None] + np.array(link.costs, dtype=float)
            back.append(total.argmin(axis=0))
            sol = total.min(axis=0) + unary[k]
        pick = int(np.argmin(sol))
        for k in range(len(chain) - 1, -1, -1):
            picks[chain[k]] = pick
            if k:
                pick = int(back[k - 1][pick])
    return picks
