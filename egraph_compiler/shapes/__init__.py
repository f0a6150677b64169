"""The shapes stage: a `Graph` in, the same graph with every value typed out.

`infer_node(op, attrs, input_types, ...)` types one node (for stages that build nodes
one at a time, such as the e-graph). `infer_shapes(graph, symbols=None) -> Graph` fills ``Graph.types`` (dtype and a shape
of ints and symbolic `DimExpr` dims), ``Graph.shape_values`` (SoD² RDP values of small
int tensors, e.g. ``Shape(x) = (batch, seq, 32)``) and ``Graph.symbols`` (ranges).
ONNX ``dim_param`` names are symbols with range ``[1, 2**31-1]`` unless ``symbols``
overrides them. `prove_eq`, `prove_le`, `prove_divisible` decide dim facts (canonical
form, then Z3 over the ranges); they answer True only when proved.
`bind_symbols(graph, {"batch": 2})` specialises symbolic input dims for static targets.
"""

from egraph_compiler.shapes.infer import bind_symbols, infer_node, infer_shapes
from egraph_compiler.shapes.prover import prove_divisible, prove_eq, prove_le, prove_lt

__all__ = ["bind_symbols", "infer_node", "infer_shapes", "prove_divisible", "prove_eq", "prove_le", "prove_lt"]
