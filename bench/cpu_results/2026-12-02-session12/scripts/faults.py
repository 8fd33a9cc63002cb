"""Per run (deep pair, b=B, K=3): minor page faults of the verifier process and of the draft process (children,
counted when they exit), TLB shootdowns and function-call IPIs on each CPU (/proc/interrupts), verify ms."""
import resource, sys, statistics as st
sys.path.insert(0, '.')
from saguaro_exec import RunConfig, run
from saguaro_sim.config import SpecConfig
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
R = int(sys.argv[1]) if len(sys.argv) > 1 else 4
B = int(sys.argv[2]) if len(sys.argv) > 2 else 4
DEEP = "saguaro_exec/assets/tiny/target-deep"
def irq():
    out = {}
    for line in open("/proc/interrupts"):
        p = line.split()
        if p and p[0] in ("TLB:", "CAL:", "RES:"):
            out[p[0][:-1]] = (int(p[1]), int(p[2]))
    return out
prompts = list(BUILTIN_PROMPTS[:8])
for mode in ["sd", "ssd"] * R:
    spec = SpecConfig(mode=mode, k=3, batch_size=B, backup="neural", **({"fanout": (4, 3, 3, 6)} if mode == "ssd" else {}))
    a, ac, i0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), irq()
    rep = run(RunConfig(spec=spec, prompts=prompts, max_new_tokens=128, target=DEEP, threads=1))
    b, bc, i1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), irq()
    rows = rep.measurements.rounds
    n = len(rows)
    d = {k: (i1[k][0] - i0[k][0], i1[k][1] - i0[k][1]) for k in i0}
    print(f"{mode:4} tok/s {rep.tokens_per_s:7.1f} verify {1e3*st.median(r['verify_s'] for r in rows):.2f} ms rounds {n}; "
          f"minflt/round verifier {(b.ru_minflt - a.ru_minflt) / n:.1f} draft {(bc.ru_minflt - ac.ru_minflt) / n:.1f}; "
          f"vol/invol ctx switches verifier {b.ru_nvcsw - a.ru_nvcsw}/{b.ru_nivcsw - a.ru_nivcsw}; IPIs cpu0/cpu1 " + " ".join(f"{k} {v[0]}/{v[1]}" for k, v in d.items()), flush=True)
