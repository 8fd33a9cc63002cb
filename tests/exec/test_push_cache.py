"""The push protocol's cache message: what the draft packs is what the verifier unpacks, and the
verifier's plain-Python lookup gives exactly the draft's own lookup (hit, bonus rank, tokens) for every
outcome key — hits and misses — so both sides agree on every round's hit/miss without a message."""

from __future__ import annotations

import time

import pytest
import torch
from exec_helpers import tiny_models

from saguaro_exec.faults import DraftFault
from saguaro_exec.sampling import make_generator
from saguaro_exec.speculator.process import cache_dims
from saguaro_exec.speculator.protocol import cache_tensor, lookup_rows, unpack_cache
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


def _keys(cache, vocab: int) -> list[tuple[int, int]]:
    """Every branch key of row 0 plus keys that cannot hit (rejection at each k with unforked tokens)."""
    f = cache.fork
    keys = [(int(k), int(t)) for k, t, v in zip(f.branch_k[0], f.branch_t[0], f.valid[0]) if v]
    return keys + [(k, t) for k in range(K + 1) for t in (0, vocab - 1, 17)]


@pytest.mark.parametrize("fanout", [(3, 2, 1, 1), (1, 0, 0, 1), (5, 4, 3, 2)])
def test_verifier_lookup_equals_the_drafts(fanout):
    w, ws = _built(fanout)
    vocab = DRAFT.config.vocab_size
    n_max, r_max = cache_dims(ws, vocab)
    packed = cache_tensor(w.cache, K, n_max, r_max, w.times)
    rows = packed.tolist()
    check_cache(rows, K, vocab, n_max, [True, True])
    back, times = unpack_cache(packed, K, n_max, r_max, None)
    assert torch.equal(back.tokens, w.cache.tokens) and torch.equal(back.fork.branch_t, w.cache.fork.branch_t)
    assert set(times) == set(w.times)
    seen_hit = seen_miss = False
    for k, t in _keys(w.cache, vocab):
        acc, bonus = torch.tensor([k, 0]), torch.tensor([t, 0])
        hit, rank, toks, _ = w.cache.lookup(acc, bonus, ws.n_rank)
        h2, r2, t2, j2, _ = lookup_rows(rows, K, n_max, r_max, acc.tolist(), bonus.tolist(), ws.n_rank)
        assert h2 == hit.tolist() and r2 == rank.tolist()
        for b in range(2):
            if h2[b]:
                assert t2[b] == toks[b].tolist() and j2[b] >= 0
        seen_hit |= h2[0]
        seen_miss |= not h2[0]
    assert seen_hit and seen_miss


def test_malformed_cache_is_a_draft_fault():
    w, ws = _built()
    vocab = DRAFT.config.vocab_size
    n_max, r_max = cache_dims(ws, vocab)
    good = cache_tensor(w.cache, K, n_max, r_max, w.times)
    n = int(good[-1, 0])
    for garble in (lambda t: t[0, 3 * n_max].fill_(vocab + 5),     # a drafted token outside the vocabulary
                   lambda t: t[0, 2 * n_max].fill_(7),              # a valid flag that is not 0/1
                   lambda t: t[0, 0].fill_(K + 1),                  # a branch position beyond K
                   lambda t: t[-1, 0].fill_(n_max + 1)):            # more branches than the schedule allows
        bad = good.clone()
        garble(bad)
        with pytest.raises(DraftFault, match="malformed|branch|token|flags"):
            check_cache(bad.tolist(), K, vocab, n_max, [True, True])
    assert n >= 1
