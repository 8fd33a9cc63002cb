"""Hand-off probe: SSD on the deep pair, per round the time each side takes to act on the other's message.

    .venv/bin/python bench/bench_handoff.py --out out/bench_handoff.json

Runs SSD (batch 1, T = 0 by default) --repeats times per variant, interleaved: the Python GC in the
verifier process left on, disabled during the run, or frozen after loading (gc.freeze; since 2026-12-01
``saguaro_exec.run`` freezes what is alive at its start itself, and the draft process after loading, so "on"
and "freeze" now differ only in the caller's objects), and each
--transports entry when the executor has that option. Per round (bench/handoff_stats.py): the
draft-side gap (outcome posted / cache built -> the draft acts), the verifier-side gap (cache ready ->
verification starts), the verifier's wait and the share of rounds stalled > 1 ms, as p50/p90/p99, not
only means, and the legs inside them where the draft stamped them (push): the verifier's outcome send and
the draft's wake-up, unpack, answer on a hit / a miss, settle and pack, the cache's transit; plus the
verifier process's GC pauses during the run. Timings on a loaded machine are not
results: run it on a quiet box (load average < 1).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import gc
import inspect
import json
import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.handoff_stats import METRICS, run_handoffs, summarize  # noqa: E402
from calibration.jsonio import write_atomic  # noqa: E402
from saguaro_exec import RunConfig, run  # noqa: E402
from saguaro_exec.io.prompts import BUILTIN_PROMPTS  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402

ASSETS = Path(__file__).resolve().parents[1] / "saguaro_exec" / "assets" / "tiny"


def clock_shared() -> bool:
    """Whether a child process's perf_counter falls between two of ours (one clock across processes)."""
    before = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", "import time; print(repr(time.perf_counter()))"],
                         capture_output=True, text=True, check=True).stdout
    return before <= float(out) <= time.perf_counter()


@contextmanager
def gc_mode(mode: str):
    """The verifier process's collector during one run: "on", "off" (disabled) or "freeze"."""
    gc.collect()
    if mode == "freeze":
        gc.freeze()
    elif mode == "off":
        gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


class GCPauses:
    """Collections of the verifier process's GC while active: (generation, start, seconds)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float, float]] = []
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.pauses.append((info["generation"], self._t0, time.perf_counter() - self._t0))

    def __enter__(self) -> GCPauses:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)

    def summary(self, rounds: int) -> dict:
        by_gen = {g: [s for gg, _, s in self.pauses if gg == g] for g in (0, 1, 2)}
        return {f"gen{g}": {"n": len(v), "per_round": len(v) / max(1, rounds), "max_ms": 1e3 * max(v, default=0.0),
                            "total_ms": 1e3 * sum(v)} for g, v in by_gen.items()}


def _config(args: argparse.Namespace, transport: str | None) -> RunConfig:
    fan = tuple(int(x) for x in args.fanout.split(","))
    spec = SpecConfig(mode="ssd", k=args.k, fanout=fan, batch_size=args.batch, temperature=args.temp,
                      backup=args.backup)
    extra = {"transport": transport} if transport else {}
    return RunConfig(spec=spec, prompts=list(BUILTIN_PROMPTS[:args.prompts]), max_new_tokens=args.max_new,
                     target=args.target, draft=args.draft, seed=args.seed, threads=args.threads,
                     ssd_protocol=args.protocol, **extra)


def bench(args: argparse.Namespace) -> dict:
    has_transport = "transport" in inspect.signature(RunConfig).parameters
    transports = args.transports.split(",") if has_transport and args.transports else [None]
    variants = [(t, g) for t in transports for g in args.gc.split(",")]
    if args.warmup:
        run(dataclasses.replace(_config(args, transports[0]), max_new_tokens=8))
    results = {v: [] for v in variants}
    for _ in range(args.repeats):
        for v in variants:
            transport, mode = v
            with gc_mode(mode), GCPauses() as pauses:
                rep = run(_config(args, transport))
            rows = rep.measurements.rounds
            hand = run_handoffs(rows, rep.events)
            results[v].append({"tokens_per_s": rep.tokens_per_s, "hit_rate": rep.hit_rate, "summary": summarize(hand),
                               "gc": pauses.summary(len(rows)), "handoffs": hand if args.keep_rounds else None,
                               "protocol": rep.measurements.meta.get("ssd_protocol"),
                               "transport": rep.measurements.meta.get("transport")})
            print(f"  transport={transport or 'default'} gc={mode}: {rep.tokens_per_s:.0f} tok/s, "
                  f"{len(hand)} rounds", flush=True)
    out = []
    for (transport, mode), reps in results.items():
        pooled = [h for r in reps for h in (r["handoffs"] or [])]
        out.append({"transport": transport, "gc": mode, "repeats": reps,
                    "pooled": summarize(pooled) if pooled else None})
    return {"meta": {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "machine": platform.node(),
                     "cpus": os.cpu_count(), "load_average": os.getloadavg(), "command": " ".join(sys.argv),
                     "clock": time.get_clock_info("perf_counter").implementation,
                     "clock_shared_across_processes": clock_shared(), "target": args.target, "draft": args.draft,
                     "batch": args.batch, "temperature": args.temp, "k": args.k, "fanout": args.fanout},
            "variants": out}


def table(result: dict) -> str:
    lines = [f"{'variant':<22} {'metric':<16} {'n':>5} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'mean ms':>8} "
             f"{'>1ms':>6}"]
    for v in result["variants"]:
        name = f"{v['transport'] or 'default'}/gc={v['gc']}"
        summ = v["pooled"] or v["repeats"][0]["summary"]     # pooled over repeats when rounds were kept
        for m in METRICS:
            d = summ.get(m)
            if d:
                lines.append(f"{name:<22} {m:<16} {d['n']:>5} {d['p50_ms']:>8.3f} {d['p90_ms']:>8.3f} "
                             f"{d['p99_ms']:>8.3f} {d['mean_ms']:>8.3f} {100 * d['share_over_1ms']:>5.1f}%")
        gcs = v["repeats"][-1]["gc"]
        lines.append(f"{name:<22} gc pauses/round: " + ", ".join(f"{g} {s['per_round']:.2f} (max {s['max_ms']:.2f} ms)"
                                                              for g, s in gcs.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/bench_handoff.json")
    p.add_argument("--target", default=str(ASSETS / "target-deep"))
    p.add_argument("--draft", default=str(ASSETS / "draft"))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--fanout", default="5,4,3,2", help="F_0..F_K, comma separated")
    p.add_argument("--backup", default="auto")
    p.add_argument("--protocol", default="push", help="reply | push | auto")
    p.add_argument("--transports", default="shm,gloo", help="when RunConfig has a transport field")
    p.add_argument("--gc", default="on,off,freeze", help="verifier-process GC variants, comma separated")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--max-new", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument("--no-rounds", dest="keep_rounds", action="store_false", help="drop per-round records")
    args = p.parse_args(argv)
    result = bench(args)
    print(table(result))
    write_atomic(args.out, json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
