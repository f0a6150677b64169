"""Kernels on the device's non-quantised integer tensors: token ids and attention masks.

A text model's graph inputs are int64 token ids and an int64 attention mask. Hexagon's
device tensors are uint8 (quantised activations) or float32 (the scalar fallback); these
add two element types, chosen at the graph boundary: ``int32`` (an int64 input becomes
int32 on the host, refused there with the input's name if a value does not fit) and
``bool`` (one byte, 0 or 1, as ONNX stores it). Three kernels use them:

- `Take`: ONNX Gather at run-time indices (the embedding lookup): a row copy of whatever
  the data holds (the uint8 quantised table: Q(Gather(DQ(t), ids)) with the table's own
  parameters is exactly the gathered rows). Negative indices count from the end; an index
  out of range stops the program with exit code ``Take.fail_code``, which the runner
  reports with the node's name (ONNX makes it an error; a clamp would be a silent answer).
- `IntElementwise`: an elementwise operator over int32/bool/uint8 operands, written from
  its declared scalar semantics (``rules/operators.dnnr``: Equal ``a == b``, Not, And,
  Where ``select(c, x, y)``…) with ONNX broadcasting. Where over two quantised operands
  (each requantised or quantised to the output's parameters first) is this kernel too:
  Q(where(c, a, b)) = where(c, Q(a), Q(b)), element by element.
- Cast between the integer types (to bool: ``x != 0``) is an `IntElementwise` of
  the operator ``Cast``; its C is the conversion itself. So is IsNaN of a float32 tensor
  (``x != x``), and Where over float32 operands the quantiser left in float.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egraph_compiler import ops
from egraph_compiler.backends.hexagon.eltwise import _broadcast_index, _nested
from egraph_compiler.backends.hexagon.kernels import _c_array
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ops.evaluate import evaluate_node
from egraph_compiler.ops.scalar import Spelling, to_c

# device element type -> (C type, NumPy dtype, bytes)
ELEMENT_TYPES: dict[str, tuple[str, type, int]] = {
    "uint8": ("u8", np.uint8, 1), "bool": ("u8", np.uint8, 1), "int32": ("i32", np.int32, 4),
    "float32": ("float", np.float32, 4)}  # float32: Where's operands left in float by the quantiser
# the ONNX integer types an input may have to live on the device as int32 (int8/uint8 are quantised data)
INT32_INPUTS = ("int64", "int32", "int16", "uint16")
# the exit code of the first index check; each `Take` gets the next one
FIRST_FAIL_CODE = 64


def _integer_literal(value: float) -> str:
    if not float(value).is_integer():
        raise ValueError(f"no integer spelling for {value}")
    return str(int(value))


# Integer C: the declared semantics' comparisons and logic as C's own operators.
INTEGER_SPELLING = Spelling(functions={"abs": "({0} < 0 ? -{0} : {0})", "max": "({0} > {1} ? {0} : {1})",
                                       "min": "({0} < {1} ? {0} : {1})"},
                            literal=_integer_literal)


@dataclass(frozen=True, slots=True)
class Take:
    """``y[o, j, i] = x[o, wrap(ids[j]), i]``: ONNX Gather along an axis of ``axis_size``
    at ``count`` run-time int32 indices; ``inner`` elements of ``element_bytes`` per row."""

    outer: int
    axis_size: int
    inner: int
    count: int
    element_bytes: int
    fail_code: int  # the program's exit code when an index is out of range


def take_c(op: Take, prefix: str) -> tuple[str, str]:
    row = op.inner * op.element_bytes
    code = f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, const i32 *restrict ids, u8 *restrict out) {{
  for (int j = 0; j < {op.count}; j++) {{
    i32 k = ids[j];
    if (k < 0) k += {op.axis_size};
    if (k < 0 || k >= {op.axis_size}) dnnr_syscall3(93, {op.fail_code}, 0, 0);  /* exit: index out of range */
    for (int o = 0; o < {op.outer}; o++) {{
      const u8 *from = x + (o * {op.axis_size} + k) * {row};
      u8 *to = out + (o * {op.count} + j) * {row};
      for (int b = 0; b < {row}; b++) to[b] = from[b];
    }}
  }}
}}
"""
    return code, f"{prefix}((const u8 *){{x}}, (const i32 *){{ids}}, (u8 *){{y}});"


def take_reference(op: Take, data: np.ndarray, ids: np.ndarray) -> np.ndarray:
    rows = data.reshape(op.outer, op.axis_size, -1)
    index = np.asarray(ids, np.int64).reshape(-1)
    if np.any((index < -op.axis_size) | (index >= op.axis_size)):
        raise ModelError(f"hexagon backend: an index is out of range [-{op.axis_size}, {op.axis_size})")
    return rows[:, np.where(index < 0, index + op.axis_size, index)].reshape(-1)


@dataclass(frozen=True, slots=True)
class IntElementwise:
    """One elementwise ONNX operator (its declared scalar semantics) over device integers."""

    op: str
    attrs: tuple[tuple[str, object], ...]
    input_shapes: tuple[tuple[int, ...], ...]
    input_types: tuple[str, ...]  # `ELEMENT_TYPES` keys
    output_shape: tuple[int, ...]
    output_type: str


def scalar_expression(op: str, attrs: dict[str, object], operands: list[str], output_type: str) -> str:
    """C of ``op`` on integer operands: Cast is the conversion itself, every other operator
    its declared semantics; a clear error for an operator without integer semantics."""
    if op == "Cast":
        return f"({operands[0]} != 0)" if output_type == "bool" else operands[0]
    if op == "IsNaN":  # a builtin without a scalar expression: NaN is the value unequal to itself
        return f"({operands[0]} != {operands[0]})"
    info = ops.current().get(op)
    if info is None or info.semantics is None or not info.elementwise:
        raise ModelError(f"hexagon backend: {op} has no declared elementwise semantics to run on integers")
    values = {name: info.attr(attrs, name) for name in info.defaults}
    numbers = {k: float(v) for k, v in values.items() if isinstance(v, (int, float))}
    names = [p.name for p in info.decl.params]
    try:
        return to_c(info.semantics, dict(zip(names, operands, strict=False)), numbers, INTEGER_SPELLING)
    except (KeyError, ValueError) as error:
        raise ModelError(f"hexagon backend: {op} cannot be written on integers ({error})") from None


def int_elementwise_c(op: IntElementwise, prefix: str) -> tuple[str, str]:
    shape = op.output_shape or (1,)
    ctypes = [ELEMENT_TYPES[t][0] for t in op.input_types]
    out_ctype = ELEMENT_TYPES[op.output_type][0]
    params = ", ".join(f"const {c} *restrict x{i}" for i, c in enumerate(ctypes))
    reads = " ".join(f"{c} a{i} = x{i}[{_broadcast_index(s or (1,), shape)}];"
                     for i, (c, s) in enumerate(zip(ctypes, op.input_shapes, strict=True)))
    expression = scalar_expression(op.op, dict(op.attrs), [f"a{i}" for i in range(len(ctypes))], op.output_type)
    body = _nested(shape, f"{reads} out[{_broadcast_index(shape, shape)}] = ({out_ctype})({expression});")
    code = f"""
static void __attribute__((noinline)) {prefix}({params}, {out_ctype} *restrict out) {{
{body}}}
"""
    args = ", ".join(f"(const {c} *){{x{i}}}" for i, c in enumerate(ctypes))
    return code, f"{prefix}({args}, ({out_ctype} *){{y}});"


def int_elementwise_reference(op: IntElementwise, *inputs: np.ndarray) -> np.ndarray:
    """The registry's evaluator (`ops.evaluate`) on the operands as ONNX holds them."""
    values = [np.asarray(x).reshape(s).astype(bool if t == "bool" else ELEMENT_TYPES[t][1])
              for x, s, t in zip(inputs, op.input_shapes, op.input_types, strict=True)]
    if op.op == "Cast":
        result = values[0].astype(bool) if op.output_type == "bool" else values[0]
    else:
        (result,) = evaluate_node(op.op, op.attrs, values)
    return np.asarray(result).astype(ELEMENT_TYPES[op.output_type][1]).reshape(-1)


@dataclass(frozen=True, slots=True)
class Lookup:
    """``y[i] = table[x[i]]``: an elementwise operator between DequantizeLinear and
    QuantizeLinear, computed at compile time for each of the 256 input bytes (Tanh of
    BERT's pooler): exactly DQ → operator → Q as onnxruntime runs it, per byte."""

    size: int
    table: np.ndarray  # 256 results: uint8 (read by QuantizeLinear) or float32 (a float graph output)


def lookup_c(op: Lookup, prefix: str) -> tuple[str, str]:
    if op.table.dtype == np.float32:  # float literals that round-trip exactly
        values = ",".join(f"{float(v)!r}f" for v in op.table)
        array = f"static const float {prefix}_table[256] __attribute__((aligned(128))) = {{{values}}};\n"
        ctype = "float"
    else:
        array, ctype = _c_array(f"{prefix}_table", "u8", op.table.astype(np.int64)), "u8"
    code = array + f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, {ctype} *restrict out) {{
  for (int i = 0; i < {op.size}; i++) out[i] = {prefix}_table[x[i]];
}}
"""
    return code, f"{prefix}((const u8 *){{x}}, ({ctype} *){{y}});"
