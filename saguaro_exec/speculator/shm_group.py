"""A ``ShmChannel`` behind the two calls the links make on a gloo process group, ``send`` and ``recv``
returning work handles with ``wait(timeout)``, so the same loops run on either transport.

Receives are posted early as with gloo and matched by tag: a waiting message goes to the oldest
posted receive with its tag, so posting order, not waiting order, decides. A send copies at once
(``wait`` has nothing left to do), blocking only while every slot of the ring is still unread.
"""

from __future__ import annotations

import time
from collections import deque
from datetime import timedelta

import torch

from saguaro_exec.speculator.shm import BadMessage, ShmChannel


class _Sent:
    def wait(self, timeout: timedelta | None = None) -> bool:
        return True


SENT = _Sent()    # what every send returns: the copy is done, so a link keeps nothing to wait for


class _Posted:
    """A posted receive: ``wait`` delivers waiting messages until this one has landed."""

    def __init__(self, group: ShmGroup, out: torch.Tensor, tag: int) -> None:
        self.group, self.out, self.tag, self.done = group, out, tag, False

    def wait(self, timeout: timedelta | None = None) -> bool:
        self.group._deliver(self, None if timeout is None else timeout.total_seconds())
        return True


class ShmGroup:
    """Gloo-shaped point-to-point over one channel; ``timeout_s`` is the default wait (gloo's group timeout)."""

    def __init__(self, channel: ShmChannel, timeout_s: float) -> None:
        self.channel, self.timeout_s = channel, timeout_s
        self._posted: deque[_Posted] = deque()

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> _Sent:
        self.channel.send(tensors[0], tag, self.timeout_s)
        return SENT

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> _Posted:
        work = _Posted(self, tensors[0], tag)
        self._posted.append(work)
        return work

    def hold(self, tag: int, nbytes: int, timeout_s: float | None = None) -> memoryview:
        """The next message with ``tag`` in place (``ShmChannel.hold``: no copy), once the messages ahead of
        it have gone to their posted receives; ``release`` frees it. No receive is posted for it, and none
        with ``tag`` may be (they would take it); nothing else can be received while it is held."""
        ch = self.channel
        if ch.pending() and ch.peek()[0] == tag:       # the usual case: it is waiting at the head
            return ch.hold(tag, nbytes)
        deadline = time.perf_counter() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            if not ch.pending():
                ch.await_message(max(0.0, deadline - time.perf_counter()), f"a message (tag {tag})")
            if ch.peek()[0] == tag:
                return ch.hold(tag, nbytes)
            self._deliver_head()

    def release(self) -> None:
        """Free the message ``hold`` gave."""
        self.channel.take()

    def _deliver(self, work: _Posted, timeout_s: float | None) -> None:
        ch = self.channel
        if work.done:
            return
        if ch.pending() and self._posted[0] is work and ch.peek()[0] == work.tag:   # waiting, and its own
            ch.read_into(work.out, work.tag)
            work.done = True
            self._posted.popleft()
            return
        deadline = time.perf_counter() + (self.timeout_s if timeout_s is None else timeout_s)
        while not work.done:
            if not ch.pending():
                ch.await_message(max(0.0, deadline - time.perf_counter()), f"a message (tag {work.tag})")
            self._deliver_head()

    def _deliver_head(self) -> None:
        """Copy the waiting message into the oldest posted receive with its tag."""
        tag, _ = self.channel.peek()
        into = next((w for w in self._posted if w.tag == tag), None)
        if into is None:
            raise BadMessage(f"a message with tag {tag}, for which no receive was posted")
        self.channel.read_into(into.out, tag)
        into.done = True
        self._posted.remove(into)
