"""NumPy evaluation of one operator for the stages above the importer: the constant
folder's (`ir.fold`, which the importer uses below the registry), else the operator's
declared scalar semantics — so an operator declared only in a rule file folds too.
`tests/ops/test_registry.py` checks the two agree wherever both know an operator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.fold import KNOWN_OPS
from egraph_compiler.ir.fold import evaluate_node as fold_node
from egraph_compiler.ops import scalar
from egraph_compiler.ops.registry import current


def evaluate_node(op: str, attrs: Mapping[str, object] | tuple, inputs: Sequence[np.ndarray | None],
                  num_outputs: int = 1) -> list[np.ndarray]:
    """Outputs of ``op`` on NumPy ``inputs`` (`ir.fold.evaluate_node`'s contract)."""
    info = current().get(op)
    if op in KNOWN_OPS or info is None or info.semantics is None:
        return fold_node(op, attrs, inputs, num_outputs)
    values = dict(attrs)
    env: dict[str, object] = {name: info.attr(values, name) for name in info.defaults}
    arrays = [np.asarray(x) for x in inputs if x is not None]
    env.update({p.name: a for p, a in zip(info.decl.params, arrays, strict=False)})
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(scalar.evaluate(info.semantics, env))
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
    except (ValueError, KeyError, TypeError) as error:
        raise ModelError(f"cannot evaluate {op} on constant inputs: {error}") from None
    dtype = arrays[0].dtype if out.dtype != bool else out.dtype
    return [np.broadcast_to(out, shape).astype(dtype)]
