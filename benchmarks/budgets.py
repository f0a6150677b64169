"""Time a runaway compile against its limits (prints, asserts nothing).

    python3 -m benchmarks.budgets [--seconds 10] [--nodes 100000000] [--pairs 16] [--rules N]

(as a module: run as a script, benchmarks/select.py would shadow the standard
library's select module.)

Writes a chain of ``pairs`` Mul/Add nodes and a rule set of associativity,
commutativity and distributivity (the e-graph grows ~3-7x an iteration) with
``limits { nodes = N; seconds = S }``, runs the whole ``dnnr compile`` as a
separate process and prints its wall time against S, the stop reason and the final
e-node count against N (issue 16: ≤ 1.1 × S for the whole compile, ≤ 1.1 × N).
With ``--rules N`` the rule set is instead N distinct documented rules (`many_rules`;
issue 16: "10,000 rules took 393 s to load against a 20 s limit"): the compile either
finishes or stops loading with an error naming the limit, within 1.1 × S either way.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
RULES = """
ruleset ac
rule add-comm: Add(?a, ?b) => Add(?b, ?a)
rule mul-comm: Mul(?a, ?b) => Mul(?b, ?a)
rule add-assoc: Add(Add(?a, ?b), ?c) => Add(?a, Add(?b, ?c))
rule add-assoc2: Add(?a, Add(?b, ?c)) => Add(Add(?a, ?b), ?c)
rule mul-assoc: Mul(Mul(?a, ?b), ?c) => Mul(?a, Mul(?b, ?c))
rule distribute: Mul(?a, Add(?b, ?c)) => Add(Mul(?a, ?b), Mul(?a, ?c))
schedule { saturate ac }
"""


UNARY = ("Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs")


def many_rules(count: int, operators: Path, limits: str = "") -> str:
    """``count`` distinct documented rules, each with a doc comment and a trailing
    comment (attaching comments was once quadratic), then ``limits { LIMITS }``."""
    lines = [f'use "{operators}"', "ruleset many"]
    for i in range(count):
        a, b = UNARY[i % 6], UNARY[(i // 6) % 6]
        lines += [f"# rule {i}: swap the operands of an Add",
                  f"rule r{i}: Add({a}(?x), {b}(?y)) => Add({b}(?y), {a}(?x)) when rank(?x) < {i + 100}  # trailing"]
    lines.append("schedule { saturate many }")
    if limits:
        lines.append(f"limits {{ {limits} }}")
    return "\n".join(lines) + "\n"


def chain(pairs: int) -> onnx.ModelProto:
    nodes, inits, current = [], [], "x"
    for i in range(pairs):
        for op in ("Mul", "Add"):
            const = f"c_{op}{i}"
            inits.append(numpy_helper.from_array(np.full((4,), 1.0 + i / 100, np.float32), const))
            nodes.append(helper.make_node(op, [current, const], [f"{op}{i}"], name=f"{op}{i}"))
            current = f"{op}{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(current, TensorProto.FLOAT, [4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--nodes", type=int, default=100_000_000)
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--rules", type=int, default=0, help="N generated rules instead of the AC rules")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        onnx.save(chain(args.pairs), work / "chain.onnx")
        rules = work / "runaway.dnnr"
        limits = f"nodes = {args.nodes}; iterations = 1000; seconds = {args.seconds}"
        operators = ROOT / "rules" / "operators.dnnr"
        rules.write_text(many_rules(args.rules, operators, limits) if args.rules else
                         f'use "{operators}"\n{RULES}\nlimits {{ {limits} }}\n')
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "egraph_compiler.cli", "compile", str(work / "chain.onnx"),
                               "--rules", str(rules), "-q", "-o", str(work / "out")], cwd=ROOT,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode:
            print(f"whole dnnr compile: {wall:.2f} s wall against seconds = {args.seconds} "
                  f"({wall / args.seconds:.2f}x), exit {done.returncode}: {done.stderr.strip()}")
            return
        egraph = json.loads((work / "out" / "report.json").read_text())["egraph"]
    print(f"whole dnnr compile: {wall:.2f} s wall against seconds = {args.seconds} "
          f"({wall / args.seconds:.2f}x); stop: {egraph['stop_reason']}; "
          f"{egraph['iterations']} iterations, {egraph['enodes']} e-nodes against nodes = {args.nodes} "
          f"({egraph['enodes'] / args.nodes:.3f}x)")


if __name__ == "__main__":
    main()
