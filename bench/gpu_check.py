"""One-shot GPU check (issue 7): device ceilings, latency grids of a Llama-3.1-8B-shaped target and a
Llama-3.2-1B-shaped draft (random bf16 weights), eager vs CUDA-graph steps, a fitted H200 profile compared
with the roofline preset, and AR/SD/SSD executor runs with CUDA graphs on and off (the GPU pytest files run
before this script, in bench/gpu_check.sh). Every step is guarded: a failure is recorded and
the next step runs. `--quick` shrinks everything so the script can be tested on a CPU.

    python bench/gpu_check.py --out $OUT            # on the GPU machine (bench/gpu_check.sh)
    python bench/gpu_check.py --quick --out /tmp/g  # CPU dry run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from calibration import Measurements, fit, roofline  # noqa: E402
from calibration.jsonio import dump_json  # noqa: E402
from calibration.shapes import ModelShape, get_shape  # noqa: E402
from calibration.traffic import achieved_rates, forward_traffic  # noqa: E402
from saguaro_exec.measure.microbench import LatencyGrid, profile_latency, profile_link  # noqa: E402
from saguaro_exec.model import ModelConfig, random_model  # noqa: E402

RESULTS: dict = {"steps": {}}
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def step(name: str):
    """Run fn, store its result (or the error) under RESULTS['steps'][name], save after each step."""
    def wrap(fn):
        def run(*a, **kw):
            log(f"== {name}")
            t = time.time()
            try:
                RESULTS["steps"][name] = {"ok": True, "result": fn(*a, **kw)}
            except Exception as e:  # keep going: one failed step must not lose the others
                traceback.print_exc()
                RESULTS["steps"][name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            RESULTS["steps"][name]["wall_s"] = round(time.time() - t, 2)
            dump_json(OUT / "results.json", RESULTS)
            return RESULTS["steps"][name].get("result")
        return run
    return wrap


def model_config(shape: ModelShape, max_pos: int) -> ModelConfig:
    return ModelConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, num_layers=shape.layers,
                       num_heads=shape.heads, num_kv_heads=shape.kv_heads, head_dim=shape.head_dim,
                       intermediate_size=shape.intermediate, tie_word_embeddings=shape.tied_embeddings,
                       rope_theta=500000.0, max_position_embeddings=max_pos)


def tiny_shape(name: str) -> ModelShape:
    big = name == "target"
    return ModelShape(name, 2 if big else 1, 128 if big else 64, 4, 2, 32, 256 if big else 128, 272, False)


@step("env")
def env() -> dict:
    info = {"torch": torch.__version__, "cuda": torch.cuda.is_available(), "device": DEVICE}
    if DEVICE.startswith("cuda"):
        p = torch.cuda.get_device_properties(0)
        info |= {"name": p.name, "sm": p.multi_processor_count, "mem_gb": round(p.total_memory / 2**30, 1),
                 "capability": f"{p.major}.{p.minor}"}
    try:
        import flash_attn  # noqa: F401

        info["flash_attn"] = True
    except ImportError:
        info["flash_attn"] = False
    return info


@step("ceilings")
def ceilings() -> dict:
    """Measured copy bandwidth (read + write bytes) and bf16 matmul rate: the ceilings we compare with."""
    n = (1 << 30) if not QUICK else (1 << 22)
    src = torch.empty(n, dtype=torch.bfloat16, device=DEVICE).normal_()
    dst = torch.empty_like(src)
    m = 8192 if not QUICK else 256
    a = torch.randn(m, m, dtype=torch.bfloat16, device=DEVICE)
    b = torch.randn(m, m, dtype=torch.bfloat16, device=DEVICE)

    def med(fn, reps=10):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(reps):
            sync()
            t = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))

    t_copy = med(lambda: dst.copy_(src))
    t_mm = med(lambda: a @ b)
    return {"copy_bytes_per_s": 2 * src.numel() * 2 / t_copy, "bf16_flops": 2 * m ** 3 / t_mm}


def sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def grid_for(who: str) -> LatencyGrid:
    if QUICK:
        return LatencyGrid((1, 2), (1, 5, 9), (32, 64))
    widths = (1, 5, 9, 17, 33, 65) + ((129,) if who == "draft" else ())
    return LatencyGrid((1, 4, 16), widths, (512, 2048))


def latency_rows(who: str, shape: ModelShape) -> list[dict]:
    model = random_model(model_config(shape, 4096), seed=0, device=DEVICE, dtype=DTYPE)
    rows = profile_latency(model, who, grid_for(who), device=DEVICE, warmup=3, repeats=10 if not QUICK else 3,
                           dtype=DTYPE)
    graphed = graph_vs_eager(model, who)
    del model
    if DEVICE.startswith("cuda"):
        torch.cuda.empty_cache()
    RESULTS.setdefault("graphs", {})[who] = graphed
    return rows


def graph_vs_eager(model, who: str) -> list[dict]:
    """Median step time eagerly and replayed from a CUDA graph (decode, verify K+1=5, tree width 17)."""
    if not DEVICE.startswith("cuda"):
        return []
    from saguaro_exec.model import GraphedForward, causal_mask, contiguous_slots

    out = []
    for batch, t in ((1, 1), (1, 5), (4, 1), (4, 5), (1, 17)):
        ctx = 1024
        cache = model.new_cache(batch, ctx + t)
        start = torch.full((batch,), ctx, dtype=torch.long, device=DEVICE)
        slots = contiguous_slots(start, t)
        mask = causal_mask(start, t, ctx + t)
        tokens = torch.randint(0, model.config.vocab_size, (batch, t), device=DEVICE)
        g = GraphedForward(model, cache, t, ctx + t)

        res = {"batch": batch, "new_tokens": t, "context": ctx,
               "eager_s": median_time(model, tokens, slots, cache, slots, mask),
               "graph_s": median_time(g, tokens, slots, slots, mask)}
        out.append(res)
        log(f"{who} b={batch} T={t}: eager {res['eager_s'] * 1e3:.2f} ms, graph {res['graph_s'] * 1e3:.2f} ms")
    return out


def median_time(fn, *args, reps: int = 20) -> float:
    """Median wall time of fn(*args) after warm-up, synchronizing the device around each call."""
    for _ in range(3):
        fn(*args)
    ts = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn(*args)
        sync()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


@step("latency_target")
def latency_target() -> list[dict]:
    return latency_rows("target", TARGET)


@step("latency_draft")
def latency_draft() -> list[dict]:
    return latency_rows("draft", DRAFT)


@step("link")
def link() -> list[dict]:
    return profile_link(repeats=20)


@step("fit_and_compare")
def fit_and_compare() -> dict:
    """Fit an H200 profile from the grids; compare each measured point with the roofline preset."""
    t_rows = RESULTS["steps"]["latency_target"]["result"]
    d_rows = RESULTS["steps"]["latency_draft"]["result"]
    link_rows = (RESULTS["steps"].get("link") or {}).get("result") or []
    base = roofline(hardware=HW, target=TARGET, target_tp=1, draft=DRAFT)
    meas = Measurements(meta={"device": DEVICE, "target": TARGET.name, "draft": DRAFT.name, "dtype": str(DTYPE)},
                        latency=t_rows + d_rows, link=link_rows)
    meas.to_json(OUT / "measurements.json")
    prof = fit(meas, name=PROFILE_NAME, base=base)
    prof = prof.with_(provenance={**prof.provenance, "acceptance_and_hits": "from the roofline preset (paper "
                                  "orientation values): random weights make acceptance meaningless",
                                  "measured_on": RESULTS["steps"]["env"].get("result", {}).get("name", DEVICE),
                                  "target_devices": 1})
    prof.to_json(OUT / f"{PROFILE_NAME}.json")
    cmp = []
    for who, rows, model in (("target", t_rows, base.target), ("draft", d_rows, base.draft)):
        for r in rows:
            pred = model(r["batch"], r["new_tokens"], r["context"])
            fitted = (prof.target if who == "target" else prof.draft)(r["batch"], r["new_tokens"], r["context"])
            cmp.append({"who": who, "batch": r["batch"], "new_tokens": r["new_tokens"], "context": r["context"],
                        "measured_s": r["median_s"], "roofline_s": pred, "fitted_s": fitted,
                        "roofline_err": (pred - r["median_s"]) / r["median_s"],
                        "fit_err": (fitted - r["median_s"]) / r["median_s"]})
    summary = {}
    for who in ("target", "draft"):
        e = np.array([abs(c["roofline_err"]) for c in cmp if c["who"] == who])
        f = np.array([abs(c["fit_err"]) for c in cmp if c["who"] == who])
        summary[who] = {"roofline_median_abs_err": float(np.median(e)), "roofline_max_abs_err": float(e.max()),
                        "fit_median_abs_err": float(np.median(f)), "fit_max_abs_err": float(f.max())}
    RESULTS["compare_rows"] = cmp
    return summary


@step("decode_bandwidth")
def decode_bandwidth() -> list[dict]:
    """Achieved HBM bandwidth and FLOP/s of decode steps (calibration.traffic: weights + KV read + KV written
    + logits), as fractions of the H200 datasheet peaks and of the measured copy ceiling."""
    ceil = (RESULTS["steps"].get("ceilings") or {}).get("result", {}).get("copy_bytes_per_s", float("nan"))
    dtype_bytes = 2 if DTYPE == torch.bfloat16 else 4
    out = []
    for who, shape, rows in (("target", TARGET, RESULTS["steps"]["latency_target"]["result"]),
                             ("draft", DRAFT, RESULTS["steps"]["latency_draft"]["result"])):
        for r in rows:
            if r["new_tokens"] != 1:
                continue
            traffic = forward_traffic(shape, r["batch"], 1, r["context"], dtype_bytes)
            rates = achieved_rates(traffic, r["median_s"], HW)
            out.append({"who": who, "batch": r["batch"], "context": r["context"], "median_s": r["median_s"],
                        "bytes": traffic.bytes, "bytes_per_s": rates["bytes_per_s"],
                        "flops_per_s": rates["flops_per_s"], "fraction_of_hbm_peak": rates["bandwidth_fraction"],
                        "fraction_of_flops_peak": rates["flops_fraction"],
                        "fraction_of_copy_ceiling": rates["bytes_per_s"] / ceil})
    return out


def graph_settings() -> tuple[str, ...]:
    """CUDA graphs on and off on a GPU (the comparison); only off on CPU, where "on" is a ConfigError."""
    return ("on", "off") if DEVICE.startswith("cuda") else ("off",)


@step("exec_runs")
def exec_runs() -> list[dict]:
    """AR / SD / SSD through saguaro_exec.run on the tiny pair (real acceptance) on this device, with CUDA
    graphs on and off."""
    import saguaro_exec
    from saguaro_sim import SpecConfig

    out = []
    for batch in (1, 4):
        for graphs in graph_settings():
            for mode in ("ar", "sd", "ssd"):
                spec = SpecConfig(mode=mode, k=4, budget=16, batch_size=batch)
                cfg = saguaro_exec.RunConfig(spec=spec, max_new_tokens=32 if QUICK else 128, device=DEVICE,
                                             seed=0, cuda_graphs=graphs)
                rep = saguaro_exec.run(cfg)
                out.append(run_row("tiny", mode, batch, rep))
    return out


def run_row(model: str, mode: str, batch: int, rep) -> dict:
    meta = rep.measurements.meta
    row = {"model": model, "mode": mode, "batch": batch, "cuda_graphs": meta.get("cuda_graphs"),
           "attention": meta.get("attention"), "graph_captures": meta.get("graph_captures"),
           "tokens_per_s": rep.tokens_per_s,
           "tokens_per_round": rep.mean_tokens_per_round, "hit_rate": rep.hit_rate, "wait_share": rep.wait_share,
           "ceiling_tokens_per_s": rep.ceiling_tokens_per_s, "wall_s": rep.wall_s}
    for side, a in rep.achieved.items():     # achieved bandwidth / FLOP/s of the run's forwards vs the peaks
        if a:
            row[f"{side}_achieved"] = {k: a[k] for k in ("phase", "peak", "bytes_per_s", "flops_per_s",
                                                          "bandwidth_fraction", "flops_fraction")}
    log(json.dumps(row))
    return row


@step("exec_runs_random_shapes")
def exec_runs_random_shapes() -> list[dict]:
    """AR / SD / SSD with random-weight 8B/1B shapes: timing only (random weights make acceptance meaningless).
    CUDA graphs on at batch 1 and 4; off (eager, the comparison) at batch 1 with fewer tokens (time budget)."""
    import saguaro_exec
    from saguaro_sim import SpecConfig

    target = random_model(model_config(TARGET, 4096), seed=0, device=DEVICE, dtype=DTYPE)
    draft = random_model(model_config(DRAFT, 4096), seed=1, device=DEVICE, dtype=DTYPE)
    gen = torch.Generator().manual_seed(0)
    out = []
    runs = [(1, g) for g in graph_settings()] + [(4, graph_settings()[0])]
    for batch, graphs in runs:
        prompts = [torch.randint(0, TARGET.vocab, (128,), generator=gen).tolist() for _ in range(batch)]
        for mode in ("ar", "sd", "ssd"):
            spec = SpecConfig(mode=mode, k=4, budget=16, batch_size=batch)
            n_new = 16 if QUICK else 64 if graphs == "on" else 32
            cfg = saguaro_exec.RunConfig(spec=spec, target=target, draft=draft, prompts=prompts,
                                         max_new_tokens=n_new, device=DEVICE, cuda_graphs=graphs,
                                         dtype="bfloat16" if DTYPE == torch.bfloat16 else "float32", seed=0)
            out.append(run_row(f"random {TARGET.name}/{DRAFT.name}", mode, batch, saguaro_exec.run(cfg)))
    return out


def main() -> None:
    global OUT, QUICK, DEVICE, DTYPE, TARGET, DRAFT, HW, PROFILE_NAME
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out/gpu_check"))
    ap.add_argument("--quick", action="store_true", help="tiny shapes, for a CPU dry run")
    args = ap.parse_args()
    OUT, QUICK = Path(args.out), args.quick
    OUT.mkdir(parents=True, exist_ok=True)
    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    TARGET = tiny_shape("target") if QUICK else get_shape("llama-3.1-8b")
    DRAFT = tiny_shape("draft") if QUICK else get_shape("llama-3.2-1b")
    HW = "h200"
    PROFILE_NAME = "h200-llama8b-llama1b" if not QUICK else "quick-check"
    env()
    ceilings()
    latency_target()
    latency_draft()
    link()
    fit_and_compare()
    decode_bandwidth()
    exec_runs()
    exec_runs_random_shapes()
    ok = {k: v["ok"] for k, v in RESULTS["steps"].items()}
    log(f"done in {time.time() - T0:.0f} s: {ok}")
    print(json.dumps({k: v.get("result") for k, v in RESULTS["steps"].items()
                      if k in ("env", "ceilings", "fit_and_compare")}, indent=1, default=str))


if __name__ == "__main__":
    main()
