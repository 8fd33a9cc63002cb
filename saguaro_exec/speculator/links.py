"""How the SSD verifier reaches its speculator: a real draft process (``ProcessLink``, ``PushLink``); the
same worker called inline in this process, for debugging, is ``speculator.inline.InlineLink``."""

from __future__ import annotations

import dataclasses
import time
from array import array
from datetime import timedelta

import torch

from saguaro_exec.engine.state import swap_rows
from saguaro_exec.faults import DraftFault, RunError
from saguaro_exec.spawn import ChildFailed, SupervisedContext, Supervisor
from saguaro_exec.speculator.cache_message import CacheLayout, CacheRows
from saguaro_exec.speculator.process import DraftArgs
from saguaro_exec.speculator.protocol import (
    TAG,
    TAG_CACHE,
    TAG_CACHE_Q,
    TAG_Q,
    OutcomeMessage,
    Reply,
    connect,
    reordered,
    reply_width,
    unpack_reply,
    words,
)
from saguaro_exec.speculator.shm_group import SENT, ShmGroup
from saguaro_exec.speculator.transport import open_channel
from saguaro_exec.speculator.validate import check_cache, check_reply_head, check_reply_q


def _pending(work):
    """A send's work handle, or None where the transport already copied the message (shared memory):
    waiting on a finished work with a deadline still costs ~8 us between a verification and its outcome."""
    return None if work is SENT else work


class DraftProcessError(RunError):
    """The draft process failed; the message carries its traceback."""


def _kind(failed: ChildFailed) -> str:
    """The DraftFault kind of a failed draft: it stopped answering (stopped, or never started in time),
    raised (a traceback), or died."""
    return "timeout" if failed.rank is None or failed.stalled_s is not None else "error" if failed.traceback \
        else "died"


class ProcessLink(SupervisedContext):
    """Spawns the draft process (``spawn.Supervisor``), joins it in a two-rank gloo group on a free port,
    always cleans up. With ``reply_timeout_s``, a draft that dies, raises, stays stopped for that long
    or does not start in time, a reply that does not arrive in time or a malformed reply raises
    ``DraftFault`` (the caller falls back; a start-up fault is raised by the first ``start``); otherwise
    failures raise ``DraftProcessError``. Bad input the draft finds at start-up (its checkpoint) raises
    the same ``ConfigError`` the verifier's own load would."""

    def __init__(self, args: DraftArgs, vocab: int, reply_timeout_s: float | None = None) -> None:
        self.args, self.vocab, self.reply_timeout_s = args, vocab, reply_timeout_s
        self._deadline: float | None = None
        self._sup: Supervisor | None = None
        self._startup_fault: DraftFault | None = None
        self._channel = None       # transport "shm": the ShmChannel (self.pg is then its ShmGroup)
        self.pg = None
        self._sending = None

    def _start_failed(self, e: ChildFailed) -> None:
        """Bad input -> its ConfigError; else a DraftFault for the first ``start`` (fault mode) or an error."""
        if e.config_error is not None:
            raise e.config_error from None
        if self.reply_timeout_s is None:
            raise DraftProcessError(f"draft process failed at start-up ({e.how}).\n{e.traceback}".rstrip()) from None
        self._startup_fault = DraftFault(_kind(e), f"at start-up: {e.how}. {e.traceback}".strip(),
                                         time.monotonic() - self._t_open)

    @property
    def pid(self) -> int | None:
        return self._sup.procs[0].pid if self._sup is not None and self._sup.procs else None

    def _open(self) -> None:
        a = self.args
        self._t_open = time.monotonic()
        stall = a.timeout_s if self.reply_timeout_s is None else self.reply_timeout_s
        self._sup = Supervisor("draft process", "saguaro-draft-", "saguaro_exec.speculator.process:serve", 2,
                               a.timeout_s, stall, a.start_timeout_s)
        if a.transport == "shm":         # the channel's descriptor is inherited by the draft at spawn
            self._channel = open_channel(a.ws, self.vocab, a.batches, alive=self._sup.alive)
            a = dataclasses.replace(a, shm_fd=self._channel.fd)
        store = self._sup.spawn(lambda path: torch.save(a, path), () if a.shm_fd is None else (a.shm_fd,))
        if self._channel is not None:
            self._channel.release_fd()                # the draft holds its own copy now
            self.pg = ShmGroup(self._channel, a.timeout_s)
        self._sup.wait_for("up", "connect")
        self.pg = self.pg or connect(store.port, 0, a.timeout_s, store=store)
        self._sup.wait_for("ready", "load the draft model")

    def _wait(self, work) -> None:
        """Wait for a send/recv, up to the current reply deadline when one is set."""
        if self._deadline is None:
            work.wait()
        else:
            work.wait(timedelta(seconds=max(0.001, self._deadline - time.monotonic())))

    def _failure(self, e: BaseException) -> DraftProcessError | DraftFault:
        if self._deadline is not None:
            return self._fault(e)
        failed = self._sup.failure(wait_s=5.0)
        tb = "" if failed is None else failed.traceback
        return DraftProcessError(f"draft process failed ({e}).\n{tb}".rstrip())

    def _fault(self, e: BaseException) -> DraftFault:
        """Classify a failed wait for a reply: the draft died (with its traceback if it raised), timed out,
        or the link broke."""
        waited = time.monotonic() - self._wait_start
        timed_out = "Timed out" in str(e)
        failed = self._sup.failure(wait_s=0.0 if timed_out else 3.0)   # a closed connection: going away?
        if failed is not None:
            return DraftFault(_kind(failed), f"{failed.how}. {failed.traceback}".strip(), waited)
        if timed_out:
            return DraftFault("timeout", f"no reply within {self.reply_timeout_s} s", waited)
        return DraftFault("error", f"link failed ({e})", waited)

    def start(self, bsz: int) -> Reply:
        """First speculation of the next batch."""
        if self._startup_fault is not None:
            raise self._startup_fault
        self._bsz = bsz
        self._live = [True] * bsz
        self._swaps: list[tuple[int, int]] = []   # the last outcome's compaction (``_reordered``)
        self._out = OutcomeMessage(bsz)      # rewritten in place once the last one's send is done (recv
        # waits for it; PushLink.send does before writing)
        self._arm()
        self._post_recv()
        return self._recv_reply()

    def _arm(self) -> None:
        self._wait_start = time.monotonic()
        if self.reply_timeout_s is not None:
            self._deadline = self._wait_start + self.reply_timeout_s

    def _post_recv(self) -> None:
        """Post the receives for the next reply now, so its bytes land as soon as the draft sends them
        (gloo moves a point-to-point message only once both sides have posted it)."""
        k = self.args.ws.k
        self._head = torch.empty(self._bsz + 1, reply_width(k), dtype=torch.float64)
        self._q = None
        try:
            self._head_work = self.pg.recv([self._head], 1, TAG)
            if self.args.ws.temperature > 0:
                self._q = torch.empty(self._bsz, k, self.vocab, dtype=torch.float32)
                self._q_work = self.pg.recv([self._q], 1, TAG_Q)
        except RuntimeError as e:
            raise self._failure(e) from None

    def _wait_posted(self, work) -> None:
        try:
            self._wait(work)
        except RuntimeError as e:
            raise self._failure(e) from None

    def _recv_reply(self) -> Reply:
        k = self.args.ws.k
        self._wait_posted(self._head_work)
        rows = self._head.tolist()
        if self.reply_timeout_s is not None:
            check_reply_head(rows, k, self.vocab, self._live)
        q = None
        if self._q is not None:
            self._wait_posted(self._q_work)
            q = self._q
        reply = unpack_reply(rows, k, q)
        if q is not None and self.reply_timeout_s is not None:
            check_reply_q(q, reply.tokens, torch.tensor(self._live, dtype=torch.bool))
        return reply

    def send(self, acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool, fresh: tuple = (),
             swaps: list[tuple[int, int]] | tuple = ()) -> None:
        """Send the outcome (k, bonus, done/stop), post the reply's receives; ``fresh``: refilled rows; ``swaps``:
        the verifier's row moves after this outcome (``state.next_swaps``), the order ``recv`` hands the reply in."""
        self._out.write(acc.tolist(), bonus.tolist(), done, stop, fresh)
        self._live = [not d or b in fresh for b, d in enumerate(done)]
        self._swaps = list(swaps)
        try:
            self._sending = _pending(self.pg.send([self._out.tensor], 1, TAG))   # gloo: completes once read
        except RuntimeError as e:
            raise self._failure(e) from None
        self._post_recv()                    # the draft answers a stop too (hit flags of the last round)

    def recv(self) -> Reply:
        """The next speculation (and hit flags / ranks for the last outcome)."""
        self._arm()
        if self._sending is not None:
            self._wait_posted(self._sending)
            self._sending = None
        return self._reordered(self._recv_reply())

    def _reordered(self, reply: Reply) -> Reply:
        """The reply (checked in the order it was made) in the next round's row order: the draft moves its
        rows by the same rule on the same outcome (``state.compact_rows``), so no message carries the moves."""
        if not self._swaps:
            return reply
        self._live = swap_rows(self._live, self._swaps)
        return reordered(reply, self._swaps)

    def close(self) -> None:
        """Wait for the draft process (it exits after the last batch); terminate, then kill, if it does not."""
        self._release(lambda sup: sup.close())

    def abort(self) -> None:
        """After a fault: kill the draft process at once (no grace period), then clean up."""
        self._release(lambda sup: sup.abort())

    def _release(self, how) -> None:
        self.pg = None
        self._sending = None
        if self._sup is not None:
            how(self._sup)
        if self._channel is not None:            # after the draft is gone (close is idempotent)
            self._channel.close()


class PushLink(ProcessLink):
    """``ProcessLink`` with the push protocol: the draft sends each speculation cache as soon as it is
    built; the verifier looks its outcome up in it and starts the next verification at once on a hit,
    waiting for the draft only for rows that missed (their backup speculation)."""

    def start(self, bsz: int) -> Reply:
        ws = self.args.ws
        self._layout = CacheLayout.of(ws, self.vocab)                 # every cache message of the run
        self._cache = torch.empty(self._layout.shape(bsz), dtype=torch.long)   # received into round after
        self._cache_words = words(self._cache)
        self._tokens = [(t, words(t)) for t in (torch.zeros(bsz, ws.k, dtype=torch.long) for _ in range(2))]
        # a hit's speculation is written into one of these in turn (a tensor from nested lists costs tens
        # of microseconds here): the other still holds the one being verified
        self._cache_q = (torch.empty(bsz, self._layout.n_max, ws.k, self.vocab, dtype=torch.float32)  # round,
                         if ws.temperature > 0 else None)            # read (copied out) before the next post
        # shared memory at T = 0: the cache is read in its ring slot (``ShmGroup.hold``), not copied out of
        # it: the lookup reads a few hundred bytes of a message of tens of kB the draft's core just wrote
        self._hold = isinstance(self.pg, ShmGroup) and self._cache_q is None
        self._held = None
        reply = super().start(bsz)
        self._post_cache()
        self.from_backup = reply.from_backup.tolist()                 # of the speculation being verified
        return reply

    def wait_cache(self) -> torch.Tensor:
        """The cache message of the speculation being verified, waited for once (a gloo work waited for twice
        blocks): by ``recv``, or earlier by the synthetic mode (engine/synthetic.py) before the outcome."""
        self._arm()
        if self._hold:                 # a copy: the caller may keep views of it past the slot's release
            self._cache_words[:] = self._held_words()
            return self._cache
        if self._cache_work is not None:
            self._wait_posted(self._cache_work)
            self._cache_work = None
        return self._cache

    def _held_words(self) -> memoryview:
        """The cache message's words in its ring slot (held until ``recv`` has looked the outcome up)."""
        if self._held is None:
            timeout = None if self._deadline is None else max(0.001, self._deadline - time.monotonic())
            try:
                self._held = self.pg.hold(TAG_CACHE, self._cache.numel() * 8, timeout)
            except RuntimeError as e:
                raise self._failure(e) from None
        return self._held

    def _release_held(self) -> None:
        if self._held is not None:
            self._held = None
            self.pg.release()

    def _release(self, how) -> None:
        self._held = None                        # a view of the channel's memory, which goes with it
        super()._release(how)

    def _post_cache(self) -> None:
        if self._hold:                 # nothing to post: ``hold`` takes the next cache message from the ring
            return
        try:
            self._cache_work = self.pg.recv([self._cache], 1, TAG_CACHE)
            if self._cache_q is not None:
                self._cache_q_work = self.pg.recv([self._cache_q], 1, TAG_CACHE_Q)
        except RuntimeError as e:
            raise self._failure(e) from None

    def send(self, acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool, fresh: tuple = (),
             swaps: list[tuple[int, int]] | tuple = ()) -> None:
        """Send the outcome (for the draft's next build), keep it for the lookup; ``fresh`` rows miss."""
        if self._sending is not None:              # the previous outcome's send (long done by now)
            self._wait_posted(self._sending)
        self._acc, self._bonus, self._stop = acc.tolist(), bonus.tolist(), stop   # lists: the lookup's keys
        self._out.write(self._acc, self._bonus, done, stop, fresh)
        try:
            self._sending = _pending(self.pg.send([self._out.tensor], 1, TAG))
        except RuntimeError as e:
            raise self._failure(e) from None
        self._done, self._fresh = [d and b not in fresh for b, d in enumerate(done)], set(fresh)   # for recv
        self._swaps = list(swaps)

    def recv(self) -> Reply:
        """Hits from the cache received during the verification; the draft's reply only for misses."""
        layout, t_wait = self._layout, time.perf_counter() - self.args.t_start
        if self._hold:
            self._arm()
            cache_words = self._held_words()
        else:
            self.wait_cache()
            cache_words = self._cache_words
            if self._cache_q is not None:
                self._wait_posted(self._cache_q_work)
        seen = (t_wait, time.perf_counter() - self.args.t_start)      # the hand-off stamp: cache in hand
        try:
            rows = CacheRows(layout, cache_words)      # the branch head as lists, the rest read on demand
            if self.reply_timeout_s is not None:
                check_cache(rows, layout, self.vocab, self._live)
            hits, ranks, toks, js = layout.lookup(rows, self._acc, self._bonus, self.args.ws.n_rank)
        finally:
            self._release_held()                       # rows' lists are copies; the slot is free again
        times = {**layout.times(rows), "cache_seen": seen}
        miss = [(not h or b in self._fresh) and not d for b, (h, d) in enumerate(zip(hits, self._done))]
        self._live = [not d for d in self._done]
        if any(miss):
            self._post_recv()
            # a fault here records this side's decision: a draft that took the outcome as all-hit sends no reply
            try:                                       # (the session 29-31 flake)
                reply = self._recv_reply()
            except DraftFault as fault:
                missed = [b for b, m in enumerate(miss) if m]
                raise DraftFault(fault.kind, f"{fault.detail}; the verifier waited for a backup for rows {missed} "
                                 f"(acc {self._acc}, bonus {self._bonus}, refilled {sorted(self._fresh)})",
                                 fault.waited_s) from None
            reply.hit, reply.rank = hits, ranks       # the verifier's own lookup (the draft made the same)
            reply.times = {**times, **{n: v for n, v in reply.times.items() if n in ("reply", "backup")}}
            self.from_backup = reply.from_backup.tolist()
        else:                                          # a hit: one tensor (the tokens), flags as lists
            # one copied branch per row (the buffer takes the next cache's q): stacked views, half an index's cost
            q = None if self._cache_q is None else torch.stack([self._cache_q[b, j] for b, j in enumerate(js)])
            self.from_backup = [False] * len(miss)
            self._tokens.reverse()
            tokens, w = self._tokens[0]
            w[:] = array("q", [t for row in toks for t in row])
            reply = Reply(hits, ranks, self.from_backup, tokens, q, times)
        if not self._stop:
            self._post_cache()
        if self._swaps:
            self.from_backup = swap_rows(self.from_backup, self._swaps)
        return self._reordered(reply)

