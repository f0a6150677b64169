"""Register renaming inside one basic block, to break false (WAR/WAW) dependencies.

clang allocates registers for its own schedule: a loop body reuses one register for
several short-lived values, and each reuse orders the packer (a double write, or a
write after a read). A *version* of a register is one value: the instruction that
defines it and the instructions that read it. A version is renamed to a *free*
register when that is provably safe:

- it is killed in the block: a later unconditional, whole definition of the register
  overwrites it, so nothing after the block (nor the next loop iteration) reads it;
- every instruction touching it names it in its text as a single register (no pair
  ``v9:8``, no implicit operand) and touches no other version of that register;
- its definition is unconditional and does not read the register (``+=``, post-increment);
- the block holds no call or barrier;
- the free register is caller-saved (r0-r15, r28, v0-v31) and named nowhere in the
  function, so it holds nothing live; each free register takes one version only.

Same-packet reads follow the packet semantics: an instruction reads the value from the
start of its packet, except through ``.new`` (stores, predicates) and from a ``.cur`` load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from egraph_compiler.backends.hexagon.asm import AsmFile, Block, Insn, analyse
from egraph_compiler.backends.hexagon.machine import MachineModel

# Caller-saved registers a leaf block may take without saving them (Hexagon ABI).
_FREE_SCALARS = tuple(f"r{i}" for i in (*range(16), 28))
_FREE_VECTORS = tuple(f"v{i}" for i in range(32))
_NAMED = re.compile(r"\b([rv])(\d+)(?::(\d+))?\b")
_FUNCTION_LABEL = re.compile(r"^([A-Za-z_]\w*):")


def _mentioned(text: str) -> set[str]:
    names: set[str] = set()
    for kind, first, second in _NAMED.findall(text):
        names.add(f"{kind}{first}")
        if second:
            names.add(f"{kind}{second}")
    return names


def free_registers(asm: AsmFile) -> dict[int, frozenset[str]]:
    """For each block (by position in ``asm.items``): caller-saved registers its function
    never names. A function that calls another gets none (a call clobbers and reads them)."""
    result: dict[int, frozenset[str]] = {}
    groups: list[list[int]] = [[]]
    for position, item in enumerate(asm.items):
        if isinstance(item, str) and _FUNCTION_LABEL.match(item):
            groups.append([])
        groups[-1].append(position)
    for group in groups:
        named: set[str] = set()
        calls = False
        for position in group:
            item = asm.items[position]
            texts = [item] if isinstance(item, str) else [i.text for p in item.packets for i in p.insns]
            for text in texts:
                named |= _mentioned(text.split("//", 1)[0])
            if isinstance(item, Block):
                calls |= any(i.barrier or re.match(r"^(call|callr)\b", i.text) for p in item.packets for i in p.insns)
        free = frozenset() if calls else frozenset(r for r in (*_FREE_SCALARS, *_FREE_VECTORS) if r not in named)
        for position in group:
            if isinstance(asm.items[position], Block):
                result[position] = free
    return result


@dataclass(slots=True)
class _Version:
    register: str
    definition: tuple[int, int]  # (packet, position in packet)
    uses: list[tuple[int, int]] = field(default_factory=list)
    killed: bool = False


def _single_register(text: str, register: str) -> bool:
    """``register`` appears in ``text`` only as itself (never inside a pair)."""
    kind, number = register[0], register[1:]
    for found_kind, first, second in _NAMED.findall(text):
        if found_kind == kind and second and number in (first, second):
            return False
    return True


def _versions(block: Block) -> list[_Version]:
    live: dict[str, _Version] = {}
    done: list[_Version] = []
    for p, packet in enumerate(block.packets):
        created: dict[str, _Version] = {}
        for k, insn in enumerate(packet.insns):
            for reg in insn.defs:
                created[reg] = _Version(reg, (p, k))
        cur_defs = {r for insn in packet.insns if insn.cur_def for r in insn.defs}
        for k, insn in enumerate(packet.insns):
            for reg in insn.uses:
                same_packet = reg in created and created[reg].definition[1] != k and (
                    reg in insn.new_uses or reg in cur_defs)
                source = created[reg] if same_packet else live.get(reg)
                if source is not None:
                    source.uses.append((p, k))
        for reg, version in created.items():
            definer = packet.insns[version.definition[1]]
            if reg in live and not definer.text.lstrip().startswith("if"):
                live[reg].killed = True
            if reg in live:
                done.append(live[reg])
            live[reg] = version
    return done + list(live.values())  # those live at the block's end are not killed


def _renameable(version: _Version, block: Block, versions_of: dict[tuple[int, int], list[_Version]]) -> bool:
    reg = version.register
    if not version.killed or not reg[1:].isdigit() or reg[0] not in "rv" or reg in ("r29", "r30", "r31"):
        return False
    p, k = version.definition
    definer = block.packets[p].insns[k]
    if definer.text.lstrip().startswith("if") or reg in definer.uses or definer.control:
        return False
    for site in (version.definition, *version.uses):
        insn = block.packets[site[0]].insns[site[1]]
        if not _single_register(insn.text, reg) or reg not in _mentioned(insn.text):
            return False
        # One version of the register per instruction: its text is rewritten whole.
        if any(other is not version and other.register == reg for other in versions_of[site]):
            return False
        if insn.control:
            return False
    return True


def _substitute(text: str, old: str, new: str) -> str:
    return re.sub(rf"\b{old}\b(?!:)", new, text)


def rename_block(block: Block, free: frozenset[str], model: MachineModel) -> Block:
    """``block`` with every renameable killed version moved to a free register (as many
    as there are free registers), or ``block`` itself when nothing was renamed."""
    # A .tmp load writes no register (its value lives in its packet only): left alone.
    if not free or any(i.barrier or i.tmp_def for p in block.packets for i in p.insns):
        return block
    versions = _versions(block)
    versions_of: dict[tuple[int, int], list[_Version]] = {}
    for version in versions:
        for site in {version.definition, *version.uses}:
            versions_of.setdefault(site, []).append(version)
    pools = {kind: [r for r in sorted(free, key=lambda r: int(r[1:])) if r[0] == kind] for kind in "rv"}
    texts = {(p, k): insn.text for p, packet in enumerate(block.packets) for k, insn in enumerate(packet.insns)}
    renamed = False
    for version in versions:
        pool = pools.get(version.register[0])  # predicates and control registers stay
        if not pool or not _renameable(version, block, versions_of):
            continue
        target = pool.pop(0)
        for site in {version.definition, *version.uses}:
            texts[site] = _substitute(texts[site], version.register, target)
        renamed = True
    if not renamed:
        return block
    return Block([
        replace(packet, insns=[_reanalysed(insn, texts[(p, k)], model) for k, insn in enumerate(packet.insns)])
        for p, packet in enumerate(block.packets)
    ])


def _reanalysed(insn: Insn, text: str, model: MachineModel) -> Insn:
    return insn if text == insn.text else analyse(text, model)

