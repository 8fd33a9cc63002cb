"""Faults of a real run: the errors a run raises, the record a report keeps, and the test-only injection
hook that makes the SSD draft process misbehave at a chosen round (real kills, real sleeps).

Injection text (``RunConfig.inject_fault``): ``KIND@N`` where N counts the draft's replies over the whole
run (0 = the first speculation of the first batch) and KIND is ``die`` (SIGKILL itself), ``sleep=S``
(sleep S seconds before replying), ``garble`` (send a reply with out-of-range tokens and flags) or
``raise`` (raise an exception: the traceback reaches the verifier). ``KIND@start`` (die, sleep, raise)
misbehaves at start-up instead, before the draft connects (``sleep`` there: a draft hung at start-up).
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import asdict, dataclass

from calibration.errors import ConfigError

FAULT_KINDS = ("died", "timeout", "malformed", "error")
FALLBACKS = ("sd", "ar", "none")
_SPEC = re.compile(r"^(die|garble|raise|sleep=(\d+(?:\.\d*)?))@(\d+|start)$")


class RunError(RuntimeError):
    """A run failed; ``partial`` is the RunReport of the batches that completed (None if none did)."""

    def __init__(self, message: str, partial: object = None, faults: list[dict] | None = None) -> None:
        super().__init__(message)
        self.partial = partial
        self.faults = list(faults or [])


class DraftFault(RuntimeError):
    """The SSD draft process died, stopped answering or sent a malformed reply (``kind`` in FAULT_KINDS)."""

    def __init__(self, kind: str, detail: str, waited_s: float = 0.0) -> None:
        super().__init__(f"draft process {kind}: {detail}")
        self.kind, self.detail, self.waited_s = kind, detail, waited_s


@dataclass
class FaultRecord:
    """One fault as a RunReport records it: what, where (batch, verifier round), when (s since run
    start), how long the verifier waited before noticing, and what finished the batch."""

    kind: str
    batch: int
    round: int
    time_s: float
    waited_s: float
    fallback: str
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class InjectedFault:
    """A parsed ``inject_fault`` text: apply ``kind`` just before the draft's reply number ``at`` (or at
    start-up: ``at`` = "start")."""

    kind: str
    at: int | str
    seconds: float = 0.0


def parse_fault(text: str | None) -> InjectedFault | None:
    """``"die@3"`` -> InjectedFault("die", 3); None -> None; anything else -> ConfigError."""
    if text is None:
        return None
    m = _SPEC.match(text) if isinstance(text, str) else None
    allowed = "die@N | sleep=S@N | garble@N | raise@N (N a reply number, or start)"
    if m is None or m.group(1) == "garble" and m.group(3) == "start":
        raise ConfigError("inject_fault", f"cannot parse {text!r}", allowed)
    kind, at = m.group(1).split("=")[0], m.group(3)
    return InjectedFault(kind, at if at == "start" else int(at), float(m.group(2) or 0.0))


def apply_start_fault(fault: InjectedFault | None) -> None:
    """Draft side, first thing in its body: misbehave as planned at start-up (before it connects)."""
    if fault is not None and fault.at == "start":
        _misbehave(fault, "start-up")


def apply_fault(fault: InjectedFault | None, reply_index: int, reply: object, vocab: int) -> object:
    """Draft side: misbehave as planned when sending reply number ``reply_index``; returns the reply to send."""
    if fault is None or fault.at != reply_index:
        return reply
    _misbehave(fault, f"reply {reply_index}")
    if fault.kind == "garble":
        reply.tokens = reply.tokens.clone().fill_(vocab + 1000)
        if hasattr(reply, "hit"):                      # a reply (a pushed speculation cache has no flags)
            reply.hit = reply.hit.float().fill_(0.5)
    return reply


def _misbehave(fault: InjectedFault, where: str) -> None:
    if fault.kind == "die":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)                                 # never reached: SIGKILL is not deliverable late
    if fault.kind == "sleep":
        time.sleep(fault.seconds)
    if fault.kind == "raise":
        raise RuntimeError(f"injected draft failure at {where}")
