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
        self._pump(lambda: ch.pending() and ch.peek()[0] == tag, tag, timeout_s)
        return ch.hold(tag, nbytes)

    def release(self) -> None:
        """Free the message ``hold`` gave."""
        self.channel.take()

    def _deliver(self, work: _Posted, timeout_s: float | None) -> None:
        self._pump(lambda: work.done, work.tag, timeout_s)

    def _pump(self, until, tag: int, timeout_s: float | None) -> None:
        """Hand waiting messages to their posted receives (the oldest with the message's tag) until
        ``until()``, waiting for messages up to ``timeout_s`` (None: the group's); the deadline is made only
        when a wait is needed (a message already waiting is the common case)."""
        ch, deadline = self.channel, None
        while not until():
            if not ch.pending():
                if deadline is None:
                    deadline = time.perf_counter() + (self.timeout_s if timeout_s is None else timeout_s)
                ch.await_message(max(0.0, deadline - time.perf_counter()), f"a message (tag {tag})")
                continue
            head, _ = ch.peek()
            into = next((w for w in self._posted if w.tag == head), None)
            if into is None:
                raise BadMessage(f"a message with tag {head}, for which no receive was posted")
            ch.read_into(into.out, head)
            into.done = True
            self._posted.remove(into)
