"""Option costs over symbolic dims: a dominating option is proved over the declared range,
or the block is a multi-version candidate; checked against every value of the range."""

from __future__ import annotations

import pytest

from egraph_compiler.backends.hexagon.select import FAMILIES, family_dominance, gemm_options
from egraph_compiler.ir.dims import DimExpr
from egraph_compiler.select.symbolic import dominance
from tests.backends.hexagon.conftest import needs_toolchain

S = DimExpr.symbol("S")
M = DimExpr.symbol("M")


@pytest.mark.parametrize("low, high, best", [(1, 20, None), (10, 20, 1), (1, 9, 0)])
def test_linear_costs(low: int, high: int, best: int | None) -> None:
    result = dominance("block", ["a", "b"], [S * 2, S + 10], {"S": (low, high)})
    assert result.best == best and result.multi_version == (best is None)
    if best is None:
        assert result.candidates == (0, 1) and "multi-version candidate" in result.reason


def _argmins(m: int, k: int, n: int) -> set[str]:
    costs = {o.family: o.cycles + o.pack for o in gemm_options(m, k, n) if o.writes == "nhwc"}
    low = min(costs.values())
    return {f for f, c in costs.items() if c == low}


@pytest.mark.parametrize("low, high", [(96, 128), (1, 32), (1, 300)])
def test_hexagon_gemm_family_over_a_symbolic_row_count(low: int, high: int) -> None:
    """The symbolic cost is the static cost model's (same function) at every M; the
    verdict agrees with evaluating each M of the range."""
    result = family_dominance("gemm", M, 64, 32, {"M": (low, high)})
    winners = [_argmins(m, 64, 32) for m in range(low, high + 1)]
    if result.best is not None:
        assert all(FAMILIES[result.best] in w for w in winners)
    else:
        assert not set.intersection(*winners)  # really no single best family
        assert set.union(*winners) <= {FAMILIES[i] for i in result.candidates}


def _symbolic_height_model(tmp_path, height: int):
    """A QDQ conv 3×3 → conv 1×1 block of width 1 whose height is symbolic again after
    quantising at ``height``: its GEMMs have ``height`` rows."""
    import onnx

    from tests.backends.hexagon.test_models import _quantise, _static
    from tests.modelzoo import conv_pointwise_block

    model = _static(conv_pointwise_block(channels=16, out_channels=8, seed=4),
                    {"batch": 1, "height": height, "width": 1})
    quantised = onnx.load(_quantise(model, tmp_path, seed=2))
    for value in [*quantised.graph.input, *quantised.graph.output]:
        value.type.tensor_type.shape.dim[2].dim_param = "height"
    onnx.save(quantised, tmp_path / "symbolic.onnx")
    return tmp_path / "symbolic.onnx"


@needs_toolchain
@pytest.mark.parametrize("low, high", [(1, 64), (20, 64)])
def test_hexagon_report_lists_multi_version_candidates(tmp_path, low: int, high: int) -> None:
    """`dnnr compile --target hexagon --dim height=LOW..HIGH`: every GEMM's family costs over
    the symbolic row count are compared with Z3; the verdict agrees with evaluating the
    static cost model at every height of the range, and the report lists the blocks that
    need several versions."""
    import json

    from egraph_compiler import pipeline

    path = _symbolic_height_model(tmp_path, 9)
    result = pipeline.compile_model(path, target="hexagon", dims={"height": (low, high)})
    pipeline.write_artefact(result, "hexagon", tmp_path / "out", bindings={"height": max(low, 9)})
    verdicts = json.loads((tmp_path / "out" / "report.json").read_text())["select"]["multi_version"]
    assert len(verdicts) == 2  # both GEMMs have a symbolic row count
    shapes = {"QConvInt_1": (16 * 9, 16), "QConvInt_2": (16, 8)}  # (k, n), m = height
    for verdict in verdicts:
        k, n = shapes[verdict["node"]]
        winners = [_argmins(h, k, n) for h in range(low, high + 1)]
        assert verdict["multi_version"] == (not set.intersection(*winners)), verdict
        if verdict["multi_version"]:
            assert set.union(*winners) <= {c.split(">")[0] for c in verdict["candidates"]}
        else:
            assert all(verdict["best"] in w for w in winners)
    assert any(v["multi_version"] for v in verdicts) == (low == 1)
    from egraph_compiler.report import render_report

    text = render_report(json.loads((tmp_path / "out" / "report.json").read_text()))
    assert ("multi-version candidates: QConvInt" in text) == (low == 1)


def _matmul_model(path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", 64])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


@pytest.mark.parametrize("low, high", [(1, 64), (2, 64)])
def test_opencl_report_lists_multi_version_candidates(tmp_path, low: int, high: int) -> None:
    """`dnnr compile --target opencl --dim seq=LOW..HIGH` for the GPU cost model: a
    [seq, 256] × [256, 64] MatMul's implementations are compared at every seq of the
    range; at seq = 1 the GEMV wins, so only a range that includes 1 needs two versions.
    The verdict agrees with `cost.options` evaluated directly at each seq."""
    import json

    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl import KernelParams, cost

    _matmul_model(tmp_path / "mm.onnx")
    result = pipeline.compile_model(tmp_path / "mm.onnx", target="opencl", dims={"seq": (low, high)})
    pipeline.write_artefact(result, "opencl", tmp_path / "out", bindings={"seq": 8}, kernel_device="gpu")
    (verdict,) = json.loads((tmp_path / "out" / "report.json").read_text())["select"]["multi_version"]
    params = KernelParams.for_device("gpu")
    winners = []
    for seq in range(low, high + 1):
        items = -(-seq // params.matmul_tile_m) * -(-64 // params.matmul_tile_n)
        options = cost.options(cost.DEVICES["gpu"], seq, 64, 256, 1, items, True, "m" if seq == 1 else None)
        winners.append(min(options, key=lambda o: o.estimate_us).describe())
    assert verdict["multi_version"] == (len(set(winners)) > 1) == (low == 1)
    if verdict["multi_version"]:
        assert set(winners) <= set(verdict["candidates"]) and "multi-version candidate" in verdict["reason"]
    else:
        assert {verdict["best"]} == set(winners)
