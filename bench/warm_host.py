"""Warm a shared VM up before a measurement session: run the speed probe (bench/machine_speed.py) on one core with
a torch burner on the other until the probe's speed settles, so the first measured pass is not taken at the
speed of a host that has just woken from a long idle (2026-12-03: after hours idle, the first of five fidelity
passes ran at 0.55-0.65x the speed of the other four and biased the pooled fit ~13% slow).

Usage: python bench/warm_host.py [--window 5] [--min 30] [--max 240] [--tol 0.03]; prints every window's probe
time and exits 0 once two consecutive windows agree within --tol (1 if --max passed first: the host kept moving)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine_speed import speed_probe  # noqa: E402

TINY = ROOT / "saguaro_exec" / "assets" / "tiny"
BURN = ("import torch, time\ntorch.set_num_threads(1)\na = torch.randn(192, 192)\n"
        "while True:\n    for _ in range(200):\n        a = torch.tanh(a @ a)\n    time.sleep(0)\n")


def settled(times: list[float], tol: float) -> bool:
    """Two consecutive windows within ``tol`` of each other (relative to the later one)."""
    return len(times) >= 2 and abs(times[-1] - times[-2]) <= tol * times[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=5.0, help="seconds per probe window (default 5)")
    ap.add_argument("--min", type=float, default=30.0, help="seconds to warm at least (default 30)")
    ap.add_argument("--max", type=float, default=240.0, help="seconds to warm at most (default 240)")
    ap.add_argument("--tol", type=float, default=0.03, help="relative agreement of two windows (default 0.03)")
    args = ap.parse_args()
    probe = speed_probe(str(TINY / "target"), str(TINY / "draft"), 1)
    burner = subprocess.Popen([sys.executable, "-c", BURN], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0, times = time.perf_counter(), []
    try:
        while True:
            w0, ts = time.perf_counter(), []
            while time.perf_counter() - w0 < args.window:
                ts.append(probe())
            times.append(float(np.median(ts)))
            el = time.perf_counter() - t0
            print(f"{el:6.1f} s  probe {1e3 * times[-1]:.3f} ms", flush=True)
            if el >= args.min and settled(times, args.tol):
                print(f"settled after {el:.0f} s (first window {times[0] / times[-1]:.2f}x the last)")
                return 0
            if el >= args.max:
                print(f"not settled after {el:.0f} s (last two windows {times[max(0, len(times) - 2)] / times[-1]:.3f}x)")
                return 1
    finally:
        burner.kill()
        burner.wait()


if __name__ == "__main__":
    sys.exit(main())
