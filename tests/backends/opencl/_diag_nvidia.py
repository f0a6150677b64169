# temporary device diagnostic (deleted after use)
import json, os, subprocess, sys, re, faulthandler
from pathlib import Path
import numpy as np
faulthandler.enable()

def info():
    import pyopencl as cl
    for p in cl.get_platforms():
        for d in p.get_devices():
            print(p.name, d.name, d.driver_version, "maxwg", d.max_work_group_size, "local", d.local_mem_size,
                  "align_bits", d.mem_base_addr_align, "maxalloc", d.max_mem_alloc_size, flush=True)

def one(model, variant):
    import pyopencl as cl
    out = Path("bench_artefacts") / model / "fused"
    plan = json.loads((out / "plan.json").read_text())
    src = (out / "kernels.cl").read_text()
    if "nohint" in variant:
        src = src.replace("__attribute__((opencl_unroll_hint))", "")
    if "norestrict" in variant:
        src = src.replace(" restrict ", " ")
    d = [d for p in cl.get_platforms() for d in p.get_devices() if "NVIDIA" in p.name][0]
    ctx = cl.Context([d]); q = cl.CommandQueue(ctx)
    prg = cl.Program(ctx, src).build()
    print("built", flush=True)
    names = json.loads((out / "weights.json").read_text()); w = np.load(out / "weights.npz")
    mf = cl.mem_flags; bufs = {}
    for k, n in enumerate(names):
        a = np.ascontiguousarray(w[f"c{k}"]).reshape(-1)
        bufs[n] = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
    arena = cl.Buffer(ctx, mf.READ_WRITE, max(plan["arena_bytes"], 1))
    for n, t in plan["tensors"].items():
        if t["kind"] == "arena":
            if "sep" in variant:
                bufs[n] = cl.Buffer(ctx, mf.READ_WRITE, t["nbytes"])
            else:
                bufs[n] = arena.get_sub_region(t["offset"], t["nbytes"])
        elif t["kind"] in ("input", "output"):
            bufs[n] = cl.Buffer(ctx, mf.READ_WRITE, t["nbytes"])
    feeds = dict(np.load(Path("bench_artefacts") / model / "inputs.npz"))
    for n in plan["inputs"]:
        cl.enqueue_copy(q, bufs[n], np.ascontiguousarray(feeds[n], dtype=np.float32))
    q.finish()
    for i, la in enumerate(plan["launches"]):
        k = cl.Kernel(prg, la["kernel"])
        if i == 0 or "wginfo" in variant:
            print(la["kernel"], "WG", k.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, d),
                  "lmem", k.get_work_group_info(cl.kernel_work_group_info.LOCAL_MEM_SIZE, d),
                  "pmem", k.get_work_group_info(cl.kernel_work_group_info.PRIVATE_MEM_SIZE, d), flush=True)
        args = [bufs[a] for a in la["args"]]
        k.set_args(*args)
        print("launch", i, la["kernel"], la["global"], la["local"], la["args"], flush=True)
        cl.enqueue_nd_range_kernel(q, k, (la["global"],), (la["local"],))
        q.finish()
        print("  ok", flush=True)
    import onnxruntime as ort
    s = ort.InferenceSession(str(Path("bench_artefacts") / model / "model.onnx"), providers=["CPUExecutionProvider"])
    exp = s.run(None, feeds)
    for n, e in zip(plan["outputs"], exp):
        a = np.empty(plan["tensors"][n]["shape"], np.float32); cl.enqueue_copy(q, a, bufs[n])
        print("RESULT", model, variant, n, float(np.max(np.abs(a - e))), flush=True)

if __name__ == "__main__":
    if len(sys.argv) > 1:
        one(sys.argv[1], sys.argv[2]); sys.exit(0)
    info()
    for model, variant in [("mha", "base-wginfo"), ("mha", "sep"), ("mha", "nohint"), ("mha", "norestrict"),
                           ("transformer_encoder", "base"), ("transformer_encoder", "sep"),
                           ("transformer_encoder", "nohint"), ("swin_window", "base")]:
        print("=====", model, variant, flush=True)
        try:
            r = subprocess.run([sys.executable, __file__, model, variant], capture_output=True, text=True, timeout=60)
            print(r.stdout[-3000:], r.stderr[-2500:], "rc", r.returncode, flush=True)
        except subprocess.TimeoutExpired as e:
            print("TIMEOUT", e.stdout[-2000:] if e.stdout else "", flush=True)
