"""Draft side state: the draft's view of the true sequences, its KV cache, and linear drafting.

``jit`` is SD's drafting and SSD's neural backup (K sequential steps from the true prefix); ``glue``
is SSD's forward over the bonus token + the sent speculation, giving the draft rows D_0..D_K that
forking needs. The prefix region of the cache is followed by a tree region (see ``tree.py``).
"""

from __future__ import annotations

import torch

from saguaro_exec.engine.cached_model import CachedModel, kv_capacity
from saguaro_exec.engine.decode_steps import step_decoder
from saguaro_exec.engine.refill import remap
from saguaro_exec.engine.state import forwarded_rows, swap_rows
from saguaro_exec.model import Transformer
from saguaro_exec.model.accel import Accel
from saguaro_exec.model.transfer import to_host
from saguaro_exec.sampling import greedy, sample, scale_top, step_scales, target_probs


class Drafter:
    """Draft model + cache for a batch; token lists mirror the verifier's true sequences. With ``width``
    (continuous batching) the rows start empty and ``apply_refill`` admits prompts as the verifier's does."""

    def __init__(self, model: Transformer, prompts: list[list[int]], k: int, temperature: float,
                 sampler_c: float, gen: torch.Generator, max_new: int, tree_slots: int = 0,
                 accel: Accel | None = None, width: int | None = None) -> None:
        self.k, self.temperature, self.sampler_c, self.gen = k, temperature, sampler_c, gen
        self.seqs = [list(p) for p in prompts] if width is None else []
        self.width = len(prompts) if width is None else width
        self.done = [False] * len(self.seqs)
        self.prefix_capacity = kv_capacity(prompts, max_new, k)
        self.runner = CachedModel(model, self.width, self.prefix_capacity + tree_slots, accel)
        self.n_valid = torch.zeros(len(self.seqs), dtype=torch.long)
        self.vocab = model.config.vocab_size
        self.state = None           # the BatchState mirrored under continuous batching (set by the engine)

    def apply_refill(self, moves: list[tuple[int, int]], admitted: list[int]) -> None:
        """Move rows as ``self.state`` (the BatchState this drafter mirrors) was refilled and cache each
        admitted prompt but its last token. A moved row's tree region is not kept (rebuilt every round)."""
        n, w = len(self.state), self.width
        for src, dst in moves:
            self.runner.move_row(src, dst)
        self.seqs = remap(self.seqs, moves, w, n, [])
        self.done = remap(self.done, moves, w, n, False)
        self.n_valid = torch.tensor(remap(self.n_valid.tolist(), moves, w, n, 0), dtype=torch.long)
        self.restart_rows(admitted, [self.state.slots[b].tokens for b in admitted])

    def compact(self, swaps: list[tuple[int, int]]) -> None:
        """Apply ``state.compact_rows``' swaps as the verifier does (SSD): the live row's K/V, tokens and length
        go to the finished row's place (the tree region is rebuilt every round)."""
        for src, dst in swaps:
            self.runner.move_row(src, dst)
        self.seqs, self.done = swap_rows(self.seqs, swaps), swap_rows(self.done, swaps)
        self.n_valid = torch.tensor(swap_rows(self.n_valid.tolist(), swaps), dtype=torch.long)

    def restart_rows(self, rows: list[int], prompts: list[list[int]]) -> None:
        """Each row of ``rows`` (existing ones, or the next new ones in order) starts its prompt, cached but
        its last token, the prefills batched (CachedModel.prefill_rows)."""
        for b, prompt in zip(rows, prompts):
            if b == len(self.seqs):
                self.seqs.append([])
                self.done.append(False)
                self.n_valid = torch.cat([self.n_valid, torch.zeros(1, dtype=torch.long)])
            self.seqs[b], self.done[b] = list(prompt), False
        self.runner.prefill_rows(list(rows), [self.seqs[b][:-1] for b in rows])
        for b in rows:
            self.n_valid[b] = len(self.seqs[b]) - 1

    @property
    def lengths(self) -> torch.Tensor:
        return torch.tensor([len(s) for s in self.seqs], dtype=torch.long)

    def prefill(self) -> None:
        """Cache every prompt but its last token."""
        self.runner.extend([s[:-1] for s in self.seqs], self.n_valid, graphed=False)
        self.n_valid = self.lengths - 1

    def _pick(self, logits: torch.Tensor, scales: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Greedy at T=0 (no q needed); else sample from sigma_{F,C} (``scales``: this step's ``step_scales``)
        and return that q."""
        if self.temperature <= 0:
            return greedy(logits), None
        q = scale_top(target_probs(logits, self.temperature), scales)
        return sample(q, self.gen), q

    def jit(self, fan: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """K tokens drafted one step at a time from the true prefix; fan [B, K+1] (on the host) is the per-row
        Saguaro F_i. Returns (tokens [B, K] on the host, q [B, K, V] or None, draft logits D_0..D_{K-1}
        [B, K, V]); the drafted tokens stay on the device between steps (one transfer at the end). Only the
        ``forwarded_rows`` m are drafted: later (finished) rows get token 0, a uniform q and zero logits,
        never read. What the steps share is made once (``step_decoder``, ``step_scales``): a step is its
        forward and its pick."""
        m = forwarded_rows(self.done)                   # finished rows after the last live one: skipped
        cached = self.n_valid[:m]
        chunks = [s[n:] for s, n in zip(self.seqs[:m], cached.tolist())]
        self.n_valid = self.lengths
        if all(len(c) == 1 for c in chunks):            # the usual case: the first forward is one more step
            step, first = step_decoder(self.runner, cached.tolist(), self.k), 1
            logits = step(torch.tensor(chunks, dtype=torch.long), 0)
        else:
            logits = self.runner.last_logits(chunks, cached)
            step, first = step_decoder(self.runner, self.n_valid[:m].tolist(), self.k - 1), 0
        scales = [None] * self.k if self.temperature <= 0 else step_scales(fan[:m, :self.k], self.sampler_c,
                                                                           self.vocab, self.runner.device)
        toks, qs, rows = [], [], []
        for i in range(self.k):
            tok, q = self._pick(logits, scales[i])
            toks.append(tok)
            qs.append(q)
            rows.append(logits)
            if i + 1 < self.k:
                logits = step(tok.view(-1, 1), i + first)
        (tokens,) = to_host(torch.stack(toks, 1))
        q_all = None if self.temperature <= 0 else torch.stack(qs, 1)
        return _pad_rows(len(self.seqs), tokens, q_all, torch.stack(rows, 1))

    def glue(self, tokens: torch.Tensor | list[list[int]]) -> torch.Tensor:
        """Forward the not-yet-cached true tokens (at least the last one) + the K sent tokens (host rows);
        returns the draft logits after the prefix and after each sent token: D_0..D_K [m, K+1, V] for the
        ``forwarded_rows`` m (finished rows after the last live one are not forwarded). Its
        inputs are plain lists: this is the first thing a build does after the outcome."""
        toks = tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens
        m = forwarded_rows(self.done)                   # rows [0, m): the last live one's and before
        start = [min(n, len(s) - 1) for n, s in zip(self.n_valid.tolist()[:m], self.seqs)]
        chunks = [s[j:] + t for s, j, t in zip(self.seqs, start, toks)]
        return self.runner.tail_logits(chunks, start, self.k + 1)

    def advance(self, acc: torch.Tensor | list[int], bonus: torch.Tensor | list[int],
                tokens: torch.Tensor | list[list[int]], done: list[bool], cached_spec: int) -> None:
        """Apply the verifier's outcome (accepted count, bonus) to every live row; ``cached_spec`` is how
        many of the sent tokens have valid K/V after the prefix (K after a glue, K-1 after a jit)."""
        toks = tokens.tolist() if isinstance(tokens, torch.Tensor) else tokens
        for b, s in enumerate(self.seqs):
            if self.done[b]:
                continue
            a = int(acc[b])
            self.n_valid[b] = len(s) + min(a, cached_spec)
            s.extend(toks[b][:a] + [int(bonus[b])])
            self.done[b] = bool(done[b])


def pad_rows(t: torch.Tensor, bsz: int, fill: float) -> torch.Tensor:
    """``t`` [m, ...] padded to ``bsz`` rows of ``fill``: rows a forward skipped (finished, never read)."""
    m = t.shape[0]
    return t if m == bsz else torch.cat([t, t.new_full((bsz - m, *t.shape[1:]), fill)])


def _pad_rows(bsz: int, tokens: torch.Tensor, q: torch.Tensor | None, logits: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``jit``'s tokens [m, K], q [m, K, V] and logits [m, K, V] padded to ``bsz`` rows (token 0, a uniform q,
    zero logits)."""
    q = None if q is None else pad_rows(q, bsz, 1.0 / q.shape[-1])
    return pad_rows(tokens, bsz, 0), q, pad_rows(logits, bsz, 0.0)
