"""The SSD draft's hot path in one process: the DraftWorker driven by the real verifier, each step timed.

    .venv/bin/python bench/bench_draft_hot.py --out out/bench_draft_hot.json
    .venv/bin/python bench/bench_draft_hot.py --versions new=.,old=/tmp/old --passes 5   # A/B, interleaved

Per round, in the draft process's order (answer the outcome, then build the next cache), with nothing but
the target's verification between: ``unpack`` (the outcome message read back), ``answer`` (what the push
protocol's loop does before building: lookup and the next speculation, plus the reply on a miss; split by
hit / miss round), ``to_forward`` (build start until the draft's first model
forward: settling the outcome, the glue's inputs) and ``handoff`` = their sum, the draft-side hand-off
without transport; then ``build`` (glue..pack, the whole build) and ``build_outside_forwards`` (the build
minus the time inside the draft's model forwards: its Python and tensor glue, much less load-sensitive) and
its phases ``glue`` (settle + glue forward), ``fork``, ``tree`` (tree steps + pack). ``--versions`` runs each checkout in a
subprocess (its PYTHONPATH) --passes times, alternated, on the same outcomes (T = 0, deterministic).
Single-process Python overhead is much less sensitive to a shared CPU than end-to-end runs, yet still
only indicative on a loaded box.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if "--one" not in sys.argv:                 # a child imports the checkout its PYTHONPATH names
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from saguaro_exec.engine.verifier import Verifier  # noqa: E402
from saguaro_exec.io.prompts import BUILTIN_PROMPTS  # noqa: E402
from saguaro_exec.io.tokenizer import load_tokenizer  # noqa: E402
from saguaro_exec.model import load_model  # noqa: E402
from saguaro_exec.sampling import make_generator  # noqa: E402
from saguaro_exec.speculator.protocol import outcome_tensor, unpack_outcome  # noqa: E402

try:                                        # the reused outcome message (newer checkouts)
    from saguaro_exec.speculator.protocol import OutcomeMessage
except ImportError:
    OutcomeMessage = None
from saguaro_exec.speculator.worker import DraftWorker, WorkerSpec  # noqa: E402

ASSETS = ROOT / "saguaro_exec" / "assets" / "tiny"
METRICS = ("unpack", "answer_hit", "answer_miss", "to_forward", "handoff_hit", "handoff_miss", "build",
           "build_outside_forwards", "glue", "fork", "tree")


def measure(args: argparse.Namespace) -> dict[str, list[int]]:
    """One pass: every prompt through batch-``args.batch`` refilled rows; ns per round per metric."""
    torch.set_num_threads(args.threads)
    target, draft = load_model(args.target), load_model(args.draft)
    tok = load_tokenizer(args.target)
    prompts = [tok.encode(p) for p in BUILTIN_PROMPTS[:args.prompts]]
    fan = tuple(int(x) for x in args.fanout.split(","))
    ws = WorkerSpec(k=args.k, fanout=fan, fanout_miss=fan, sampler_c=1.0, backup=args.backup, temperature=0.0,
                    max_new=args.max_new)
    out: dict[str, list[int]] = {m: [] for m in METRICS}
    marks_fresh = "fresh" in inspect.signature(outcome_tensor).parameters   # (checkouts differ)
    first_forward: list[int] = []                 # start of each draft forward in this build
    in_forward = [0]                              # ns spent inside draft forwards in this build
    hooks = [draft.register_forward_pre_hook(lambda m, a: first_forward.append(time.perf_counter_ns())),
             draft.register_forward_hook(lambda m, a, o: in_forward.__setitem__(
                 0, in_forward[0] + time.perf_counter_ns() - first_forward[-1]))]
    for _ in range(args.loops):
        t_start = time.perf_counter()
        ver = Verifier(target, prompts, args.k, 0.0, make_generator(0), args.max_new, [], width=args.batch)
        ver.state.arrive_from(0.0, None)
        ver.apply_refill(*ver.state.refill(0.0, movable=False))
        worker = DraftWorker(draft, prompts, ws, make_generator(1), t_start, width=args.batch)
        reply, r = worker.start(), 0
        lean = hasattr(worker, "take")                        # this checkout's hit path (else answer)
        handoff, kind = 0, "hit"                              # of the previous round's outcome
        while True:
            first_forward.clear()
            in_forward[0] = 0
            t0 = time.perf_counter_ns()
            worker.build()
            t1 = time.perf_counter_ns()
            if hasattr(worker, "index_cache"):                # as the serve loop: while the outcome is awaited
                worker.index_cache()
            if r > 0:
                out["to_forward"].append(first_forward[0] - t0)
                out["build"].append(t1 - t0)
                out["build_outside_forwards"].append(t1 - t0 - in_forward[0])
                for name in ("glue", "fork", "tree"):         # the build's own phase stamps
                    s, e = worker.times[name]
                    out[name].append(round((e - s) * 1e9))
                out[f"handoff_{kind}"].append(handoff + first_forward[0] - t0)
            acc, bonus = ver.verify(reply.tokens, reply.q, r)
            stop = ver.state.all_done()
            done = list(ver.state.done)
            fresh = ver.state.refill(0.0, movable=False)[1]
            if OutcomeMessage is not None:                    # the message a link reuses, read back as
                msg = OutcomeMessage(len(done))               # the draft process reads it
                msg.write(acc.tolist(), bonus.tolist(), done, stop, tuple(fresh))
            else:
                msg = outcome_tensor(acc, bonus, done, stop, *((tuple(fresh),) if marks_fresh else ()))
            seen = time.perf_counter_ns()                     # the outcome message in hand
            got = unpack_outcome(msg)
            acc, bonus, done, stop = got[:4]
            if len(got) > 4:                                  # load mode's refill count (as process.py)
                worker.admitted = worker.next + got[4]
            t2 = time.perf_counter_ns()
            if lean:                                          # what the push protocol's loop does
                miss = worker.take(acc, bonus, done)
                reply = worker.reply() if miss else None
            else:
                reply = worker.answer(acc, bonus, done)
                miss = bool(reply.from_backup.any())
            t3 = time.perf_counter_ns()
            if reply is None:                                 # the verifier's own lookup, off the clock
                reply = worker.reply()
            ver.apply_refill([], fresh)
            kind = "miss" if miss else "hit"
            out["unpack"].append(t2 - seen)
            handoff = t3 - seen
            out[f"answer_{kind}"].append(t3 - t2)
            if stop:
                break
            r += 1
    for h in hooks:
        h.remove()
    return out


def summary(ns: list[int]) -> dict | None:
    if not ns:
        return None
    s = sorted(ns)
    q = lambda p: s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))] / 1e3  # noqa: E731
    return {"n": len(s), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99), "mean_us": sum(s) / len(s) / 1e3}


def table(rows: list[tuple[str, dict]]) -> str:
    lines = [f"{'version':<10} {'metric':<24} {'n':>6} {'p50 us':>9} {'p90 us':>9} {'p99 us':>9} {'mean us':>9}"]
    for name, res in rows:
        for m in METRICS:
            d = res.get(m)
            if d:
                lines.append(f"{name:<10} {m:<24} {d['n']:>6} {d['p50_us']:>9.1f} {d['p90_us']:>9.1f} "
                             f"{d['p99_us']:>9.1f} {d['mean_us']:>9.1f}")
    return "\n".join(lines)


def child_argv(args: argparse.Namespace) -> list[str]:
    keep = ("target", "draft", "batch", "k", "fanout", "backup", "prompts", "max_new", "loops", "threads")
    return [a for key in keep for a in (f"--{key.replace('_', '-')}", str(getattr(args, key)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/bench_draft_hot.json")
    p.add_argument("--target", default=str(ASSETS / "target-deep"))
    p.add_argument("--draft", default=str(ASSETS / "draft"))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--fanout", default="5,4,3,2", help="F_0..F_K, comma separated")
    p.add_argument("--backup", default="fast", help="neural | fast")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--max-new", type=int, default=128)
    p.add_argument("--loops", type=int, default=1, help="times the prompts are run in one pass")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--versions", default="", help="name=checkout,...: A/B in subprocesses, alternated")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)    # child: print raw ns as JSON
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args)))
        return 0
    from bench.versions import measure_version, parse_versions  # here: a child may import an older checkout

    versions = parse_versions(args.versions)
    raw: dict[str, dict[str, list[int]]] = {name: {m: [] for m in METRICS} for name, _ in versions}
    for _ in range(args.passes):
        for name, path in versions:
            got = measure_version(__file__, child_argv(args), name, path, lambda: measure(args))
            for m in METRICS:
                raw[name][m] += got[m]
            print(f"  {name}: {len(got['unpack'])} rounds", flush=True)
    rows = [(name, {m: summary(v) for m, v in raw[name].items()}) for name, _ in versions]
    print(table(rows))
    result = {"meta": {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "machine": platform.node(),
                       "load_average": os.getloadavg(), "command": " ".join(sys.argv), "versions": versions},
              "results": dict(rows)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
