"""Target side of SD and SSD: the true sequences, the target's KV cache, and verification."""

from __future__ import annotations

import torch

from saguaro_exec.engine.cached_model import CachedModel
from saguaro_exec.model import Transformer
from saguaro_exec.model.accel import Accel
from saguaro_exec.model.transfer import to_device, to_host
from saguaro_exec.sampling import target_probs, verify


class Sequences:
    """True token lists of a batch with stop bookkeeping (max new tokens, EOS) shared by all engines."""

    def __init__(self, prompts: list[list[int]], max_new: int, eos_ids: list[int]) -> None:
        if any(len(p) == 0 for p in prompts):
            raise ValueError("prompts: a prompt encodes to zero tokens; allowed: at least one token")
        self.seqs = [list(p) for p in prompts]
        self.prompt_lens = [len(p) for p in prompts]
        self.max_new, self.eos = max_new, set(eos_ids)
        self.done = [False] * len(prompts)
        self.finish_round = [-1] * len(prompts)

    def __len__(self) -> int:
        return len(self.seqs)

    def append(self, b: int, new: list[int], round_idx: int) -> None:
        """Add accepted tokens + bonus of row b, cutting at EOS / max_new and marking it done."""
        if self.done[b]:
            return
        for i, t in enumerate(new):
            if t in self.eos:
                new = new[: i + 1]
                self.done[b] = True
                break
        self.seqs[b].extend(new)
        if len(self.generated(b)) >= self.max_new:
            self.done[b] = True
        if self.done[b]:
            self.finish_round[b] = round_idx

    def generated(self, b: int) -> list[int]:
        return self.seqs[b][self.prompt_lens[b]:][: self.max_new]

    def all_done(self) -> bool:
        return all(self.done)


class Verifier:
    """Holds the target's cache for a batch; ``verify`` scores one K-token speculation per sequence."""

    def __init__(self, model: Transformer, prompts: list[list[int]], k: int, temperature: float,
                 gen: torch.Generator, max_new: int, eos_ids: list[int], accel: Accel | None = None) -> None:
        self.k, self.temperature, self.gen = k, temperature, gen
        self.state = Sequences(prompts, max_new, eos_ids)
        capacity = max(len(p) for p in prompts) + max_new + 2 * k + 4
        self.runner = CachedModel(model, len(prompts), capacity, accel)
        self.n_valid = torch.zeros(len(prompts), dtype=torch.long)

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
        chunks = [seqs[b][int(self.n_valid[b]):] + toks[b] for b in range(len(seqs))]
        logits = self.runner.tail_logits(chunks, self.n_valid, tokens.shape[1] + 1)
        p = logits if self.temperature <= 0 else target_probs(logits, self.temperature)
        dev = logits.device
        return verify(p, None if q is None else to_device(q, dev), to_device(tokens, dev), self.temperature,
                      self.gen)

    def commit(self, toks: list[list[int]], acc: torch.Tensor, bonus: torch.Tensor, round_idx: int) -> None:
        """Append each live row's accepted tokens + bonus (host tensors) to the true sequences."""
        seqs = self.state.seqs
        for b in range(len(seqs)):
            if self.state.done[b]:
                continue
            a = int(acc[b])
            self.n_valid[b] = len(seqs[b]) + a
            self.state.append(b, toks[b][:a] + [int(bonus[b])], round_idx)
