"""Shared helpers: build one program from steps and run it under qemu."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.backends.hexagon.program import Program, Step, build_program

needs_toolchain = pytest.mark.skipif(
    not toolchain.have_toolchain(), reason="clang, ld.lld, llvm-mc-14 and qemu-hexagon are required"
)


def run_steps(tmp: Path, inputs: dict[str, np.ndarray], outputs: dict[str, int],
              steps: list[Step], scratch: tuple[int, int] = (1 << 16, 1 << 16), mode: str = "sda") -> dict[str, np.ndarray]:
    buffers = {name: array.nbytes for name, array in inputs.items()} | outputs
    program = Program(buffers=buffers, inputs=list(inputs), outputs=list(outputs), steps=steps,
                      scratch_pack=scratch[0] + 256, scratch_acc=scratch[1] + 256)
    result = build_program(program, tmp, mode=mode)
    assert result.elf is not None
    # Every packet our packer produced is legal: llvm-mc diagnosed none (it may still crash
    # on a few blocks — an llvm-mc 14 bug, counted in crash_blocks — which fall back).
    assert result.fallback_blocks == 0, f"{result.fallback_blocks} packed blocks rejected by llvm-mc"
    stdin = b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values())
    raw = toolchain.run_elf(result.elf, stdin)
    out, offset = {}, 0
    for name, size in outputs.items():
        out[name] = np.frombuffer(raw[offset:offset + size], dtype=np.uint8)
        offset += size
    return out
