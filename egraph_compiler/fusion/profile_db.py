"""Yellow cells of Table 3.3: a profile database, with a cost model behind it.

The database is versioned JSON written by ``dnnr tune`` (see
`egraph_compiler.backends.opencl.tune`)::

    {"version": 1, "device": "...",
     "entries": {"Transpose>MatMul@s16": {"fused_us": 12.0, "separate_us": 30.5}}}

A key names the candidate operator, the block's anchor operator (or the block's
last operator) and the *shape class* of the intermediate result: ``s`` + floor
log2 of its element count. Missing keys fall back to `CostModel`.

``kernels`` (optional) holds `dnnr tune`'s kernel-parameter search, keyed by the
OpenCL device's name, then by anchor shape class (`opencl.cost.shape_key`)::

    "kernels": {"cpu-haswell-...": {"Conv m16 n64 k72 b1": {"option": {"variant":
        "direct", "a": 8, "b": 4}, "us": 10.2, "default_us": 12.9, "measurements": 16}}}

`dnnr compile --target opencl --profile-db FILE` generates each matching anchor
with the stored option (`opencl.kernel_search.tuned_options` reads it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from egraph_compiler.ir.errors import DnnrError

if TYPE_CHECKING:
    from egraph_compiler.fusion.view import GraphView

PROFILE_DB_VERSION = 1


class ProfileDbError(DnnrError):
    pass


def shape_class(numel: int) -> str:
    return f"s{int(math.log2(max(numel, 1)))}"


def profile_key(candidate_op: str, block_op: str, numel: int) -> str:
    return f"{candidate_op}>{block_op}@{shape_class(numel)}"


@dataclass(frozen=True)
class ProfileDb:
    entries: dict[str, dict[str, float]] = field(default_factory=dict)
    device: str = ""
    kernels: dict[str, dict[str, dict[str, object]]] = field(default_factory=dict)

    @staticmethod
    def load(path: str | Path) -> ProfileDb:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ProfileDbError(f"cannot read profile database {path}: {error}") from None
        if data.get("version") != PROFILE_DB_VERSION:
            raise ProfileDbError(f"profile database {path} has version {data.get('version')}, "
                                 f"this dnnr reads version {PROFILE_DB_VERSION}; re-run dnnr tune")
        kernels = data.get("kernels", {})
        if not isinstance(kernels, dict) or not all(isinstance(v, dict) for v in kernels.values()):
            raise ProfileDbError(f"profile database {path}: 'kernels' must map device names "
                                 f"to shape classes")
        return ProfileDb(dict(data.get("entries", {})), str(data.get("device", "")), kernels)

    def save(self, path: str | Path) -> None:
        data = {"version": PROFILE_DB_VERSION, "device": self.device,
                "entries": dict(sorted(self.entries.items()))}
        if self.kernels:
            data["kernels"] = {d: dict(sorted(c.items())) for d, c in sorted(self.kernels.items())}
        Path(path).write_text(json.dumps(data, indent=1) + "\n")

    def lookup(self, key: str) -> bool | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        return entry["fused_us"] <= entry["separate_us"]


@dataclass(frozen=True)
class CostModel:
    """Analytic latency of fusing one more operator into a block (microseconds).

    Separate: one more launch, and the intermediate written and read back once.
    Fused: the operator's work repeated ``reuse`` times (a prologue operand of a
    Conv/MatMul is re-read by every output tile that needs it).

    ``prologue_reuse(view, anchor)``, when a backend gives it, is how many times the
    kernel it will generate for ``anchor`` evaluates each element of a prologue (the
    option it picks decides: a tiled GEMM loads an element once per tap and row tile,
    a direct conv once per tap and channel tile); ``None`` from it falls back to the
    planner's estimate. A backend that gives it also has every prologue priced: fused
    only where this model (or the profile database) says fused beats the pair."""

    launch_us: float = 8.0
    bytes_per_us: float = 4000.0
    flops_per_us: float = 4000.0
    prologue_reuse: Callable[[GraphView, int], float | None] | None = None
    # operator evaluations per µs of a pointwise kernel re-evaluating a broadcast
    # operand per element (`fusion.recompute`); a backend that gives it has every such
    # step priced (None: Table 3.3's green verdict stands)
    recompute_evals_per_us: float | None = None
    # a backend whose row kernels store their input as a second output where it is
    # needed outside (`structure.stored_row_input`); False: such a block never forms
    stored_row_inputs: bool = False
    # whether a pointwise block leaves an elementwise successor to the MatMul/Conv
    # epilogue that moves fewer bytes (`fusion.epilogues.left_to_anchor`)
    anchor_epilogues_priced: bool = False
    # whether the planner also tries every Split as one Slice per piece (`fusion.splits`)
    split_as_slices: bool = False

    def fuse_is_profitable(self, intermediate_bytes: int, op_flops: float,
                           reuse: float) -> bool:
        separate = self.launch_us + 2.0 * intermediate_bytes / self.bytes_per_us
        fused = op_flops * max(reuse - 1.0, 0.0) / self.flops_per_us
        return fused <= separate

    def recompute_is_profitable(self, intermediate_bytes: int, extra_evaluations: int) -> bool:
        """A broadcast consumer fused into a pointwise block: the evaluations it adds
        (`fusion.recompute.broadcast_recompute`) against a launch and a round trip."""
        separate = self.launch_us + 2.0 * intermediate_bytes / self.bytes_per_us
        rate = self.recompute_evals_per_us or self.flops_per_us
        return extra_evaluations / rate <= separate
