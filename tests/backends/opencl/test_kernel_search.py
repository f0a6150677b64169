"""`dnnr tune`'s kernel search (Chameleon beside random) and the tuning database's
``kernels`` section, which `dnnr compile --target opencl --profile-db` obeys."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.backends.opencl import KernelParams, compile_graph, cost
from egraph_compiler.backends.opencl.kernel_search import (
    anchors,
    chameleon_search,
    option_to_json,
    random_search,
    record,
    search_model,
)
from egraph_compiler.backends.opencl.runtime import CompiledModel
from egraph_compiler.cli import main
from egraph_compiler.fusion import ProfileDb
from tests.backends.opencl.helpers import static_graph

X = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["c", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 5])], [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def graph():  # noqa: ANN201 - a Graph
    return static_graph(_model(), {"x": X})


def _launch(out: Path, key: str) -> dict:
    return next(la for la in json.loads((out / "plan.json").read_text())["launches"]
                if la["shape_key"] == key)


def test_tuned_option_changes_the_compiled_kernel_and_keeps_the_result(graph, tmp_path: Path) -> None:
    conv = next(a for a in anchors(graph, KernelParams(), tmp_path / "probe")
                if a.key.startswith("Conv"))
    other = next(o for o in conv.space if o.variant == "tiled")
    assert other.describe() != conv.default.describe()
    compile_graph(graph, tmp_path / "default")
    compile_graph(graph, tmp_path / "tuned", params=KernelParams(tuned=((conv.key, other),)))
    assert _launch(tmp_path / "default", conv.key)["variant"].split()[0] == conv.default.variant
    assert _launch(tmp_path / "tuned", conv.key)["variant"] == other.describe()
    expect = CompiledModel(tmp_path / "default").run({"x": X})["y"]
    got = CompiledModel(tmp_path / "tuned").run({"x": X})["y"]
    np.testing.assert_allclose(got, expect, rtol=1e-4, atol=1e-4)


def test_search_starts_at_the_default_and_records_no_worse(graph) -> None:
    name, results = search_model(graph, budget=3, params=KernelParams(), repeats=1)
    assert name and {r.key.split()[0] for r in results} == {"Conv", "MatMul"}
    db = record(ProfileDb(), name, results)
    for r in results:
        assert len(r.chameleon.times) == 3 == len(r.random.times)
        assert len(set(r.chameleon.options)) == 3 and len(set(r.random.options)) == 3
        assert r.chameleon.times[0] == r.default_us  # the cost model's choice comes first
        entry = db.kernels[name][r.key]
        assert entry["us"] <= entry["default_us"]
        assert entry["us"] == pytest.approx(min(r.chameleon.times + r.random.times), abs=1e-3)


def test_chameleon_follows_the_measurements_on_a_synthetic_space() -> None:
    """The surrogate corrects a wrong prior: the true optimum is the register block
    the prior ranks worst; Chameleon must find it well within random's budget."""
    space = tuple(cost.Option("direct", cost.Direct(a, b), float(a * b))
                  for a in (1, 2, 4, 8, 16, 32) for b in (1, 2, 4, 8, 16, 32))

    def measure(o: cost.Option) -> float:
        p = o.params
        assert isinstance(p, cost.Direct)
        return 1.0 + abs(np.log2(p.a) - 5) + abs(np.log2(p.b) - 4)

    cham = chameleon_search(space, space[0], measure, budget=12, seed=0)
    rand = [random_search(space, measure, 12, seed) for seed in range(5)]
    assert min(cham.times) == 1.0  # the optimum
    # random search's median best, reached with a third of its measurements or fewer
    reach = cham.reaches(float(np.median([min(r.times) for r in rand])))
    assert reach is not None and reach <= 12 // 3


def test_compile_reads_the_db_and_rejects_a_bad_option(tmp_path: Path, graph,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    matmul = next(a for a in anchors(graph, KernelParams(), tmp_path / "probe")
                  if a.key.startswith("MatMul"))
    pick = cost.Option("direct", cost.Direct(1, 2), 0.0)
    entry = {"option": option_to_json(pick), "us": 1.0, "default_us": 2.0, "measurements": 3}
    db = tmp_path / "db.json"
    ProfileDb(kernels={"some device": {matmul.key: entry}}).save(db)
    assert main(["compile", str(path), "--target", "opencl", "-o", str(tmp_path / "o"),
                 "--profile-db", str(db), "-q"]) == 0
    assert _launch(tmp_path / "o", matmul.key)["variant"] == "direct 1x2"
    entry["option"] = {"variant": "tiled", "bm": 3, "bn": 16, "bk": 8, "tm": 1, "tn": 1,
                       "contiguous": False, "slices": 1}
    ProfileDb(kernels={"some device": {matmul.key: entry}}).save(db)
    assert main(["compile", str(path), "--target", "opencl", "-o", str(tmp_path / "o2"),
                 "--profile-db", str(db), "-q"]) == 1
    assert "does not map its loads" in capsys.readouterr().err
