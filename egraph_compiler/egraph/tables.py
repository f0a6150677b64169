"""Python-side tables that egglog rows point into: interned vectors and strings,
symbolic dims, constants and tensor attributes.

egglog sees small integer handles; Python keeps the values. Symbolic dims are
interned as negative ids starting at -2 (-1 stays free to mean "infer" inside a
Reshape target), so a shape is always an ``IVec``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from egraph_compiler.egraph import text
from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.ir.graph import TensorAttr

_ELEM = {"IV": "i64", "FV": "f64", "SV": "String"}


@dataclass
class Tables:
    """Interned values, shared by the loader, the rule oracles and extraction."""

    vectors: dict[str, dict[tuple, int]] = field(
        default_factory=lambda: {"IV": {}, "FV": {}, "SV": {}}
    )
    strings: dict[str, int] = field(default_factory=dict)
    dims: dict[DimExpr, int] = field(default_factory=dict)
    dim_of_id: dict[int, DimExpr] = field(default_factory=dict)
    constants: list[np.ndarray] = field(default_factory=list)
    constant_names: list[str] = field(default_factory=list)
    tensor_attrs: list[TensorAttr] = field(default_factory=list)
    lists: int = 0
    _pending: list[str] = field(default_factory=list)
    _by_fingerprint: dict[tuple, list[int]] = field(default_factory=dict)

    def list_id(self) -> int:
        """A fresh id for one cell of a variadic input list."""
        self.lists += 1
        return self.lists - 1

    # -- interning -------------------------------------------------------------
    def vector(self, table: str, items: tuple) -> int:
        ids = self.vectors[table]
        if items not in ids:
            ids[items] = len(ids)
            literal = text.vec(items, _ELEM[table])
            self._pending.append(f"(set ({table} {ids[items]}) {literal})")
        return ids[items]

    def string(self, value: str) -> int:
        if value not in self.strings:
            self.strings[value] = len(self.strings)
            self._pending.append(f"(set (STR {self.strings[value]}) {text.string(value)})")
        return self.strings[value]

    def dim_id(self, dim: Dim) -> int:
        if isinstance(dim, int):
            return dim
        if dim not in self.dims:
            new_id = -2 - len(self.dims)
            self.dims[dim] = new_id
            self.dim_of_id[new_id] = dim
        return self.dims[dim]

    def dim(self, value: int) -> Dim:
        """Inverse of `dim_id`; an unknown negative id stays an int (e.g. -1)."""
        return self.dim_of_id.get(value, value)

    def shape_ids(self, shape: tuple[Dim, ...]) -> tuple[int, ...]:
        return tuple(self.dim_id(d) for d in shape)

    def shape_of(self, ids: tuple) -> tuple[Dim, ...]:
        return tuple(self.dim(int(i)) for i in ids)

    def constant(self, name: str, array: np.ndarray) -> int:
        """Intern by content: equal constants (same dtype, shape and values) share one
        id, so nodes that apply the same op to the same constants share an e-class
        (common-subexpression elimination by hash-consing)."""
        key = _fingerprint(array)
        for index in self._by_fingerprint.get(key, ()):
            if np.array_equal(self.constants[index], array):
                return index
        self.constants.append(array)
        self.constant_names.append(name)
        self._by_fingerprint.setdefault(key, []).append(len(self.constants) - 1)
        return len(self.constants) - 1

    def tensor_attr(self, value: TensorAttr) -> int:
        self.tensor_attrs.append(value)
        return len(self.tensor_attrs) - 1

    def take_program(self) -> str:
        """egglog text defining everything interned since the last call."""
        program = "\n".join(self._pending)
        self._pending.clear()
        return program


def _fingerprint(array: np.ndarray) -> tuple:
    """A cheap bucket key: dtype, shape and a strided sample of the values."""
    flat = np.asarray(array).reshape(-1)
    sample = flat[:: max(1, flat.size // 64)][:64]
    return (str(array.dtype), tuple(array.shape), sample.tobytes())
