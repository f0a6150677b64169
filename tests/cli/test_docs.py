"""Issue 10 item 6: the user docs name only files that exist, and every option."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from egraph_compiler.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", ROOT / "rules" / "README.md")
# Paths the docs cite from other projects, and the user's example file, not ours.
EXTERNAL = {"opts/README.md", "my_rules.dnnr"}
PLACEHOLDER = re.compile(r"[*<>]|\bOUT\b|\bNAME\b|\bFILE\b|^out/")


def _cited_paths(text: str) -> set[str]:
    spans = re.findall(r"`([^`\s]+)`", text) + re.findall(r"\]\(([^)\s]+)\)", text)
    return {s for s in spans if re.search(r"\w\.(md|py|dnnr|lark)$", s) and not PLACEHOLDER.search(s)}


def test_every_file_the_docs_cite_exists() -> None:
    missing = []
    for doc in DOCS:
        for cited in sorted(_cited_paths(doc.read_text()) - EXTERNAL):
            bases = (doc.parent, ROOT, ROOT / "rules", ROOT / "egraph_compiler")
            if not any((base / cited).exists() for base in bases):
                missing.append(f"{doc.relative_to(ROOT)}: {cited}")
    assert not missing, missing


def test_the_file_map_lists_every_rule_file() -> None:
    text = (ROOT / "rules" / "README.md").read_text()
    rules = ROOT / "rules"
    for path in [*rules.glob("*.dnnr"), *(rules / "targets").glob("*.dnnr")]:
        assert f"| `{path.relative_to(rules)}` |" in text, path


def test_every_compile_option_is_documented() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    docs = "\n".join(doc.read_text() for doc in DOCS)
    options = [o for a in sub.choices["compile"]._actions for o in a.option_strings
               if o.startswith("--") and o != "--help"]
    undocumented = [o for o in options if o not in docs and o not in ("--progress", "--quiet")]
    assert not undocumented, undocumented
