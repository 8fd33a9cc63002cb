"""The shared-memory hand-off between two real processes: intact in-order messages, timeouts, a dead or
closed peer detected while waiting, and no shared memory left behind (no mapping or
descriptor after close) whatever way either side ends. The channel is an anonymous memfd: it never
appears in /dev/shm, and the kernel frees it with the last mapping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import torch

from saguaro_exec.speculator.shm import (
    BadMessage,
    ChannelTimeout,
    PeerGone,
    ShmChannel,
    WaitPolicy,
    supported,
)
from saguaro_exec.speculator.shm_group import ShmGroup

pytestmark = pytest.mark.skipif(not supported(), reason="shared-memory hand-off needs Linux x86-64")

# The peer: attaches to the inherited descriptor argv[1], then acts out argv[2]. "echo": send every
# message back (+1) until the owner closes (or dies: then it writes argv[4]); "silent": never answer;
# "kill": SIGKILL itself after attaching; "raise": raise inside the channel's with-block; "own": be an
# owner itself, start an echo peer, print its pid and sleep (to be SIGKILLed).
PEER = r"""
import os, signal, subprocess, sys, time, torch
from saguaro_exec.speculator.shm import ShmChannel, PeerGone, WaitPolicy
from saguaro_exec.speculator.shm_group import ShmGroup
mode = sys.argv[2]
if mode == "own":
    ch = ShmChannel.create((64, 64))
    peer = subprocess.Popen([sys.executable, "-c", __PEER__, str(ch.fd), "echo", "yield", sys.argv[4]],
                            pass_fds=(ch.fd,))
    ch.recv_into(torch.zeros(1, dtype=torch.long), 9, timeout_s=60)
    print(peer.pid, flush=True)
    time.sleep(60)
parent = os.getppid()
ch = ShmChannel.attach(int(sys.argv[1]), alive=lambda: os.getppid() == parent, wait=WaitPolicy(backoff=sys.argv[3]))
ch.send(torch.tensor([os.getpid()]), 9)
if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "silent":
    time.sleep(60)
with ch:
    if mode == "raise":
        raise RuntimeError("boom")
    g = ShmGroup(ch, timeout_s=30)
    try:
        while True:
            ch.await_message(30)
            tag, n = ch.peek()
            t = torch.empty(n // 8, dtype=torch.float64) if tag == 1 else torch.empty(n // 8, dtype=torch.long)
            g.recv([t], 0, tag).wait()
            g.send([t + 1], 0, tag).wait()
    except PeerGone as e:
        if "died" in str(e) and len(sys.argv) > 4:
            open(sys.argv[4], "w").write(str(e))
        sys.exit(0)
"""
PEER = PEER.replace("__PEER__", repr(PEER))


def _held(pid: int | str = "self") -> bool:
    """Whether a process still maps or holds a hand-off channel."""
    fds = [os.readlink(f"/proc/{pid}/fd/{f}") for f in os.listdir(f"/proc/{pid}/fd") if f.isdigit()
           and os.path.exists(f"/proc/{pid}/fd/{f}")]
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    return any("saguaro-handoff" in x for x in fds) or "saguaro-handoff" in maps


def _start(ch: ShmChannel, mode: str, backoff: str = "yield") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", PEER, str(ch.fd), mode, backoff], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=(ch.fd,))
    ch.alive = lambda: proc.poll() is None
    return proc


def _attached(ch: ShmChannel, proc: subprocess.Popen) -> None:
    pid = ch.recv_into(torch.zeros(1, dtype=torch.long), 9, timeout_s=60)
    assert int(pid) == proc.pid
    ch.release_fd()                    # the peer has its own copy


def _message(i: int) -> tuple[torch.Tensor, int]:
    g = torch.Generator().manual_seed(i)
    if i % 2:
        return torch.randn(1 + i % 7, 3, generator=g, dtype=torch.float64), 1
    return torch.randint(-2**62, 2**62, (1 + i % 5, 4), generator=g), 0


@pytest.mark.parametrize("backoff", ["spin", "yield", "sleep"])
def test_messages_arrive_intact_and_in_order(backoff):
    """300 messages (two dtypes, varying sizes) through a 2-slot ring, two in flight: every echo is
    exactly the message + 1, in order; the peer ends cleanly when the owner closes."""
    with ShmChannel.create((512, 512), slots=2, wait=WaitPolicy(backoff=backoff)) as ch:
        proc = _start(ch, "echo", backoff)
        _attached(ch, proc)
        g = ShmGroup(ch, timeout_s=30)
        sent = []
        for i in range(300):
            m, tag = _message(i)
            sent.append((m, tag))
            g.send([m], 1, tag)
            if i >= 1:
                prev, ptag = sent[i - 1]
                back = torch.empty_like(prev)
                g.recv([back], 1, ptag).wait()
                assert torch.equal(back, prev + 1), i
        last, ltag = sent[-1]
        back = torch.empty_like(last)
        g.recv([back], 1, ltag).wait()
        assert torch.equal(back, last + 1)
    assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()


def test_posted_receives_match_by_tag():
    """Receives posted in one order and waited in another get the message with their tag (gloo's rule)."""
    with ShmChannel.create((64, 64)) as a, ShmChannel.attach(os.dup(a.fd)) as b:
        ga, gb = ShmGroup(a, 5), ShmGroup(b, 5)
        ga.send([torch.tensor([1])], 1, 7)
        ga.send([torch.tensor([2.5], dtype=torch.float64)], 1, 8)
        x, y = torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.float64)
        wx, wy = gb.recv([x], 0, 7), gb.recv([y], 0, 8)
        wy.wait(timedelta(seconds=5))
        assert float(y) == 2.5 and int(x) == 1       # waiting for y delivered x on the way
        wx.wait()


def test_a_shared_memory_send_leaves_the_link_nothing_to_wait_for():
    """The message is copied by the time ``send`` returns, so a link keeps no work to wait on before its
    next outcome (``links._pending``: None); a gloo work handle is kept."""
    from saguaro_exec.speculator.links import _pending
    from saguaro_exec.speculator.shm_group import SENT

    with ShmChannel.create((64, 64)) as a, ShmChannel.attach(os.dup(a.fd)) as b:
        work = ShmGroup(a, 5).send([torch.tensor([3])], 1, 7)
        assert work is SENT and _pending(work) is None
        x = torch.zeros(1, dtype=torch.long)
        ShmGroup(b, 5).recv([x], 0, 7).wait()
        assert int(x) == 3                              # the bytes were there without waiting on the send
    other = object()
    assert _pending(other) is other


def test_bad_messages_raise():
    with ShmChannel.create((32, 32)) as a, ShmChannel.attach(os.dup(a.fd)) as b:
        with pytest.raises(BadMessage, match="exceeds"):
            a.send(torch.zeros(5, dtype=torch.long), 0)
        a.send(torch.zeros(2, dtype=torch.long), 3)
        with pytest.raises(BadMessage, match="expected tag 4"):
            b.recv_into(torch.zeros(2, dtype=torch.long), 4, timeout_s=1)
        with pytest.raises(BadMessage, match="no receive was posted"):
            ShmGroup(b, 1).recv([torch.zeros(2, dtype=torch.long)], 0, 5).wait()
        with pytest.raises(BadMessage, match="8 bytes"):
            b.recv_into(torch.zeros(1, dtype=torch.long), 3, timeout_s=1)


def test_timeout_raises():
    """A silent peer: the wait ends at its deadline with "Timed out" (as gloo says it)."""
    with ShmChannel.create((64, 64)) as ch:
        proc = _start(ch, "silent")
        try:
            _attached(ch, proc)
            t0 = time.perf_counter()
            with pytest.raises(ChannelTimeout, match="Timed out"):
                ch.recv_into(torch.zeros(1, dtype=torch.long), 0, timeout_s=0.3)
            assert 0.3 <= time.perf_counter() - t0 < 2.0
        finally:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("mode", ["kill", "raise"])
def test_dead_or_closed_peer_is_detected(mode):
    """A peer SIGKILLed or raising (its with-block closes its end) ends a 30 s wait at once; once this
    side closes too, no descriptor or mapping is left."""
    with ShmChannel.create((64, 64)) as ch:
        proc = _start(ch, mode)
        _attached(ch, proc)
        t0 = time.perf_counter()
        with pytest.raises(PeerGone, match="closed the channel" if mode == "raise" else "died"):
            ch.recv_into(torch.zeros(1, dtype=torch.long), 0, timeout_s=30)
        assert time.perf_counter() - t0 < 5.0
        assert proc.wait(timeout=10) == (-signal.SIGKILL if mode == "kill" else 1)
        assert _held()
    assert not _held()


def test_nothing_left_after_normal_exit_or_exception():
    with ShmChannel.create((64, 64)):                 # never attached
        assert _held()
    assert not _held()
    with pytest.raises(ZeroDivisionError):
        with ShmChannel.create((64, 64)) as ch:
            proc = _start(ch, "echo")
            _attached(ch, proc)
            raise ZeroDivisionError("the owner fails mid-run")
    assert proc.wait(timeout=30) == 0                # the peer saw the owner close and ended
    assert not _held()


def test_owner_sigkill_is_detected_by_the_peer(tmp_path):
    """An owner SIGKILLed mid-run: its peer's wait ends (PeerGone, "died") and the peer exits."""
    mark = tmp_path / "peer-gone.txt"
    owner = subprocess.Popen([sys.executable, "-c", PEER, "-", "own", "yield", str(mark)], stdout=subprocess.PIPE)
    peer = int(owner.stdout.readline().decode())
    assert _held(peer)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    end = time.monotonic() + 20
    while os.path.exists(f"/proc/{peer}") and time.monotonic() < end:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{peer}") or open(f"/proc/{peer}/stat").read().split(") ")[1][0] == "Z"
    assert "died" in mark.read_text()                 # the memory went with the last process mapping it
