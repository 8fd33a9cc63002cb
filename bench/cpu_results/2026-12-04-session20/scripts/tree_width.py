"""Measured tree step (deep pair's draft, SSD K=5 at b1 T0, bench_exec's prompts) vs the cost model's, by width N."""
import json, statistics, sys
from calibration import Profile
from saguaro_exec import RunConfig, run
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
from saguaro_sim import SpecConfig
from saguaro_sim.costs import RoundCosts
from saguaro_sim.resolve import resolve
prof = Profile.from_json(sys.argv[1]); k = 5
T = "saguaro_exec/assets/tiny/target-deep"
out = []
for rep in range(2):
  for n in (8, 16, 32, 48, 64, 96):
    spec = SpecConfig(mode="ssd", k=k, budget=n, backup="neural", batch_size=1)
    r = run(RunConfig(spec=spec, target=T, prompts=list(BUILTIN_PROMPTS[:2]), max_new_tokens=96))
    rounds = [x for x in r.measurements.rounds if x.get("tree_s", 0) > 0]
    ctx = statistics.median(x["context"][0] for x in rounds)
    tree = statistics.median(x["tree_s"] for x in rounds) / k
    build = statistics.median(x["glue_s"] + x["fork_s"] + x["tree_s"] for x in rounds)
    verify = statistics.median(x["verify_s"] for x in rounds)
    c = RoundCosts(prof, spec, resolve(spec, prof))
    model_tree = (c.build(1, ctx, n) - c.build(1, ctx, 1)) / k + (prof.draft(1, 1, ctx))  # per step at width n
    model_build = c.build(1, ctx, n)
    row = dict(rep=rep, n=n, ctx=ctx, tree_step_ms=tree * 1e3, model_tree_step_ms=model_tree * 1e3,
               build_ms=build * 1e3, model_build_ms=model_build * 1e3, verify_ms=verify * 1e3)
    out.append(row); print({a: round(b, 3) if isinstance(b, float) else b for a, b in row.items()}, flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
