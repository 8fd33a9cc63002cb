"""How the SSD verifier reaches its speculator: a real draft process (``ProcessLink``) or, for
debugging, the same worker called inline in this process (``InlineLink``, no overlap)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from saguaro_exec.faults import DraftFault, RunError
from saguaro_exec.sampling import make_generator
from saguaro_exec.speculator.process import (
    TAG,
    TAG_CACHE,
    TAG_CACHE_Q,
    TAG_Q,
    DraftArgs,
    cache_dims,
    connect,
    load_source,
)
from saguaro_exec.speculator.protocol import (
    cache_shape,
    lookup_rows,
    outcome_tensor,
    reply_width,
    unpack_reply,
)
from saguaro_exec.speculator.validate import check_cache, check_reply_head, check_reply_q
from saguaro_exec.speculator.worker import DraftWorker, Reply


class DraftProcessError(RunError):
    """The draft process failed; the message carries its traceback."""


def _nonempty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


class ProcessLink:
    """Spawns the draft process, joins it in a two-rank gloo group on a free port, always cleans up.
    With ``reply_timeout_s``, a reply that does not arrive in time, a dead draft or a malformed reply
    raises ``DraftFault`` (the caller falls back); otherwise failures raise ``DraftProcessError``."""

    def __init__(self, args: DraftArgs, vocab: int, reply_timeout_s: float | None = None) -> None:
        self.args, self.vocab, self.reply_timeout_s = args, vocab, reply_timeout_s
        self._deadline: float | None = None
        self.proc: subprocess.Popen | None = None
        self.pg = None
        self._batch = 0
        self._sending = None

    def __enter__(self) -> ProcessLink:
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()                # an error or an interrupt: no grace period for the draft

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def _open(self) -> None:
        timeout = timedelta(seconds=self.args.timeout_s)
        store = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=timeout, wait_for_workers=False)
        self._tmp = tempfile.mkdtemp(prefix="saguaro-draft-")
        args_file, self._err_file = os.path.join(self._tmp, "args.pt"), os.path.join(self._tmp, "error.txt")
        torch.save(self.args, args_file)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen([sys.executable, "-m", "saguaro_exec.speculator.entry", str(os.getpid()),
                                      str(store.port),
                                      args_file, self._err_file], env=env, start_new_session=True)
        self._store = store
        deadline = time.monotonic() + self.args.timeout_s
        while not store.check(["draft_up"]):
            if self.proc.poll() is not None:
                raise self._failure(RuntimeError(f"exit code {self.proc.returncode} before connecting"))
            if time.monotonic() > deadline:
                raise DraftProcessError(f"draft process did not connect within {self.args.timeout_s} s")
            time.sleep(0.02)
        self.pg = connect(store.port, 0, self.args.timeout_s, store=store)
        self._recv(torch.zeros(1))                                       # draft model loaded

    def _recv(self, t: torch.Tensor) -> torch.Tensor:
        try:
            self._wait(self.pg.recv([t], 1, TAG))
        except RuntimeError as e:
            raise self._failure(e) from None
        return t

    def _wait(self, work) -> None:
        """Wait for a send/recv, up to the current reply deadline when one is set."""
        if self._deadline is None:
            work.wait()
        else:
            work.wait(timedelta(seconds=max(0.001, self._deadline - time.monotonic())))

    def _failure(self, e: BaseException) -> DraftProcessError | DraftFault:
        if self._deadline is not None:
            return self._fault(e)
        tb = ""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            if os.path.exists(self._err_file):
                with open(self._err_file) as f:
                    tb = f.read()
        return DraftProcessError(f"draft process failed ({e}).\n{tb}".rstrip())

    def _fault(self, e: BaseException) -> DraftFault:
        """Classify a failed wait for a reply: the draft died (with its traceback if it raised), timed out,
        or the link broke."""
        waited = time.monotonic() - self._wait_start
        p = self.proc
        if p is not None and "Timed out" not in str(e):   # a closed connection: is the process going away?
            end = time.monotonic() + 3.0
            while p.poll() is None and time.monotonic() < end and not _nonempty(self._err_file):
                time.sleep(0.01)
        if p is not None and (p.poll() is not None or _nonempty(self._err_file)):
            tb = ""
            if _nonempty(self._err_file):
                time.sleep(0.05)                        # the traceback is written in one go, then exit
                with open(self._err_file) as f:
                    tb = f.read().strip()
            code = p.poll()
            how = "raised" if code is None else f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            return DraftFault("error" if tb else "died", f"{how}. {tb}".strip(), waited)
        if "Timed out" in str(e):
            return DraftFault("timeout", f"no reply within {self.reply_timeout_s} s", waited)
        return DraftFault("error", f"link failed ({e})", waited)

    def start(self, bsz: int) -> Reply:
        """First speculation of the next batch."""
        self._bsz = bsz
        self._live = [True] * bsz
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

    def send(self, acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool) -> None:
        """Send the outcome key (k, bonus) of every sequence (+ done/stop flags) and post the receives
        for the reply to it."""
        self._out = outcome_tensor(acc, bonus, done, stop)             # kept alive until sent
        self._live = [not d for d in done]
        try:
            self._sending = self.pg.send([self._out], 1, TAG)           # completes once the draft reads it
        except RuntimeError as e:
            raise self._failure(e) from None
        self._post_recv()                    # the draft answers a stop too (hit flags of the last round)

    def recv(self) -> Reply:
        """The next speculation (and hit flags / ranks for the last outcome)."""
        self._arm()
        if self._sending is not None:
            self._wait_posted(self._sending)
            self._sending = None
        return self._recv_reply()

    def close(self) -> None:
        """Wait for the draft process (it exits after the last batch); terminate, then kill, if it does not."""
        p = self.proc
        if p is not None and p.poll() is None:
            for stop in (lambda: None, p.terminate, p.kill):
                stop()
                try:
                    p.wait(timeout=3)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.pg = None
        self._sending = None
        self._store = None
        if getattr(self, "_tmp", None):
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


    def abort(self) -> None:
        """After a fault: kill the draft process at once (no grace period), then clean up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.close()


class PushLink(ProcessLink):
    """``ProcessLink`` with the push protocol: the draft sends each speculation cache as soon as it is
    built; the verifier looks its outcome up in it and starts the next verification at once on a hit,
    waiting for the draft only for rows that missed (their backup speculation)."""

    def start(self, bsz: int) -> Reply:
        self._dims = cache_dims(self.args.ws, self.vocab)           # (n_max, r_max) of every cache message
        reply = super().start(bsz)
        self._post_cache()
        return reply

    def _post_cache(self) -> None:
        ws = self.args.ws
        n_max, r_max = self._dims
        self._cache = torch.empty(cache_shape(self._bsz, ws.k, n_max, r_max), dtype=torch.long)
        self._cache_q = None
        try:
            self._cache_work = self.pg.recv([self._cache], 1, TAG_CACHE)
            if ws.temperature > 0:
                self._cache_q = torch.empty(self._bsz, n_max, ws.k, self.vocab, dtype=torch.float32)
                self._cache_q_work = self.pg.recv([self._cache_q], 1, TAG_CACHE_Q)
        except RuntimeError as e:
            raise self._failure(e) from None

    def send(self, acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool) -> None:
        """Send the outcome (the draft needs it for its next build) and keep it for the local lookup."""
        if self._sending is not None:              # the previous outcome's send (long done by now)
            self._wait_posted(self._sending)
        self._out = outcome_tensor(acc, bonus, done, stop)
        self._acc, self._bonus, self._done, self._stop = acc, bonus, done, stop
        try:
            self._sending = self.pg.send([self._out], 1, TAG)
        except RuntimeError as e:
            raise self._failure(e) from None

    def recv(self) -> Reply:
        """Hits from the cache received during the verification; the draft's reply only for misses."""
        ws = self.args.ws
        n_max, r_max = self._dims
        self._arm()
        self._wait_posted(self._cache_work)
        if self._cache_q is not None:
            self._wait_posted(self._cache_q_work)
        rows = self._cache.tolist()
        if self.reply_timeout_s is not None:
            check_cache(rows, ws.k, self.vocab, n_max, self._live)
        hits, ranks, toks, js, times = lookup_rows(rows, ws.k, n_max, r_max, self._acc.tolist(),
                                                   self._bonus.tolist(), ws.n_rank)
        miss = [not h and not d for h, d in zip(hits, self._done)]
        self._live = [not d for d in self._done]
        hit, rank = torch.tensor(hits), torch.tensor(ranks)
        if any(miss):
            self._post_recv()
            reply = self._recv_reply()
            reply.hit, reply.rank = hit, rank         # the verifier's own lookup (the draft made the same)
            reply.times = {**times, **{n: v for n, v in reply.times.items() if n in ("reply", "backup")}}
        else:
            q = None if self._cache_q is None else self._cache_q[torch.arange(len(js)), torch.tensor(js)]
            reply = Reply(hit, rank, torch.zeros(len(miss), dtype=torch.bool), torch.tensor(toks), q, times)
        if not self._stop:
            self._post_cache()
        return reply


class InlineLink:
    """The same DraftWorker called synchronously in this process: build, then answer (no overlap)."""

    def __init__(self, args: DraftArgs, vocab: int) -> None:
        self.args, self.vocab = args, vocab
        self.model = load_source(args.source, args.device, args.dtype)
        self._batch = -1
        self.pid = None

    def __enter__(self) -> InlineLink:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def start(self, bsz: int) -> Reply:
        self._batch += 1
        a = self.args
        gen = make_generator(a.seed + 7919 * (self._batch + 1), a.device)
        self.worker = DraftWorker(self.model, a.batches[self._batch], a.ws, gen, a.t_start)
        return self.worker.start()

    def send(self, acc: torch.Tensor, bonus: torch.Tensor, done: list[bool], stop: bool) -> None:
        self._outcome = (acc, bonus, done)

    def recv(self) -> Reply:
        self.worker.build()
        return self.worker.answer(*self._outcome)

    def close(self) -> None:
        return None

    def abort(self) -> None:
        return None
