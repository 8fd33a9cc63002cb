"""Forking and the speculation cache: candidates exclude the sent token and follow the fan-out; the
message lookup (``CacheLayout.lookup``) agrees with a brute-force reading of the draft logits; ranks and
hits agree with each other."""

import torch

from saguaro_exec.speculator.cache import SpecCache, fork
from saguaro_exec.speculator.cache_message import CacheLayout


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


def test_lookup_matches_brute_force():
    f, d_logits, sent, fan = _fork(1)
    n, r = f.branch_t.shape[1], f.top.shape[-1]
    tokens = torch.arange(3 * n * 3).view(3, n, 3)
    layout = CacheLayout(k=3, n_max=n + 2, r_max=r + 1)               # padded, as a run's messages are
    rows = layout.pack(SpecCache(f, tokens, None)).tolist()
    for acc, bonus in [([0, 1, 3], [int(f.branch_t[0, 0]), 7, 2]), ([3, 0, 1], [1, 2, 3])]:
        hit, rank, toks, js = layout.lookup(rows, acc, bonus, 8)
        for b in range(3):
            order = [t for t in d_logits[b, acc[b]].argsort(descending=True).tolist()
                     if acc[b] == 3 or t != int(sent[b, acc[b]])]
            want_rank = order.index(bonus[b]) if bonus[b] in order[:r - (acc[b] < 3)] else -1
            assert rank[b] == (want_rank if want_rank < 8 else -1)
            branches = [j for j in range(n) if bool(f.valid[b, j]) and int(f.branch_k[b, j]) == acc[b]
                        and int(f.branch_t[b, j]) == bonus[b]]
            assert hit[b] == bool(branches) and js[b] == (branches[0] if branches else -1)
            assert toks[b] == (tokens[b, branches[0]].tolist() if branches else [0, 0, 0])
            if rank[b] >= 0:                              # hit <=> rank below the fan-out there
                assert hit[b] == (rank[b] < int(fan[b, acc[b]]))
    assert layout.lookup(rows, [0, 0, 0], f.branch_t[:, 0].tolist(), 8)[0][0]


def test_tree_drafts_each_branch_as_plain_greedy_would():
    """Every valid branch (k, t) of a built cache holds the draft's own greedy continuation of prefix +
    the k accepted sent tokens + t, for rows of different lengths (the tree region's common offset)."""
    import time

    from exec_helpers import plain_greedy, tiny_models

    from saguaro_exec.sampling import make_generator
    from saguaro_exec.speculator.worker import DraftWorker, WorkerSpec

    _, draft = tiny_models()
    k = 3
    ws = WorkerSpec(k=k, fanout=(3, 2, 1, 2), fanout_miss=(1, 1, 1, 1), sampler_c=1.0, backup="neural",
                    temperature=0.0, max_new=16)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9, 8]]
    w = DraftWorker(draft, [list(p) for p in prompts], ws, make_generator(0, "cpu"), time.perf_counter())
    w.start()
    for _ in range(2):                          # the second build starts from an applied outcome
        w.build()
        c = w.cache
        for b in range(2):
            for j in range(c.tokens.shape[1]):
                if not bool(c.fork.valid[b, j]):
                    continue
                a, t = int(c.fork.branch_k[b, j]), int(c.fork.branch_t[b, j])
                prefix = w.drafter.seqs[b] + w.sent[b][:a] + [t]
                assert c.tokens[b, j].tolist() == plain_greedy(draft, prefix, k), (b, j)
        f = c.fork
        w.take([int(f.branch_k[0, 0]), int(f.branch_k[1, 0])], [int(f.branch_t[0, 0]), int(f.branch_t[1, 0])],
               [False, False])
