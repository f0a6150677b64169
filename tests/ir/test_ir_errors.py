"""Bad models raise ModelError with a message that says what and where — never a traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from egraph_compiler.ir import Graph, ModelError, load_onnx
from egraph_compiler.shapes import infer_shapes
from tests.modelzoo import light_model


def _model(nodes: list[onnx.NodeProto], opset: int = 17, extra_opsets: tuple = ()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets])
    model.ir_version = 8
    return model


def test_truncated_file(tmp_path: Path) -> None:
    raw = light_model("squeezenet").SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        load_onnx(path)


@pytest.mark.parametrize("garbage", [b"\xff" * 64, b"GIF89a not a model", bytes(range(256))])
def test_garbage_bytes(garbage: bytes) -> None:
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        load_onnx(garbage)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="cannot read ONNX model"):
        load_onnx(tmp_path / "absent.onnx")


def test_custom_domain_op_is_named() -> None:
    node = helper.make_node("FancyGelu", ["x"], ["y"], name="act_3", domain="com.example")
    with pytest.raises(ModelError, match=r"node 'act_3' \(FancyGelu, opset \d+\) is in domain 'com.example'"):
        load_onnx(_model([node], extra_opsets=(helper.make_opsetid("com.example", 1),)))


def test_run_time_control_flow_is_named() -> None:
    """An If whose condition is computed at run time is refused by node, operator and opset."""
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "b", [],
                               [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])])
    positive = helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0)
    zero = helper.make_node("Constant", [], ["z"], value=helper.make_tensor("z", TensorProto.FLOAT, [], [0.0]))
    cond = helper.make_node("Greater", ["m", "z"], ["c"])
    node = helper.make_node("If", ["c"], ["y"], name="branchy", then_branch=branch, else_branch=branch)
    with pytest.raises(ModelError, match=r"node 'branchy' \(If, opset \d+\).*computed at run time"):
        load_onnx(_model([positive, zero, cond, node]))


def test_op_without_import_support_is_named() -> None:
    """ImageDecoder exists only from opset 20 and has no import rule to the opset-17 IR (it
    decodes JPEG/PNG bytes: excluded by design, rules/README.md "Operator coverage")."""
    node = helper.make_node("ImageDecoder", ["x"], ["y"], name="decode_0")
    with pytest.raises(ModelError, match=r"node 'decode_0' \(ImageDecoder, opset 20\).*no import support"):
        load_onnx(_model([node], opset=20))


def test_opset18_mish_is_imported() -> None:
    """Mish (opset 18) keeps its ONNX meaning in the IR and is written back at opset 18."""
    node = helper.make_node("Mish", ["x"], ["y"], name="mish_0")
    graph = load_onnx(_model([node], opset=18))
    assert [n.op for n in graph.nodes] == ["Mish"]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_opset20_gelu_is_imported(approximate: str) -> None:
    """Issue 17: the dynamo exporter's Gelu (opset 20) imports as dnnr's Gelu / GeluTanh."""
    node = helper.make_node("Gelu", ["x"], ["y"], name="gelu_0", approximate=approximate)
    graph = load_onnx(_model([node], opset=20))
    assert [n.op for n in graph.nodes] == ["Gelu" if approximate == "none" else "GeluTanh"]


def test_unsupported_opset() -> None:
    with pytest.raises(ModelError, match="opset 6 is not supported"):
        load_onnx(_model([helper.make_node("Relu", ["x"], ["y"])], opset=6))


def test_checker_failure_is_wrapped() -> None:
    node = helper.make_node("Add", ["x", "nowhere"], ["y"], name="bad_add")
    with pytest.raises(ModelError, match="not a valid ONNX model: .*nowhere"):
        load_onnx(_model([node]))


def test_folding_failure_names_the_node() -> None:
    shape = helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", TensorProto.INT64, [2], [5, 7]))
    data = helper.make_node("Constant", [], ["d"], value=helper.make_tensor("d", TensorProto.FLOAT, [6], np.zeros(6)))
    reshape = helper.make_node("Reshape", ["d", "s"], ["r"], name="bad_reshape")
    add = helper.make_node("Add", ["x", "r"], ["y"])
    with pytest.raises(ModelError, match=r"node 'bad_reshape' \(Reshape, opset 17\)"):
        load_onnx(_model([shape, data, reshape, add]))


_SEEDS = {name: light_model(name).SerializeToString() for name in ("bvlc_alexnet", "squeezenet")}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(_SEEDS)), st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 7)), max_size=6),
       st.one_of(st.none(), st.floats(0, 1)))
def test_mutated_light_models_give_a_graph_or_model_error(name: str, flips: list[tuple[float, int]], cut: float | None) -> None:
    raw = bytearray(_SEEDS[name])
    for where, bit in flips:
        raw[int(where * len(raw))] ^= 1 << bit
    if cut is not None:
        raw = raw[: int(cut * len(raw))]
    try:
        result = load_onnx(bytes(raw))
    except ModelError as error:
        assert str(error)
    else:
        assert isinstance(result, Graph)
        try:  # whatever the importer accepted, shape inference types or rejects cleanly
            infer_shapes(result)
        except ModelError as error:
            assert str(error)
