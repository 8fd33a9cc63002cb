"""A same-host hand-off between the verifier and its draft process: two one-way rings of fixed-size
slots in one POSIX shared-memory segment (``multiprocessing.shared_memory``), read through torch views.

A writer copies the payload into the next free slot, then its tag and size, then bumps the ring's
write counter; the reader polls that counter (a short spin, then a yield or a sleep: ``WaitPolicy``),
copies the payload out and bumps the read counter, which frees the slot. Each counter is one aligned
8-byte store and x86-64 keeps stores in order (TSO), so a reader that sees the counter sees the payload:
``supported()`` is False elsewhere and callers keep gloo there. A wait has a deadline and checks the
peer's liveness (and the peer's closed flag) every ``check_s``, so a dead or closed peer is an error,
not a hang. The creating process owns the segment: it unlinks the name as soon as the peer has
attached (``unlink``) and again on ``close``; Python's resource tracker removes it if the owner is
SIGKILLed before that.
"""

from __future__ import annotations

import mmap
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import shared_memory

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
    """Linux on x86-64: POSIX shared memory in /dev/shm and in-order stores (see the module note)."""
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


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


def _stride(slot_bytes: int) -> int:
    return LINE + -(-slot_bytes // LINE) * LINE       # slot header line + payload rounded up


class ShmChannel:
    """Both directions between two processes. Direction 0 carries owner -> peer, 1 peer -> owner.
    ``create`` in the owner (``slot_bytes`` = (largest owner->peer message, largest peer->owner)),
    ``attach(name)`` in the peer; ``alive()`` says whether the other process still runs."""

    def __init__(self, buf: memoryview, owner: bool, slots: int, slot_bytes: tuple[int, int],
                 alive: Callable[[], bool] | None, wait: WaitPolicy, shm=None, mm: mmap.mmap | None = None,
                 name: str = "") -> None:
        self._buf, self._shm, self._mm, self.name = buf, shm, mm, name
        self.owner, self.slots, self.slot_bytes = owner, slots, slot_bytes
        self.alive, self.wait = alive, wait
        self._pause = wait.pause()
        self._words = buf.cast("q")           # every int64 word: header counters and slot headers
        self._bytes = torch.frombuffer(buf, dtype=torch.uint8)
        self._out_dir, self._in_dir = (0, 1) if owner else (1, 0)
        self._base = (HEADER, HEADER + slots * _stride(slot_bytes[0]))
        self._sent = self._words[(2 + 2 * self._out_dir) * _W]
        self._read = self._words[(3 + 2 * self._in_dir) * _W]
        self._unlinked = not owner

    @classmethod
    def create(cls, slot_bytes: tuple[int, int], slots: int = 4, alive: Callable[[], bool] | None = None,
               wait: WaitPolicy = WaitPolicy()) -> ShmChannel:
        """A new segment owned by this process."""
        if slots < 1 or min(slot_bytes) < 1:
            raise ValueError(f"slots and slot_bytes must be >= 1, not {slots}, {slot_bytes}")
        size = HEADER + slots * (_stride(slot_bytes[0]) + _stride(slot_bytes[1]))
        shm = shared_memory.SharedMemory(create=True, size=size)
        words = shm.buf[:HEADER].cast("q")
        words[0], words[1], words[2], words[3] = MAGIC, slots, slot_bytes[0], slot_bytes[1]
        words.release()
        return cls(shm.buf, True, slots, slot_bytes, alive, wait, shm=shm, name=shm.name)

    @classmethod
    def attach(cls, name: str, alive: Callable[[], bool] | None = None,
               wait: WaitPolicy = WaitPolicy()) -> ShmChannel:
        """Map the owner's segment (plain mmap: the owner, not this process's resource tracker, owns it)."""
        fd = os.open(os.path.join("/dev/shm", name.lstrip("/")), os.O_RDWR)
        try:
            mm = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        buf = memoryview(mm)
        words = buf[:HEADER].cast("q")
        magic, slots, out_b, in_b = words[0], words[1], words[2], words[3]
        words.release()
        if magic != MAGIC:
            buf.release()
            mm.close()
            raise ChannelError(f"shared-memory segment {name!r} is not a saguaro channel")
        return cls(buf, False, slots, (out_b, in_b), alive, wait, mm=mm, name=name)

    # ---- counters: each word is read or written as one aligned 8-byte access
    def _ctr(self, line: int) -> int:
        return self._words[line * _W]

    def _closed_by_peer(self) -> bool:
        return self._words[_W + (0 if not self.owner else 1)] != 0

    def unlink(self) -> None:
        """Owner: remove the segment's name now that the peer has mapped it (the mappings stay)."""
        if not self._unlinked and self._shm is not None:
            self._unlinked = True
            self._shm.unlink()

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
        data = t.detach().contiguous().reshape(-1).view(torch.uint8)
        n = data.numel()
        if n > self.slot_bytes[d]:
            raise BadMessage(f"message of {n} bytes exceeds the channel's {self.slot_bytes[d]}-byte slots")
        read_line = 3 + 2 * d
        self._await(lambda: seq - self._ctr(read_line) < self.slots, time.perf_counter() + timeout_s,
                    f"a free slot (tag {tag})")
        at = self._base[d] + (seq % self.slots) * _stride(self.slot_bytes[d])
        self._bytes[at + LINE:at + LINE + n].copy_(data)
        self._words[at // 8], self._words[at // 8 + 1] = tag, n
        self._sent = seq + 1
        self._words[(2 + 2 * d) * _W] = self._sent          # publish: after the payload and its header

    def await_message(self, timeout_s: float, what: str = "a message") -> None:
        """Block until a message is waiting (``ChannelTimeout`` / ``PeerGone`` otherwise)."""
        self._await(self.pending, time.perf_counter() + timeout_s, what)

    def recv_into(self, out: torch.Tensor, tag: int, timeout_s: float = 60.0) -> torch.Tensor:
        """Wait for the next message, check its tag and size against ``out`` and copy it there."""
        d, seq = self._in_dir, self._read
        self.await_message(timeout_s, f"a message (tag {tag})")
        got_tag, n = self.peek()
        at = self._base[d] + (seq % self.slots) * _stride(self.slot_bytes[d])
        if got_tag != tag or n != out.numel() * out.element_size():
            raise BadMessage(f"expected tag {tag} with {out.numel() * out.element_size()} bytes, "
                             f"got tag {got_tag} with {n}")
        if not out.is_contiguous():
            raise ValueError("recv_into needs a contiguous tensor")
        out.reshape(-1).view(torch.uint8).copy_(self._bytes[at + LINE:at + LINE + n])
        self.take()
        return out

    def peek(self) -> tuple[int, int]:
        """(tag, bytes) of the waiting message (call only when ``pending()``)."""
        at = self._base[self._in_dir] + (self._read % self.slots) * _stride(self.slot_bytes[self._in_dir])
        return self._words[at // 8], self._words[at // 8 + 1]

    def take(self) -> None:
        """Free the slot of the message just read."""
        self._read += 1
        self._words[(3 + 2 * self._in_dir) * _W] = self._read

    def close(self) -> None:
        """Tell the peer this end is closed, drop the mapping; the owner also unlinks the segment."""
        if self._buf is None:
            return
        self._words[_W + (0 if self.owner else 1)] = 1
        self._words.release()
        del self._bytes
        self._buf.release()
        self._buf = None
        if self._shm is not None:
            self._shm.close()
            self.unlink()
        if self._mm is not None:
            self._mm.close()

    def __enter__(self) -> ShmChannel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
