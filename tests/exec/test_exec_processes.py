"""The SSD draft process never outlives its run: normal end, an exception in the draft, an interrupt
(SIGINT) of the verifier, and a SIGKILL of the verifier (the draft dies with its parent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from exec_helpers import handoff_held, tiny_models

from saguaro_exec import RunConfig, run
from saguaro_exec.model import Transformer
from saguaro_exec.speculator.links import DraftProcessError
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
REPO = Path(__file__).resolve().parents[2]


def children(pid: int) -> set[int]:
    """Live child processes of ``pid`` (from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.add(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


class FailingDraft(Transformer):
    """A draft that raises on its 4th forward (mid-run, inside the draft process)."""

    calls = 0

    def forward(self, *args, **kwargs):
        FailingDraft.calls += 1
        if FailingDraft.calls >= 4:
            raise RuntimeError("deliberate draft failure")
        return super().forward(*args, **kwargs)


def _spec() -> SpecConfig:
    return SpecConfig(mode="ssd", k=2, batch_size=2, fanout=(2, 1, 1))


@pytest.mark.parametrize("transport", ["shm", "gloo"])
def test_no_orphan_after_normal_run(transport):
    before = children(os.getpid())
    rep = run(RunConfig(spec=_spec(), target=TARGET, draft=DRAFT, prompts=[[1, 2], [3]], max_new_tokens=8,
                        transport=transport))
    pid = rep.measurements.meta["draft_pid"]
    assert pid is not None and not alive(pid)
    assert children(os.getpid()) <= before
    assert rep.measurements.meta["transport"] == transport and not handoff_held()


@pytest.mark.parametrize("transport", ["shm", "gloo"])
def test_draft_exception_is_reported_and_process_is_gone(transport):
    before = children(os.getpid())
    failing = FailingDraft(DRAFT.config)
    failing.load_state_dict(DRAFT.state_dict())
    with pytest.raises(DraftProcessError, match="deliberate draft failure"):
        run(RunConfig(spec=_spec(), target=TARGET, draft=failing, prompts=[[1, 2], [3]], max_new_tokens=50,
                      transport=transport))
    assert children(os.getpid()) <= before
    assert not handoff_held()


SCRIPT = textwrap.dedent("""
    import sys
    sys.path[:0] = [{repo!r}, {tests!r}]
    from exec_helpers import handoff_held, tiny_models
    from saguaro_exec import RunConfig, run
    from saguaro_sim import SpecConfig
    t, d = tiny_models(context=1 << 18)
    run(RunConfig(spec=SpecConfig(mode="ssd", k=2, fanout=(2, 1, 1)), target=t, draft=d,
                  prompts=[[1, 2, 3]], max_new_tokens=100000, transport={transport!r}))
""")


def _start_long_run(transport: str = "auto") -> tuple[subprocess.Popen, int]:
    code = SCRIPT.format(repo=str(REPO), tests=str(REPO / "tests" / "exec"), transport=transport)
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE)
    end = time.time() + 60
    while time.time() < end:
        kids = [c for c in children(proc.pid) if b"speculator.process:serve" in Path(f"/proc/{c}/cmdline").read_bytes()]
        if kids:
            time.sleep(1.5)                                  # let it get into the decoding rounds
            return proc, kids[0]
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("draft process never started")


@pytest.mark.parametrize("transport", ["shm", "gloo"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_no_orphan_after_interrupt_or_kill(sig, transport):
    proc, draft_pid = _start_long_run(transport)
    try:
        assert alive(draft_pid)
        proc.send_signal(sig)
        proc.wait(timeout=20)
        assert wait_gone(draft_pid), f"draft process {draft_pid} outlived its verifier ({sig.name})"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
