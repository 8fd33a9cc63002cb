"""The push protocol's cache message: what the draft packs is what the verifier unpacks, and the one
plain-Python lookup on the message (used by the draft's answer and by the push verifier) gives exactly
what the fork tensors say (hit, bonus rank, tokens) for every outcome key — hits and misses — so both
sides agree on every round's hit/miss without a message."""

from __future__ import annotations

import time

import pytest
import torch
from exec_helpers import tiny_models

from saguaro_exec.faults import DraftFault
from saguaro_exec.sampling import make_generator
from saguaro_exec.speculator.cache_message import CacheLayout, CacheRows
from saguaro_exec.speculator.validate import check_cache
from saguaro_exec.speculator.worker import DraftWorker, WorkerSpec

_, DRAFT = tiny_models()
K = 3


def _built(fanout=(3, 2, 1, 1), prompts=([1, 2, 3, 4], [7, 8]), temperature=0.0) -> tuple[DraftWorker, WorkerSpec]:
    ws = WorkerSpec(k=K, fanout=fanout, fanout_miss=(1, 1, 1, 1), sampler_c=1.0, backup="neural",
                    temperature=temperature, max_new=32)
    w = DraftWorker(DRAFT, [list(p) for p in prompts], ws, make_generator(0, "cpu"), time.perf_counter())
    w.start()
    w.build()
    return w, ws


def reference_lookup(cache, acc: torch.Tensor, bonus: torch.Tensor, n_rank: int):
    """(hit, bonus rank, tokens) straight from the fork tensors, vectorized (independent of the message)."""
    f = cache.fork
    rows = torch.arange(acc.shape[0])
    top_k, rank_k = f.top[rows, acc], f.rank[rows, acc]                 # [B, R]
    eq = (top_k == bonus.view(-1, 1)) & (rank_k >= 0)
    rank = torch.where(eq.any(-1), (rank_k * eq).sum(-1), torch.full_like(acc, -1))
    rank = torch.where(rank < n_rank, rank, torch.full_like(rank, -1))
    match = (f.branch_k == acc.view(-1, 1)) & (f.branch_t == bonus.view(-1, 1)) & f.valid
    return match.any(-1), rank, cache.tokens[rows, match.long().argmax(-1)]


def _keys(cache, vocab: int) -> list[tuple[int, int]]:
    """Every branch key of row 0 plus keys that cannot hit (rejection at each k with unforked tokens)."""
    f = cache.fork
    keys = [(int(k), int(t)) for k, t, v in zip(f.branch_k[0], f.branch_t[0], f.valid[0]) if v]
    return keys + [(k, t) for k in range(K + 1) for t in (0, vocab - 1, 17)]


@pytest.mark.parametrize("fanout", [(3, 2, 1, 1), (1, 0, 0, 1), (5, 4, 3, 2)])
def test_verifier_lookup_equals_the_drafts(fanout):
    w, ws = _built(fanout)
    vocab = DRAFT.config.vocab_size
    layout = CacheLayout.of(ws, vocab)
    packed = layout.pack(w.cache, w.times)
    assert torch.equal(packed[:-1], w.message[:-1])                 # what the draft's own lookup reads
    rows = packed.tolist()
    check_cache(rows, layout, vocab, [True, True])
    back, times = layout.unpack(packed, None)
    assert torch.equal(back.tokens, w.cache.tokens) and torch.equal(back.fork.branch_t, w.cache.fork.branch_t)
    assert set(times) == set(w.times)
    seen_hit = seen_miss = False
    for k, t in _keys(w.cache, vocab):
        acc, bonus = torch.tensor([k, 0]), torch.tensor([t, 0])
        hit, rank, toks = reference_lookup(w.cache, acc, bonus, ws.n_rank)
        h2, r2, t2, j2 = layout.lookup(rows, acc.tolist(), bonus.tolist(), ws.n_rank)
        assert h2 == hit.tolist() and r2 == rank.tolist()
        for b in range(2):
            if h2[b]:
                assert t2[b] == toks[b].tolist() and j2[b] >= 0
        seen_hit |= h2[0]
        seen_miss |= not h2[0]
        for table in (CacheRows(layout, rows), CacheRows(layout, w.message)):   # the draft's dict lookup
            assert [keys.get((a, t), -1) for keys, a, t in zip(table.keyed(layout), acc.tolist(),
                                                              bonus.tolist())] == j2
        w.index_cache()
        w._pending = None
        w.take(acc.tolist(), bonus.tolist(), [False, False])          # the draft's answer: the same reply
        r = w.reply()
        assert r.hit.tolist() == h2 and r.rank.tolist() == r2
        assert [row for row, h in zip(w.sent, h2) if h] == [row for row, h in zip(t2, h2) if h]
        w.sent = [[0] * K, [0] * K]
    assert seen_hit and seen_miss


def test_malformed_cache_is_a_draft_fault():
    w, ws = _built()
    vocab = DRAFT.config.vocab_size
    layout = CacheLayout.of(ws, vocab)
    good = layout.pack(w.cache, w.times)
    n = int(good[-1, 0])
    for garble in (lambda t: t[0, layout.tokens.start].fill_(vocab + 5),   # a drafted token outside the vocabulary
                   lambda t: t[0, layout.valid.start].fill_(7),            # a valid flag that is not 0/1
                   lambda t: t[0, layout.branch_k.start].fill_(K + 1),     # a branch position beyond K
                   lambda t: t[-1, 0].fill_(layout.n_max + 1)):            # more branches than the schedule allows
        bad = good.clone()
        garble(bad)
        with pytest.raises(DraftFault, match="malformed|branch|token|flags"):
            check_cache(bad.tolist(), layout, vocab, [True, True])
    assert n >= 1
