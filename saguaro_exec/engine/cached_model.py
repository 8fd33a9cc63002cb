"""A model plus its static KV cache, with the two forward shapes every engine needs.

Slot layout per sequence: slot i holds logical position i for the true prefix (and for the linear
speculation right after it); the draft's tree region sits beyond that, see ``tree.py``.

A batch may forward fewer rows than the cache holds (continuous batching: live rows sit in rows 0..n-1,
see refill.py): a plain cache is then viewed, a tensor-parallel one (which cannot be viewed) padded.

With an ``Accel`` (accel.py) the forwards take the GPU fast path: the cache is leased from the model's
GraphPool (rows padded to a power of two, capacity to a slot bucket) and steps replay CUDA graphs; causal
chunks use flash-attn when selected. Without one (CPU), every call is the plain eager forward.
"""

from __future__ import annotations

import weakref

import torch

from saguaro_exec.model import Transformer, causal_mask
from saguaro_exec.model.accel import Accel
from saguaro_exec.model.graphs import MAX_GRAPH_TOKENS, pad_step
from saguaro_exec.model.lean_forward import additive_mask, lean_capable, lean_logits, rope_of, write_index
from saguaro_exec.model.transfer import to_device

_TRIANGLE_MAX = 4096     # slots: the cached causal triangle stays <= 16 MiB (bool; 2048 and 16 MiB additive)


def kv_capacity(prompts: list[list[int]], max_new: int, k: int = 0) -> int:
    """Cache slots a batch's true sequences can need: the longest prompt, ``max_new`` tokens, and the
    overshoot of the last round (up to K accepted + bonus past ``max_new``, then K + 1 verified ones)."""
    return max(len(p) for p in prompts) + max_new + 2 * k + 4


class CachedModel:
    """``model`` with a preallocated cache of ``capacity`` slots for ``batch`` sequences."""

    def __init__(self, model: Transformer, batch: int, capacity: int, accel: Accel | None = None) -> None:
        self.model = model
        self.device = model.device
        self.batch, self.capacity = batch, capacity
        self._triangle: torch.Tensor | None = None                # see ``_causal``
        self.pool = None if accel is None else accel.pool(model)
        self.flash = accel is not None and accel.uses_flash(model)
        if self.pool is None:
            self.cache = model.new_cache(batch, capacity)     # a TPTarget (tp.py) makes its sharded cache here
        else:
            self.cache = self.pool.lease(batch, capacity)
            weakref.finalize(self, self.pool.release, self.cache)
        self._plain = self.pool is None and self.movable          # eager forwards over a viewable cache
        self._lean = self._plain and lean_capable(model)          # ... through the lean forward (``_direct``)
        self._row_views: dict[int, object] = {}                   # the cache's first b rows, made once per b

    @torch.inference_mode()
    def extend(self, chunks: list[list[int]], start: torch.Tensor | list[int], graphed: bool = True
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append chunk b at slots/positions start[b].. (causal); returns (logits [B, T, V], lengths [B]).

        Chunks of different lengths are right-padded with token 0; padded rows write K/V beyond the
        chunk, which no later query sees before it is overwritten. ``graphed=False`` (prefills) keeps a
        one-off shape out of the CUDA graphs.
        """
        logits, sizes = self._extend(chunks, start, graphed)
        return logits, torch.tensor(sizes, dtype=torch.long)

    def _extend(self, chunks: list[list[int]], start: torch.Tensor | list[int], graphed: bool
                ) -> tuple[torch.Tensor, list[int]]:
        """``extend`` with the chunk sizes as a list (the callers below check them in Python)."""
        sizes = [len(c) for c in chunks]
        width = max(1, max(sizes))
        if min(sizes) == width:                                   # common case: no padding needed
            toks = torch.tensor(chunks, dtype=torch.long)
        else:
            toks = torch.tensor([c + [0] * (width - len(c)) for c in chunks], dtype=torch.long)
        return self._decode(toks, start, graphed), sizes

    @torch.inference_mode()
    def decode(self, tokens: torch.Tensor, start: torch.Tensor | list[int], graphed: bool = True) -> torch.Tensor:
        """Append tokens [B, T] (host or device) at slots/positions start[b].. (causal): logits [B, T, V]."""
        return self._decode(tokens, start, graphed)

    def _decode(self, tokens: torch.Tensor, start: torch.Tensor | list[int], graphed: bool) -> torch.Tensor:
        width = tokens.shape[1]
        starts = start.tolist() if isinstance(start, torch.Tensor) else list(start)
        need = max(starts) + width
        if need > self.capacity:
            raise RuntimeError(f"KV cache overflow: need {need} slots, capacity {self.capacity}")
        positions = torch.tensor([range(s, s + width) for s in starts], dtype=torch.long)
        if self.flash:
            seqlens = torch.tensor([s + width for s in starts], dtype=torch.int32)
            return self._fast(tokens, positions, positions, None, seqlens, graphed)
        mask = self._causal(starts, positions, width, need)
        if self.pool is not None:
            return self._fast(tokens, positions, positions, mask, None, graphed)
        return self._eager(tokens, positions, positions, mask)

    def _causal(self, starts: list[int], positions: torch.Tensor, width: int, need: int) -> torch.Tensor:
        """``causal_mask(starts, width, need)`` on the plain path read from one cached lower triangle (additive
        on the lean path: no conversion per forward): at batch 1 a view, at more rows one row gather (query t of
        row b is triangle row starts[b] + t). Building and converting the mask cost a 2-row step ~10% of a tiny
        model's forward (2026-12-03: 0.07 ms of 0.84), the step from 1 to 2 rows the executor fit could not
        express. Else (large ``need``, another path) built."""
        most = _TRIANGLE_MAX // 2 if self._lean else _TRIANGLE_MAX
        if need > most or not self._plain:
            return causal_mask(torch.tensor(starts, dtype=torch.long), width, need)
        if self._triangle is None or self._triangle.shape[0] < need:
            n = min(most, max(need, self.capacity))
            self._triangle = self.step_mask(torch.ones(n, n, dtype=torch.bool).tril())  # [i, s]: s <= i
        if len(starts) == 1:
            return self._triangle[starts[0]:need, :need].unsqueeze(0)
        # positions [B, T] (host): row b's queries sit at starts[b] + t
        return self._triangle[:, :need].index_select(0, positions.reshape(-1)).view(len(starts), width, need)

    def step_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """A bool mask made once for many forwards, in the form they take best: additive on the lean path
        (the conversion SDPA would make per layer and forward, made once), else as it is."""
        return additive_mask(mask, self.model.dtype) if self._lean else mask

    def step_inputs(self, positions: torch.Tensor, slots: torch.Tensor) -> list[tuple]:
        """Per step of positions / slots [S, B, T] (on the model's device), what ``tree_step`` reuses: the
        RoPE tables and the K/V write index, made for all S steps at once on the lean path (else Nones)."""
        if not self._lean:
            return [(None, None)] * positions.shape[0]
        cos, sin = rope_of(self.model, positions, self.model.dtype, self.capacity)
        return list(zip(zip(cos.unbind(0), sin.unbind(0)), write_index(self.cache, slots).unbind(0)))

    def _direct(self) -> bool:
        """Call the lean forward without the module call: the lean path, no grad, no module hooks (which a
        profiler or a benchmark may have registered) and no subclass ``forward`` (a wrapped or instrumented
        model must see every call)."""
        m = self.model
        return (self._lean and not torch.is_grad_enabled() and not (m._forward_hooks or m._forward_pre_hooks)
                and type(m).forward is Transformer.forward)

    def _rows(self, b: int):
        """The cache's first ``b`` rows (a view made once per b; the whole cache at its batch)."""
        if b == self.cache.batch:
            return self.cache
        got = self._row_views.get(b)
        if got is None:
            got = self._row_views[b] = self.cache.rows(0, b)
        return got

    @property
    def lean(self) -> bool:
        """Forwards take the lean forward (``step_inputs`` / ``step_mask`` then make what steps reuse)."""
        return self._lean

    @property
    def movable(self) -> bool:
        """Rows can be viewed and copied here (not a tensor-parallel cache, whose shards live elsewhere)."""
        return not hasattr(self.cache, "tp_id")

    def move_row(self, src: int, dst: int) -> None:
        """Row ``dst`` takes row ``src``'s K/V (a live row filling a finished one's place)."""
        self.cache.copy_row(src, dst)

    def prefill_row(self, row: int, chunk: list[int]) -> None:
        """Cache ``chunk`` at slots 0.. of row ``row`` alone (a refilled row); the other rows keep theirs."""
        self.prefill_rows([row], [chunk])

    @torch.inference_mode()
    def prefill_rows(self, rows: list[int], chunks: list[list[int]]) -> None:
        """Cache chunks[i] at slots 0.. of row rows[i] (refilled rows) while the other rows keep theirs: one
        forward per run of consecutive rows (a viewable cache; rows that finish together are usually
        consecutive), one forward for all of them otherwise, instead of one forward per row."""
        todo = sorted((r, c) for r, c in zip(rows, chunks) if c)
        if not todo:
            return
        if not self.movable:
            self._prefill_whole(todo)
            return
        runs: list[list[tuple[int, list[int]]]] = []
        for r, c in todo:
            if runs and runs[-1][-1][0] == r - 1:
                runs[-1].append((r, c))
            else:
                runs.append([(r, c)])
        dev = self.device
        for run in runs:
            t = max(len(c) for _, c in run)
            toks = torch.zeros(len(run), t, dtype=torch.long)
            for i, (_, c) in enumerate(run):
                toks[i, : len(c)] = torch.tensor(c, dtype=torch.long)   # right-padded: see extend
            ar = torch.arange(t).view(1, t).expand(len(run), t).to(dev)
            mask = causal_mask(torch.zeros(len(run), dtype=torch.long), t, t).to(dev)
            self.model(toks.to(dev), ar, self.cache.rows(run[0][0], len(run)), ar, mask)

    def _prefill_whole(self, todo: list[tuple[int, list[int]]]) -> None:
        """A cache that cannot be viewed (tensor parallel): one forward of the whole batch, in which the
        rows not being refilled write their last slot, which no query of theirs ever sees."""
        b, cap = self.cache.batch, self.capacity
        t = max(len(c) for _, c in todo)
        toks = torch.zeros(b, t, dtype=torch.long)
        pos = torch.zeros(b, t, dtype=torch.long)
        slots = torch.full((b, t), cap - 1, dtype=torch.long)
        mask = torch.zeros(b, t, cap, dtype=torch.bool)
        mask[:, :, cap - 1] = True
        ar = torch.arange(t)
        for row, c in todo:
            toks[row, : len(c)] = torch.tensor(c, dtype=torch.long)
            pos[row], slots[row] = ar, ar
            mask[row] = causal_mask(torch.zeros(1, dtype=torch.long), t, cap)[0]
        dev = self.device
        self.model(toks.to(dev), pos.to(dev), self.cache, slots.to(dev), mask.to(dev))

    def _eager(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor | None,
               **extra: torch.Tensor) -> torch.Tensor:
        """The plain forward over the first ``tokens.shape[0]`` rows of the cache."""
        dev = self.device
        b = tokens.shape[0]
        tokens, positions, slots = tokens.to(dev), positions.to(dev), slots.to(dev)
        mask = None if mask is None else mask.to(dev)
        if mask is not None and not extra and self._direct():
            return lean_logits(self.model, tokens, positions, self._rows(b), slots, mask)
        cache = self.cache
        if b < cache.batch and self.movable:
            cache = self._rows(b)
        elif b < cache.batch:
            tokens, positions, slots, mask, _ = pad_step(tokens, positions, slots, mask, None, cache.batch)
        out = self.model(tokens, positions, cache, slots, mask, **extra)
        return out if out.shape[0] == b else out[:b]

    @torch.inference_mode()
    def last_logits(self, chunks: list[list[int]], start: torch.Tensor, graphed: bool = True) -> torch.Tensor:
        """``extend`` and keep only the logits after each chunk's last real token: [B, V]."""
        logits, sizes = self._extend(chunks, start, graphed)
        if min(sizes) == logits.shape[1]:
            return logits[:, -1]
        idx = to_device(torch.tensor([max(0, s - 1) for s in sizes], dtype=torch.long), logits.device)
        return logits[torch.arange(len(chunks), device=logits.device), idx]

    @torch.inference_mode()
    def tail_logits(self, chunks: list[list[int]], start: torch.Tensor, n: int) -> torch.Tensor:
        """``extend`` and keep the logits of each chunk's last ``n`` real tokens: [B, n, V]."""
        logits, sizes = self._extend(chunks, start, True)
        if min(sizes) == logits.shape[1] >= n:
            return logits[:, logits.shape[1] - n:]
        idx = to_device((torch.tensor(sizes, dtype=torch.long).view(-1, 1) - n + torch.arange(n).view(1, -1))
                        .clamp_min(0), logits.device)
        return logits.gather(1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """Raw forward with explicit slots and mask (tree steps)."""
        if self.pool is not None:
            return self._fast(tokens, positions, slots, mask, None, True)
        return self._eager(tokens, positions, slots, mask)

    def tree_step(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor,
                  made: tuple = (None, None)) -> torch.Tensor:
        """``forward`` for one of many steps on the model's device (the tree's), with its ``step_inputs``
        ``made`` and a ``step_mask``: on the lean path the lean forward at once (caller under inference
        mode), reusing them; else ``forward``."""
        if self._direct():
            return lean_logits(self.model, tokens, positions, self._rows(tokens.shape[0]), slots, mask, *made)
        return self.forward(tokens, positions, slots, mask)

    def _fast(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor | None,
              seqlens: torch.Tensor | None, graphed: bool) -> torch.Tensor:
        """The Accel path: inputs up without host sync, rows padded to the pool cache, a graph replayed."""
        dev = self.device
        tokens, positions, slots = to_device(tokens, dev), to_device(positions, dev), to_device(slots, dev)
        mask = None if mask is None else to_device(mask, dev)
        seqlens = None if seqlens is None else to_device(seqlens, dev)
        extra = {} if seqlens is None else {"seqlens": seqlens}
        if self.pool is None:                                     # flash without graphs
            return self._eager(tokens, positions, slots, mask, **extra)
        b = tokens.shape[0]
        tokens, positions, slots, mask, seqlens = pad_step(tokens, positions, slots, mask, seqlens, self.cache.batch)
        if graphed and tokens.shape[1] <= MAX_GRAPH_TOKENS:
            return self.pool.forward(self.cache, tokens, positions, slots, mask, seqlens)[:b].clone()
        extra = {} if seqlens is None else {"seqlens": seqlens}
        return self.model(tokens, positions, self.cache, slots, mask, **extra)[:b]
