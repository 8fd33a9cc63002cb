import time, torch, statistics as st, sys
torch.set_num_threads(1)
a=torch.randn(128,128); 
dur=float(sys.argv[1]) if len(sys.argv)>1 else 30
t_end=time.time()+dur; rates=[]
while time.time()<t_end:
    t0=time.perf_counter(); n=0
    while time.perf_counter()-t0<0.5:
        for _ in range(50): a@a
        n+=50
    rates.append(n/(time.perf_counter()-t0))
m=st.median(rates)
print(f"windows {len(rates)} median {m:.0f}/s min {min(rates)/m:.3f} max {max(rates)/m:.3f} p10 {sorted(rates)[len(rates)//10]/m:.3f} p90 {sorted(rates)[9*len(rates)//10]/m:.3f}")
