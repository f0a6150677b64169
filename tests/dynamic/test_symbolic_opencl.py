"""Issue 15 items 3-4: one OpenCL artefact compiled without --bind runs every shape in
its --dim ranges (`backends/opencl/symbolic.py`); its sizes are expressions over the
dim names (`dimpoly`), its versions are dispatched on the dims at run time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from egraph_compiler import pipeline
from egraph_compiler.backends.opencl import dimpoly
from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.runner import load_artefact
from tests.corpus import build, check
from tests.dynamic.fixed_sizes import fixed_sizes_read

TOLERANCE = 1e-3  # of max |reference|, as tests/corpus/test_corpus_opencl.py
DIMS = ["batch", "seq"]
BOX = [(b, s) for b in range(1, 4) for s in range(1, 17)]


@pytest.mark.parametrize("truth", [
    lambda b, s: 24 * b * s + 3,
    lambda b, s: 2 * b * s * s,
    lambda b, s: 16 * b * -(-s // 4),  # tiles of 4 along seq
    lambda b, s: 8 * -(-(b * s) // 4),  # tiles of 4 along batch*seq rows
])
def test_fit_reproduces_every_point(truth) -> None:  # noqa: ANN001 - a lambda
    text = dimpoly.fit(DIMS, BOX, [truth(*p) for p in BOX])
    assert text is not None
    assert all(dimpoly.evaluate(text, dict(zip(DIMS, p, strict=True))) == truth(*p) for p in BOX)


def test_fit_refuses_what_no_expression_reproduces() -> None:
    values = [(b * 7919 + s * s * s * 104729) % 97 for b, s in BOX]  # no structure
    assert dimpoly.fit(DIMS, BOX, values) is None


@pytest.mark.parametrize("text", ["__import__('os')", "seq.real", "seq // 2", "lambda: 1"])
def test_evaluate_reads_only_size_expressions(text: str) -> None:
    with pytest.raises((ValueError, SyntaxError)):
        dimpoly.evaluate(text, {"seq": 4})


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[check.CorpusModel, Path, dict, pipeline.CompileResult]:
    corpus = build.build(["bert_sdpa"], log=lambda _: None)
    model = check.load(corpus, "bert_sdpa", "ts")
    result = pipeline.compile_model(model.path, dims={"batch": (1, 2), "seq": (1, 12)})
    out = tmp_path_factory.mktemp("bert_symbolic")
    pipeline.write_artefact(result, "opencl", out)  # no bindings: the symbolic path
    return model, out, result.report.target, result


def test_one_artefact_runs_stored_shapes_in_range(bert) -> None:  # noqa: ANN001
    model, out, _, _ = bert
    compiled = load_artefact(out)
    ran = 0
    for index, shape in enumerate(model.shapes):
        if shape["batch"] <= 2 and shape["seq"] <= 12:
            error = check.relative_error(compiled.run(model.feeds(index)), model.expected(index))
            assert error <= TOLERANCE, f"shape {shape}: relative error {error}"
            ran += 1
    assert ran == 2  # (1, 5) and (2, 9); (3, 16) is outside this test's ranges


@pytest.mark.parametrize("batch,seq", [(2, 7), (1, 12), (2, 1)])
def test_one_artefact_runs_unstored_shapes(bert, batch: int, seq: int) -> None:  # noqa: ANN001
    model, out, _, _ = bert
    rng = np.random.default_rng(batch * 100 + seq)
    feeds = {"input_ids": rng.integers(0, 50, (batch, seq)).astype(np.int64),
             "attention_mask": np.ones((batch, seq), np.int64)}
    feeds["attention_mask"][0, seq // 2:] = 0 if seq > 1 else 1
    session = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    expected = dict(zip(model.outputs, session.run(list(model.outputs), feeds), strict=True))
    got = load_artefact(out).run(feeds)
    assert check.relative_error(got, expected) <= TOLERANCE


def test_shape_outside_the_ranges_is_refused_by_name(bert) -> None:  # noqa: ANN001
    model, out, _, _ = bert
    feeds = model.feeds(2)  # batch 3, seq 16: both outside
    with pytest.raises(DnnrError, match=r"input 'input_ids' dim 0 \(batch\) is 3, outside the "
                                        r"compiled range batch=1\.\.2"):
        load_artefact(out).run(feeds)
    feeds = {name: array[:2] for name, array in feeds.items()}
    with pytest.raises(DnnrError, match=r"input 'input_ids' dim 1 \(seq\) is 16, outside the "
                                        r"compiled range seq=1\.\.12"):
        load_artefact(out).run(feeds)


def test_plan_holds_expressions_versions_and_peak_arena(bert) -> None:  # noqa: ANN001
    _, out, target, _ = bert
    plan = json.loads((out / "plan.json").read_text())
    assert plan["dims"] == {"batch": [1, 2], "seq": [1, 12]}
    covered = {(b, s) for box in plan["boxes"]
               for b in range(box["box"]["batch"][0], box["box"]["batch"][1] + 1)
               for s in range(box["box"]["seq"][0], box["box"]["seq"][1] + 1)}
    assert covered == {(b, s) for b in (1, 2) for s in range(1, 13)}
    sizes = [e for box in plan["boxes"] for launch in box["sizes"] for e in launch]
    assert any("seq" in e for e in sizes)  # batch splits versions here (rows thresholds)
    assert plan["arena_bytes"] == max(box["arena_bytes"] for box in plan["boxes"])
    dynamic = target["dynamic"]
    assert dynamic["arena_bytes_peak"] == plan["arena_bytes"]
    assert len(dynamic["versions"]) == len(plan["versions"]) > 1
    assert all(v["conditions"] for v in dynamic["versions"])
    # one compile per path of the backend (and one check per region), not per shape
    regions = dynamic["regions"]
    assert dynamic["shapes"] == 24
    assert regions["paths"] + regions["checked"] <= dynamic["shapes_compiled"] < 24
    assert regions["compiled_every_shape"] == 0
    assert sum(r["shapes"] for r in regions["conditions"]) == 24
    # the row-serial vs work-group-tree crossover is a condition of the dispatch
    # (`KernelParams.row_serial_min_rows`: 64 rows of 4*batch*seq)
    assert any(re.fullmatch(r"4\*batch\*seq (>=|<) 64", c)
               for r in regions["conditions"] for c in r["condition"])
    # sizes derived from the symbolic shapes (`shapes.symint`), fitted only where the
    # generator computed one outside them; memory plans over the dims, proved per box
    assert dynamic["expressions"]["derived"] > 20 * dynamic["expressions"]["fitted"]
    assert dynamic["memory_plan"]["boxes_over_the_dims"] > 0
    assert any(isinstance(o, str) and "seq" in o for box in plan["boxes"]
               for o in box["offsets"].values())


def test_divisions_by_sizes_are_magic_multiplications(bert) -> None:  # noqa: ANN001
    """Every ``/`` and ``%`` by a size argument became a multiply by the divisor's magic
    (`magicdiv`), whose two values each box passes after the sizes (the runs above
    check the numbers)."""
    _, out, target, _ = bert
    text = (out / "kernels.cl").read_text()
    bodies = [chunk.partition(") {\n")[2] for chunk in text.split("__kernel")[1:]]
    assert not [m.group(0) for b in bodies for m in re.finditer(r"[^/*][/%]=? *s\d+\b", b)]
    magic = target["dynamic"]["magic_division"]
    assert magic["sites"] > magic["divisors"] >= magic["kernels"] > 0
    plan = json.loads((out / "plan.json").read_text())
    assert any(e.startswith("magic_m(") for box in plan["boxes"] for launch in box["sizes"]
               for e in launch)


def test_bound_compile_matches_the_symbolic_artefact(bert, tmp_path: Path) -> None:  # noqa: ANN001
    model, out, _, result = bert  # the same e-graph result, bound to one shape
    pipeline.write_artefact(result, "opencl", tmp_path, bindings={"batch": 2, "seq": 9})
    bound = load_artefact(tmp_path).run(model.feeds(1))
    symbolic = load_artefact(out).run(model.feeds(1))
    for name in model.outputs:
        np.testing.assert_array_equal(bound[name], symbolic[name])


def test_cnn_with_dynamic_height_and_width(tmp_path: Path) -> None:
    """One MobileNetV2 artefact over batch, height and width (windows keep their bounds
    checks, `KernelParams.shape_stable`): the stored 1x3x32x32 shape and unstored ones."""
    corpus = build.build(["mobilenet_v2"], log=lambda _: None)
    model = check.load(corpus, "mobilenet_v2", "ts")
    ranges = {"batch": (1, 2), "height": (32, 40), "width": (32, 33)}
    result = pipeline.compile_model(model.path, dims=ranges)
    pipeline.write_artefact(result, "opencl", tmp_path, dim_steps={"height": 8})  # 32 and 40
    compiled = load_artefact(tmp_path)
    dynamic = result.report.target["dynamic"]
    assert dynamic["shapes"] == 8 and dynamic["shapes_compiled"] <= 8
    # the sizes one at every shape of a version (the global pool's loops over 1x1) are
    # literals, as in a bound compile: no loop over an argument
    fixed, read = fixed_sizes_read(json.loads((tmp_path / "plan.json").read_text()),
                                   (tmp_path / "kernels.cl").read_text())
    assert fixed and not read, read
    error = check.relative_error(compiled.run(model.feeds(0)), model.expected(0))
    assert error <= TOLERANCE
    session = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    with pytest.raises(DnnrError, match=r"input 'pixel_values' dim 2 \(height\) is 36, outside "
                                        r"the compiled range height=32\.\.40:8"):
        compiled.run({model.inputs[0]: np.zeros((1, 3, 36, 32), np.float32)})
    for shape in [(2, 3, 40, 33), (1, 3, 40, 32)]:
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        expected = dict(zip(model.outputs, session.run(list(model.outputs), {model.inputs[0]: x}),
                            strict=True))
        assert check.relative_error(compiled.run({model.inputs[0]: x}), expected) <= TOLERANCE


def test_gemv_and_tiled_versions_dispatched_on_the_dims(tmp_path: Path) -> None:
    """With the GPU cost model a matmul whose rows are batch*seq is a GEMV when that is
    1 and a tiled GEMM otherwise: two versions of one artefact, picked at run time."""
    corpus = build.build(["gpt2"], log=lambda _: None)
    model = check.load(corpus, "gpt2", "ts")
    result = pipeline.compile_model(model.path, dims={"batch": (1, 1), "seq": (1, 3)})
    pipeline.write_artefact(result, "opencl", tmp_path, kernel_device="gpu")
    versions = result.report.target["dynamic"]["versions"]
    gemv = [v for v in versions if any("gemv" in c for c in v["choices"])]
    assert [v["conditions"] for v in gemv] == [["batch == 1 and seq == 1"]]
    # the crossover solved by Z3 over the cost expressions, and the dispatch follows it
    solved = result.report.target["dynamic"]["crossovers"]["solved"]
    assert solved and all(s["dispatch_follows"] for s in solved)
    assert all(s["intervals"][0] == {"condition": "1 <= seq <= 1", "variant": s["intervals"][0]
                                     ["variant"]} and "gemv" in s["intervals"][0]["variant"]
               for s in solved)
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert any("tiled" in launch["variant"] for version in plan["versions"]
               for launch in version["launches"])
    session = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    compiled = load_artefact(tmp_path)
    for seq in (1, 3, 2):
        feeds = {"input_ids": np.arange(seq, dtype=np.int64).reshape(1, seq) + 3,
                 "attention_mask": np.ones((1, seq), np.int64)}
        expected = dict(zip(model.outputs, session.run(list(model.outputs), feeds), strict=True))
        assert check.relative_error(compiled.run(feeds), expected) <= TOLERANCE, seq
