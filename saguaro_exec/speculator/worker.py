"""The SSD speculator's round logic, independent of the transport that carries its messages.

Per round: ``build`` (glue, fork, tree: while the verifier verifies), then ``answer`` the outcome:
cache hit -> the cached speculation at once; miss -> the backup (neural jit or fast n-gram).
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field

import torch

from saguaro_exec.engine.drafter import Drafter, pad_rows
from saguaro_exec.engine.rounds import thread_cpu
from saguaro_exec.engine.state import IDLE_ROW, next_swaps, refill_rows, swap_rows
from saguaro_exec.model import Transformer
from saguaro_exec.model.accel import Accel
from saguaro_exec.model.transfer import to_device
from saguaro_exec.speculator.cache import SpecCache, build_tree, fork, tree_slots
from saguaro_exec.speculator.cache_message import CacheLayout, CacheRows
from saguaro_exec.speculator.fast_backup import ngram_propose, one_hot_q
from saguaro_exec.speculator.protocol import Reply, max_branches, words


@dataclass(frozen=True)
class WorkerSpec:
    """Plain settings of one speculator (picklable: shipped to the draft process)."""

    k: int
    fanout: tuple[int, ...]
    fanout_miss: tuple[int, ...]
    sampler_c: float
    backup: str            # "neural" | "fast" (auto resolved by the caller)
    temperature: float
    max_new: int
    n_rank: int = 64
    compact: bool = False  # after each outcome both sides move live rows over finished ones (state.compact_rows)
    accel: Accel = field(default_factory=Accel)   # the draft process's GPU fast path (accel.py)


class DraftWorker:
    """Runs one batch on the draft side: ``start`` -> Reply, then (``build``, ``answer``) per round.
    ``answer`` = ``take`` (the lean step every round needs: look the outcome up, fix the next speculation)
    + ``reply`` (its Reply tensors); the push protocol calls ``reply`` only when a live row missed."""

    def __init__(self, model: Transformer, prompts: list[list[int]], ws: WorkerSpec, gen: torch.Generator,
                 t_start: float, width: int | None = None) -> None:
        self.ws, self.gen, self.t_start = ws, gen, t_start
        branches = max_branches(ws.fanout, ws.fanout_miss)
        # ``width`` rows over the queue ``prompts``: a finished row takes the next prompt (state.refill_rows)
        self.queue, bsz = prompts, len(prompts) if width is None else width
        self.next = 0
        self.admitted = len(prompts)   # requests given a row so far by the verifier (load mode: only arrived ones)
        self.drafter = Drafter(model, prompts, ws.k, ws.temperature, ws.sampler_c, gen, ws.max_new,
                               tree_slots(ws.k, branches), ws.accel, width=bsz)
        self.primary = torch.tensor(ws.fanout, dtype=torch.long).repeat(bsz, 1)   # [B, K+1], dense: fork's
        self.miss = torch.tensor(ws.fanout_miss, dtype=torch.long).repeat(bsz, 1)  # ops read it every round
        self.layout = CacheLayout.of(ws, self.drafter.vocab)
        self.cache: SpecCache | None = None
        self.message: torch.Tensor | None = None   # the built cache as a push message (times not stamped),
        # packed into one of two preallocated buffers in turn: a message stays intact while its (gloo) send
        # is in flight, which the serve loop waits for before the next send, so two are enough
        self._buffers = [(t, words(t)) for t in (torch.empty(self.layout.shape(bsz), dtype=torch.long)
                                                 for _ in range(2))]
        self.words: memoryview | None = None       # the message's words (stamp, CacheRows)
        self._table: CacheRows | None = None       # the message's lookup table (``index_cache``)
        self._keyed: list[dict] = []               # ... and its branch keys per row (CacheRows.keyed)
        self._sent_t = torch.zeros(bsz, ws.k, dtype=torch.long)   # the sent tokens for fork, rewritten each
        self._sent_w = words(self._sent_t)                        # build (fork reads it there and then)
        self.sent: list[list[int]] | None = None   # the outstanding speculation's tokens (host rows)
        self._from_backup = [True] * bsz           # ... and which rows of it came from the backup
        self.times: dict = {}
        self.answered: tuple[float, float] = (0.0, 0.0)   # the last ``take``'s (start, end)
        self._pending: tuple | None = None
        self._answer: tuple | None = None          # what ``reply`` needs of the last ``take``
        self._swaps: list[tuple[int, int]] = []    # the last outcome's compaction, applied by the next build
        self._cpu = thread_cpu(self.drafter.runner.device)   # the build's CPU clock (one-thread CPU runs)

    @property
    def from_backup(self) -> torch.Tensor:
        """[B] bool: rows of the outstanding speculation that came from the backup."""
        return torch.tensor(self._from_backup, dtype=torch.bool)

    def _now(self) -> float:
        return time.perf_counter() - self.t_start

    def _fan(self) -> torch.Tensor:
        """Per-row schedule for the speculation now outstanding: miss schedule if it came from the backup."""
        if not any(self._from_backup):
            return self.primary
        return torch.where(self.from_backup.view(-1, 1), self.miss, self.primary)

    def start(self) -> Reply:
        """Prefill the prompts and make the first speculation with the backup."""
        t0 = self._now()
        bsz = self.drafter.width
        self.next = min(bsz, self.admitted)
        self.drafter.restart_rows(list(range(bsz)), [self.queue[b] if b < self.next else IDLE_ROW for b in range(bsz)])
        for b in range(bsz):            # rows without a request yet (load mode) idle as finished ones
            self.drafter.done[b] = b >= self.next
        miss = torch.ones(bsz, dtype=torch.bool)
        tokens, q = self._backup(miss)
        self._from_backup, self.sent = [True] * bsz, tokens.tolist()
        t1 = self._now()
        return Reply(miss.clone(), torch.full((bsz,), -1), miss.clone(), tokens, q,
                     {"reply": (t0, t1), "backup": (t0, t1)})

    def build(self) -> None:
        """Glue, fork and tree for the outstanding speculation (runs while the verifier verifies)."""
        d, ws, cpu = self.drafter, self.ws, self._cpu
        t0 = self._now()
        c0 = cpu() if cpu else 0.0          # after t0: the read (~0.6 us) is the build's, not the outcome's hand-off
        self._settle()
        if self._swaps:
            self._compact()
        ts = self._now()
        d_logits = d.glue(self.sent)                  # [m, K+1, V]: finished rows after the last live one
        t1 = self._now()                              # are not forwarded (Drafter.glue), nor forked / drafted
        m = d_logits.shape[0]
        self._sent_w[:] = array("q", [t for row in self.sent for t in row])   # not a tensor from nested lists
        f = fork(d_logits, self._sent_t[:m], self._fan()[:m], ws.n_rank)
        t2 = self._now()
        cache = build_tree(d.runner, f, d.lengths[:m], ws.k, ws.temperature, ws.sampler_c, ws.fanout, self.gen)
        tp = self._now()
        self.cache = cache.host()
        self._buffers.reverse()
        self.message, self.words = self._buffers[0]
        self.layout.pack(self.cache, out=self.message, w=self.words)
        self._table = None
        c3, t3 = cpu() if cpu else 0.0, self._now()
        self.times = {"glue": (t0, t1), "fork": (t1, t2), "tree": (t2, t3), "settle": (t0, ts), "pack": (tp, t3)}
        if cpu:
            self.times["build_cpu"] = (0.0, c3 - c0)

    def index_cache(self) -> None:
        """Read the built cache's message into the table ``take`` looks up (call it once the message is
        sent, while the outcome is awaited: off both critical paths; ``take`` makes it otherwise)."""
        if self._table is None:
            self._table = CacheRows(self.layout, self.words)
            self._keyed = self._table.keyed(self.layout)

    def answer(self, acc: torch.Tensor | list[int], bonus: torch.Tensor | list[int], done: list[bool]) -> Reply:
        """Look the outcome up in the cache; rows that miss get the backup's speculation."""
        self.take(acc, bonus, done)
        return self.reply()

    def take(self, acc: torch.Tensor | list[int], bonus: torch.Tensor | list[int], done: list[bool]) -> bool:
        """Apply the outcome: hit rows take their cached branch, missed and refilled rows the backup's
        speculation. Returns whether a live row missed (the push protocol then sends ``reply()``). A hit
        allocates no tensor: plain Python over the cache's rows, so the next build starts at once."""
        t0 = self._now()
        acc = acc.tolist() if isinstance(acc, torch.Tensor) else acc
        bonus = bonus.tolist() if isinstance(bonus, torch.Tensor) else bonus
        self.index_cache()
        k, so = self.ws.k, self.layout.tokens.start      # ``layout.lookup``'s hits, branches and tokens,
        js = [keys.get(key, -1) for keys, key in zip(self._keyed, zip(acc, bonus))]   # by dict (ranks:
        toks = [row[so + j * k:so + (j + 1) * k] if j >= 0 else [0] * k               # ``reply``)
                for row, j in zip(self._table.head, js)]
        self._pending = (acc, bonus, self.sent, done)     # applied by the next build, or now on a miss
        live_miss = [j < 0 and not d for j, d in zip(js, done)]
        left = self.admitted - self.next
        rows_in = refill_rows(done, left) if left > 0 and any(done) else []
        for b in rows_in:                                  # finished rows take the next prompts, as the
            live_miss[b] = True                            # verifier's refill: their speculation is a backup
        backup_q = backup_t = None
        if any(live_miss):
            self._settle()
            if rows_in:                                    # one batched prefill, as the verifier's refill
                self.drafter.restart_rows(rows_in, self.queue[self.next:self.next + len(rows_in)])
                self.next += len(rows_in)
            tb = self._now()
            b_tokens, backup_q = self._backup(torch.tensor(live_miss, dtype=torch.bool))
            toks = [bt if m else t for bt, t, m in zip(b_tokens.tolist(), toks, live_miss)]
            backup_t = (tb, self._now())
        self.sent, self._from_backup = toks, live_miss
        if self.ws.compact:                                # the reply keeps this round's row order; the
            self._swaps = next_swaps(done, rows_in)        # next build moves the rows (as the verifier)
        self.answered = (t0, self._now())
        self._answer = (acc, bonus, js, backup_q, backup_t)
        return any(live_miss)

    def reply(self, ranks: bool = True) -> Reply:
        """The Reply for the last ``take`` (call it before the next ``build``: q rows and the bonus ranks
        come from the cache). ``ranks=False`` (push: the verifier looks the outcome up itself and keeps its own
        ranks) sends -1 ranks instead of a second lookup on the miss's critical path."""
        acc, bonus, js, backup_q, backup_t = self._answer
        bsz, q = len(js), self.cache.q
        rank = (self.layout.lookup(self._table, acc, bonus, self.ws.n_rank)[1] if ranks else [-1] * bsz)
        times = dict(self.times)
        if backup_t is not None:
            times["backup"] = backup_t
        times["reply"] = self.answered
        live_miss = self.from_backup
        if q is not None and backup_q is not None and all(self._from_backup):
            q = backup_q.to(q.device)       # every row's speculation is the backup's (batch 1's miss): no gather
        elif q is not None:                 # a miss reads branch 0 (then replaced); rows the build skipped
            m = q.shape[0]                  # (finished) read a uniform q
            rows, j = torch.arange(m), torch.tensor([max(0, x) for x in js[:m]], dtype=torch.long)
            q = q[to_device(rows, q.device), to_device(j, q.device)]
            q = pad_rows(q, bsz, 1.0 / q.shape[-1])
            if backup_q is not None:
                q = torch.where(live_miss.view(-1, 1, 1).to(q.device), backup_q.to(q.device), q)
        tokens = torch.tensor(self.sent, dtype=torch.long).view(bsz, self.ws.k)
        return Reply(torch.tensor([j >= 0 for j in js], dtype=torch.bool), torch.tensor(rank, dtype=torch.long),
                     live_miss, tokens, q, times)

    def _compact(self) -> None:
        """Move live rows over finished ones (``state.compact_rows``, as the verifier did on the same outcome):
        the drafter's rows, the outstanding speculation and its backup flags."""
        swaps, self._swaps = self._swaps, []
        self.drafter.compact(swaps)
        self.sent, self._from_backup = swap_rows(self.sent, swaps), swap_rows(self._from_backup, swaps)

    def _settle(self) -> None:
        """Apply the last outcome to the draft's sequences (deferred off the reply's critical path)."""
        if self._pending is not None:
            self.drafter.advance(*self._pending, cached_spec=self.ws.k)
            self._pending = None

    def _backup(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Speculation from the true prefix for ``rows`` (others get filler): neural jit or fast n-gram."""
        ws, d = self.ws, self.drafter
        if ws.backup == "neural":
            tokens, q, _ = d.jit(self.miss)
            return tokens, q
        toks = [ngram_propose(s, ws.k, d.vocab, self.gen) if bool(r) else [0] * ws.k
                for s, r in zip(d.seqs, rows)]
        tokens = torch.tensor(toks, dtype=torch.long).view(len(toks), ws.k)
        q = None if ws.temperature <= 0 else to_device(one_hot_q(tokens, d.vocab), d.runner.device)
        return tokens, q
