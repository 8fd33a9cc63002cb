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

    def _deliver(self, work: _Posted, timeout_s: float | None) -> None:
        deadline = time.perf_counter() + (self.timeout_s if timeout_s is None else timeout_s)
        while not work.done:
            wait_s = max(0.0, deadline - time.perf_counter())
            self.channel.await_message(wait_s, f"a message (tag {work.tag})")
            tag, _ = self.channel.peek()
            into = next((w for w in self._posted if w.tag == tag), None)
            if into is None:
                raise BadMessage(f"a message with tag {tag}, for which no receive was posted")
            self.channel.recv_into(into.out, tag, wait_s)
            into.done = True
            self._posted.remove(into)
