"""The Python API: what ``dnnr compile`` followed by ``dnnr run`` does, in one call.

    from egraph_compiler import compile
    model = compile("model.onnx", target="opencl", out_dir="out", bind={"batch": 1})
    outputs = model.run({"x": x})  # {output name: np.ndarray}

`compile` runs the pipeline (`pipeline.compile_model`), writes the artefact with
`pipeline.write_artefact` (the same code as the CLI) and loads it with
`runner.load_artefact`, which checks the artefact against its manifest and returns a
`runner.CheckedModel` around an OpenCL `CompiledModel` (PoCL by default, or
``device``), the Hexagon runner (qemu) or, for ``target="onnx"``, onnxruntime on the
optimised ``model.onnx``. Its ``run`` refuses inputs whose name, dtype or shape
differ from the model's (``run(inputs, cast=True)`` converts dtypes instead).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from egraph_compiler import pipeline, runner
from egraph_compiler.backends.artefact import check_destination
from egraph_compiler.ir import DnnrError


class Runnable(Protocol):
    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


OnnxModel = runner.OnnxModel


def compile(model: str | Path | bytes | Any, target: str = "opencl",  # noqa: A001 - the API's name
            out_dir: str | Path | None = None, bind: Mapping[str, int] | None = None, *,
            rules: Sequence[str | Path] | None = None, profile_db: str | Path | None = None,
            device: str | None = None, fp: str = "reals",
            dims: Mapping[str, tuple[int, int]] | None = None) -> Runnable:
    """Compile ``model`` (a path, the bytes of an ONNX model, or an ``onnx.ModelProto``)
    for ``target`` into ``out_dir`` (a new temporary directory when None, kept so the
    artefact can be inspected) and load it; ``bind`` fixes symbolic input dims
    (``{"batch": 1}``), ``rules`` replaces the shipped rule library, ``profile_db`` is a
    `dnnr tune` database, ``device`` picks the OpenCL device by name, ``fp`` is the
    floating-point policy (``reals`` or ``strict``, `dsl.fp_policy`); ``dims`` the range of
    each symbolic dim (``{"seq": (1, 128)}``, as ``--dim``): an OpenCL artefact with dims
    left unbound runs every shape in their ranges (`backends.opencl.symbolic`)."""
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    if not isinstance(model, (str, Path, bytes)):
        raise DnnrError(f"error: compile() takes a path, ONNX bytes or an onnx.ModelProto, "
                        f"not {type(model).__name__}")
    if target not in pipeline.TARGETS:
        raise DnnrError(f"error: unknown target {target!r} (choose one of "
                        f"{', '.join(pipeline.TARGETS)})")
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="dnnr-"))
    check_destination(out)
    result = pipeline.compile_model(model, rule_paths=rules, target=target, fp=fp,
                                    dims=dict(dims or {}))
    pipeline.write_artefact(result, target, out, bindings=dict(bind or {}), profile_db=profile_db)
    loaded: Runnable = runner.load_artefact(out, device=device)
    return loaded
