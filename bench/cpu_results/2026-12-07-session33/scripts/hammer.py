import json, sys, time
sys.path.insert(0, "/work/main/tests/exec"); sys.path.insert(0, "/work/main/tests")
from exec_helpers import tiny_models
from saguaro_exec import RunConfig, run
from saguaro_sim import SpecConfig
TARGET, DRAFT = tiny_models()
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3, 9], [30, 4, 4], [5, 6, 7, 8], [9, 9, 9]]
n = int(sys.argv[1]); bad = 0
for i in range(n):
    spec = SpecConfig(mode="ssd", k=3, batch_size=2, fanout=(2, 1, 1, 1))
    rep = run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=PROMPTS, max_new_tokens=10,
                        arrivals={"qps": 30.0, "seed": 3}, check_lossless=True, ssd_protocol="push"))
    rows = rep.measurements.rounds
    if rep.faults: print("FAULT", i, rep.faults, flush=True)
    for rid in range(len(PROMPTS)):
        f = next(r for r in rows if rid in r["seq"])
        if not f["from_backup"][f["seq"].index(rid)]:
            bad += 1
            json.dump({"faults": rep.faults, "rid": rid, "rounds": rows, "arr": rep.per_request["arrival_s"]}, open(f"/tmp/flk/bad_{i}.json", "w"), default=str)
            print("BAD", i, rid, rep.faults, flush=True)
            break
print("done", n, "bad", bad)
