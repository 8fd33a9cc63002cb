"""What kind of work on the other vCPU slows the target's forward? Children doing one kind of work each, in the
even windows (as saguaro_exec.measure.beside.draft_load does with draft forwards)."""
import json, os, sys, time
import numpy as np
import torch
sys.path.insert(0, "/work/main")
from pathlib import Path
from saguaro_exec.measure.microbench import forward_call
from saguaro_exec.model import load_model
from saguaro_exec.spawn import ARGS, Supervisor, join

A = "/work/main/saguaro_exec/assets/tiny"


def work(kind):
    if kind == "spin":
        def f():
            x = 0
            for i in range(2000):
                x += i
        return f
    if kind == "mm64":
        a, b = torch.randn(64, 64), torch.randn(64, 64)
        return lambda: [torch.mm(a, b) for _ in range(20)]
    if kind == "smallops":
        a = torch.randn(8)
        return lambda: [a + 1 for _ in range(50)]
    if kind == "l2copy":     # 1 MB working set
        a, b = torch.empty(256 * 1024), torch.empty(256 * 1024)
        return lambda: b.copy_(a)
    if kind == "l3copy":     # 16 MB working set
        a, b = torch.empty(2 << 20), torch.empty(2 << 20)
        return lambda: b.copy_(a)
    if kind == "dram":       # 512 MB working set
        a, b = torch.empty(64 << 20), torch.empty(64 << 20)
        return lambda: b[: 8 << 20].copy_(a[(np.random.randint(7)) << 20:][: 8 << 20])
    if kind == "draft":
        return forward_call(load_model(Path(f"{A}/draft"), device="cpu", dtype=torch.float32), 1, 32, 96, "cpu")
    raise ValueError(kind)


def child(rank, port, workdir):
    with open(os.path.join(workdir, ARGS)) as f:
        a = json.load(f)
    torch.set_num_threads(1)
    step = work(a["kind"]); step()
    store = join(port, 2, rank, 120)
    t0, w = float(store.get("t0")), a["window_s"]
    end = t0 + 2 * a["cycles"] * w
    while (now := time.monotonic()) < end:
        if now >= t0 and int((now - t0) / w) % 2 == 0:
            step()
        else:
            time.sleep(min(0.002, max(0.0, end - now)))


def measure(fwd, kind, cycles=30, window_s=0.09):
    args = {"kind": kind, "cycles": cycles, "window_s": window_s}
    sup = Supervisor("contend", "s13-contend-", "contend_kinds:child", 2, 120, 10)
    try:
        store = sup.spawn(lambda p: Path(p).write_text(json.dumps(args)))
        sup.wait_for("up", "connect")
        t0 = time.monotonic() + 0.2
        store.set("t0", repr(t0))
        med = []
        for i in range(2 * cycles):
            lo, hi = t0 + i * window_s + 0.01, t0 + (i + 1) * window_s - 0.01
            while time.monotonic() < lo:
                pass
            ts = []
            while (a := time.monotonic()) < hi:
                fwd(); ts.append(time.monotonic() - a)
            med.append(np.median(ts))
    finally:
        sup.close()
    med = np.asarray(med)
    return float(np.median(med[0::2] / med[1::2]))


if __name__ == "__main__":
    torch.set_num_threads(1)
    fwd = forward_call(load_model(Path(f"{A}/target-deep"), device="cpu", dtype=torch.float32), 1, 7, 96, "cpu")
    for _ in range(5):
        fwd()
    kinds = ["spin", "mm64", "smallops", "l2copy", "l3copy", "dram", "draft"]
    res = {k: [] for k in kinds}
    for rep in range(3):
        for k in kinds:
            res[k].append(measure(fwd, k))
            print(rep, k, round(res[k][-1], 3), flush=True)
    print({k: round(float(np.median(v)), 3) for k, v in res.items()})
    json.dump(res, open("/tmp/s13/contend_kinds.json", "w"), indent=1)
