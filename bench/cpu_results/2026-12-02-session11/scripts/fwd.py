import time, torch, statistics as st
from saguaro_exec.model.loading import load_model
from saguaro_exec.model.masks import causal_mask
from saguaro_exec.model.warm import warm_up
torch.set_num_threads(1)
m = load_model("saguaro_exec/assets/tiny/target-deep"); m.eval(); warm_up(m)
cap=512; L=200
cache=m.new_cache(1,cap)
def fwd(t, pos0):
    ar=torch.arange(pos0,pos0+t).view(1,-1)
    start=torch.tensor([pos0])
    mask=causal_mask(start, t, cap)
    return m(torch.zeros_like(ar), ar, cache, ar, mask)
with torch.inference_mode():
    fwd(L,0)
    res={}
    for rep in range(200):
        for t in (1,2,4,7,9,13):
            t0=time.perf_counter(); fwd(t,L); res.setdefault(t,[]).append(time.perf_counter()-t0)
    for t in res: print(t, "%.3f ms"%(1e3*st.median(res[t])))
    from torch.profiler import profile
    with profile() as p:
        for _ in range(50): fwd(7,L)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))
