"""One-shot GPU check (issues 7 and 14): device ceilings; CUDA-graph latency grids of Llama-3.1-8B / Llama-3.2-1B and
Qwen3-32B / Qwen3-0.6B shapes (random bf16 weights; batch 1-16, verify and tree widths, two contexts); the
saguaro stack level fitted to each pair's grid (held-out error, shipped levels' error, a fitted profile); AR /
SD / SSD executor runs at those shapes with measured vs predicted tokens/s (synthetic acceptance through the
bench/gpu_runs.py hook once the executor has it); the tiny pair lossless with graphs on and off; the SSD / SD
projection with the draft on a second GPU. The GPU pytest files run before this script (bench/gpu_check.sh).
Every step is guarded: a failure is recorded and the next step runs. `--quick` shrinks everything to tiny
shapes so the whole script runs on a CPU (`bash bench/gpu_check.sh --dry-run`).

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
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from gpu_grids import fit_pair, grid_rows, model_config  # noqa: E402
from gpu_runs import second_gpu_projection, shape_runs  # noqa: E402

from calibration.jsonio import dump_json  # noqa: E402
from calibration.shapes import ModelShape, get_shape  # noqa: E402
from calibration.traffic import achieved_rates, forward_traffic  # noqa: E402
from saguaro_exec.measure.microbench import profile_link  # noqa: E402

RESULTS: dict = {"steps": {}}
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def run_step(name: str, fn, *a, **kw):
    """Run fn, store its result (or the error) under RESULTS['steps'][name], save after each step."""
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


def step(name: str):
    """Decorator form of run_step for the fixed steps."""
    def wrap(fn):
        def run(*a, **kw):
            return run_step(name, fn, *a, **kw)
        return run
    return wrap


def tiny_shape(name: str, vocab: int = 272) -> ModelShape:
    """Tiny Llama-style shapes for the CPU dry run (one pair per real pair, same vocab within a pair)."""
    big = "target" in name
    return ModelShape(name, 2 if big else 1, 128 if big else 64, 4, 2, 32, 256 if big else 128, vocab, False)


def pairs() -> list[tuple[str, ModelShape, ModelShape]]:
    """(label, target, draft) shapes of the grids and runs: real shapes on a GPU, tiny ones with --quick."""
    if QUICK:
        return [("llama", tiny_shape("tiny-target-a"), tiny_shape("tiny-draft-a")),
                ("qwen", tiny_shape("tiny-target-b", 300), tiny_shape("tiny-draft-b", 300))]
    return [("llama", get_shape("llama-3.1-8b"), get_shape("llama-3.2-1b")),
            ("qwen", get_shape("qwen3-32b"), get_shape("qwen3-0.6b"))]


def grids(label: str, target: ModelShape, draft: ModelShape) -> list[dict]:
    """CUDA-graph latency grid of both models of one pair."""
    return (grid_rows(target, "target", DEVICE, DTYPE, QUICK, log)
            + grid_rows(draft, "draft", DEVICE, DTYPE, QUICK, log))


def fit(label: str, target: ModelShape, draft: ModelShape) -> dict:
    """Saguaro stack fitted to the pair's grid; the fitted profile is written to OUT/<name>.json."""
    rows = RESULTS["steps"][f"grid_{label}"]["result"]
    name = f"{HW}-{target.name}-{draft.name}-grid" if not QUICK else f"quick-{label}"
    res = fit_pair(rows, HW, target, draft, name)
    prof = res.pop("profile")
    prof.to_json(OUT / f"{name}.json")
    PROFILES[label] = prof
    log(f"{label}: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in res["errors"].items()))
    return {**res, "profile_file": f"{name}.json"}


def runs(label: str, target: ModelShape, draft: ModelShape) -> list[dict]:
    """AR / SD / SSD at the pair's shapes with measured vs predicted tokens/s (Qwen3-32B: batch 1 and 16 new
    tokens only, like --quick, to stay in the time budget)."""
    return shape_runs(target, draft, PROFILES[label], DEVICE, DTYPE, QUICK or label == "qwen", log, model_config)


def projection(label: str) -> list[dict]:
    """SSD / SD the simulator projects with the draft on a second GPU (the fitted profile)."""
    return [second_gpu_projection(PROFILES[label], b) for b in (1, 4)]


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


@step("link")
def link() -> list[dict]:
    return profile_link(repeats=3 if QUICK else 20)


@step("decode_bandwidth")
def decode_bandwidth() -> list[dict]:
    """Achieved HBM bandwidth and FLOP/s of decode steps (calibration.traffic: weights + KV read + KV written
    + logits), as fractions of the H200 datasheet peaks and of the measured copy ceiling."""
    ceil = (RESULTS["steps"].get("ceilings") or {}).get("result", {}).get("copy_bytes_per_s", float("nan"))
    dtype_bytes = 2 if DTYPE == torch.bfloat16 else 4
    out = []
    for label, target, draft in pairs():
        shapes = {target.name: target, draft.name: draft}
        for r in (RESULTS["steps"].get(f"grid_{label}") or {}).get("result") or []:
            if r["new_tokens"] != 1:
                continue
            traffic = forward_traffic(shapes[r["model"]], r["batch"], 1, r["context"], dtype_bytes)
            rates = achieved_rates(traffic, r["median_s"], HW)
            out.append({"who": r["who"], "model": r["model"], "batch": r["batch"], "context": r["context"], "median_s": r["median_s"],
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
    for batch in (1,) if QUICK else (1, 4):
        for graphs in graph_settings():
            for mode in ("ar", "sd", "ssd"):
                spec = SpecConfig(mode=mode, k=4, budget=16, batch_size=batch)
                cfg = saguaro_exec.RunConfig(spec=spec, max_new_tokens=16 if QUICK else 128, device=DEVICE,
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



def main() -> None:
    global OUT, QUICK, DEVICE, DTYPE, HW, PROFILES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out/gpu_check"))
    ap.add_argument("--quick", action="store_true", help="tiny shapes, for a CPU dry run")
    args = ap.parse_args()
    OUT, QUICK = Path(args.out), args.quick
    OUT.mkdir(parents=True, exist_ok=True)
    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    HW, PROFILES = "h200", {}
    env()
    ceilings()
    for label, target, draft in pairs():
        run_step(f"grid_{label}", grids, label, target, draft)
        run_step(f"fit_{label}", fit, label, target, draft)
    decode_bandwidth()
    link()
    exec_runs()
    for label, target, draft in pairs():
        if label in PROFILES:
            run_step(f"runs_{label}", runs, label, target, draft)
            run_step(f"projection_{label}", projection, label)
    ok = {k: v["ok"] for k, v in RESULTS["steps"].items()}
    log(f"done in {time.time() - T0:.0f} s: {ok}")
    print(json.dumps({k: v.get("result") for k, v in RESULTS["steps"].items()
                      if k == "env" or k == "ceilings" or k.startswith("projection")}, indent=1, default=str))
    print(json.dumps({k: v["result"]["errors"] for k, v in RESULTS["steps"].items()
                      if k.startswith("fit_") and v["ok"]}, indent=1))
    sys.exit(0 if all(ok.values()) else 1)


if __name__ == "__main__":
    main()
