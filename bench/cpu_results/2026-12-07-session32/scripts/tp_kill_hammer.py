"""Hammer the CI failure of session 31's stop: SIGKILL a tensor-parallel worker mid-decoding (AR, --k 2,
target-devices cpu,cpu) and time how long `saguaro run` takes to fail. A run longer than 30 s dumps every
thread's Python stack (faulthandler) so the call that waits is named. Usage: python tp_kill_hammer.py N OUT.jsonl"""
import contextlib
import faulthandler
import io
import json
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../tests/exec"))
from test_spawn import TP_ROLE, Signaller, _tp_loaded  # noqa: E402

from saguaro import cli  # noqa: E402

n, out = int(sys.argv[1]), sys.argv[2]
import saguaro_exec.tp.target as tpt  # noqa: E402
tpt.STALL_S = 1.0
for i in range(n):
    with tempfile.TemporaryDirectory() as d:
        faulthandler.dump_traceback_later(30, exit=False, file=open(os.path.join(os.path.dirname(out), f"stack_{i}.txt"), "w"))
        hit = Signaller(TP_ROLE, signal.SIGKILL, _tp_loaded)
        t0 = time.monotonic()
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                code = cli.main(["run", "--mode", "ar", "--k", "2", "--target-devices", "cpu,cpu", "--prompt",
                                 "def f(x):", "--max-new-tokens", "1000", "--out", os.path.join(d, "out")])
        finally:
            hit.stop()
        dt = time.monotonic() - t0
        faulthandler.cancel_dump_traceback_later()
        with open(out, "a") as f:
            f.write(json.dumps({"i": i, "s": round(dt, 2), "code": code, "err": err.getvalue().strip()}) + "\n")
        print(i, round(dt, 2), code, flush=True)
