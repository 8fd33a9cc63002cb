"""An interrupt at any point of `python -m saguaro run`, from the moment saguaro's code runs (the heavy imports
included: calibration/scipy, then torch, where an interrupt half-way used to abort with SIGABRT, fail with
"cannot load module more than once", or be swallowed) exits 130 (143 for SIGTERM) with one line on stderr, or
0 when the run had already finished; never a traceback, never "Aborted", never a status of -2 / -6.

Delays are counted from the moment saguaro's code holds the signals (its first line blocks SIGINT/SIGTERM;
seen in /proc/PID/status), so the interpreter's own start-up, which no program can guard, is not timed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SIGINT_BIT, SIGTERM_BIT = 1 << (signal.SIGINT - 1), 1 << (signal.SIGTERM - 1)
DELAYS_S = (0.0, 0.1, 0.25, 0.5, 0.8, 1.2, 1.7, 2.5)   # covers the import window (torch loads in ~0.3-1.5 s)


def _mask(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def _saguaro_holds_signals(pid: int) -> bool:
    """saguaro's code runs: the signals are blocked (before the policy) or caught (SIGTERM: the policy)."""
    return bool(_mask(pid, "SigBlk") & SIGINT_BIT or _mask(pid, "SigCgt") & SIGTERM_BIT)


def _processes_under(folder: Path) -> list[int]:
    """Live processes whose command line names ``folder`` (a run's children carry their temp folder in it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(folder).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _interrupt_at(tmp_path: Path, delay_s: float, sig: int) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "saguaro", "run", "--max-new-tokens", "4", "--prompt", "x"],
                            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 60
        while not _saguaro_holds_signals(proc.pid) and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.001)
        assert proc.poll() is None and time.monotonic() < end, "saguaro never took over the signals"
        time.sleep(delay_s)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err.decode()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_anywhere_in_start_up_exits_cleanly_in_one_line(tmp_path, sig, code):
    delays = DELAYS_S if sig == signal.SIGINT else DELAYS_S[1::3]
    seen = []
    for delay in delays:
        rc, err = _interrupt_at(tmp_path, delay, sig)
        seen.append((delay, rc))
        assert rc in (code, 0), f"after {delay} s: status {rc}\n{err}"
        assert "Traceback" not in err and "Aborted" not in err and "Fatal" not in err, err
        if rc == code:
            assert err in ("saguaro: interrupted\n", "saguaro run: interrupted\n"), err
        assert list(tmp_path.iterdir()) == []                 # no draft temp folder, no output
        assert _processes_under(tmp_path) == []               # no draft process left behind
    assert any(rc == code for _, rc in seen), seen             # the interrupts did land during the run
