import time, torch, statistics as st
torch.set_num_threads(1)
def tm(f, n=2000):
    for _ in range(50): f()
    ts=[]
    for r in range(7):
        t0=time.perf_counter()
        for _ in range(n): f()
        ts.append((time.perf_counter()-t0)/n*1e6)
    return st.median(ts)
for M in (1,7,9,32):
  for (K,N) in ((128,256),(128,704),(352,128),(128,272)):
    x=torch.randn(M,K); w=torch.randn(K,N); wt=torch.randn(N,K).t()
    a=tm(lambda: torch.mm(x,w)); b=tm(lambda: torch.mm(x,wt))
    c=tm(lambda: (x.unsqueeze(-1)*w).sum(1)) if M<=9 else float('nan')
    print(f"M{M} K{K} N{N}: mm contiguous {a:.1f}us  mm transposed-view {b:.1f}us  bcast {c:.1f}us  GF/s {2*M*K*N/a/1e3:.1f}")
print(torch.__config__.show())
