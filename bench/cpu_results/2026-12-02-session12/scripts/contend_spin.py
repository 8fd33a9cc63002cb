"""Target 6-token forward timed while a second process alternates phases: idle (sleep), sched_yield spin,
pure-Python spin, draft forwards of 64 tokens. Medians per phase over adjacent 90-ms windows; ratio to idle.
Tells whether the two vCPUs share a physical core (a spinning sibling slows the verifier) or only memory."""
import os, sys, time, statistics as st, multiprocessing as mp
import torch
sys.path.insert(0, '.')
DUR = float(sys.argv[1]) if len(sys.argv) > 1 else 20
PHASES = ("idle", "yield", "pyspin", "draft64")
def fwd_fn(path, t, cap=512):
    from saguaro_exec.model.loading import load_model
    from saguaro_exec.model.masks import causal_mask
    from saguaro_exec.model.warm import warm_up
    m = load_model(path); m.eval(); warm_up(m)
    cache = m.new_cache(1, cap); L = 150
    with torch.inference_mode():
        ar = torch.arange(L).view(1, -1); m(torch.zeros_like(ar), ar, cache, ar, causal_mask(torch.tensor([0]), L, L + 70))
    def f():
        ar = torch.arange(L, L + t).view(1, -1)
        with torch.inference_mode():
            m(torch.zeros_like(ar), ar, cache, ar, causal_mask(torch.tensor([L]), t, L + 70))
    return f
def other(flag, stop):
    torch.set_num_threads(1)
    f = fwd_fn("saguaro_exec/assets/tiny/draft", 64)
    while not stop.value:
        ph = PHASES[flag.value]
        if ph == "idle": time.sleep(0.0005)
        elif ph == "yield":
            for _ in range(2000): os.sched_yield()
        elif ph == "pyspin":
            x = 0
            for i in range(20000): x += i
        else: f()
if __name__ == "__main__":
    torch.set_num_threads(1)
    flag, stop = mp.Value('i', 0), mp.Value('i', 0)
    p = mp.Process(target=other, args=(flag, stop)); p.start()
    f = fwd_fn("saguaro_exec/assets/tiny/target-deep", 6)
    for _ in range(20): f()
    time.sleep(1.0)
    res = {ph: [] for ph in PHASES}; ratios = {ph: [] for ph in PHASES}
    t_end = time.time() + DUR
    while time.time() < t_end:
        cyc = {}
        for i, ph in enumerate(PHASES):
            flag.value = i; time.sleep(0.01)
            ts = []; t0 = time.perf_counter()
            while time.perf_counter() - t0 < 0.09:
                a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
            cyc[ph] = st.median(ts); res[ph].append(cyc[ph])
        for ph in PHASES: ratios[ph].append(cyc[ph] / cyc["idle"])
    stop.value = 1; p.join()
    for ph in PHASES:
        q = st.quantiles(ratios[ph], n=4)
        print(f"{ph:8} fwd {1e3*st.median(res[ph]):.3f} ms  /idle median {st.median(ratios[ph]):.3f} quartiles {q[0]:.3f}-{q[2]:.3f}  cycles {len(ratios[ph])}")
