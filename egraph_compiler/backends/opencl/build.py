"""Artefact writer: ``kernels.cl`` (distinct kernels, named by source hash),
``plan.json`` (tensors, arena offsets, launches) and ``weights.npz``.

Sizes are kernel arguments: the integer literals of each generated body (extents,
strides, offsets) are hoisted into ``const int`` parameters and passed per launch
(``sizes`` in plan.json), so blocks that differ only in shape share one compiled
kernel. PoCL compiles every distinct kernel at its first launch (about half a
second each), which dominates a cold run of a whole model; sharing cuts resnet50
from 32 to 12 distinct kernels and densenet121 from 128 to 12.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from egraph_compiler.backends.opencl.kernels import SCRATCH, KernelParams, generate
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.plan.memory import ExecutionPlan
from egraph_compiler.select import Selection
from egraph_compiler.shapes import symint

PLAN_VERSION = 2
# 0 and 1 stay literal: they shape the code (unit strides, empty pads, first index)
HOIST_FROM = 2
# OpenCL guarantees 1024 bytes of kernel arguments; a tensor is a pointer + ulong offset
ARG_BYTES_LIMIT, TENSOR_ARG_BYTES, SIZE_ARG_BYTES = 1024, 16, 4
# a decimal integer token: not part of a name, a float (1.5f, 1e-05) or a vector type,
# nor a constant the language requires (an array extent `[4]`, a `case 4:` label)
_INT_LITERAL = re.compile(r"(?<![\w.])(?<![eE][-+])(?<!case )(\d+)(?![\w.])")
# a size with its derivation over the dims (`shapes.symint`), or a literal
_SIZE = re.compile(r"(?<!\w)" + symint.TOKEN.pattern + "|" + _INT_LITERAL.pattern)


@dataclass(frozen=True)
class Artefact:
    out_dir: Path
    kernels: int  # launches per run
    distinct_kernels: int  # distinct sources compiled
    operators: int
    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    # constants read as image2d_t where the device allows, and why (images.py)
    images: dict[str, str] | None = None
    # the dimension order chosen for each intermediate a reduction reads, and why
    layouts: dict[str, str] | None = None
    # the layout PBQP (`egraph_compiler.select`): the report's `select`
    select: dict | None = None
    # a symbolic artefact (`symbolic.py`): its dim ranges, versions and their conditions
    dynamic: dict | None = None
    # units kept whole in one kernel (`fusion.units`), by kind
    units: dict[str, int] | None = None
    # sizes that depend on input values (`specialise.py`): the value inputs and why
    specialised: dict | None = None


@dataclass
class Assembled:
    """An artefact in memory: what `build_artefact` writes (`plan.json`'s document,
    the kernel sources by name, the constant arrays by name) plus what its report
    says. The symbolic build (`symbolic.py`) assembles one per probed shape."""

    doc: dict
    sources: dict[str, str]
    arrays: dict[str, np.ndarray]
    images: dict[str, dict[str, object]]
    work_items: list[int]  # per launch: the work-items it needs (before rounding up)


def assemble(plan: ExecutionPlan, params: KernelParams | None = None,
             selection: Selection | None = None) -> Assembled:
    params = params or KernelParams()
    graph = plan.fusion.graph
    view = GraphView(graph)
    blocks = {b.id: b for b in plan.fusion.blocks}
    sources: dict[str, str] = {}
    derived: dict[str, np.ndarray] = {}
    launches = []
    work_items = []
    images: dict[str, dict[str, object]] = {}
    scratch_tensors: dict[str, dict[str, object]] = {}
    for block_id in plan.order:
        block = blocks[block_id]
        first = generate(view, block, params)
        # a block's scratch (split-K partials…) is a tensor of its own, kind "scratch"
        scratch = f"{SCRATCH}{block_id}"
        if first.scratch:
            scratch_tensors[scratch] = {"kind": "scratch", "dtype": "float32",
                                        "shape": [first.scratch], "nbytes": 4 * first.scratch}
        for step, kernel in enumerate(first.chain()):
            source, sizes = hoist_sizes(kernel.source, len(kernel.args)) if params.hoist_sizes \
                else (kernel.source, ())
            source = symint.plain_text(source)  # a token left unhoisted is its value
            name = "k_" + hashlib.sha1(source.encode()).hexdigest()[:12]
            sources.setdefault(name, source.replace("KNAME", name))
            derived.update(kernel.constants)
            work_items.append(kernel.work_items)
            for tensor, width, height, reason in kernel.images:
                images[tensor] = {"width": width, "height": height, "reason": reason,
                                  "block": block_id}
            launches.append({"block": block_id, "kernel": name, "ops": list(block.ops),
                             "kind": block.kind, "variant": symint.plain_text(kernel.variant),
                             "shape_key": symint.plain_text(str(kernel.shape_key)), "global": kernel.global_size,
                             "local": kernel.local_size,
                             "args": [scratch if a == SCRATCH else a for a in kernel.args],
                             "sizes": list(sizes), **({"pass": step} if step else {})})
    used_constants = sorted({a for launch in launches for a in launch["args"]
                             if a in graph.constants or a in derived} |
                            {v.name for v in graph.outputs if v.name in graph.constants})
    used_constants = [n for n in used_constants if n not in derived]
    tensors: dict[str, dict[str, object]] = {}
    for name in used_constants:
        tensors[name] = _tensor(view, name, "constant")
    for name, array in sorted(derived.items()):
        tensors[name] = {"kind": "constant", "dtype": str(array.dtype),
                         "shape": list(array.shape), "nbytes": int(array.nbytes)}
    arrays = {**{n: graph.constants[n] for n in used_constants}, **derived}
    for value in graph.inputs:
        tensors[value.name] = _tensor(view, value.name, "input")
    for value in graph.outputs:
        if value.name not in tensors:
            tensors[value.name] = _tensor(view, value.name, "output")
    tensors.update(scratch_tensors)
    for name, offset in plan.offsets.items():
        tensors[name] = {**_tensor(view, name, "arena"), "offset": offset,
                         "nbytes": plan.sizes[name]}
    doc = {
        "version": PLAN_VERSION, "graph": graph.name,
        "inputs": [v.name for v in graph.inputs], "outputs": [v.name for v in graph.outputs],
        "arena_bytes": plan.arena_bytes, "naive_bytes": plan.naive_bytes,
        "lower_bound_bytes": plan.lower_bound_bytes, "tensors": tensors,
        "launches": launches, "operators": plan.fusion.operator_count,
        "blocks": [{"id": b.id, "ops": list(b.ops), "mapping": b.mapping, "kind": b.kind,
                    "store_maps": dict(b.store_maps), "units": list(b.units),
                    "layouts": {v: list(perm) for v, perm in b.layouts},
                    "implementation": b.implementation}
                   for b in plan.fusion.blocks],
        "images": images,
        # intermediates kept as RGBA image2d_t where the device runs images (blocked.py)
        "activation_images": _activation_images(view, plan),
        # SmartMem §3.2.2: the dimension order chosen for each intermediate, and why
        "layout_decisions": [{"value": c.value, "perm": list(c.perm), "reason": c.reason}
                             for c in plan.fusion.layouts],
        "select": selection.to_json() if selection is not None else None,
    }
    return Assembled(doc, sources, arrays, images, work_items)


def _activation_images(view: GraphView, plan: ExecutionPlan) -> dict[str, dict[str, object]]:
    """Every intermediate the selection stored as an RGBA image (`fusion.index.Blocked`
    with ``image``): its texel extent; the runtime creates the image or, without images,
    uses the tensor's NCHW4c arena slot."""
    result: dict[str, dict[str, object]] = {}
    for choice in plan.fusion.layouts:
        if getattr(choice.perm, "image", False):
            width, height = choice.perm.image_extent(view.shape(choice.value))
            result[choice.value] = {"width": width, "height": height, "reason": choice.reason}
    return result


def write_files(out: Path, doc: dict, sources: dict[str, str],
                arrays: dict[str, np.ndarray]) -> None:
    """``kernels.cl``, ``plan.json``, ``weights.npz`` and ``weights.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    used_constants = sorted(arrays)
    (out / "kernels.cl").write_text(
        "// generated by dnnr: one kernel per distinct fusion block\n\n" +
        "\n".join(sources[k] for k in sorted(sources)))
    (out / "plan.json").write_text(json.dumps(doc, indent=1) + "\n")
    # np.ascontiguousarray makes a 0-d array 1-d: np.require keeps a scalar's shape ()
    np.savez(out / "weights.npz", **{f"c{k}": np.require(arrays[n], requirements="C")
                                    for k, n in enumerate(used_constants)})
    (out / "weights.json").write_text(json.dumps(used_constants))


def build_artefact(plan: ExecutionPlan, out_dir: str | Path,
                   params: KernelParams | None = None, selection: Selection | None = None) -> Artefact:
    out = Path(out_dir)
    built = assemble(plan, params, selection)
    write_files(out, built.doc, built.sources, built.arrays)
    return Artefact(out, len(built.doc["launches"]), len(built.sources), plan.fusion.operator_count,
                    plan.arena_bytes, plan.naive_bytes, plan.lower_bound_bytes,
                    {name: str(info["reason"]) for name, info in built.images.items()},
                    {c.value: c.reason for c in plan.fusion.layouts},
                    selection.to_json() if selection is not None else None,
                    units=plan.fusion.unit_counts)


def hoist_sizes(source: str, tensor_args: int) -> tuple[str, tuple[int, ...]]:
    """``source`` with the integer literals of its body (``HOIST_FROM`` and up, in
    int range) replaced by trailing ``const int s0, s1, …`` parameters, and their
    values in order. Defines and other preprocessor lines keep theirs. A kernel
    whose arguments would pass the portable limit keeps its literals.

    A size the symbolic build derived from the dims (a `symint` token in the text) is
    a parameter whatever its value (0 and 1 too: the text must not depend on a value
    the run time passes), and its value is the `symint.SymInt` carrying the expression.
    A token on a preprocessor line or an array extent is its value (the code then
    depends on it, and the symbolic build's versions tell the shapes apart)."""
    symbolic = symint.active_tokens() is not None
    tokens = symint.active_tokens() or []
    header, brace, body = source.partition(") {\n")
    for every_token in (True, False):  # too many arguments: small tokens stay literal
        sizes: list[int] = []
        # a symbolic build: one argument per distinct derivation (and value here)
        argument_of: dict[tuple[str, int], int] = {}

        def parameter(match: re.Match[str], every_token: bool = every_token,
                      sizes: list[int] = sizes, argument_of: dict = argument_of) -> str:
            token, literal = match.group(1), match.group(2)
            line, start, end = match.string, match.start(), match.end()
            extent = line[start - 1:start] == "[" and line[end:end + 1] == "]"
            value: int = tokens[int(token)] if token is not None else int(literal)
            keep = str(int(value)) if token is not None else match.group(0)
            if extent:
                return keep
            # a symbolic build hoists only the sizes derived from the dims: a plain
            # literal is the same at every shape of the version (the region check
            # compiles a second shape and compares the text), and as a literal the
            # OpenCL compiler folds it (a division by 32 a shift, a loop of 32 unrolled;
            # BERT's LayerNorm ran 2.7x slower with its 32s as arguments)
            if symbolic and token is None:
                return keep
            if not (token is not None and every_token) and not HOIST_FROM <= value < 2**31:
                return keep
            if symbolic:
                # the same derivation twice is one argument, so the compiler sees one
                # value and shares its divisions (``o / seq`` once per work-item, not
                # once per load)
                key = (str(symint.expr_of(value)), int(value))
                if key not in argument_of:
                    argument_of[key] = len(sizes)
                    sizes.append(value)
                return f"s{argument_of[key]}"
            sizes.append(value)
            return f"s{len(sizes) - 1}"

        hoisted = "".join(symint.plain_text(line) if line.lstrip().startswith("#") else
                          symint.plain_text(_SIZE.sub(parameter, line))
                          for line in body.splitlines(keepends=True))
        if sizes and TENSOR_ARG_BYTES * tensor_args + SIZE_ARG_BYTES * len(sizes) <= \
                ARG_BYTES_LIMIT:
            params = "".join(f", const int s{k}" for k in range(len(sizes)))
            return symint.plain_text(header) + params + brace + hoisted, tuple(sizes)
        if not tokens:
            break
    return symint.plain_text(source), ()


def _tensor(view: GraphView, name: str, kind: str) -> dict[str, object]:
    return {"kind": kind, "dtype": view.dtype(name), "shape": list(view.shape(name)),
            "nbytes": view.nbytes(name)}
