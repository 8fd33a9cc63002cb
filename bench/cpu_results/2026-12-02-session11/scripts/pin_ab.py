"""Interleaved SSD k8 (optimizer's choice) / SD@6 on the deep pair b1 T0, unpinned vs pinned (verifier on core 0,
draft process on core 1, pinned by a watcher thread as soon as the child appears): tok/s and mean verify ms/round."""
import os, sys, threading, time, statistics as st
sys.path.insert(0, '.')
from saguaro_exec import RunConfig, run
from saguaro_sim.config import SpecConfig
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
R = int(sys.argv[1]) if len(sys.argv) > 1 else 5
DEEP = "saguaro_exec/assets/tiny/target-deep"
prompts = list(BUILTIN_PROMPTS[:4])
ssd = SpecConfig(mode="ssd", k=8, fanout=(5,3,7,3,3,3,2,2,4), batch_size=1, backup="neural")
sd = SpecConfig(mode="sd", k=6, batch_size=1)
ALL = set(range(os.cpu_count()))
def children():
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            out += [int(x) for x in open(f"/proc/self/task/{tid}/children").read().split()]
        except OSError:
            pass
    return out
def watcher(stop):
    """Pin every child to core 1: polls fast until the first child is pinned, then every 50 ms (a busy watcher
    thread would take the GIL and core 0 from the verifier)."""
    pinned = False
    while not stop.is_set():
        for c in children():
            try:
                if os.sched_getaffinity(c) != {1}:
                    os.sched_setaffinity(c, {1})
                pinned = True
            except OSError:
                pass
        time.sleep(0.05 if pinned else 0.001)
def one(spec, pinned):
    stop = threading.Event(); th = None
    if pinned:
        os.sched_setaffinity(0, {0})
        if spec.mode == "ssd":
            th = threading.Thread(target=watcher, args=(stop,), daemon=True); th.start()
    try:
        rep = run(RunConfig(spec=spec, prompts=prompts, max_new_tokens=128, target=DEEP, threads=1))
    finally:
        stop.set()
        if th: th.join()
        os.sched_setaffinity(0, ALL)
    rows = rep.measurements.rounds
    return rep.tokens_per_s, 1e3 * st.mean(r["verify_s"] for r in rows), 1e3 * st.mean(r.get("tree_s", 0.0) for r in rows)
cfgs = {"ssd": (ssd, False), "ssd pinned": (ssd, True), "sd@6": (sd, False), "sd@6 pinned": (sd, True)}
for s, p in cfgs.values():
    one(s, p)
res = {k: [] for k in cfgs}
for i in range(R):
    for k, (s, p) in cfgs.items():
        res[k].append(one(s, p))
for k, v in res.items():
    print(f"{k:12} tok/s {st.median(x[0] for x in v):7.1f} verify {st.median(x[1] for x in v):.2f} ms tree {st.median(x[2] for x in v):.2f} ms; all " + " ".join(f"{x[0]:.0f}" for x in v))
for a, b in (("ssd", "sd@6"), ("ssd pinned", "sd@6"), ("ssd pinned", "sd@6 pinned"), ("ssd pinned", "ssd")):
    print(f"{a} / {b}: medians x{st.median(x[0] for x in res[a]) / st.median(x[0] for x in res[b]):.2f}, paired x{st.median(x[0] / y[0] for x, y in zip(res[a], res[b])):.2f}")
