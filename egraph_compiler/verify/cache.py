"""Verdicts on disk, keyed by the rule's text, the semantics of the operators it
uses, the z3 version and the verifier's source: an unchanged library re-verifies
instantly, and editing an operator's `= expr` re-checks the rules that use it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import z3

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.format import rule_text
from egraph_compiler.dsl.normalize import RANK_LIMIT, WIDE_RANK_LIMIT
from egraph_compiler.verify.normalize import canonical, strip_spans
from egraph_compiler.verify.semantics import OpSemantics
from egraph_compiler.verify.verdict import Counterexample, TensorValue, Verdict

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def source_digest(root: Path = _PACKAGE_ROOT) -> str:
    """SHA-256 of the verifier's and the DSL's own source: a verdict is only as good as the
    code that reached it, so any change to either re-verifies (a hand-bumped version
    number was forgotten once, and a warm cache then served verdicts of the old code)."""
    digest = hashlib.sha256()
    for package in ("verify", "dsl"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


VERIFIER_SOURCE = source_digest()


def default_cache_dir() -> Path:
    """``$DNNR_CACHE_DIR/verify``, else the user's cache directory:
    ``$XDG_CACHE_HOME/dnnr/verify``, ``~/.cache/dnnr/verify`` when that is unset. Never
    next to the rule files (a shipped library's folder may be read-only, and verdicts
    are keyed by content, so one cache serves every checkout)."""
    env = os.environ.get("DNNR_CACHE_DIR")
    if env:
        return Path(env) / "verify"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "dnnr" / "verify"


def cache_key(rule: ast.Rule, sems: dict[str, OpSemantics], options: str) -> str:
    canon = canonical(rule, {n: s.decl for n, s in sems.items()})
    stripped = strip_spans(rule)
    assert isinstance(stripped, ast.Rule)
    parts = [VERIFIER_SOURCE, f"{RANK_LIMIT}/{WIDE_RANK_LIMIT}", z3.get_version_string(), rule_text(stripped),
             options]
    parts += [sems[op].text for op in canon.ops if op in sems]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def load(directory: Path, key: str) -> Verdict | None:
    path = directory / f"{key}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return verdict_from_json(data)


def store(directory: Path, key: str, verdict: Verdict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f"{key}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(verdict_to_json(verdict)))
    tmp.replace(directory / f"{key}.json")


def verdict_to_json(verdict: Verdict) -> dict[str, Any]:
    data = dataclasses.asdict(verdict)
    data["ok"] = verdict.ok
    return data


def verdict_from_json(data: dict[str, Any]) -> Verdict:
    data = dict(data)
    data.pop("ok", None)
    cex = data.get("counterexample")
    if cex is not None:
        def tensor(t: dict[str, Any] | None) -> TensorValue | None:
            if t is None:
                return None
            return TensorValue(t["name"], tuple(t["shape"]), t["dtype"], tuple(t["values"]))

        data["counterexample"] = Counterexample(
            cex["tier"], tuple(tensor(t) for t in cex["inputs"]),  # type: ignore[misc]
            tuple(tuple(a) for a in cex["attrs"]), tensor(cex["lhs"]), tensor(cex["rhs"]),
            cex["replay"], cex["explanation"])
    for name in ("tiers", "notes", "methods"):
        data[name] = tuple(data.get(name, ()))
    return Verdict(**data)
