"""One interrupt policy for every layer (torch-free, so the CLI can hold it from its first line).

While held (``first_signal_wins``; nestable, main thread only): the first SIGINT or SIGTERM acts as before,
through the handler that was in place (SIGTERM with the default handler raises KeyboardInterrupt("SIGTERM"),
so it unwinds like Ctrl-C); any later one is dropped, so the clean-up the first one started (child
processes, temp folders, staged outputs) runs to the end and the exit status is the first signal's
(130 / 143). Inside ``deferred()`` even the first one waits: it is raised when the block ends; under
``imports_deferred()`` every first-time import runs inside ``deferred()`` (an extension module interrupted
half-way through its initialisation can abort the interpreter: torch's does, with SIGABRT).
"""

from __future__ import annotations

import builtins
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Guard:
    def __init__(self) -> None:
        self.users = 0
        self.depth = 0
        self.fired = False
        self.held: list[int] = []
        self.previous: dict[int, object] = {}

    def _handler(self, signum: int, frame: object) -> None:
        if self.fired or self.depth:
            if not self.fired:
                self.held.append(signum)
            return
        self._fire(signum, frame)

    def _fire(self, signum: int, frame: object) -> None:
        self.fired = True
        prev = self.previous.get(signum)
        if callable(prev):
            prev(signum, frame)
        elif prev != signal.SIG_IGN:
            raise KeyboardInterrupt("SIGTERM" if signum == signal.SIGTERM else "SIGINT")

    def acquire(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        if self.users == 0:
            self.previous = {s: signal.signal(s, self._handler) for s in SIGNALS}
        self.users += 1
        return True

    def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            for s, prev in self.previous.items():
                signal.signal(s, signal.SIG_DFL if prev is None else prev)
            self.fired, self.held, self.depth = False, [], 0


_GUARD = _Guard()


@contextmanager
def first_signal_wins() -> Iterator[None]:
    """Hold the policy (see the module docstring) for the block."""
    held = _GUARD.acquire()
    try:
        yield
    finally:
        if held:
            _GUARD.release()


@contextmanager
def deferred() -> Iterator[None]:
    """Clean-up that must run to the end: SIGINT / SIGTERM wait until the block is done."""
    with first_signal_wins():
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        _GUARD.depth += 1
        try:
            yield
        finally:
            _GUARD.depth -= 1
            if not _GUARD.depth and _GUARD.held and not _GUARD.fired:
                _GUARD._fire(_GUARD.held.pop(0), None)


@contextmanager
def imports_deferred() -> Iterator[None]:
    """Hold the policy, and make every import that loads a module wait out SIGINT / SIGTERM until it has
    finished (the interrupt is raised at the import statement, the module whole); main thread only."""
    original, modules = builtins.__import__, sys.modules

    def guarded(name, globals=None, locals=None, fromlist=(), level=0):
        loaded = modules.get(name) if level == 0 else None
        if loaded is not None:                   # the fast path (an import in a function, run again)
            if not fromlist:
                return original(name, globals, locals, fromlist, level)
            names = loaded.__dict__
            for n in fromlist:
                if n not in names:
                    break
            else:
                return original(name, globals, locals, fromlist, level)
        with deferred():
            return original(name, globals, locals, fromlist, level)

    with first_signal_wins():
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        builtins.__import__ = guarded
        try:
            yield
        finally:
            builtins.__import__ = original
