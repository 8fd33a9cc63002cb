"""Target 9-token forward timed while a second process alternates 100 ms busy (draft forwards of N tokens) / 100 ms idle.
Prints busy/idle ratio of medians of adjacent pairs."""
import sys, time, statistics as st, multiprocessing as mp
import torch
DUR = float(sys.argv[1]) if len(sys.argv) > 1 else 20
NTOK = int(sys.argv[2]) if len(sys.argv) > 2 else 32

def fwd_fn(path, t, cap=512):
    from saguaro_exec.model.loading import load_model
    from saguaro_exec.model.masks import causal_mask
    from saguaro_exec.model.warm import warm_up
    m = load_model(path); m.eval(); warm_up(m)
    cache = m.new_cache(1, cap)
    L = 150
    with torch.inference_mode():
        ar = torch.arange(L).view(1, -1); m(torch.zeros_like(ar), ar, cache, ar, causal_mask(torch.tensor([0]), L, L + 16))
    def f():
        ar = torch.arange(L, L + t).view(1, -1)
        with torch.inference_mode():
            m(torch.zeros_like(ar), ar, cache, ar, causal_mask(torch.tensor([L]), t, L + 16))
    return f

def other(phase_flag, stop):
    torch.set_num_threads(1)
    f = fwd_fn("saguaro_exec/assets/tiny/draft", NTOK)
    while not stop.value:
        if phase_flag.value:
            f()
        else:
            time.sleep(0.0005)

if __name__ == "__main__":
    torch.set_num_threads(1)
    flag, stop = mp.Value('i', 0), mp.Value('i', 0)
    p = mp.Process(target=other, args=(flag, stop)); p.start()
    f = fwd_fn("saguaro_exec/assets/tiny/target-deep", 9)
    for _ in range(20): f()
    time.sleep(1.0)
    ratios = []; busy_all = []; idle_all = []
    t_end = time.time() + DUR
    while time.time() < t_end:
        res = {}
        for ph in (1, 0):
            flag.value = ph; time.sleep(0.01)
            ts = []; t0 = time.perf_counter()
            while time.perf_counter() - t0 < 0.09:
                a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
            res[ph] = st.median(ts)
        ratios.append(res[1] / res[0]); busy_all.append(res[1]); idle_all.append(res[0])
    stop.value = 1; p.join()
    q = st.quantiles(ratios, n=4)
    print(f"draft {NTOK} tokens: pairs {len(ratios)} busy/idle median {st.median(ratios):.3f} quartiles {q[0]:.3f}-{q[2]:.3f}; busy {1e3*st.median(busy_all):.3f} ms idle {1e3*st.median(idle_all):.3f} ms")
