"""The batch of sequences decoding together: slots, context lengths, per-round draws and per-sequence stats.

Continuous batching (fixed=False): the workload's sequences enter `batch_size` slots in order; when one
finishes, the next waiting sequence takes its slot at the end of that round; once none wait the batch
shrinks, unless keep=True (the SSD executor over a tensor-parallel target, whose rows cannot move), where
a finished row nobody takes stays in its slot and forwards cover every slot up to the last active one (the
executor's ``forwarded_rows``). Fixed batches
(fixed=True): sequences go in batches of `batch_size`; a finished row rides along until the batch's last row
finishes, then the next batch starts. Each new sequence starts from a primary (cached) speculation: prefill and the first
draft are not modelled. Rows (optional): per-request (pmf_primary, pmf_backup, hit_table) triples (the
profile's acceptance.row_scale); each sequence is dealt one when it takes a slot, so a kept batch lasts as long
as its slowest request; without them every row draws from the shared pmfs (the homogeneous path).
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

_CHUNK = 2048  # rounds of random draws made at once (vectorized)


class BatchState:
    """Per-slot state and the acceptance / cache-hit outcomes of each verification round.

    Random draws are made vectorized, in chunks of rounds, for both possible sources of each slot's
    speculation (primary / backup); the per-round update then only picks per slot (plain Python lists:
    cheaper than numpy on batch-sized vectors).
    """

    def __init__(self, batch: int, num_sequences: int, output_tokens: int, prompt_tokens: int,
                 rng: np.random.Generator, pmf_primary: np.ndarray | None = None,
                 pmf_backup: np.ndarray | None = None, hit_table: np.ndarray | None = None,
                 fixed: bool = False, keep: bool = False, rows: list[tuple] | None = None) -> None:
        b = min(batch, num_sequences)
        self.rng, self.width = rng, b
        self.out, self.prompt = output_tokens, prompt_tokens
        self.num_sequences = num_sequences
        self.seq = list(range(b))
        self.next_seq = b
        self.slots = list(range(b))  # active slots
        self.done = [0] * b
        self.ctx = [float(prompt_tokens)] * b
        self.ctx_sum = float(prompt_tokens) * b
        self.src = [0] * b  # 0: speculation from the cache (primary), 1: from the backup
        self.start_s = np.zeros(num_sequences)
        self.finish_s = np.full(num_sequences, np.nan)
        self.pmf_p, self.pmf_b, self.table = pmf_primary, pmf_backup, hit_table
        self._r = self._n = 0
        self.seq_rounds = 0  # sequence-rounds (one per active sequence per round)
        self.tokens = 0
        self.hits = 0
        self.fixed, self.keep = fixed, keep
        self.riding: list[int] = []  # fixed batches: finished rows still forwarded with the batch
        self.rows = None
        if rows:  # per-request curves: cumulative pmfs and hit tables as lists, one row kind per slot
            lists: dict[int, list | None] = {}   # the rows share one hit table: convert it once
            for _, _, t in rows:
                if id(t) not in lists:
                    lists[id(t)] = None if t is None else t.tolist()
            self.rows = [(np.cumsum(p).tolist(), np.cumsum(q).tolist(), lists[id(t)]) for p, q, t in rows]
            self._row_rng = rng.spawn(1)[0]   # a child stream: the shared draws stay as without rows
            self._deck: list[int] = []
            self._dealt = 0
            self.kind = [self._new_kind() for _ in range(b)]

    @property
    def n_active(self) -> int:
        return len(self.slots)

    @property
    def n_forward(self) -> int:
        """Rows each forward runs: the active ones, plus finished rows riding along in a fixed batch; kept
        rows (SSD): every slot up to the last active one (the executor skips finished rows after it)."""
        if self.keep:
            return max(self.slots) + 1 if self.slots else 1
        return len(self.slots) + len(self.riding)

    def any_from_backup(self) -> bool:
        """Whether some active row's outstanding speculation came from the backup (after-miss schedule)."""
        return any(self.src[s] for s in self.slots)

    @property
    def finished(self) -> bool:
        return not self.slots

    def mean_context(self) -> float:
        """Mean context length over the active slots (the latency models take batch * context)."""
        return self.ctx_sum / len(self.slots) if self.slots else 0.0

    def _new_kind(self) -> int:
        """The next request's curve: dealt from shuffled decks of the whole pool (without replacement), so a
        few requests already cover the fitted spread instead of missing its rare slow rows by chance. The
        requests left when fewer than a deck remain take evenly spaced quantiles of the (sorted) pool: four
        requests drawn at random from 16 quantiles put one autotune's tokens per round 14% above the fitted
        curve's (4.16 against 3.65); spaced, they keep its spread and its mean."""
        if not self._deck:
            m, left = len(self.rows), self.num_sequences - self._dealt
            if left >= m:
                self._deck = self._row_rng.permutation(m).tolist()
            else:
                spaced = [min(m - 1, int((i + 0.5) * m / left)) for i in range(max(1, left))]
                self._deck = [spaced[i] for i in self._row_rng.permutation(len(spaced))]
        self._dealt += 1
        return self._deck.pop()

    def _draw(self) -> None:
        """Draw the next chunk: accepted length and hit flag of every slot under either source."""
        b, kmax = self.width, len(self.pmf_p) - 1
        ua = self.rng.random((_CHUNK, b))
        if self.rows is not None:   # per-request curves: keep the uniforms, look each slot's curve up per round
            self._ua = ua.tolist()
            self._uh = self.rng.random((_CHUNK, b)).tolist() if self.table is not None else None
            self._r, self._n = 0, _CHUNK
            return
        kp = np.minimum(np.searchsorted(np.cumsum(self.pmf_p), ua, side="right"), kmax)
        kb = np.minimum(np.searchsorted(np.cumsum(self.pmf_b), ua, side="right"), kmax)
        self._kp, self._kb = kp.tolist(), kb.tolist()
        if self.table is not None:
            uh = self.rng.random((_CHUNK, b))
            self._hp = (uh < self.table[0][kp]).tolist()
            self._hb = (uh < self.table[1][kb]).tolist()
        self._r, self._n = 0, _CHUNK

    def verify_round(self, now: float, ssd: bool) -> tuple[bool, int]:
        """Apply one verification at time `now`: accepted lengths, bonus tokens, cache hits, finished
        sequences (refilled from the queue). Returns (any active sequence missed, tokens added)."""
        if self._r >= self._n:
            self._draw()
        r = self._r
        self._r += 1
        if self.rows is not None:
            kp, kb, hp, hb = self._row_outcomes(r, ssd)
        else:
            kp, kb = self._kp[r], self._kb[r]
            hp, hb = (self._hp[r], self._hb[r]) if ssd else (None, None)
        src, done, ctx, out = self.src, self.done, self.ctx, self.out
        added, misses, ended = 0, 0, []
        for s in self.slots:
            if ssd and src[s]:
                k, hit = kb[s], hb[s]
            elif ssd:
                k, hit = kp[s], hp[s]
            else:
                k, hit = kp[s], True
            if not hit:
                misses += 1
            src[s] = 0 if hit else 1
            t = min(k + 1, out - done[s])
            done[s] += t
            ctx[s] += t
            added += t
            if done[s] >= out:
                ended.append(s)
        self.ctx_sum += added
        self.tokens += added
        self.seq_rounds += len(self.slots)
        self.hits += len(self.slots) - misses
        if ended:
            self._refill(ended, now)
        return misses > 0, added

    def _row_outcomes(self, r: int, ssd: bool) -> tuple[dict, dict, dict | None, dict | None]:
        """Round r's accepted lengths and hit flags per active slot, each from its request's own curves."""
        ua, kmax = self._ua[r], len(self.pmf_p) - 1
        uh = self._uh[r] if ssd and self._uh is not None else None
        kp, kb, hp, hb = {}, {}, {}, {}
        for s in self.slots:
            cdf_p, cdf_b, table = self.rows[self.kind[s]]
            kp[s] = min(bisect_right(cdf_p, ua[s]), kmax)
            kb[s] = min(bisect_right(cdf_b, ua[s]), kmax)
            if uh is not None:
                hp[s], hb[s] = uh[s] < table[0][kp[s]], uh[s] < table[1][kb[s]]
        return kp, kb, (hp if ssd else None), (hb if ssd else None)

    def ar_steps(self, steps: int, now: float) -> int:
        """Apply `steps` autoregressive steps (one token per active sequence each)."""
        added, ended = 0, []
        for s in self.slots:
            t = min(steps, self.out - self.done[s])
            self.done[s] += t
            self.ctx[s] += t
            added += t
            if self.done[s] >= self.out:
                ended.append(s)
        self.ctx_sum += added
        self.tokens += added
        self.seq_rounds += len(self.slots) * steps
        if ended:
            self._refill(ended, now)
        return added

    def steps_to_next_finish(self) -> int:
        """Tokens until the first active sequence finishes (AR chunking)."""
        return self.out - max(self.done[s] for s in self.slots)

    def _refill(self, ended: list[int], now: float) -> None:
        if self.fixed:
            self._refill_fixed(ended, now)
            return
        for s in sorted(ended):         # in slot order, as the executor's rows take the next prompts
            self.finish_s[self.seq[s]] = now
            self.ctx_sum -= self.ctx[s]
            if self.next_seq < self.num_sequences:
                self.seq[s] = self.next_seq
                self.start_s[self.next_seq] = now
                self.next_seq += 1
                self.done[s] = 0
                self.ctx[s] = float(self.prompt)
                self.ctx_sum += self.prompt
                self.src[s] = 0
                if self.rows is not None:
                    self.kind[s] = self._new_kind()
            else:
                self.slots.remove(s)
                if self.keep:
                    self.riding.append(s)

    def _refill_fixed(self, ended: list[int], now: float) -> None:
        for s in ended:
            self.finish_s[self.seq[s]] = now
            self.ctx_sum -= self.ctx[s]
            self.slots.remove(s)
            self.riding.append(s)
        if self.slots:
            return
        slots, self.riding = sorted(self.riding), []
        for s in slots[:max(0, self.num_sequences - self.next_seq)]:
            self.seq[s] = self.next_seq
            self.start_s[self.next_seq] = now
            self.next_seq += 1
            self.done[s], self.ctx[s], self.src[s] = 0, float(self.prompt), 0
            self.ctx_sum += self.prompt
            if self.rows is not None:
                self.kind[s] = self._new_kind()
            self.slots.append(s)

    def per_seq_rates(self) -> np.ndarray:
        """Tokens per second of each finished sequence (output_tokens / its time in the batch)."""
        dur = self.finish_s - self.start_s
        return np.where(dur > 0, self.out / np.where(dur > 0, dur, 1.0), np.nan)
