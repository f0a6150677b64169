"""Generated OpenCL checked in as golden files (STYLE 5).

On a mismatch the test prints a unified diff; re-bless with
``DNNR_BLESS=1 python -m pytest tests/backends/opencl/test_golden.py``.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from egraph_compiler.backends.opencl import compile_graph
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import BLOCKS, random_inputs

GOLDEN = Path(__file__).with_name("golden")
CASES = {
    # Swin window partition: Reshape/Transpose chains become index arithmetic (one kernel)
    "swin_window": {"batch": 1, "height": 8, "width": 8},
    # Conv 3×3 + BatchNorm + Relu: tiled, vectorised anchor with its epilogue
    "conv_bn_relu": {"batch": 2, "height": 7, "width": 7},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_kernels_match_golden(name: str, tmp_path: Path) -> None:
    model = BLOCKS[name]()
    compile_graph(static_graph(model, random_inputs(model, 0, dims=CASES[name])), tmp_path)
    actual = (tmp_path / "kernels.cl").read_text()
    golden = GOLDEN / f"{name}.cl"
    if os.environ.get("DNNR_BLESS") == "1":
        golden.write_text(actual)
    if not golden.exists():  # a missing golden file is a failure, never written silently
        pytest.fail(f"no golden file {golden}\n"
                    "bless with: DNNR_BLESS=1 python -m pytest tests/backends/opencl/test_golden.py")
    expected = golden.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            str(golden), "generated"))
        pytest.fail(f"generated OpenCL differs from {golden}:\n{diff}\n"
                    "bless with: DNNR_BLESS=1 python -m pytest tests/backends/opencl/test_golden.py")
