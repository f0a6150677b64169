"""Count operator-name string literals in the compiler outside `dsl/` and `ops/` (issue 11).

    PYTHONPATH=. python3 -P benchmarks/op_literals.py [--by-file] [--names]

An operator name is one declared by an ``op`` line in ``rules/`` (the shipped library,
targets included). A literal is a Python string constant equal to such a name, found
with `ast` (docstrings and comments are not constants of that kind: a docstring is
one string, never equal to a bare name). Also prints the lines of Python per package,
so a refactoring's added and deleted lines can be compared with `git diff --stat`.
Prints, asserts nothing.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

from egraph_compiler import dsl

ROOT = Path(__file__).resolve().parents[1] / "egraph_compiler"
EXCLUDED = ("dsl", "ops")


def operator_names() -> set[str]:
    return {op.name for op in dsl.load_rules([dsl.rules_dir()]).ops.values()}


def literals(path: Path, names: set[str]) -> Counter[str]:
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found[node.value] += 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--by-file", action="store_true", help="literals per file, most first")
    parser.add_argument("--names", action="store_true", help="literals per operator, most first")
    args = parser.parse_args()
    names = operator_names()
    per_file: dict[str, Counter[str]] = {}
    lines: Counter[str] = Counter()
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        package = relative.parts[0] if len(relative.parts) > 1 else "(top)"
        lines[package] += len(path.read_text().splitlines())
        if package not in EXCLUDED:
            per_file[str(relative)] = literals(path, names)
    total = sum(sum(c.values()) for c in per_file.values())
    print(f"operator names declared in rules/: {len(names)}")
    print(f"operator-name literals outside {', '.join(d + '/' for d in EXCLUDED)}: {total} "
          f"in {sum(1 for c in per_file.values() if c)} files")
    if args.by_file:
        for name, found in sorted(per_file.items(), key=lambda kv: -sum(kv[1].values())):
            if found:
                print(f"  {sum(found.values()):5d}  {name}")
    if args.names:
        overall = sum(per_file.values(), Counter())
        for name, n in overall.most_common():
            print(f"  {n:5d}  {name}")
    print("lines of Python per package:")
    for package, n in sorted(lines.items()):
        print(f"  {n:6d}  {package}")
    print(f"  {sum(lines.values()):6d}  total")


if __name__ == "__main__":
    main()
