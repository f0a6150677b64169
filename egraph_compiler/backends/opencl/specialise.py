"""OpenCL for graphs whose sizes depend on the VALUES of graph inputs (issue 17 item 6).

A Reshape whose target, a Slice whose bounds, a Resize whose scales, a window whose
length… arrive as graph inputs has output sizes nobody knows before the run. The
OpenCL backend generates code for static shapes, so such a graph is compiled the way
torch.compile treats an int input it cannot keep symbolic: a guard on the value, a
compile per value set, a cache of them. (onnxruntime sizes every kernel at run time
and TVM Relax evaluates symbolic shape functions at run time; both need kernels
written for any size, which dnnr's generator does not produce for every operator.)

- compile time (`value_inputs`, `write_deferred`): the optimised graph is kept
  (``specialise.onnx``), with the inputs whose values decide a size and, per input,
  the node that needs it. ``plan.json`` (version 4) says so; no kernel is generated.
- run time (`SpecialisingModel`): at the first run with given values (and input dims),
  those inputs become constants, shapes are inferred again and the backend runs as
  for any static graph (fusion → select → plan → kernels, a fraction of a second on
  small graphs); the compiled model is cached keyed by the values and the input
  shapes, so a run with the same values launches the cached kernels at once, in
  memory (`LOADED_LIMIT` per model) and on disk for later processes (`_cache_folder`).
  Every specialisation is recorded (`SpecialisingModel.specialisations`).

Which inputs: every graph input reached backwards from an operand of a node whose
output shape is not static, through values shape inference could not tell, as long
as each value on the way could be a shape value (rank ≤ 1, at most
`shapes.infer.VALUE_LIMIT` elements: the sizes shape inference tracks). A size that
depends on a tensor's contents (the ``execution_determined`` operators: NonZero,
Unique, Compress, NonMaxSuppression) is not a value input's: such a graph is run in
segments cut at those nodes (`segmented`), each compiled here once its sizes are
known. A small 1-D data operand of a size-from-values node (OneHot's indices) is
specialised on too: correct, but compiled once per distinct value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler.backends.opencl.build import Artefact
from egraph_compiler.ir.dims import DimExpr, shape_is_static
from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.ir.graph import Graph

SPECIALISE_PLAN_VERSION = 4  # plan.json of a deferred artefact (static: 2, symbolic: 3)
GRAPH_FILE = "specialise.onnx"
PROFILE_FILE = "specialise-profile.json"
EXECUTION_DETERMINED = "execution_determined"  # the rule files' dynamism class
# specialisations kept loaded (device buffers, kernels) per model; older ones reload from disk
LOADED_LIMIT = 16


def _is_static(graph: Graph, name: str) -> bool:
    tensor_type = graph.types.get(name)
    return name in graph.constants or (tensor_type is not None and tensor_type.shape is not None
                                       and shape_is_static(tensor_type.shape))


def _size_unknown(graph: Graph, name: str, input_dims: set[str]) -> bool:
    """Whether shape inference could not tell ``name``'s shape from the input dims: no
    shape, or a dim over a fresh symbol (``d0``…) rather than the inputs' own dims."""
    if name in graph.constants:
        return False
    tensor_type = graph.types.get(name)
    if tensor_type is None or tensor_type.shape is None:
        return True
    return any(isinstance(d, DimExpr) and not d.symbols() <= input_dims for d in tensor_type.shape)


def _could_be_shape_value(graph: Graph, name: str) -> bool:
    """A value small enough to be a size vector (rank ≤ 1, ≤ VALUE_LIMIT elements)."""
    from egraph_compiler.shapes.infer import VALUE_LIMIT

    tensor_type = graph.types.get(name)
    if tensor_type is None or tensor_type.shape is None or len(tensor_type.shape) > 1:
        return False
    if not all(isinstance(d, int) for d in tensor_type.shape):
        return False
    return int(np.prod(tensor_type.shape, dtype=np.int64)) <= VALUE_LIMIT


def _dynamism(op: str) -> str | None:
    from egraph_compiler.ops import current

    info = current().get(op)
    return str(info.decl.dynamism) if info is not None else None


def _attribute_operands(op: str) -> tuple[int, ...]:
    from egraph_compiler.ops import current

    info = current().get(op)
    return tuple(position for position, _, _ in info.operand_attributes) if info is not None else ()


def value_inputs(graph: Graph) -> dict[str, str]:
    """The graph inputs whose values decide a size in ``graph`` (shapes inferred), each
    with the node that needs it; empty when every size follows from the input dims."""
    input_dims = {s for v in graph.inputs for s in _symbols(v.type.shape)}
    # an output nobody reads (an RNN's unused state) needs no size
    read = {i for node in graph.nodes for i in node.inputs} | {v.name for v in graph.outputs}
    # sizes an operator computes from its data (SoD²'s execution_determined: NonZero,
    # Unique, Compress…) are not a function of small input values: refused as before
    unknown = [node for node in graph.nodes
               if any(o in read and _size_unknown(graph, o, input_dims) for o in node.outputs)
               and _dynamism(node.op) != EXECUTION_DETERMINED]
    if not unknown:
        return {}
    inputs = {v.name for v in graph.inputs}
    producer = graph.producer()
    found: dict[str, str] = {}
    for node in unknown:
        where = f"node '{node.name}' ({node.op})"
        # an operator with operands the IR holds as attributes (Split's sizes, Slice's
        # bounds, axes, pads) has its sizes decided by those alone, not by its data
        held = _attribute_operands(node.op)
        stack = [name for k, name in enumerate(node.inputs) if name and (not held or k in held)]
        seen: set[str] = set()
        while stack:
            name = stack.pop()
            if name in seen or name in graph.constants or name in graph.shape_values:
                continue  # known at compile time (a constant, or a tracked value: Shape(x))
            if name in producer and _dynamism(producer[name].op) == EXECUTION_DETERMINED:
                continue  # sized by the data at run time (`segmented`), not by an input's value
            seen.add(name)
            if not _could_be_shape_value(graph, name):
                continue  # data, or a size no value of a small input decides
            if name in inputs:
                found.setdefault(name, where)
            elif name in producer:
                stack.extend(i for i in producer[name].inputs if i)
    return dict(sorted(found.items()))


def _params_json(params: Any) -> dict[str, Any]:
    """The scalar fields of ``params`` (`KernelParams`); forced variants and tuned choices
    are not carried over to the run-time compile (a clear refusal names them)."""
    from egraph_compiler.backends.opencl.kernels import KernelParams

    params = params or KernelParams()
    default = KernelParams()
    carried: dict[str, Any] = {}
    for item in dataclasses.fields(params):
        value = getattr(params, item.name)
        if isinstance(value, (bool, int, float, str)):
            carried[item.name] = value
        elif value != getattr(default, item.name):
            raise DnnrError(f"error: an OpenCL artefact specialised at run time cannot carry the "
                            f"kernel option {item.name}={value!r} yet\n  hint: compile without it, or "
                            "make the inputs that decide sizes constants")
    return carried


def _rules_record(tables: Any) -> dict[str, Any] | None:
    """The rule files the run-time compile must load again (their digest, to refuse
    changed files), or None for the shipped library's tables."""
    files = getattr(tables, "files", None)
    if not files:
        return None
    return {"files": list(files), "sha256": _files_digest(files)}


def _files_digest(files: list[str]) -> str:
    digest = hashlib.sha256()
    for name in files:
        try:
            digest.update(Path(name).read_bytes())
        except OSError as error:
            raise DnnrError(f"error: cannot read rule file {name}: {error.strerror}") from None
    return digest.hexdigest()


def write_deferred(graph: Graph, out_dir: str | Path, needed: Mapping[str, str], tables: Any = None,
                   profile_db: Any = None, fuse: bool = True, layouts: str = "pbqp",
                   params: Any = None) -> Artefact:
    """An artefact compiled at run time for the values of ``needed``'s inputs: the graph,
    the options of this compile and the value inputs with their reasons; cut into
    segments at the nodes whose output sizes come from their data (`segmented`)."""
    from egraph_compiler import ir
    from egraph_compiler.backends.opencl.segmented import data_dependent

    cuts = data_dependent(graph)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / GRAPH_FILE).write_bytes(ir.to_onnx(graph).SerializeToString())
    if profile_db is not None:
        profile_db.save(out / PROFILE_FILE)
    tensors = {v.name: {"kind": "input", "dtype": v.type.dtype, "shape": _dims(v.type.shape)}
               for v in graph.inputs}
    tensors.update({v.name: {"kind": "output", "dtype": v.type.dtype, "shape": _dims(v.type.shape)}
                    for v in graph.outputs if v.name not in tensors})
    doc = {
        "version": SPECIALISE_PLAN_VERSION, "graph": graph.name, "model": GRAPH_FILE,
        "inputs": [v.name for v in graph.inputs], "outputs": [v.name for v in graph.outputs],
        "tensors": tensors, "value_inputs": dict(needed), "data_dependent": cuts,
        "dims": {name: list(r) for name, r in sorted(graph.symbols.items())
                 if any(name in _symbols(v.type.shape) for v in graph.inputs)},
        "options": {"fuse": fuse, "layouts": layouts, "params": _params_json(params),
                    "profile": PROFILE_FILE if profile_db is not None else None,
                    "rules": _rules_record(tables)},
    }
    (out / "plan.json").write_text(json.dumps(doc, indent=1) + "\n")
    described: dict[str, Any] = {"value_inputs": dict(needed),
                                 "why": "sizes depend on these inputs' values: the kernels are "
                                        "generated at the first run with each set of values and cached"}
    if cuts:
        described["data_dependent"] = cuts
        described["why"] = ("sizes depend on the data of these nodes (device: count, scan and scatter "
                            "kernels; host: selection on read-back operands): the graph runs in "
                            "segments cut at them, each compiled at the first run with its sizes"
                            + (" and on the value inputs' values" if needed else ""))
    return Artefact(out, 0, 0, len(graph.nodes), 0, 0, 0, specialised=described)


def _dims(shape: Any) -> list[Any] | None:
    return None if shape is None else [d if isinstance(d, int) else str(d) for d in shape]


def _symbols(shape: Any) -> set[str]:
    return {s for d in shape or () if isinstance(d, DimExpr) for s in d.symbols()}


def specialised_graph(graph: Graph, values: Mapping[str, np.ndarray],
                      shapes_given: Mapping[str, tuple[int, ...]]) -> Graph:
    """``graph`` with its symbolic input dims bound to ``shapes_given`` and the inputs of
    ``values`` made constants (their operands held as attributes), shapes inferred."""
    from egraph_compiler import shapes
    from egraph_compiler.fusion.planner import fold_compile_time
    from egraph_compiler.ops.evaluate import with_constant_operands_as_attrs

    bindings: dict[str, int] = {}
    for value in graph.inputs:
        given = shapes_given.get(value.name)
        for dim, size in zip(value.type.shape or (), given or (), strict=False):
            if isinstance(dim, DimExpr) and str(dim) in dim.symbols():
                bindings.setdefault(str(dim), int(size))
    if bindings:
        graph = shapes.bind_symbols(graph, bindings)
    constants = {**graph.constants, **values}
    nodes = tuple(with_constant_operands_as_attrs(node, constants) for node in graph.nodes)
    graph = dataclasses.replace(graph, inputs=tuple(v for v in graph.inputs if v.name not in values),
                                nodes=nodes, constants=constants, types={}, shape_values={})
    graph = shapes.infer_shapes(graph)
    # a size computed from the values through operators shape inference does not track
    # (an expanded CenterCropPad's Max/Div chain): evaluate what is now constant, again
    # until nothing is left to fold
    while True:
        folded = fold_compile_time(graph)
        if len(folded.nodes) == len(graph.nodes):
            return graph
        graph = shapes.infer_shapes(dataclasses.replace(folded, types={}, shape_values={}))


def compile_for_values(out_dir: str | Path, inputs: Mapping[str, np.ndarray], target: str | Path) -> int:
    """Compile the deferred artefact ``out_dir`` for ``inputs`` into ``target`` (kernels
    generated, nothing built on a device or cached): what its first run with them
    compiles, so a caller can see a refusal early. The launches per run (0 for a
    segmented artefact: its segments are sized by the run)."""
    model = SpecialisingModel(out_dir, cache=False)
    if model.data_dependent:
        return 0
    return model._compile(inputs, Path(target))


class SpecialisingModel:
    """A loaded version-4 artefact: ``run(inputs)`` compiles the backend for the values of
    its value inputs (and the input shapes) at the first run with them, then runs the
    cached `CompiledModel`."""

    def __init__(self, out_dir: str | Path, device: str | None = None,
                 images: bool | None = None, *, cache: bool = True) -> None:
        self.out = Path(out_dir)
        self.plan = json.loads((self.out / "plan.json").read_text())
        self.device, self.images = device, images
        self.value_inputs: dict[str, str] = self.plan["value_inputs"]
        self._compiled: OrderedDict[str, Any] = OrderedDict()  # key digest -> CompiledModel
        self._graph: Graph | None = None
        self._rules: Any = None
        self._cache = _cache_folder(self.out, self.plan) if cache else None
        self.specialisations: list[dict[str, Any]] = []  # one per compile, in order
        self.last: Any = None  # the CompiledModel of the last run
        self.data_dependent: dict[str, str] = self.plan.get("data_dependent", {})
        self._segmented: Any = None  # a `segmented.SegmentedRun`, made at the first run

    # what a loaded CompiledModel offers, answered by the last specialisation
    @property
    def kernel_names(self) -> list[str]:
        return self.last.kernel_names if self.last is not None else []

    def time_launches(self, repeats: int = 3) -> list[float]:
        if self.last is None:
            raise DnnrError("error: run the model once before timing it (its kernels are "
                            "generated at the first run with its value inputs)")
        return list(self.last.time_launches(repeats))

    def key(self, inputs: Mapping[str, np.ndarray]) -> str:
        """What a specialisation depends on: the values of the value inputs (dtype, shape
        and bytes) and every input's shape."""
        digest = hashlib.sha256()
        for name in self.plan["inputs"]:
            array = np.asarray(inputs[name]) if name in inputs else None
            if array is None:
                raise DnnrError(f"error: missing input '{name}'")
            digest.update(f"{name}:{array.dtype}:{list(array.shape)};".encode())
            if name in self.value_inputs:
                digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()[:16]

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.data_dependent:
            from egraph_compiler.backends.opencl.segmented import SegmentedRun

            self._check_dims(inputs)
            if self._segmented is None:
                self._segmented = SegmentedRun(self)
            results = self._segmented.run(inputs)
            self.last = self._segmented.last
            return results
        key = self.key(inputs)
        model = self._compiled.get(key)
        if model is None:
            model = self._compiled[key] = self._specialise(inputs, key)
            if len(self._compiled) > LOADED_LIMIT:  # the least recently run goes (disk keeps it)
                self._compiled.popitem(last=False)
        self._compiled.move_to_end(key)
        self.last = model
        return model.run({n: a for n, a in inputs.items() if n not in self.value_inputs})

    def _load_rules(self) -> Any:
        record = self.plan["options"]["rules"]
        if record is None:
            return None
        if self._rules is None:
            from egraph_compiler import dsl

            if _files_digest(record["files"]) != record["sha256"]:
                raise DnnrError(f"error: the rule files {self.out} was compiled with have changed "
                                "since; its kernels are generated at run time with them\n"
                                "  hint: compile the artefact again")
            self._rules = dsl.load_rules(record["files"])
        return self._rules

    def _specialise(self, inputs: Mapping[str, np.ndarray], key: str) -> Any:
        """The compiled model for ``inputs``' values: from the on-disk cache when an
        earlier process compiled it, else compiled now and stored there."""
        from egraph_compiler.backends import opencl

        began = time.perf_counter()
        values = {n: np.asarray(inputs[n]).tolist() for n in self.value_inputs}
        stored = self._cache / key if self._cache is not None else None
        if stored is not None and (stored / "plan.json").is_file():
            try:
                model = opencl.load(stored, self.device, self.images)
            except DnnrError:  # written by another dnnr version, or damaged: compile again
                shutil.rmtree(stored, ignore_errors=True)
            else:
                self.specialisations.append({
                    "key": key, "seconds": round(time.perf_counter() - began, 4), "values": values,
                    "launches": len(model.plan["launches"]), "cached": True})
                return model
        work = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=self._cache)) if self._cache is not None \
            else Path(tempfile.mkdtemp(prefix="dnnr-specialised-"))
        try:
            launches = self._compile(inputs, work)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        target = work
        if stored is not None:
            try:
                work.replace(stored)  # atomic: another process reading sees all or nothing
                target = stored
            except OSError:  # another process stored it first
                target = stored if (stored / "plan.json").is_file() else work
        model = opencl.load(target, self.device, self.images)
        self.specialisations.append({
            "key": key, "seconds": round(time.perf_counter() - began, 4), "values": values,
            "launches": launches, "cached": False})
        return model

    def rules_context(self) -> Any:
        """The registry of the rule files this artefact was compiled with, in force."""
        from egraph_compiler import ops

        rules = self._load_rules()
        return ops.using(rules) if rules is not None else _no_context()

    def graph(self) -> Graph:
        """The optimised graph kept at compile time, shapes inferred (call under
        `rules_context`)."""
        if self._graph is None:
            from egraph_compiler import ir, shapes

            self._graph = shapes.infer_shapes(ir.load_onnx(self.out / self.plan["model"]))
        return self._graph

    def compile_static(self, graph: Graph, target: Path) -> int:
        """Write the static artefact of ``graph`` (sizes all known) into ``target`` with
        this artefact's compile options (call under `rules_context`); its launches."""
        from egraph_compiler.backends import opencl
        from egraph_compiler.backends.opencl.kernels import KernelParams
        from egraph_compiler.backends.static_checks import prepare_static_graph
        from egraph_compiler.fusion import ProfileDb

        options = self.plan["options"]
        graph = prepare_static_graph(graph, "opencl")
        db = ProfileDb.load(self.out / options["profile"]) if options["profile"] else None
        artefact = opencl.compile_graph(graph, target, fuse=options["fuse"], tables=self._load_rules(),
                                        profile_db=db, layouts=options["layouts"],
                                        params=KernelParams(**options["params"]))
        if artefact.specialised is not None:  # a size from a value no value input decides
            where = ", ".join(artefact.specialised["value_inputs"].values()) or "its nodes"
            raise DnnrError(f"error: {self.out}: sizes still unknown in a graph specialised at run "
                            f"time (at {where})\n  hint: compile for the onnx target")
        return artefact.kernels

    def _compile(self, inputs: Mapping[str, np.ndarray], target: Path) -> int:
        """Specialise the graph for ``inputs`` and write its static artefact into
        ``target``; the launches per run."""
        tensors = self.plan["tensors"]
        self._check_dims(inputs)
        with self.rules_context():
            values = {name: np.asarray(inputs[name], dtype=tensors[name]["dtype"])
                      for name in self.value_inputs}
            graph = specialised_graph(self.graph(), values,
                                      {n: np.shape(a) for n, a in inputs.items()})
            left = value_inputs(graph)
            if left or any(not _is_static(graph, n) for n in graph.types):
                raise DnnrError(f"error: {self.out}: sizes still unknown after specialising on "
                                f"{', '.join(self.value_inputs)}"
                                + (f" (they also depend on {', '.join(left)})" if left else ""))
            launches = self.compile_static(graph, target)
        # an output that folds to a constant once the values are known (a window of a
        # given length) is served from the weights, as a constant output of a static model is
        return launches

    def _check_dims(self, inputs: Mapping[str, np.ndarray]) -> None:
        """Each symbolic input dim inside its compiled range (``--dim``)."""
        for name in self.plan["inputs"]:
            declared = self.plan["tensors"][name]["shape"] or []
            for axis, (want, got) in enumerate(zip(declared, np.shape(inputs[name]), strict=False)):
                if isinstance(want, str) and want in self.plan["dims"]:
                    low, high = self.plan["dims"][want]
                    if not low <= got <= high:
                        raise DnnrError(f"error: input '{name}' dim {axis} ({want}) is {got}, outside "
                                        f"the compiled range {want}={low}..{high}")


class _no_context:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _cache_folder(out: Path, plan: Mapping[str, Any]) -> Path | None:
    """Where this artefact's specialisations are kept between processes: the user's cache
    (``$DNNR_CACHE_DIR``, else ``$XDG_CACHE_HOME/dnnr``, else ``~/.cache/dnnr``), named by
    the digest of the artefact's plan and graph; None when that folder cannot be made."""
    digest = hashlib.sha256(json.dumps(plan, sort_keys=True).encode())
    try:
        digest.update((out / plan["model"]).read_bytes())
        env, xdg = os.environ.get("DNNR_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME")
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
        folder = (Path(env) if env else base / "dnnr") / "opencl-specialised" / digest.hexdigest()[:24]
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # no home folder, or a read-only one
        return None
    return folder
