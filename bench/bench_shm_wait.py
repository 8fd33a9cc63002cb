"""One-way hand-off latency between two processes: the shared-memory channel under each wait policy,
and a two-rank gloo group (two I/O threads, gloo's default, or one) for reference, as the receiver waits --gap-ms between messages.

    .venv/bin/python bench/bench_shm_wait.py --out out/bench_shm_wait.json

The sender busy-works --gap-ms (a verification or a build), stamps perf_counter (CLOCK_MONOTONIC, one
clock for both processes) and sends; the receiver stamps when it has the message and sends that back.
Reports p50/p90/p99 of seen minus sent per policy. Run it on a quiet box: on a loaded one the spinning
policies steal the peer's core and every number is noise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from bench.handoff_stats import distribution  # noqa: E402
from calibration.jsonio import write_atomic  # noqa: E402
from saguaro_exec.speculator.shm import ShmChannel, WaitPolicy  # noqa: E402
from saguaro_exec.speculator.shm_group import ShmGroup  # noqa: E402

# policy name -> WaitPolicy (spin budget, then backoff)
POLICIES = {"spin": WaitPolicy(spin_s=10.0, backoff="spin"), "spin+yield": WaitPolicy(spin_s=0.002, backoff="yield"),
            "default": WaitPolicy(),
            "spin+sleep0": WaitPolicy(spin_s=0.002, backoff="sleep0"),
            "spin+sleep50us": WaitPolicy(spin_s=0.002, backoff="sleep", sleep_s=5e-5),
            "yield": WaitPolicy(spin_s=0.0, backoff="yield"), "sleep50us": WaitPolicy(spin_s=0.0, backoff="sleep")}

_KEEP: list = []

ECHO = r"""
import sys, time, torch
sys.path.insert(0, sys.argv[1])
from bench.bench_shm_wait import POLICIES, group
g = group(sys.argv[2], sys.argv[3], 1, int(sys.argv[4]))
x = torch.zeros(1, dtype=torch.float64)
for _ in range(int(sys.argv[5])):
    g.recv([x], 0, 0).wait()
    seen = time.perf_counter()
    g.send([torch.tensor([seen], dtype=torch.float64)], 0, 1).wait()
"""


def group(kind: str, where: str, rank: int, port: int):
    """The rank's end: a ShmGroup on inherited descriptor ``where`` with policy ``kind``, or gloo over 127.0.0.1:port
    ("gloo": its default two I/O threads, "gloo1": one)."""
    if kind.startswith("gloo"):
        store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=timedelta(seconds=60))
        _KEEP.append(store)                      # the group needs its store alive
        return gloo_group(store, rank, threads=1 if kind == "gloo1" else 2)
    ch = ShmChannel.attach(int(where), wait=POLICIES[kind])
    return ShmGroup(ch, 60.0)


def gloo_group(store: dist.Store, rank: int, threads: int) -> dist.ProcessGroupGloo:
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout, opts._threads = timedelta(seconds=60), threads
    opts._devices = [dist.ProcessGroupGloo.create_default_device()]
    return dist.ProcessGroupGloo(store, rank, 2, opts)


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure(kind: str, n: int, gap_s: float) -> list[float]:
    """n one-way latencies (seconds) with the receiver idle for gap_s before each message."""
    root = str(Path(__file__).resolve().parents[1])
    ch, port = None, 0
    if kind.startswith("gloo"):
        store = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=timedelta(seconds=60), wait_for_workers=False)
        port = store.port
        where = "-"
    else:
        ch = ShmChannel.create((64, 64), wait=POLICIES[kind])
        where = str(ch.fd)
    proc = subprocess.Popen([sys.executable, "-c", ECHO, root, kind, where, str(port), str(n + 5)],
                            pass_fds=() if ch is None else (ch.fd,))
    try:
        if kind.startswith("gloo"):
            g = gloo_group(store, 0, threads=1 if kind == "gloo1" else 2)
        else:
            ch.alive = lambda: proc.poll() is None
            g = ShmGroup(ch, 60.0)
        back, out = torch.zeros(1, dtype=torch.float64), []
        for i in range(n + 5):                       # 5 warm-up messages
            _busy(gap_s)
            sent = time.perf_counter()
            g.send([torch.tensor([sent], dtype=torch.float64)], 1, 0).wait()
            g.recv([back], 1, 1).wait()
            if i >= 5:
                out.append(float(back) - sent)
        proc.wait(timeout=60)
        return out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if ch is not None:
            ch.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/bench_shm_wait.json")
    p.add_argument("--kinds", default=",".join([*POLICIES, "gloo", "gloo1"]))
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--gap-ms", default="0.05,1.0,3.0", help="receiver idle time before each message")
    args = p.parse_args(argv)
    rows = []
    for gap in (float(x) for x in args.gap_ms.split(",")):
        for kind in args.kinds.split(","):
            d = distribution(measure(kind, args.n, gap / 1e3))
            rows.append({"kind": kind, "gap_ms": gap, **d})
            print(f"gap {gap:5.2f} ms {kind:>15}: p50 {d['p50_ms']:.4f} p90 {d['p90_ms']:.4f} "
                  f"p99 {d['p99_ms']:.4f} max {d['max_ms']:.3f} ms", flush=True)
    meta = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "machine": platform.node(),
            "cpus": os.cpu_count(), "load_average": os.getloadavg(), "command": " ".join(sys.argv)}
    write_atomic(args.out, json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
