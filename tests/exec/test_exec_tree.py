"""Forking and the speculation cache: candidates exclude the sent token and follow the fan-out; the
prepared (dict) lookup agrees with the vectorized one; ranks and hits agree with each other."""

import torch

from saguaro_exec.speculator.cache import SpecCache, fork


def _fork(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    bsz, k, vocab = 3, 3, 20
    d_logits = torch.randn(bsz, k + 1, vocab, generator=gen)
    sent = d_logits[:, :k].argmax(-1)                     # greedy draft: the sent token is the top one
    sent[1, 0] = d_logits[1, 0].argsort(descending=True)[5]  # one row sent a low-ranked token
    fan = torch.tensor([[3, 2, 1, 2], [1, 1, 1, 1], [0, 2, 0, 4]])
    return fork(d_logits, sent, fan, n_rank=8), d_logits, sent, fan


def test_fork_excludes_sent_token_and_follows_fanout():
    f, d_logits, sent, fan = _fork()
    for b in range(3):
        got = [(int(k), int(t)) for k, t, v in zip(f.branch_k[b], f.branch_t[b], f.valid[b]) if v]
        assert len(got) == int(fan[b].sum())
        for k in range(4):
            order = [t for t in d_logits[b, k].argsort(descending=True).tolist() if k == 3 or t != int(sent[b, k])]
            assert [t for kk, t in got if kk == k] == order[: int(fan[b, k])]


def test_prepared_lookup_matches_vectorized():
    f, d_logits, sent, fan = _fork(1)
    n = f.branch_t.shape[1]
    tokens = torch.arange(3 * n * 3).view(3, n, 3)
    q = torch.rand(3, n, 3, 20)
    for acc_l, bonus_l in [([0, 1, 3], [int(f.branch_t[0, 0]), 7, 2]), ([3, 0, 1], [1, 2, 3])]:
        acc, bonus = torch.tensor(acc_l), torch.tensor(bonus_l)
        plain = SpecCache(f, tokens, q).lookup(acc, bonus, 8)
        cache = SpecCache(f, tokens, q)
        cache.prepare(8)
        fast = cache.lookup(acc, bonus, 8)
        for a, b in zip(plain, fast):
            assert torch.equal(a, b)
        hit, rank = plain[0], plain[1]
        for b in range(3):                                # hit <=> rank below the fan-out there
            if rank[b] >= 0:
                assert bool(hit[b]) == (int(rank[b]) < int(fan[b, acc[b]]))
    assert bool(SpecCache(f, tokens, q).lookup(torch.tensor([0, 0, 0]), f.branch_t[:, 0], 8)[0][0])
