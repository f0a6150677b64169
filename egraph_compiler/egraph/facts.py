"""Analysis rules: how facts (shape, dtype, constness, sign) reach e-classes that
rewrites create. Original values get their facts from the loader.

Natively in egglog: constness, dtype (as the registry declares it, `ops`),
shape of ops whose output has input 0's shape, of elementwise ones whose operands
agree, and of Transpose (``unstable-vec-map`` of ``vec-get``). Everything else goes
through the shape oracle: a rule records the primitive key (input shapes, attributes,
small input values) of every rewrite-created term in ``AskShape_<Op>``; Python
computes the shape with the shapes stage's rules (`term_shape`) and answers in
``ShapeAns_<Op>``; a second rule sets it. Only terms marked ``Fresh`` (built by a
rule) ask, so loading costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_compiler import ops, shapes
from egraph_compiler.dsl import ast
from egraph_compiler.egraph.schema import ABSENT, ATTR_SORT, OpSchema
from egraph_compiler.ir.dims import Dim
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.onnx_types import dtype_from_onnx


def _sign_preserving(info: ops.OpInfo) -> bool:
    """Positive (nonneg) operands give a positive (nonneg) result: semantics ``a + b`` or ``a * b``."""
    e, names = info.semantics, {p.name for p in info.decl.params}
    return isinstance(e, ast.BinOp) and e.op in ("+", "*") and len(names) == 2 and \
        {getattr(e.lhs, "name", None), getattr(e.rhs, "name", None)} == names


def _onnx_dtype_table() -> str:
    lines = []
    for code in range(1, 17):
        try:
            lines.append(f'(set (OnnxDtype {code}) "{dtype_from_onnx(code, "")}")')
        except ModelError:
            continue
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ShapeOracle:
    """The key layout of one op's shape question."""

    op: str
    schema: OpSchema
    shape_params: tuple[int, ...]  # params whose shape is in the key
    value_params: tuple[int, ...]  # params whose int value is in the key

    @property
    def ask(self) -> str:
        return f"AskShape_{self.op}"

    @property
    def answer(self) -> str:
        return f"ShapeAns_{self.op}"

    def key_sorts(self) -> list[str]:
        sorts = ["IVec"] * (len(self.shape_params) + len(self.value_params))
        return sorts + [ATTR_SORT[a.type] for a in self.schema.attrs]


def _term(schema: OpSchema) -> tuple[str, list[str], list[str]]:
    params = [f"x{i}" for i in range(len(schema.decl.params))]
    attrs = [f"a{i}" for i in range(len(schema.attrs))]
    args = params + attrs
    return (f"({schema.egglog} {' '.join(args)})" if args else f"({schema.egglog})"), params, attrs


def analysis_program(schemas: dict[str, OpSchema]) -> tuple[str, dict[str, ShapeOracle]]:
    """egglog text of all analysis rules, and the shape oracles by op name."""
    out = [_onnx_dtype_table()]
    oracles: dict[str, ShapeOracle] = {}
    for name, schema in schemas.items():
        params = schema.decl.params
        term, xs, attrs = _term(schema)
        tensor = [i for i, p in enumerate(params) if not p.variadic]
        # constness: all (non-variadic) inputs constant
        if params and len(tensor) == len(params):
            conds = " ".join(f"(is_const {xs[i]})" for i in tensor)
            out.append(f"(rule ((= e {term}) {conds}) ((is_const e)) :ruleset analysis)")
        # dtype, as the op declares it (rules/operators.dnnr) or the first operand's
        info = ops.OpInfo(schema.decl)
        dtype_kind, *dtype_args = info.dtype
        attr_names = [a.name for a in schema.attrs]
        if dtype_kind == "fixed":
            out.append(f'(rule ((= e {term})) ((set (dtype e) "{dtype_args[0]}")) :ruleset analysis)')
        elif dtype_kind == "dtype" and dtype_args[0] in attr_names:
            to = attrs[attr_names.index(dtype_args[0])]
            out.append(
                f"(rule ((= e {term}) (= d (OnnxDtype {to}))) ((set (dtype e) d)) :ruleset analysis)"
            )
        elif dtype_kind == "like" and params:
            names = [p.name for p in params]
            source = names.index(dtype_args[0]) if dtype_args and dtype_args[0] in names else None
            if not dtype_args:
                source = 0
            if source is not None and not (params[source].optional and len(dtype_args) > 1):
                if params[source].variadic:
                    out.append(
                        f"(rule ((= e {term}) (= {xs[source]} (TCons h t)) (= d (dtype h))) "
                        f"((set (dtype e) d)) :ruleset analysis)"
                    )
                else:
                    out.append(
                        f"(rule ((= e {term}) (= d (dtype {xs[source]}))) ((set (dtype e) d)) :ruleset analysis)"
                    )
        # sign facts
        for fact in sorted(info.facts):
            out.append(f"(rule ((= e {term})) (({fact} e)) :ruleset analysis)")
        if _sign_preserving(info) and len(tensor) == 2:
            for fact in ("positive", "nonneg"):
                out.append(
                    f"(rule ((= e {term}) ({fact} {xs[0]}) ({fact} {xs[1]})) (({fact} e)) "
                    f":ruleset analysis)"
                )
        # native shapes
        required = [i for i, p in enumerate(params) if not p.optional and not p.variadic]
        elementwise = _elementwise(schema)
        if (info.shape == "same" and required) or (elementwise and len(required) == 1):
            out.append(
                f"(rule ((= e {term}) (= s (shape {xs[0]}))) ((set (shape e) s)) :ruleset analysis)"
            )
        elif elementwise and len(required) >= 2:
            conds = " ".join(f"(= s (shape {xs[i]}))" for i in required)
            out.append(f"(rule ((= e {term}) {conds}) ((set (shape e) s)) :ruleset analysis)")
        if name == "Transpose" and [a.name for a in schema.attrs] == ["perm"]:
            out.append(
                f"(rule ((= e {term}) (= s (shape {xs[0]})) (> (vec-length {attrs[0]}) 0)) "
                f'((set (shape e) (unstable-vec-map (unstable-fn "vec-get" s) {attrs[0]}))) '
                f":ruleset analysis)"
            )
        # the shape oracle
        if (shapes.rule_for(name, info) or elementwise) and params:
            oracle = ShapeOracle(
                name, schema, tuple(required) + tuple(i for i, p in enumerate(params) if p.variadic),
                tuple(i for i in shapes.value_inputs(name, info) if i < len(params)),
            )
            oracles[name] = oracle
            out.append(_oracle_rules(oracle, term, xs, attrs))
    return "\n".join(out), oracles


def _oracle_rules(oracle: ShapeOracle, term: str, xs: list[str], attrs: list[str]) -> str:
    params = oracle.schema.decl.params
    query = [f"(= e {term})", "(Fresh e)"]
    keys = []
    for i in oracle.shape_params:
        fn = "lshape" if params[i].variadic else "shape"
        query.append(f"(= s{i} ({fn} {xs[i]}))")
        keys.append(f"s{i}")
    for i in oracle.value_params:
        query.append(f"(= v{i} (ivalue {xs[i]}))")
        keys.append(f"v{i}")
    keys += attrs
    sorts = " ".join(oracle.key_sorts())
    key = " ".join(keys)
    q = " ".join(query)
    match = f"ShapeMatch_{oracle.op}"
    return (
        f"(relation {oracle.ask} ({sorts}))\n"
        f"(relation {match} (T {sorts}))\n"
        f"(function {oracle.answer} ({sorts}) IVec :merge old)\n"
        f"(rule ({q}) (({oracle.ask} {key}) ({match} e {key})) :ruleset analysis)\n"
        f"(rule (({match} e {key}) (= r ({oracle.answer} {key}))) ((set (shape e) r)) :ruleset analysis)"
    )


def _elementwise(schema: OpSchema) -> bool:
    """NumPy broadcasting of all inputs: an op whose declaration says or implies
    ``broadcast``, and one the rule files declare one_to_one that the shapes stage has no
    rule for (new elementwise ops need no Python)."""
    info = ops.OpInfo(schema.decl)
    if shapes.rule_for(info.name, info) is not None:
        return info.shape == "broadcast"
    return schema.decl.mapping == "one_to_one"


def term_shape(schema: OpSchema, arg_shapes: list, attrs: dict, values: dict[int, tuple[Dim, ...]]) -> tuple[Dim, ...] | None:
    """Shape of a rewrite-built term (output 0) from its arguments' shapes (a list of shapes for
    a variadic parameter, None for an absent or unknown optional one), or None: never a guess."""
    name = schema.decl.name
    inputs: list[tuple[Dim, ...] | None] = []
    for param, shape in zip(schema.decl.params, arg_shapes, strict=False):
        if param.variadic:
            if shape is None:
                return None
            inputs.extend(shape)
        else:
            inputs.append(shape)
    num_outputs = schema.decl.outputs
    if name == "Split":  # the term is output 0; only `split` tells how many outputs there are
        if not attrs.get("split"):
            return None
        num_outputs = len(attrs["split"])
    return shapes.infer_term_shape(name, attrs, inputs, values=values, num_outputs=num_outputs,
                                   elementwise=_elementwise(schema))


def decode_attrs(schema: OpSchema, values: list) -> dict:
    """Attribute values from egglog back to Python, sentinels dropped (= absent)."""
    attrs = {}
    for attr, value in zip(schema.attrs, values, strict=True):
        if value == ABSENT[attr.type]:
            continue
        attrs[attr.name] = value
    return attrs
