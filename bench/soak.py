"""Soak: >= 1,000 generations through the executor with random lengths, temperatures, batch sizes and AR / SD /
SSD configurations (random K, fan-out budget, C, backup; a few SSD runs with an injected draft fault), on the
shipped tiny pair. After every run it records resident memory, open file descriptors and live child
processes; every temperature-0 output is compared with the target's own greedy continuation (no KV cache).

    nohup .venv/bin/python bench/soak.py --out bench/results/soak > out/soak.log 2>&1 &

Writes DIR/soak.json (every run + the summary) and DIR/soak.png (memory / descriptor curves). Pass: memory
after warm-up within 5% of its level at the end of warm-up, no descriptor or process growth, no mismatch.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import random
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from calibration.jsonio import write_atomic  # noqa: E402
from saguaro_exec import RunConfig, run  # noqa: E402
from saguaro_exec.io.assets import tiny_pair_paths  # noqa: E402
from saguaro_exec.io.tokenizer import load_tokenizer  # noqa: E402
from saguaro_exec.model import load_model  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402

SOURCES = ("os.py", "json/decoder.py", "argparse.py", "collections/__init__.py", "textwrap.py", "pathlib.py")


def rss_mb() -> float:
    """Resident set size of this process (VmRSS), MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def live_children() -> int:
    """Child processes of this one that are still alive (zombies count: they were never reaped)."""
    me, n = os.getpid(), 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == me:
                n += 1
    return n


def prompt_pool(tok, rng: random.Random, n: int = 400) -> list[list[int]]:
    """Random 8-48 byte slices of standard-library source (the tiny pair's training domain), as token ids."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(lib / s).read_text(errors="replace") for s in SOURCES if (lib / s).is_file()]
    pool = []
    while len(pool) < n:
        t = rng.choice(texts)
        i = rng.randrange(0, len(t) - 64)
        ids = tok.encode(t[i:i + rng.randint(8, 48)])
        if ids:
            pool.append(ids)
    return pool


class Greedy:
    """The target's greedy continuation, recomputed from scratch each step (no cache), cut after EOS."""

    def __init__(self, model) -> None:
        self.model, self.eos, self.memo = model, set(model.config.eos_ids), {}

    def __call__(self, prompt: list[int], n: int) -> list[int]:
        key = tuple(prompt)
        have = self.memo.get(key, [])
        seq = list(prompt) + have
        with torch.inference_mode():
            while len(have) < n and not (have and have[-1] in self.eos):
                t = int(self.model(torch.tensor([seq]))[0, -1].argmax())
                seq.append(t)
                have = have + [t]
        self.memo[key] = have
        out = have[:n]
        for i, t in enumerate(out):
            if t in self.eos:
                return out[:i + 1]
        return out


def random_run(rng: random.Random, pool: list[list[int]], fault_rate: float) -> tuple[SpecConfig, dict]:
    """A random configuration and run settings: mode, K, budget, C, backup, T, batch size, prompts, length."""
    mode = rng.choice(["ar", "sd", "ssd", "ssd"])
    temp = 0.0 if rng.random() < 0.5 else round(rng.uniform(0.3, 1.5), 2)
    bsz = rng.randint(1, 4)
    k = rng.randint(1, 6)
    c = 1.0 if temp == 0 or mode == "ar" else round(rng.choice([1.0, rng.uniform(0.3, 1.0)]), 2)
    if mode == "ar":
        spec = SpecConfig(mode="ar", k=0, budget=0, temperature=temp, batch_size=bsz)
    else:
        spec = SpecConfig(mode=mode, k=k, budget=rng.randint(k + 1, 8 * (k + 1)), sampler_c=c, temperature=temp,
                          batch_size=bsz, backup=rng.choice(["neural", "fast", "auto"]),
                          fanout_shape=rng.choice(["geometric", "uniform"]))
    n_prompts = bsz * rng.randint(2, 4)          # 2-4 batches per run share one draft process
    fault = None
    if mode == "ssd" and rng.random() < fault_rate:
        fault = rng.choice(["die", "garble", "sleep=3"]) + f"@{rng.randint(0, 6)}"
    return spec, {"prompts": [rng.choice(pool) for _ in range(n_prompts)], "max_new_tokens": rng.randint(4, 32),
                  "inject_fault": fault, "fallback": rng.choice(["sd", "ar"]), "draft_timeout_s": 1.0}


def soak(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    t_dir, d_dir = tiny_pair_paths()
    target, draft = load_model(t_dir), load_model(d_dir)
    pool = prompt_pool(load_tokenizer(t_dir), rng)
    greedy = Greedy(target)
    runs, gens, t0 = [], 0, time.perf_counter()
    while gens < args.generations and time.perf_counter() - t0 < args.max_minutes * 60:
        spec, kw = random_run(rng, pool, args.fault_rate)
        t1 = time.perf_counter()
        checked = mismatches = faults = 0
        error = None
        try:
            rep = run(RunConfig(spec=spec, target=target, draft=draft, seed=len(runs), **kw))
            faults = len(rep.faults)
            assert len(rep.token_ids) == len(kw["prompts"])
            if spec.temperature == 0:
                for p, got in zip(kw["prompts"], rep.token_ids):
                    checked += 1
                    mismatches += got != greedy(p, kw["max_new_tokens"])
            del rep
        except Exception as e:  # noqa: BLE001 - a soak records every failure and goes on
            error = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
            print(f"run {len(runs)} failed: {error}", flush=True)
        wall = time.perf_counter() - t1
        gc.collect()
        gens += len(kw["prompts"])
        row = {"i": len(runs), "mode": spec.mode, "k": spec.k, "budget": spec.budget, "sampler_c": spec.sampler_c,
               "backup": spec.backup, "temperature": spec.temperature, "batch_size": spec.batch_size,
               "prompts": len(kw["prompts"]), "max_new_tokens": kw["max_new_tokens"], "fault": kw["inject_fault"], "faults_recorded": faults, "error": error,
               "wall_s": round(wall, 3), "checked": checked, "mismatches": mismatches, "rss_mb": round(rss_mb(), 2),
               "fds": open_fds(), "children": live_children(), "generations": gens}
        runs.append(row)
        if len(runs) % 10 == 0:
            print(f"[{time.perf_counter() - t0:7.1f}s] run {len(runs)} gens {gens} rss {row['rss_mb']:.1f} MB "
                  f"fds {row['fds']} children {row['children']} mismatches {sum(r['mismatches'] for r in runs)}",
                  flush=True)
    return summarize(runs, args, time.perf_counter() - t0)


def summarize(runs: list[dict], args: argparse.Namespace, total_s: float) -> dict:
    warm = max(20, len(runs) // 20)
    after = runs[warm:] or runs
    base = after[0]["rss_mb"]
    rss = [r["rss_mb"] for r in after]
    s = {"runs": len(runs), "generations": runs[-1]["generations"] if runs else 0, "total_s": round(total_s, 1),
         "warmup_runs": warm, "rss_mb_at_warmup_end": base, "rss_mb_min_after": min(rss), "rss_mb_max_after": max(rss),
         "rss_mb_final": rss[-1], "rss_max_dev_pct": round(100 * max(abs(x - base) for x in rss) / base, 2),
         "rss_mb_first": runs[0]["rss_mb"] if runs else None,
         "fds_first": runs[0]["fds"] if runs else None, "fds_after_warmup": after[0]["fds"],
         "fds_max_after": max(r["fds"] for r in after), "fds_final": runs[-1]["fds"] if runs else None,
         "children_max": max(r["children"] for r in runs) if runs else None,
         "t0_generations_checked": sum(r["checked"] for r in runs), "t0_mismatches": sum(r["mismatches"] for r in runs),
         "faults_injected": sum(1 for r in runs if r["fault"]),
         "faults_recorded": sum(r["faults_recorded"] for r in runs), "errors": sum(1 for r in runs if r["error"]),
         "by_mode": {m: sum(r["prompts"] for r in runs if r["mode"] == m) for m in ("ar", "sd", "ssd")}}
    s["pass"] = bool(s["rss_max_dev_pct"] <= 5.0 and s["fds_max_after"] <= s["fds_after_warmup"]
                     and s["children_max"] == 0 and s["t0_mismatches"] == 0 and s["errors"] == 0
                     and s["generations"] >= args.generations)
    return {"summary": s, "runs": runs, "seed": args.seed, "machine": platform.node(), "torch": torch.__version__,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


def plot(doc: dict, path: Path) -> None:
    """RSS and open descriptors per run, warm-up shaded, 5% band around the post-warm-up level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, s = doc["runs"], doc["summary"]
    x = [r["i"] for r in runs]
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    a.plot(x, [r["rss_mb"] for r in runs], lw=1)
    base = s["rss_mb_at_warmup_end"]
    a.axhspan(base * 0.95, base * 1.05, color="tab:green", alpha=0.15, label="+-5% of post-warm-up level")
    a.axvspan(0, s["warmup_runs"], color="grey", alpha=0.2, label="warm-up")
    a.set_ylabel("resident memory (MB)")
    a.legend(loc="lower right")
    a.set_title(f"soak: {s['generations']} generations in {s['runs']} runs ({s['total_s']:.0f} s)")
    b.plot(x, [r["fds"] for r in runs], lw=1, label="open fds")
    b.plot(x, [r["children"] for r in runs], lw=1, label="live child processes")
    b.set_xlabel("run")
    b.legend(loc="center right")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generations", type=int, default=1000, help="generations to run (default 1000)")
    ap.add_argument("--max-minutes", type=float, default=24.0, help="stop after this long (default 24)")
    ap.add_argument("--fault-rate", type=float, default=0.05, help="share of SSD runs with an injected fault")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench/results/soak", help="folder for soak.json and soak.png")
    args = ap.parse_args()
    doc = soak(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "soak.json", json.dumps(doc, indent=1) + "\n")
    plot(doc, out / "soak.png")
    print(json.dumps(doc["summary"], indent=1))
    return 0 if doc["summary"]["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
