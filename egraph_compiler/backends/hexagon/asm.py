"""Read clang's Hexagon ``-S`` output into packets and basic blocks; analyse operands.

An `Insn` knows which registers it reads and writes (register pairs expanded),
whether it touches memory, whether it ends a block, and which operands use the
same-packet forms ``.new`` (stores, predicates) and ``.cur`` (vector loads).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from egraph_compiler.backends.hexagon.machine import InsnClass, MachineModel

_ASSIGN = re.compile(r"\s(=|\+=|-=|\|=|&=|\^=)\s")
_REG = re.compile(
    r"\b(?:(?P<pair>[rv])(?P<hi>\d+):(?P<lo>\d+)|(?P<single>[rvpq]\d+|sp|fp|lr|m[01]|usr|gp|lc[01]|sa[01]))"
    r"(?P<suffix>\.new|\.cur|\.tmp)?\b"
)
_ALIASES = {"sp": "r29", "fp": "r30", "lr": "r31"}
_POSTINC = re.compile(r"\((r\d+|sp|fp)\+\+")
_CONTROL = re.compile(r"\bjump|^call\b|^callr\b|\bjumpr\b|dealloc_return|^trap0|^rte\b")
# Instructions whose effects we do not model: they stay alone, ordered against everything.
_BARRIER = re.compile(r"^(trap0|trap1|barrier|isync|syncht|brkpt|pause|dccleana|dcinva|dczeroa|icinva)\b|^call")


@dataclass(frozen=True, slots=True)
class Insn:
    text: str
    klass: InsnClass
    defs: frozenset[str]
    uses: frozenset[str]
    new_uses: frozenset[str] = frozenset()  # read through ``.new`` in the input
    cur_def: bool = False  # a ``.cur`` vector load in the input
    tmp_def: bool = False  # a ``.tmp`` vector load: its value lives only in its packet
    loads: bool = False
    stores: bool = False
    control: bool = False
    barrier: bool = False
    extenders: int = 0
    stack: bool = False  # the memory access is based on the stack or frame pointer

    @property
    def memory(self) -> bool:
        return self.loads or self.stores

    @property
    def latency(self) -> int:
        return self.klass.latency


@dataclass(slots=True)
class Packet:
    insns: list[Insn]
    endloop: str = ""  # ":endloop0", ":endloop1", ":endloop01" or ""
    mem_noshuf: bool = False


@dataclass(slots=True)
class Block:
    """Consecutive packets with one entry and one exit: the unit the packer reorders."""

    packets: list[Packet] = field(default_factory=list)


@dataclass(slots=True)
class AsmFile:
    """Verbatim lines (labels, directives, comments) interleaved with blocks of packets."""

    items: list[str | Block]

    def blocks(self) -> list[Block]:
        return [item for item in self.items if isinstance(item, Block)]


def _expand(match: re.Match[str]) -> list[str]:
    if match.group("pair"):
        kind = match.group("pair")
        return [f"{kind}{match.group('lo')}", f"{kind}{match.group('hi')}"]
    name = match.group("single")
    return [_ALIASES.get(name, name)]


def _registers(text: str) -> list[tuple[str, str]]:
    found = []
    for match in _REG.finditer(text):
        for reg in _expand(match):
            found.append((reg, match.group("suffix") or ""))
    return found


_ANALYSED: dict[tuple[int, str], Insn] = {}


def analyse(text: str, model: MachineModel) -> Insn:
    """Operands and class of one instruction given as clang prints it (memoised)."""
    key = (id(model), text)
    found = _ANALYSED.get(key)
    if found is None:
        found = _analyse(text, model)
        _ANALYSED[key] = found
    return found


def _analyse(text: str, model: MachineModel) -> Insn:
    klass = model.classify(text)
    extenders = text.count("##")
    body = text
    uses: set[str] = set()
    defs: set[str] = set()
    new_uses: set[str] = set()

    def read(operands: str) -> None:  # registers read (``.new``: this packet's value)
        for reg, suffix in _registers(operands):
            uses.add(reg)
            if suffix == ".new":
                new_uses.add(reg)

    predicate = re.match(r"^if\s*\((!?)([pq]\d)(\.new)?\)\s*", body)
    if predicate:
        uses.add(predicate.group(2))
        if predicate.group(3):
            new_uses.add(predicate.group(2))
        body = body[predicate.end():]
    control = bool(_CONTROL.search(text))
    barrier = bool(_BARRIER.search(body))
    cur_def = tmp_def = False
    loads = bool(re.search(r"\bv?mem\w*\(|deallocframe|dealloc_return", body))
    stores = False
    if ";" in body:  # a compound compare-and-jump: keep it whole
        control = True
    assign = _ASSIGN.search(body)
    if assign and ";" not in body:
        lhs, op, rhs = body[: assign.start()], assign.group(1), body[assign.end():]
        if re.match(r"^v?mem", lhs.strip()):
            stores = True
            loads = bool(re.search(r"\bmem\w*\(", rhs))
            uses.update(reg for reg, _suffix in _registers(lhs))
            read(rhs)
        else:
            for reg, suffix in _registers(lhs):
                defs.add(reg)
                if op != "=":
                    uses.add(reg)
                cur_def |= suffix == ".cur"
                tmp_def |= suffix == ".tmp"
            read(rhs)
    else:
        read(body)
        if ";" in body:
            first = body.split(";")[0]
            fa = _ASSIGN.search(first)
            if fa:
                for reg, _ in _registers(first[: fa.start()]):
                    defs.add(reg)
    for match in _POSTINC.finditer(body):
        reg = _ALIASES.get(match.group(1), match.group(1))
        defs.add(reg)
        uses.add(reg)
    loop = re.match(r"^loop([01])\(", body)
    if loop:
        defs |= {f"lc{loop.group(1)}", f"sa{loop.group(1)}"}
    if re.match(r"^allocframe", body):
        stores = True
        defs |= {"r29", "r30"}
        uses |= {"r29", "r30", "r31"}
    # clang also writes these as ``r31:30 = deallocframe(r30):raw``: SP is written too.
    if re.search(r"\b(deallocframe|dealloc_return)\b", body):
        defs |= {"r29", "r30", "r31"}
        uses.add("r30")
    if re.match(r"^(call|callr)\b", body):
        defs |= {f"r{i}" for i in range(16)} | {"r28", "r31", "p0", "p1", "p2", "p3"}
        uses |= {f"r{i}" for i in range(6)} | {"r29"}
    if re.match(r"^jumpr\s+r31", body) or re.search(r"\bdealloc_return\b", body):
        uses |= {"r0", "r1", "r29", "r31"}
    return Insn(
        text=text,
        klass=klass,
        defs=frozenset(defs),
        uses=frozenset(uses),
        new_uses=frozenset(new_uses),
        cur_def=cur_def,
        tmp_def=tmp_def,
        loads=loads,
        stores=stores,
        control=control,
        barrier=barrier,
        extenders=extenders,
        stack=bool(re.search(r"mem\w*\((r29|r30|sp|fp)\b", body)) or "allocframe" in body or "dealloc" in body,
    )


# The frame and stack pointers, where every stack-derived address starts.
FRAME_REGISTERS = frozenset({"r29", "r30"})
_MEMORY_OPERAND = re.compile(r"mem\w*\(([^)]*)\)")  # memw(…), vmem(…), vmemu(…)


def address_registers(insn: Insn) -> frozenset[str]:
    """Scalar registers naming the address of ``insn``'s memory access (base, index)."""
    if not insn.memory:
        return frozenset()
    return frozenset(reg for operand in _MEMORY_OPERAND.findall(insn.text)
                     for reg, _ in _registers(operand) if reg.startswith("r"))


def stack_derived_registers(insns: list[Insn], seed: frozenset[str] = FRAME_REGISTERS) -> frozenset[str]:
    """Scalar registers that may hold an address into the stack frame: ``seed`` and,
    to a fixed point, every register an instruction writes from one of them. Clang
    spills beyond a vector ``vmem``'s ±8-slot offset range through such registers
    (``r7 = add(r29,#2048); vmem(r7+#-6) = v1``), so an access through one may be a
    spill slot although its base is not r29. Flow-insensitive, so sound across blocks
    (a register reused for a buffer pointer is merely counted as maybe-stack); a value
    loaded from the stack counts too (it may be a spilled stack address)."""
    tainted = set(seed)
    changed = True
    while changed:
        changed = False
        for insn in insns:
            # A call's results are no address of this frame (our kernels pass none).
            if insn.uses & tainted and not (insn.control or insn.barrier):
                new = {reg for reg in insn.defs if re.fullmatch(r"r\d+", reg)} - tainted
                if new:
                    tainted |= new
                    changed = True
    return frozenset(tainted)


def _strip_comment(line: str) -> str:
    return line.split("//", 1)[0].rstrip()


def parse_asm(source: str, model: MachineModel) -> AsmFile:
    """Split clang's output into blocks of packets; every other line is kept verbatim.

    Any line between packets (a label, a directive, clang's ``// %bb.N:`` marker)
    closes the current block, and so does a packet holding a branch or an
    end-of-loop marker: every packet of a block runs whenever its first one does.
    """
    items: list[str | Block] = []
    block: Block | None = None
    packet: list[Insn] | None = None
    for line in source.splitlines():
        code = _strip_comment(line).strip()
        if packet is not None:
            if code.startswith("}"):
                tail = code[1:].strip()
                block = block or Block()
                block.packets.append(Packet(packet, _endloop(tail), ":mem_noshuf" in tail))
                ends_block = bool(_endloop(tail)) or any(insn.control for insn in packet)
                packet = None
                if ends_block:
                    items.append(block)
                    block = None
            elif code:
                packet.append(analyse(code, model))
            continue
        if code == "{":
            packet = []
            continue
        if block is not None:
            items.append(block)
            block = None
        items.append(line)
    if block is not None:
        items.append(block)
    return AsmFile(items)


def _endloop(tail: str) -> str:
    match = re.search(r":endloop\d+", tail)
    return match.group(0) if match else ""
