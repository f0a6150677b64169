"""The packer's deadline schedules and packet compaction (`packer.deadline_schedules`,
`packer.eliminate_packets`), the steady-state estimate of loop bodies, and the frame
instructions in clang's register-pair form.

Property test: random legal instruction sequences as loop bodies; every schedule keeps
every dependency, fits the machine model and assembles. Under qemu: the element-wise
kernels whose loop bodies the deadline schedules re-pack compute what the reference does."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.backends.hexagon.asm import Block, analyse, parse_asm
from egraph_compiler.backends.hexagon.eltwise import QBinary, binary_c, binary_reference
from egraph_compiler.backends.hexagon.estimate import estimate_block, estimate_steady
from egraph_compiler.backends.hexagon.idg import build_idg
from egraph_compiler.backends.hexagon.machine import load_machine_model
from egraph_compiler.backends.hexagon.packer import (
    PackOptions,
    deadline_schedules,
    eliminate_packets,
    pack_asm,
    render_block,
    schedule_by_deadline,
)
from egraph_compiler.backends.hexagon.program import (
    Program,
    Step,
    build_program,
    restrict_functions,
)
from egraph_compiler.backends.hexagon.quant import ELEMENTWISE_SHIFT

from .conftest import needs_toolchain
from .test_packer import _check_order, check_loop_body, instruction

MODEL = load_machine_model()


@settings(max_examples=25, deadline=None)
@given(sequence=st.lists(instruction, min_size=2, max_size=14), slack=st.integers(0, 6))
def test_deadline_schedules_keep_dependencies_and_limits(tmp_path_factory, sequence, slack):
    source = "f:\n" + "".join(f"\t{{\n\t\t{text}\n\t}}{' :endloop0' if k == len(sequence) - 1 else ''}\n"
                              for k, text in enumerate(sequence))
    block = parse_asm(source, MODEL).blocks()[0]
    idg = build_idg(block)
    options = PackOptions()
    schedules = [schedule_by_deadline(idg, MODEL, options, slack),
                 eliminate_packets([[node] for node in idg.nodes], idg, MODEL, options, 1),
                 *deadline_schedules(idg, MODEL, options, len(sequence))]
    for schedule in schedules:
        assert sorted(n.index for p in schedule for n in p) == list(range(len(idg.nodes)))
        check_loop_body(sequence, render_block(schedule, idg), tmp_path_factory)


def test_compaction_fills_the_packets_a_latency_schedule_leaves_half_empty():
    # Two independent load → add chains, one instruction per packet: four packets where
    # two suffice (one HVX load a packet, the other load sharing its user's as ``.cur``).
    texts = ["v0 = vmem(r0+#0)", "v1.w = vadd(v0.w,v0.w)", "v2 = vmem(r1+#0)", "v3.w = vadd(v2.w,v2.w)"]
    block = parse_asm("f:\n" + "".join(f"\t{{\n\t\t{t}\n\t}}\n" for t in texts), MODEL).blocks()[0]
    idg = build_idg(block, restrict=True)
    start = [[node] for node in idg.nodes]
    compacted = eliminate_packets(start, idg, MODEL, PackOptions(), target_packets=2)
    assert len(compacted) == 2
    _check_order(texts, [[i.text for i in p.insns] for p in render_block(compacted, idg)])


def test_steady_state_counts_loop_carried_latency():
    # v0 is loaded in the last packet and read in the first: a cold pass does not wait
    # for it, the next iteration does.
    body = "f:\n\t{\n\t\tv1.w = vadd(v0.w,v2.w)\n\t}\n\t{\n\t\tv0 = vmem(r0+#0)\n\t} :endloop0\n"
    block = parse_asm(body, MODEL).blocks()[0]
    load, add = (analyse(t, MODEL).klass for t in ("v0 = vmem(r0+#0)", "v1.w = vadd(v0.w,v2.w)"))
    assert estimate_block(block, MODEL) == 2
    assert estimate_steady(block.packets, MODEL) == 1 + MODEL.distance(load, add) > 2


def test_frame_instructions_in_register_pair_form():
    """clang writes ``r31:30 = deallocframe(r30):raw``: a slot-0 load that also writes SP
    (a stack access after it reads the new frame). Two ``memd`` loads and it: no packet."""
    frame = analyse("r31:30 = deallocframe(r30):raw", MODEL)
    assert frame.klass.name == "scalar_frame" and frame.klass.slots == (0,)
    assert {"r29", "r30", "r31"} <= frame.defs and frame.loads
    loads = [analyse(t, MODEL) for t in ("r23:22 = memd(r29+#0)", "r17:16 = memd(r29+#24)")]
    assert not MODEL.packet_fits([i.klass for i in (*loads, frame)])
    ret = analyse("if (p0.new) r31:30 = dealloc_return(r30):t:raw", MODEL)
    assert {"r0", "r29"} <= ret.uses and "r29" in ret.defs and ret.control


@needs_toolchain
def test_deadline_packed_elementwise_kernels_match_the_reference(tmp_path):
    """Add and Mul with requantisation: their loop bodies are ones the deadline schedules
    re-pack (benchmarks/hexagon.py); the guarded build keeps results and packet counts."""
    rng = np.random.default_rng(5)
    size = 1000
    one = 1 << ELEMENTWISE_SHIFT
    a, b = (rng.integers(0, 256, size).astype(np.uint8) for _ in range(2))
    ops = [QBinary("Add", (size,), (size,), (size,), 120, 30, (round(0.7 * one), round(1.3 * one)), 128),
           QBinary("Mul", (size,), (size,), (size,), 120, 30, (round(0.01 * one),), 60)]
    steps = [Step(*binary_c(op, f"kernel_{op.kind.lower()}"), {"a": "a", "b": "b", "y": op.kind}) for op in ops]
    program = Program({"a": size, "b": size, "Add": size, "Mul": size}, ["a", "b"], ["Add", "Mul"], steps)
    result = build_program(program, tmp_path)
    assert result.fallback_blocks == 0
    raw = toolchain.run_elf(result.elf, a.tobytes() + b.tobytes())
    expected = b"".join(binary_reference(op, a, b).tobytes() for op in ops)
    assert raw == expected
    text = result.clang_asm.read_text()
    without = pack_asm(parse_asm(text, MODEL), MODEL, PackOptions(restrict_functions=restrict_functions(text),
                                                                  deadline=False))
    packed = parse_asm(result.packed_asm.read_text(), MODEL)
    clang = parse_asm(text, MODEL)
    loops = [k for k, item in enumerate(clang.items) if isinstance(item, Block) and item.packets[-1].endloop]
    deadline_won = 0
    for k in loops:
        ours, theirs, alone = packed.items[k], clang.items[k], without.items[k]
        assert isinstance(ours, Block) and isinstance(theirs, Block) and isinstance(alone, Block)
        assert len(ours.packets) <= len(theirs.packets)
        assert estimate_steady(ours.packets, MODEL) <= estimate_steady(theirs.packets, MODEL)
        deadline_won += estimate_steady(ours.packets, MODEL) < estimate_steady(alone.packets, MODEL)
    assert deadline_won >= 1
