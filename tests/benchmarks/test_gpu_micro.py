"""`benchmarks/gpu_micro.py`: the micro-benchmarks' run logs read back for their ``fit``
replays, in the row format written now and in the earlier sessions' formats."""

from __future__ import annotations

from pathlib import Path

from benchmarks.gpu_micro import read_log, row

SHAPES = {"gpt2_b1_scores_scaled": (), "r50_s2_512_512_14": ()}
OPTIONS = r"conv-gemm_\S+|sgemm_\S+"


def test_read_log_takes_old_and_forced_options_and_skips_the_rest(tmp_path: Path) -> None:
    lines = [
        # written by `row`: a name that fills its column, old's variant longer than its own
        row("gpt2_b1_scores_scaled", "old", "tiled 32x32x16 per-item 4x4 vec split-k 2 k-groups 4",
            0.058, 10**9, 66900.0, 0.0),
        row("gpt2_b1_scores_scaled", "model", "sgemm 128x64x8 per-item 8x8", 0.019, 10**9, 66900.0, 0.0),
        row("gpt2_b1_scores_scaled", "sgemm_128x64x8_per-item_8x8", "", 0.021, 10**9, 66900.0, 1e-6),
        row("other_shape", "sgemm_64x64x16_per-item_4x4", "", 0.5, 10**9, 66900.0, 0.0),
        # earlier sessions' formats (gemm4's logs): a 21-character name with no space
        # after it, old without its variant; the conv log's old with its variant
        "gpt2_b1_scores_scaledsgemm_128x128x16_per-item_8x8              0.027     14674   21.9%   0.0e+00",
        "r50_s2_512_512_14   old: tiled 32x32x16 per-item 4x4 vec split-k 2 k-groups 4   0.110     16764"
        "   25.1%   0.0e+00",
        "r50_s2_512_512_14   conv-gemm_128x32x16_per-item_8x4_k-groups_12           0.073     25441   38.0%"
        "   6.5e-07",
        "r50_s2_512_512_14   conv-gemm_64x64x16_per-item_8x8 failed: clBuildProgram",
    ]
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + "\n")
    assert read_log(log, SHAPES, OPTIONS) == {
        "gpt2_b1_scores_scaled": {"old": 0.058, "sgemm_128x64x8_per-item_8x8": 0.021,
                                  "sgemm_128x128x16_per-item_8x8": 0.027},
        "r50_s2_512_512_14": {"old": 0.110, "conv-gemm_128x32x16_per-item_8x4_k-groups_12": 0.073},
    }
