"""Mailboxes and the draft-target link: a message arrives `delay` seconds after it is sent."""

from __future__ import annotations

from collections import deque

import simpy


class Mailbox:
    """One-reader inbox: `yield box.get()` returns the next message, waiting for it if needed."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._queue: deque = deque()
        self._waiter: simpy.Event | None = None

    def put(self, msg: object) -> None:
        if self._waiter is not None:
            waiter, self._waiter = self._waiter, None
            waiter.succeed(msg)
        else:
            self._queue.append(msg)

    def get(self) -> simpy.Event:
        ev = self.env.event()
        if self._queue:
            ev.succeed(self._queue.popleft())
        else:
            self._waiter = ev
        return ev


class Link:
    """Point-to-point link between verifier and speculator; records each message on the "link" track."""

    def __init__(self, env: simpy.Environment, events: list | None) -> None:
        self.env = env
        self.events = events
        self.busy_s = 0.0
        self.messages = 0

    def deliver(self, box: Mailbox, msg: object, busy_s: float, name: str, nbytes: int = 0) -> None:
        """The sender has just spent busy_s sending msg (it was busy, as the executor's sends are): record
        the span that ended now and put msg into box at once."""
        self.messages += 1
        self.busy_s += busy_s
        if self.events is not None:
            self.events.append({"name": name, "track": "link", "start_s": self.env.now - busy_s, "dur_s": busy_s,
                                "args": {"bytes": nbytes}})
        box.put(msg)

    def send(self, box: Mailbox, msg: object, delay: float, name: str, nbytes: int = 0) -> None:
        """Deliver msg into box after delay seconds (immediately when delay is 0)."""
        self.messages += 1
        self.busy_s += delay
        if self.events is not None:
            self.events.append({"name": name, "track": "link", "start_s": self.env.now, "dur_s": delay,
                                "args": {"bytes": nbytes}})
        if delay <= 0:
            box.put(msg)
            return
        ev = self.env.timeout(delay)
        ev.callbacks.append(lambda _ev: box.put(msg))
