"""The external tools: clang (C → assembly), llvm-mc (assembly → object, the legality
oracle), ld.lld (link) and qemu-hexagon (run). Missing tools raise `ToolchainError`
saying what to install."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from egraph_compiler.ir.errors import DnnrError

CLANG_FLAGS = [
    "--target=hexagon", "-mv67", "-mhvx", "-mhvx-length=128b", "-ffreestanding", "-nostdlib",
    "-static", "-fno-builtin",
]
MC_FLAGS = ["-triple=hexagon", "-mcpu=hexagonv67", "-mattr=+hvxv67,+hvx-length128b", "-filetype=obj"]
INSTALL_HINT = "install them with: apt-get install clang lld qemu-user llvm-14"
TOOLS = {"clang": "clang", "mc": "llvm-mc-14", "lld": "ld.lld", "qemu": "qemu-hexagon"}


class ToolchainError(DnnrError):
    """A Hexagon tool is missing or failed."""


def tool(name: str) -> str:
    path = shutil.which(TOOLS[name])
    if path is None:
        raise ToolchainError(f"hexagon backend: `{TOOLS[name]}` was not found on PATH; {INSTALL_HINT}")
    return path


def have_toolchain() -> bool:
    return all(shutil.which(t) for t in TOOLS.values())


def _run(cmd: list[str], what: str, stdin: bytes | None = None, timeout: float = 120) -> bytes:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace")[-4000:]
        raise ToolchainError(f"hexagon backend: {what} failed (exit {proc.returncode}):\n{err}")
    return proc.stdout


def compile_to_asm(c_file: Path, asm_file: Path, opt: str = "-O2", extra: list[str] | None = None) -> None:
    _run([tool("clang"), *CLANG_FLAGS, opt, *(extra or []), "-S", str(c_file), "-o", str(asm_file)],
         f"clang {c_file.name}")


def assemble(asm_file: Path, obj_file: Path) -> None:
    _run([tool("mc"), *MC_FLAGS, str(asm_file), "-o", str(obj_file)], f"llvm-mc {asm_file.name}")


def assembler_errors(asm_file: Path) -> str:
    """llvm-mc's diagnostics for ``asm_file`` ('' when it assembles)."""
    proc = subprocess.run([tool("mc"), *MC_FLAGS, str(asm_file), "-o", "/dev/null"], capture_output=True)
    return "" if proc.returncode == 0 else proc.stderr.decode(errors="replace")


def link(objects: list[Path], elf: Path) -> None:
    _run([tool("lld"), "-static", "-e", "_start", *map(str, objects), "-o", str(elf)], "ld.lld")


def run_elf(elf: Path, stdin: bytes, extra: list[str] | None = None, timeout: float = 120) -> bytes:
    return _run([tool("qemu"), "-cpu", "v67", *(extra or []), str(elf)], f"qemu {elf.name}", stdin, timeout)


def symbol_range(elf: Path, name: str) -> tuple[int, int]:
    """Start and end address of function ``name`` (for ``-dfilter``), from llvm-nm."""
    nm = shutil.which("llvm-nm-14") or shutil.which("llvm-nm") or shutil.which("nm")
    if nm is None:
        raise ToolchainError(f"hexagon backend: llvm-nm not found; {INSTALL_HINT}")
    out = _run([nm, "-S", "--defined-only", str(elf)], "llvm-nm").decode()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] == name:
            start, size = int(parts[0], 16), int(parts[1], 16)
            return start, start + size
    raise ToolchainError(f"hexagon backend: symbol {name} not in {elf.name}")


def count_executed_packets(elf: Path, stdin: bytes, function: str) -> int:
    """Packets executed inside ``function``: qemu single-steps and logs each packet."""
    start, end = symbol_range(elf, function)
    log = elf.with_suffix(".exec.log")
    run_elf(elf, stdin, ["-singlestep", "-d", "exec,nochain", "-dfilter", f"0x{start:x}..0x{end - 1:x}",
                         "-D", str(log)])
    text = log.read_text(errors="replace")
    return sum(1 for line in text.splitlines() if line.startswith("Trace"))
