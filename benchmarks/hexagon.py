"""Hexagon benchmark: GEMM kernels per instruction family and shape (prints, no asserts).

For each kernel × shape: static packets of the innermost loop body and executed packets
of the kernel function (``qemu-hexagon -singlestep -d exec,nochain -dfilter``) for
clang's own packing and for our packer in modes sda / soft-as-hard / soft-as-none
(unguarded) and sda+guard (what ``build`` uses: a block keeps clang's packing unless
ours has no more packets and fewer estimated cycles),
estimated cycles of the loop bodies from the machine model, and the same GEMM written
as plain C loops compiled by ``clang -O3 -mhvx`` (auto-vectorised).

    python benchmarks/hexagon.py [--quick]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.backends.hexagon.asm import parse_asm
from egraph_compiler.backends.hexagon.estimate import estimate_block
from egraph_compiler.backends.hexagon.kernels import ConvGeometry, QGemm, gemm_c, scratch_sizes
from egraph_compiler.backends.hexagon.machine import load_machine_model
from egraph_compiler.backends.hexagon.packer import MODES, PackOptions, format_asm, pack_asm
from egraph_compiler.backends.hexagon.program import Program, Step, restrict_functions
from egraph_compiler.backends.hexagon.quant import requant_from_scales

SHAPES = [(128, 64, 32), (100, 27, 16), (256, 96, 48)]  # (M, K, N); 100×27 is ragged
QUICK = [(128, 64, 32)]

PLAIN_C = """
void __attribute__((noinline)) kernel_plain(const u8 *restrict x, const i8 *restrict w, i32 *restrict acc) {{
  for (int m = 0; m < {m}; m++)
    for (int n = 0; n < {n}; n++) {{
      i32 a = 0;
      for (int k = 0; k < {k}; k++) a += (i32)x[m * {k} + k] * w[k * {n} + n];
      acc[m * {n} + n] = a;
    }}
}}
static i8 plain_w[{k} * {n}];
static i32 plain_acc[{m} * {n}];
"""


def _function_blocks(asm_text: str, function: str):
    model = load_machine_model()
    parsed = parse_asm(asm_text, model)
    inside, blocks = False, []
    for item in parsed.items:
        if isinstance(item, str):
            if item.startswith(f"{function}:"):
                inside = True
            elif inside and item.startswith(".Lfunc_end"):
                break
        elif inside:
            blocks.append(item)
    return blocks, model


def loop_stats(asm_text: str, function: str) -> tuple[int, int]:
    """(packets, estimated cycles) of the innermost loop bodies (blocks ending in :endloop0)."""
    blocks, model = _function_blocks(asm_text, function)
    loops = [b for b in blocks if b.packets and b.packets[-1].endloop]
    body = max(loops, key=lambda b: len(b.packets)) if loops else max(blocks, key=lambda b: len(b.packets))
    return len(body.packets), estimate_block(body, model)


def _link(asm_text: str, out: Path) -> Path:
    out.with_suffix(".s").write_text(asm_text)
    toolchain.assemble(out.with_suffix(".s"), out.with_suffix(".o"))
    toolchain.link([out.with_suffix(".o")], out.with_suffix(".elf"))
    return out.with_suffix(".elf")


def bench_shape(family: str, m: int, k: int, n: int, work: Path) -> list[str]:
    rng = np.random.default_rng(0)
    g = ConvGeometry(1, m, 1, k, (1, 1), out_hw=(m, 1))
    op = QGemm(g, rng.integers(-128, 128, (k, n)).astype(np.int8), np.zeros(n, np.int32),
               requant_from_scales(np.array([1e-4]), 0), 0, family)
    defs, call = gemm_c(op, "op0")
    pack, acc = scratch_sizes(op)
    plain = PLAIN_C.format(m=m, k=k, n=n)
    program = Program({"x": m * k, "y": m * n}, ["x"], ["y"],
                      [Step(defs + plain, call + " kernel_plain({x}, plain_w, plain_acc);", {"x": "x", "y": "y"})],
                      pack + 256, acc + 256)
    c_file = work / f"{family}_{m}x{k}x{n}.c"
    c_file.write_text(program.c_source())
    x = rng.integers(0, 256, m * k).astype(np.uint8).tobytes()
    rows = []
    clang_o2 = c_file.with_suffix(".O2.s")
    toolchain.compile_to_asm(c_file, clang_o2, opt="-O2")
    text = clang_o2.read_text()
    variants = {"clang": text}
    model = load_machine_model()
    for mode in MODES:
        options = PackOptions(mode=mode, restrict_functions=restrict_functions(text), guard=False)
        variants[mode] = format_asm(pack_asm(parse_asm(text, model), model, options))
    # What `build` uses: sda, keeping clang's packing of any block ours does not improve.
    guarded = PackOptions(mode="sda", restrict_functions=restrict_functions(text), guard=True)
    variants["sda+guard"] = format_asm(pack_asm(parse_asm(text, model), model, guarded))
    for name, asm in variants.items():
        path = work / f"{family}_{m}x{k}x{n}_{name}.s"
        path.write_text(asm)
        if toolchain.assembler_errors(path):
            rows.append(f"  {name:13s} (llvm-mc rejected this packing)")
            continue
        elf = _link(asm, path.with_suffix(""))
        packets, cycles = loop_stats(asm, "op0_gemm")
        executed = toolchain.count_executed_packets(elf, x, "op0_gemm")
        rows.append(f"  {name:13s} loop body {packets:3d} packets, est. {cycles:4d} cycles/iter; executed {executed:8d} packets")
    clang_o3 = c_file.with_suffix(".O3.s")
    toolchain.compile_to_asm(c_file, clang_o3, opt="-O3")
    elf = _link(clang_o3.read_text(), work / f"{family}_{m}x{k}x{n}_plainO3")
    executed = toolchain.count_executed_packets(elf, x, "kernel_plain")
    rows.append(f"  plain C -O3   (auto-vectorised GEMM loops)            executed {executed:8d} packets")
    return rows


def main(argv: list[str]) -> int:
    if not toolchain.have_toolchain():
        print(f"hexagon benchmark needs the toolchain; {toolchain.INSTALL_HINT}")
        return 1
    shapes = QUICK if "--quick" in argv else SHAPES
    with tempfile.TemporaryDirectory() as tmp:
        for m, k, n in shapes:
            for family in ("vrmpy", "vmpa", "vmpy"):
                print(f"GEMM M={m} K={k} N={n} family={family}")
                for row in bench_shape(family, m, k, n, Path(tmp)):
                    print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
