"""Data only: the fusion plan handed to `plan` and the backends."""

from __future__ import annotations

from dataclasses import dataclass

from egraph_compiler.fusion.index import Blocked
from egraph_compiler.fusion.layout import LayoutChoice
from egraph_compiler.ir.graph import Graph


@dataclass(frozen=True)
class Block:
    """One fusion block = one generated kernel.

    ``nodes`` are indices into ``graph.nodes`` (topological); ``mapping`` is the
    fused mapping type (Table 3.3 result); ``kind`` the kernel shape
    (pointwise/conv/matmul/pool/reduce/rownorm); ``store_maps`` gives, for every
    value the block writes, its index as C text over the iteration variables
    ``i0, i1, …`` (after strength reduction) — the index maps of the block."""

    id: int
    nodes: tuple[int, ...]
    ops: tuple[str, ...]
    mapping: str
    kind: str
    anchor: int | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    iteration_shape: tuple[int, ...]
    store_maps: tuple[tuple[str, str], ...] = ()
    # physical dimension order of the tensors it reads or writes that are not
    # stored row-major (`fusion.layout`): (value, perm)
    layouts: tuple[tuple[str, tuple[int, ...] | Blocked], ...] = ()  # Blocked: NCHWc
    # the anchor implementation the `select` stage chose (a backend's option label;
    # "": the backend picks, e.g. a block without a choice)
    implementation: str = ""
    # whether its constant inputs may be read as image2d_t (the `select` stage's choice;
    # None: the backend's own rule decides)
    images: bool | None = None
    # the units (`fusion.units`: rope, rmsnorm, layernorm) this block holds whole
    units: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    """Why a candidate was or was not fused (for the compile report).

    A yellow case (verdict ``profile``) also names its profile-database ``key`` and
    the ``edge`` it decided: (producer node, consumer node), the pair `dnnr tune`
    times fused and apart."""

    block: int
    candidate: str
    verdict: str
    reason: str
    key: str = ""
    edge: tuple[int, int] | None = None


@dataclass(frozen=True)
class FusionPlan:
    graph: Graph
    blocks: tuple[Block, ...]
    decisions: tuple[Decision, ...] = ()
    layouts: tuple[LayoutChoice, ...] = ()  # every intermediate a layout was chosen for

    @property
    def kernel_count(self) -> int:
        return len(self.blocks)

    @property
    def operator_count(self) -> int:
        return sum(len(b.nodes) for b in self.blocks)

    @property
    def unit_counts(self) -> dict[str, int]:
        """Units kept whole in one kernel, by kind."""
        counts: dict[str, int] = {}
        for block in self.blocks:
            for kind in block.units:
                counts[kind] = counts.get(kind, 0) + 1
        return counts

    @property
    def fusion_rate(self) -> float:
        """DNNFusion's fusion rate: original layer count / fused layer count."""
        return self.operator_count / max(self.kernel_count, 1)
