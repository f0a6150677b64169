# temporary device diagnostic (deleted after use)
import gc, subprocess, sys, faulthandler
from pathlib import Path
import numpy as np
faulthandler.enable()
sys.path.insert(0, ".")

def p(*a):
    print(*a, flush=True)

def one(model, variant):
    from egraph_compiler.backends.opencl.runtime import CompiledModel
    target = Path("bench_artefacts") / model
    feeds = dict(np.load(target / "inputs.npz"))
    import os; m = CompiledModel(target / "fused", os.environ.get("DIAG_DEV", "NVIDIA") or None)
    p("built")
    if "norun" not in variant:
        m.run(feeds); p("ran")
    tensors = m.plan["tensors"]
    subs = [n for n, t in tensors.items() if t["kind"] == "arena"]
    if "dropkernels" in variant:
        m.launches = []; gc.collect(); p("kernels dropped")
    if "parentfirst" in variant:
        m.arena.release(); p("arena released")
    if "subfirst" in variant or "parentfirst" in variant:
        for n in subs:
            p("release", n, tensors[n]["offset"], tensors[n]["nbytes"]); m.buffers[n].release()
        p("subs released")
        if "subfirst" in variant:
            m.arena.release(); p("arena released")
    m.queue.finish()
    del m; gc.collect(); p("SURVIVED", model, variant)

if __name__ == "__main__":
    if len(sys.argv) > 1:
        one(sys.argv[1], sys.argv[2]); p("exit"); sys.exit(0)
    for model, variant in [("mha", "norun"), ("mha", "rundel"), ("mha", "subfirst"), ("mha", "dropkernels-subfirst"),
                           ("mha", "parentfirst"), ("mha", "dropkernels"),
                           ("squeezenet", "rundel"), ("squeezenet", "parentfirst"),
                           ("transformer_encoder", "dropkernels-subfirst"), ("depthwise_separable", "parentfirst")]:
        p("=====", model, variant)
        try:
            r = subprocess.run([sys.executable, __file__, model, variant], capture_output=True, text=True, timeout=60)
            err = "\n".join(l for l in r.stderr.splitlines() if "Warning: Function" not in l)
            p(r.stdout[-1500:], err[-800:], "rc", r.returncode)
        except subprocess.TimeoutExpired as e:
            p("TIMEOUT", e.stdout[-1500:] if e.stdout else "")
