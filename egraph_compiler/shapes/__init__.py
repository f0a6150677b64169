"""The shapes stage: a `Graph` in, the same graph with every value typed out.

`infer_shapes(graph, symbols=, dynamism=)` runs SoD²'s RDP (`shapes.rdp`: the lattice,
forward and backward transfers per dynamism class, to a fixpoint); ``dynamism`` is
`declared_classes(rule_set.ops)`, the classes ``rules/operators.dnnr`` declares;
`rdp_census(graph, dynamism)` counts dims per lattice kind and ops per class (the report's).
`infer_node(op, attrs, input_types, ...)` types one node (for stages that build nodes
one at a time, such as the e-graph). `infer_shapes(graph, symbols=None) -> Graph` fills ``Graph.types`` (dtype and a shape
of ints and symbolic `DimExpr` dims), ``Graph.shape_values`` (SoD² RDP values of small
int tensors, e.g. ``Shape(x) = (batch, seq, 32)``) and ``Graph.symbols`` (ranges).
ONNX ``dim_param`` names are symbols with range ``[1, 2**31-1]`` unless ``symbols``
overrides them. `prove_eq`, `prove_le`, `prove_divisible` decide dim facts (canonical
form, then Z3 over the ranges, cached); they answer True only when proved. `decide(op, a, b)`
answers a comparison as proved / refuted / None under the ranges `using_ranges` activates:
the e-graph's guards call it, so a guard holds only when its dim fact is proved.
`dim_ranges(graph, {"seq": (1, 512)})` validates ``--dim`` ranges and fills the defaults.
`bind_symbols(graph, {"batch": 2})` specialises symbolic input dims for static targets.

For terms no model vouches for (those e-graph rewrites build), `infer_term_shape(op,
attrs, input_shapes, values=)` and `broadcast_shape(shapes)` answer None where the rules
cannot tell without assuming validity. What a caller needs to know about the rules:
`rule_for(op, info)` (the op's rule, None without one), `value_inputs(op, info)` (the inputs
whose int value the output shape is computed from).
"""

from egraph_compiler.shapes.infer import (
    bind_symbols,
    broadcast_shape,
    dim_ranges,
    infer_node,
    infer_shapes,
    infer_term_shape,
)
from egraph_compiler.shapes.prover import (
    decide,
    prove_divisible,
    prove_eq,
    prove_le,
    prove_lt,
    prove_ne,
    using_ranges,
)
from egraph_compiler.shapes.rdp import census as rdp_census
from egraph_compiler.shapes.rdp import declared_classes
from egraph_compiler.shapes.rules import rule_for, value_inputs

__all__ = [
    "bind_symbols", "broadcast_shape", "rule_for", "value_inputs",
    "declared_classes", "dim_ranges", "rdp_census", "decide", "prove_ne", "using_ranges",
    "infer_node", "infer_shapes", "infer_term_shape", "prove_divisible", "prove_eq", "prove_le", "prove_lt",
]
