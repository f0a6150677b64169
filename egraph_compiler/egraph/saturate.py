"""Build the egglog program for a graph and a rule set, then run the schedule one
iteration at a time, checking the budgets between iterations (egglog 13.2 has no
node or time limit inside a run: DESIGN §3)."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable

from egglog.bindings import EGraph

from egraph_compiler.dsl.ast import (
    Limits,
    OpDecl,
    POp,
    Repeat,
    RuleSet,
    RunTimes,
    Saturate,
    ScheduleStep,
)
from egraph_compiler.egraph import prelude
from egraph_compiler.egraph.facts import analysis_program
from egraph_compiler.egraph.load import load_rows, load_rule, write_tsv
from egraph_compiler.egraph.lower import LoweredRule, apply_ruleset_name, lower_rule, ruleset_name
from egraph_compiler.egraph.oracles import Oracles
from egraph_compiler.egraph.result import IterationStats, Saturation, SaturationStats
from egraph_compiler.egraph.schema import schemas as make_schemas
from egraph_compiler.egraph.tables import Tables
from egraph_compiler.ir.graph import Graph

Progress = Callable[[str], None]
TERM_CONSTRUCTORS = ("Input", "Const", "Absent", "ScalarConst", "VecConst", "Out", "TNil", "TCons")
_SIZE_LINE = re.compile(r"\((\S+) (\d+)\)")
# Counting e-classes needs a `freeze()`, which copies every table (~2 µs a row here):
# per iteration only while the e-graph is small enough for that to stay cheap.
COUNT_CLASSES_UP_TO = 200_000
OVERSHOOT = 10


class _Stop(Exception):
    def __init__(self, reason: str, limit: float | int | None):
        self.reason, self.limit = reason, limit


def _run(egraph: EGraph, program: str) -> list:
    return egraph.run_program(*egraph.parse_program(program))


def _ruleset_names(rules: RuleSet) -> list[str]:
    names = [r.name for r in rules.rulesets]
    for rule in rules.rules:
        if rule.ruleset not in names:
            names.append(rule.ruleset)
    return names


class _Driver:
    def __init__(self, egraph: EGraph, rules: RuleSet, lowered: list[LoweredRule],
                 oracles: Oracles, limits: Limits, progress: Progress | None, start: float):
        self.egraph, self.rules, self.lowered = egraph, rules, lowered
        self.oracles, self.limits, self.progress, self.start = oracles, limits, progress, start
        self.iterations: list[IterationStats] = []
        self.matches: dict[str, int] = {}
        self.fires: dict[str, int] = {}
        self.names: dict[str, tuple[str, str]] = {}
        for item in lowered:
            self.names[item.egglog_name] = (item.rule.name, "fire")
            if item.ask_name:
                self.names[item.ask_name] = (item.rule.name, "match")
        self.e_nodes = 0
        self.last_changed = True
        self.fire_order: list[str] = []

    # -- bookkeeping -------------------------------------------------------------
    def _count(self, outputs: list) -> bool:
        changed = False
        for output in outputs:
            report = getattr(output, "report", None)
            if report is None:
                continue
            changed |= bool(report.updated)
            for name, count in report.num_matches_per_rule.items():
                if name not in self.names or not count:
                    continue
                rule, what = self.names[name]
                if what == "match":
                    self.matches[rule] = self.matches.get(rule, 0) + count
                else:
                    if rule not in self.fires:
                        self.fire_order.append(rule)
                    self.fires[rule] = self.fires.get(rule, 0) + count
                    lowered = next(lr for lr in self.lowered if lr.egglog_name == name)
                    if lowered.ask_name is None:
                        self.matches[rule] = self.matches.get(rule, 0) + count
        return changed

    def count_nodes(self) -> int:
        output = str(_run(self.egraph, "(print-size)")[0])
        total = 0
        for name, count in _SIZE_LINE.findall(output):
            if name.startswith("Op_") or name in TERM_CONSTRUCTORS:
                total += int(count)
        self.e_nodes = total
        return total

    # -- analysis ----------------------------------------------------------------
    def analyse(self) -> bool:
        changed = False
        for _ in range(100):
            outputs = _run(self.egraph, "(run-schedule (saturate (run analysis)))")
            changed |= self._count(outputs)
            if not self.oracles.answer_shapes(self.egraph):
                break
            changed = True
        return changed

    # -- the schedule --------------------------------------------------------------
    def iteration(self, rulesets: tuple[str, ...]) -> bool:
        if len(self.iterations) >= self.limits.iterations:
            raise _Stop("limit:iterations", self.limits.iterations)
        if time.perf_counter() - self.start > self.limits.seconds:
            raise _Stop("limit:seconds", self.limits.seconds)
        # egglog cannot stop inside an iteration, and one iteration of AC rules can
        # multiply the e-graph a hundredfold (DESIGN §3: 320k -> 32.5M e-nodes, 226 s):
        # refuse to start one whose growth, at the last iteration's rate, would
        # overshoot the node budget tenfold
        if len(self.iterations) >= 2:
            before, after = self.iterations[-2].e_nodes, self.iterations[-1].e_nodes
            if after > before and after * after / max(before, 1) > OVERSHOOT * self.limits.nodes:
                raise _Stop("limit:nodes", self.limits.nodes)
        began = time.perf_counter()
        known = set(_ruleset_names(self.rules))
        present = [r for r in rulesets if r in known]
        changed = False
        if present:
            changed |= self._count(_run(self.egraph, " ".join(f"(run {ruleset_name(r)} 1)" for r in present)))
            guarded = [lr.oracle for lr in self.lowered if lr.oracle and lr.rule.ruleset in present]
            if guarded:
                self.oracles.answer_guards(self.egraph, guarded)  # type: ignore[arg-type]
                changed |= self._count(
                    _run(self.egraph, " ".join(f"(run {apply_ruleset_name(r)} 1)" for r in present))
                )
        changed |= self.analyse()
        nodes = self.count_nodes()
        classes = _count_classes(self.egraph) if nodes <= COUNT_CLASSES_UP_TO else None
        seconds = time.perf_counter() - began
        label = ",".join(rulesets)
        self.iterations.append(IterationStats(label, nodes, classes, seconds))
        if self.progress:
            self.progress(
                f"egraph: iteration {len(self.iterations)} ({label}): {nodes} e-nodes, {seconds:.3f} s"
            )
        self.last_changed = changed
        if nodes > self.limits.nodes:
            raise _Stop("limit:nodes", self.limits.nodes)
        return changed

    def run_steps(self, steps: tuple[ScheduleStep, ...]) -> bool:
        changed_any = False
        for step in steps:
            if isinstance(step, Saturate):
                while self.iteration(step.rulesets):
                    changed_any = True
            elif isinstance(step, RunTimes):
                for _ in range(step.times):
                    if not self.iteration(step.rulesets):
                        break
                    changed_any = True
            elif isinstance(step, Repeat):
                for _ in range(step.times):
                    if not self.run_steps(step.body):
                        break
                    changed_any = True
        return changed_any


def _pattern_ops(pattern, found: set[str]) -> None:
    if isinstance(pattern, POp):
        found.add(pattern.op)
        for item in pattern.inputs:
            _pattern_ops(item, found)


def relevant_ops(graph: Graph, rules: RuleSet) -> dict[str, OpDecl]:
    """Declared ops the graph or a rule uses: egglog registers each constructor and
    its analysis rules at ~4 ms a command, so the other ~70 ops would cost seconds."""
    used = {node.op for node in graph.nodes}
    for rule in rules.rules:
        _pattern_ops(rule.lhs, used)
        _pattern_ops(rule.rhs, used)
    return {name: decl for name, decl in rules.ops.items() if name in used}


def _run_chunked(egraph: EGraph, parts: list[str], size: int = 40) -> None:
    """Run program text in small pieces: egglog parses a long program in
    superlinear time (DESIGN §3)."""
    for part in parts:
        commands = _split_commands(part)
        for start in range(0, len(commands), size):
            _run(egraph, "\n".join(commands[start:start + size]))


def _split_commands(program: str) -> list[str]:
    commands, depth, current, in_string = [], 0, [], False
    for ch in program:
        current.append(ch)
        if ch == '"':
            in_string = not in_string
        elif not in_string and ch == "(":
            depth += 1
        elif not in_string and ch == ")":
            depth -= 1
            if depth == 0:
                commands.append("".join(current).strip())
                current = []
    return [c for c in commands if c]


def _count_classes(egraph: EGraph, frozen=None) -> int:  # type: ignore[no-untyped-def]
    """Distinct e-classes of sort T/TList (one `freeze()`, unless given)."""
    classes: set[str] = set()
    for name, function in (frozen or egraph.freeze()).functions.items():
        if function.output_sort in ("T", "TList") and (name.startswith("Op_") or name in TERM_CONSTRUCTORS):
            classes.update(str(row.output) for row in function.rows)
    return len(classes)


def _rule_sites(egraph: EGraph, frozen) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Per rule, the distinct e-classes it rewrote (rows of ``Fired``, canonical)."""
    sites: dict[str, int] = {}
    fired = frozen.functions.get("Fired")
    for row in fired.rows if fired is not None else ():
        rule = egraph.value_to_string(row.inputs[0])
        sites[rule] = sites.get(rule, 0) + 1
    return dict(sorted(sites.items()))


def saturate_graph(graph: Graph, rules: RuleSet, limits: Limits | None, progress: Progress | None) -> Saturation:
    start = time.perf_counter()
    limits = limits or rules.limits
    tables = Tables()
    loaded = load_rows(graph, make_schemas(rules.ops), tables)  # undeclared ops fail here, early
    schemas = make_schemas(relevant_ops(graph, rules))

    lowered: list[LoweredRule] = []
    for rule in rules.rules:
        lowered.append(lower_rule(rule, schemas, len(lowered)))
        if rule.bidirectional:
            lowered.append(lower_rule(rule, schemas, len(lowered), reverse=True))
    analysis, shape_oracles = analysis_program(schemas)
    rulesets = "\n".join(
        f"(ruleset {ruleset_name(n)})\n(ruleset {apply_ruleset_name(n)})" for n in _ruleset_names(rules)
    )
    parts = [
        prelude.SORTS,
        "\n".join(s.declaration() for s in schemas.values()),
        prelude.LOAD_RULES,
        "\n".join(load_rule(s) for s in schemas.values()),
        prelude.LEAF_FACTS,
        analysis,
        rulesets,
        "\n".join(item.text for item in lowered),
    ]
    egraph = EGraph()
    _run_chunked(egraph, parts)
    directory = tempfile.mkdtemp(prefix="dnnr-egraph-")
    try:
        inputs = write_tsv(loaded, directory)
        _run(egraph, tables.take_program())
        _run(egraph, inputs + "\n(run-schedule (saturate (run load)))")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    oracles = Oracles([lr.oracle for lr in lowered if lr.oracle], shape_oracles, tables, graph.symbols)
    driver = _Driver(egraph, rules, lowered, oracles, limits, progress, start)
    driver.analyse()
    driver.count_nodes()
    load_seconds = time.perf_counter() - start
    if progress:
        progress(f"egraph: loaded {len(graph.nodes)} nodes as {driver.e_nodes} e-nodes in {load_seconds:.2f} s")

    steps = rules.schedule or (Saturate(tuple(_ruleset_names(rules))),)
    reason, limit = "schedule-done", None
    try:
        driver.run_steps(steps)
        if not driver.last_changed:
            reason = "saturated"
    except _Stop as stop:
        reason, limit = stop.reason, stop.limit
    frozen = egraph.freeze()
    e_classes = _count_classes(egraph, frozen)
    stats = SaturationStats(
        iterations=tuple(driver.iterations),
        rule_matches=dict(sorted(driver.matches.items())),
        rule_fires=dict(sorted(driver.fires.items())),
        seconds=time.perf_counter() - start,
        load_seconds=load_seconds,
        stop_reason=reason,
        limit=limit,
        e_nodes=driver.e_nodes,
        e_classes=e_classes,
        limits=limits,
        rule_sites=_rule_sites(egraph, frozen),
        fire_order=tuple(driver.fire_order),
    )
    if progress:
        progress(f"egraph: {stats.describe()}")
    outputs = {v.name: f"(V {loaded.value_ids[v.name]})" for v in graph.outputs}
    return Saturation(
        egraph, graph, rules, schemas, tables, loaded.value_ids, outputs, stats, loaded.signatures
    )
