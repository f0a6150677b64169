"""Answer the e-graph's questions in Python, in bulk, between iterations.

Guard oracles (`lower.GuardOracle`) and shape oracles (`facts.ShapeOracle`)
both record primitive keys in an ``Ask`` relation; we read the rows that are new
since the last round, compute, and write the answers back as one program.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from egraph_compiler.egraph import guards, text
from egraph_compiler.egraph.facts import ShapeOracle, decode_attrs, term_shape
from egraph_compiler.egraph.lower import GuardOracle
from egraph_compiler.egraph.schema import coerce, literal
from egraph_compiler.egraph.tables import Tables
from egraph_compiler.ir.dims import DimExpr
from egraph_compiler.shapes import using_ranges

READ_ALL = 1 << 40
_SIZE = re.compile(r"\((\S+) (\d+)\)")


class Oracles:
    def __init__(self, guard: list[GuardOracle], shape: dict[str, ShapeOracle], tables: Tables,
                 ranges: Mapping[str, tuple[int, int]] | None = None):
        self.guard = guard
        self.ranges = dict(ranges or {})  # the graph's dim ranges: guards on symbolic dims assume them
        self.shape = list(shape.values())
        self.tables = tables
        self._seen: dict[str, set[tuple[str, ...]]] = {}
        self._sizes: dict[str, int] = {}
        self.questions = 0

    def _new_rows(self, egraph, relations: list[str]) -> dict[str, list[tuple[str, ...]]]:
        if not relations:
            return {}
        # printing a table costs its size: print only those that grew (one cheap
        # `print-size` tells which)
        sizes = dict(
            (name, int(count))
            for name, count in _SIZE.findall(str(egraph.run_program(*egraph.parse_program("(print-size)"))[0]))
        )
        relations = [r for r in relations if sizes.get(r, 0) > self._sizes.get(r, 0)]
        self._sizes.update({r: sizes.get(r, 0) for r in relations})
        if not relations:
            return {}
        program = " ".join(f"(print-function {r} {READ_ALL} :mode csv)" for r in relations)
        outputs = egraph.run_program(*egraph.parse_program(program))
        fresh: dict[str, list[tuple[str, ...]]] = {}
        for relation, output in zip(relations, outputs, strict=True):
            seen = self._seen.setdefault(relation, set())
            rows = [row for row in text.parse_rows(str(output)) if row not in seen]
            seen.update(rows)
            fresh[relation] = rows
        return fresh

    def answer_guards(self, egraph, oracles: list[GuardOracle]) -> int:
        """Answer new guard questions; return how many held."""
        fresh = self._new_rows(egraph, [o.ask for o in oracles])
        commands: list[str] = []
        for oracle in oracles:
            for row in fresh.get(oracle.ask, []):
                self.questions += 1
                answer = self._guard(oracle, row)
                if answer is not None:
                    commands.append(f"({oracle.ok} {' '.join(row)} {' '.join(answer)})")
        _send(egraph, commands)
        return len(commands)

    def _guard(self, oracle: GuardOracle, row: tuple[str, ...]) -> list[str] | None:
        env: dict[str, object] = {}
        facts: dict[str, dict[str, object]] = {}
        for column, field in zip(oracle.keys, row, strict=True):
            value = text.parse_value(field)
            if column.what == "unit":
                continue
            if column.what == "attr":
                env[column.var] = value
            elif column.what in ("shape", "value"):
                facts.setdefault(column.var, {})[column.what] = self.tables.shape_of(value)  # type: ignore[arg-type]
            else:
                facts.setdefault(column.var, {})["dtype"] = value
        for var, known in facts.items():
            env[var] = guards.TensorFacts(**known)  # type: ignore[arg-type]
        with using_ranges(self.ranges):
            return self._checked(oracle, env)

    def _checked(self, oracle: GuardOracle, env: dict[str, object]) -> list[str] | None:
        if not all(guards.holds(check, env) for check in oracle.checks):
            return None
        results: list[str] = []
        for expr, kind in oracle.computed:
            try:
                value = guards.evaluate(expr, env)
                value = guards.value_of(value)
            except guards.Unknown:
                return None
            result = _encode(kind, value)
            if result is None:
                return None
            results.append(result)
        return results

    def answer_shapes(self, egraph) -> int:
        with using_ranges(self.ranges):
            return self._answer_shapes(egraph)

    def _answer_shapes(self, egraph) -> int:
        fresh = self._new_rows(egraph, [o.ask for o in self.shape])
        commands: list[str] = []
        for oracle in self.shape:
            for row in fresh.get(oracle.ask, []):
                self.questions += 1
                shape = self._shape(oracle, row)
                if shape is not None:
                    ids = self.tables.shape_ids(shape)
                    commands.append(f"(set ({oracle.answer} {' '.join(row)}) {text.vec(ids, 'i64')})")
        _send(egraph, commands)
        return len(commands)

    def _shape(self, oracle: ShapeOracle, row: tuple[str, ...]):
        params = oracle.schema.decl.params
        values = [text.parse_value(field) for field in row]
        shapes: list = [None] * len(params)
        position = 0
        for i in oracle.shape_params:
            raw = values[position]
            position += 1
            if params[i].variadic:
                shapes[i] = self._shape_list(raw)  # type: ignore[arg-type]
            else:
                shapes[i] = self.tables.shape_of(raw)  # type: ignore[arg-type]
        known_values = {}
        for i in oracle.value_params:
            known_values[i] = self.tables.shape_of(values[position])  # type: ignore[arg-type]
            position += 1
        attrs = decode_attrs(oracle.schema, values[position:])
        return term_shape(oracle.schema, shapes, attrs, known_values)

    def _shape_list(self, flat: tuple) -> list:
        shapes = []
        i = 0
        while i < len(flat):
            rank = int(flat[i])
            shapes.append(self.tables.shape_of(flat[i + 1:i + 1 + rank]))
            i += 1 + rank
        return shapes


def _encode(kind: str, value: object) -> str | None:
    try:
        if kind in ("ints", "floats", "strings") and not isinstance(value, (tuple, list)):
            return None
        if kind in ("int", "ints") and _symbolic(value):
            return None
        if kind == "int" and isinstance(value, bool):
            value = int(value)
        return literal(kind, coerce(kind, value))
    except (TypeError, ValueError):
        return None


def _symbolic(value: object) -> bool:
    if isinstance(value, DimExpr):
        return True
    if isinstance(value, (tuple, list)):
        return any(isinstance(v, DimExpr) for v in value)
    return False


CHUNK = 500  # egglog parses a program in time superlinear in its length


def _send(egraph, commands: list[str]) -> None:
    for start in range(0, len(commands), CHUNK):
        program = "\n".join(commands[start:start + CHUNK])
        egraph.run_program(*egraph.parse_program(program))
