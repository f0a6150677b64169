"""Which operators and node-test cases the conformance measures, and which are excluded.

The universe is every default-domain operator onnx defines at some opset 7–21
(`operators()`). A few families are excluded by design (`EXCLUDED`, documented in
rules/README.md "Operator coverage"); every other operator counts, supported or not.

A case written at an opset above 21 (onnx's node tests are regenerated at each new
opset, mostly to widen the accepted types) is measured at opset 21 when its model is a
valid opset-21 model there (`at_supported_opset`); onnxruntime then has to reproduce its
expected outputs at opset 21 too, or the case is the oracle's, not ours.
"""

from __future__ import annotations

import re
from functools import cache

import onnx
import onnx.defs

from tests.conformance.cases import NodeCase

MIN_OPSET, MAX_OPSET = 7, 21

# Excluded families, each with why (rules/README.md, "Operator coverage").
_SEQUENCES = "sequence and optional values: dnnr's IR holds tensors only"
_RANDOM = "random-number generators: not a function of their inputs, no reference output to match"
_TEXT = "string and text operators: dnnr's IR and backends hold numeric tensors only"
_TRAINING = "training losses: dnnr compiles inference graphs"
_MEDIA = "media decoding (JPEG/PNG bytes): not a tensor computation"


def _family(op: str, schema: onnx.defs.OpSchema) -> str | None:
    """The excluded family of ``op``, read from its schema where the schema says it."""
    formals = [*schema.inputs, *schema.outputs]
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}

    def types(formal: onnx.defs.OpSchema.FormalParameter) -> set[str]:
        return allowed.get(formal.type_str, {formal.type_str})

    if any(types(f) and all(t.startswith(("seq(", "optional(")) for t in types(f)) for f in formals):
        return _SEQUENCES
    if op.startswith(("Sequence", "Optional")):
        return _SEQUENCES
    if any(types(f) == {"tensor(string)"} for f in schema.inputs):
        return _TEXT
    if op.startswith("Random") or op in ("Multinomial", "Bernoulli"):
        return _RANDOM
    if op == "TfIdfVectorizer":  # n-gram counting over token ids or strings
        return _TEXT
    if op.endswith("Loss"):
        return _TRAINING
    if op == "ImageDecoder":
        return _MEDIA
    return None


@cache
def operators() -> dict[str, str | None]:
    """Every default-domain operator of opsets 7–21 -> its excluded family's reason (or None)."""
    found: dict[str, str | None] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx") or schema.name in found:
            continue
        try:
            latest = onnx.defs.get_schema(schema.name, MAX_OPSET, "")
        except Exception:  # introduced after opset 21
            continue
        versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history()
                    if s.name == schema.name and s.domain in ("", "ai.onnx")]
        removed_before = latest.deprecated and max(versions) < MIN_OPSET
        if removed_before:
            continue
        found[schema.name] = _family(schema.name, latest)
    return dict(sorted(found.items()))


def _snake(op: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op).lower()


def operator_of(case: NodeCase) -> str:
    """The operator a case tests: its one node's, else the operator its name starts with
    (``test_reduce_l1_..._expanded`` tests ReduceL1 through other operators)."""
    model = case.proto()
    if len(model.graph.node) == 1:
        return case.op
    name = case.name.removeprefix("test_")
    named = [op for op in operators() if name == _snake(op) or name.startswith(_snake(op) + "_")]
    return max(named, key=len) if named else case.op


def in_scope_ops() -> list[str]:
    return [op for op, why in operators().items() if why is None]


def at_supported_opset(case: NodeCase) -> onnx.ModelProto | None:
    """The case's model at its own opset when 7–21, else at opset 21 when it is a valid
    opset-21 model there (types and attributes included); None when it is not."""
    model = case.proto()
    if MIN_OPSET <= case.opset <= MAX_OPSET:
        return model
    if case.opset < MIN_OPSET:
        return None
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = MAX_OPSET
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return None
    return model
