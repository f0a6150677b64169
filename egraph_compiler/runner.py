"""`dnnr run OUT`: load a compiled artefact, feed it .npy inputs, write .npy outputs.

The artefact's manifest says which backend built it and what it takes; `load_artefact`
checks every file against it first (`backends.artefact`), and the `CheckedModel` it
returns checks every input's name, dtype and shape before the backend's
``run(inputs) -> outputs`` sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler.backends.artefact import check_artefact
from egraph_compiler.ir.errors import DnnrError


def parse_inputs(specs: Sequence[str]) -> dict[str, np.ndarray]:
    """``NAME=FILE.npy`` strings to arrays, with clear errors for bad specs and files."""
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise DnnrError(f"error: --input expects NAME=FILE.npy, got {spec!r}")
        if name in inputs:
            raise DnnrError(f"error: --input {name} is given twice")
        if not Path(path).is_file():
            raise DnnrError(f"error: cannot read input {name!r}: {path} is not a regular file")
        try:
            array = np.load(path, allow_pickle=False)
        except Exception as exc:  # noqa: BLE001 - a damaged header raises anything from
            # ValueError to tokenize.TokenError inside numpy; each is the same user error
            why = "the file is empty" if isinstance(exc, EOFError) else (str(exc) or type(exc).__name__).splitlines()[0]
            raise DnnrError(f"error: cannot read input {name!r} from {path}: {why} "
                            "(expected a .npy file written by numpy.save)") from None
        if not isinstance(array, np.ndarray):  # an .npz archive
            raise DnnrError(f"error: input {name!r}: {path} is an .npz archive, not one .npy array")
        inputs[name] = array
    return inputs


class OnnxModel:
    """The optimised ONNX model of an ``onnx``-target artefact, run by onnxruntime."""

    def __init__(self, path: Path) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise DnnrError("error: running an onnx-target artefact needs onnxruntime\n"
                            "  hint: pip install onnxruntime") from None
        self.path = path
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        names = [o.name for o in self.session.get_outputs()]
        return dict(zip(names, self.session.run(names, dict(inputs)), strict=True))


class CheckedModel:
    """A loaded artefact whose ``run`` checks every input against the manifest first:
    names, dtypes (refused, or converted with ``cast=True``) and shapes."""

    def __init__(self, model: Any, manifest: dict[str, Any], out_dir: Path) -> None:
        self.model, self.manifest, self.out_dir = model, manifest, out_dir

    def __getattr__(self, name: str) -> Any:  # the backend's own extras (plan, kernel_names, …)
        return getattr(self.model, name)

    def run(self, inputs: Mapping[str, Any], *, cast: bool = False) -> dict[str, np.ndarray]:
        return dict(self.model.run(check_inputs(inputs, self.manifest["inputs"], cast=cast)))


def check_inputs(inputs: Mapping[str, Any], expected: Mapping[str, Any], *,
                 cast: bool = False) -> dict[str, np.ndarray]:
    """``inputs`` as arrays after checking them against the artefact's input signature;
    a `DnnrError` naming the input, what was expected and what was given otherwise."""
    missing = [name for name in expected if name not in inputs]
    if missing:
        raise DnnrError(f"error: missing input(s) {', '.join(missing)} (the model takes "
                        f"{', '.join(_describe(n, i) for n, i in expected.items())})")
    unknown = [name for name in inputs if name not in expected]
    if unknown:
        raise DnnrError(f"error: unknown input(s) {', '.join(unknown)} (the model takes "
                        f"{', '.join(expected)})")
    checked: dict[str, np.ndarray] = {}
    for name, info in expected.items():
        array = np.asarray(inputs[name])
        want = np.dtype(info["dtype"])
        if array.dtype != want:
            if not cast:
                raise DnnrError(f"error: input {name!r} is {array.dtype}{list(array.shape)}, "
                                f"the model takes {_describe(name, info)}\n"
                                f"  hint: convert it (numpy astype), or pass --cast / "
                                "run(..., cast=True) to convert it here")
            array = array.astype(want)
        shape = info["shape"]
        if shape is not None and (len(shape) != array.ndim or any(
                isinstance(d, int) and d != g for d, g in zip(shape, array.shape, strict=True))):
            raise DnnrError(f"error: input {name!r} has shape {list(array.shape)}, the model "
                            f"takes {_describe(name, info)}")
        checked[name] = array
    return checked


def _describe(name: str, info: Mapping[str, Any]) -> str:
    shape = "[?]" if info["shape"] is None else "[" + ", ".join(map(str, info["shape"])) + "]"
    return f"{name}: {info['dtype']}{shape}"


def load_artefact(out_dir: Path, device: str | None = None) -> CheckedModel:
    """Check ``out_dir`` against its manifest (`backends.artefact.check_artefact`) and
    load it with its backend's runner."""
    manifest = check_artefact(Path(out_dir))
    target = manifest.get("target")
    model: Any
    if target == "opencl":
        from egraph_compiler.backends import opencl

        model = opencl.load(out_dir, device=device)
    elif target == "hexagon":
        from egraph_compiler.backends import hexagon

        model = hexagon.load(out_dir)
    elif target == "onnx":
        model = OnnxModel(Path(out_dir) / "model.onnx")
    else:
        raise DnnrError(f"error: {out_dir}: unknown target {target!r} in its manifest")
    return CheckedModel(model, manifest, Path(out_dir))


def run_artefact(out_dir: Path, input_specs: Sequence[str], output_dir: Path,
                 device: str | None = None, cast: bool = False) -> dict[str, Path]:
    """Run the artefact and write each output to ``output_dir/<output name>.npy``."""
    inputs = parse_inputs(input_specs)
    model = load_artefact(out_dir, device=device)
    outputs = model.run(inputs, cast=cast)
    for done in getattr(model.model, "specialisations", ()):  # sizes decided by input values
        how = "from the cache" if done["cached"] else f"compiled in {done['seconds']:.2f} s"
        if "segment" in done:  # a segment sized by the data of a cut before it (`segmented`)
            print(f"segment of {done['segment']} nodes compiled for the sizes this run's data gave: "
                  f"{done['launches']} launches, {how}")
            continue
        print(f"specialised for {', '.join(f'{n}={v}' for n, v in done['values'].items())}: "
              f"{done['launches']} launches, {how}")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        return _save_outputs(outputs, output_dir)
    except OSError as error:
        raise DnnrError(f"error: cannot write the outputs to {output_dir}: "
                        f"{error.strerror or error}") from None


def _save_outputs(outputs: Mapping[str, np.ndarray], output_dir: Path) -> dict[str, Path]:
    written: dict[str, Path] = {}
    for name, array in outputs.items():
        path = output_dir / f"{_safe(name)}.npy"
        np.save(path, array)
        written[name] = path
        print(f"{name}: {array.dtype}{list(array.shape)} -> {path}")
    return written


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
