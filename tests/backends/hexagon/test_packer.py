"""The SDA packer: dependency order, slot/unit limits, legality (llvm-mc), results.

Property test: random legal instruction sequences (one instruction per packet, so
sequential semantics) are packed; every read-after-write, double write and memory
order must be kept (a shared packet only through ``.new``/``.cur``), every
write-after-read must not be reversed, every packet must fit the machine model, and
llvm-mc must accept the output."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler.backends.hexagon import gen_machine_model, toolchain
from egraph_compiler.backends.hexagon.asm import analyse, parse_asm
from egraph_compiler.backends.hexagon.kernels import (
    ConvGeometry,
    QGemm,
    gemm_c,
    gemm_reference,
    scratch_sizes,
)
from egraph_compiler.backends.hexagon.machine import MODEL_PATH, load_machine_model
from egraph_compiler.backends.hexagon.packer import MODES, PackOptions, format_asm, pack_asm
from egraph_compiler.backends.hexagon.program import Program, Step, build_program
from egraph_compiler.backends.hexagon.quant import requant_from_scales

from .conftest import needs_toolchain

MODEL = load_machine_model()

TEMPLATES = [
    "r{a} = add(r{b},#{i})",
    "r{a} = asl(r{b},#2)",
    "r{a} = memw(r{b}+#{o})",
    "memw(r{b}+#{o}) = r{a}",
    "v{a}.b = vadd(v{b}.b,v{c}.b)",
    "v{a} = vmem(r{b}+#{k})",
    "vmem(r{b}+#{k}) = v{a}",
    "v{a}.w += vrmpy(v{b}.ub,r{c}.b)",
    "v{e1}:{e}.h = vmpy(v{b}.ub,r{c}.b)",
    "p0 = cmp.gt(r{a},#{i})",
    "if (p0) r{a} = add(r{b},#1)",
]

instruction = st.builds(
    lambda t, a, b, c, e, i, o, k: TEMPLATES[t].format(a=a, b=b, c=c, e=2 * e, e1=2 * e + 1, i=i, o=4 * o, k=k),
    st.integers(0, len(TEMPLATES) - 1), st.integers(0, 5), st.integers(0, 5), st.integers(0, 5),
    st.integers(0, 2), st.integers(0, 9), st.integers(0, 3), st.integers(0, 3),
)


def _strip(text: str) -> str:
    return re.sub(r"\.(new|cur)\b", "", text)


def _check_order(sequence: list[str], packets: list[list[str]]) -> None:
    where = {}
    rendered = {}
    for p, packet in enumerate(packets):
        for text in packet:
            where.setdefault(_strip(text), []).append(p)
            rendered.setdefault(_strip(text), []).append(text)
    place = [where[_strip(t)].pop(0) for t in sequence]
    shown = [rendered[_strip(t)].pop(0) for t in sequence]
    insns = [analyse(t, MODEL) for t in sequence]
    for j, b in enumerate(insns):
        for reg in b.uses:
            writers = [i for i in range(j) if reg in insns[i].defs]
            if writers:
                i = writers[-1]
                same_packet_form = f"{reg}.new" in shown[j] or (f"{reg}.cur" in shown[i])
                assert place[i] < place[j] or (place[i] == place[j] and same_packet_form), (sequence[i], sequence[j])
        for i in range(j):
            a = insns[i]
            if a.defs & b.defs:
                assert place[i] < place[j], ("double write", sequence[i], sequence[j])
            if a.uses & b.defs:
                assert place[i] <= place[j], ("read moved after a later write", sequence[i], sequence[j])
            if (a.stores and (b.loads or b.stores)) or (a.loads and b.stores):
                assert place[i] < place[j], ("memory order", sequence[i], sequence[j])


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=25, deadline=None)
@given(sequence=st.lists(instruction, min_size=1, max_size=14))
def test_random_sequences_keep_dependencies_and_limits(tmp_path_factory, mode, sequence):
    source = "f:\n" + "".join(f"\t{{\n\t\t{text}\n\t}}\n" for text in sequence) + "\t{\n\t\tjumpr r31\n\t}\n"
    packed = pack_asm(parse_asm(source, MODEL), MODEL, PackOptions(mode=mode, guard=False))
    block_packets = [p for block in packed.blocks() for p in block.packets]
    packets = [[i.text for i in p.insns if i.text != "jumpr r31"] for p in block_packets]
    _check_order(sequence, [p for p in packets])
    for packet in block_packets:
        insns = [analyse(i.text, MODEL) for i in packet.insns]
        assert MODEL.packet_fits([i.klass for i in insns], sum(i.extenders for i in insns)), packet
    if toolchain.have_toolchain():
        path = tmp_path_factory.mktemp("asm") / "p.s"
        path.write_text(format_asm(packed))
        assert toolchain.assembler_errors(path) == "", format_asm(packed)


def test_soft_dependencies_share_packets_only_in_sda_modes():
    # load → use → store chains: soft edges (.cur load, .new store) everywhere.
    body = "".join(f"\t{{\n\t\tv{i} = vmem(r{i}+#0)\n\t}}\n\t{{\n\t\tv{i}.b = vadd(v{i}.b,v{i}.b)\n\t}}\n"
                   f"\t{{\n\t\tvmem(r{i}+#1) = v{i}\n\t}}\n" for i in range(3))
    source = "f:\n" + body
    counts = {}
    for mode in MODES:
        packed = pack_asm(parse_asm(source, MODEL), MODEL, PackOptions(mode=mode, guard=False))
        text = format_asm(packed)
        counts[mode] = text.count("{")
        if mode == "soft-as-hard":
            assert ".new" not in text and ".cur" not in text
    assert counts["soft-as-none"] <= counts["sda"] <= counts["soft-as-hard"]
    assert counts["soft-as-none"] < counts["soft-as-hard"]


def test_machine_model_is_regenerated_from_the_excerpt(tmp_path):
    out = tmp_path / "machine.json"
    gen_machine_model.main([str(out)])
    assert out.read_text() == MODEL_PATH.read_text(), "run python -m egraph_compiler.backends.hexagon.gen_machine_model"


@needs_toolchain
def test_repacking_never_changes_results(tmp_path):
    rng = np.random.default_rng(3)
    g = ConvGeometry(1, 7, 9, 10, (3, 3), (1, 1), (1, 1), (1, 1), (7, 9))
    op = QGemm(g, rng.integers(-128, 128, (90, 11)).astype(np.int8), rng.integers(-999, 999, 11).astype(np.int32),
               requant_from_scales(np.array([3e-4]), 9), 5, "vrmpy")
    x = rng.integers(0, 256, (1, 7, 9, 10)).astype(np.uint8)
    defs, call = gemm_c(op, "op0")
    pack, acc = scratch_sizes(op)
    program = Program({"x": x.size, "y": g.rows * 11}, ["x"], ["y"], [Step(defs, call, {"x": "x", "y": "y"})],
                      pack + g.rows * g.depth + 256, acc + 256)
    outputs = {}
    for mode in ("clang", *MODES):
        result = build_program(program, tmp_path / mode, mode=mode if mode != "clang" else "sda", repack=mode != "clang")
        assert result.fallback_blocks == 0
        outputs[mode] = toolchain.run_elf(result.elf, x.tobytes())
        if mode != "clang":
            assert result.packed_asm.read_text() != result.clang_asm.read_text()
    expected = gemm_reference(op, x).tobytes()
    for mode, raw in outputs.items():
        assert raw == expected, mode
