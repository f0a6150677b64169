"""Register renaming inside a block (`rename.rename_block`): which values move, and
that a kernel packed with renaming computes what clang's code does under qemu."""

from __future__ import annotations

import numpy as np

from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.backends.hexagon.asm import parse_asm
from egraph_compiler.backends.hexagon.kernels import (
    ConvGeometry,
    QGemm,
    gemm_c,
    gemm_reference,
    scratch_sizes,
)
from egraph_compiler.backends.hexagon.machine import load_machine_model
from egraph_compiler.backends.hexagon.packer import PackOptions, format_asm, pack_asm
from egraph_compiler.backends.hexagon.program import (
    Program,
    Step,
    build_program,
    restrict_functions,
)
from egraph_compiler.backends.hexagon.quant import requant_from_scales
from egraph_compiler.backends.hexagon.rename import free_registers, rename_block

from .conftest import needs_toolchain

MODEL = load_machine_model()


def _block(packets: list[list[str]]) -> str:
    lines = ["f:"]
    for k, packet in enumerate(packets):
        lines += ["\t{", *(f"\t\t{text}" for text in packet), "\t}" + (" :endloop0" if k == len(packets) - 1 else "")]
    return "\n".join(lines) + "\n"


def _texts(block) -> list[list[str]]:
    return [[i.text for i in p.insns] for p in block.packets]


def test_only_killed_single_register_values_move():
    source = _block([
        ["r7 = memw(r6+#0)", "v10 = vmem(r5+#0)"],
        ["r8 = add(r7,#1)", "v3:2.h = vadd(v11:10.h,v13:12.h)"],  # v10 read in a pair: stays
        ["r7 = memw(r6+#4)", "memw(r6+#12) = r8"],  # kills the first r7, which moves
        ["memw(r6+#8) = r7", "r8 = add(r8,#2)"],  # the last r7 is live out; r8 += 2 pins both r8s
        ["if (p0) r8 = add(r7,#3)", "v10 = vmem(r5+#1)"],  # a conditional write: r8 stays
        ["r9 = add(r8,#1)", "r8 = add(r9,#1)"],  # reads the r9 from before this packet
    ])
    block = parse_asm(source, MODEL).blocks()[0]
    renamed = rename_block(block, frozenset({"r12", "r13", "v20"}), MODEL)
    expected = _texts(block)
    expected[0][0], expected[1][0] = "r12 = memw(r6+#0)", "r8 = add(r12,#1)"
    assert _texts(renamed) == expected
    assert renamed.packets[1].insns[0].uses == {"r12"}
    assert rename_block(block, frozenset(), MODEL) is block


def test_same_packet_reads_follow_the_value():
    source = _block([["r7 = add(r1,#1)", "memw(r6+#0) = r7.new", "r2 = add(r7,#5)"],
                     ["r7 = add(r1,#2)"], ["memw(r6+#4) = r7", "memw(r6+#8) = r2"]])
    renamed = rename_block(parse_asm(source, MODEL).blocks()[0], frozenset({"r12", "r13"}), MODEL)
    # The .new store reads the value defined in its packet; add(r7,#5) the one from before.
    assert _texts(renamed)[0] == ["r12 = add(r1,#1)", "memw(r6+#0) = r12.new", "r2 = add(r7,#5)"]
    # A value read by the write of the register's live-out value stays (one text, two values).
    chained = parse_asm(_block([["r7 = add(r1,#1)"], ["r7 = add(r7,#1)"]]), MODEL).blocks()[0]
    assert rename_block(chained, frozenset({"r12"}), MODEL) is chained


def test_calls_leave_no_free_registers():
    asm = parse_asm("f:\n\t{\n\t\tcall g\n\t}\n\t{\n\t\tr1 = add(r1,#1)\n\t}\nh:\n\t{\n\t\tr0 = add(r0,#1)\n\t}\n", MODEL)
    free = free_registers(asm)
    positions = [k for k, item in enumerate(asm.items) if not isinstance(item, str)]
    assert free[positions[0]] == free[positions[1]] == frozenset()
    assert "r0" not in free[positions[2]] and "r1" in free[positions[2]] and "r16" not in free[positions[2]]


@needs_toolchain
def test_renamed_gemm_loop_matches_the_reference(tmp_path):
    rng = np.random.default_rng(0)
    g = ConvGeometry(1, 256, 1, 96, (1, 1), out_hw=(256, 1))
    op = QGemm(g, rng.integers(-128, 128, (96, 48)).astype(np.int8), rng.integers(-999, 999, 48).astype(np.int32),
               requant_from_scales(np.array([1e-4]), 3), 7, "vrmpy")
    defs, call = gemm_c(op, "op0")
    pack, acc = scratch_sizes(op)
    program = Program({"x": 256 * 96, "y": 256 * 48}, ["x"], ["y"], [Step(defs, call, {"x": "x", "y": "y"})],
                      pack + 256, acc + 256)
    x = rng.integers(0, 256, (1, 256, 1, 96)).astype(np.uint8)
    result = build_program(program, tmp_path)
    assert result.fallback_blocks == 0
    assert toolchain.run_elf(result.elf, x.tobytes()) == gemm_reference(op, x).tobytes()
    # The loop body of this kernel is one that renaming improves for Algorithm 1 and the
    # local search (benchmarks/hexagon.py; the deadline schedules match it without).
    text = result.clang_asm.read_text()
    packed = {rename: format_asm(pack_asm(parse_asm(text, MODEL), MODEL, PackOptions(
        restrict_functions=restrict_functions(text), rename=rename, deadline=False))) for rename in (False, True)}
    assert packed[False] != packed[True]
    (tmp_path / "renamed.s").write_text(packed[True])
    toolchain.assemble(tmp_path / "renamed.s", tmp_path / "renamed.o")
    toolchain.link([tmp_path / "renamed.o"], tmp_path / "renamed.elf")
    assert toolchain.run_elf(tmp_path / "renamed.elf", x.tobytes()) == gemm_reference(op, x).tobytes()
