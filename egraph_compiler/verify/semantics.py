"""What an operator means to the verifier, read from its `op` declaration.

``op Add(a, b) : ... = a + b`` is elementwise (broadcasting, scalar expression);
``= builtin transpose`` names a documented encoding in `builtin_ops.py`; neither
makes the operator opaque and every rule using it `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from egraph_compiler.dsl import ast


@dataclass(frozen=True)
class OpSemantics:
    decl: ast.OpDecl
    elementwise: ast.Expr | None  # the `= expr` scalar semantics
    builtin: Any  # a `builtin_ops.Builtin`, or None
    text: str  # everything verification depends on (for the cache key)

    @property
    def integer_only(self) -> bool:
        return bool(self.builtin is not None and self.builtin.integer_only)
