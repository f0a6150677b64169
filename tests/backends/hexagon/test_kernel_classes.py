"""The Hexagon kernel classes (`backends/hexagon/kinds.py`, issue 11 item 4): each kernel
is one registered class, and everything a program needs of it — C, buffer slots, scratch,
the NumPy reference — comes from that class. One program is built here through the
classes alone (as `backends.hexagon._program` builds a model's) and its outputs under qemu
must equal each class's reference bit for bit."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from egraph_compiler.backends.hexagon import kinds, toolchain
from egraph_compiler.backends.hexagon.eltwise import QBinary, QClip, QDepthwise, QPool
from egraph_compiler.backends.hexagon.fallback import FLOAT_C, Dequantize, Gather, Quantize
from egraph_compiler.backends.hexagon.kernels import ConvGeometry, QGemm, QMatMulAct
from egraph_compiler.backends.hexagon.lower import IntOp, QConcatRq
from egraph_compiler.backends.hexagon.program import Program, Step, build_program
from egraph_compiler.backends.hexagon.quant import ELEMENTWISE_SHIFT, requant_from_scales

from .conftest import needs_toolchain

LOWER = Path(kinds.__file__).with_name("lower.py")


def _geometry(h: int, w: int, c: int, k: int, s: int, p: int) -> ConvGeometry:
    return ConvGeometry(1, h, w, c, (k, k), (s, s), (p, p), (1, 1), ((h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1))


def test_every_kind_the_lowering_makes_is_registered() -> None:
    """Each ``IntOp(name, "<kind>", …)`` in lower.py names a registered class."""
    made = {call.args[1].value for call in ast.walk(ast.parse(LOWER.read_text()))
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "IntOp"
            and len(call.args) > 1 and isinstance(call.args[1], ast.Constant)}
    assert made, "no IntOp construction found in lower.py"
    assert made <= set(kinds.KERNELS), f"kinds without a kernel class: {sorted(made - set(kinds.KERNELS))}"


def test_a_kind_paired_with_another_kinds_spec_is_refused() -> None:
    clip = QClip(8, 0, 255)
    assert kinds.kernel(IntOp("c", "clip", clip, ("x",), "y")).kind == "clip"
    with pytest.raises(TypeError, match="kind 'gemm' and a QClip spec"):
        kinds.kernel(IntOp("c", "gemm", clip, ("x",), "y"))


def test_only_the_kernels_with_an_instruction_family_offer_options() -> None:
    chosen = {kind for kind, k in kinds.KERNELS.items() if k.has_options}
    assert chosen == {kind for kind, k in kinds.KERNELS.items() if k.spec_type in (QGemm, QMatMulAct, QDepthwise)}


def _cases(rng: np.random.Generator) -> list[tuple[object, list[np.ndarray]]]:
    """(spec, inputs) per kernel with a reference; together they cover every such kind."""
    g = _geometry(6, 5, 7, 3, 1, 1)
    ms = (round(0.7 * 2**ELEMENTWISE_SHIFT), round(1.3 * 2**ELEMENTWISE_SHIFT))
    u8 = lambda *shape: rng.integers(0, 256, shape).astype(np.uint8)  # noqa: E731
    return [
        (QGemm(g, rng.integers(-128, 128, (g.depth, 9)).astype(np.int8), rng.integers(-9999, 9999, 9).astype(np.int32),
               requant_from_scales(rng.uniform(2e-5, 4e-4, 9), 90), 13), [u8(1, 6, 5, 7)]),
        (QMatMulAct(2, 5, 12, 7, 100, 128, requant_from_scales(np.array([3e-4]), 60)), [u8(2, 5, 12), u8(2, 12, 7)]),
        (QDepthwise(g, rng.integers(-128, 128, (9, 7)).astype(np.int8), rng.integers(-999, 999, 7).astype(np.int32),
                    requant_from_scales(rng.uniform(1e-3, 5e-3, 7), 100), 17), [u8(1, 6, 5, 7)]),
        (QBinary("Add", (2, 3, 5), (3, 1), (2, 3, 5), 120, 30, ms, 128), [u8(2, 3, 5), u8(3, 1)]),
        (QClip(300, 40, 200), [u8(300)]),
        (QPool("MaxPool", _geometry(9, 7, 6, 3, 2, 1)), [u8(1, 9, 7, 6)]),
        (QConcatRq(4, (3, 5), (10, 200), ms, 128), [u8(4, 3), u8(4, 5)]),
        (Gather(rng.permutation(60).astype(np.int32), 1), [u8(60)]),
    ]


@needs_toolchain
def test_a_program_built_from_the_classes_matches_their_references(tmp_path) -> None:
    rng = np.random.default_rng(11)
    program = Program(preamble=FLOAT_C)
    expected: dict[str, np.ndarray] = {}
    feeds: list[np.ndarray] = []
    pack = acc = 128
    for index, (spec, inputs) in enumerate(_cases(rng)):
        names = [f"in{index}_{i}" for i in range(len(inputs))]
        op = IntOp(f"op{index}", next(k for k, c in kinds.KERNELS.items() if c.spec_type is type(spec)), spec,
                   tuple(names), f"out{index}")
        kernel = kinds.kernel(op)
        defs, call = kernel.emit(spec, f"k{index}_{op.kind}")
        program.steps.append(Step(defs, call, {"y": op.output} | dict(zip(kernel.operands(op), names, strict=True))))
        p, a = kernel.scratch(spec)
        pack, acc = max(pack, p), max(acc, a)
        for name, array in zip(names, inputs, strict=True):
            program.buffers[name] = array.nbytes
            program.inputs.append(name)
            feeds.append(array)
        expected[op.output] = kernel.reference(spec, *inputs).astype(np.uint8).reshape(-1)
        program.buffers[op.output] = expected[op.output].size
        program.outputs.append(op.output)
    # uint8 → float → uint8 through the float boundary's two classes
    q = boundary_input = rng.integers(0, 256, 97).astype(np.uint8)
    dequant, quant = Dequantize(97, 131, 0.05), Quantize(97, 120, 0.07)
    for op in (IntOp("dq", "dequant", dequant, ("fin",), "fmid"), IntOp("q", "quant", quant, ("fmid",), "fout")):
        kernel = kinds.kernel(op)
        defs, call = kernel.emit(op.spec, f"k_{op.kind}")
        program.steps.append(Step(defs, call, {"y": op.output, "x": op.inputs[0]}))
        q = kernel.reference(op.spec, q)
    program.buffers |= {"fin": 97, "fmid": 97 * 4, "fout": 97}
    program.inputs.append("fin")
    program.outputs.append("fout")
    expected["fout"] = q.reshape(-1)
    program.scratch_pack, program.scratch_acc = pack + 256, acc + 256

    result = build_program(program, tmp_path)
    assert result.elf is not None
    feeds.append(boundary_input)
    raw = toolchain.run_elf(result.elf, b"".join(np.ascontiguousarray(a).tobytes() for a in feeds))
    offset = 0
    for name in program.outputs:
        got = np.frombuffer(raw[offset:offset + expected[name].size], dtype=np.uint8)
        offset += expected[name].size
        np.testing.assert_array_equal(got, expected[name], err_msg=f"{name}: device and class reference differ")
