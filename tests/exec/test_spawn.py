"""The one child-process lifecycle (saguaro_exec.spawn), with real processes and real signals: a draft that
fails at start-up on bad input gives SD's clean ConfigError (exit 2 on the CLI); a draft killed or stopped
before it connects is a start-up fault the fallback finishes losslessly; a stopped draft dies with a killed
verifier; a stopped tensor-parallel worker (or link benchmark worker) fails the run with a clear error
instead of hanging it; an interrupt during clean-up still removes the temp folder. Every wait here is
bounded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from exec_helpers import plain_greedy, tiny_models
from test_exec_processes import alive, children, wait_gone

from calibration.errors import ConfigError
from calibration.interrupts import deferred, first_signal_wins
from saguaro import cli
from saguaro_exec import RunConfig, run
from saguaro_exec.faults import RunError
from saguaro_exec.io.assets import tiny_pair_paths
from saguaro_exec.measure.microbench import profile_link
from saguaro_exec.spawn import Supervisor, join
from saguaro_exec.speculator.links import DraftProcessError
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models(context=1 << 18)   # long runs (max_new_tokens=100000) stay within it
REPO = Path(__file__).resolve().parents[2]
DRAFT_ROLE = b"speculator.process:serve"
TP_ROLE = b"tp.worker:serve"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class Signaller:
    """Sends ``sig`` to this process's first child whose command line holds ``role``, as soon as it appears
    (or once ``ready(pid)`` holds); ``pid`` is the child it hit."""

    def __init__(self, role: bytes, sig: int, ready=lambda pid: True, parent: int | None = None) -> None:
        self.role, self.sig, self.ready, self.parent = role, sig, ready, parent or os.getpid()
        self.pid: int | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        end = time.time() + 120
        while not self._done.is_set() and time.time() < end:
            for c in children(self.parent):
                if self.role in _cmdline(c) and self.ready(c):
                    os.kill(c, self.sig)
                    self.pid = c
                    return
            time.sleep(0.005)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


@pytest.fixture
def tmpdir_for_children(tmp_path, monkeypatch):
    """This process's temp folders (the supervisors' ``saguaro-*``) go under a fresh folder."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def _bad_draft(tmp_path: Path, how: str) -> Path:
    d = tmp_path / f"draft-{how}"
    shutil.copytree(tiny_pair_paths()[1], d)
    if how == "truncated":
        with open(d / "model.safetensors", "r+b") as f:
            f.truncate(1000)
    else:                                                     # weights that do not fit its config.json
        cfg = json.loads((d / "config.json").read_text())
        cfg["intermediate_size"] *= 2
        (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("how", ["truncated", "mismatched"])
def test_bad_draft_checkpoint_at_start_up_is_sds_config_error(tmp_path, tmpdir_for_children, how):
    draft = _bad_draft(tmp_path, how)
    before = children(os.getpid())
    errors = {}
    for mode in ("sd", "ssd"):
        with pytest.raises(ConfigError) as e:
            run(RunConfig(spec=SpecConfig(mode=mode, k=2), draft=str(draft), prompts=["ab"], max_new_tokens=4,
                          draft_timeout_s=60.0))
        errors[mode] = str(e.value)
    assert errors["ssd"] == errors["sd"] and "checkpoint" in errors["sd"]
    assert children(os.getpid()) <= before
    assert list(tmpdir_for_children.iterdir()) == []          # the draft's temp folder is gone


def test_bad_draft_checkpoint_on_the_cli_exits_2_in_one_line(tmp_path, capsys):
    draft, out = _bad_draft(tmp_path, "truncated"), tmp_path / "out"
    code = cli.main(["run", "--mode", "ssd", "--k", "2", "--draft", str(draft), "--prompt", "ab",
                     "--max-new-tokens", "4", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "truncated" in err
    assert not out.exists()


SPEC = SpecConfig(mode="ssd", k=2, batch_size=2, fanout=(2, 1, 1))
PROMPTS = [[1, 2], [3], [4, 5, 6]]


@pytest.mark.parametrize("sig, fallback, kind", [(signal.SIGKILL, "sd", "died"), (signal.SIGSTOP, "ar", "timeout")])
def test_draft_killed_or_stopped_before_connecting_is_a_fault_the_fallback_covers(tmpdir_for_children, sig,
                                                                                  fallback, kind):
    before = children(os.getpid())
    hit = Signaller(DRAFT_ROLE, sig)                        # lands during the child's interpreter start-up
    t0 = time.monotonic()
    try:
        rep = run(RunConfig(spec=SPEC, target=TARGET, draft=DRAFT, prompts=PROMPTS, max_new_tokens=12,
                            draft_timeout_s=1.0, fallback=fallback))
    finally:
        hit.stop()
    assert hit.pid is not None and not alive(hit.pid)
    assert time.monotonic() - t0 < 60
    assert rep.token_ids == [plain_greedy(TARGET, p, 12) for p in PROMPTS]           # lossless
    [f] = rep.faults
    assert (f["kind"], f["batch"], f["round"], f["fallback"]) == (kind, 0, 0, fallback)
    assert "at start-up" in f["detail"]
    if sig == signal.SIGSTOP:
        assert "stopped (SIGSTOP)" in f["detail"] and f["waited_s"] < 30
    assert children(os.getpid()) <= before
    assert list(tmpdir_for_children.iterdir()) == []


def test_draft_stopped_at_start_up_without_fallback_is_a_clear_error():
    hit = Signaller(DRAFT_ROLE, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        with pytest.raises(DraftProcessError, match=r"stopped \(SIGSTOP\) for 1\.\d s, killed"):
            run(RunConfig(spec=SPEC, target=TARGET, draft=DRAFT, prompts=PROMPTS, max_new_tokens=4,
                          draft_timeout_s=1.0, fallback="none"))
    finally:
        hit.stop()
    assert time.monotonic() - t0 < 60 and not alive(hit.pid)


VERIFIER = textwrap.dedent("""
    import sys
    sys.path[:0] = [{repo!r}, {tests!r}]
    from exec_helpers import tiny_models
    from saguaro_exec import RunConfig, run
    from saguaro_sim import SpecConfig
    t, d = tiny_models(context=1 << 18)
    run(RunConfig(spec=SpecConfig(mode="ssd", k=2, fanout=(2, 1, 1)), target=t, draft=d,
                  prompts=[[1, 2, 3]], max_new_tokens=100000, draft_timeout_s=60.0))
""")


def test_draft_stopped_at_spawn_dies_with_a_killed_verifier():
    proc = subprocess.Popen([sys.executable, "-c", VERIFIER.format(repo=str(REPO), tests=str(REPO / "tests" / "exec"))],
                            stderr=subprocess.PIPE)
    hit = Signaller(DRAFT_ROLE, signal.SIGSTOP, parent=proc.pid)
    try:
        end = time.time() + 60
        while hit.pid is None and time.time() < end:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.01)
        assert hit.pid is not None, "the draft process never started"
        time.sleep(0.3)
        assert alive(hit.pid)                                   # stopped, not gone
        proc.kill()
        proc.wait(timeout=20)
        assert wait_gone(hit.pid, 10), f"stopped draft {hit.pid} outlived its killed verifier"
    finally:
        hit.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if hit.pid is not None and alive(hit.pid):
            os.kill(hit.pid, signal.SIGKILL)
        proc.stderr.close()


def _tp_loaded(pid: int) -> bool:
    """The worker's ranks all loaded their shards (rank 0 then removes the args file)."""
    parts = _cmdline(pid).split(b"\0")
    return len(parts) > 7 and not (Path(parts[7].decode()) / "args").exists()


@pytest.mark.parametrize("when", ["start-up", "decoding"])
def test_stopped_tp_worker_fails_the_run_clearly_instead_of_hanging(monkeypatch, tmpdir_for_children, when):
    monkeypatch.setattr("saguaro_exec.tp.target.STALL_S", 1.0)
    before = children(os.getpid())
    ready = (lambda pid: True) if when == "start-up" else _tp_loaded
    hit = Signaller(TP_ROLE, signal.SIGSTOP, ready)
    t0 = time.monotonic()
    try:
        with pytest.raises(RunError, match=r"tensor-parallel worker 1 failed \(stopped \(SIGSTOP\) for 1\.\d s, killed"):
            run(RunConfig(spec=SpecConfig(mode="ar"), target=TARGET, prompts=[[1, 2, 3]], max_new_tokens=100000,
                          target_devices=["cpu", "cpu"]))
    finally:
        hit.stop()
    assert time.monotonic() - t0 < 90
    assert hit.pid is not None and not alive(hit.pid)
    assert children(os.getpid()) <= before
    assert list(tmpdir_for_children.iterdir()) == []


def test_stopped_link_benchmark_worker_fails_the_benchmark_and_is_gone(tmpdir_for_children):
    hit = Signaller(b"microbench:link_echo", signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"link benchmark worker failed \(stopped \(SIGSTOP\)"):
            profile_link(sizes=(64,), warmup=1, repeats=5, stall_s=1.0)
    finally:
        hit.stop()
    assert time.monotonic() - t0 < 60 and not alive(hit.pid)
    assert list(tmpdir_for_children.iterdir()) == []


def sleeper(rank: int, port: int, workdir: str) -> None:
    """A child role that connects, then never exits on its own (spawn target of the tests below)."""
    join(port, 2, rank, 60.0)
    time.sleep(600)


def test_interrupt_while_closing_still_kills_and_cleans_up(tmpdir_for_children):
    sup = Supervisor("test child", "saguaro-test-", "test_spawn:sleeper", 2, 60.0, 60.0)
    sup.spawn(lambda path: Path(path).write_text("{}"))
    sup.wait_for("up", "connect")
    [p] = sup.procs
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sup.close(grace_s=30.0)                                  # the child ignores the grace period
    assert time.monotonic() - t0 < 10
    assert p.poll() is not None
    assert list(tmpdir_for_children.iterdir()) == []


def test_signals_during_clean_up_wait_until_it_is_done():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with deferred():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)                  # a second one: held, not lost in between
            time.sleep(0.2)
            done.append(True)
    assert done == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_first_signal_wins_and_a_second_one_does_not_cut_the_clean_up_short():
    seen = []
    with first_signal_wins():
        try:
            os.kill(os.getpid(), signal.SIGTERM)                   # unwinds like Ctrl-C
            time.sleep(0.5)
        except KeyboardInterrupt as e:
            seen.append(e.args)
            os.kill(os.getpid(), signal.SIGINT)                    # during the clean-up: dropped
            time.sleep(0.2)
            seen.append("cleaned up")
    assert seen == [("SIGTERM",), "cleaned up"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
