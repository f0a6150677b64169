"""Outputs that must not change when the compiler is refactored (issue 11).

For each of the nine light models and the model-zoo blocks: the written ``model.onnx``
(its SHA-256), and the OpenCL artefact (``kernels.cl``'s SHA-256 and the kernel name of
every launch in ``plan.json``); for the quantised Hexagon models, the generated C's
SHA-256, the kernels ``main`` calls and the report (one line per operator). The expected digests are in
``tests/e2e/golden/outputs.json``; a mismatch names the case and the artefact that
changed. Re-bless (after checking the change is intended) with
``DNNR_BLESS=1 python -m pytest tests/e2e/test_golden_outputs.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import onnx
import pytest

from egraph_compiler import pipeline
from egraph_compiler.backends.hexagon import toolchain
from tests.modelzoo import BLOCKS, LIGHT_MODELS, light_model

GOLDEN = Path(__file__).with_name("golden") / "outputs.json"
BLESS = os.environ.get("DNNR_BLESS") == "1"
# Static dims for the OpenCL artefacts of the blocks (odd sizes: edge loops appear).
BLOCK_DIMS = {"batch": 2, "height": 7, "width": 7, "seq": 5}
HEXAGON_BLOCKS = ("residual", "depthwise_separable", "transformer_encoder")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _input_bindings(model: onnx.ModelProto, dims: dict[str, int]) -> dict[str, int]:
    names = {d.dim_param for v in model.graph.input for d in v.type.tensor_type.shape.dim if d.dim_param}
    return {k: v for k, v in dims.items() if k in names}


def _float_outputs(model: onnx.ModelProto, tmp: Path, dims: dict[str, int]) -> dict[str, object]:
    path = tmp / "model.onnx"
    path.write_bytes(model.SerializeToString())
    result = pipeline.compile_model(path)
    onnx_bytes = pipeline.ir.to_onnx(result.graph).SerializeToString()
    pipeline.write_artefact(result, "opencl", tmp / "cl", bindings=_input_bindings(model, dims))
    plan = json.loads((tmp / "cl" / "plan.json").read_text())
    return {"model.onnx": _sha(onnx_bytes),
            "kernels.cl": _sha((tmp / "cl" / "kernels.cl").read_bytes()),
            "launches": [launch["kernel"] for launch in plan["launches"]]}


def _hexagon_outputs(model: onnx.ModelProto, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    from tests.backends.hexagon.test_models import _quantise, _static

    path = _quantise(_static(model, {"batch": 1, "height": 9, "width": 7, "seq": 8}), tmp, seed=2)
    result = pipeline.compile_model(path, target="hexagon")
    monkeypatch.setattr(toolchain, "have_toolchain", lambda: False)  # the C is what we compare
    pipeline.write_artefact(result, "hexagon", tmp / "hx")
    source = (tmp / "hx" / "model.c").read_text()
    main = source[source.rindex("int main(void) {"):]
    calls = [c for c in re.findall(r"(\w+)\(", main)[1:] if c not in ("dnnr_read", "dnnr_write")]
    return {"model.onnx": _sha(pipeline.ir.to_onnx(result.graph).SerializeToString()),
            "model.c": _sha(source.encode()), "calls": calls,
            # solver seconds are the only run-dependent text of the report
            "report.txt": [re.sub(r", [0-9.]+ s$", "", line)
                           for line in (tmp / "hx" / "report.txt").read_text().splitlines()]}


CASES = [f"light/{n}" for n in LIGHT_MODELS] + [f"block/{n}" for n in sorted(BLOCKS)] + \
        [f"hexagon/{n}" for n in HEXAGON_BLOCKS]


def _outputs(case: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    kind, name = case.split("/")
    if kind == "light":
        return _float_outputs(light_model(name), tmp, {})  # static 224×224 inputs
    model = BLOCKS[name]()
    if kind == "block":
        model.graph.ClearField("value_info")
        return _float_outputs(model, tmp, BLOCK_DIMS)
    return _hexagon_outputs(model, tmp, monkeypatch)


@pytest.mark.parametrize("case", CASES)
def test_outputs_match_golden(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    actual = _outputs(case, tmp_path, monkeypatch)
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if BLESS:
        golden[case] = actual
        GOLDEN.write_text(json.dumps(dict(sorted(golden.items())), indent=1) + "\n")
        return
    if case not in golden:
        pytest.fail(f"no golden outputs for {case} in {GOLDEN}\n"
                    "bless with: DNNR_BLESS=1 python -m pytest tests/e2e/test_golden_outputs.py")
    changed = [key for key in golden[case] if golden[case][key] != actual.get(key)]
    assert not changed, (f"{case}: {', '.join(changed)} changed from {GOLDEN}\n"
                         "bless with: DNNR_BLESS=1 python -m pytest tests/e2e/test_golden_outputs.py")
