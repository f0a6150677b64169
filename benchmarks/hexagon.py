"""Hexagon benchmark: GEMM kernels per instruction family and shape, and the HVX
element-wise kernels (Add/Mul with requantisation, pooling, requantising Concat)
(prints, no asserts).

For each kernel × shape: static packets of the innermost loop body and executed packets
of the kernel function (``qemu-hexagon -singlestep -d exec,nochain -dfilter``) for
clang's own packing and for our packer: Algorithm 1 alone in modes sda / soft-as-hard /
soft-as-none (unguarded, no local search, no deadline schedules), and sda+guard (what
``build`` uses: Algorithm 1, the local search from clang's packing and the compacted
deadline schedules of `packer.deadline_schedules`; a block keeps clang's packing unless
ours has no more packets and no more estimated cycles, cold or steady);
estimated cycles of the loop bodies from the machine model, for one pass from a cold
start and in the steady state (`estimate.estimate_steady`: loop-carried latencies
included); whether the program's output equals that of clang's packing (qemu, same
input); every packing of ours includes renaming loop-local values to free registers
(see backends/hexagon/rename.py); and the same GEMM written
as plain C loops compiled by ``clang -O3 -mhvx`` (auto-vectorised; for the
element-wise kernels, their scalar C form). The last lines sum the suite: estimated
cycles of the loop bodies (sda+guard against clang) and executed packets (plain C
against sda+guard).

    python benchmarks/hexagon.py [--quick]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.backends.hexagon.asm import parse_asm
from egraph_compiler.backends.hexagon.eltwise import QBinary, QPool, binary_c, concat_rq_c, pool_c
from egraph_compiler.backends.hexagon.estimate import estimate_block, estimate_steady
from egraph_compiler.backends.hexagon.kernels import ConvGeometry, QGemm, gemm_c, scratch_sizes
from egraph_compiler.backends.hexagon.lower import QConcatRq
from egraph_compiler.backends.hexagon.machine import load_machine_model
from egraph_compiler.backends.hexagon.packer import MODES, PackOptions, format_asm, pack_asm
from egraph_compiler.backends.hexagon.program import Program, Step, restrict_functions
from egraph_compiler.backends.hexagon.quant import ELEMENTWISE_SHIFT, requant_from_scales

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


def loop_stats(asm_text: str, function: str) -> tuple[int, int, int]:
    """(packets, estimated cycles cold, in the steady state) of the largest loop body (a
    block ending in :endloop0; the largest block where there is none)."""
    blocks, model = _function_blocks(asm_text, function)
    loops = [b for b in blocks if b.packets and b.packets[-1].endloop]
    body = max(loops, key=lambda b: len(b.packets)) if loops else max(blocks, key=lambda b: len(b.packets))
    steady = estimate_steady(body.packets, model) if loops else estimate_block(body, model)
    return len(body.packets), estimate_block(body, model), steady


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
    x = rng.integers(0, 256, m * k).astype(np.uint8).tobytes()
    return bench_program(program, x, "op0_gemm", "kernel_plain", work / f"{family}_{m}x{k}x{n}")


def bench_program(program: Program, stdin: bytes, function: str, plain_function: str, stem: Path) -> list[str]:
    """Rows for ``function`` under each packing, and ``plain_function`` at -O3."""
    c_file = stem.with_suffix(".c")
    c_file.write_text(program.c_source())
    rows = []
    clang_o2 = c_file.with_suffix(".O2.s")
    toolchain.compile_to_asm(c_file, clang_o2, opt="-O2")
    text = clang_o2.read_text()
    variants = {"clang": text}
    model = load_machine_model()
    for mode in MODES:
        options = PackOptions(mode=mode, restrict_functions=restrict_functions(text), guard=False, local_search=False,
                              deadline=False)
        variants[mode] = format_asm(pack_asm(parse_asm(text, model), model, options))
    # What `build` uses: sda, keeping clang's packing of any block ours does not improve.
    guarded = PackOptions(mode="sda", restrict_functions=restrict_functions(text), guard=True)
    variants["sda+guard"] = format_asm(pack_asm(parse_asm(text, model), model, guarded))
    expected = b""
    for name, asm in variants.items():
        path = stem.parent / f"{stem.name}_{name}.s"
        path.write_text(asm)
        if toolchain.assembler_errors(path):
            rows.append(f"  {name:13s} (llvm-mc rejected this packing)")
            continue
        elf = _link(asm, path.with_suffix(""))
        packets, cycles, steady = loop_stats(asm, function)
        executed = toolchain.count_executed_packets(elf, stdin, function)
        output = toolchain.run_elf(elf, stdin)
        expected = expected or output  # clang's packing runs first
        rows.append(f"  {name:13s} loop body {packets:3d} packets, est. {cycles:4d} cycles/iter, steady {steady:4d};"
                    f" executed {executed:8d} packets; output {'= clang' if output == expected else 'DIFFERS'}")
    clang_o3 = c_file.with_suffix(".O3.s")
    toolchain.compile_to_asm(c_file, clang_o3, opt="-O3")
    elf = _link(clang_o3.read_text(), stem.parent / f"{stem.name}_plainO3")
    executed = toolchain.count_executed_packets(elf, stdin, plain_function)
    rows.append(f"  plain C -O3   (auto-vectorised plain loops)           executed {executed:8d} packets")
    return rows


def eltwise_cases() -> list[tuple[str, Program, bytes, str, str]]:
    """(title, program, stdin, HVX kernel, scalar kernel) for the element-wise kernels."""
    rng = np.random.default_rng(1)
    one = 1 << ELEMENTWISE_SHIFT
    cases = []

    def program_of(kernels: list[tuple[str, str, dict[str, str]]], buffers: dict[str, int], inputs: list[str]) -> Program:
        # The scalar form writes its own buffer: the output compared across packings holds both.
        steps = [Step(d, c, b | ({"y": "y_plain"} if k else {})) for k, (d, c, b) in enumerate(kernels)]
        return Program(buffers | {"y_plain": buffers["y"]}, inputs, ["y", "y_plain"], steps)

    size = 8191
    for kind, mults in (("Add", (round(0.7 * one), round(1.3 * one))), ("Mul", (round(0.01 * one),))):
        ops = [QBinary(kind, (size,), (size,), (size,), 120, 30, mults, 128, family=f) for f in ("hvx", "scalar")]
        kernels = [(*binary_c(op, f"kernel_{op.family}"), {"a": "a", "b": "b", "y": "y"}) for op in ops]
        stdin = rng.integers(0, 256, 2 * size).astype(np.uint8).tobytes()
        cases.append((f"{kind} {size} elements", program_of(kernels, {"a": size, "b": size, "y": size}, ["a", "b"]),
                      stdin, "kernel_hvx", "kernel_scalar"))
    g = ConvGeometry(1, 17, 15, 67, (3, 3), (2, 2), (1, 1), (1, 1), (9, 8))
    pools = [("MaxPool 3x3/2 17x15x67", g, None, 0),
             ("GlobalAveragePool 13x13x200", ConvGeometry(1, 13, 13, 200, (13, 13), out_hw=(1, 1)),
              requant_from_scales(np.array([0.7 / 169]), 11), 40)]
    for title, geom, rq, zero in pools:
        kind = "MaxPool" if rq is None else "AveragePool"
        ops = [QPool(kind, geom, rq, zero, f) for f in ("hvx", "scalar")]
        kernels = [(*pool_c(op, f"kernel_{op.family}"), {"x": "x", "y": "y"}) for op in ops]
        bytes_in = geom.batch * geom.height * geom.width * geom.channels
        out = geom.rows * geom.channels
        cases.append((title, program_of(kernels, {"x": bytes_in, "y": out}, ["x"]),
                      rng.integers(0, 256, bytes_in).astype(np.uint8).tobytes(), "kernel_hvx", "kernel_scalar"))
    rows, chans = 100, (67, 130)
    concat = QConcatRq(rows, chans, (10, 128), (round(0.8 * one), one), 128)
    kernels = [(*concat_rq_c(concat, f"kernel_{f}", f), {"x0": "x0", "x1": "x1", "y": "y"}) for f in ("hvx", "scalar")]
    sizes = {"x0": rows * chans[0], "x1": rows * chans[1], "y": rows * sum(chans)}
    cases.append((f"Concat+requant {rows}x{chans}", program_of(kernels, sizes, ["x0", "x1"]),
                  rng.integers(0, 256, sizes["x0"] + sizes["x1"]).astype(np.uint8).tobytes(), "kernel_hvx", "kernel_scalar"))
    return cases


def _suite_totals(lines: list[str]) -> list[str]:
    est: dict[str, int] = {}
    steady: dict[str, int] = {}
    executed: dict[str, int] = {}
    more_packets = differs = 0
    clang_executed = 0
    for line in lines:
        words = line.replace(",", " ").replace(";", " ").split()
        if "est." in words:
            est[words[0]] = est.get(words[0], 0) + int(words[words.index("est.") + 1])
            steady[words[0]] = steady.get(words[0], 0) + int(words[words.index("steady") + 1])
        if "executed" in words:
            key = "plain" if words[0] == "plain" else words[0]
            count = int(words[words.index("executed") + 1])
            executed[key] = executed.get(key, 0) + count
            clang_executed = count if key == "clang" else clang_executed
            more_packets += key == "sda+guard" and count > clang_executed
        differs += "DIFFERS" in words

    def fewer(table: dict[str, int]) -> str:
        return (f"clang {table.get('clang', 0)}, sda+guard {table.get('sda+guard', 0)} "
                f"({1 - table.get('sda+guard', 0) / max(1, table.get('clang', 0)):.1%} fewer)")

    return [f"SUITE est. cycles of loop bodies, one cold pass: {fewer(est)}",
            f"SUITE est. cycles of loop bodies, steady state: {fewer(steady)}",
            f"SUITE kernels where sda+guard executes more packets than clang: {more_packets}; "
            f"packings whose output differs from clang's: {differs}",
            f"SUITE executed packets: clang {executed.get('clang', 0)}, sda+guard {executed.get('sda+guard', 0)}, "
            f"plain C -O3 {executed.get('plain', 0)} ({executed.get('plain', 0) / max(1, executed.get('sda+guard', 0)):.1f}x ours)"]


def main(argv: list[str]) -> int:
    if not toolchain.have_toolchain():
        print(f"hexagon benchmark needs the toolchain; {toolchain.INSTALL_HINT}")
        return 1
    shapes = QUICK if "--quick" in argv else SHAPES
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for m, k, n in shapes:
            for family in ("vrmpy", "vmpa", "vmpy"):
                print(f"GEMM M={m} K={k} N={n} family={family}")
                for row in bench_shape(family, m, k, n, Path(tmp)):
                    print(row)
                    lines.append(row)
        for title, program, stdin, function, plain in eltwise_cases()[: 1 if "--quick" in argv else None]:
            print(f"{title} (HVX kernel; plain C = its scalar form)")
            for row in bench_program(program, stdin, function, plain, Path(tmp) / function):
                print(row)
                lines.append(row)
    for line in _suite_totals(lines):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
