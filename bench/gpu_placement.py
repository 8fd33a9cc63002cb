"""Draft and target on one GPU (issue 14, "Placement on one GPU"): the tiny pair's AR / SD / SSD at batch 1,
T = 0, lossless (checked against greedy decoding), with SSD's draft in a second process on the same GPU and
with the draft on a side CUDA stream of the verifier's process (RunConfig.draft_placement = "stream").
bench/gpu_check.sh runs this in a fresh process twice: without and, where `nvidia-cuda-mps-control` exists,
under CUDA MPS (both processes must be MPS clients from their start, hence a fresh process). The SSD / SD
ratios per placement say which of them lets the two overlap; `implied_slowdown` is the Profile.shared_slowdown
that the simulator's concurrent model would need to reproduce the measured SSD / SD (None outside [1, 2]).

    python bench/gpu_placement.py --out $OUT --label no-mps          # on the GPU machine (gpu_check.sh)
    python bench/gpu_placement.py --out /tmp/p --label cpu --quick   # CPU dry run (stream = a helper thread)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from calibration import LatencyModel  # noqa: E402
from calibration.jsonio import dump_json  # noqa: E402
from calibration.profile import load_preset  # noqa: E402
from saguaro_sim import SpecConfig, Workload, simulate  # noqa: E402

RUNS = (("ar", "process"), ("sd", "process"), ("ssd", "process"), ("ssd", "stream"))


def tiny_runs(device: str, new_tokens: int, log) -> list[dict]:
    """The four runs, each one saguaro_exec.run with check_lossless; a failure is a row with its error."""
    import saguaro_exec

    rows = []
    for mode, placement in RUNS:
        spec = SpecConfig(mode=mode, k=4 if mode != "ar" else 0, budget=16 if mode == "ssd" else None)
        kw = {"draft_placement": placement} if mode == "ssd" else {}
        t = time.time()
        try:
            rep = saguaro_exec.run(saguaro_exec.RunConfig(spec=spec, max_new_tokens=new_tokens, device=device,
                                                          draft_device=device, seed=0, check_lossless=True, **kw))
        except Exception as e:   # keep going: record it
            rows.append({"mode": mode, "draft_placement": placement, "error": f"{type(e).__name__}: {e}"})
            log(json.dumps(rows[-1]))
            continue
        meta = rep.measurements.meta
        rows.append({"mode": mode, "draft_placement": placement, "where": meta.get("draft_placement"),
                     "tokens_per_s": rep.tokens_per_s, "tokens_per_round": rep.mean_tokens_per_round,
                     "hit_rate": rep.hit_rate, "wait_share": rep.wait_share, "cuda_graphs": meta.get("cuda_graphs"),
                     "lossless": True, "wall_s": round(time.time() - t, 2)})
        log(json.dumps(rows[-1]))
    return rows


def h200_tiny_profile(ar_tokens_per_s: float, sd_tokens_per_s: float, sd_tokens_per_round: float):
    """The tiny pair's profile with constant step times read off this run's AR and SD (as in
    tests/sim/test_placement.py): target = 1 / AR, draft step = (SD round - target) / K."""
    step = max(1e-6, (sd_tokens_per_round / sd_tokens_per_s - 1 / ar_tokens_per_s) / 4)
    return load_preset("cpu-tinypair").with_(name="tiny-as-measured", target=LatencyModel.constant(1 / ar_tokens_per_s),
                                             draft=LatencyModel.constant(step), executor=None)


def implied_slowdown(rows: list[dict], placement: str) -> float | None:
    """Profile.shared_slowdown in [1, 2] at which the simulated shared-concurrent SSD / SD equals the measured
    one (bisection; None when the measurement lies outside what s in [1, 2] gives, or a run failed)."""
    by = {(r["mode"], r["draft_placement"]): r for r in rows if "error" not in r}
    need = [("ar", "process"), ("sd", "process"), ("ssd", placement)]
    if not all(n in by for n in need):
        return None
    ar, sd, ssd = (by[n] for n in need)
    prof = h200_tiny_profile(ar["tokens_per_s"], sd["tokens_per_s"], sd["tokens_per_round"])
    wl = Workload(num_sequences=1, output_tokens=128, prompt_tokens=16)
    sd_sim = simulate(prof, SpecConfig(mode="sd", k=4), wl, seed=0).tokens_per_s_per_seq
    want = ssd["tokens_per_s"] / sd["tokens_per_s"]

    def ratio(s: float) -> float:
        spec = SpecConfig(mode="ssd", k=4, budget=16, placement="shared", sharing="concurrent")
        return simulate(prof.with_(shared_slowdown=s), spec, wl, seed=0).tokens_per_s_per_seq / sd_sim

    lo, hi = 1.0, 2.0            # ratio falls as s grows
    if not ratio(hi) <= want <= ratio(lo):
        return None
    for _ in range(12):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ratio(mid) > want else (lo, mid)
    return (lo + hi) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", required=True, help="e.g. no-mps | mps | cpu")
    ap.add_argument("--quick", action="store_true", help="16 new tokens (CPU dry run)")
    args = ap.parse_args()
    t0 = time.time()

    def log(msg: str) -> None:
        print(f"[placement {args.label} {time.time() - t0:6.1f}s] {msg}", flush=True)

    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    rows = tiny_runs(device, 16 if args.quick else 128, log)
    ok = {(r["mode"], r["draft_placement"]): r["tokens_per_s"] for r in rows if "error" not in r}
    sd = ok.get(("sd", "process"))
    summary = {"label": args.label, "device": device, "rows": rows,
               "ssd_over_sd": {p: ok[("ssd", p)] / sd for p in ("process", "stream") if sd and ("ssd", p) in ok},
               "implied_slowdown": {p: implied_slowdown(rows, p) for p in ("process", "stream")}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dump_json(out / f"placement_{args.label}.json", summary)
    log(f"SSD / SD: {summary['ssd_over_sd']}; implied shared_slowdown: {summary['implied_slowdown']}")
    sys.exit(0 if all("error" not in r for r in rows) else 1)


if __name__ == "__main__":
    main()
