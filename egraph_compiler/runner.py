"""`dnnr run OUT`: load a compiled artefact, feed it .npy inputs, write .npy outputs.

The artefact directory says which backend built it (``target`` in ``plan.json``);
each backend's ``load(out_dir, device=...)`` returns an object with
``run(inputs) -> outputs``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from egraph_compiler.ir.errors import DnnrError


def parse_inputs(specs: Sequence[str]) -> dict[str, np.ndarray]:
    """``NAME=FILE.npy`` strings to arrays, with clear errors for bad specs."""
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise DnnrError(f"error: --input expects NAME=FILE.npy, got {spec!r}")
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DnnrError(f"error: cannot read input {name!r} from {path}: {exc}") from None
    return inputs


def artefact_target(out_dir: Path) -> str:
    """Which backend built ``out_dir``: ``target`` in plan.json, else its files say."""
    plan = out_dir / "plan.json"
    if plan.exists():
        try:
            target = json.loads(plan.read_text()).get("target")
        except ValueError as exc:
            raise DnnrError(f"error: {plan} is damaged: {exc}") from None
        if target:
            return str(target)
    if (out_dir / "kernels.cl").exists():
        return "opencl"
    if any(out_dir.glob("*.elf")) or any(out_dir.glob("*.c")):
        return "hexagon"
    raise DnnrError(f"error: {out_dir} is not a compiled artefact (no plan.json)\n"
                    "  hint: dnnr compile MODEL --target opencl -o OUT")


def load_artefact(out_dir: Path, device: str | None = None):  # type: ignore[no-untyped-def]
    target = artefact_target(out_dir)
    if target == "opencl":
        from egraph_compiler.backends import opencl

        return opencl.load(out_dir, device=device)
    if target == "hexagon":
        from egraph_compiler.backends import hexagon

        return hexagon.load(out_dir)
    raise DnnrError(f"error: {out_dir}: unknown target {target!r} in plan.json")


def run_artefact(out_dir: Path, input_specs: Sequence[str], output_dir: Path,
                 device: str | None = None) -> dict[str, Path]:
    """Run the artefact and write each output to ``output_dir/<output name>.npy``."""
    model = load_artefact(out_dir, device=device)
    outputs = model.run(parse_inputs(input_specs))
    output_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, array in outputs.items():
        path = output_dir / f"{_safe(name)}.npy"
        np.save(path, array)
        written[name] = path
        print(f"{name}: {array.dtype}{list(array.shape)} -> {path}")
    return written


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
