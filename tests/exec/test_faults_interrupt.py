"""Interrupting `saguaro run --out DIR` (SIGINT, SIGTERM, or one then the other) mid-generation stops the
verifier and its draft process, leaves no DIR, no staged folder and no temp files, exits with the first
signal's status, and a second run starts cleanly right after."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_exec_processes import children, wait_gone

REPO = Path(__file__).resolve().parents[2]


def _saguaro(args: list[str], tmp: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)}
    return subprocess.Popen([sys.executable, "-m", "saguaro", "run", *args], env=env, cwd=tmp.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _draft_of(proc: subprocess.Popen, timeout: float = 60.0) -> int:
    end = time.time() + timeout
    while time.time() < end:
        for c in children(proc.pid):
            try:
                if b"speculator.process:serve" in Path(f"/proc/{c}/cmdline").read_bytes():
                    return c
            except OSError:
                continue
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.05)
    raise AssertionError("draft process never started")


def _interrupt_long_run(tmp_path: Path, signals: list[int], code: int) -> Path:
    """Start a long `saguaro run --out`, send ``signals`` (0.1 s apart) well into its decoding rounds, and
    check the exit status and that the draft process is gone; returns the TMPDIR it ran with."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out"
    long_run = ["--max-new-tokens", "1000"] + ["--prompt", "def f(x):"] * 16   # within the tiny pair's context
    proc = _saguaro(["--k", "2", *long_run, "--out", str(out)], tmp)
    try:
        draft = _draft_of(proc)
        time.sleep(1.5)                                          # well into the decoding rounds
        assert any(p.name.startswith("saguaro-draft-") for p in tmp.iterdir())
        for i, sig in enumerate(signals):
            time.sleep(0.1 if i else 0.0)
            proc.send_signal(sig)
        assert proc.wait(timeout=20) == code, proc.stderr.read().decode()
        assert wait_gone(draft, 10), f"draft {draft} outlived its verifier ({signals})"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]         # no staged .out.tmp-* folder
    assert list(tmp.iterdir()) == []                                    # no draft temp folder
    return tmp


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_leaves_nothing_and_next_run_is_clean(tmp_path, sig, code):
    tmp = _interrupt_long_run(tmp_path, [sig], code)
    if sig != signal.SIGTERM:
        return
    out = tmp_path / "out"
    second = _saguaro(["--k", "2", "--max-new-tokens", "4", "--prompt", "x", "--out", str(out)], tmp)
    stdout, stderr = second.communicate(timeout=60)
    assert second.returncode == 0, stderr.decode()
    report = json.loads((out / "report.json").read_text())
    assert report["tokens"] == 4 and report["faults"] == []
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("first, second, code", [(signal.SIGINT, signal.SIGTERM, 130),
                                                 (signal.SIGTERM, signal.SIGINT, 143)])
def test_second_signal_during_clean_up_keeps_the_first_ones_status(tmp_path, first, second, code):
    """The first signal decides the exit status; a second one while the run cleans up (or the interpreter
    exits) neither cuts the clean-up short nor changes the status."""
    _interrupt_long_run(tmp_path, [first, second], code)
