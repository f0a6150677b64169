"""Hexagon HVX backend: a QDQ-quantised `Graph` in, an artefact directory out.

``build(graph, out_dir) -> Artefact`` lowers the graph to integer operators
(`lower`: the integer operators rules/quant.dnnr made in the e-graph, QLinearConv /
QLinearMatMul, the QDQ patterns no rule covers yet; anything else in scalar float C,
`fallback`), chooses an HVX instruction family and layout per operator (`select`),
writes HVX C (`kernels`, `eltwise`), compiles it with clang, re-packs clang's
assembly with our soft-dependency-aware VLIW packer (`packer`), assembles and links
an ELF and writes ``report.txt``. ``load(out_dir).run(inputs) -> outputs`` runs the
ELF under qemu-hexagon with float inputs/outputs (quantised at the boundary); integer
inputs (a text model's int64 token ids and mask) travel as int32, refused by name if a
value does not fit, and bool/int32/float32 outputs come back as such (`index_ops`). Without
clang/qemu, ``build`` still writes the C and ``run`` raises a `DnnrError` saying what
to install.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from egraph_compiler.backends.hexagon import index_kernels as _index_kernels  # noqa: F401  (registers Take, IntElementwise)
from egraph_compiler.backends.hexagon import padding as _padding  # noqa: F401  (registers the Pad kernel)
from egraph_compiler.backends.hexagon import resize as _resize  # noqa: F401  (registers the Resize kernel)
from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.backends.hexagon.fallback import FLOAT_C
from egraph_compiler.backends.hexagon.kinds import kernel
from egraph_compiler.backends.hexagon.lower import IntOp, Lowered, lower_qdq
from egraph_compiler.backends.hexagon.program import Program, Step, build_program
from egraph_compiler.backends.hexagon.select import Choice, Option, choose, symbolic_gemms
from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.ir.graph import Graph
from egraph_compiler.select import Selection

__all__ = ["Artefact", "Runner", "build", "load"]


@dataclass(frozen=True, slots=True)
class Artefact:
    out_dir: Path
    c_file: Path
    asm_file: Path | None
    elf: Path | None
    report: str
    # the PBQP of instruction family × layout (`egraph_compiler.select`): the report's `select`
    select: dict | None = None


def _choose_families(lowered: Lowered, policy: str = "pbqp", graphs: tuple[Graph, Graph] | None = None
                     ) -> tuple[list[IntOp], dict[str, Choice], Selection]:
    """``graphs``: (the static graph, the graph before its symbols were bound), for the
    multi-version analysis of GEMMs whose row count is symbolic (`select.symbolic_gemms`)."""
    options: list[tuple[str, list[Option]]] = []
    # by position, not name: a layout gather the lowering added for an operator shares its name
    choosing: set[int] = set()
    for index, op in enumerate(lowered.ops):
        found = kernel(op).options(lowered, index)
        if found is not None:
            options.append((op.name, found))
            choosing.add(index)
    producer = {op.output: op.name for i, op in enumerate(lowered.ops) if i in choosing}
    uses: list[tuple[str, str | None, int]] = [
        (producer[t], op.name if i in choosing else None, pos)
        for i, op in enumerate(lowered.ops) for pos, t in enumerate(op.inputs) if t in producer]
    uses += [(producer[t], None, 0) for t in lowered.outputs.values() if t in producer]
    choices, selection = choose(options, uses, policy=policy)
    if graphs is not None and graphs[1].symbols:
        rows = {op.name: op.spec.shape for i, op in enumerate(lowered.ops) if op.kind == "gemm" and i in choosing}
        selection = selection.with_symbolic(symbolic_gemms(options, rows, *graphs), graphs[1].symbols)
    ops = [replace(op, spec=replace(op.spec, family=choices[op.name].option.family)) if i in choosing else op
           for i, op in enumerate(lowered.ops)]
    return _agree_layouts(ops, choices), choices, selection


def _agree_layouts(ops: list[IntOp], choices: dict[str, Choice]) -> list[IntOp]:
    """Apply the chosen ``packed:<family>`` outputs: the producer writes its consumer's panels."""
    ops = list(ops)
    for index, op in enumerate(ops):
        writes = choices[op.name].option.writes if op.name in choices else "nhwc"
        if writes == "nhwc":
            continue
        after = ops[index + 1]
        if writes != f"packed:{after.spec.family}":
            raise DnnrError(f"hexagon backend: {op.name} writes {writes} but {after.name} reads {after.spec.family}")
        ops[index + 1] = after = replace(after, spec=replace(after.spec, packed_input=True))
        ops[index] = replace(op, spec=replace(op.spec, into=after.spec))
    return ops


def _program(lowered: Lowered, ops: list[IntOp]) -> tuple[Program, dict[str, str]]:
    # A gather that moves no bytes (another shape or layout flag over the same order) shares its input's buffer.
    shared = {op.output: op.inputs[0] for op in ops if op.kind == "gather" and op.spec.element_bytes == 0}
    names: dict[str, str] = {}
    for tensor in lowered.shapes:
        names[tensor] = names[shared[tensor]] if tensor in shared else f"t{len(names)}"
    program = Program(buffers={names[t]: int(np.prod(s)) * lowered.element_bytes(t)
                               for t, s in lowered.shapes.items() if t not in shared},
                      inputs=[names[t] for t in lowered.inputs.values()],
                      outputs=[names[t] for t in lowered.outputs.values()],
                      constants={names[t]: np.ascontiguousarray(v).tobytes() for t, v in lowered.constants.items()})
    if any(kernel(op).float_boundary for op in ops):
        program.preamble = FLOAT_C
    pack = acc = 128
    for index, op in enumerate(ops):
        if op.output in shared:
            continue
        kind = kernel(op)
        defs, call = kind.emit(op.spec, f"op{index}_{op.kind}")
        buffers = {"y": names[op.output]} | {slot: names[t] for slot, t in zip(kind.operands(op), op.inputs, strict=False)}
        program.steps.append(Step(defs, call, buffers))
        p, a = kind.scratch(op.spec)
        pack, acc = max(pack, p), max(acc, a)
    program.scratch_pack, program.scratch_acc = pack + 256, acc + 256
    return program, names


def _report(ops: list[IntOp], choices: dict[str, Choice], selection: Selection) -> str:
    s = selection.to_json(decisions=False)
    lines = ["# dnnr hexagon report: instruction family per operator (estimated cycles)",
             f"# select: {s['solver']}, {s['nodes']} nodes, {s['edges']} edges, {s['options']} options; "
             f"objective {s['objective']} (lower bound {s['lower_bound']}, gap {s['gap']}), "
             f"local {s['local_objective']}, chain DP {s['chain_dp_objective']}, {s['seconds']} s"]
    for op in ops:
        if op.name in choices and kernel(op).has_options:
            c = choices[op.name]
            lines.append(f"{op.name:32s} {op.kind:9s} -> {c.option.label:6s} ({c.option.detail}); {c.reason}")
        else:
            kind = kernel(op)
            lines.append(f"{op.name:32s} {kind.label(op.spec):9s} -> {kind.describe(op.spec)}")
    return "\n".join(lines) + "\n"


def build(graph: Graph, out_dir: str | Path, mode: str = "sda", select: str = "pbqp",
          symbolic: Graph | None = None) -> Artefact:
    """Compile a QDQ-quantised graph to ``out_dir`` (C, clang and packed assembly, ELF, report);
    ``select`` "local" / "chain-dp" applies that baseline's instruction choice instead of the PBQP's;
    ``symbolic``: ``graph`` before its symbolic dims were bound (with their declared ranges):
    the report lists the GEMMs no instruction family is cheapest for over those ranges."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lowered = lower_qdq(graph)
    ops, choices, selection = _choose_families(lowered, select,
                                               (graph, symbolic) if symbolic is not None else None)
    program, names = _program(lowered, ops)
    report = _report(ops, choices, selection)
    meta = {
        "inputs": {k: _boundary(lowered, k, v, names) for k, v in lowered.inputs.items()},
        "outputs": {k: _boundary(lowered, k, v, names) for k, v in lowered.outputs.items()},
        "input_order": list(lowered.inputs), "output_order": list(lowered.outputs),
        # the program's exit code when a run-time Gather index is out of range -> that Gather
        "index_checks": {str(code): node for code, node in lowered.index_checks.items()},
        # the instruction-family × layout PBQP and its decisions with their costs
        "select": selection.to_json(),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    if not toolchain.have_toolchain():
        (out / "model.c").write_text(program.c_source())
        (out / "report.txt").write_text(report + "toolchain missing: no assembly or ELF\n")
        return Artefact(out, out / "model.c", None, None, report, selection.to_json())
    result = build_program(program, out, mode=mode)
    report += (f"packing: mode {mode}; {result.fallback_blocks} blocks rejected by llvm-mc, "
               f"{result.crash_blocks} reverted after an llvm-mc crash (kept as clang packed them)\n")
    (out / "report.txt").write_text(report)
    return Artefact(out, result.c_file, result.packed_asm, result.elf, report, selection.to_json())


def _boundary(lowered: Lowered, name: str, tensor: str, names: dict[str, str]) -> dict:
    """What the host needs to convert a graph input or output: device buffer, shape, element
    type; quantisation parameters for the uint8 tensors (token ids and masks have none)."""
    info: dict = {"device": names[tensor], "shape": lowered.shapes[tensor], "nhwc": tensor in lowered.nhwc,
                  "integer": name in lowered.integer_io}
    if tensor in lowered.element_types or tensor in lowered.floats:
        info["element_type"] = lowered.element_types.get(tensor, "float32")
        return info
    q = lowered.qparams[tensor]
    return info | {"scale": q.scale, "zero_point": q.zero_point, "signed": q.signed}


def _to_device(x: np.ndarray, info: dict, name: str = "") -> bytes:
    element_type = info.get("element_type")
    if element_type == "bool":
        return np.ascontiguousarray(np.asarray(x).astype(bool).astype(np.uint8)).tobytes()
    if element_type == "int32":  # token ids (int64 in the model) are int32 on the device
        values = np.asarray(x)
        if not np.issubdtype(values.dtype, np.integer) and values.dtype != np.bool_:
            raise DnnrError(f"hexagon run: input {name} must hold integers, got {values.dtype}")
        limits = np.iinfo(np.int32)
        if values.size and (values.min() < limits.min or values.max() > limits.max):
            bad = values[(values < limits.min) | (values > limits.max)].reshape(-1)[0]
            raise DnnrError(f"hexagon run: input {name} holds {bad}, which does not fit the device's int32")
        return np.ascontiguousarray(values.astype("<i4")).tobytes()
    if info.get("integer"):  # the model takes int8/uint8 itself
        q = (x.astype(np.int16) + (128 if info["signed"] else 0)).astype(np.uint8)
    else:
        q = np.rint(x.astype(np.float64) / info["scale"]) + info["zero_point"]  # ties to even, as ORT
        q = np.clip(q, 0, 255).astype(np.uint8)
    if info.get("nhwc", q.ndim == 4):
        q = q.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(q).tobytes()


@dataclass(frozen=True, slots=True)
class Runner:
    out_dir: Path

    def run_quantized(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs as the ONNX integer tensors (uint8 or int8), NCHW."""
        meta = json.loads((self.out_dir / "meta.json").read_text())
        elf = self.out_dir / "model.elf"
        if not elf.exists():
            raise DnnrError(f"hexagon backend: {elf} was not built; {toolchain.INSTALL_HINT}")
        stdin = b"".join(_to_device(np.asarray(inputs[name]), meta["inputs"][name], name)
                         for name in meta["input_order"])
        try:
            raw = toolchain.run_elf(elf, stdin)
        except toolchain.ToolchainError as error:
            failed = re.search(r"\(exit (\d+)\)", str(error))
            node = meta.get("index_checks", {}).get(failed.group(1)) if failed else None
            if node is None:
                raise
            raise DnnrError(f"hexagon run: Gather {node}: an index is out of range for its data") from None
        outputs, offset = {}, 0
        for name in meta["output_order"]:
            info = meta["outputs"][name]
            shape = tuple(info["shape"])
            size = int(np.prod(shape))
            if "element_type" in info:  # int32, bool or float32, row-major
                dtype = np.dtype({"int32": "<i4", "bool": "u1", "float32": "<f4"}[info["element_type"]])
                values = np.frombuffer(raw[offset:offset + size * dtype.itemsize], dtype=dtype)
                offset += size * dtype.itemsize
                outputs[name] = values.reshape(shape).astype(bool) if info["element_type"] == "bool" \
                    else values.reshape(shape).copy()
                continue
            q = np.frombuffer(raw[offset:offset + size], dtype=np.uint8)
            offset += size
            if info.get("nhwc", len(shape) == 4):
                q = q.reshape((shape[0], *shape[2:], shape[1])).transpose(0, 3, 1, 2)
            else:
                q = q.reshape(shape)
            outputs[name] = (q.astype(np.int16) - 128).astype(np.int8) if info["signed"] else q.copy()
        return outputs

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs as the model gives them: dequantised floats (QDQ), or int8/uint8 tensors."""
        meta = json.loads((self.out_dir / "meta.json").read_text())
        result = {}
        for name, q in self.run_quantized(inputs).items():
            info = meta["outputs"][name]
            if info.get("integer") or "element_type" in info:  # the model's output is int8/uint8 itself
                result[name] = q
                continue
            zp = info["zero_point"] - (128 if info["signed"] else 0)
            result[name] = ((q.astype(np.float32) - zp) * np.float32(info["scale"])).astype(np.float32)
        return result


def load(out_dir: str | Path) -> Runner:
    """A runner for an artefact directory written by `build`."""
    if not toolchain.have_toolchain():
        raise DnnrError(f"hexagon backend: cannot run {out_dir}: qemu-hexagon/clang missing; {toolchain.INSTALL_HINT}")
    return Runner(Path(out_dir))
