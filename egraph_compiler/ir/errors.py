"""The one exception type every stage raises for bad input.

The CLI prints ``str(error)`` and exits non-zero; it never shows a traceback for
a `DnnrError`. Stages subclass it so tests can tell the kinds apart.
"""

from __future__ import annotations


class DnnrError(Exception):
    """A user-facing error: ``str()`` is the full, ready-to-print diagnostic."""

    exit_code = 1


class ModelError(DnnrError):
    """The ONNX model cannot be read or uses something dnnr does not support."""


class LimitError(DnnrError):
    """A budget (e-nodes, iterations, seconds) stopped a stage that may not stop early."""
