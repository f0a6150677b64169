"""A whole Hexagon program: static buffers, operator steps, main; and its build.

`Program` is data: each step is C definitions plus one call whose ``{x}``-style
placeholders name buffers. `build_program` writes the C file, compiles it with clang
to assembly, re-packs the assembly with our packer, assembles it with llvm-mc (the
legality oracle: a block it rejects falls back to clang's packing) and links the ELF.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.backends.hexagon.asm import AsmFile, Block, parse_asm
from egraph_compiler.backends.hexagon.machine import load_machine_model
from egraph_compiler.backends.hexagon.packer import PackOptions, format_asm, pack_asm
from egraph_compiler.backends.hexagon.runtime import RUNTIME_C


@dataclass(frozen=True, slots=True)
class Step:
    definitions: str
    call: str  # C statement(s); "{name}" placeholders are buffer names
    buffers: dict[str, str]  # placeholder -> buffer name


@dataclass(slots=True)
class Program:
    buffers: dict[str, int] = field(default_factory=dict)  # name -> bytes
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    scratch_pack: int = 128
    scratch_acc: int = 128
    constants: dict[str, bytes] = field(default_factory=dict)  # buffers with initial contents
    preamble: str = ""  # C shared by several steps (e.g. the float helpers of the scalar fallback)

    def c_source(self) -> str:
        parts = [RUNTIME_C, self.preamble]
        parts.append(f"static u8 dnnr_scratch_pack[{self.scratch_pack}] __attribute__((aligned(256)));\n")
        parts.append(f"static u8 dnnr_scratch_acc[{self.scratch_acc}] __attribute__((aligned(256)));\n")
        for name, size in self.buffers.items():
            if name in self.constants:
                data = ",".join(str(b) for b in self.constants[name])
                parts.append(f"static u8 {name}[{max(size, 1) + 256}] __attribute__((aligned(256))) = {{{data}}};\n")
            else:
                parts.append(f"static u8 {name}[{max(size, 1) + 256}] __attribute__((aligned(256)));\n")
        calls = []
        for step in self.steps:
            parts.append(step.definitions)
            calls.append("  " + step.call.format(**step.buffers))
        body = "".join(f"  dnnr_read({n}, {self.buffers[n]});\n" for n in self.inputs)
        body += "\n".join(calls) + "\n"
        body += "".join(f"  dnnr_write({n}, {self.buffers[n]});\n" for n in self.outputs)
        parts.append(f"int main(void) {{\n{body}  return 0;\n}}\n")
        return "".join(parts)


# Our generated kernels only take restrict pointers to distinct buffers.
_RESTRICT_NAME = re.compile(r"^(op\d+_\w+|kernel_\w+)$")


@dataclass(frozen=True, slots=True)
class BuildResult:
    c_file: Path
    clang_asm: Path
    packed_asm: Path
    elf: Path | None
    fallback_blocks: int  # blocks llvm-mc rejected, kept as clang packed them
    crash_blocks: int = 0  # blocks llvm-mc crashed on (no diagnostic), kept as clang packed them


def _writable_symbols(asm_text: str) -> set[str]:
    """Symbols of writable data: ``.lcomm``/``.comm`` and labels in .bss/.data sections."""
    symbols: set[str] = set()
    writable = False
    for line in asm_text.splitlines():
        stripped = line.strip()
        if match := re.match(r"\.l?comm\s+([A-Za-z_.$][\w.$]*)", stripped):
            symbols.add(match.group(1))
        elif match := re.match(r"\.(?:section\s+\"?)?(\.?[\w.]+)", stripped):
            if stripped.startswith((".section", ".text", ".data", ".bss", ".rodata")):
                writable = any(match.group(1).lstrip(".").startswith(s) for s in ("bss", "data", "sbss", "sdata"))
        elif writable and (match := re.match(r"([A-Za-z_.$][\w.$]*):", stripped)):
            symbols.add(match.group(1))
    return symbols


def restrict_functions(asm_text: str) -> frozenset[str]:
    """Our generated kernels whose loads never alias their stores: restrict pointers to
    distinct buffers, and no writable global (a static scratch array a kernel writes and
    reads back, e.g. a pool kernel's block sums, is not covered by ``restrict``)."""
    writable = _writable_symbols(asm_text)
    restrict = set()
    for match in re.finditer(r"^([A-Za-z_]\w*):", asm_text, flags=re.M):
        name = match.group(1)
        if not _RESTRICT_NAME.match(name):
            continue
        end = asm_text.find(f".size\t{name},", match.end())
        end = asm_text.find(f".size {name},", match.end()) if end < 0 else end
        body = asm_text[match.end():end if end >= 0 else len(asm_text)]
        referenced = set(re.findall(r"[A-Za-z_.$][\w.$]*", body))
        if not referenced & writable:
            restrict.add(name)
    return frozenset(restrict)


def assemble_with_fallback(asm_text: str, out: Path, mode: str = "sda", guard: bool = True) -> tuple[str, int, int]:
    """Pack; where llvm-mc rejects a packet, put back clang's packing of that block.

    Returns the text, the blocks llvm-mc rejected with a diagnostic, and the blocks
    reverted because llvm-mc 14 crashed on them (a crash names no line; found by halving).
    """
    model = load_machine_model()
    original = parse_asm(asm_text, model)
    options = PackOptions(mode=mode, restrict_functions=restrict_functions(asm_text), guard=guard)
    packed = pack_asm(original, model, options)
    fallbacks = crashes = 0
    for _ in range(50):
        text = format_asm(packed)
        out.write_text(text)
        errors = toolchain.assembler_errors(out)
        if not errors:
            return text, fallbacks, crashes
        bad_lines = {int(m) for m in re.findall(r":(\d+):\d+: error", errors)}
        if not bad_lines:  # llvm-mc crashed without a location: find the blocks by bisection
            packed, reverted = _bisect_blocks(original, packed, out)
            crashes += reverted
            continue
        items = list(packed.items)
        line = 1
        changed = False
        for i, item in enumerate(items):
            if isinstance(item, str):
                line += 1
                continue
            size = sum(len(p.insns) + 2 for p in item.packets)
            if any(line <= b < line + size for b in bad_lines):
                items[i] = original.items[i]
                assert isinstance(items[i], Block)
                fallbacks += 1
                changed = True
            line += size
        if not changed:
            raise toolchain.ToolchainError(f"hexagon backend: llvm-mc rejected {out.name}:\n{errors[-3000:]}")
        packed = AsmFile(items)
    raise toolchain.ToolchainError("hexagon backend: packing did not converge to legal assembly")


def _bisect_blocks(original: AsmFile, packed: AsmFile, out: Path) -> tuple[AsmFile, int]:
    """Revert to clang's packing the smallest set of blocks found by halving."""
    candidates = [i for i, item in enumerate(packed.items)
                  if isinstance(item, Block) and item is not original.items[i]]

    def legal(keep: list[int]) -> bool:
        items = list(original.items)
        for i in keep:
            items[i] = packed.items[i]
        out.write_text(format_asm(AsmFile(items)))
        return not toolchain.assembler_errors(out)

    kept: list[int] = []
    pending = [candidates]
    while pending:
        group = pending.pop()
        if not group:
            continue
        if legal(kept + group):
            kept += group
        elif len(group) > 1:
            half = len(group) // 2
            pending += [group[half:], group[:half]]
    items = list(original.items)
    for i in kept:
        items[i] = packed.items[i]
    return AsmFile(items), len(candidates) - len(kept)


def build_program(program: Program, out_dir: Path, name: str = "model", mode: str = "sda",
                  opt: str = "-O2", repack: bool = True) -> BuildResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    c_file = out_dir / f"{name}.c"
    c_file.write_text(program.c_source())
    clang_asm = out_dir / f"{name}.clang.s"
    packed_asm = out_dir / f"{name}.s"
    toolchain.compile_to_asm(c_file, clang_asm, opt=opt)
    text = clang_asm.read_text()
    fallbacks = crashes = 0
    if repack:
        text, fallbacks, crashes = assemble_with_fallback(text, packed_asm, mode=mode)
    else:
        packed_asm.write_text(text)
    obj = out_dir / f"{name}.o"
    elf = out_dir / f"{name}.elf"
    toolchain.assemble(packed_asm, obj)
    toolchain.link([obj], elf)
    return BuildResult(c_file, clang_asm, packed_asm, elf, fallbacks, crashes)
