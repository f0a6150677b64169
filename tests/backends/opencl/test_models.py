"""The OpenCL backend end to end on PoCL against onnxruntime (rtol 1e-3, atol 1e-4):
the model-zoo blocks at batch 2 with odd sizes, and all nine light models whole."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from egraph_compiler.backends.opencl import OpenClError, compile_graph, load
from egraph_compiler.backends.opencl.runtime import CompiledModel
from egraph_compiler.ops import shipped
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import (
    BLOCKS,
    LIGHT_MODELS,
    assert_close,
    conv_bn_relu_block,
    depthwise_separable_block,
    light_model,
    random_inputs,
    randomize_weights,
    run_ort,
)

LAYOUT_OPS = shipped().with_role("layout")  # the registry's layout operators

# 7×7 images and 13 channels divide neither the conv tiles (8 channels × 4 columns)
# nor the matmul tiles (4 × 4); batch 2 exercises the batch loops.
ODD = {"batch": 2, "height": 7, "width": 7, "seq": 5}


def _compile_and_check(model: onnx.ModelProto, feeds: dict, out_dir: Path,
                       fuse: bool = True) -> CompiledModel:
    model = with_static_inputs(model, feeds)
    graph = static_graph(model, feeds)
    compile_graph(graph, out_dir, fuse=fuse)
    compiled = load(out_dir)
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-3, atol=1e-4)
    return compiled


def _check(model: onnx.ModelProto, feeds: dict, out_dir: Path, fuse: bool = True) -> list[str]:
    """The operators of each launched kernel, after checking against onnxruntime."""
    compiled = _compile_and_check(model, feeds, out_dir, fuse)
    return [la["ops"] for la in compiled.plan["launches"]]


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_block_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    model = BLOCKS[name]()
    launches = _check(model, random_inputs(model, 1, dims=ODD), tmp_path)
    for ops in launches:  # layout transformations never run as kernels of their own
        assert not all(op in LAYOUT_OPS for op in ops), ops


def test_odd_channels_and_fusion_off(tmp_path: Path) -> None:
    model = depthwise_separable_block(channels=13, out_channels=13)
    feeds = random_inputs(model, 2, dims=ODD)
    fused = _check(model, feeds, tmp_path / "fused")
    unfused = _check(conv_bn_relu_block(channels=13, out_channels=13), feeds, tmp_path / "off",
                     fuse=False)
    assert len(fused) < len(unfused) + 3


@pytest.mark.parametrize("name", sorted(LIGHT_MODELS))
def test_light_model_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    """The whole model at 224×224, batch 1, random weights. Fits the suite's budget
    because blocks that differ only in shape share one kernel (build.hoist_sizes),
    so PoCL compiles a dozen kernels per model, not a hundred."""
    model = randomize_weights(light_model(name), seed=3)
    feeds = random_inputs(model, 4)
    model = with_static_inputs(model, feeds)
    # few copies of the weights alive at once (vgg19 has 550 MB): the oracle first, then ours
    expected = run_ort(model, feeds)
    graph = static_graph(model, feeds)
    del model
    compile_graph(graph, tmp_path)
    del graph
    compiled = load(tmp_path)
    assert_close(compiled.run(feeds), expected, rtol=1e-3, atol=1e-4)
    launches = compiled.plan["launches"]
    distinct = {la["kernel"] for la in launches}
    source = (tmp_path / "kernels.cl").read_text()
    assert source.count("__kernel") == len(distinct) < len(launches) < compiled.plan["operators"]
    for launch in launches:
        assert not all(op in LAYOUT_OPS for op in launch["ops"]), launch["ops"]
    print(f"{name}: {compiled.plan['operators']} operators, {len(launches)} kernels launched, "
          f"{len(distinct)} distinct")


def test_arena_tensors_are_offsets_into_one_buffer(tmp_path: Path) -> None:
    """Arena tensors reach kernels as the arena buffer plus an element offset, never as
    sub-buffers (NVIDIA's driver segfaults releasing those after the mha kernels ran)."""
    model = BLOCKS["mha"]()
    feeds = random_inputs(model, 1, dims=ODD)
    _check(model, feeds, tmp_path)
    compiled = load(tmp_path)
    arena = {n: t for n, t in compiled.plan["tensors"].items() if t["kind"] == "arena"}
    assert any(t["offset"] > 0 for t in arena.values())
    for name, info in arena.items():
        buffer, offset = compiled.buffers[name]
        assert buffer == compiled.arena and offset * 4 == info["offset"], name


@pytest.mark.parametrize("local, global_size", [(64, 65), (1 << 20, 1 << 20)])
def test_launch_the_device_cannot_run_is_an_error(tmp_path: Path, local: int,
                                                  global_size: int) -> None:
    model = conv_bn_relu_block()
    feeds = random_inputs(model, 1, dims=ODD)
    compile_graph(static_graph(with_static_inputs(model, feeds), feeds), tmp_path)
    plan_path = tmp_path / "plan.json"
    plan = json.loads(plan_path.read_text())
    plan["launches"][0].update({"local": local, "global": global_size})
    plan_path.write_text(json.dumps(plan))
    with pytest.raises(OpenClError, match="work-groups of"):
        load(tmp_path)


def test_each_launch_is_timed_alone(tmp_path: Path) -> None:
    """`dnnr bench` lists the slowest launches from these times."""
    model = BLOCKS["residual"]()
    compiled = _compile_and_check(model, random_inputs(model, 1, dims=ODD), tmp_path)
    seconds = compiled.time_launches(repeats=2)
    assert len(seconds) == len(compiled.plan["launches"]) and all(0 < s < 60 for s in seconds)
