"""SSD b4 runs on the deep pair: per verify, wall vs the verifier thread's CPU time, and which CPU the verifier
and the draft process sit on (from /proc). Tells a slow verification that lost its core (preempted: CPU < wall)
from one that ran slower on it (CPU = wall)."""
import os, sys, time, statistics as st
sys.path.insert(0, '.')
from saguaro_exec import RunConfig, run
from saguaro_sim.config import SpecConfig
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
import saguaro_exec.engine.verifier as V
R = int(sys.argv[1]) if len(sys.argv) > 1 else 6
B = int(sys.argv[2]) if len(sys.argv) > 2 else 4
DEEP = "saguaro_exec/assets/tiny/target-deep"
log = []
def cpu_of(pid):
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[36])
    except Exception:
        return -1
def kids():
    me = os.getpid(); out = []
    for t in os.listdir(f"/proc/{me}/task"):
        try: out += open(f"/proc/{me}/task/{t}/children").read().split()
        except Exception: pass
    return [int(x) for x in out]
orig = V.Verifier.score
def verify(self, *a, **k):
    ks = kids(); c0 = cpu_of(os.getpid()); d0 = [cpu_of(p) for p in ks]
    w, c = time.perf_counter(), time.thread_time()
    out = orig(self, *a, **k)
    [int(x.sum()) for x in out]    # wait for it (a CPU tensor: nothing to wait for)
    log.append((time.perf_counter() - w, time.thread_time() - c, c0, cpu_of(os.getpid()), d0, [cpu_of(p) for p in ks]))
    return out
V.Verifier.score = verify
prompts = list(BUILTIN_PROMPTS[:8])
for mode in ["sd", "ssd"] * R:
    spec = SpecConfig(mode=mode, k=3, batch_size=B, backup="neural", **({"fanout": (4, 3, 3, 6)} if mode == "ssd" else {}))
    log.clear()
    rep = run(RunConfig(spec=spec, prompts=prompts, max_new_tokens=128, target=DEEP, threads=1))
    wall = st.median(x[0] for x in log) * 1e3; cpu = st.median(x[1] for x in log) * 1e3
    same = [x for x in log if x[4] and x[2] in x[4]]     # verifier's CPU at start == a child's CPU
    print(f"{mode:4} tok/s {rep.tokens_per_s:7.1f} verify wall {wall:.2f} cpu {cpu:.2f} ms; rounds {len(log)}; "
          f"draft on the verifier's CPU at verify start {len(same)}/{len(log)}; cpus seen {sorted(set(x[2] for x in log))}", flush=True)
