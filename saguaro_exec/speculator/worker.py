"""The SSD speculator's round logic, independent of the transport that carries its messages.

Per round: ``build`` (glue, fork, tree: while the verifier verifies), then ``answer`` the outcome:
cache hit -> the cached speculation at once; miss -> the backup (neural jit or fast n-gram).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from saguaro_exec.engine.drafter import Drafter
from saguaro_exec.engine.state import IDLE_ROW, refill_rows
from saguaro_exec.model import Transformer
from saguaro_exec.model.accel import Accel
from saguaro_exec.model.transfer import to_device
from saguaro_exec.speculator.cache import SpecCache, build_tree, fork, tree_slots
from saguaro_exec.speculator.fast_backup import ngram_propose, one_hot_q
from saguaro_exec.speculator.protocol import CacheLayout, Reply, max_branches


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
    accel: Accel = field(default_factory=Accel)   # the draft process's GPU fast path (accel.py)


class DraftWorker:
    """Runs one batch on the draft side: ``start`` -> Reply, then (``build``, ``answer``) per round."""

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
        self.primary = torch.tensor(ws.fanout, dtype=torch.long).expand(bsz, -1)
        self.miss = torch.tensor(ws.fanout_miss, dtype=torch.long).expand(bsz, -1)
        self.layout = CacheLayout.of(ws, self.drafter.vocab)
        self.cache: SpecCache | None = None
        self.message: torch.Tensor | None = None   # the built cache as a push message (times not stamped)
        self._rows: list | None = None             # its ``tolist()``: the table ``answer`` looks up
        self.sent: torch.Tensor | None = None
        self.from_backup = torch.ones(bsz, dtype=torch.bool)
        self.times: dict = {}
        self._pending: tuple | None = None

    def _now(self) -> float:
        return time.perf_counter() - self.t_start

    def _fan(self) -> torch.Tensor:
        """Per-row schedule for the speculation now outstanding: miss schedule if it came from the backup."""
        return torch.where(self.from_backup.view(-1, 1), self.miss, self.primary)

    def start(self) -> Reply:
        """Prefill the prompts and make the first speculation with the backup."""
        t0 = self._now()
        bsz = self.drafter.width
        self.next = min(bsz, self.admitted)
        for b in range(bsz):            # rows without a request yet (load mode) idle as finished ones
            self.drafter.restart_row(b, self.queue[b] if b < self.next else IDLE_ROW)
            self.drafter.done[b] = b >= self.next
        miss = torch.ones(bsz, dtype=torch.bool)
        tokens, q = self._backup(miss)
        self.from_backup, self.sent = miss, tokens
        t1 = self._now()
        return Reply(miss.clone(), torch.full((bsz,), -1), miss.clone(), tokens, q,
                     {"reply": (t0, t1), "backup": (t0, t1)})

    def build(self) -> None:
        """Glue, fork and tree for the outstanding speculation (runs while the verifier verifies)."""
        d, ws = self.drafter, self.ws
        t0 = self._now()
        self._settle()
        d_logits = d.glue(self.sent)
        t1 = self._now()
        f = fork(d_logits, self.sent, self._fan(), ws.n_rank)
        t2 = self._now()
        self.cache = build_tree(d.runner, f, d.lengths, ws.k, ws.temperature, ws.sampler_c, ws.fanout,
                                self.gen).host()
        self.message = self.layout.pack(self.cache)
        self._rows = self.message.tolist()          # off the reply's critical path: the verifier verifies
        t3 = self._now()
        self.times = {"glue": (t0, t1), "fork": (t1, t2), "tree": (t2, t3)}

    def answer(self, acc: torch.Tensor, bonus: torch.Tensor, done: list[bool]) -> Reply:
        """Look the outcome up in the cache; rows that miss get the backup's speculation."""
        t0 = self._now()
        hits, ranks, _, js = self.layout.lookup(self._rows, acc.tolist(), bonus.tolist(), self.ws.n_rank)
        hit, rank = torch.tensor(hits, dtype=torch.bool), torch.tensor(ranks, dtype=torch.long)
        j = torch.tensor(js, dtype=torch.long).clamp(min=0)           # a miss reads branch 0 (then replaced)
        rows = torch.arange(len(js))
        tokens, q = self.cache.tokens[rows, j], self.cache.q
        if q is not None:
            q = q[to_device(rows, q.device), to_device(j, q.device)]
        self._pending = (acc, bonus, self.sent, done)     # applied after the reply is sent, if possible
        fresh = torch.zeros(len(js), dtype=torch.bool)
        rows_in = refill_rows(done, self.admitted - self.next)
        if rows_in:                                        # finished rows take the next prompts, as the
            self._settle()                                 # verifier's refill: their speculation is a backup
            for b in rows_in:
                self.drafter.restart_row(b, self.queue[self.next])
                self.next += 1
            fresh[rows_in] = True
        live_miss = (~hit & ~torch.tensor(done, dtype=torch.bool)) | fresh
        times = dict(self.times)
        if bool(live_miss.any()):
            tb = self._now()
            self._settle()
            b_tokens, b_q = self._backup(live_miss)
            tokens = torch.where(live_miss.view(-1, 1), b_tokens, tokens)
            if q is not None:
                q = torch.where(live_miss.view(-1, 1, 1).to(q.device), b_q.to(q.device), q)
            times["backup"] = (tb, self._now())
        self.from_backup, self.sent = live_miss, tokens
        times["reply"] = (t0, self._now())
        return Reply(hit, rank, live_miss.clone(), tokens, q, times)

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
