"""How loaded the machine is: load average and CPU steal (the share of CPU time the hypervisor took, from
/proc/stat deltas), so a benchmark can say whether it ran on a quiet box."""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC_STAT = Path("/proc/stat")


def cpu_times() -> list[int] | None:
    """The aggregate "cpu" line of /proc/stat: user nice system idle iowait irq softirq steal (jiffies);
    None where /proc/stat is missing (not Linux). guest / guest_nice are left out: user already counts them."""
    try:
        first = PROC_STAT.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    vals = [int(x) for x in first[1:9]]
    return vals + [0] * (8 - len(vals))


def steal_share(before: list[int] | None, after: list[int] | None) -> float | None:
    """Steal jiffies / all jiffies between two cpu_times() samples (None if unknown or no time passed)."""
    if before is None or after is None:
        return None
    delta = [b - a for a, b in zip(before, after)]
    total = sum(delta)
    return delta[7] / total if total > 0 else None


def snapshot(window_s: float = 1.0) -> dict:
    """Load average now, and the steal share over the next ``window_s`` seconds (this process sleeping)."""
    a = cpu_times()
    time.sleep(window_s)
    return {"load_average": list(os.getloadavg()), "steal_share": steal_share(a, cpu_times()),
            "steal_window_s": window_s}


def quiet_box(start: dict, run_steal: float | None, max_load: float = 1.0, max_steal: float = 0.05) -> dict:
    """The issue's quiet-box rule: 1-minute load average < max_load at the start, steal < max_steal over the run."""
    load_ok = start["load_average"][0] < max_load
    steal_ok = run_steal is not None and run_steal < max_steal
    return {f"load_average_start<{max_load:g}": load_ok, f"steal_run<{max_steal:g}": steal_ok,
            "quiet": load_ok and steal_ok}
