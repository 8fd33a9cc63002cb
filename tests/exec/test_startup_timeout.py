"""Child start-up has its own bound (RunConfig.start_timeout_s, `--start-timeout-s`): a draft that is alive but
hung before it connects, or stopped at spawn while the stall limit is long, is killed once the start-up timeout
has passed; with a fallback the run then finishes in-process with the fault-free output, without one it fails
in one line (exit 1 on the CLI). The same bound holds for tensor-parallel workers and for any Supervisor child.
Real processes, real sleeps and signals; no process and no temp folder is left."""

from __future__ import annotations

import math
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest
from exec_helpers import plain_greedy, tiny_models
from test_exec_processes import alive, children
from test_spawn import DRAFT_ROLE, TP_ROLE, Signaller, tmpdir_for_children  # noqa: F401 (a fixture)

from calibration.errors import ConfigError
from saguaro import cli
from saguaro_exec import RunConfig, run
from saguaro_exec.config import START_BASE_S, start_timeout
from saguaro_exec.faults import RunError
from saguaro_exec.io.assets import tiny_pair_paths
from saguaro_exec.spawn import ChildFailed, Supervisor
from saguaro_exec.speculator.links import DraftProcessError
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
SPEC = SpecConfig(mode="ssd", k=2, batch_size=2, fanout=(2, 1, 1))
PROMPTS = [[1, 2], [3], [4, 5, 6]]
START_S = 2.0
pytestmark = pytest.mark.usefixtures("tmpdir_for_children")   # children's temp folders: a fresh one


def _ssd(**kw) -> RunConfig:
    return RunConfig(**{**dict(spec=SPEC, target=TARGET, draft=DRAFT, prompts=PROMPTS, max_new_tokens=12,
                               start_timeout_s=START_S), **kw})


def _assert_start_timeout_fault(rep, fallback: str) -> None:
    assert rep.token_ids == [plain_greedy(TARGET, p, 12) for p in PROMPTS]          # lossless
    [f] = rep.faults
    assert (f["kind"], f["batch"], f["round"], f["fallback"]) == ("timeout", 0, 0, fallback)
    assert f"start-up timeout of {START_S:g} s" in f["detail"] and START_S <= f["waited_s"] < START_S + 10


def test_draft_hung_before_connecting_is_killed_after_the_start_up_timeout():
    before = children(os.getpid())
    t0 = time.monotonic()
    rep = run(_ssd(inject_fault="sleep=600@start", fallback="sd"))        # alive, never connects
    assert time.monotonic() - t0 < 60                                     # not timeout_s = 600
    _assert_start_timeout_fault(rep, "sd")
    assert not alive(rep.measurements.meta["draft_pid"])
    assert children(os.getpid()) <= before
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_draft_stopped_at_spawn_is_killed_by_the_start_up_timeout_when_the_stall_limit_is_longer():
    before = children(os.getpid())
    hit = Signaller(DRAFT_ROLE, signal.SIGSTOP)                # lands during the child's interpreter start-up
    try:
        rep = run(_ssd(draft_timeout_s=300.0, fallback="ar"))
    finally:
        hit.stop()
    assert hit.pid is not None and not alive(hit.pid)           # SIGKILL reaches a stopped process
    _assert_start_timeout_fault(rep, "ar")
    assert children(os.getpid()) <= before
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_hung_draft_without_fallback_fails_in_one_line_on_the_cli(tmp_path, capsys):
    cfg, out = tmp_path / "run.toml", tmp_path / "out"
    cfg.write_text('inject_fault = "sleep=600@start"\n[spec]\nmode = "ssd"\nk = 2\n')
    before = children(os.getpid())
    t0 = time.monotonic()
    code = cli.main(["run", "--config", str(cfg), "--start-timeout-s", str(START_S), "--fallback", "none",
                     "--prompt", "ab", "--max-new-tokens", "4", "--out", str(out)])
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 60
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "draft process timeout: at start-up: did not connect within the start-up timeout of 2 s" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.toml", "tmp"]      # no out/, nothing staged
    assert children(os.getpid()) <= before
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_draft_hung_at_start_up_without_fallback_raises():
    with pytest.raises(DraftProcessError, match="start-up timeout of 2 s"):
        run(_ssd(inject_fault="sleep=600@start", fallback="none"))


def test_tp_worker_stopped_at_spawn_fails_the_run_at_the_start_up_timeout(monkeypatch):
    monkeypatch.setattr("saguaro_exec.tp.target.STALL_S", 300.0)   # only the start-up timeout can end it
    before = children(os.getpid())
    hit = Signaller(TP_ROLE, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        with pytest.raises(RunError, match=r"tensor-parallel workers failed \(did not connect within the "
                                           r"start-up timeout of 2 s"):
            run(RunConfig(spec=SpecConfig(mode="ar"), target=TARGET, prompts=[[1, 2, 3]], max_new_tokens=8,
                          target_devices=["cpu", "cpu"], start_timeout_s=START_S))
    finally:
        hit.stop()
    assert time.monotonic() - t0 < 60
    assert hit.pid is not None and not alive(hit.pid)
    assert children(os.getpid()) <= before
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def never_connects(rank: int, port: int, workdir: str) -> None:
    """A child role hung before it connects (spawn target of the test below)."""
    time.sleep(600)


def test_supervisor_start_up_timeout_counts_from_the_spawn():
    sup = Supervisor("test child", "saguaro-test-", "test_startup_timeout:never_connects", 2, 600.0, 600.0, 1.5)
    sup.spawn(lambda path: Path(path).write_text("{}"))
    [p] = sup.procs
    t0 = time.monotonic()
    try:
        with pytest.raises(ChildFailed, match="did not connect within the start-up timeout of 1.5 s"):
            sup.wait_for("up", "connect")
        assert 1.0 < time.monotonic() - t0 < 10
        assert p.poll() is None                                  # still hung: the owner's abort kills it
    finally:
        sup.abort()
    assert p.poll() == -signal.SIGKILL
    assert list(Path(tempfile.gettempdir()).iterdir()) == []


def test_default_start_up_timeout_grows_with_the_weights_and_never_exceeds_timeout_s():
    _, tiny_draft = tiny_pair_paths()
    size = sum(f.stat().st_size for f in Path(tiny_draft).glob("*.safetensors"))
    assert start_timeout(RunConfig(), str(tiny_draft)) == pytest.approx(START_BASE_S + 20.0 * size / 1e9)
    big = tiny_models(vocab=4096)[0]                          # in memory: its parameters' bytes
    assert start_timeout(RunConfig(), big) > start_timeout(RunConfig(), DRAFT) > START_BASE_S
    assert start_timeout(RunConfig(start_timeout_s=7.5), DRAFT) == 7.5
    assert start_timeout(RunConfig(start_timeout_s=900.0, timeout_s=30.0), DRAFT) == 30.0
    assert start_timeout(RunConfig(timeout_s=30.0), DRAFT) == 30.0


@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, "5", True])
def test_bad_start_timeout_is_a_config_error_naming_the_field(value):
    with pytest.raises(ConfigError, match="start_timeout_s"):
        RunConfig(start_timeout_s=value)


def test_bad_start_timeout_flag_exits_2_naming_the_flag(tmp_path, capsys):
    code = cli.main(["run", "--start-timeout-s", "0", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "--start-timeout-s" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_garble_at_start_up_is_refused():
    with pytest.raises(ConfigError, match="inject_fault"):
        _ssd(inject_fault="garble@start")
