"""The draft's linear drafting (``Drafter.jit``: SD's drafting, SSD's neural backup) alone, per call, old vs new
checkout interleaved.

    .venv/bin/python bench/bench_draft_step.py --out out/bench_draft_step.json
    .venv/bin/python bench/bench_draft_step.py --versions old=/tmp/old,new=. --passes 7   # A B A B ...

One pass runs each checkout in a subprocess (its PYTHONPATH): the shipped tiny draft, one thread, for every
batch and temperature ``--calls`` jit calls of K steps from the same true prefix (the prefix is re-drafted:
each call is one miss's backup), after ``--warmup`` calls; it reports wall and thread-CPU ms per call, and a digest of every
drafted token, which must agree between checkouts (the same generator seed at T > 0). The summary gives per
configuration each version's median over passes and the median of the per-pass ratios to the first version.
Single-process Python overhead is much less sensitive to a shared CPU than end-to-end runs, yet still only
indicative on a loaded box.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--one" not in sys.argv:                 # a child imports the checkout its PYTHONPATH names
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from saguaro_exec.engine.drafter import Drafter  # noqa: E402
from saguaro_exec.io.prompts import BUILTIN_PROMPTS  # noqa: E402
from saguaro_exec.io.tokenizer import load_tokenizer  # noqa: E402
from saguaro_exec.model import load_model  # noqa: E402
from saguaro_exec.sampling import make_generator  # noqa: E402

ASSETS = ROOT / "saguaro_exec" / "assets" / "tiny"


def configs(args: argparse.Namespace) -> list[tuple[int, float]]:
    return [(int(b), float(t)) for b in args.batches.split(",") for t in args.temps.split(",")]


def measure(args: argparse.Namespace) -> dict[str, dict]:
    """One pass: per "b{batch}_t{temp}" the ms per jit call and the drafted tokens' digest."""
    torch.set_num_threads(args.threads)
    draft = load_model(args.draft)
    tok = load_tokenizer(args.draft)
    out = {}
    for bsz, temp in configs(args):
        prompts = [tok.encode(BUILTIN_PROMPTS[b % len(BUILTIN_PROMPTS)]) for b in range(bsz)]
        dr = Drafter(draft, prompts, args.k, temp, args.sampler_c, make_generator(1), args.max_new)
        dr.prefill()
        fan = torch.tensor([args.fanout] * bsz, dtype=torch.long)[:, : args.k + 1]
        prefix = dr.n_valid.clone()
        digest = hashlib.sha256()
        for i in range(args.warmup + args.calls):
            if i == args.warmup:
                t0, c0 = time.perf_counter(), time.thread_time()
            tokens = dr.jit(fan)[0]
            dr.n_valid = prefix.clone()                   # the next call drafts from the same true prefix
            digest.update(tokens.numpy().tobytes())
        ms, cpu = ((time.perf_counter() - t0) / args.calls * 1e3, (time.thread_time() - c0) / args.calls * 1e3)
        out[f"b{bsz}_t{temp:g}"] = {"ms_per_jit": ms, "cpu_ms_per_jit": cpu, "tokens_sha256": digest.hexdigest()[:16]}
    return out


def child_argv(args: argparse.Namespace) -> list[str]:
    keep = ("draft", "batches", "temps", "k", "sampler_c", "calls", "warmup", "max_new", "threads")
    argv = [a for key in keep for a in (f"--{key.replace('_', '-')}", str(getattr(args, key)))]
    return argv + ["--fanout", ",".join(map(str, args.fanout))]


def summarize(raw: dict[str, list[dict]], names: list[str]) -> dict[str, dict]:
    """Per configuration: each version's median wall and thread-CPU ms over passes and its median per-pass
    ratios to names[0] (CPU time leaves out the time the process waited for a core)."""
    res = {}
    for cfg in raw[names[0]][0]:
        row = {}
        for name in names:
            ms = [p[cfg]["ms_per_jit"] for p in raw[name]]
            base = [p[cfg]["ms_per_jit"] for p in raw[names[0]]]
            cpu = [p[cfg]["cpu_ms_per_jit"] for p in raw[name]]
            cpu_base = [p[cfg]["cpu_ms_per_jit"] for p in raw[names[0]]]
            row[name] = {"median_ms": statistics.median(ms), "ms": ms,
                         "ratio_to_first": statistics.median(a / b for a, b in zip(ms, base)),
                         "median_cpu_ms": statistics.median(cpu), "cpu_ms": cpu,
                         "cpu_ratio_to_first": statistics.median(a / b for a, b in zip(cpu, cpu_base)),
                         "tokens_sha256": sorted({p[cfg]["tokens_sha256"] for p in raw[name]})}
        res[cfg] = row
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/bench_draft_step.json")
    p.add_argument("--draft", default=str(ASSETS / "draft"))
    p.add_argument("--batches", default="1,4")
    p.add_argument("--temps", default="0,0.7")
    p.add_argument("--k", type=int, default=7)
    p.add_argument("--fanout", type=lambda s: [int(x) for x in s.split(",")], default=[3, 3, 2, 2, 2, 1, 1, 1],
                   help="F_0..F_K, comma separated (read at T > 0 when --sampler-c < 1)")
    p.add_argument("--sampler-c", type=float, default=1.0)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--max-new", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--versions", default="", help="name=checkout,...: A/B in subprocesses, alternated")
    p.add_argument("--passes", type=int, default=7)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)    # child: print one pass as JSON
    args = p.parse_args(argv)
    if len(args.fanout) < args.k + 1:
        p.error(f"--fanout needs K + 1 = {args.k + 1} values, got {len(args.fanout)}")
    if args.one:
        print(json.dumps(measure(args)))
        return 0
    from bench.versions import measure_version, parse_versions  # here: a child may import an older checkout

    versions = parse_versions(args.versions)
    names = [name for name, _ in versions]
    raw: dict[str, list[dict]] = {name: [] for name in names}
    for i in range(args.passes):
        for name, path in versions:
            got = measure_version(__file__, child_argv(args), name, path, lambda: measure(args))
            raw[name].append(got)
            print(f"  pass {i + 1} {name}: " + ", ".join(f"{c} {v['ms_per_jit']:.3f} ms" for c, v in got.items()),
                  flush=True)
    summary = summarize(raw, names)
    print(f"{'config':<10} {'version':<10} {'median ms':>10} {'ratio':>7} {'cpu ms':>8} {'ratio':>7}  tokens")
    for cfg, row in summary.items():
        for name, d in row.items():
            print(f"{cfg:<10} {name:<10} {d['median_ms']:>10.3f} {d['ratio_to_first']:>7.3f} "
                  f"{d['median_cpu_ms']:>8.3f} {d['cpu_ratio_to_first']:>7.3f}  {','.join(d['tokens_sha256'])}")
    digests = {cfg: {h for d in row.values() for h in d["tokens_sha256"]} for cfg, row in summary.items()}
    mismatch = [cfg for cfg, hs in digests.items() if len(hs) > 1]
    if mismatch:
        print(f"drafted tokens differ between versions or passes: {', '.join(mismatch)}")
    result = {"meta": {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "machine": platform.node(),
                       "load_average": os.getloadavg(), "command": " ".join(sys.argv), "versions": versions,
                       "tokens_agree": not mismatch},
              "results": summary}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 1 if mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
