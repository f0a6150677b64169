"""One guard, one meaning: the e-graph's domain (`egraph.guards`, concrete dims) and the
verifier's (`verify.evalexpr`, Z3 terms) evaluate the same guards through the one
evaluator `dsl.guard_eval`, and agree — on concrete shapes, and with symbolic Z3 dims
instantiated afterwards at those shapes (what the verifier proves about a guard is what
the e-graph decides for a matched node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import z3

from egraph_compiler.dsl import ast, guard_eval
from egraph_compiler.egraph import guards as egraph_guards
from egraph_compiler.verify import evalexpr

from .conftest import load_inline

PATTERN = "Add(Add(Transpose(?x, perm=?p), LeakyRelu(?y, alpha=?f)), Softmax(?z, axis=?a))"
GUARDS = [
    "rank(?x) == 4",
    "rank(?x) >= 3 and dim(?x, -1) == 8",
    "dim(?x, 5) == 1",
    "same_shape(?x, ?y)",
    "broadcastable(?x, ?y)",
    "broadcastable(?y, ?z)",
    "numel(?x) == numel(?y)",
    "shape(?x) == permute(shape(?y), ?p)",
    "shape(?x) != permute(shape(?y), ?p)",
    "is_identity(compose(?p, invert(?p)))",
    "len(?p) == rank(?x)",
    "?p[0] == 0 and ?p[-1] != 0",
    "?f <= 0.5",
    "?f < inf",
    "not (?a == -1)",
    "?a >= -rank(?z) and ?a < rank(?z)",
    "normalize_axes([?a], rank(?z)) == [rank(?z) - 1]",
    "dim(?z, ?a) % 2 == 0",
    "dim(?x, 0) // 2 == 1",
    "2 ** rank(?x) == 16",
    "reshape_shape(shape(?x), [0, -1]) == [dim(?x, 0), numel(?x) // dim(?x, 0)]",
    "flatten_shape(shape(?x), 1)[1] == 12",
    "squeeze_shape(shape(?y), [0]) == shape(?z)",
    "unsqueeze_shape(shape(?z), [0]) == shape(?y)",
    "concat(shape(?z), [1]) == shape(?y)",
    "shape(?z) + [1] == shape(?y)",
    "rank(?x) == 4 or dim(?x, 7) == 1",
    "dim(?x, 7) == 1 or rank(?x) == 4",
    "dim(?x, 7) == 1 and rank(?x) == 4",
    "dtype(?x) == float32",
    "dim(?y, -1) * dim(?y, 0) > 3 + dim(?z, -1)",
]
ENVIRONMENTS: list[dict[str, Any]] = [
    # shapes of ?x ?y ?z, then the attributes
    {"x": (2, 3, 4, 8), "y": (1, 3, 8), "z": (3, 8), "p": (0, 2, 3, 1), "f": 0.1, "a": -1},
    {"x": (2, 3, 4, 8), "y": (2, 3, 4, 8), "z": (4, 8), "p": (3, 2, 1, 0), "f": 0.9, "a": 0},
    {"x": (3, 4), "y": (4, 1), "z": (4,), "p": (1, 0), "f": 0.5, "a": -2},
    {"x": (2, 6), "y": (6, 2), "z": (5,), "p": (0, 1), "f": -3.0, "a": 0},
]
UNDECIDED = object()


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> list[ast.Expr]:
    text = "\n".join(f"rule g{k}: {PATTERN} => ?x when {g}" for k, g in enumerate(GUARDS))
    ruleset = load_inline(text, Path(tmp_path_factory.mktemp("guards")))
    return [rule.guard for rule in ruleset.rules]  # type: ignore[misc]


def _attrs(env: dict[str, Any]) -> dict[str, Any]:
    return {"p": env["p"], "f": env["f"], "a": env["a"]}


def _egraph(guard: ast.Expr, env: dict[str, Any]) -> Any:
    values: dict[str, object] = dict(_attrs(env))
    for var in ("x", "y", "z"):
        values[var] = egraph_guards.TensorFacts(shape=env[var], dtype="float32")
    try:
        return egraph_guards.evaluate(guard, values)
    except egraph_guards.Unknown:
        return UNDECIDED


class _Facts:
    """Verifier facts over fixed shapes (concrete ints or Z3 dims)."""

    def __init__(self, shapes: dict[str, list[Any]]) -> None:
        self.shapes = shapes
        self.required: list[Any] = []

    def rank(self, var: str) -> int:
        return len(self.shapes[var])

    def shape(self, var: str) -> list[Any]:
        return list(self.shapes[var])

    def element_fact(self, kind: str, var: str) -> Any:
        raise evalexpr.NotApplicable(kind)

    def is_const(self, var: str) -> Any:
        raise evalexpr.NotApplicable("is_const")

    def dtype(self, var: str) -> str:
        return "float32"

    def require(self, cond: Any) -> None:
        self.required.append(cond)


def _verifier(guard: ast.Expr, env: dict[str, Any], symbolic: bool) -> Any:
    attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in _attrs(env).items()}
    if not symbolic:
        try:
            return evalexpr.evaluate(guard, attrs, _Facts({v: list(env[v]) for v in "xyz"}))
        except evalexpr.NotApplicable:
            return UNDECIDED
    # symbolic dims, instantiated afterwards at the concrete shape
    dims = {v: [z3.Int(f"d_{v}_{k}") for k in range(len(env[v]))] for v in "xyz"}
    facts = _Facts(dims)
    try:
        value = evalexpr.evaluate(guard, attrs, facts)
    except evalexpr.NotApplicable:
        return UNDECIDED
    at = [(d, z3.IntVal(n)) for v in "xyz" for d, n in zip(dims[v], env[v], strict=True)]
    if not all(z3.is_true(z3.simplify(z3.substitute(c, *at))) for c in facts.required):
        return UNDECIDED  # a shape built-in is undefined here: the rule does not fire
    if isinstance(value, z3.ExprRef):
        value = z3.simplify(z3.substitute(value, *at))
        assert z3.is_true(value) or z3.is_false(value), value
        return z3.is_true(value)
    return value


def _same(a: Any, b: Any) -> bool:
    if a is UNDECIDED or b is UNDECIDED:
        return a is b
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("env", range(len(ENVIRONMENTS)))
def test_guards_mean_the_same_in_the_egraph_and_the_verifier(parsed: list[ast.Expr],
                                                              env: int) -> None:
    concrete = ENVIRONMENTS[env]
    for text, guard in zip(GUARDS, parsed, strict=True):
        in_egraph = _egraph(guard, concrete)
        assert _same(in_egraph, _verifier(guard, concrete, symbolic=False)), text
        # the verifier proves over symbolic dims: instantiated, it is the e-graph's
        # answer wherever the e-graph decides (false where the e-graph is undecided)
        symbolic = _verifier(guard, concrete, symbolic=True)
        if in_egraph is UNDECIDED:
            assert symbolic in (UNDECIDED, False), text
        else:
            assert _same(in_egraph, symbolic), text


def test_the_table_reaches_every_outcome(parsed: list[ast.Expr]) -> None:
    """The table is not vacuous: each domain sees true, false and undecided guards."""
    outcomes = {_egraph(g, env) if _egraph(g, env) is not UNDECIDED else "undecided"
                for g in parsed for env in ENVIRONMENTS}
    assert {True, False, "undecided"} <= outcomes


def test_one_evaluator() -> None:
    """Both domains are domains of the one evaluator; neither walks the AST itself."""
    assert issubclass(egraph_guards.EGraphDomain, guard_eval.GuardDomain)
    assert issubclass(evalexpr.Z3Domain, guard_eval.GuardDomain)
    assert evalexpr.NotApplicable is egraph_guards.Unknown is guard_eval.Undecided
