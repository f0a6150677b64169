"""The PBQP solver against brute force on random chains, trees, series-parallel and dense
graphs (costs with infeasible entries included); the reductions alone solve the first
three; the certificate's lower bound never passes the optimum."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from egraph_compiler.select import Problem, chain_dp_picks, chains, edge, local_picks, node, solve


def _random_problem(rng: random.Random, shape: str, n: int) -> Problem:
    pairs: list[tuple[int, int]] = []
    if shape == "chain":
        pairs = [(i, i + 1) for i in range(n - 1)]
    elif shape == "tree":
        pairs = [(rng.randrange(i), i) for i in range(1, n)]
    elif shape == "series-parallel" and n >= 2:  # subdivide an edge or add a parallel path
        pairs, count = [(0, 1)], 2
        while count < n:
            s, t = pairs[rng.randrange(len(pairs))]
            if rng.random() < 0.5:
                pairs.remove((s, t))
                pairs.append((s, count))
            else:
                pairs.append((s, count))
            pairs.append((count, t))
            count += 1
    elif shape == "dense":
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.85]
    sizes = [rng.randint(1, 4) for _ in range(n)]

    def cost(first: bool) -> float:  # option/pair 0 stays finite, so a solution exists
        return float(rng.randint(0, 30)) if first or rng.random() > 0.15 else math.inf

    nodes = [node(f"n{i}", [f"o{a}" for a in range(sizes[i])],
                  [cost(a == 0) for a in range(sizes[i])]) for i in range(n)]
    edges = [edge(f"n{i}", f"n{j}", [[cost(a == 0 and b == 0) for b in range(sizes[j])]
                                     for a in range(sizes[i])]) for i, j in pairs]
    return Problem(tuple(nodes), tuple(edges))


def _brute_force(problem: Problem) -> float:
    names = [n.name for n in problem.nodes]
    return min(problem.evaluate(dict(zip(names, picks, strict=True)))
               for picks in itertools.product(*(range(len(n.options)) for n in problem.nodes)))


@pytest.mark.parametrize("shape", ["chain", "tree", "series-parallel", "dense"])
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 7))
def test_optimal_against_brute_force(shape: str, seed: int, n: int) -> None:
    problem = _random_problem(random.Random(seed), shape, n)
    best = _brute_force(problem)
    selection = solve(problem)
    assert selection.objective == best
    assert selection.lower_bound <= best + 1e-6 and selection.gap <= 1e-6, selection.to_json()
    assert selection.local_objective >= best
    if problem.edges:
        assert selection.chain_objective is not None and selection.chain_objective >= best
    if shape != "dense":  # R0/R1/R2 alone: no core left
        assert selection.solver == "reductions" and selection.reductions["core"] == 0


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 8))
def test_chain_dp_is_exact_on_chains(seed: int, n: int) -> None:
    problem = _random_problem(random.Random(seed), "chain", n)
    assert len(chains(problem)) == 1
    assert problem.evaluate(chain_dp_picks(problem)) == _brute_force(problem)


def test_dense_core_goes_to_the_ilp_and_rn_fallback_is_bounded() -> None:
    rng = random.Random(7)
    for _ in range(20):
        problem = _random_problem(rng, "dense", 7)
        best = _brute_force(problem)
        exact = solve(problem)
        assert exact.objective == best and exact.gap <= 1e-6
        if exact.reductions["core"]:
            assert exact.solver == "reductions+ilp"
        heuristic = solve(problem, exact=False)
        assert heuristic.objective >= best and heuristic.lower_bound <= best + 1e-6
        assert math.isfinite(heuristic.objective)


def test_complete_graph_needs_the_core_solver() -> None:
    # K5 with 3 options and generic costs: every node has degree 4, nothing reduces
    rng = random.Random(3)
    names = [f"n{i}" for i in range(5)]
    nodes = [node(n, ["a", "b", "c"], [rng.randint(0, 9) for _ in range(3)]) for n in names]
    edges = [edge(a, b, [[rng.randint(0, 9) for _ in range(3)] for _ in range(3)])
             for a, b in itertools.combinations(names, 2)]
    problem = Problem(tuple(nodes), tuple(edges))
    selection = solve(problem)
    assert selection.reductions["core"] == 5 and selection.solver == "reductions+ilp"
    assert selection.objective == _brute_force(problem) == selection.lower_bound


def test_independent_edges_fold_and_local_is_the_unary_argmin() -> None:
    # a consumer pays only for the producer's layout (identical columns): no coupling left
    nodes = (node("p", ["row", "col"], [1, 3]), node("c", ["x", "y"], [2, 0]))
    problem = Problem(nodes, (edge("p", "c", [[10, 10], [0, 0]]),))
    selection = solve(problem)
    assert selection.picks == {"p": 1, "c": 1} and selection.objective == 3
    assert local_picks(problem) == {"p": 0, "c": 1} and selection.local_objective == 11
    assert selection.to_json()["decisions"]["p"] == {"option": "col", "cost": 3.0}


def test_infeasible_problem_is_a_clear_error() -> None:
    nodes = (node("a", ["x"], [0]), node("b", ["y"], [0]))
    with pytest.raises(ValueError, match="no combination of options is feasible"):
        solve(Problem(nodes, (edge("a", "b", [[math.inf]]),)))


def test_malformed_problem_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="matrix is not 1x2"):
        Problem((node("a", ["x"], [0]), node("b", ["y", "z"], [0, 0])), (edge("a", "b", [[1]]),))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
@example(seed=8656)  # HiGHS kept the warm start (516) as "optimal" under a bound of 486
def test_certificate_is_sound_under_a_tiny_time_limit(seed: int) -> None:
    """Whether or not HiGHS finishes in its 10 ms, lower bound ≤ optimum ≤ objective."""
    problem = _random_problem(random.Random(seed), "dense", 8)
    best = _brute_force(problem)
    selection = solve(problem, time_limit=1e-4)
    assert selection.lower_bound <= best + 1e-6 <= selection.objective + 1e-6
    if "time limit" not in selection.solver:
        assert selection.objective == best
