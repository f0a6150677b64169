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

from egraph_compiler.backends import hexagon
from egraph_compiler.backends.hexagon import gen_machine_model, toolchain
from egraph_compiler.backends.hexagon.asm import (
    AsmFile,
    Block,
    analyse,
    parse_asm,
    stack_derived_registers,
)
from egraph_compiler.backends.hexagon.idg import build_idg
from egraph_compiler.backends.hexagon.kernels import (
    ConvGeometry,
    QGemm,
    gemm_c,
    gemm_reference,
    scratch_sizes,
)
from egraph_compiler.backends.hexagon.machine import MODEL_PATH, load_machine_model
from egraph_compiler.backends.hexagon.packer import (
    MODES,
    PackOptions,
    _fits,
    estimate_schedule,
    format_asm,
    improve_by_moves,
    pack_asm,
    render_block,
)
from egraph_compiler.backends.hexagon.program import (
    Program,
    Step,
    build_program,
    restrict_functions,
)
from egraph_compiler.backends.hexagon.quant import requant_from_scales
from tests.modelzoo import transformer_encoder_block

from .conftest import needs_toolchain
from .test_models import _quantise, _static, _through_quant_rules

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


@settings(max_examples=25, deadline=None)
@given(sequence=st.lists(instruction, min_size=2, max_size=14))
def test_local_search_on_loop_bodies_keeps_dependencies_and_limits(tmp_path_factory, sequence):
    """The local search that `pack_block` runs on loop bodies (blocks ending in
    ``:endloop0``), from the input's packing: the same order, limit and llvm-mc checks."""
    source = "f:\n" + "".join(f"\t{{\n\t\t{text}\n\t}}{' :endloop0' if k == len(sequence) - 1 else ''}\n"
                              for k, text in enumerate(sequence))
    block = parse_asm(source, MODEL).blocks()[0]
    idg = build_idg(block)
    start = [[node] for node in idg.nodes]
    searched = improve_by_moves(start, estimate_schedule(start, idg, MODEL), idg, MODEL, PackOptions(), len(start))
    check_loop_body(sequence, render_block(searched, idg), tmp_path_factory)


def check_loop_body(sequence: list[str], packets: list, tmp_path_factory) -> None:
    """``packets`` (a packed loop body of ``sequence``) keeps the loop end, every dependency
    and the machine's packet limits, and llvm-mc assembles it."""
    assert packets[-1].endloop == ":endloop0"
    _check_order(sequence, [[i.text for i in p.insns] for p in packets])
    for packet in packets:
        insns = [analyse(i.text, MODEL) for i in packet.insns]
        assert len(insns) + sum(i.extenders for i in insns) <= 4, packet
        assert MODEL.packet_fits([i.klass for i in insns], sum(i.extenders for i in insns)), packet
    if toolchain.have_toolchain():
        path = tmp_path_factory.mktemp("asm") / "p.s"
        path.write_text(format_asm(AsmFile(["f:", Block(packets)])))
        assert toolchain.assembler_errors(path) == "", path.read_text()


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


@needs_toolchain
def test_every_block_of_the_quantised_encoder_packs_legally(tmp_path):
    """The encoder build mixes HVX kernels with the scalar float fallback (sfmpy
    multiply-accumulates, sfcmp.gt, convert_sf2w: slots 2-3 only). Every block, packed by
    us (sda) without the guard that keeps clang's packing, assembles; and the
    unguarded sda program computes what the guarded build does."""
    model = _static(transformer_encoder_block(d_model=64, heads=4, d_ff=128, seed=1), {"batch": 1, "seq": 16})
    artefact = hexagon.build(_through_quant_rules(_quantise(model, tmp_path, seed=2)), tmp_path / "artefact")
    assert " 0 blocks rejected by llvm-mc, 0 reverted" in artefact.report
    clang_text = (tmp_path / "artefact" / "model.clang.s").read_text()
    parsed = parse_asm(clang_text, MODEL)
    float_ops = [i.text for b in parsed.blocks() for p in b.packets for i in p.insns
                 if re.search(r"sfcmp\.gt|[-+]= sfmpy|convert_sf2w", i.text)]
    assert len(float_ops) > 10
    assert all(MODEL.classify(text).slots == (2, 3) for text in float_ops)
    # The build above checked its own choice (local search included); here every list
    # schedule, in sda only: the other modes cost 5 s each here and share the machine model.
    packed = pack_asm(parsed, MODEL, PackOptions(restrict_functions=restrict_functions(clang_text), guard=False,
                                                 local_search=False))
    repacked = [a for a, b in zip(packed.items, parsed.items, strict=True) if a is not b]
    assert len(repacked) == len(parsed.blocks()) > 100
    (tmp_path / "sda.s").write_text(format_asm(packed))
    assert toolchain.assembler_errors(tmp_path / "sda.s") == ""
    x = {"x": np.random.default_rng(3).standard_normal((1, 16, 64)).astype(np.float32)}
    guarded = hexagon.load(tmp_path / "artefact").run_quantized(x)
    toolchain.assemble(tmp_path / "sda.s", tmp_path / "sda.o")
    toolchain.link([tmp_path / "sda.o"], tmp_path / "artefact" / "model.elf")
    unguarded = hexagon.load(tmp_path / "artefact").run_quantized(x)
    assert guarded.keys() == unguarded.keys()
    for name, values in guarded.items():
        np.testing.assert_array_equal(unguarded[name], values, err_msg=name)


def test_stores_are_checked_in_their_rendered_new_value_form():
    """An HVX store needs a VA unit unless it stores a same-packet value (``.new``): a
    store that was ``.new`` in clang's packet loses that form when its producer goes
    elsewhere, and the packet must then hold its VA unit (llvm-mc: slot error)."""
    block = parse_asm("f:\n" + "".join(f"\t{{\n\t\t{p}\n\t}}\n" for p in (
        "v4.h = vsub(v13.h,v2.h)\n\t\tvmem(r6+#0) = v4.new", "v19:18.w = vmpy(v9.h,r3.h)",
        "v8.h = vsub(v12.h,v2.h)", "v25.h = vsub(v16.h,v2.h)")), MODEL).blocks()[0]
    idg = build_idg(block)
    by_text = {n.insns[0].text: n for n in idg.nodes}
    producer, store = by_text["v4.h = vsub(v13.h,v2.h)"], by_text["vmem(r6+#0) = v4.new"]
    others = [by_text[t] for t in ("v19:18.w = vmpy(v9.h,r3.h)", "v8.h = vsub(v12.h,v2.h)")]
    assert _fits([producer, store, *others], idg, MODEL)  # .new store: ST only
    assert not _fits([store, *others, by_text["v25.h = vsub(v16.h,v2.h)"]], idg, MODEL)  # ST + a VA unit


def _placement(packed: AsmFile) -> dict[str, int]:
    """Instruction text (a same-packet ``.cur``/``.new`` form written plain) → index of
    the packet holding it, over the file's blocks."""
    packets = [p for block in packed.blocks() for p in block.packets]
    return {re.sub(r"\.(cur|new)\b", "", insn.text): k for k, p in enumerate(packets) for insn in p.insns}


@pytest.mark.parametrize("mode", MODES)
def test_mem_noshuf_packets_keep_their_flag(mode):
    """A spill and its reload in one ``:mem_noshuf`` packet: the load sees the store. The
    packer wrote such packets back without the flag, so the load read the slot's old
    value (found by the vmpy depthwise kernel's requantisation of 144 channels:
    test_pad_concat.test_depthwise_vmpy_beyond_one_vector_matches_onnxruntime)."""
    spill = "\t{\n\t\tr0 = #0\n\t\tmemw(r29+#16) = r0\n\t\tr8 = memw(r29+#16)\n\t} :mem_noshuf\n"
    source = ("f:\n\t{\n\t\tr1 = add(r2,#4)\n\t}\n" + spill + "\t{\n\t\tr3 = add(r8,r1)\n\t}\n"
              "\t{\n\t\tr4 = add(r2,#8)\n\t}\n\t{\n\t\tjumpr r31\n\t}\n")
    parsed = parse_asm(source, MODEL)
    assert ":mem_noshuf" in format_asm(parsed)  # written back as read
    packed = pack_asm(parsed, MODEL, PackOptions(mode=mode, guard=False))
    flagged = [p for b in packed.blocks() for p in b.packets if p.mem_noshuf]
    assert len(flagged) == 1
    assert {"memw(r29+#16) = r0", "r8 = memw(r29+#16)"} <= {i.text for i in flagged[0].insns}
    assert format_asm(packed).count(":mem_noshuf") == 1


def test_restrict_keeps_spills_through_a_register_holding_a_stack_address():
    """Clang spills beyond a ``vmem`` offset's reach through ``r7 = add(r29,#2048)``, set
    in another block; in a restrict kernel such a spill and its reload (through r5) must
    stay ordered, while two distinct buffers' accesses stay free."""
    source = ("f:\n\t{\n\t\tr7 = add(r29,#2048)\n\t\tr5 = add(r29,#2048)\n\t}\n.LBB0_1:\n"
              "\t{\n\t\tvmem(r7+#-6) = v1\n\t}\n\t{\n\t\tvmem(r3+#0) = v2\n\t}\n"
              "\t{\n\t\tv4 = vmem(r2+#0)\n\t}\n\t{\n\t\tv3 = vmem(r5+#-6)\n\t}\n"
              "\t{\n\t\tv6.w = vadd(v3.w,v4.w)\n\t}\n\t{\n\t\tjumpr r31\n\t}\n")
    parsed = parse_asm(source, MODEL)
    every = [i for b in parsed.blocks() for p in b.packets for i in p.insns]
    assert {"r5", "r7"} <= stack_derived_registers(every)
    body = parsed.blocks()[1]
    idg = build_idg(body, restrict=True, stack_registers=stack_derived_registers(every))
    by_text = {n.insns[0].text: n.index for n in idg.nodes}
    hard = {(e.src, e.dst) for e in idg.edges if e.kind == "hard"}
    assert (by_text["vmem(r7+#-6) = v1"], by_text["v3 = vmem(r5+#-6)"]) in hard
    assert (by_text["vmem(r3+#0) = v2"], by_text["v4 = vmem(r2+#0)"]) not in hard  # restrict: distinct buffers
    packed = pack_asm(parsed, MODEL, PackOptions(restrict_functions=frozenset({"f"}), guard=False))
    place = _placement(packed)
    assert place["vmem(r7+#-6) = v1"] < place["v3 = vmem(r5+#-6)"]
