"""`benchmarks/gpu.py`'s table: issue #13's targets per row, and rows of several device
calls merged into one table of one card."""

import json
import math
from pathlib import Path

import pytest

from benchmarks.gpu import table_from_logs, table_lines, targets


def _row(model: str, batch: int, fused: float, unfused: float, **torch: float | str
         ) -> dict[str, object]:
    return {"model": model, "batch": batch, "fused_kernels_ms": fused, "fused_e2e_ms": fused + 0.1,
            "unfused_kernels_ms": unfused, "anchor_share": 0.5, "rel_err": math.nan,
            "top_kernels": [{"block": 3, "ops": "Conv+Relu", "variant": "conv-gemm 64x64",
                             "ms": 0.25, "fp32_pct": 31.5, "hbm_pct": 4.0}], **torch}


def test_targets_compare_fused_kernels_with_compile_graph_and_fusion_off() -> None:
    held = _row("resnet18", 8, 1.0, 1.2, eager=2.0, cuda_graph=0.5, compile=1.0)
    assert targets(held) == {"<= compile": True, "<= 2x graph": True, "<= fusion-off": True}
    missed = _row("gpt2_2", 8, 3.42, 3.40, eager=4.0, cuda_graph=1.7, compile=3.37)
    assert targets(missed) == {"<= compile": False, "<= 2x graph": False,
                               "<= fusion-off": False}
    # a torch step that failed or was not run is no verdict, neither held nor missed
    failed = _row("wav2vec2", 1, 1.0, 2.0, eager=2.0, compile_failed="RuntimeError: x")
    assert targets(failed) == {"<= compile": None, "<= 2x graph": None, "<= fusion-off": True}
    lines = table_lines([held, missed, failed], "card X")
    row = next(line for line in lines if line.startswith("| wav2vec2 (1)"))
    assert "failed (RuntimeError)" in row and row.endswith("| – | – | yes |")
    assert next(line for line in lines if line.startswith("| gpt2_2 (8)")).endswith(
        "| **no** | **no** | **no** |")
    # only the row that misses lists its longest kernels
    assert [line.split(" misses")[0] for line in lines if " misses " in line] == ["gpt2_2 (8)"]
    assert "31.5 % FP32" in lines[lines.index(next(x for x in lines if " misses " in x)) + 1]


def test_table_from_logs_takes_each_rows_latest_measurement_and_one_card(tmp_path: Path) -> None:
    first, second = tmp_path / "1.log", tmp_path / "2.log"
    card = "card: NVIDIA H200; FP32 peak 66.9 TFLOP/s"
    first.write_text("\n".join([card, "noise", json.dumps(_row("bert", 1, 0.5, 0.9, compile=0.4)),
                                json.dumps(_row("vit", 8, 0.7, 0.9, compile=0.8))]))
    second.write_text("\n".join([card, json.dumps(_row("bert", 1, 0.3, 0.9, compile=0.4))]))
    lines = table_from_logs([first, second])
    assert lines[0].startswith("NVIDIA H200, rows from 2 log(s)")
    bert = [line for line in lines if line.startswith("| bert (1)")]
    assert len(bert) == 1 and bert[0].startswith("| bert (1) | 0.30 |")
    assert any(line.startswith("| vit (8) | 0.70 |") for line in lines)
    other = tmp_path / "3.log"
    other.write_text("card: NVIDIA H100 80GB HBM3; FP32 peak 67 TFLOP/s\n")
    with pytest.raises(SystemExit, match="2 cards"):
        table_from_logs([first, other])
