"""The architecture is a checked contract: stages import only forward, code is lint-clean."""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import egraph_compiler

ROOT = Path(__file__).resolve().parent.parent
STAGES = ["ir", "shapes", "dsl", "egraph", "extract", "fusion", "plan", "verify",
          "backends.opencl", "backends.hexagon"]


def test_stages_import_only_forward() -> None:
    """import-linter contracts in pyproject.toml: ir < shapes|dsl < egraph|verify < ... < cli."""
    lint = shutil.which("lint-imports")
    assert lint, "import-linter is a test dependency: pip install -e '.[test]'"
    result = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_stage_documents_its_entry_point() -> None:
    for stage in STAGES:
        module = importlib.import_module(f"egraph_compiler.{stage}")
        assert module.__doc__ and len(module.__doc__.strip()) > 40, f"{stage} has no docstring"


def test_ruff_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "egraph_compiler", "tests",
                             "benchmarks", "examples"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_all_modules_import() -> None:
    for info in pkgutil.walk_packages(egraph_compiler.__path__, "egraph_compiler."):
        importlib.import_module(info.name)
