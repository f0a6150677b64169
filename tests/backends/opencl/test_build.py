"""The artefact writer: integer literals become size arguments, so blocks that differ
only in shape share one compiled kernel (and still match onnxruntime)."""

from __future__ import annotations

from pathlib import Path

from egraph_compiler.backends.opencl import compile_graph, load
from egraph_compiler.backends.opencl.build import hoist_sizes
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import assert_close, conv_bn_relu_block, random_inputs, run_ort

SOURCE = """#define TC 16
__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void KNAME(__global const float* in0_buf, const ulong in0_off) {
  const int gid = get_global_id(0);
  if (gid >= 3136) return;
  const float16 v = vload16(0, in0 + 56*gid + 1);
  const float x = 1.5f * 1e-05f + 2.0e+10f + 1.0 + v.s0 + ((long)2147483648) + 0 + TC;
  float tile[4]; tile[3] = x;
#if 64 > 2
  switch (gid) { case 7: break; }
#endif
}
"""


def test_hoist_sizes_takes_only_integer_literals_of_the_body() -> None:
    hoisted, sizes = hoist_sizes(SOURCE, tensor_args=1)
    assert sizes == (3136, 56)
    header, body = hoisted.split(") {\n", 1)
    assert header.endswith("const ulong in0_off, const int s0, const int s1")
    assert "#define TC 16" in header and "reqd_work_group_size(64, 1, 1)" in header
    assert "if (gid >= s0) return;" in body
    # vector types, floats, 0/1 and values beyond int stay as written
    assert "vload16(0, in0 + s1*gid + 1)" in body
    assert "1.5f * 1e-05f + 2.0e+10f + 1.0 + v.s0 + ((long)2147483648) + 0 + TC" in body
    # constants the language requires, and preprocessor lines, stay too
    assert "float tile[4]; tile[3] = x;\n#if 64 > 2\n  switch (gid) { case 7: break; }" in body


def test_hoist_sizes_keeps_literals_past_the_argument_limit() -> None:
    assert hoist_sizes(SOURCE, tensor_args=64) == (SOURCE, ())  # 64 × 16 B is all 1024


def _compile(size: int, channels: int, out_dir: Path) -> dict:
    model = conv_bn_relu_block(channels=channels, out_channels=channels)
    feeds = random_inputs(model, 1, dims={"batch": 1, "height": size, "width": size})
    model = with_static_inputs(model, feeds)
    compile_graph(static_graph(model, feeds), out_dir)
    compiled = load(out_dir)
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-3, atol=1e-4)
    return compiled.plan


def test_blocks_differing_only_in_shape_share_a_kernel(tmp_path: Path) -> None:
    # two channel tiles each: same code (maps wider than 16 columns, where the CPU's
    # shape-specialised conv-vec is not offered: cpu_window.py)
    small = _compile(18, 20, tmp_path / "small")
    large = _compile(24, 24, tmp_path / "large")
    assert [la["kernel"] for la in small["launches"]] == [la["kernel"] for la in large["launches"]]
    assert [la["sizes"] for la in small["launches"]] != [la["sizes"] for la in large["launches"]]


def test_symbolic_hoist_keeps_plain_literals_and_gives_one_argument_per_derivation() -> None:
    """In a symbolic build only sizes derived from the dims become arguments: a plain
    literal is the same at every shape (the OpenCL compiler folds it), and the same
    derivation written twice is one argument (its divisions are shared)."""
    from egraph_compiler.ir.dims import DimExpr
    from egraph_compiler.shapes import symint

    seq = symint.SymInt(9, DimExpr.symbol("seq"))
    rows = seq * 2
    with symint.tracking():
        text = (f"void KNAME(__global const float* in0_buf, const ulong in0_off) {{\n"
                f"  const float a = in0[32*((o)/{seq}) + ((o)%{seq})];\n"
                f"  if (o >= {rows}) return;\n}}\n")
        hoisted, sizes = hoist_sizes(text, tensor_args=1)
    assert [str(symint.expr_of(s)) for s in sizes] == ["seq", "2*seq"]
    assert "in0[32*((o)/s0) + ((o)%s0)]" in hoisted and "if (o >= s1) return;" in hoisted
    assert hoisted.count("const int s") == 2
