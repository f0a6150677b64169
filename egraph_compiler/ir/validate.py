"""Refuse at import what onnxruntime would refuse: type errors and graphs without outputs.

`onnx.checker.check_model` without ``full_check`` checks the protobuf's structure only;
a float MatMul with an int64 weight passed it, and dnnr then compiled (and the OpenCL
target even ran) a model onnxruntime rejects. ONNX type inference with its type checks
is the same check onnxruntime's loader makes, so its message is the one we print.
"""

from __future__ import annotations

import onnx

from egraph_compiler.ir.errors import ModelError

_PROTOBUF_LIMIT = 2**31 - 1


def check_types(model: onnx.ModelProto, where: str) -> None:
    """A `ModelError` with onnx's message when ``model`` has no outputs or its types
    do not check (ONNX type inference with type checks)."""
    if not model.graph.output:
        raise ModelError(f"not a valid ONNX model: {where}: the graph has no outputs")
    if model.ByteSize() > _PROTOBUF_LIMIT:  # protobuf cannot serialise it for the C++ inference
        return
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=False)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as error:
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]  # its first line
        raise ModelError(f"not a valid ONNX model: {where}: {detail}") from None
    except Exception:  # noqa: BLE001 - inference that cannot run (onnxruntime's quantiser
        # leaves value_info of type 0, which onnxruntime ignores) decides nothing
        return
