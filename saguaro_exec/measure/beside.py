"""How much slower the target's forward runs while the draft computes beside it on another core of the same host:
the number ``Profile.beside_slowdown`` carries (SSD's verification overlaps the draft's cache build).

Why a benchmark of its own: on some hosts two cores' vector work slows each other (2026-12-02, an Intel AVX-512
VM: each verification +9.5-9.8% beside the draft process, a Python spin beside it 0-1%; the AMD hosts before
0-1%), which the per-forward microbenchmarks, run alone, never see. The host's own speed moves a run by a third
within seconds, so the draft child is busy and idle in alternate windows of ``window_s`` on one clock (no
message while timing: a store or socket poll would be work of its own) and the slowdown is the median ratio of
adjacent windows' median forward times. The child is supervised like a run's draft (``spawn.Supervisor``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from calibration.errors import check_number
from saguaro_exec.measure.microbench import forward_call
from saguaro_exec.model import load_model
from saguaro_exec.spawn import ARGS, ChildFailed, Supervisor, join

MARGIN_S = 0.01      # left out at each window's edges: the child's last forward of a busy window ends late


def draft_load(rank: int, port: int, workdir: str) -> None:
    """The child (a ``spawn`` target): draft forwards in the even windows after the parent's start time, idle in
    the odd ones, until the last window has passed."""
    with open(os.path.join(workdir, ARGS)) as f:
        a = json.load(f)
    torch.set_num_threads(1)
    step = forward_call(load_model(Path(a["draft"]), device="cpu", dtype=torch.float32), a.get("batch", 1),
                        a["draft_tokens"], a["context"], "cpu")
    step()
    store = join(port, 2, rank, a["timeout_s"])
    t0, w = float(store.get("t0")), a["window_s"]
    end = t0 + 2 * a["cycles"] * w
    while (now := time.monotonic()) < end:
        if now >= t0 and int((now - t0) / w) % 2 == 0:
            step()
        else:
            time.sleep(min(0.002, max(0.0, end - now)))


def beside_slowdown(target: str | os.PathLike, draft: str | os.PathLike, target_tokens: int = 6,
                    draft_tokens: int = 64, context: int = 128, cycles: int = 40, window_s: float = 0.09,
                    timeout_s: float = 120.0, stall_s: float = 10.0, batch: int = 1) -> dict:
    """Time the target's ``target_tokens``-token forward (1 thread) in ``cycles`` pairs of windows, the draft
    child running ``draft_tokens``-token forwards in the first of each pair and idle in the second; both over
    ``batch`` rows (a verification and a tree step of a batch). Returns
    {"slowdown": median busy / idle ratio, at least 1, "raw": the median itself, "q1", "q3", "cycles",
    "busy_s", "idle_s" (median forward times), and the shapes}."""
    for name, v, lo, hi in (("target_tokens", target_tokens, 1, 4096), ("draft_tokens", draft_tokens, 1, 4096),
                            ("context", context, 0, 1 << 16), ("cycles", cycles, 2, 10000), ("batch", batch, 1, 1024)):
        check_number(f"beside.{name}", v, lo, hi, integer=True)
    check_number("beside.window_s", window_s, 0.03, 10.0)
    torch.set_num_threads(1)
    fwd = forward_call(load_model(Path(target), device="cpu", dtype=torch.float32), batch, target_tokens, context,
                       "cpu")
    args = {"draft": str(draft), "draft_tokens": draft_tokens, "context": context, "cycles": cycles, "batch": batch,
            "window_s": window_s, "timeout_s": timeout_s}
    sup = Supervisor("beside benchmark worker", "saguaro-beside-", "saguaro_exec.measure.beside:draft_load", 2,
                     timeout_s, stall_s)
    done = False
    try:
        store = sup.spawn(lambda path: Path(path).write_text(json.dumps(args)))
        for _ in range(5):
            fwd()
        sup.wait_for("up", "connect")
        t0 = time.monotonic() + 0.2
        store.set("t0", repr(t0))
        medians = []
        for i in range(2 * cycles):
            lo, hi = t0 + i * window_s + MARGIN_S, t0 + (i + 1) * window_s - MARGIN_S
            while time.monotonic() < lo:
                pass                                  # a short spin to the window's start: no sleep's wake-up late
            times = []
            while (a := time.monotonic()) < hi:
                fwd()
                times.append(time.monotonic() - a)
            medians.append(float(np.median(times)) if times else float("nan"))
        failed = sup.failure()
        if failed is not None:
            raise failed
        done = True
    except RuntimeError as e:
        failed = e if isinstance(e, ChildFailed) else sup.failure(wait_s=3.0) or e
        raise RuntimeError(f"beside benchmark got no result: {failed}") from None
    finally:
        sup.close() if done else sup.abort()
    busy, idle = np.asarray(medians[0::2]), np.asarray(medians[1::2])
    ok = np.isfinite(busy) & np.isfinite(idle) & (idle > 0)
    ratios = busy[ok] / idle[ok]
    raw = float(np.median(ratios))
    return {"slowdown": max(1.0, raw), "raw": raw, "q1": float(np.percentile(ratios, 25)),
            "q3": float(np.percentile(ratios, 75)), "cycles": int(ok.sum()), "busy_s": float(np.median(busy[ok])),
            "idle_s": float(np.median(idle[ok])), "target_tokens": target_tokens, "draft_tokens": draft_tokens,
            "context": context, "window_s": window_s, "batch": batch}
