"""The wheel carries every package and the data the compiler reads at run time."""

from __future__ import annotations

import sys
from pathlib import Path

import setuptools

from egraph_compiler import dsl

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - CI runs 3.11+
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_source_package_is_listed() -> None:
    found = set(setuptools.find_packages(str(ROOT), include=["egraph_compiler*"]))
    listed = set(CONFIG["packages"])
    mapped = set(CONFIG["package-dir"])
    assert found == listed - mapped, (sorted(found - listed), sorted(listed - mapped - found))


def test_shipped_data_is_mapped_into_the_package() -> None:
    dirs = CONFIG["package-dir"]
    assert (ROOT / dirs["egraph_compiler.shipped_rules"]).resolve() == dsl.rules_dir().resolve()
    assert (ROOT / dirs["egraph_compiler.shipped_grammar"] / "dnnr.lark").resolve() == \
        dsl.grammar_path().resolve()
    patterns = CONFIG["package-data"]
    assert "*.dnnr" in patterns["egraph_compiler.shipped_rules"]
    assert "*.lark" in patterns["egraph_compiler.shipped_grammar"]
    assert "*.json" in patterns["egraph_compiler.backends.hexagon"]
