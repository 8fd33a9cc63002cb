"""Like tp_kill_hammer.py, but when a run is still going after 8 s: record this process's TCP sockets
(ss) and then shut down (SHUT_RDWR) every socket of ours that is not LISTEN/ESTABLISHED-to-a-live-peer, to
see whether gloo's stuck send then completes with an error. Usage: python tp_kill_probe.py N OUT_DIR"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../../../tests/exec"))
from test_spawn import TP_ROLE, Signaller, _tp_loaded  # noqa: E402

import saguaro_exec.tp.target as tpt  # noqa: E402
from saguaro import cli  # noqa: E402

n, out = int(sys.argv[1]), sys.argv[2]
tpt.STALL_S = 1.0


def socket_fds() -> dict[int, int]:
    """inode -> fd for this process's sockets."""
    got = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            got[int(link[8:-1])] = int(fd)
    return got


def tcp_states() -> dict[int, tuple[str, str, str]]:
    """inode -> (state hex, local, remote) from /proc/net/tcp."""
    rows = {}
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        rows[int(f[9])] = (f[3], f[1], f[2])
    return rows


def probe(i: int, stop: threading.Event) -> None:
    if stop.wait(8):
        return
    rec = {"i": i, "ss": subprocess.run(["ss", "-tanpe"], capture_output=True, text=True).stdout}
    fds, st = socket_fds(), tcp_states()
    rec["ours"] = {str(fd): st.get(ino, ("gone", "", "")) for ino, fd in fds.items()}
    shut = []
    for ino, fd in fds.items():
        state = st.get(ino, ("gone",))[0]
        if state not in ("0A", "01"):        # not LISTEN, not ESTABLISHED: CLOSE_WAIT, or reset (gone)
            s = socket.socket(fileno=os.dup(fd))
            try:
                s.shutdown(socket.SHUT_RDWR)
                shut.append((fd, state, "ok"))
            except OSError as e:
                shut.append((fd, state, str(e)))
            finally:
                s.close()
    rec["shut"] = shut
    rec["t_shut"] = time.monotonic()
    with open(os.path.join(out, f"probe_{i}.json"), "w") as f:
        json.dump(rec, f, indent=1)


for i in range(n):
    with tempfile.TemporaryDirectory() as d:
        stop = threading.Event()
        threading.Thread(target=probe, args=(i, stop), daemon=True).start()
        hit = Signaller(TP_ROLE, signal.SIGKILL, _tp_loaded)
        t0 = time.monotonic()
        try:
            code = cli.main(["run", "--mode", "ar", "--k", "2", "--target-devices", "cpu,cpu", "--prompt",
                             "def f(x):", "--max-new-tokens", "1000", "--out", os.path.join(d, "out")])
        finally:
            hit.stop()
        stop.set()
        dt = time.monotonic() - t0
        with open(os.path.join(out, "runs.jsonl"), "a") as f:
            f.write(json.dumps({"i": i, "s": round(dt, 2), "code": code}) + "\n")
        print(i, round(dt, 2), code, flush=True)
