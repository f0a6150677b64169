"""The conv microbenchmark: ResNet-18's and ResNet-50's 3×3 convs at batch 8 (224² input),
stride 1 and 2, each with its bias and Relu in the store, every ``conv-gemm`` option
forced beside the options the GPU class picked before it, GFLOP/s against the card's peak.

    PYTHONPATH=. python3 benchmarks/gpu_conv.py prepare DIR [--options RE]  # one artefact per option
    python3 benchmarks/gpu_conv.py run DIR                     # on the GPU machine
    PYTHONPATH=. python3 benchmarks/gpu_conv.py fit LOG       # the cost model's picks vs a run log

Per shape: ``old`` (the GPU class's pick without ``conv-gemm``: ``KernelParams.conv_gemm``
off), ``model`` (its pick now), every ``conv-gemm`` option of `cost.CONV_GEMMS` and two
``sgemm`` tiles on the implicit GEMM of `gemm.conv_problem`. The weights travel as a
seed (`gpu._synthetic`) and are drawn and re-laid out again on the GPU machine with the
same bits, so every option's output is compared with ``old``'s (largest difference
relative to the largest value). Times: the median of ``--repeats`` runs, OpenCL
profiling events.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name: (input channels, output channels, input side, stride); batch 8, 3×3, pad 1
SHAPES: dict[str, tuple[int, int, int, int]] = {
    "r18_s2_64_128_56": (64, 128, 56, 2),
    "r18_s2_128_256_28": (128, 256, 28, 2),
    "r18_s2_256_512_14": (256, 512, 14, 2),
    "r50_s2_128_128_56": (128, 128, 56, 2),
    "r50_s2_256_256_28": (256, 256, 28, 2),
    "r50_s2_512_512_14": (512, 512, 14, 2),
    "s1_64_56": (64, 64, 56, 1),
    "s1_128_28": (128, 128, 28, 1),
    "s1_256_14": (256, 256, 14, 1),
    "s1_512_7": (512, 512, 7, 1),
}
BATCH = 8
WEIGHT_SEED = 11
# forced beside `cost.CONV_GEMMS` (candidates not priced yet): more K groups, longer K steps
EXTRA = ((128, 32, 16, 8, 4, 4), (128, 32, 16, 8, 4, 8), (64, 32, 16, 4, 4, 8),
         (64, 128, 16, 8, 8, 8), (128, 32, 32, 8, 4, 4),
         # for the 7² outputs (N = 392 at batch 8: 128 columns waste 23 %, 32 waste 6 %)
         (128, 32, 16, 8, 4, 12), (128, 32, 16, 8, 4, 16), (64, 64, 16, 8, 8, 12),
         (64, 64, 16, 8, 8, 16), (64, 128, 16, 8, 8, 16), (128, 64, 16, 8, 4, 16),
         (64, 32, 16, 4, 4, 16), (32, 64, 16, 4, 4, 8), (32, 64, 16, 4, 4, 16),
         # the 7² outputs again: 128 × 32 gives 52 tiles, so K groups 10 / 15 / 24 fill 132
         # SMs' rounds as evenly as 12 (ceil(52 g / 132) × ceil(144 / g) steps: 60), with
         # fewer (10) or more (15, 24) warps and partial sums; 9 / 18 divide K evenly.
         # H200 (ResNet-18's 256 -> 512, 10 repeats): 9 / 10 / 12 / 64 × 128 kg 8 all
         # 0.046-0.047 ms (29.5-30.0 %), a plateau; 10 priced put in ResNet-18 ran 0.048
         # (28.9 %) where 12 ran 0.046 (29.9 %) in the same call, so none is priced
         (128, 32, 16, 8, 4, 9), (128, 32, 16, 8, 4, 10), (128, 32, 16, 8, 4, 15),
         (128, 32, 16, 8, 4, 18), (128, 32, 16, 8, 4, 24), (64, 64, 16, 8, 8, 18),
         (128, 32, 32, 8, 4, 6), (128, 32, 32, 8, 4, 9), (64, 32, 16, 4, 4, 12),
         # session 12, ResNet-18's 7² outputs again: 8 × 8 blocks over 128 rows (A read by
         # fewer column tiles), 4 × 4 blocks over 256 work-items (twice the warps), 64 × 32
         # 8 × 4 over 64 (smaller work-groups, less barrier coupling), K steps of 32
         (128, 64, 16, 8, 8, 12), (128, 64, 16, 8, 8, 16), (128, 64, 32, 8, 8, 8),
         (128, 32, 32, 4, 4, 8), (128, 32, 32, 4, 4, 12), (64, 32, 16, 8, 4, 8),
         (64, 32, 16, 8, 4, 12), (128, 32, 32, 8, 4, 12), (64, 128, 16, 8, 8, 12))
# Tried and not kept (session 11): K groups summed by each C tile's last work-group to
# finish (a fence and an atomic counter per tile after the partials, no second launch,
# the same bits over 200 runs): on an H200 slower than the second launch on every K-group
# tile of the six stride-2 convs, by 2-27 µs, growing with the work-groups (ResNet-18's
# 256 -> 512: 0.062 against 0.048 ms at 128 × 32 with 12 groups; ResNet-18 b8 1.05 ->
# 1.07-1.08 ms, ResNet-50 3.04 -> 3.09 ms). Logs: .gpu/conv14/logs/{1,2}. Split per
# launch (logs/3, medians of 50): 128 × 32 with 12 groups is 0.0419 ms of conv (33.2 % of
# peak alone) + 0.0050 of sum launch (10 MB: at the H200's copy bound for that size).


def model(cin: int, cout: int, side: int, stride: int):  # noqa: ANN201 - onnx
    from onnx import TensorProto, helper, numpy_helper

    from benchmarks.gpu import _synthetic

    out = (side + 2 - 3) // stride + 1
    weights = _synthetic([cout, cin, 3, 3], "float32", WEIGHT_SEED)
    bias = _synthetic([cout], "float32", WEIGHT_SEED + 1)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W", "B"], ["c"], kernel_shape=[3, 3],
                          strides=[stride] * 2, pads=[1] * 4),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, cin, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, cout, out, out])],
        [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(bias, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _seed_weights(artefact: Path, shape: list[int]) -> None:
    """Replace the artefact's weights (and their re-laid-out or Winograd forms) by the
    seed they were drawn from and the recipe that derives them (`gpu._derive`)."""
    from benchmarks.gpu import _derive, _recipe, _synthetic

    source = _synthetic(shape, "float32", WEIGHT_SEED)
    weights = np.load(artefact / "weights.npz")
    names = json.loads((artefact / "weights.json").read_text())
    kept, refs = {}, {}
    for key in weights.files:
        name = names[int(key[1:])]
        recipe = _recipe(name)
        if name == "W":
            refs[key] = {}
        elif recipe is not None and recipe[0] == "W" and \
                np.array_equal(_derive(recipe[1], source), weights[key]):
            refs[key] = {"recipe": recipe[1]}
        elif name == f"W@2310p{shape[0]}k":  # conv-gemm's [KH·KW·Cin][Cout]
            refs[key] = {"recipe": "2310:0", "shape": list(weights[key].shape)}
            assert np.array_equal(_derive("2310:0", source).reshape(weights[key].shape), weights[key])
        else:
            kept[key] = weights[key]
    weights.close()
    np.savez(artefact / "weights.npz", **kept)
    (artefact / "weights.seed.json").write_text(json.dumps({"shape": shape, "refs": refs}))


def _unseed_weights(artefact: Path, into: Path) -> Path:
    import shutil

    from benchmarks.gpu import _derive, _synthetic

    shutil.copytree(artefact, into)
    seed = json.loads((artefact / "weights.seed.json").read_text())
    source = _synthetic(seed["shape"], "float32", WEIGHT_SEED)
    arrays = dict(np.load(artefact / "weights.npz"))
    for key, ref in seed["refs"].items():
        array = _derive(ref["recipe"], source) if ref else source
        arrays[key] = array.reshape(ref["shape"]) if "shape" in ref else array
    np.savez(into / "weights.npz", **arrays)
    return into


def prepare(out: Path, only: str | None, options: str | None = None) -> None:
    from egraph_compiler.backends.opencl import KernelParams, build, cost
    from egraph_compiler.backends.opencl.sgemm import Sgemm
    from egraph_compiler.fusion import plan_fusion
    from egraph_compiler.plan import plan_memory
    from tests.backends.opencl.helpers import static_graph

    params = KernelParams.for_device("gpu")
    for name, (cin, cout, side, stride) in SHAPES.items():
        if only and name not in only.split(","):
            continue
        onnx_model = model(cin, cout, side, stride)
        plan = plan_memory(plan_fusion(static_graph(
            onnx_model, {"x": np.zeros((BATCH, cin, side, side), np.float32)})))
        variants = {"old": replace(params, conv_gemm=False), "model": params}
        from egraph_compiler.backends.opencl.conv_gemm import ConvGemm

        extra = tuple(ConvGemm(Sgemm(*sizes)) for sizes in EXTRA
                      if ConvGemm(Sgemm(*sizes)) not in cost.CONV_GEMMS)
        for shape in (*cost.CONV_GEMMS, *extra):
            variants[shape.describe().replace(" ", "_")] = replace(
                params, anchor_variant="conv-gemm", anchor_conv_gemm=shape)
        for tile in (Sgemm(128, 64, 16, 8, 4), Sgemm(64, 64, 16, 4, 4)):
            variants[tile.describe().replace(" ", "_")] = replace(
                params, anchor_variant="sgemm", anchor_sgemm=tile)
        for label, chosen in variants.items():
            if label not in ("old", "model") and options and not re.search(options, label):
                continue
            target = out / name / label
            build(plan, target, chosen)
            _seed_weights(target, [cout, cin, 3, 3])
        out_side = (side + 2 - 3) // stride + 1
        (out / name / "meta.json").write_text(json.dumps(
            {"flops": 2 * BATCH * cout * out_side * out_side * cin * 9, "cin": cin}))
        print(name, flush=True)


def run(out: Path, device: str, repeats: int) -> None:
    from benchmarks.gpu_micro import summary, time_options

    card, peak_gflops, results = time_options(
        out, device, repeats, lambda artefact, tmp: _unseed_weights(artefact, tmp / "a"))
    summary(card, peak_gflops, results, "old (the GPU class's pick before conv-gemm) vs new "
            "(its pick now) vs the fastest forced option")


def fit(log: Path) -> None:
    """Replay the cost model's picks against a ``run`` log (no GPU needed): per shape its
    pick (``old``'s time where it keeps an earlier option) and the fastest forced option."""
    from benchmarks.gpu_micro import read_log, replay
    from egraph_compiler.backends.opencl import cost

    measured = read_log(log, SHAPES, r"conv-gemm_\S+|sgemm_\S+")
    picks = {}
    for name, (cin, cout, side, stride) in SHAPES.items():
        if name not in measured:
            continue
        out_side = (side + 2 - 3) // stride + 1
        n = BATCH * out_side * out_side
        pick = cost.choose(cost.options(cost.DEVICES["gpu"], cout, n, cin * 9, 1, n * cout // 64,
                                        True, None, window_taps=9, width=out_side,
                                        winograd=stride == 1, stride=stride, conv_gemm=True,
                                        epilogue_ops=1))
        picks[name] = pick.params.describe().replace(" ", "_") if pick.variant == "conv-gemm" else "old"
    replay(measured, picks, "the GPU class's pick before conv-gemm")


if __name__ == "__main__":
    from benchmarks.gpu_micro import main

    main(__doc__, prepare, run, fit, repeats=30)
