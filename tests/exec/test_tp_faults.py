"""A tensor-parallel worker that dies (SIGKILL) or stops (SIGSTOP) in the middle of `saguaro run`, for real:
the run fails within a bounded time with one line on stderr and exit 1 (a failed run, README), the other
processes are gone, no --out folder (nor a staged one) and no temp folder is left. In AR and in SSD (a draft
process beside the workers)."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import pytest
from test_exec_processes import alive, children
from test_exec_tp import TARGET
from test_spawn import TP_ROLE, Signaller, _tp_loaded, tmpdir_for_children  # noqa: F401 (a fixture)

from saguaro import cli
from saguaro_exec import RunConfig, run
from saguaro_exec.faults import RunError
from saguaro_exec.tp.target import FAULT_ENV
from saguaro_sim import SpecConfig

pytestmark = pytest.mark.usefixtures("tmpdir_for_children")   # children's temp folders: a fresh one


@pytest.mark.parametrize("sig, mode", [(signal.SIGKILL, "ar"), (signal.SIGKILL, "ssd"), (signal.SIGSTOP, "ar")])
def test_dead_or_stopped_tp_worker_fails_the_cli_run_in_one_line(monkeypatch, capsys, tmp_path, sig, mode):
    monkeypatch.setattr("saguaro_exec.tp.target.STALL_S", 1.0)
    monkeypatch.setattr("saguaro_exec.tp.protocol.RANK0_OP_S", 5.0)   # gloo can miss the death: bounded then
    before = children(os.getpid())
    out = tmp_path / "out"
    hit = Signaller(TP_ROLE, sig, _tp_loaded)                  # once every rank has loaded: mid-decoding
    t0 = time.monotonic()
    try:
        code = cli.main(["run", "--mode", mode, "--k", "2", "--target-devices", "cpu,cpu", "--prompt", "def f(x):",
                         "--max-new-tokens", "1000", "--out", str(out)])
    finally:
        hit.stop()
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 120
    assert hit.pid is not None and not alive(hit.pid)
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    how = "killed by signal 9" if sig == signal.SIGKILL else "stopped (SIGSTOP) for 1."
    assert err.startswith("saguaro run: failed: tensor-parallel worker 1 failed") and how in err, err
    assert children(os.getpid()) <= before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]     # no out/, no staged .out.tmp-*
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_hung_tp_worker_fails_the_run_within_rank_0s_op_bound(monkeypatch):
    """A worker that stays alive but never answers (deadlocked: not stopped, so the watchdog leaves it)
    fails the run once rank 0's collective passes RANK0_OP_S, naming the cause, instead of waiting out
    the group's 600 s timeout; the hung worker is killed."""
    monkeypatch.setattr("saguaro_exec.tp.protocol.RANK0_OP_S", 2.0)
    monkeypatch.setenv(FAULT_ENV, "hang:3")                 # rank 1 stops answering at its 4th forward
    before = children(os.getpid())
    t0 = time.monotonic()
    with pytest.raises(RunError, match=r"tensor-parallel workers failed \(no answer within 2 s; rank 0 saw: .*Timed out"):
        run(RunConfig(spec=SpecConfig(mode="ar"), target=TARGET, prompts=[[1, 2, 3]], max_new_tokens=50,
                      target_devices=["cpu", "cpu"]))
    assert time.monotonic() - t0 < 60
    assert children(os.getpid()) <= before
    assert list(Path(tempfile.gettempdir()).iterdir()) == []
