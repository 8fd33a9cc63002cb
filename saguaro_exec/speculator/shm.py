"""A same-host hand-off between the verifier and its draft process: two one-way rings of fixed-size
slots in one anonymous shared-memory file (``os.memfd_create``), read through torch views.

A writer copies the payload into the next free slot (a plain buffer copy through numpy's view of the
tensor: no torch op on the hand-off's path), then its tag and size, then bumps the ring's write counter; the reader polls that counter (a short spin, then a yield or a sleep: ``WaitPolicy``),
copies the payload out and bumps the read counter, which frees the slot. Each counter is one aligned
8-byte store and x86-64 keeps stores in order (TSO), so a reader that sees the counter sees the payload:
``supported()`` is False elsewhere and callers keep gloo there. A wait has a deadline and checks the
peer's liveness (and the peer's closed flag) every ``check_s``, so a dead or closed peer is an error,
not a hang. The file has no name (nothing in /dev/shm, no resource-tracker process): the owner hands
its descriptor to the peer at spawn (``pass_fds``) and the memory goes when the last mapping does,
however either process ends.
"""

from __future__ import annotations

import mmap
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

LINE = 64                       # bytes: counters live on their own cache lines
HEADER = 16 * LINE
MAGIC = 0x5347524F              # "SGRO"
# header words (int64): line 0 = magic, slots, slot bytes per direction; line 1 = closed flags (owner,
# peer); line 2 + 2d = direction d's write counter, line 3 + 2d = its read counter
_W = LINE // 8


class ChannelError(RuntimeError):
    """The channel failed: timeout, peer gone, or a message that does not fit what was expected."""


class ChannelTimeout(ChannelError):
    """No message (or no free slot) before the deadline; the text says "Timed out" like gloo's."""


class PeerGone(ChannelError):
    """The peer process died or closed its end while this side waited."""


class BadMessage(ChannelError):
    """A message with another tag or size than the one expected."""


def supported() -> bool:
    """Linux on x86-64: memfd_create and in-order stores (see the module note)."""
    return (sys.platform.startswith("linux") and hasattr(os, "memfd_create")
            and platform.machine().lower() in ("x86_64", "amd64"))


@dataclass(frozen=True)
class WaitPolicy:
    """How a reader waits: spin for ``spin_s``, then ``backoff`` between polls: "spin" (keep spinning),
    "yield" (``os.sched_yield``), "sleep0" (``time.sleep(0)``) or "sleep" (``time.sleep(sleep_s)``).
    Liveness, the closed flag and the deadline are checked every ``check_s``. The default yields almost
    at once: on a loaded 2-core box a spinning waiter takes the core its peer needs (bench_shm_wait.py);
    ``sched_yield`` returns at once when nothing else wants the core, so idle it is nearly a spin."""

    spin_s: float = 5e-5
    backoff: str = "yield"
    sleep_s: float = 5e-5
    check_s: float = 0.001

    def __post_init__(self) -> None:
        if self.backoff not in ("spin", "yield", "sleep0", "sleep"):
            raise ValueError(f"backoff must be spin, yield, sleep0 or sleep, not {self.backoff!r}")

    def pause(self) -> Callable[[], None]:
        return {"spin": lambda: None, "yield": os.sched_yield, "sleep0": lambda: time.sleep(0),
                "sleep": lambda: time.sleep(self.sleep_s)}[self.backoff]


def _raw(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor as a writable memoryview (through numpy: a buffer copy, no
    torch op on the hand-off's path); a tensor that is not contiguous or needs grad is copied first."""
    if t.requires_grad or not t.is_contiguous():
        t = t.detach().contiguous()
    try:
        return memoryview(t.numpy()).cast("B")
    except TypeError:                                   # a dtype numpy lacks (bfloat16): its raw bytes
        return memoryview(t.view(torch.uint8).numpy()).cast("B")


VIEWS, VIEW_BYTES = 8, 1 << 20     # memoryviews kept of reused message tensors (each at most this size)


def _stride(slot_bytes: int) -> int:
    return LINE + -(-slot_bytes // LINE) * LINE       # slot header line + payload rounded up


class ShmChannel:
    """Both directions between two processes. Direction 0 carries owner -> peer, 1 peer -> owner.
    ``create`` in the owner (``slot_bytes`` = (largest owner->peer message, largest peer->owner)),
    whose ``fd`` the peer inherits and maps with ``attach(fd)``; ``alive()`` says whether the other
    process still runs."""

    def __init__(self, mm: mmap.mmap, owner: bool, slots: int, slot_bytes: tuple[int, int],
                 alive: Callable[[], bool] | None, wait: WaitPolicy, fd: int | None = None) -> None:
        self._mm, self.fd = mm, fd
        buf = self._buf = memoryview(mm)
        self.owner, self.slots, self.slot_bytes = owner, slots, slot_bytes
        self.alive, self.wait = alive, wait
        self._pause = wait.pause()
        self._words = buf.cast("q")           # every int64 word: header counters and slot headers
        self._out_dir, self._in_dir = (0, 1) if owner else (1, 0)
        self._base = (HEADER, HEADER + slots * _stride(slot_bytes[0]))
        self._sent = self._words[(2 + 2 * self._out_dir) * _W]
        self._read = self._words[(3 + 2 * self._in_dir) * _W]
        self._views: dict[int, tuple[torch.Tensor, memoryview]] = {}
        self._held: dict[tuple[int, int], memoryview] = {}    # ``hold``'s word views, per (slot, size)

    @classmethod
    def create(cls, slot_bytes: tuple[int, int], slots: int = 4, alive: Callable[[], bool] | None = None,
               wait: WaitPolicy = WaitPolicy()) -> ShmChannel:
        """A new channel owned by this process; pass ``fd`` to the peer (``subprocess`` ``pass_fds``)."""
        if slots < 1 or min(slot_bytes) < 1:
            raise ValueError(f"slots and slot_bytes must be >= 1, not {slots}, {slot_bytes}")
        size = HEADER + slots * (_stride(slot_bytes[0]) + _stride(slot_bytes[1]))
        fd = os.memfd_create("saguaro-handoff")        # close-on-exec: only pass_fds hands it on
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        words = memoryview(mm)[:HEADER].cast("q")
        words[0], words[1], words[2], words[3] = MAGIC, slots, slot_bytes[0], slot_bytes[1]
        words.release()
        return cls(mm, True, slots, slot_bytes, alive, wait, fd=fd)

    @classmethod
    def attach(cls, fd: int, alive: Callable[[], bool] | None = None, wait: WaitPolicy = WaitPolicy()) -> ShmChannel:
        """Map the owner's channel from the descriptor this process inherited (then closed)."""
        try:
            mm = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        words = memoryview(mm)[:HEADER].cast("q")
        magic, slots, out_b, in_b = words[0], words[1], words[2], words[3]
        words.release()
        if magic != MAGIC:
            mm.close()
            raise ChannelError(f"descriptor {fd} is not a saguaro hand-off channel")
        return cls(mm, False, slots, (out_b, in_b), alive, wait)

    def release_fd(self) -> None:
        """Owner: close the descriptor once the peer has its own copy (the mapping stays)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _view(self, t: torch.Tensor) -> memoryview:
        """``_raw(t)``, kept for the few small tensors a link reuses round after round (its outcome, its
        cache buffers): the view is then made once, not on every hand-off."""
        got = self._views.get(id(t))
        if got is not None and got[0] is t:
            return got[1]
        view = _raw(t)
        if view.nbytes <= VIEW_BYTES and t.is_contiguous() and not t.requires_grad:   # a view of t itself
            if len(self._views) >= VIEWS:
                self._views.clear()
            self._views[id(t)] = (t, view)
        return view

    # ---- counters: each word is read or written as one aligned 8-byte access
    def _ctr(self, line: int) -> int:
        return self._words[line * _W]

    def _closed_by_peer(self) -> bool:
        return self._words[_W + (1 if self.owner else 0)] != 0      # line 1: (owner closed, peer closed)

    def pending(self) -> bool:
        """Whether a message is waiting to be read."""
        return self._ctr(2 + 2 * self._in_dir) > self._read

    def _await(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        """Return once ``ready()``; raise on the deadline, a dead peer or a peer that closed."""
        if ready():
            return
        now = time.perf_counter()
        spin_end, check = now + self.wait.spin_s, now + self.wait.check_s
        pause = self._pause
        while not ready():
            now = time.perf_counter()
            if now > spin_end:
                pause()
            if now < check:
                continue
            check = now + self.wait.check_s
            gone = self._closed_by_peer() or (self.alive is not None and not self.alive())
            if gone or now > deadline:
                if ready():                       # it landed just before the peer went away
                    return
                if gone:
                    raise PeerGone(f"peer {'closed the channel' if self._closed_by_peer() else 'died'} "
                                   f"while waiting for {what}")
                raise ChannelTimeout(f"Timed out waiting for {what}")

    def send(self, t: torch.Tensor, tag: int, timeout_s: float = 60.0) -> None:
        """Copy a CPU tensor into the next slot (waiting for one to be free) and publish it."""
        d, seq = self._out_dir, self._sent
        data = self._view(t)
        n = data.nbytes
        if n > self.slot_bytes[d]:
            raise BadMessage(f"message of {n} bytes exceeds the channel's {self.slot_bytes[d]}-byte slots")
        read_line = 3 + 2 * d
        if seq - self._ctr(read_line) >= self.slots:      # every slot unread: wait (rare; no closure otherwise)
            self._await(lambda: seq - self._ctr(read_line) < self.slots, time.perf_counter() + timeout_s,
                        f"a free slot (tag {tag})")
        at = self._base[d] + (seq % self.slots) * _stride(self.slot_bytes[d])
        self._buf[at + LINE:at + LINE + n] = data
        self._words[at // 8], self._words[at // 8 + 1] = tag, n
        self._sent = seq + 1
        self._words[(2 + 2 * d) * _W] = self._sent          # publish: after the payload and its header

    def await_message(self, timeout_s: float, what: str = "a message") -> None:
        """Block until a message is waiting (``ChannelTimeout`` / ``PeerGone`` otherwise)."""
        self._await(self.pending, time.perf_counter() + timeout_s, what)

    def recv_into(self, out: torch.Tensor, tag: int, timeout_s: float = 60.0) -> torch.Tensor:
        """Wait for the next message, check its tag and size against ``out`` and copy it there."""
        if not self.pending():
            self.await_message(timeout_s, f"a message (tag {tag})")
        return self.read_into(out, tag)

    def read_into(self, out: torch.Tensor, tag: int) -> torch.Tensor:
        """Copy the waiting message (call only when ``pending()``) into ``out``, checking its tag and size."""
        if not out.is_contiguous():
            raise ValueError("recv_into needs a contiguous tensor")
        view = self._view(out)
        at, got_tag, n = self._head()
        if got_tag != tag or n != view.nbytes:
            raise BadMessage(f"expected tag {tag} with {view.nbytes} bytes, got tag {got_tag} with {n}")
        view[:] = self._buf[at + LINE:at + LINE + n]
        self.take()
        return out

    def hold(self, tag: int, nbytes: int) -> memoryview:
        """The waiting message (call only when ``pending()``) in place, as int64 words, without copying it:
        its slot stays taken until ``take()``, so the reader must be done with the view by then (a
        receiver that reads a few hundred bytes of a large message touches only those cache lines)."""
        at, got_tag, n = self._head()
        if got_tag != tag or n != nbytes:
            raise BadMessage(f"expected tag {tag} with {nbytes} bytes, got tag {got_tag} with {n}")
        key = (at, n)
        view = self._held.get(key)
        if view is None:
            view = self._held[key] = self._buf[at + LINE:at + LINE + n].cast("q")
        return view

    def _head(self) -> tuple[int, int, int]:
        """(payload offset - LINE, tag, bytes) of the waiting message."""
        d = self._in_dir
        at = self._base[d] + (self._read % self.slots) * _stride(self.slot_bytes[d])
        return at, self._words[at // 8], self._words[at // 8 + 1]

    def peek(self) -> tuple[int, int]:
        """(tag, bytes) of the waiting message (call only when ``pending()``)."""
        return self._head()[1:]

    def take(self) -> None:
        """Free the slot of the message just read."""
        self._read += 1
        self._words[(3 + 2 * self._in_dir) * _W] = self._read

    def close(self) -> None:
        """Tell the peer this end is closed and drop the mapping (and the owner's descriptor)."""
        if self._buf is None:
            return
        self._words[_W + (0 if self.owner else 1)] = 1
        self._views.clear()
        for view in self._held.values():
            view.release()
        self._held.clear()
        self._words.release()
        self._buf.release()
        self._buf = None
        self._mm.close()
        self.release_fd()

    def __enter__(self) -> ShmChannel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
