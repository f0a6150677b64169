"""Run an artefact with pyopencl (PoCL by default)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler.backends.opencl import dimpoly
from egraph_compiler.backends.opencl.build import PLAN_VERSION
from egraph_compiler.backends.opencl.cpu_threads import (
    CALLER,
    WORKERS,
    ThreadChoice,
    both_fit,
    expose_caller_device,
    is_caller_device,
    is_worker_pool_device,
)
from egraph_compiler.backends.opencl.images import image_mode
from egraph_compiler.ir.errors import DnnrError

SYMBOLIC_PLAN_VERSION = 3  # `symbolic.SYMBOLIC_PLAN_VERSION` (the run time imports no compiler)


class OpenClError(DnnrError):
    pass


def plan_version(out_dir: str | Path) -> object:
    """The version ``plan.json`` of an artefact states (None when unreadable: the
    loader then says why)."""
    try:
        return json.loads((Path(out_dir) / "plan.json").read_text()).get("version")
    except (OSError, ValueError, AttributeError):
        return None


def _device(device: str | None):  # noqa: ANN202 - pyopencl has no stubs
    import pyopencl as cl

    expose_caller_device()  # before PoCL's first platform query (`cpu_threads`)
    platforms = cl.get_platforms()
    if not platforms:
        raise OpenClError("no OpenCL platform found (pip install pocl-binary-distribution)")
    # PoCL's calling-thread device last: a name matching both means its worker pool
    devices = sorted(((p, d) for p in platforms for d in p.get_devices()),
                     key=lambda pd: is_caller_device(pd[1].name))
    if device is not None:
        for p, d in devices:
            if device.lower() in d.name.lower() or device.lower() in p.name.lower():
                return d
        names = ", ".join(f"{p.name}: {d.name}" for p, d in devices)
        raise OpenClError(f"no OpenCL device matches '{device}' (found: {names})")
    for p, d in devices:
        if "portable" in p.name.lower() or "pocl" in p.name.lower():
            return d
    return devices[0][1]


def _caller_device(device):  # noqa: ANN001, ANN202 - pyopencl has no stubs
    """PoCL's calling-thread device on ``device``'s platform, when ``device`` is its
    worker pool (`cpu_threads`); else None."""
    if not is_worker_pool_device(device.name):
        return None
    return next((d for d in device.platform.get_devices() if is_caller_device(d.name)), None)


@dataclass(frozen=True)
class DeviceTensor:
    """A tensor left in a device buffer (``offset`` in elements): what one segment of a
    segmented artefact hands the next without a copy through the host."""

    buffer: Any  # cl.Buffer
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def read(self, queue: Any) -> np.ndarray:
        import pyopencl as cl

        array = np.empty(self.shape, dtype=self.dtype)
        if array.size:
            cl.enqueue_copy(queue, array, self.buffer, src_offset=self.offset * self.dtype.itemsize)
        return array


Tensor = np.ndarray | DeviceTensor  # a value on the host or on the device


class CompiledModel:
    """A loaded artefact: ``run({input name: array}) -> {output name: array}``.
    ``shared`` (a context and its queue) puts it beside other models on one device, so
    `run_device` can read their `DeviceTensor` outputs in place (segmented artefacts)."""

    def __init__(self, out_dir: str | Path, device: str | None = None,
                 images: bool | None = None, shared: tuple[Any, Any] | None = None) -> None:
        import pyopencl as cl

        out = Path(out_dir)
        try:
            self.plan = json.loads((out / "plan.json").read_text())
            source = (out / "kernels.cl").read_text()
        except OSError as error:
            raise OpenClError(f"{out} is not a dnnr OpenCL artefact: {error}") from None
        # version 3: a symbolic artefact (`symbolic.py`), sizes evaluated per run
        self.symbolic = self.plan.get("version") == SYMBOLIC_PLAN_VERSION
        if self.plan.get("version") not in (PLAN_VERSION, SYMBOLIC_PLAN_VERSION):
            raise OpenClError(f"{out} was written by another dnnr version (plan version "
                              f"{self.plan.get('version')}, expected {PLAN_VERSION}): compile "
                              "it again")
        if shared is not None:
            self.context, self.queue = shared
            self.device = self.context.devices[0]
        else:
            self.device = _device(device)
            # `run` picks PoCL's worker pool or the calling thread per run (`cpu_threads`);
            # a symbolic artefact rebinds its launches per shape and keeps the pool
            distinct = {(la["kernel"], la["local"]) for la in self.plan.get("launches", ())}
            self.caller_device = None if self.symbolic or not both_fit(len(distinct)) else \
                _caller_device(self.device)
            self.context = cl.Context([self.device] + [self.caller_device] * (
                self.caller_device is not None))
            # `run`'s queue has profiling off (PoCL timestamps every command: ResNet-50's
            # run took 7 % longer); `time_launches` reads each kernel's device time from
            # its event on a profiling queue of its own
            self.queue = cl.CommandQueue(self.context, self.device)
        if shared is not None:
            self.caller_device = None
        self.threads = ThreadChoice()
        self._caller: tuple[Any, list] | None = None  # its queue and launches, once built
        self.profiling_queue = cl.CommandQueue(
            self.context, self.device, properties=cl.command_queue_properties.PROFILING_ENABLE)
        # pyopencl caches built binaries keyed by source, so a rebuilt artefact with
        # unchanged kernels does not pay PoCL's compile time again
        # image2d_t tensors (images.py): on when the device supports them, else buffers
        image_tensors = self.plan.get("images", {})
        activation_images = self.plan.get("activation_images", {})
        self.images_on, self.images_note = image_mode(self.device, {**image_tensors, **activation_images},
                                                      images)
        self.source = source
        self.program = cl.Program(self.context, source).build(
            options=self._build_options(), devices=[self.device])
        names = json.loads((out / "weights.json").read_text())
        weights = np.load(out / "weights.npz")
        mf = cl.mem_flags
        # name -> (buffer, element offset): arena tensors are the arena at their offset,
        # never sub-buffers (kernels.py's docstring says why)
        self.buffers: dict[str, tuple[cl.Buffer, int]] = {}
        tensors = self.plan["tensors"]
        # on the host only the constants that are model outputs stay: the device buffers
        # hold the rest (vgg19's 550 MB of weights are not kept twice)
        self.constant_arrays: dict[str, np.ndarray] = {}
        for k, name in enumerate(names):
            array = weights[f"c{k}"]  # read from the archive one at a time
            declared = tensors.get(name, {})
            if declared and (str(array.dtype) != declared["dtype"]
                             or list(array.shape) != declared["shape"]):
                raise OpenClError(f"error: {out}/weights.npz is damaged: weight '{name}' is "
                                  f"{array.dtype}{list(array.shape)}, plan.json says "
                                  f"{declared['dtype']}{declared['shape']}; compile it again")
            if name in self.plan["outputs"]:
                self.constant_arrays[name] = array
            if self.images_on and name in image_tensors:
                info = image_tensors[name]
                texels = np.ascontiguousarray(array, np.float32).reshape(info["height"],
                                                                        info["width"])
                self.buffers[name] = (cl.create_image(
                    self.context, mf.READ_ONLY | mf.COPY_HOST_PTR,
                    cl.ImageFormat(cl.channel_order.R, cl.channel_type.FLOAT),
                    shape=(info["width"], info["height"]), hostbuf=texels), 0)
                continue
            data = np.ascontiguousarray(array).reshape(-1) if array.size else np.zeros(1, np.uint8)
            self.buffers[name] = (cl.Buffer(self.context, mf.READ_ONLY | mf.COPY_HOST_PTR,
                                            hostbuf=data), 0)
        arena_size = max(int(self.plan["arena_bytes"]), 1)
        self.arena = cl.Buffer(self.context, mf.READ_WRITE, arena_size)
        for name, info in tensors.items():
            if info["kind"] == "arena" and self.symbolic:
                continue  # each box of the ranges places it (`_bind_shape`)
            if info["kind"] == "arena":
                itemsize = np.dtype(info["dtype"]).itemsize
                offset, nbytes = int(info["offset"]), int(info["nbytes"])
                if offset % itemsize or offset + nbytes > arena_size:
                    raise OpenClError(f"arena tensor '{name}' at byte {offset} (+{nbytes}) does "
                                      f"not fit an arena of {arena_size} bytes of {info['dtype']}")
                self.buffers[name] = (self.arena, offset // itemsize)
                if self.images_on and name in activation_images:  # RGBA texels (blocked.py)
                    extent = activation_images[name]
                    self.buffers[name] = (cl.create_image(
                        self.context, mf.READ_WRITE,
                        cl.ImageFormat(cl.channel_order.RGBA, cl.channel_type.FLOAT),
                        shape=(extent["width"], extent["height"])), 0)
            elif info["kind"] in ("input", "output", "computed", "scratch"):  # scratch: a block's own
                self.buffers[name] = (cl.Buffer(self.context, mf.READ_WRITE,
                                                max(int(info["nbytes"]), 1)), 0)
        self.launches = []
        self.dims: dict[str, int] | None = None  # a symbolic artefact's current dims
        self.out = out
        self._shape_session: Any = None
        self._kernels: dict[tuple[int, int], Any] = {}  # (version, launch) -> cl.Kernel
        self.launches = self._bind_launches(self.program, self.device)

    def _bind_launches(self, program, device) -> list:  # noqa: ANN001 - pyopencl
        """One kernel object per launch of ``program`` (built for ``device``), its
        arguments bound once, here."""
        import pyopencl as cl

        launches = []
        for launch in self.plan.get("launches", ()):
            kernel = cl.Kernel(program, launch["kernel"])
            self._check_work_group(kernel, launch, device)
            args = []
            for arg in launch["args"]:
                buffer, offset = self.buffers[arg]
                args += [buffer, np.uint64(offset)]  # the kernel's `ulong NAME_off`
            args += [np.int32(size) for size in launch["sizes"]]  # hoisted literals
            kernel.set_args(*args)
            launches.append((kernel, (launch["global"],), (launch["local"],)))
        return launches

    def _build_options(self) -> list[str]:
        """The program's build options, the same on every device that runs it."""
        return ["-D", "DNNR_IMAGES"] if self.images_on else []

    def _caller_launches(self) -> tuple[Any, list]:
        """The calling-thread device's queue and launches, built the first time
        `ThreadChoice` picks it."""
        if self._caller is None:
            import pyopencl as cl

            program = cl.Program(self.context, self.source).build(
                options=self._build_options(), devices=[self.caller_device])
            self._caller = (cl.CommandQueue(self.context, self.caller_device),
                            self._bind_launches(program, self.caller_device))
        return self._caller

    def _check_work_group(self, kernel, launch: dict, device=None) -> None:  # noqa: ANN001 - pyopencl
        """A launch the device cannot run is an error here, not a crash in the driver.
        The local size is compiled in (``reqd_work_group_size``), so it cannot be clamped."""
        import pyopencl as cl

        device = device or self.device
        local, global_size = int(launch["local"]), int(launch["global"])
        limit = min(device.max_work_group_size,
                    kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                               device))
        if local > limit or global_size % local:
            raise OpenClError(
                f"kernel {launch['kernel']} (block {launch['block']}) needs work-groups of "
                f"{local} over {global_size} work-items; {device.name} allows at most "
                f"{limit} per group for it and the global size must be a multiple: rebuild "
                f"the artefact with a smaller work group")

    def time_launches(self, repeats: int = 3) -> list[float]:
        """Device seconds of each launch (the median of ``repeats`` whole runs of the
        plan, launched back to back as `run` does), in plan order, on the data the last
        `run` left. Times come from OpenCL profiling events (end − start), not host
        timers: a host timer around one launch also counts the enqueue and the wait,
        and disagreed with the device by up to 70 % on an H100 (DESIGN.md §7)."""
        import statistics

        samples: list[list[float]] = [[] for _ in self.launches]
        self.queue.finish()
        for _ in range(max(repeats, 1)):
            events = [self._enqueue(kernel, global_size, local_size, self.profiling_queue)
                      for kernel, global_size, local_size in self.launches]
            self.profiling_queue.finish()
            for k, event in enumerate(events):
                samples[k].append((event.profile.end - event.profile.start) * 1e-9)
        return [statistics.median(s) for s in samples]

    def _enqueue(self, kernel, global_size: tuple[int], local_size: tuple[int],  # noqa: ANN001, ANN202 - pyopencl
                 queue=None):  # noqa: ANN001
        import pyopencl as cl

        return cl.enqueue_nd_range_kernel(self.queue if queue is None else queue, kernel,
                                          global_size, local_size)

    @property
    def kernel_names(self) -> list[str]:
        if self.symbolic:
            return [la["kernel"] for v in self.plan["versions"] for la in v["launches"]]
        return [la["kernel"] for la in self.plan["launches"]]

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on host arrays; on PoCL each run goes to the worker pool or the calling
        thread, whichever `ThreadChoice` finds faster lately (`cpu_threads`)."""
        import pyopencl as cl

        tensors = self.plan["tensors"]
        mode = self.threads.next() if self.caller_device is not None else WORKERS
        queue, launches = self._caller_launches() if mode == CALLER else (self.queue, None)
        start = time.perf_counter()
        self._launch(inputs, queue, launches)
        results = {}
        for name in self.plan["outputs"]:
            info = tensors[name]
            if name in self.constant_arrays:
                results[name] = np.array(self.constant_arrays[name])
                continue
            if name in inputs and info["kind"] == "input":
                results[name] = np.array(inputs[name])
                continue
            shape = info["shape"] if not self.symbolic else self._output_shapes[name]
            array = np.empty(shape, dtype=info["dtype"])
            if array.size:
                buffer, offset = self.buffers[name]
                cl.enqueue_copy(queue, array, buffer, src_offset=offset * array.itemsize)
            results[name] = array
        queue.finish()
        self.threads.record(mode, time.perf_counter() - start)
        return results

    def _launch(self, inputs: Mapping[str, Tensor], queue=None,  # noqa: ANN001 - pyopencl
                launches: list | None = None) -> None:
        """Copy ``inputs`` in (host arrays, or device tensors buffer to buffer) and
        enqueue every launch, on ``queue`` (`run`'s queue unless given) with
        ``launches`` bound for its device."""
        import pyopencl as cl

        queue = queue or self.queue
        tensors = self.plan["tensors"]
        if self.symbolic:
            self._bind_shape(inputs)
        for name in self.plan["inputs"]:
            if name not in inputs:
                raise OpenClError(f"missing input '{name}'")
            info = tensors[name]
            given = inputs[name]
            if isinstance(given, DeviceTensor):
                if self.symbolic or list(given.shape) != info["shape"] or str(given.dtype) != info["dtype"]:
                    raise OpenClError(f"input '{name}' is {given.dtype}{list(given.shape)} on the "
                                      f"device, the artefact was compiled for {info['dtype']}{info['shape']}")
                if given.nbytes:
                    cl.enqueue_copy(queue, self.buffers[name][0], given.buffer,
                                    byte_count=given.nbytes, src_offset=given.offset * given.dtype.itemsize,
                                    dst_offset=self.buffers[name][1] * given.dtype.itemsize)
                continue
            # np.require keeps a rank-0 input rank 0 (ascontiguousarray makes it 1-D)
            array = np.require(np.asarray(given, dtype=info["dtype"]), requirements="C")
            if not self.symbolic and list(array.shape) != info["shape"]:
                raise OpenClError(f"input '{name}' has shape {list(array.shape)}, the artefact "
                                  f"was compiled for {info['shape']}")
            if array.size:
                cl.enqueue_copy(queue, self.buffers[name][0], array)
        for kernel, global_size, local_size in launches or self.launches:
            self._enqueue(kernel, global_size, local_size, queue)

    def run_device(self, inputs: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """Run on ``inputs`` (host arrays or device tensors of the shared context) and
        leave the outputs on the device, valid until this model runs again (constant
        outputs stay host arrays; an input passed through is returned as given)."""
        if self.symbolic:
            raise OpenClError("a symbolic artefact cannot hand its outputs over on the device")
        self._launch(inputs)
        tensors = self.plan["tensors"]
        results: dict[str, Tensor] = {}
        for name in self.plan["outputs"]:
            info = tensors[name]
            if name in self.constant_arrays:
                results[name] = np.array(self.constant_arrays[name])
            elif name in inputs and info["kind"] == "input":
                results[name] = inputs[name]
            else:
                buffer, offset = self.buffers[name]
                results[name] = DeviceTensor(buffer, offset, np.dtype(info["dtype"]), tuple(info["shape"]))
        return results

    # -- symbolic artefacts ------------------------------------------------------------
    def _bind_shape(self, inputs: Mapping[str, Any]) -> None:
        """Bind the dims from the input shapes, check them against the compiled ranges
        and select the box (version) they fall in; its launches are set up once per
        distinct shape in a row."""
        ranges = self.plan["dims"]
        dims: dict[str, int] = {}
        for name in self.plan["inputs"]:
            declared = self.plan["tensors"][name]["shape"]
            shape = np.shape(inputs[name]) if name in inputs else None
            if shape is None:
                continue
            if len(shape) != len(declared):
                raise OpenClError(f"input '{name}' has shape {list(shape)}, the artefact takes "
                                  f"rank {len(declared)} {declared}")
            for axis, (want, got) in enumerate(zip(declared, shape, strict=True)):
                if isinstance(want, int):
                    if want != got:
                        raise OpenClError(f"input '{name}' has shape {list(shape)}: dim {axis} must "
                                          f"be {want} (the artefact takes {declared})")
                    continue
                if want not in ranges:
                    raise OpenClError(f"input '{name}' dim {axis} is the expression {want!r}, "
                                      "which a symbolic artefact cannot bind")
                low, high, step = (*ranges[want], 1)[:3]
                if not low <= got <= high or (got - low) % step:
                    text = f"{low}..{high}" + (f":{step}" if step != 1 else "")
                    raise OpenClError(f"input '{name}' dim {axis} ({want}) is {got}, outside the "
                                      f"compiled range {want}={text}\n  hint: compile "
                                      f"again with --dim {want}=LO..HI covering it")
                if dims.setdefault(want, int(got)) != got:
                    raise OpenClError(f"input '{name}' dim {axis} ({want}) is {got}, but another "
                                      f"input has {want}={dims[want]}")
        if dims == self.dims:
            return
        computed = self.plan.get("computed")
        if computed:  # constants folded from the dims (`symbolic.dim_dependent_constants`)
            import pyopencl as cl

            if self._shape_session is None:
                import onnxruntime as ort

                self._shape_session = ort.InferenceSession(
                    str(self.out / computed["model"]), providers=["CPUExecutionProvider"])
            feeds = {i.name: np.asarray(inputs[i.name], self.plan["tensors"][i.name]["dtype"])
                     for i in self._shape_session.get_inputs()}
            for name, array in zip(computed["values"], self._shape_session.run(
                    computed["values"], feeds), strict=True):
                array = np.ascontiguousarray(array, self.plan["tensors"][name]["dtype"])
                if array.size:
                    cl.enqueue_copy(self.queue, self.buffers[name][0], array)
        box = next(b for b in self.plan["boxes"] if all(
            lo <= dims[n] <= hi for n, (lo, hi) in b["box"].items()))
        version = box["version"]
        tensors = self.plan["tensors"]
        buffers = dict(self.buffers)
        for name, offset in box["offsets"].items():
            itemsize = np.dtype(tensors[name]["dtype"]).itemsize
            at = dimpoly.evaluate(offset, dims) if isinstance(offset, str) else int(offset)
            buffers[name] = (self.arena, at // itemsize)
        launches = []
        for k, launch in enumerate(self.plan["versions"][version]["launches"]):
            kernel = self._kernels.get((version, k))
            if kernel is None:
                import pyopencl as cl

                kernel = self._kernels[(version, k)] = cl.Kernel(self.program, launch["kernel"])
            args = []
            for arg in launch["args"]:
                buffer, offset = buffers[arg]
                args += [buffer, np.uint64(offset)]
            args += [np.int32(dimpoly.evaluate(e, dims)) for e in box["sizes"][k]]
            kernel.set_args(*args)
            local = int(launch["local"])
            items = dimpoly.evaluate(box["items"][k], dims)
            global_size = -(-items // local) * local
            self._check_work_group(kernel, {**launch, "global": global_size})
            launches.append((kernel, (global_size,), (local,)))
        self.launches = launches
        self._output_shapes = {n: [dimpoly.evaluate(e, dims) for e in shape]
                               for n, shape in box["output_shapes"].items()}
        self.dims = dims
