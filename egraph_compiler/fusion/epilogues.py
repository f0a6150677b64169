"""Where an elementwise operator next to a MatMul/Conv output is cheapest: in that
anchor's epilogue, or in another block (GPU class; `CostModel` flags).

**Two-output row kernels** (`stored_verdict`): a residual sum stored by the LayerNorm
that reads it. A pre-LN transformer (GPT-2, LLaMA) keeps its residual stream: ``h = h + f(LN(h))``,
so the sum feeds the next LayerNorm *and* the next residual Add. Listing 3.1's
constraint check kept the sum out of the LayerNorm's block ("a prologue value is
needed outside the block"): the sum was one kernel (or a GEMM's epilogue), stored,
and read again by the LayerNorm. `structure.stored_row_input` makes the anchor's own
input a legal second output of a row kernel (written where the kernel normalises
each element, read by the other consumers as any block output); this module decides
where the planner forms one:

- only for a backend whose row kernels store it (`CostModel.stored_row_inputs`; the
  CPU class keeps its plans);
- priced against the one alternative that moves fewer bytes: the sum taken into the
  epilogue of the anchor (MatMul, Conv) that produces one of its operands, still
  unformed. There the anchor reads the residual and writes the sum and the row kernel
  reads it (``bytes(sum)`` more); stored by the row kernel instead, the anchor writes
  its product and the row kernel reads it back (``2·bytes(product)`` more). Without
  such an anchor (the embedding's ``wte[ids] + wpe[pos]``) the two-output kernel
  saves a launch and a read of the sum outright.

**Broadcast consumers left to the anchor** (`left_to_anchor`): a pointwise block that
grows into an elementwise operator reading the full output of an unformed MatMul
through a smaller, broadcast operand (GPT-2's and BERT's first attention layer: the
mask chain, seeded first, took the score Add, so the score MatMul wrote 8·12·512²
floats and the mask kernel read them back: 0.079 ms on an H200, while the second
layer's MatMul took the Add into its epilogue and read the 8·512² mask). Fused into
the pointwise block the anchor's output is written and read (``2·bytes(output)``);
left to the anchor's epilogue the broadcast operand is (``2·bytes(operand)`` at most).
Only a saving of at least a launch's cost moves it: with BART's 4·128² scores at batch
1 (256 KB) moved, the model's kernels measured 0.48 → 0.52 ms (H200, one sample).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from egraph_compiler.fusion.profile_db import CostModel
from egraph_compiler.fusion.structure import BlockStructure
from egraph_compiler.fusion.tables import anchor_kind, role_of
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.shapes.symint import proved_equal

# the verdict when a backend does not store row inputs (Listing 3.1's constraint)
NOT_STORED = "a prologue value is needed outside the block"
# anchors whose epilogue can take a one-to-one residual Add instead
EPILOGUE_ANCHORS = ("matmul", "conv")


def stored_verdict(view: GraphView, cost: CostModel, shape: BlockStructure,
                   members: Collection[int], formed: Mapping[int, int]) -> str | None:
    """None where the block ``members`` (structure ``shape``) may store its row input,
    else the reason it may not. ``formed``: nodes already in a block (their block id)."""
    if not shape.stored:
        return None
    if not cost.stored_row_inputs:
        return NOT_STORED
    for value in shape.stored:
        producer = view.producer_index.get(value)
        epilogue = _epilogue_alternative(view, producer, members, formed) \
            if producer is not None else None
        if epilogue is None:
            continue
        operand, anchor = epilogue
        # equal sizes (proved): storing costs twice the bytes re-reading does
        stored_us = 2.0 * _bytes(view, operand) / cost.bytes_per_us
        epilogue_us = _bytes(view, value) / cost.bytes_per_us
        if stored_us > epilogue_us:
            return (f"cost model: the sum is cheaper in {view.nodes[anchor].op}'s epilogue "
                    f"({epilogue_us:.2f} µs re-read vs {stored_us:.2f} µs stored)")
    return None


def left_to_anchor(view: GraphView, cost: CostModel, candidate: int, via: str,
                   members: Collection[int], formed: Mapping[int, int]) -> str | None:
    """The reason a pointwise block (``members``) should not take ``candidate``, a
    successor it reaches through ``via``: the MatMul/Conv whose output ``candidate``
    also reads is cheaper with it as epilogue (module docstring); None: take it."""
    if not cost.anchor_epilogues_priced or role_of(view.nodes[candidate].op) != "elementwise":
        return None
    epilogue = _epilogue_alternative(view, candidate, members, formed)
    if epilogue is None:
        return None
    operand, anchor = epilogue
    fused_us = 2.0 * _bytes(view, operand) / cost.bytes_per_us
    left_us = 2.0 * _bytes(view, via) / cost.bytes_per_us
    if fused_us - left_us < cost.launch_us:  # small tensors: latency, not bytes, decides
        return None
    return (f"cost model: {view.nodes[anchor].op}'s epilogue reads the broadcast operand "
            f"({left_us:.2f} µs) instead of this block re-reading its output ({fused_us:.2f} µs)")


def _epilogue_alternative(view: GraphView, producer: int, members: Collection[int],
                          formed: Mapping[int, int]) -> tuple[str, int] | None:
    """(operand, anchor) when node ``producer`` reads, one-to-one, the output of an
    anchor outside ``members`` and not yet in a block, read by nothing else (through
    layout operators), that could fuse ``producer`` as its epilogue."""
    out = view.nodes[producer].outputs[0]
    for operand in view.data_inputs(view.nodes[producer]):
        source, single = view.producer_index.get(operand), _single_use(view, operand)
        while source is not None and role_of(view.nodes[source].op) == "layout" and \
                len(view.data_inputs(view.nodes[source])) == 1:  # Gemm, Reshape, Add
            value = view.data_inputs(view.nodes[source])[0]
            source, single = view.producer_index.get(value), single and _single_use(view, value)
        if source is None or source in members or source in formed or not single:
            continue
        if anchor_kind(view.nodes[source].op) in EPILOGUE_ANCHORS and \
                proved_equal(view.numel(operand), view.numel(out)):
            return operand, source
    return None


def _single_use(view: GraphView, value: str) -> bool:
    return value not in view.graph_outputs and len(view.consumer_indices.get(value, [])) == 1


def _bytes(view: GraphView, value: str) -> float:
    """``value``'s float32 bytes (a symbolic size at the shape being planned)."""
    return float(view.numel(value)) * 4
