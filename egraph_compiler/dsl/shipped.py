"""Where the shipped rule library and the grammar are.

In a checkout (editable install or ``pythonpath=.``) they are the repository's
``rules/`` and ``grammar/`` folders; a wheel carries them as the package data of
``egraph_compiler.shipped_rules`` / ``egraph_compiler.shipped_grammar`` (see the
package-dir mapping in pyproject.toml).
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def _shipped_dir(repo_folder: str, package: str) -> Path:
    in_repo = _REPO / repo_folder
    if in_repo.is_dir():
        return in_repo
    spec = find_spec(package)  # a namespace package: its folder is the search location
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"dnnr is installed without its {repo_folder}/ data ({package})")
    return Path(next(iter(spec.submodule_search_locations)))


def rules_dir() -> Path:
    """The shipped rule library: ``$DNNR_RULES`` when set, else the packaged ``rules/``."""
    env = os.environ.get("DNNR_RULES")
    if env:
        return Path(env)
    return _shipped_dir("rules", "egraph_compiler.shipped_rules")


def grammar_path() -> Path:
    """The lark grammar of the rule language."""
    return _shipped_dir("grammar", "egraph_compiler.shipped_grammar") / "dnnr.lark"
