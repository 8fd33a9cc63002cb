"""How fast and how busy this machine is while a benchmark runs: /proc/stat snapshots (CPU steal) and a speed
probe timed around every run (bench_fidelity, bench_load)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def cpu_times() -> dict | None:
    """The aggregate `cpu` line of /proc/stat (clock ticks: user .. steal), None where there is none."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {n: int(v) for n, v in zip(names, fields[1:9])} if fields[0] == "cpu" else None


def steal_share(a: dict | None, b: dict | None) -> float | None:
    """Share of CPU time stolen by the hypervisor between two cpu_times() snapshots."""
    if not a or not b:
        return None
    total = sum(b.values()) - sum(a.values())
    return (b.get("steal", 0) - a.get("steal", 0)) / total if total > 0 else 0.0


def speed_probe(target: str, draft: str, threads: int):
    """A callable timing a fixed piece of work (target and draft forwards of 4 tokens, median of 15 each):
    run right before and after every measured run, it tracks how fast this shared machine is at that
    moment, so the comparison can also be made with the machine's speed drift taken out."""
    import torch

    from saguaro_exec.engine.cached_model import CachedModel
    from saguaro_exec.speculator.process import load_source

    models = [CachedModel(load_source(p, "cpu", "float32"), 1, 256) for p in (target, draft)]

    def probe() -> float:
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        total = 0.0
        for cm in models:
            ts = []
            for i in range(15):
                t0 = time.perf_counter()
                cm.tail_logits([[1, 2, 3, 4]], torch.tensor([64 + 4 * i]), 4)
                ts.append(time.perf_counter() - t0)
            total += float(np.median(ts))
        torch.set_num_threads(old)
        return total

    return probe
