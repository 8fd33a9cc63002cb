"""bench/warm_host.py: the settle rule, and a real short warm-up that leaves no burner process behind."""

import subprocess
import sys
from pathlib import Path

from bench.warm_host import settled

ROOT = Path(__file__).resolve().parents[2]


def test_settled_needs_two_windows_within_tolerance():
    assert not settled([1.0], 0.03)
    assert not settled([1.4, 1.0], 0.03)          # still speeding up
    assert settled([1.4, 1.02, 1.0], 0.03)
    assert not settled([1.0, 1.1], 0.03)


def test_short_warm_up_settles_and_kills_its_burner():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "warm_host.py"), "--window", "0.5", "--min", "1",
                          "--max", "6", "--tol", "0.5"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "settled after" in out.stdout
    left = subprocess.run(["pgrep", "-f", "torch.tanh"], capture_output=True, text=True)
    assert left.stdout.strip() == ""
