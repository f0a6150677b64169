"""2.5D memory: depthwise weights chosen as image2d_t by the cost model run on PoCL like the
forced-buffer run and onnxruntime; devices without images (or too small) fall back."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from egraph_compiler.backends.opencl import KernelParams, compile_graph, load
from egraph_compiler.backends.opencl.images import choose, image_mode
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import assert_close, depthwise_separable_block, random_inputs, run_ort


def test_depthwise_weights_are_images_and_buffers_give_the_same_result(tmp_path: Path) -> None:
    model = depthwise_separable_block(channels=13, out_channels=16)
    feeds = random_inputs(model, 0, dims={"batch": 2, "height": 14, "width": 13})
    model = with_static_inputs(model, feeds)
    # the image path itself: images.py's reuse rule decides (layouts "per-tensor": no
    # `select` stage), since the selection prices images out on both device classes with
    # today's measured prices (PoCL 1.36×, an H200 1.09–1.48× a buffer read:
    # tests/select/test_opencl_options.py)
    artefact = compile_graph(static_graph(model, feeds), tmp_path, params=KernelParams.for_device("gpu"),
                             layouts="per-tensor")
    plan = json.loads((tmp_path / "plan.json").read_text())
    # the depthwise weights [13, 1, 3, 3], read by the depthwise kernel as 39 rows of 3
    (name, info), = plan["images"].items()
    assert plan["launches"][0]["variant"].startswith("depthwise")
    assert (info["width"], info["height"]) == (3, 39) and "texture cache" in info["reason"]
    assert artefact.images == {name: info["reason"]}  # what the compile report shows
    assert "DNNR_IMAGE_ARG" in (tmp_path / "kernels.cl").read_text()
    expected = run_ort(model, feeds)
    default = load(tmp_path)
    print(f"{default.device.name}: CL_DEVICE_IMAGE_SUPPORT = {default.device.image_support}; "
          f"default: {default.images_note}")
    images = load(tmp_path, images=True)  # PoCL's CPU device supports images: run them
    assert images.images_on == bool(images.device.image_support)
    buffers = load(tmp_path, images=False)
    assert not buffers.images_on and buffers.images_note == "buffers forced"
    with_images, with_buffers = images.run(feeds), buffers.run(feeds)
    assert_close(with_images, expected, rtol=1e-3, atol=1e-4)
    for output, value in with_buffers.items():
        np.testing.assert_array_equal(value, with_images[output])


def test_fallback_to_buffers() -> None:
    tensors = {"w": {"width": 4096, "height": 9}}
    no_images = SimpleNamespace(name="dev", image_support=0, image2d_max_width=0,
                                image2d_max_height=0)
    assert image_mode(no_images, tensors, None) == (
        False, "dev has no image support (CL_DEVICE_IMAGE_SUPPORT = 0)")
    small = SimpleNamespace(name="dev", image_support=1, image2d_max_width=2048,
                            image2d_max_height=2048, type=4)
    on, note = image_mode(small, tensors, None)
    assert not on and "exceed dev's image limits 2048x2048" in note
    gpu = SimpleNamespace(name="dev", image_support=1, image2d_max_width=8192,
                          image2d_max_height=8192, type=4)  # CL_DEVICE_TYPE_GPU
    assert image_mode(gpu, tensors, None)[0]
    cpu = SimpleNamespace(**{**vars(gpu), "type": 2})
    assert image_mode(cpu, tensors, None) == (
        False, "dev is a CPU device: buffers (images=True forces images)")
    assert image_mode(cpu, tensors, True)[0]
    large = gpu
    assert image_mode(large, {}, None) == (False, "no image tensors in this artefact")


def test_cost_model() -> None:
    assert choose((1, 3, 3, 16), 16 * 9 * 8)[0]  # read 8 times per element
    use, reason = choose((1, 3, 3, 16), 16 * 9 * 2)
    assert not use and "no reuse" in reason
    use, reason = choose((2, 10000), 10**9)
    assert not use and "exceeds the guaranteed image extent" in reason
