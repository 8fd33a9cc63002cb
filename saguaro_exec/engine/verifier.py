"""Target side of SD and SSD: the true sequences (state.py), the target's KV cache, and verification."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from saguaro_exec.engine.cached_model import CachedModel, kv_capacity
from saguaro_exec.engine.refill import remap
from saguaro_exec.engine.state import BatchState, forwarded_rows, swap_rows
from saguaro_exec.model import Transformer
from saguaro_exec.model.accel import Accel
from saguaro_exec.model.transfer import to_device, to_host
from saguaro_exec.sampling import target_probs, verify


class Verifier:
    """Holds the target's cache for a batch; ``verify`` scores one K-token speculation per sequence.
    ``width`` / ``arrivals``: continuous batching (state.py); slots then fill by ``refill.refill``;
    ``out_lens``: per-request max new tokens (each <= ``max_new``, which sizes the cache)."""

    synthetic = None    # engine/synthetic.py SyntheticOutcomes: timing-only outcomes replace the rule's

    def __init__(self, model: Transformer, prompts: list[list[int]], k: int, temperature: float,
                 gen: torch.Generator, max_new: int, eos_ids: list[int], accel: Accel | None = None,
                 width: int | None = None, arrivals: list[float] | None = None,
                 out_lens: list[int] | None = None) -> None:
        self.k, self.temperature, self.gen = k, temperature, gen
        self.state = BatchState(prompts, max_new if out_lens is None else out_lens, eos_ids, width, arrivals)
        self.runner = CachedModel(model, self.state.width, kv_capacity(prompts, max_new, k), accel)
        self.n_valid = torch.zeros(len(self.state), dtype=torch.long)

    def apply_refill(self, moves: list[tuple[int, int]], admitted: list[int]) -> None:
        """Move rows as ``BatchState.refill`` did and cache each admitted prompt but its last token."""
        if not moves and not admitted and len(self.n_valid) == len(self.state):
            return                          # nothing changed (SSD calls this every round, on its critical path)
        for src, dst in moves:
            self.runner.move_row(src, dst)
        self.n_valid = torch.tensor(remap(self.n_valid.tolist(), moves, self.state.width, len(self.state), 0),
                                    dtype=torch.long)
        self.runner.prefill_rows(admitted, [self.state.slots[b].tokens[:-1] for b in admitted])  # one forward
        for b in admitted:
            self.n_valid[b] = len(self.state.slots[b].tokens) - 1

    def compact(self, swaps: list[tuple[int, int]]) -> None:
        """Apply ``state.compact_rows``' swaps (SSD): the live row's K/V and length go to the finished row's
        place; the finished row's K/V are left behind, never read (a refill prefills its row afresh)."""
        for src, dst in swaps:
            self.runner.move_row(src, dst)
        self.state.swap(swaps)
        self.n_valid = torch.tensor(swap_rows(self.n_valid.tolist(), swaps), dtype=torch.long)

    def prefill(self) -> None:
        """Cache every prompt but its last token (which is fed with the first speculation)."""
        seqs = self.state.seqs
        self.runner.extend([s[:-1] for s in seqs], self.n_valid, graphed=False)
        self.n_valid = torch.tensor([len(s) - 1 for s in seqs], dtype=torch.long)

    def verify(self, tokens: torch.Tensor, q: torch.Tensor | None, round_idx: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Verify ``tokens`` [B, K] (drawn from ``q`` [B, K, V]); appends accepted + bonus to each row.
        Returns (accepted count [B], bonus [B]) on the host: the round's one device -> host transfer."""
        toks = tokens.tolist()
        acc, bonus = to_host(*self.score(toks, tokens, q))
        self.commit(toks, acc, bonus, round_idx)
        return acc, bonus

    def score(self, toks: list[list[int]], tokens: torch.Tensor, q: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """The target forward over each row's uncached tokens + ``toks`` and the verification rule:
        (accepted count [B], bonus [B]) on the model's device, without waiting for the device."""
        seqs = self.state.seqs
        n = forwarded_rows([s.done for s in self.state.slots])     # finished rows after the last live one:
        chunks = [seqs[b][int(self.n_valid[b]):] + toks[b] for b in range(n)]   # not forwarded (SSD keeps them)
        logits = self.runner.tail_logits(chunks, self.n_valid[:n], tokens.shape[1] + 1)
        p = logits if self.temperature <= 0 else target_probs(logits, self.temperature)
        dev = logits.device
        out = verify(p, None if q is None else to_device(q[:n], dev), to_device(tokens[:n], dev), self.temperature,
                     self.gen)
        if n < len(seqs):                      # the skipped (finished) rows: nothing accepted, bonus 0, unread
            out = tuple(F.pad(x, (0, len(seqs) - n)) for x in out)
        if self.synthetic is not None:         # the real rule ran (and is waited for); its outcome is replaced
            return self.synthetic.outcome(toks, *to_host(*out))
        return out

    def commit(self, toks: list[list[int]], acc: torch.Tensor, bonus: torch.Tensor, round_idx: int) -> None:
        """Append each live row's accepted tokens + bonus (host tensors) to the true sequences."""
        for b, seq in enumerate(self.state.slots):
            if seq.done:
                continue
            a = int(acc[b])
            self.n_valid[b] = len(seq.tokens) + a
            seq.append(toks[b][:a] + [int(bonus[b])], round_idx)
