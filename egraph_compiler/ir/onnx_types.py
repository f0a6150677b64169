"""Conversions between ONNX protobuf pieces and the IR's plain data.

Element types are NumPy dtype names in the IR (``float32``, ``int64``, ``bool``);
ONNX uses `TensorProto` enum values. Attributes become the hashable values the
`Node` docstring lists. Shared by `onnx_import` and `onnx_export`.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import AttrValue, TensorAttr

# ONNX element types the IR can hold as NumPy arrays.
_ONNX_TO_DTYPE: dict[int, str] = {
    TensorProto.FLOAT: "float32",
    TensorProto.DOUBLE: "float64",
    TensorProto.FLOAT16: "float16",
    TensorProto.INT8: "int8",
    TensorProto.INT16: "int16",
    TensorProto.INT32: "int32",
    TensorProto.INT64: "int64",
    TensorProto.UINT8: "uint8",
    TensorProto.UINT16: "uint16",
    TensorProto.UINT32: "uint32",
    TensorProto.UINT64: "uint64",
    TensorProto.BOOL: "bool",
}
_DTYPE_TO_ONNX: dict[str, int] = {v: k for k, v in _ONNX_TO_DTYPE.items()}


def dtype_from_onnx(elem_type: int, where: str) -> str:
    """NumPy dtype name of an ONNX element type; `ModelError` if the IR cannot hold it."""
    if elem_type in _ONNX_TO_DTYPE:
        return _ONNX_TO_DTYPE[elem_type]
    try:
        name = TensorProto.DataType.Name(elem_type)
    except ValueError:
        name = str(elem_type)
    raise ModelError(f"{where}: element type {name} is not supported")


def dtype_to_onnx(dtype: str) -> int:
    if dtype not in _DTYPE_TO_ONNX:
        raise ModelError(f"dtype {dtype!r} has no ONNX element type in dnnr")
    return _DTYPE_TO_ONNX[dtype]


def tensor_to_numpy(tensor: TensorProto, where: str) -> np.ndarray:
    """Decode a TensorProto; external data must already be loaded."""
    dtype_from_onnx(tensor.data_type, where)
    if tensor.data_location == TensorProto.EXTERNAL:
        raise ModelError(f"{where}: tensor {tensor.name!r} uses external data that was not loaded")
    if tensor.HasField("raw_data") and tensor.data_type != TensorProto.BOOL:
        # Fast path: a read-only view on the raw bytes (big weights are not copied twice).
        dtype = np.dtype(_ONNX_TO_DTYPE[tensor.data_type]).newbyteorder("<")
        raw = tensor.raw_data
        count = int(np.prod(tensor.dims, dtype=np.int64)) if tensor.dims else 1
        if len(raw) != count * dtype.itemsize:
            raise ModelError(f"{where}: tensor {tensor.name!r} holds {len(raw)} bytes, expected {count * dtype.itemsize}")
        return np.frombuffer(raw, dtype=dtype).reshape(tuple(tensor.dims)).astype(dtype.newbyteorder("="), copy=False)
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as error:  # protobuf content is untrusted: any decode failure is the model's
        raise ModelError(f"{where}: tensor {tensor.name!r} cannot be decoded: {error}") from None
    return np.asarray(array)


def numpy_to_tensor(array: np.ndarray, name: str) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def attribute_value(attr: AttributeProto, where: str) -> AttrValue:
    """One ONNX attribute as an IR attribute value."""
    kind = attr.type
    if kind == AttributeProto.INT:
        return int(attr.i)
    if kind == AttributeProto.FLOAT:
        return float(attr.f)
    if kind == AttributeProto.STRING:
        return _decode(attr.s, where)
    if kind == AttributeProto.INTS:
        return tuple(int(v) for v in attr.ints)
    if kind == AttributeProto.FLOATS:
        return tuple(float(v) for v in attr.floats)
    if kind == AttributeProto.STRINGS:
        return tuple(_decode(s, where) for s in attr.strings)
    if kind == AttributeProto.TENSOR:
        return TensorAttr.from_numpy(tensor_to_numpy(attr.t, where))
    if kind in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        raise ModelError(f"{where}: attribute {attr.name!r} holds a subgraph; control flow is not supported")
    raise ModelError(f"{where}: attribute {attr.name!r} has unsupported type {kind}")


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelError(f"{where}: string attribute is not valid UTF-8") from None


def make_attribute(op: str, name: str, value: AttrValue) -> AttributeProto:
    """An ONNX attribute; empty lists take their type from the opset-17 schema."""
    if isinstance(value, TensorAttr):
        return helper.make_attribute(name, numpy_to_tensor(value.to_numpy(), ""))
    if isinstance(value, tuple) and not value:
        kind = AttributeProto.INTS
        try:
            kind = onnx.defs.get_schema(op, 17).attributes[name].type
        except Exception:  # unknown op or attribute: ints is the only list kind we emit empty
            pass
        return helper.make_attribute(name, [], attr_type=kind)
    if isinstance(value, bool):
        return helper.make_attribute(name, int(value))
    return helper.make_attribute(name, value)


def dims_from_onnx(type_proto: onnx.TypeProto, fresh: callable) -> tuple[Dim, ...] | None:
    """Shape of a tensor type: dim_param names become symbols, unknown dims fresh ones."""
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    dims: list[Dim] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param") and dim.dim_param:
            dims.append(DimExpr.symbol(dim.dim_param))
        else:
            dims.append(fresh())
    return tuple(dims)


def dims_to_onnx(shape: tuple[Dim, ...] | None) -> list[int | str] | None:
    if shape is None:
        return None
    return [d if isinstance(d, int) else str(d) for d in shape]
