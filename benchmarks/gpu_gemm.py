"""The GEMM microbenchmark: dnnr's MatMul kernels on the shapes of BERT-base, GPT-2 and
ConvNeXt-T at batch 8 (GPT-2's attention with its prologues), every option in one run,
achieved GFLOP/s against the card's peak.

    PYTHONPATH=. python3 benchmarks/gpu_gemm.py prepare DIR    # here: one artefact per option
    python3 benchmarks/gpu_gemm.py run DIR                      # on the GPU machine
    PYTHONPATH=. python3 benchmarks/gpu_gemm.py fit LOG        # the cost model's picks vs a run log

Per shape: ``old`` (the cost model's pick among the ``tiled`` options, what the GPU class
ran before ``sgemm``), ``model`` (the cost model's pick now) and every ``sgemm`` option
forced. Operands are graph inputs (drawn on the GPU machine), so the directory is small;
the epilogue shapes fuse a bias and Gelu, or a bias and a residual Add, into the store.
Every option's output is compared with ``old``'s (largest difference relative to the
largest value). Times: the median of ``--repeats`` runs, OpenCL profiling events.
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

# name: (batch, m, n, k, epilogue ("", "gelu": bias + Gelu, "residual": bias + Add),
# B read through a Transpose (attention's K^T))
SHAPES: dict[str, tuple[int, int, int, int, str, bool]] = {
    "bert_qkv": (1, 4096, 2304, 768, "", False),
    "bert_attn_out": (1, 4096, 768, 768, "residual", False),
    "bert_ffn1_gelu": (1, 4096, 3072, 768, "gelu", False),
    "bert_ffn2": (1, 4096, 768, 3072, "residual", False),
    "bert_scores": (96, 512, 512, 64, "", True),
    "bert_context": (96, 512, 64, 512, "", False),
    "convnext_s1_fc1": (1, 25088, 384, 96, "gelu", False),
    "convnext_s1_fc2": (1, 25088, 96, 384, "", False),
    "convnext_s2_fc1": (1, 6272, 768, 192, "gelu", False),
    "convnext_s2_fc2": (1, 6272, 192, 768, "", False),
    "convnext_s3_fc1": (1, 1568, 1536, 384, "gelu", False),
    "convnext_s3_fc2": (1, 1568, 384, 1536, "", False),
    "convnext_s4_fc1": (1, 392, 3072, 768, "gelu", False),
    "convnext_s4_fc2": (1, 392, 768, 3072, "", False),
    # the small transformers of `benchmarks/gpu.py` (256 wide, sequence 128, 4 heads)
    "small_b1_qkv": (1, 128, 768, 256, "", False),
    "small_b1_ffn1": (1, 128, 1024, 256, "gelu", False),
    "small_b1_ffn2": (1, 128, 256, 1024, "residual", False),
    "small_b1_scores": (4, 128, 128, 64, "", True),
    "small_b8_ffn1": (1, 1024, 1024, 256, "gelu", False),
    "small_b8_ffn2": (1, 1024, 256, 1024, "residual", False),
    "small_b8_scores": (32, 128, 128, 64, "", True),
    # GPT-2's attention GEMMs at batch 8 × 512, with their prologues (`PROLOGUES`)
    "gpt2_scores_scaled": (96, 512, 512, 64, "", True),
    "gpt2_context_nan": (96, 512, 64, 512, "", False),
    # BERT-base / GPT-2 at batch 1 × 512: M = 512 (a third of a wave of 128 × 64 tiles
    # on the QKV GEMM, K groups on the rest), 12 heads
    "b1_qkv": (1, 512, 2304, 768, "", False),
    "b1_attn_out": (1, 512, 768, 768, "residual", False),
    "b1_ffn1_gelu": (1, 512, 3072, 768, "gelu", False),
    "b1_ffn2": (1, 512, 768, 3072, "residual", False),
    "b1_scores": (12, 512, 512, 64, "", True),
    "b1_context": (12, 512, 64, 512, "", False),
    "gpt2_b1_scores_scaled": (12, 512, 512, 64, "", True),
    "gpt2_b1_context_nan": (12, 512, 64, 512, "", False),
}
# an arithmetic prologue on one operand, as GPT-2's export has them: K^T times the
# attention scale; the probabilities' NaNs zeroed (IsNaN, Where) before the context GEMM
PROLOGUES = {"gpt2_scores_scaled": "scale_b", "gpt2_context_nan": "nan_a",
             "gpt2_b1_scores_scaled": "scale_b", "gpt2_b1_context_nan": "nan_a"}


def model(batch: int, m: int, n: int, k: int, epilogue: str, transposed: bool,  # noqa: ANN201 - onnx
          prologue: str = ""):
    from onnx import TensorProto, helper

    lead = [batch] if batch > 1 else []
    inputs = {"a": [*lead, m, k], "b": [*lead, n, k] if transposed else [*lead, k, n]}
    nodes = []
    a_name, b_name = "a", "b"
    if transposed:
        nodes.append(helper.make_node("Transpose", ["b"], ["bt"], perm=[0, 2, 1]))
        b_name = "bt"
    if prologue == "scale_b":
        inputs["scale"] = [1]
        nodes.append(helper.make_node("Mul", ["scale", b_name], ["bs"]))
        b_name = "bs"
    if prologue == "nan_a":
        inputs["zero"] = [1]
        nodes += [helper.make_node("IsNaN", ["a"], ["nan"]),
                  helper.make_node("Where", ["nan", "zero", "a"], ["az"])]
        a_name = "az"
    nodes.append(helper.make_node("MatMul", [a_name, b_name], ["mm" if epilogue else "y"]))
    if epilogue:
        inputs["bias"] = [n]
        nodes.append(helper.make_node("Add", ["mm", "bias"], ["z" if epilogue == "gelu" else "zb"]))
    if epilogue == "gelu":  # as torch exports it at opset 17: x · ½(1 + erf(x / √2))
        inputs["half"], inputs["one"], inputs["root2"] = [1], [1], [1]
        nodes += [helper.make_node("Div", ["z", "root2"], ["zd"]), helper.make_node("Erf", ["zd"], ["ze"]),
                  helper.make_node("Add", ["ze", "one"], ["zo"]), helper.make_node("Mul", ["z", "zo"], ["zm"]),
                  helper.make_node("Mul", ["zm", "half"], ["y"])]
    if epilogue == "residual":
        inputs["res"] = [*lead, m, n]
        nodes.append(helper.make_node("Add", ["zb", "res"], ["y"]))
    scalars = {"half": 0.5, "one": 1.0, "root2": 2.0 ** 0.5, "scale": 0.125, "zero": 0.0}
    constants = [helper.make_tensor(name, TensorProto.FLOAT, [1], [value])
                 for name, value in scalars.items() if name in inputs]
    graph = helper.make_graph(
        nodes, "gemm", [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
                        for name, shape in inputs.items() if name not in scalars],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*lead, m, n])], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def prepare(out: Path, only: str | None, options: str | None = None) -> None:
    from egraph_compiler.backends.opencl import KernelParams, build, cost
    from egraph_compiler.fusion import plan_fusion
    from egraph_compiler.plan import plan_memory
    from tests.backends.opencl.helpers import static_graph

    params = KernelParams.for_device("gpu")
    for name, (batch, m, n, k, epilogue, transposed) in SHAPES.items():
        if only and name not in only.split(","):
            continue
        onnx_model = model(batch, m, n, k, epilogue, transposed, PROLOGUES.get(name, ""))
        zeros = {i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32)
                 for i in onnx_model.graph.input}
        plan = plan_memory(plan_fusion(static_graph(onnx_model, zeros)))
        variants = {"old": replace(params, anchor_variant="tiled"), "model": params}
        for tile in cost.SGEMMS:
            variants[tile.describe().replace(" ", "_")] = replace(
                params, anchor_variant="sgemm", anchor_sgemm=tile)
        for label, chosen in variants.items():
            if label in ("old", "model") or not options or re.search(options, label):
                build(plan, out / name / label, chosen)
        (out / name / "meta.json").write_text(json.dumps({"flops": 2 * batch * m * n * k}))
        print(name, flush=True)


def run(out: Path, device: str, repeats: int) -> None:
    from benchmarks.gpu_micro import summary, time_options

    card, peak_gflops, results = time_options(out, device, repeats)
    summary(card, peak_gflops, results, "old (tiled, the model's pick) vs new (the model's pick "
            "with sgemm) vs the fastest sgemm")


# epilogue operators per shape's epilogue (`model`): bias + torch's Gelu; bias + residual
EPILOGUE_OPS = {"": 0, "gelu": 6, "residual": 2}


def fit(log: Path) -> None:
    """Replay the cost model's picks against a ``run`` log's measured times (the fit
    check of `cost._sgemm_options`): per shape, its pick (``old``'s time where it picks
    ``tiled``) and the fastest ``sgemm``; no GPU needed."""
    from benchmarks.gpu_micro import read_log, replay
    from egraph_compiler.backends.opencl import cost

    measured = read_log(log, SHAPES, r"sgemm_\S+")
    picks = {}
    for name, (batch, m, n, k, epilogue, _) in SHAPES.items():
        if name not in measured:
            continue
        pick = cost.choose(cost.options(cost.DEVICES["gpu"], m, n, k, batch, batch * m * n // 16,
                                        True, None, sgemm=True, epilogue_ops=EPILOGUE_OPS[epilogue]))
        picks[name] = pick.params.describe().replace(" ", "_") if pick.variant == "sgemm" else "old"
    replay(measured, picks, "tiled")


if __name__ == "__main__":
    from benchmarks.gpu_micro import main

    main(__doc__, prepare, run, fit, repeats=20)
