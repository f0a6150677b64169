"""The IR stage: ONNX in, `Graph` out (and back).

- `load_onnx(path | bytes | ModelProto) -> Graph`: reads default-domain opset 7–21,
  converts to opset-17 meaning (constant axes/splits/slice bounds/pads/clip bounds
  as attributes), folds constant subgraphs into ``Graph.constants`` with the folder it
  is given (`ops.evaluate`; the IR knows no operator's semantics), removes
  Identity/Dropout; raises `ModelError` for anything it cannot read.
- `to_onnx(Graph) -> ModelProto`: opset 17, passes ``onnx.checker`` (full check).
- `check_graph(Graph)`: the IR verifier; raises `DnnrError` naming what is wrong.
"""

from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.ir.errors import DnnrError, LimitError, ModelError
from egraph_compiler.ir.graph import Graph, Node, Shape, TensorAttr, TensorType, Value
from egraph_compiler.ir.onnx_export import to_onnx
from egraph_compiler.ir.onnx_import import load_onnx
from egraph_compiler.ir.verify import GraphError, check_graph

__all__ = [
    "Dim", "DimExpr", "DnnrError", "Graph", "GraphError", "LimitError", "ModelError", "Node",
    "Shape", "TensorAttr", "TensorType", "Value", "check_graph", "load_onnx",
    "to_onnx",
]
