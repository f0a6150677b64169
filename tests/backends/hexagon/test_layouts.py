"""Layout agreement end to end: a GEMM that writes its 1×1 consumer's packed input."""

from __future__ import annotations

import re

from tests.modelzoo import conv_pointwise_block

from .conftest import needs_toolchain
from .test_models import _compare, _quantise, _static


@needs_toolchain
def test_producer_writing_packed_layout_matches_onnxruntime(tmp_path):
    """Conv 3×3 → Conv 1×1 (ragged: 9×7 pixels, 11 → 13 channels): the PBQP has the
    3×3 conv write the 1×1 conv's panels (no packing step in between); the result still
    matches onnxruntime's QDQ execution within one unit in the last place."""
    model = _static(conv_pointwise_block(channels=11, out_channels=13, seed=4), {"batch": 1, "height": 9, "width": 7})
    path = _quantise(model, tmp_path, seed=2)
    worst, equal = _compare(path, tmp_path, seed=3)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9
    report = (tmp_path / "artefact" / "report.txt").read_text()
    agreed = re.findall(r"-> (\w+)>(\w+) .*PBQP reductions", report)
    assert agreed, report
    # The consumer runs in the family whose panels the producer wrote.
    consumer_family = agreed[0][1]
    assert re.search(rf"gemm\s+-> {consumer_family}\s", report), report
