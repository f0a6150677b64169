"""Build the model corpus: today's PyTorch exports of transformers and CNNs (issue 17).

Every architecture is instantiated from its transformers config class with seeded random
weights (no hub downloads), exported with both of torch's exporters with dynamic axes:

- ``ts``: the TorchScript exporter (``dynamo=False``, opset 17, ``dynamic_axes``);
- ``dynamo``: the dynamo exporter (opset 20, ``dynamic_shapes``).

Each model carries torch-eager reference outputs at three shapes. onnxruntime on the
export is checked against them while building, so a corpus entry whose export itself is
wrong (the TorchScript exporter freezes some Python-side shape logic) is flagged, not
silently used.

The corpus is cached in ``$DNNR_CORPUS_DIR`` (default ``~/.cache/dnnr/corpus``) under a
folder named by the hash of this file and the torch / transformers versions, so editing
the script rebuilds it and nothing is committed. ``.ci/run`` builds the suite corpus.

    python3 tests/corpus/build.py [--set suite|bench] [--only bert_sdpa,gpt2] [--list]

Layout of one built corpus folder::

    manifest.json                 {model: {exporter: {...}, "shapes": [...], ...}}
    <model>.<exporter>.onnx       the export
    <model>.ref.npz               inputs and torch outputs, keys "<shape index>/<name>"
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve()
EXPORTERS: tuple[str, ...] = ("ts", "dynamo")
TS_OPSET = 17
DYNAMO_OPSET = 20


@dataclass(frozen=True)
class InputSpec:
    """One model input: its name, dtype, and per axis either an int or a symbolic dim name."""

    name: str
    dtype: str  # "float32" or "int64"
    axes: tuple[int | str, ...]
    high: int = 0  # exclusive bound of int64 values (token ids); 0 for a float input
    mask: bool = False  # an attention mask: ones with trailing zeros (padding) per row


@dataclass(frozen=True)
class Architecture:
    """A corpus entry: how to build the torch module and what its inputs look like."""

    name: str
    family: str  # "transformers config class" the model comes from
    build: Callable[[], object]
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    shapes: tuple[dict[str, int], ...]  # three bindings of the symbolic dims
    example: dict[str, int]  # the binding the exporters trace with
    rescale: bool = False  # re-draw CNN weights so the output spread is O(1)
    notes: str = ""
    sets: tuple[str, ...] = ("suite",)
    extra: dict[str, object] = field(default_factory=dict)


# -- architectures --------------------------------------------------------------------------


def _wrap(model: object, inputs: tuple[str, ...], outputs: tuple[str, ...]) -> object:
    """A module whose forward takes the named inputs positionally (passing them on by
    keyword) and returns a tuple of the named output tensors."""
    import torch

    class Outputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            result = self.model(**dict(zip(inputs, args, strict=True)))
            return tuple(result[k] for k in outputs)

    return Outputs().eval()


def _bert(attention: str, hidden: int = 32, layers: int = 2, heads: int = 4,
          intermediate: int = 64, vocab: int = 128) -> object:
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=intermediate,
                        max_position_embeddings=64, attn_implementation=attention)
    return BertModel(config, add_pooling_layer=True).eval()


def _gpt2(hidden: int = 32, layers: int = 2, heads: int = 4, vocab: int = 128) -> object:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads,
                        n_positions=64, use_cache=False)
    return GPT2Model(config).eval()


def _llama() -> object:
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, use_cache=False)
    return LlamaModel(config).eval()


def _vit() -> object:
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64)
    return ViTModel(config, add_pooling_layer=False).eval()


def _convnext() -> object:
    from transformers import ConvNextConfig, ConvNextModel

    config = ConvNextConfig(num_channels=3, hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 2, 1],
                            patch_size=4)
    return ConvNextModel(config).eval()


def _resnet50() -> object:
    from transformers import ResNetConfig, ResNetModel

    # ResNet-50's structure (bottleneck blocks, depths 3-4-6-3) at an eighth of its width.
    config = ResNetConfig(embedding_size=8, hidden_sizes=[32, 64, 128, 256], depths=[3, 4, 6, 3],
                          layer_type="bottleneck")
    return ResNetModel(config).eval()


def _mobilenet_v2() -> object:
    from transformers import MobileNetV2Config, MobileNetV2Model

    # tf_padding computes "same" pads in Python: both exporters freeze them at the example
    # shape, and the export is then wrong at the other shapes.
    config = MobileNetV2Config(depth_multiplier=0.35, image_size=64, tf_padding=False)
    return MobileNetV2Model(config).eval()


def _efficientnet() -> object:
    from transformers import EfficientNetConfig, EfficientNetModel

    # hidden_dim is the top BatchNorm's width: round_filters(1280) at this width coefficient.
    config = EfficientNetConfig(width_coefficient=0.25, depth_coefficient=0.5, image_size=64,
                                hidden_dim=320)
    return EfficientNetModel(config).eval()


def _bart() -> object:
    from transformers import BartConfig, BartModel

    config = BartConfig(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4,
                        encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                        use_cache=False)
    return BartModel(config).eval()


def _wav2vec2() -> object:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, conv_dim=(16, 16, 16), conv_stride=(5, 2, 2),
                            conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                            num_conv_pos_embedding_groups=4, feat_extract_norm="group",
                            do_stable_layer_norm=False)
    return Wav2Vec2Model(config).eval()


def _segformer() -> object:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    config = SegformerConfig(num_channels=3, num_encoder_blocks=2, depths=[1, 1],
                             sr_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[7, 3],
                             strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                             decoder_hidden_size=16, num_labels=3)
    return SegformerForSemanticSegmentation(config).eval()


def _ids(name: str = "input_ids", high: int = 128) -> InputSpec:
    return InputSpec(name, "int64", ("batch", "seq"), high=high)


def _mask(name: str = "attention_mask") -> InputSpec:
    return InputSpec(name, "int64", ("batch", "seq"), mask=True)


_SEQ_SHAPES = ({"batch": 1, "seq": 5}, {"batch": 2, "seq": 9}, {"batch": 3, "seq": 16})
_SEQ_EXAMPLE = {"batch": 2, "seq": 8}
_IMAGE_SHAPES = ({"batch": 1, "height": 32, "width": 32}, {"batch": 2, "height": 48, "width": 40},
                 {"batch": 3, "height": 64, "width": 64})
_IMAGE_EXAMPLE = {"batch": 2, "height": 64, "width": 64}
_IMAGE = InputSpec("pixel_values", "float32", ("batch", 3, "height", "width"))

ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("bert_sdpa", "BertConfig", lambda: _bert("sdpa"), (_ids(), _mask()),
                 ("last_hidden_state", "pooler_output"), _SEQ_SHAPES, _SEQ_EXAMPLE),
    Architecture("bert_eager", "BertConfig", lambda: _bert("eager"), (_ids(), _mask()),
                 ("last_hidden_state", "pooler_output"), _SEQ_SHAPES, _SEQ_EXAMPLE),
    Architecture("gpt2", "GPT2Config", _gpt2, (_ids(), _mask()), ("last_hidden_state",),
                 _SEQ_SHAPES, _SEQ_EXAMPLE),
    Architecture("llama", "LlamaConfig (GQA, RoPE, RMSNorm)", _llama, (_ids(), _mask()),
                 ("last_hidden_state",), _SEQ_SHAPES, _SEQ_EXAMPLE),
    Architecture("vit", "ViTConfig", _vit,
                 (InputSpec("pixel_values", "float32", ("batch", 3, 32, 32)),),
                 ("last_hidden_state",), ({"batch": 1}, {"batch": 2}, {"batch": 3}),
                 {"batch": 2}, notes="position embeddings fix the image size; batch is dynamic"),
    Architecture("convnext", "ConvNextConfig", _convnext, (_IMAGE,),
                 ("last_hidden_state", "pooler_output"), _IMAGE_SHAPES, _IMAGE_EXAMPLE),
    Architecture("resnet50", "ResNetConfig (bottleneck 3-4-6-3)", _resnet50, (_IMAGE,),
                 ("pooler_output",), _IMAGE_SHAPES, _IMAGE_EXAMPLE, rescale=True),
    Architecture("mobilenet_v2", "MobileNetV2Config", _mobilenet_v2, (_IMAGE,),
                 ("pooler_output",), _IMAGE_SHAPES, _IMAGE_EXAMPLE, rescale=True),
    Architecture("efficientnet", "EfficientNetConfig (SiLU, squeeze-excite)", _efficientnet,
                 (_IMAGE,), ("pooler_output",), _IMAGE_SHAPES, _IMAGE_EXAMPLE, rescale=True),
    Architecture("bart", "BartConfig (encoder-decoder, cross-attention)", _bart,
                 (_ids(), _mask(), InputSpec("decoder_input_ids", "int64", ("batch", "dseq"),
                                             high=128)),
                 ("last_hidden_state",),
                 ({"batch": 1, "seq": 5, "dseq": 3}, {"batch": 2, "seq": 9, "dseq": 6},
                  {"batch": 3, "seq": 16, "dseq": 11}),
                 {"batch": 2, "seq": 8, "dseq": 4}),
    Architecture("wav2vec2", "Wav2Vec2Config (speech: Conv1d, GroupNorm)", _wav2vec2,
                 (InputSpec("input_values", "float32", ("batch", "samples")),),
                 ("last_hidden_state",),
                 ({"batch": 1, "samples": 400}, {"batch": 2, "samples": 640},
                  {"batch": 3, "samples": 1000}),
                 {"batch": 2, "samples": 800}),
    Architecture("segformer", "SegformerConfig (segmentation)", _segformer, (_IMAGE,),
                 ("logits",), _IMAGE_SHAPES, _IMAGE_EXAMPLE, rescale=True),
    Architecture("bert_base2", "BertConfig (BERT-base width, 2 layers)",
                 lambda: _bert("sdpa", hidden=768, layers=2, heads=12, intermediate=3072,
                               vocab=30522),
                 (_ids(high=30522), _mask()), ("last_hidden_state", "pooler_output"),
                 ({"batch": 1, "seq": 16}, {"batch": 1, "seq": 32}, {"batch": 2, "seq": 64}),
                 _SEQ_EXAMPLE, sets=("bench",)),
    Architecture("gpt2_2", "GPT2Config (GPT-2 width, 2 layers)",
                 lambda: _gpt2(hidden=768, layers=2, heads=12, vocab=50257),
                 (_ids(high=50257), _mask()), ("last_hidden_state",),
                 ({"batch": 1, "seq": 16}, {"batch": 1, "seq": 32}, {"batch": 2, "seq": 64}),
                 _SEQ_EXAMPLE, sets=("bench",)),
)}


# -- weights and inputs ---------------------------------------------------------------------


def _rescale_cnn(module: object, seed: int) -> None:
    """Re-draw conv/linear weights He-scaled and give BatchNorm non-trivial statistics.

    A random-init CNN's default BatchNorm (mean 0, var 1) and small init shrink the signal
    layer by layer; EfficientNet/MobileNet outputs reach 1e-14, where every tolerance
    passes. He scaling keeps the spread O(1)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, torch.nn.Conv2d | torch.nn.Linear):
                fan_in = sub.weight[0].numel()
                sub.weight.copy_(torch.randn(sub.weight.shape, generator=generator)
                                 * math.sqrt(2.0 / fan_in))
                if sub.bias is not None:
                    sub.bias.copy_(0.1 * torch.randn(sub.bias.shape, generator=generator))
            elif isinstance(sub, torch.nn.BatchNorm2d):
                n = sub.num_features
                sub.weight.copy_(0.5 + torch.rand(n, generator=generator))
                sub.bias.copy_(0.1 * torch.randn(n, generator=generator))
                sub.running_mean.copy_(0.1 * torch.randn(n, generator=generator))
                sub.running_var.copy_(0.5 + torch.rand(n, generator=generator))


def _perturb_norms(module: object, seed: int) -> None:
    """Normalisation layers start as scale 1, shift 0 — a special case that hides an
    ignored scale or shift (and lets x * ones rewrite loops hide in the e-graph). Draw
    them around those values instead: scale 1 + 0.1·N(0, 1), shift 0.1·N(0, 1)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            if not type(sub).__name__.endswith("Norm") and "Norm" not in type(sub).__name__:
                continue
            for name, param in sub.named_parameters(recurse=False):
                if param.ndim != 1:
                    continue
                noise = 0.1 * torch.randn(param.shape, generator=generator)
                param.copy_((1.0 if name == "weight" else 0.0) + noise)


def _bind(spec: InputSpec, dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(dims[a] if isinstance(a, str) else a for a in spec.axes)


def make_inputs(arch: Architecture, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs of ``arch`` at the binding ``dims``."""
    rng = np.random.default_rng(seed)
    values: dict[str, np.ndarray] = {}
    for spec in arch.inputs:
        shape = _bind(spec, dims)
        if spec.mask:
            mask = np.ones(shape, dtype=np.int64)
            for row in range(1, shape[0]):  # row 0 unpadded; later rows padded at the end
                mask[row, shape[1] - row % shape[1]:] = 0
            values[spec.name] = mask
        elif spec.dtype == "int64":
            values[spec.name] = rng.integers(0, spec.high, size=shape, dtype=np.int64)
        else:
            values[spec.name] = rng.standard_normal(shape).astype(np.float32)
    return values


# -- export ---------------------------------------------------------------------------------


def _export(arch: Architecture, module: object, exporter: str, path: Path) -> None:
    import torch

    example = make_inputs(arch, arch.example, seed=0)
    args = tuple(torch.from_numpy(example[s.name]) for s in arch.inputs)
    names = [s.name for s in arch.inputs]
    sink = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sink):
        warnings.simplefilter("ignore")
        if exporter == "ts":
            dynamic_axes: dict[str, dict[int, str]] = {
                s.name: {i: a for i, a in enumerate(s.axes) if isinstance(a, str)}
                for s in arch.inputs}
            torch.onnx.export(module, args, str(path), dynamo=False, opset_version=TS_OPSET,
                              input_names=names, output_names=list(arch.outputs),
                              dynamic_axes=dynamic_axes)
        else:
            dims: dict[str, object] = {}
            shapes = []
            for s in arch.inputs:
                axes = {}
                for i, a in enumerate(s.axes):
                    if isinstance(a, str):
                        axes[i] = dims.setdefault(a, torch.export.Dim.DYNAMIC)
                shapes.append(axes)
            program = torch.onnx.export(module, args, dynamo=True, opset_version=DYNAMO_OPSET,
                                        input_names=names, output_names=list(arch.outputs),
                                        dynamic_shapes=(tuple(shapes),), verbose=False)
            program.save(str(path), external_data=False)


def _reference(arch: Architecture, module: object) -> dict[str, np.ndarray]:
    import torch

    stored: dict[str, np.ndarray] = {}
    for index, dims in enumerate(arch.shapes):
        inputs = make_inputs(arch, dims, seed=index + 1)
        with torch.no_grad():
            outputs = module(*(torch.from_numpy(inputs[s.name]) for s in arch.inputs))
        for name, value in inputs.items():
            stored[f"{index}/{name}"] = value
        for name, value in zip(arch.outputs, outputs, strict=True):
            stored[f"{index}/{name}"] = value.numpy()
    return stored


def _ort_error(path: Path, arch: Architecture, reference: dict[str, np.ndarray]) -> float:
    """Largest error of onnxruntime on the export, relative to max |reference|."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    worst = 0.0
    for index in range(len(arch.shapes)):
        feeds = {s.name: reference[f"{index}/{s.name}"] for s in arch.inputs}
        got = session.run(list(arch.outputs), feeds)
        for name, value in zip(arch.outputs, got, strict=True):
            ref = reference[f"{index}/{name}"]
            worst = max(worst, float(np.max(np.abs(value - ref))) / float(np.max(np.abs(ref))))
    return worst


def corpus_hash() -> str:
    """Key of the cache folder: this script's bytes and the versions that shape an export."""
    import torch
    import transformers

    digest = hashlib.sha256(SCRIPT.read_bytes())
    digest.update(f"{torch.__version__} {transformers.__version__}".encode())
    return digest.hexdigest()[:16]


def corpus_dir() -> Path:
    root = Path(os.environ.get("DNNR_CORPUS_DIR", Path.home() / ".cache" / "dnnr" / "corpus"))
    return root / corpus_hash()


def build_one(arch: Architecture, out: Path) -> dict[str, object]:
    """Export ``arch`` with both exporters into ``out``; returns its manifest entry."""
    import torch

    torch.manual_seed(0)
    module = _wrap(arch.build(), tuple(s.name for s in arch.inputs), arch.outputs)
    if arch.rescale:
        _rescale_cnn(module, seed=1)
    _perturb_norms(module, seed=2)
    entry: dict[str, object] = {
        "family": arch.family, "inputs": [s.name for s in arch.inputs],
        "outputs": list(arch.outputs), "shapes": list(arch.shapes), "notes": arch.notes,
        "sets": list(arch.sets),
    }
    reference = _reference(arch, module)
    spread = min(float(np.std(reference[f"{i}/{o}"]))
                 for i in range(len(arch.shapes)) for o in arch.outputs)
    if not 1e-2 < spread < 1e3:
        raise RuntimeError(f"{arch.name}: reference spread {spread:.3g} is degenerate")
    entry["reference_std_min"] = spread
    np.savez(out / f"{arch.name}.ref.npz", **reference)
    for exporter in EXPORTERS:
        path = out / f"{arch.name}.{exporter}.onnx"
        started = time.perf_counter()
        try:
            _export(arch, module, exporter, path)
        except Exception as error:  # an exporter failure is a corpus fact, recorded
            entry[exporter] = {"error": f"{type(error).__name__}: {str(error)[:300]}",
                               "cause": repr(error.__cause__)[:1000]}
            continue
        entry[exporter] = {"file": path.name, "export_s": round(time.perf_counter() - started, 2),
                           "ort_rel_error": _ort_error(path, arch, reference)}
    return entry


def build(names: list[str], out: Path | None = None, log: Callable[[str], None] = print) -> Path:
    """Build (or reuse from the cache) the named corpus models; returns the corpus folder."""
    import fcntl

    out = out or corpus_dir()
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    # pytest-xdist workers may ask at once: one builds, the others wait and reuse.
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        for name in names:
            if name in manifest:
                continue
            started = time.perf_counter()
            manifest[name] = build_one(ARCHITECTURES[name], out)
            manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
            log(f"built {name} in {time.perf_counter() - started:.1f} s: "
                + ", ".join(f"{e}: {manifest[name][e].get('error') or 'ok'}" for e in EXPORTERS))
    return out


def names_in(corpus_set: str) -> list[str]:
    return [n for n, a in ARCHITECTURES.items() if corpus_set in a.sets]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="suite", choices=("suite", "bench", "all"))
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--list", action="store_true", help="print the corpus folder and exit")
    args = parser.parse_args(argv)
    if args.list:
        print(corpus_dir())
        return 0
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in ARCHITECTURES]
        if unknown:
            parser.error(f"unknown model(s) {unknown}; choose from {', '.join(ARCHITECTURES)}")
    else:
        names = list(ARCHITECTURES) if args.set == "all" else names_in(args.set)
    print(build(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
