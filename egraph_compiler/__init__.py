"""dnnr: a declarative rule-engine compiler for deep neural networks.

The pipeline (see `egraph_compiler.pipeline.compile_model`) is one function per
stage: ir → shapes → egraph → extract → fusion → plan → backends.
``from egraph_compiler import compile`` is the Python API (`egraph_compiler.api`):
``compile(model, target="opencl", out_dir=..., bind=...).run(feeds)``. It is
imported on first use, so ``import egraph_compiler`` stays cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {"compile": "egraph_compiler.api", "CompiledModel": "egraph_compiler.backends.opencl"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'egraph_compiler' has no attribute {name!r}")


__all__ = ["CompiledModel", "__version__", "compile"]
