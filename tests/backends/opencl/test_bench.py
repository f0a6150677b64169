"""`dnnr bench` times what `dnnr compile --target opencl` builds for the same device class."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from egraph_compiler.backends.opencl import KernelParams
from egraph_compiler.backends.opencl import bench as bench_module
from egraph_compiler.cli import main


def _conv_relu(path: Path) -> Path:
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], [0.01 * i for i in range(108)])
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("kernels", ["cpu", "gpu"])
def test_bench_builds_both_variants_with_compiles_kernel_parameters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        kernels: str) -> None:
    # `dnnr bench` once built with `KernelParams()` (sizes hoisted into arguments), not
    # the PoCL class's literals: MobileNetV3's fusion-off row ran 18 ms instead of 4.6
    built: list[KernelParams | None] = []
    build = bench_module.build_artefact

    def spy(plan, out_dir, params=None, selection=None):  # noqa: ANN001, ANN202
        built.append(params)
        return build(plan, out_dir, params, selection=selection)

    monkeypatch.setattr(bench_module, "build_artefact", spy)
    model = _conv_relu(tmp_path / "conv_relu.onnx")
    assert main(["bench", str(model), "--repeats", "1", "--opencl-kernels", kernels]) == 0
    assert built == [KernelParams.for_device(kernels)] * 2
    assert "max |ours - onnxruntime|" in capsys.readouterr().out
