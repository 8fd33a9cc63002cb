"""Helpers shared by the per-class bad-input tests (tests/*/test_*_class.py): run a command in-process or
as a real subprocess, and assert the promise: exit 2, one line on stderr naming the field, nothing written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from saguaro import cli
from saguaro_exec.io.assets import TINY_DIR

ROOT = Path(__file__).resolve().parents[2]


def inproc(capsys, argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stderr, stdout) of `saguaro argv` in this process."""
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as e:                       # argparse errors
        code = e.code
    cap = capsys.readouterr()
    return code, cap.err, cap.out


def subproc(argv: list[str], cwd: Path, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    """`python -m saguaro argv` as a real process (this worktree's code)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "saguaro", *map(str, argv)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout, **kw)


def assert_clean_error(code: int, err: str, needle: str, status: int = 2) -> None:
    """Exit ``status``, exactly one line on stderr, naming ``needle``, no traceback."""
    assert code == status, err
    assert needle in err, err
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def tiny_copy(dst: Path, which: str = "target") -> Path:
    """A private copy of a shipped tiny checkpoint (to corrupt one file of it)."""
    shutil.copytree(TINY_DIR / which, dst)
    return dst


def leftovers(folder: Path) -> list[str]:
    """Entries saguaro stages (hidden .NAME.tmp-* / .NAME.old-* / *.tmp) still present under folder."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if ".tmp" in p.name or ".old-" in p.name)
