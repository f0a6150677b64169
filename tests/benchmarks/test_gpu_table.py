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


def test_memory_summary_bands_every_kernel_of_a_batch_beside_the_copy_of_its_size(
        tmp_path: Path) -> None:
    """Every memory-bound kernel of every row at a batch lands in its size band,
    weighted by time; the copy of the same sizes by the same clock sits beside it; a
    peer from another card is refused."""
    from benchmarks.gpu import memory_from_logs
    from benchmarks.gpu_peer import sizes_from

    def kernel(nbytes: int, ms: float) -> dict[str, object]:
        return {"ops": "LayerNormalization", "kind": "rownorm", "bytes": nbytes, "ms": ms}

    # at 1,000 GB/s: 2 MB in 0.004 ms = 50 %, 20 MB in 0.04 ms = 50 % and in 0.025 ms = 80 %
    convnext = {**_row("convnext_tiny", 8, 1.0, 1.2),
                "memory_kernels": [kernel(2_000_000, 0.004), kernel(20_000_000, 0.04)]}
    effnet = {**_row("efficientnet_b0", 8, 1.0, 1.2),
              "memory_kernels": [kernel(20_000_000, 0.025)]}
    small = {**_row("efficientnet_b0", 1, 1.0, 1.2), "memory_kernels": [kernel(30_000_000, 1.0)]}
    card = "card: NVIDIA H100 80GB HBM3; FP32 peak 66.9 TFLOP/s, memory peak 1000 GB/s (x)"
    log = tmp_path / "run.log"
    log.write_text("\n".join([card, *(json.dumps(r) for r in (convnext, effnet, small))]))
    # the copy: 2 MB and 20 MB moved in 0.0025 / 0.02 ms (80 / 100 %) by OpenCL events
    peer = tmp_path / "peer.log"
    peer.write_text("\n".join(
        ["peer (OpenCL copies at the kernels' sizes): NVIDIA H100 80GB HBM3, memory peak 1000",
         *(json.dumps({"copy_bytes": b, "clock": "opencl_cold", "s": s})
           for b, s in ((2_000_000, 2.5e-6), (20_000_000, 2e-5)))]))
    lines = memory_from_logs([log], [peer])
    b8 = lines[lines.index(next(x for x in lines if "batch 8, all of 2 models" in x)):]
    target = next(x for x in b8 if x.startswith("≥ 12 (target)")).split()
    # 40 MB over 0.065 ms: 61.5 %; the copies 40 MB over 0.04 ms: 100 %
    assert target[3:6] == ["2", "0.065", "61.5"] and target[11] == "100.0"
    assert "at 60 % or more: 1 kernels, 38 % of their time" in " ".join(target)
    band = next(x for x in b8 if x.startswith("1 MiB–4")).split()
    assert band[2:5] == ["1", "0.004", "50.0"] and band[10] == "80.0"
    assert next(x for x in b8 if x.startswith("4–12")).split()[1] == "0"
    # the batch-1 row is its own summary, not the batch-8 one's
    assert any("batch 1, all of 1 models (efficientnet_b0)" in x for x in lines)
    # the peer's sizes: batch 8 only, rounded up to whole 256-item float4 copies
    assert sizes_from([log]) == [2_007_040, 20_004_864]
    other = tmp_path / "other.log"
    other.write_text(peer.read_text().replace("H100 80GB HBM3", "H200"))
    with pytest.raises(SystemExit, match="2 cards"):
        memory_from_logs([log], [other])
