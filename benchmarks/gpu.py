"""dnnr on a GPU through OpenCL against PyTorch on the same GPU, same weights, same inputs.

Two steps, because the GPU machine has torch but not dnnr's compiler dependencies:

    PYTHONPATH=. python3 benchmarks/gpu.py prepare DIR      # here (CPU): export, compile
    python3 benchmarks/gpu.py run DIR --device NVIDIA       # there: time and compare
    python3 benchmarks/gpu.py table LOG [LOG ...]           # one table from several runs
    python3 benchmarks/gpu.py memory LOG [LOG ...] [--peer PEER_LOG ...]

``prepare`` builds each torchvision model with weights drawn by `seeded_weights` (NumPy,
seed 0 — the same function gives the same weights on both machines, whatever torch's own
initialisation does), exports it to ONNX at a static batch, compiles it with dnnr for the
``gpu`` device class (fused and fusion off) and stores the inputs. Identical weight
arrays are stored once in ``DIR/pool`` (artefacts of one model at two batches, fused
and not, share most of them), so the directory travels within a 64 MiB limit.

``run`` rebuilds each model in torch from the same weights and prints, per model and
batch: dnnr's kernels (sum of OpenCL profiling-event times), dnnr end to end (inputs
copied in, outputs copied out, wall clock), PyTorch eager, eager replayed from a CUDA
graph (its pure GPU work), torch.compile; the largest difference between dnnr's and
torch's outputs relative to torch's largest (`compare`: over the finite entries, the
non-finite ones counted apart) — with ``prepare --synthetic`` dnnr's weights are not
torch's, so the GPU's output is compared with the same artefact's run on PoCL at
prepare (same weights), and PoCL's with the real weights against torch there; then
each conv/matmul kernel's achieved GFLOP/s and GB/s against the card's FP32 and memory
peaks (from its clocks). Medians of ``--repeats`` runs after warm-up. The table marks
per row issue #13's targets (fused kernels ≤ torch.compile, ≤ 2× the CUDA graph, ≤
fusion-off) and lists the three longest fused kernels of every row that misses one;
``table`` rebuilds it from the JSON rows of several `run` logs (one device call cannot
time every model with torch.compile).

``run`` also records every memory-bound (no conv/matmul) fused kernel of a row: its
bytes and time. ``memory`` prints, from the logs of one card, issue #13's memory
measure per batch: all those kernels of every model, per size band, as % of the
memory peak time-weighted, beside a plain copy of the same sizes by the same clock
(``--peer``: `gpu_peer.py opencl|cuda --sizes-from` logs), then the kernels moving
12 MB or more one by one. NVIDIA H100 (3,352 GB/s), main's session-11 code, batch 8,
all 15 models: the 39 kernels moving 12 MB or more run at 66.3 % time-weighted (28 of
them, 73 % of their time, at 60 % or more; the CNNs' 14 at 67.7 %), a float4 copy of
the same sizes (L2-cold, OpenCL events) at 68.8 %; under 12 MB the event's fixed cost
rules (4–12 MB: 21.7 %, the copy 28.8 %; 1 MiB–4 MB: 8.7 %, the copy 15.1 %).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (torchvision constructor or a TRANSFORMERS name, batch sizes): the table,
# then the corpus's other architectures (tests/corpus/build.py) at GPU-sized widths, then
# the memory-bound benchmark models (BERT-base and GPT-2 width, two layers)
MODELS = {
    "resnet18": (1, 8),
    "efficientnet_b0": (1, 8),
    "mobilenet_v2": (1, 8),
    "mobilenet_v3_small": (1, 8),
    "bert": (1, 8),
    "gpt2": (1, 8),
    "resnet50": (1, 8),
    "convnext_tiny": (1, 8),
    "vit": (1, 8),
    "llama": (1, 8),
    "bart": (1, 8),
    "segformer": (1, 8),
    "wav2vec2": (1, 8),
    "bert_base2": (1, 8),
    "gpt2_2": (1, 8),
}
SIZE = 224
SEQ = 128
SAMPLES = 16000  # wav2vec2: one second of 16 kHz audio
# transformers models built from a config class (no hub): (config class, model class,
# config, inputs ("tokens", "tokens+decoder", "image", "audio"), output attribute,
# sequence length). The small ones are 256 wide, 4 layers, a 1024-token vocabulary;
# bert_base2 / gpt2_2 are the corpus's bench-set models (BERT-base / GPT-2 width, two
# layers) at sequence 512.
_SMALL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
          "intermediate_size": 1024}
TRANSFORMERS: dict[str, tuple[str, str, dict[str, Any], str, str, int]] = {
    "bert": ("BertConfig", "BertModel",
             {**_SMALL, "vocab_size": 1024, "max_position_embeddings": SEQ,
              "attn_implementation": "sdpa"}, "tokens", "last_hidden_state", SEQ),
    "gpt2": ("GPT2Config", "GPT2Model",
             {"vocab_size": 1024, "n_embd": 256, "n_layer": 4, "n_head": 4, "n_positions": SEQ,
              "use_cache": False}, "tokens", "last_hidden_state", SEQ),
    "llama": ("LlamaConfig", "LlamaModel",
              {**_SMALL, "vocab_size": 1024, "num_key_value_heads": 2,
               "max_position_embeddings": SEQ, "use_cache": False}, "tokens",
              "last_hidden_state", SEQ),
    "bart": ("BartConfig", "BartModel",
             {"vocab_size": 1024, "d_model": 256, "encoder_layers": 2, "decoder_layers": 2,
              "encoder_attention_heads": 4, "decoder_attention_heads": 4,
              "encoder_ffn_dim": 1024, "decoder_ffn_dim": 1024, "max_position_embeddings": SEQ,
              "use_cache": False}, "tokens+decoder", "last_hidden_state", SEQ),
    "vit": ("ViTConfig", "ViTModel",
            {**_SMALL, "image_size": SIZE, "patch_size": 16}, "image", "last_hidden_state", 0),
    "segformer": ("SegformerConfig", "SegformerForSemanticSegmentation", {}, "image",
                  "logits", 0),
    "wav2vec2": ("Wav2Vec2Config", "Wav2Vec2Model",
                 {**_SMALL, "conv_dim": (256,) * 7, "num_conv_pos_embeddings": 64,
                  "feat_extract_norm": "group", "do_stable_layer_norm": False}, "audio",
                 "last_hidden_state", 0),
    "bert_base2": ("BertConfig", "BertModel",
                   {"hidden_size": 768, "num_hidden_layers": 2, "num_attention_heads": 12,
                    "intermediate_size": 3072, "vocab_size": 30522,
                    "max_position_embeddings": 512, "attn_implementation": "sdpa"},
                   "tokens", "last_hidden_state", 512),
    "gpt2_2": ("GPT2Config", "GPT2Model",
               {"vocab_size": 50257, "n_embd": 768, "n_layer": 2, "n_head": 12,
                "n_positions": 1024, "use_cache": False}, "tokens", "last_hidden_state", 512),
}
# float constants of at least this many elements travel as a seed, not as values, with
# ``prepare --synthetic`` (timing does not depend on the values; see `_pool_weights`)
SYNTHETIC_MIN_ELEMENTS = 4096
# the longest fused kernels `run` records per row (the table lists them for rows that
# miss a target)
TOP_KERNELS = 3
# models whose fused artefact is also built with every anchor option forced in turn
# (`run` then prints, per conv/matmul, the fastest option beside the cost model's)
SWEEP: tuple[str, ...] = tuple(os.environ.get("DNNR_GPU_SWEEP", "").split(",")) if \
    os.environ.get("DNNR_GPU_SWEEP") else ()


def seeded_weights(model: Any, seed: int = 0) -> None:
    """Fill every parameter and buffer of ``model`` from NumPy's generator (sorted by
    name): He-scaled normal for conv/linear weights, uniform(0.5, 1.5) for norm scales
    and running variances, 0.1·N(0, 1) for biases and running means."""
    import torch

    rng = np.random.default_rng(seed)
    state = model.state_dict()
    for name in sorted(state):
        tensor = state[name]
        if not tensor.is_floating_point():
            continue
        shape = tuple(tensor.shape)
        if name.endswith("weight") and len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            values = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif name.endswith(("running_var", "weight")):
            values = rng.uniform(0.5, 1.5, shape)
        else:
            values = 0.1 * rng.standard_normal(shape)
        state[name] = torch.from_numpy(values.astype(np.float32))
    model.load_state_dict(state)


def _torchvision() -> Any:
    """torchvision, importable beside a CPU torch (its C++ ops are not needed to build
    models; see CORPUS.md): ``DNNR_TORCHVISION`` may name a --target install of it."""
    extra = os.environ.get("DNNR_TORCHVISION")
    if extra and extra not in sys.path:
        sys.path.insert(0, extra)
    import torch

    original = torch.library.register_fake

    def tolerant(*args: Any, **kwargs: Any) -> Any:
        decorate = original(*args, **kwargs)

        def apply(fn: Any) -> Any:
            try:
                return decorate(fn)
            except RuntimeError:
                return fn
        return apply

    torch.library.register_fake = tolerant
    try:
        import torchvision
    finally:
        torch.library.register_fake = original
    return torchvision


def build_model(name: str) -> Any:
    if name in TRANSFORMERS:
        import transformers

        config_class, model_class, config_args, *_ = TRANSFORMERS[name]
        config = getattr(transformers, config_class)(**config_args)
        model = getattr(transformers, model_class)(config)
    else:
        model = getattr(_torchvision().models, name)(weights=None)
    seeded_weights(model)
    return model.eval()


def model_inputs(name: str, batch: int) -> dict[str, np.ndarray]:
    """The inputs by ONNX name: an image ``x`` (torchvision), ``pixel_values``, audio
    ``input_values``, or token ids and an all-ones mask (and decoder ids)."""
    rng = np.random.default_rng(1)
    if name not in TRANSFORMERS:
        return {"x": rng.standard_normal((batch, 3, SIZE, SIZE)).astype(np.float32)}
    _, _, config, kind, _, seq = TRANSFORMERS[name]
    if kind == "image":
        return {"pixel_values": rng.standard_normal((batch, 3, SIZE, SIZE)).astype(np.float32)}
    if kind == "audio":
        return {"input_values": rng.standard_normal((batch, SAMPLES)).astype(np.float32)}
    vocab = int(config["vocab_size"])
    feeds = {"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64),
             "attention_mask": np.ones((batch, seq), np.int64)}
    if kind == "tokens+decoder":
        feeds["decoder_input_ids"] = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    return feeds


def _Exported(model: Any, name: str) -> Any:  # noqa: N802 - builds a torch module
    """``model`` taking its inputs positionally, in `model_inputs` order, returning one
    tensor (what the exporter traces)."""
    import torch

    class Exported(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, *args: Any) -> Any:
            return _torch_call(self.inner, name, dict(zip(model_inputs(name, 1), args,
                                                          strict=True)))

    return Exported().eval()


def _torch_call(model: Any, name: str, inputs: dict[str, Any]) -> Any:
    """The model's output as one tensor (transformers: the last hidden state, or the
    segmentation logits)."""
    if name in TRANSFORMERS:
        return getattr(model(**inputs), TRANSFORMERS[name][4])
    return model(inputs["x"])


def _flops_and_bytes(plan: Any) -> dict[int, dict[str, Any]]:
    """Per block: FLOPs of its conv/matmul anchor (2 per multiply-add) and the bytes of
    the tensors it reads and writes."""
    from egraph_compiler.fusion.view import GraphView

    view = GraphView(plan.fusion.graph)
    result = {}
    for block in plan.fusion.blocks:
        flops = 0
        for n in block.nodes:
            node = view.nodes[n]
            out = view.shape(node.outputs[0])
            if node.op == "Conv":
                w = view.shape(node.inputs[1])
                flops += 2 * int(np.prod(out)) * int(np.prod(w[1:]))
            elif node.op in ("MatMul", "Gemm"):
                a = view.shape(node.inputs[0])
                trans_a = node.op == "Gemm" and node.attr("transA", 0)
                flops += 2 * int(np.prod(out)) * (a[-2] if trans_a else a[-1])
        # a Gather reads the rows it picks, not its whole table (an embedding)
        gathered = {view.nodes[n].inputs[0]: view.nbytes(view.nodes[n].outputs[0])
                    for n in block.nodes if view.nodes[n].op == "Gather"}
        moved = sum(min(view.nbytes(v), gathered.get(v, view.nbytes(v)))
                    for v in (*block.inputs, *block.outputs))
        result[block.id] = {"flops": flops, "bytes": int(moved)}
    return result


def compare(out: np.ndarray, reference: np.ndarray) -> dict[str, float | int]:
    """``out`` against ``reference``: the largest difference over the entries finite in
    both, relative to the reference's largest finite magnitude (``rel_err``; 0 where
    nothing is finite), and the non-finite entries counted apart — in ``out``, in the
    reference, and where they disagree (one finite and the other not, or NaN vs inf,
    or infinities of opposite sign): a max over every entry is NaN as soon as either
    side has one NaN, which says nothing about the rest."""
    out = np.asarray(out, np.float64)
    reference = np.asarray(reference, np.float64)
    if out.shape != reference.shape:
        raise ValueError(f"output shape {out.shape} differs from the reference's {reference.shape}")
    finite_out, finite_ref = np.isfinite(out), np.isfinite(reference)
    both = finite_out & finite_ref
    scale = float(np.max(np.abs(reference[finite_ref]))) if finite_ref.any() else 0.0
    error = float(np.max(np.abs(out[both] - reference[both]))) if both.any() else 0.0
    same_special = (np.isnan(out) & np.isnan(reference)) | \
        (np.isinf(out) & np.isinf(reference) & (np.sign(out) == np.sign(reference)))
    return {"rel_err": error / max(scale, 1e-30),
            "nonfinite_out": int((~finite_out).sum()),
            "nonfinite_ref": int((~finite_ref).sum()),
            "nonfinite_mismatch": int((~both & ~same_special).sum())}


def _pocl_output(artefact: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The artefact's output run here on PoCL (the GPU class's kernels, this CPU)."""
    from egraph_compiler.backends.opencl.runtime import CompiledModel

    compiled = CompiledModel(artefact)
    try:
        return np.asarray(compiled.run(feeds)["y"])
    finally:
        del compiled


def _digest(array: np.ndarray) -> str:
    return hashlib.sha1(array.tobytes() + str(array.dtype).encode() +
                        str(array.shape).encode()).hexdigest()[:20]


def _derive(recipe: str, source: np.ndarray) -> np.ndarray:
    """A derived constant from its source constant, as the kernels made it: ``winograd``
    (`winograd.transform_weights`) or ``PERM:PAD`` (`kernels._Gen.relayout`)."""
    if recipe == "winograd":
        from egraph_compiler.backends.opencl.winograd import transform_weights

        return transform_weights(source)
    perm, pad = recipe.split(":")
    array = np.transpose(source, tuple(int(p) for p in perm))
    if int(pad) > array.shape[-1]:
        array = np.pad(array, [(0, 0)] * (array.ndim - 1) + [(0, int(pad) - array.shape[-1])])
    return np.ascontiguousarray(array)


def _recipe(key: str) -> tuple[str, str] | None:
    """(source constant, recipe) of a derived constant's name, else None."""
    from egraph_compiler.backends.opencl.winograd import DERIVED_SUFFIX

    if key.endswith(DERIVED_SUFFIX):
        return key[:-len(DERIVED_SUFFIX)], "winograd"
    head, _, tail = key.rpartition("@")
    if head and "p" in tail and tail.replace("p", "").isdigit():
        perm, pad = tail.split("p")
        return head, f"{perm}:{pad}"
    return None


def _synthetic(shape: list[int], dtype: str, seed: int) -> np.ndarray:
    """A stand-in weight array: 0.05·N(0, 1) from NumPy's generator with ``seed``."""
    draw = np.random.default_rng(seed).standard_normal(int(np.prod(shape, dtype=np.int64)))
    return (0.05 * draw).astype(dtype).reshape(shape)


def _pool_weights(artefact: Path, pool: Path, constants: dict[str, np.ndarray],
                  synthetic: bool = False) -> None:
    """Move the artefact's weight arrays into the shared pool (by content hash). A
    derived constant (re-laid-out, Winograd-transformed) whose source is among
    ``constants`` is stored as the source and a recipe, rebuilt on the GPU machine
    (Winograd weights are 16/9 the size of the 3×3 ones: resnet18's would not travel)
    — only where the rebuild gives the same bits here. With ``synthetic``, float arrays
    of `SYNTHETIC_MIN_ELEMENTS` or more travel as a shape and a seed and are redrawn
    there (ResNet-50's or BERT-base's weights exceed the 64 MiB a call carries); kernel
    times do not depend on the values, but dnnr's output then cannot be compared with
    torch's. Integer and small constants (shapes, indices, masks) always travel."""
    weights = np.load(artefact / "weights.npz")
    names = json.loads((artefact / "weights.json").read_text())  # key c{i}: names[i]
    refs: dict[str, Any] = {}
    for key in weights.files:
        array = np.ascontiguousarray(weights[key])
        if synthetic and array.dtype.kind == "f" and array.size >= SYNTHETIC_MIN_ELEMENTS:
            refs[key] = {"synthetic": list(array.shape), "dtype": str(array.dtype),
                         "seed": int(key[1:])}
            continue
        recipe = _recipe(names[int(key[1:])])
        if recipe is not None and recipe[0] in constants:
            source = np.ascontiguousarray(constants[recipe[0]])
            if np.array_equal(_derive(recipe[1], source), array):
                array, refs[key] = source, {"recipe": recipe[1]}
        digest = _digest(array)
        target = pool / f"{digest}.npy"
        if not target.exists():
            np.save(target, array)
        refs[key] = {**refs[key], "from": digest} if key in refs else digest
    weights.close()
    (artefact / "weights.npz").unlink()
    (artefact / "weights.refs.json").write_text(json.dumps(refs))


def _unpool_weights(artefact: Path, pool: Path, into: Path) -> Path:
    """A copy of the artefact with its weights.npz rebuilt from the pool."""
    shutil.copytree(artefact, into)
    refs = json.loads((artefact / "weights.refs.json").read_text())
    arrays = {}
    for key, ref in refs.items():
        if isinstance(ref, str):
            arrays[key] = np.load(pool / f"{ref}.npy")
        elif "synthetic" in ref:
            arrays[key] = _synthetic(ref["synthetic"], ref["dtype"], ref["seed"])
        else:
            arrays[key] = _derive(ref["recipe"], np.load(pool / f"{ref['from']}.npy"))
    np.savez(into / "weights.npz", **arrays)
    return into


def _forced_options() -> list[Any]:
    from egraph_compiler.backends.opencl import cost

    every = [cost.Option("direct", None, 0.0),
             *(cost.Option("tiled", tile, 0.0) for tile in cost.TILES),
             *(cost.Option("winograd", shape, 0.0) for shape in cost.WINOGRADS),
             *(cost.Option("depthwise", shape, 0.0) for shape in cost.DEPTHWISES),
             *(cost.Option("sgemm", shape, 0.0) for shape in cost.SGEMMS)]
    # DNNR_GPU_SWEEP_VARIANTS=tiled,winograd: only these variants (prepare time)
    wanted = os.environ.get("DNNR_GPU_SWEEP_VARIANTS")
    return [o for o in every if not wanted or o.variant in wanted.split(",")]


def _forced_params(params: Any, option: Any) -> Any:
    """``params`` forcing ``option`` on every anchor it applies to."""
    from egraph_compiler.backends.opencl.depthwise import Depthwise
    from egraph_compiler.backends.opencl.gemm import Tile
    from egraph_compiler.backends.opencl.sgemm import Sgemm
    from egraph_compiler.backends.opencl.winograd import Winograd

    return replace(params, anchor_variant=option.variant,
                   anchor_tile=option.params if isinstance(option.params, Tile) else None,
                   anchor_depthwise=option.params if isinstance(option.params, Depthwise)
                   else None,
                   anchor_winograd=option.params if isinstance(option.params, Winograd)
                   else None,
                   anchor_sgemm=option.params if isinstance(option.params, Sgemm) else None)


@contextlib.contextmanager
def _without_sgemm(active: bool) -> Any:
    """The GPU class's cost model without the ``sgemm`` option while ``active``: the
    baseline (``DNNR_GPU_BASELINE=1`` builds it as ``fused_base``, timed in the same run)."""
    from egraph_compiler.backends.opencl import cost

    model = cost.DEVICES["gpu"]
    if active:
        cost.DEVICES["gpu"] = replace(model, efficiency={k: v for k, v in model.efficiency.items()
                                                         if k != "sgemm"})
    try:
        yield
    finally:
        cost.DEVICES["gpu"] = model


# ``prepare --synthetic``: the fused artefact's output with the weights `run` draws,
# computed here on PoCL, which `run` compares the GPU's output with (same kernels, same
# weights): torch's output cannot be, its weights are the real ones
REFERENCE = "reference.npy"


def _pocl_reference(model: Any, name: str, inputs: dict[str, np.ndarray], target: Path,
                    label: str) -> dict[str, Any]:
    """The fused artefact on PoCL with the model's real weights (before they are pooled
    as seeds) against torch on this CPU: whether the GPU class's kernels compute the
    model (`run` then checks the GPU against PoCL on the synthetic weights)."""
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        expected = _torch_call(model, name, {k: torch.from_numpy(v) for k, v in inputs.items()})
    found = compare(_pocl_output(target / label, inputs), expected.float().numpy())
    print(f"{target.name}: fused on PoCL with the real weights vs torch (CPU): "
          f"{json.dumps(found)} ({time.perf_counter() - start:.0f} s)", flush=True)
    return found


def prepare(out: Path, only: str | None, synthetic: bool = False) -> None:
    import torch

    from egraph_compiler import pipeline
    from egraph_compiler.backends.opencl import KernelParams, build
    from egraph_compiler.backends.opencl.bench import _static_graph
    from egraph_compiler.backends.opencl.planning import execution_plan

    rules = pipeline.load_rules()
    pool = out / "pool"
    pool.mkdir(parents=True, exist_ok=True)
    params = KernelParams.for_device("gpu")
    for name, batches in MODELS.items():
        if only is not None and name not in only.split(","):
            continue
        model = build_model(name)
        for batch in batches:
            if os.environ.get("DNNR_GPU_BATCHES") and \
                    str(batch) not in os.environ["DNNR_GPU_BATCHES"].split(","):
                continue  # DNNR_GPU_BATCHES=8: only these batch sizes
            target = out / f"{name}_b{batch}"
            target.mkdir(parents=True, exist_ok=True)
            inputs = model_inputs(name, batch)
            if not synthetic:  # else `run` draws the same inputs again
                np.savez(target / "inputs.npz", **inputs)
            onnx_path = Path(tempfile.mkdtemp()) / "model.onnx"
            start = time.perf_counter()
            torch.onnx.export(_Exported(model, name),
                              tuple(torch.from_numpy(v) for v in inputs.values()),
                              str(onnx_path), dynamo=False, opset_version=17,
                              input_names=list(inputs), output_names=["y"])
            graph = _static_graph(onnx_path)
            optimised = pipeline.optimize(graph, rules)[0]
            meta: dict[str, Any] = {"model": name, "batch": batch, "operators": len(graph.nodes),
                                    "synthetic": synthetic}
            builds = [("fused", True), ("unfused", False)] + \
                ([("fused_base", True)] if os.environ.get("DNNR_GPU_BASELINE") == "1" else [])
            for label, fuse in builds:
                with _without_sgemm(label == "fused_base"):
                    plan, selection = execution_plan(optimised, rules, fuse=fuse, params=params)
                    artefact = build(plan, target / label, params, selection=selection)
                meta[label] = {"kernels": artefact.kernels, "blocks": {
                    str(k): v for k, v in _flops_and_bytes(plan).items()}}
                if label == "fused" and synthetic and os.environ.get("DNNR_GPU_NO_POCL") != "1":
                    meta["pocl"] = _pocl_reference(model, name, inputs, target, label)
                _pool_weights(target / label, pool, plan.fusion.graph.constants, synthetic)
                if "pocl" in meta and label == "fused":
                    with tempfile.TemporaryDirectory() as tmp:
                        np.save(target / REFERENCE, _pocl_output(
                            _unpool_weights(target / label, pool, Path(tmp) / label), inputs))
            if target.name in SWEEP:
                plan, selection = execution_plan(optimised, rules, params=params)
                for option in _forced_options():
                    label = f"sweep/{option.describe().replace(' ', '_')}"
                    build(plan, target / label, _forced_params(params, option),
                          selection=selection)
                    _pool_weights(target / label, pool, plan.fusion.graph.constants,
                                  synthetic)
            (target / "meta.json").write_text(json.dumps(meta))
            shutil.rmtree(onnx_path.parent)
            print(f"{target.name}: {meta['operators']} operators, kernels fused "
                  f"{meta['fused']['kernels']}, fusion off {meta['unfused']['kernels']} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)


# -- on the GPU machine ---------------------------------------------------------------

def _peaks() -> tuple[str, float, float]:
    """The card's name, FP32 peak (GFLOP/s: SMs × 128 lanes × 2 × max SM clock) and
    memory peak (GB/s: max memory clock × 2 (DDR) × bus width), from nvidia-smi."""
    import subprocess

    import torch

    if not torch.cuda.is_available():  # a dry run of the script on a CPU machine
        return "no CUDA device (PyTorch on the CPU)", float("nan"), float("nan")
    props = torch.cuda.get_device_properties(0)
    query = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm,clocks.max.mem",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           check=True).stdout.split("\n")[0].split(",")
    sm_mhz, mem_mhz = float(query[0]), float(query[1])
    bus_bits = getattr(props, "memory_bus_width", 5120)
    return (props.name, props.multi_processor_count * 128 * 2 * sm_mhz / 1e3,
            mem_mhz * 2 * bus_bits / 8 / 1e3)


def _median_ms(fn: Any, repeats: int, sync: Any) -> float:
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _torch_times(name: str, feeds: dict[str, np.ndarray], repeats: int, compile_too: bool
                 ) -> tuple[dict[str, float], np.ndarray]:
    import torch

    # FP32 as dnnr computes it: no TF32 tensor cores in cuDNN convs or matmuls
    # (PyTorch's default lets cuDNN use them)
    torch.backends.cudnn.allow_tf32 = os.environ.get("DNNR_TORCH_TF32") == "1"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32

    cuda = torch.cuda.is_available()
    model = build_model(name).to("cuda" if cuda else "cpu")
    xt = {k: torch.from_numpy(v).to("cuda" if cuda else "cpu") for k, v in feeds.items()}
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times = {}
    with torch.no_grad():
        reference = _torch_call(model, name, xt).float().cpu().numpy()
        times["eager"] = _median_ms(lambda: _torch_call(model, name, xt), repeats, sync)
        if not cuda:
            return times, reference
        static_in = {k: v.clone() for k, v in xt.items()}
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                _torch_call(model, name, static_in)
        torch.cuda.current_stream().wait_stream(stream)
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                _torch_call(model, name, static_in)
            times["cuda_graph"] = _median_ms(graph.replay, repeats, sync)
        except Exception as error:  # noqa: BLE001 - one model's failure is a cell
            times["cuda_graph_failed"] = f"{type(error).__name__}: {str(error)[:160]}"
            print(f"{name}: CUDA graph capture failed: {times['cuda_graph_failed']}",
                  flush=True)
        if compile_too:
            # a fresh dynamo state and static shapes per model and batch: the table runs
            # many models in one process, and dynamo would otherwise mark the batch
            # dimension dynamic at the second batch of the same forward code
            torch._dynamo.reset()
            try:
                compiled = torch.compile(model, dynamic=False)
                start = time.perf_counter()
                _torch_call(compiled, name, xt)
                times["compile_s"] = time.perf_counter() - start
                times["compile"] = _median_ms(lambda: _torch_call(compiled, name, xt),
                                              repeats, sync)
            except Exception as error:  # noqa: BLE001 - one model's failure is a cell
                times["compile_failed"] = f"{type(error).__name__}: {str(error)[:160]}"
                print(f"{name}: torch.compile failed: {times['compile_failed']}", flush=True)
    return times, reference


def run(out: Path, device: str, repeats: int, only: str | None, compile_too: bool,
        torch_too: bool = True) -> None:
    from egraph_compiler.backends.opencl.runtime import CompiledModel

    card, peak_gflops, peak_gbs = _peaks()
    print(f"card: {card}; FP32 peak {peak_gflops / 1e3:.1f} TFLOP/s, memory peak "
          f"{peak_gbs:.0f} GB/s (from nvidia-smi max clocks)", flush=True)
    rows, kernel_lines, memory_lines = [], [], []
    pool = out / "pool"
    for target in sorted(p for p in out.iterdir() if (p / "meta.json").exists()):
        meta = json.loads((target / "meta.json").read_text())
        if only is not None and meta["model"] not in only.split(","):
            continue
        if (target / "inputs.npz").exists():
            with np.load(target / "inputs.npz") as stored:
                feeds = {k: stored[k] for k in stored.files}
        else:  # left behind to travel lighter: the same seeded draw
            feeds = model_inputs(meta["model"], meta["batch"])
        result: dict[str, Any] = {"model": meta["model"], "batch": meta["batch"]}
        with tempfile.TemporaryDirectory() as tmp:
            for label in ("fused", "unfused", "fused_base"):
                if label not in meta:
                    continue
                artefact = _unpool_weights(target / label, pool, Path(tmp) / label)
                compiled = CompiledModel(artefact, device)
                outputs = compiled.run(feeds)  # warm-up: the driver compiles here
                seconds = compiled.time_launches(repeats)
                result[f"{label}_kernels_ms"] = sum(seconds) * 1e3
                result[f"{label}_e2e_ms"] = _median_ms(lambda c=compiled, f=feeds: c.run(f),
                                                       repeats, lambda: None)
                if label == "fused":
                    result["dnnr_out"] = outputs["y"]
                    blocks = meta[label]["blocks"]
                    anchor_ms = 0.0
                    # per block: a block may take several launches (split-K's sum
                    # pass, Winograd's transforms, row-split's passes), whose times add
                    by_block: dict[int, tuple[float, dict[str, Any]]] = {}
                    for s, launch in zip(seconds, compiled.plan["launches"], strict=True):
                        total, first = by_block.get(int(launch["block"]), (0.0, launch))
                        by_block[int(launch["block"])] = (total + s, first)
                    timed = []
                    for block_id, (s, launch) in by_block.items():
                        info = blocks[str(block_id)]
                        passes = sum(1 for other in compiled.plan["launches"]
                                     if int(other["block"]) == block_id)
                        what = f"{'+'.join(launch['ops'])[:30]}" + \
                            (f" ({passes} launches)" if passes > 1 else "")
                        timed.append({"block": block_id, "ops": what,
                                      "variant": launch.get("variant") or launch["kind"],
                                      "ms": s * 1e3,
                                      "fp32_pct": 100 * info["flops"] / s / 1e9 / peak_gflops,
                                      "hbm_pct": 100 * info["bytes"] / s / 1e9 / peak_gbs})
                        if not info["flops"]:
                            result.setdefault("memory_kernels", []).append(
                                {"ops": what, "kind": launch["kind"], "bytes": info["bytes"],
                                 "ms": s * 1e3})
                        if not info["flops"] and info["bytes"] >= (1 << 20):
                            memory_lines.append(
                                f"{target.name:<24}{what[:44]:<46}"
                                f"{launch['kind']:<10}{s * 1e3:8.3f}"
                                f"{info['bytes'] / s / 1e9:9.0f}"
                                f"{100 * info['bytes'] / s / 1e9 / peak_gbs:6.1f}%")
                        if info["flops"]:
                            anchor_ms += s * 1e3
                            kernel_lines.append(
                                f"{target.name:<24}{what[:44]:<46}"
                                f"{launch.get('variant', '')[:44]:<46}{s * 1e3:8.3f}"
                                f"{info['flops'] / s / 1e9:10.0f}"
                                f"{100 * info['flops'] / s / 1e9 / peak_gflops:7.1f}%"
                                f"{info['bytes'] / s / 1e9:9.0f}"
                                f"{100 * info['bytes'] / s / 1e9 / peak_gbs:6.1f}%")
                    result["anchor_share"] = anchor_ms / max(result["fused_kernels_ms"], 1e-9)
                    result["top_kernels"] = sorted(timed, key=lambda k: -k["ms"])[:TOP_KERNELS]
                del compiled
        if (target / "sweep").exists():
            _sweep(target, pool, device, feeds, repeats, peak_gflops)
        dnnr_out = result.pop("dnnr_out")
        result["rel_err"] = float("nan")  # no reference with dnnr's weights
        if meta.get("synthetic") and (target / REFERENCE).exists():
            # the same artefact and weights on PoCL (`prepare`); PoCL against torch with
            # the real weights was checked there (``pocl``)
            result.update({"vs": "PoCL", **compare(dnnr_out, np.load(target / REFERENCE)),
                           "pocl_vs_torch": meta.get("pocl", {}).get("rel_err")})
        if torch_too:
            times, reference = _torch_times(meta["model"], feeds, repeats, compile_too)
            result.update(times)
            result["torch_nonfinite"] = int((~np.isfinite(reference)).sum())
            if not meta.get("synthetic"):  # else dnnr's weights differ from torch's
                result.update({"vs": "torch", **compare(dnnr_out, reference)})
        rows.append(result)
        print(json.dumps(result), flush=True)
    print()
    for line in table_lines(rows, f"{card}, median of {repeats}"):
        print(line)
    print("\nconv/matmul blocks (fused; a block's launches summed): ms, GFLOP/s (the "
          "direct conv's/matmul's FLOPs, whatever the algorithm), % of FP32 peak, GB/s, "
          "% of memory peak")
    for line in kernel_lines:
        print(line)
    print("\nmemory-bound kernels (no conv/matmul) moving 1 MiB or more: ms, GB/s, "
          "% of memory peak")
    for line in memory_lines:
        print(line)
    for line in memory_summary(rows, peak_gbs):
        print(line)


# issue #13's memory target is on kernels moving about 12 MB or more: below that, the
# ~2 µs each profiling event adds to the kernel (`gpu_peer.py`) caps what a kernel can
# show; the bands show where that fixed cost rules
MEMORY_TARGET_BYTES = 12_000_000
MEMORY_BANDS = (0, 1 << 20, 4_000_000, MEMORY_TARGET_BYTES, 25_000_000, 50_000_000)
# `gpu_peer.py --sizes-from`'s copy clocks, in the summary's column order
COPY_CLOCKS = ("opencl_cold", "opencl_warm", "cuda_events_cold", "cupti_cold")


def _mb(nbytes: int) -> str:
    return "1 MiB" if nbytes == 1 << 20 else f"{nbytes / 1e6:g}"


def memory_kernels(rows: list[dict[str, Any]], batch: int) -> list[dict[str, Any]]:
    """Every memory-bound (no conv/matmul) fused kernel of every row at ``batch``:
    target, ops, kind, bytes moved and seconds (a block's launches summed)."""
    return [{"target": f"{r['model']}_b{r['batch']}", **k, "seconds": k["ms"] * 1e-3}
            for r in sorted(rows, key=lambda r: r["model"]) if int(r["batch"]) == batch
            for k in r.get("memory_kernels", [])]


def _copy_seconds(copies: dict[str, list[tuple[int, float]]], clock: str,
                  nbytes: int) -> float | None:
    """A plain copy's seconds at ``nbytes`` moved by ``clock`` (linear between the
    measured sizes; None outside them or where the clock was not measured)."""
    curve = sorted(copies.get(clock, []))
    if not curve or not curve[0][0] * 0.99 <= nbytes <= curve[-1][0] * 1.01:
        return None
    return float(np.interp(nbytes, [b for b, _ in curve], [t for _, t in curve]))


def _copy_share(copies: dict[str, list[tuple[int, float]]], clock: str,
                kernels: list[dict[str, Any]], peak_gbs: float) -> str:
    """The copies of the kernels' sizes as % of the peak, weighted as the kernels are
    (their bytes over their summed times)."""
    times = [_copy_seconds(copies, clock, k["bytes"]) for k in kernels]
    if any(t is None for t in times):
        return "–"
    return f"{100 * sum(k['bytes'] for k in kernels) / sum(times) / 1e9 / peak_gbs:.1f}"


def memory_summary(rows: list[dict[str, Any]], peak_gbs: float,
                   copies: dict[str, list[tuple[int, float]]] | None = None) -> list[str]:
    """Issue #13's memory-bound measure per batch: every memory-bound kernel of every
    row, per size band, as % of the memory peak time-weighted (bytes ÷ summed time),
    beside a plain copy of the same sizes (`gpu_peer.py --sizes-from`: OpenCL events
    L2-cold and L2-warm, CUDA events and CUPTI L2-cold) where ``copies`` has them; then
    the kernels moving `MEMORY_TARGET_BYTES` or more one by one."""
    copies = copies or {}
    lines = []
    for batch in sorted({int(r["batch"]) for r in rows}):
        kernels = memory_kernels(rows, batch)
        if not kernels:
            continue
        models = sorted({r["model"] for r in rows if int(r["batch"]) == batch})
        lines += [f"\nmemory-bound kernels (no conv/matmul), batch {batch}, all of {len(models)} "
                  f"models ({', '.join(models)}): % of the memory peak ({peak_gbs:.0f} GB/s), "
                  "time-weighted (bytes ÷ summed time); a plain copy of the same sizes: "
                  + " / ".join(COPY_CLOCKS),
                  f"{'MB moved':<18}{'kernels':>8}{'ms':>9}{'ours %':>8}"
                  f"{'min/median/max %':>20}   copy %"]
        bands = [*zip(MEMORY_BANDS, MEMORY_BANDS[1:], strict=False),
                 (MEMORY_BANDS[-1], None), (MEMORY_TARGET_BYTES, None)]
        for low, high in bands:
            picked = [k for k in kernels if k["bytes"] >= low and (high is None
                                                                  or k["bytes"] < high)]
            label = (f"≥ {_mb(low)} (target)" if (low, high) == bands[-1]
                     else f"{_mb(low)}–{_mb(high)}" if high else f"≥ {_mb(low)}")
            if not picked:
                lines.append(f"{label:<18}{0:>8}")
                continue
            shares = np.array([k["bytes"] / k["seconds"] / 1e9 / peak_gbs for k in picked])
            seconds = np.array([k["seconds"] for k in picked])
            spread = " / ".join(f"{100 * q:.0f}" for q in np.quantile(shares, [0, .5, 1]))
            lines.append(
                f"{label:<18}{len(picked):>8}{1e3 * seconds.sum():9.3f}"
                f"{100 * np.average(shares, weights=seconds):8.1f}{spread:>20}   "
                + " / ".join(_copy_share(copies, c, picked, peak_gbs) for c in COPY_CLOCKS)
                + (f"; at 60 % or more: {int((shares >= 0.6).sum())} kernels, "
                   f"{100 * seconds[shares >= 0.6].sum() / seconds.sum():.0f} % of their time"
                   if high is None and low == MEMORY_TARGET_BYTES else ""))
        for label, transformer in (("  CNNs", False), ("  transformers", True)):
            picked = [k for k in kernels if k["bytes"] >= MEMORY_TARGET_BYTES and
                      (k["target"].rsplit("_b", 1)[0] in TRANSFORMERS) == transformer]
            if picked:
                seconds = sum(k["seconds"] for k in picked)
                moved = sum(k["bytes"] for k in picked)
                lines.append(f"{label:<18}{len(picked):>8}{1e3 * seconds:9.3f}"
                             f"{100 * moved / seconds / 1e9 / peak_gbs:8.1f}{'':>20}   "
                             + " / ".join(_copy_share(copies, c, picked, peak_gbs)
                                          for c in COPY_CLOCKS))
        lines.append(f"kernels moving {MEMORY_TARGET_BYTES / 1e6:g} MB or more, batch {batch}: "
                     "MB, ms, ours %, copy % (" + " / ".join(COPY_CLOCKS) + ")")
        for k in sorted((k for k in kernels if k["bytes"] >= MEMORY_TARGET_BYTES),
                        key=lambda k: k["seconds"] / k["bytes"], reverse=True):
            lines.append(f"  {k['target']:<24}{k['ops'][:40]:<42}{k['bytes'] / 1e6:7.1f}"
                         f"{1e3 * k['seconds']:8.3f}"
                         f"{100 * k['bytes'] / k['seconds'] / 1e9 / peak_gbs:7.1f}   "
                         + " / ".join(_copy_share(copies, c, [k], peak_gbs)
                                      for c in COPY_CLOCKS))
    return lines


def memory_from_logs(logs: list[Path], peers: list[Path]) -> list[str]:
    """`memory_summary` over the rows of `run` logs of one card (a later log's row
    replacing an earlier one of the same model and batch) and the copies of
    `gpu_peer.py --sizes-from` logs of the same card."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    cards, peaks = set(), set()
    for log in logs:
        for line in log.read_text().splitlines():
            if line.startswith("card: "):
                cards.add(line.removeprefix("card: ").split(";")[0])
                peaks.add(float(line.split("memory peak ")[1].split(" GB/s")[0]))
            elif line.startswith('{"model"'):
                row = json.loads(line)
                rows[(row["model"], int(row["batch"]))] = row
    copies: dict[str, list[tuple[int, float]]] = {}
    for log in peers:
        for line in log.read_text().splitlines():
            if line.startswith("peer "):
                cards.add(line.split(": ", 1)[1].split(",")[0])
            elif line.startswith('{"copy_bytes"'):
                copy = json.loads(line)
                copies.setdefault(copy["clock"], []).append((copy["copy_bytes"], copy["s"]))
    if len(cards) != 1 or len(peaks) != 1:
        raise SystemExit(f"error: the logs name {len(cards)} cards ({', '.join(sorted(cards))}); "
                         "a memory summary needs kernels and copies from one card")
    if not any("memory_kernels" in r for r in rows.values()):
        raise SystemExit("error: no row has memory_kernels (logs of a `run` before they "
                         "were recorded?)")
    return [f"{cards.pop()}, rows from {len(logs)} log(s), copies from {len(peers)}",
            *memory_summary(list(rows.values()), peaks.pop(), copies)]


def _cell(row: dict[str, Any], key: str) -> str:
    """A time in ms, or why there is none (a torch step that failed on the card)."""
    if f"{key}_failed" in row:
        return f"failed ({row[f'{key}_failed'].split(':')[0]})"
    value = row.get(key)
    return "–" if value is None or value != value else f"{value:.2f}"


def targets(row: dict[str, Any]) -> dict[str, bool | None]:
    """Issue #13's three GPU targets for one row, on dnnr's fused kernel time: ≤
    torch.compile, ≤ 2× eager in a CUDA graph, ≤ fusion-off; None where the torch time
    the target needs is missing (not timed, or failed)."""
    fused = row["fused_kernels_ms"]

    def at_most(key: str, factor: float = 1.0) -> bool | None:
        other = row.get(key)
        return None if other is None or other != other else fused <= factor * other

    return {"<= compile": at_most("compile"), "<= 2x graph": at_most("cuda_graph", 2.0),
            "<= fusion-off": at_most("unfused_kernels_ms")}


def table_lines(rows: list[dict[str, Any]], title: str) -> list[str]:
    """The markdown table of `run`'s rows with the targets held per row, then the three
    longest fused kernels of every row that misses one (ms, % of the card's FP32 and
    memory peaks)."""
    tf32 = "on" if os.environ.get("DNNR_TORCH_TF32") == "1" else "off"
    names = list(targets(rows[0])) if rows else []
    lines = [f"{title}; dnnr kernels = sum of OpenCL profiling events; PyTorch TF32 {tf32}",
             "| model (batch) | dnnr fused kernels ms | fused without sgemm | dnnr fused "
             "end-to-end ms | fusion-off kernels ms | PyTorch eager ms | eager in a CUDA graph "
             "ms | torch.compile ms | conv/matmul share | max rel err | "
             + " | ".join(names) + " |",
             "|---" * (10 + len(names)) + "|"]
    misses = []
    for r in sorted(rows, key=lambda r: (r["model"], r["batch"])):
        held = targets(r)
        marks = ["–" if ok is None else ("yes" if ok else "**no**") for ok in held.values()]
        lines.append(
            f"| {r['model']} ({r['batch']}) | {r['fused_kernels_ms']:.2f} | "
            f"{_cell(r, 'fused_base_kernels_ms')} | {r['fused_e2e_ms']:.2f} | "
            f"{r['unfused_kernels_ms']:.2f} | {_cell(r, 'eager')} | {_cell(r, 'cuda_graph')} | "
            f"{_cell(r, 'compile')} | {100 * r['anchor_share']:.0f} % | {_error_cell(r)} | "
            + " | ".join(marks) + " |")
        if False in held.values():
            misses.append(r)
    held_counts = {name: sum(1 for r in rows if targets(r)[name]) for name in names}
    lines.append(f"rows {len(rows)}; targets held: " + ", ".join(
        f"{name} {count}" for name, count in held_counts.items()))
    for r in misses:
        missed = ", ".join(name for name, ok in targets(r).items() if ok is False)
        lines.append(f"{r['model']} ({r['batch']}) misses {missed}; longest fused kernels:")
        for k in r.get("top_kernels", []):
            lines.append(f"    {k['ms']:7.3f} ms  {k['ops'][:44]:<46}{k['variant'][:40]:<42}"
                         f"{k['fp32_pct']:5.1f} % FP32  {k['hbm_pct']:5.1f} % HBM")
    return lines


def table_from_logs(logs: list[Path]) -> list[str]:
    """`table_lines` over the rows `run` printed into ``logs`` (one JSON object a line),
    a later log's row replacing an earlier one of the same model and batch; every log
    must name the same card (rows of different cards are not one table)."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    cards = set()
    for log in logs:
        for line in log.read_text().splitlines():
            if line.startswith("card: "):
                cards.add(line.removeprefix("card: ").split(";")[0])
            elif line.startswith('{"model"'):
                row = json.loads(line)
                rows[(row["model"], int(row["batch"]))] = row
    if len(cards) != 1:
        raise SystemExit(f"error: the logs name {len(cards)} cards ({', '.join(sorted(cards))}); "
                         "a table needs rows from one card")
    return table_lines(list(rows.values()), f"{cards.pop()}, rows from {len(logs)} log(s)")


def _error_cell(result: dict[str, Any]) -> str:
    """The table's error: against what, and the non-finite entries where there are any."""
    if "vs" not in result:
        return "– (no reference with these weights)"
    cell = f"{result['rel_err']:.1e} vs {result['vs']}"
    if result["vs"] == "PoCL" and result.get("pocl_vs_torch") is not None:
        cell += f" (PoCL vs torch {result['pocl_vs_torch']:.1e})"
    counts = [f"{result[k]} {k.removeprefix('nonfinite_')}" for k in
              ("nonfinite_out", "nonfinite_ref", "nonfinite_mismatch") if result.get(k)]
    return cell + (f"; non-finite: {', '.join(counts)}" if counts else "")


def _sweep(target: Path, pool: Path, device: str, feeds: dict[str, np.ndarray], repeats: int,
           peak_gflops: float) -> None:
    """Per conv/matmul launch: the fastest forced option vs the cost model's choice."""
    from egraph_compiler.backends.opencl.runtime import CompiledModel

    meta = json.loads((target / "meta.json").read_text())
    blocks = meta["fused"]["blocks"]
    table: dict[int, dict[str, float]] = {}
    names: dict[int, str] = {}
    flops: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label in ["fused", *sorted(p.name for p in (target / "sweep").iterdir())]:
            source = target / label if label == "fused" else target / "sweep" / label
            compiled = CompiledModel(_unpool_weights(source, pool, Path(tmp) / label), device)
            compiled.run(feeds)
            seconds = compiled.time_launches(max(3, repeats // 3))
            # by block: a block may take two launches (split-K across groups), whose
            # times add up
            for s, launch in zip(seconds, compiled.plan["launches"], strict=True):
                k = int(launch["block"])
                if blocks[str(k)]["flops"]:
                    key = "model: " + launch["variant"] if label == "fused" else label
                    row = table.setdefault(k, {})
                    row[key] = row.get(key, 0.0) + s * 1e3
                    names[k] = "+".join(launch["ops"])
                    flops[k] = blocks[str(k)]["flops"]
            del compiled
    print(f"\nsweep {target.name}: per conv/matmul, the cost model's option vs the fastest "
          "(ms, % of FP32 peak)")
    model_total = best_total = 0.0
    for k in sorted(table):
        row = table[k]
        chosen = next(key for key in row if key.startswith("model: "))
        best = min((key for key in row if not key.startswith("model: ")), key=row.get)
        model_total += row[chosen]
        best_total += row[best]
        print(f"  {k:3d} {names[k][:30]:<32}{chosen[7:][:30]:<32}{row[chosen]:8.3f}   "
              f"best {best[:30]:<32}{row[best]:8.3f}"
              f" {100 * flops[k] / row[best] / 1e6 / peak_gflops:5.1f}%")
    print(f"  total: cost model {model_total:.3f} ms, best per kernel {best_total:.3f} ms")
    if os.environ.get("OUT"):  # every option's time, for fitting the cost model
        Path(os.environ["OUT"], f"sweep_{target.name}.json").write_text(json.dumps(
            {str(k): {"ops": names[k], "flops": flops[k], "ms": table[k]} for k in table}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["prepare", "run", "table", "memory"])
    parser.add_argument("dir", nargs="+", help="prepare/run: the artefact directory; "
                        "table/memory: the logs of `run` to merge into one table")
    parser.add_argument("--peer", nargs="*", default=[], type=Path,
                        help="memory: `gpu_peer.py opencl|cuda --sizes-from` logs (the "
                        "copy of each kernel's size)")
    parser.add_argument("--device", default="NVIDIA", help="OpenCL device name substring")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--only", help="model names, comma-separated")
    parser.add_argument("--synthetic", action="store_true",
                        help="prepare: large float weights travel as seeds; the GPU's output "
                        "is checked against the same artefact's on PoCL (DNNR_GPU_NO_POCL=1: not)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--no-torch", action="store_true", help="time dnnr only")
    args = parser.parse_args()
    if args.step == "table":
        print("\n".join(table_from_logs([Path(d) for d in args.dir])))
        return
    if args.step == "memory":
        print("\n".join(memory_from_logs([Path(d) for d in args.dir], args.peer)))
        return
    if len(args.dir) != 1:
        parser.error(f"{args.step} takes one directory")
    if args.step == "prepare":
        prepare(Path(args.dir[0]), args.only, args.synthetic)
    else:
        run(Path(args.dir[0]), args.device, args.repeats, args.only, not args.no_compile,
            not args.no_torch)


if __name__ == "__main__":
    main()
