"""Unit tests of saguaro_exec.sampling: sigma_{F,C}, greedy and stochastic verification, n-gram backup."""

import random

import torch
from exec_helpers import chi2_pvalue

from saguaro_exec.sampling import greedy, make_generator, saguaro_probs, target_probs, verify
from saguaro_exec.speculator.fast_backup import _follow, ngram_propose


def test_saguaro_probs_scales_top_f_mass():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    plain = torch.softmax(logits, -1)
    s = saguaro_probs(logits, 1.0, 2, 0.25)
    expect = plain.clone()
    expect[0, :2] *= 0.25
    expect /= expect.sum()
    assert torch.allclose(s, expect)
    assert torch.allclose(saguaro_probs(logits, 1.0, 2, 1.0), plain)            # C = 1: plain
    assert torch.equal(saguaro_probs(logits, 0.0, 2, 0.25), target_probs(logits, 0.0))  # T = 0: greedy
    per_row = saguaro_probs(logits.expand(2, 4), 1.0, torch.tensor([0, 3]), 0.0)
    assert torch.allclose(per_row[0], plain[0])                                  # F = 0: unchanged
    assert torch.allclose(per_row[1], torch.tensor([0.0, 0.0, 0.0, 1.0]))       # C = 0: top-3 gone


def test_greedy_is_torch_argmax_ties_and_views_included():
    g = torch.Generator().manual_seed(0)
    for shape in [(1, 1, 272), (1, 32, 272), (3, 6, 17), (5, 272)]:
        x = torch.randint(0, 4, shape, generator=g).float()          # few values: many tied maxima per row
        for t in (x, x.transpose(0, -2) if x.dim() == 3 else x.t().contiguous().t(), x[..., ::2]):
            got = greedy(t)
            assert got.dtype == torch.long and torch.equal(got, t.argmax(-1))
    with torch.inference_mode():                                      # the executor's forwards run here
        y = torch.randn(2, 8, 272)
        assert torch.equal(greedy(y), y.argmax(-1))
    half = torch.randn(4, 272).to(torch.bfloat16)                     # other dtypes: torch's own argmax
    assert torch.equal(greedy(half), half.argmax(-1))


def test_greedy_verify_accepts_matching_prefix():
    p = torch.nn.functional.one_hot(torch.tensor([[1, 2, 3, 4]]), 5).float()     # greedy targets 1,2,3,4
    acc, bonus = verify(p, None, torch.tensor([[1, 2, 0]]), 0.0, None)
    assert acc.tolist() == [2] and bonus.tolist() == [3]
    acc, bonus = verify(p, None, torch.tensor([[1, 2, 3]]), 0.0, None)
    assert acc.tolist() == [3] and bonus.tolist() == [4]
    acc, bonus = verify(p, None, torch.tensor([[0, 2, 3]]), 0.0, None)
    assert acc.tolist() == [0] and bonus.tolist() == [1]


def test_stochastic_verify_is_exact_for_first_token():
    """200k independent rows: the first emitted token (draft token if accepted, else the bonus) must be
    distributed as p_1 even though the draft samples from a very different q (chi-square, p > 1e-3)."""
    gen = make_generator(0)
    n, vocab = 200_000, 6
    p1 = torch.tensor([0.05, 0.4, 0.3, 0.1, 0.1, 0.05])
    q1 = torch.tensor([0.5, 0.05, 0.05, 0.3, 0.05, 0.05])
    p = torch.stack([p1, torch.full((vocab,), 1 / vocab)]).expand(n, 2, vocab)
    q = q1.expand(n, 1, vocab)
    tokens = torch.multinomial(q1, n, replacement=True, generator=gen).view(n, 1)
    acc, bonus = verify(p, q, tokens, 1.0, gen)
    first = torch.where(acc > 0, tokens[:, 0], bonus)
    exact = {(t,): float(p1[t]) for t in range(vocab)}
    assert chi2_pvalue([(t,) for t in first.tolist()], exact) > 1e-3
    # acceptance rate is sum_x min(p, q)
    assert abs(float((acc > 0).double().mean()) - float(torch.minimum(p1, q1).sum())) < 0.01


def test_ngram_backup_copies_context_then_random():
    ctx = [5, 6, 7, 8, 1, 5, 6]
    assert ngram_propose(ctx, 3, 10, make_generator(0)) == [7, 8, 1]
    out = ngram_propose([1, 2, 3], 4, 10, make_generator(0))          # no repeat: random fall-back
    assert len(out) == 4 and all(0 <= t < 10 for t in out)


def _follow_brute(seq: list[int], max_n: int) -> int | None:
    """The fast backup's rule by its definition: the longest suffix n-gram (n <= max_n) with an earlier
    occurrence, and the token after its latest one."""
    for n in range(min(max_n, len(seq) - 1), 0, -1):
        ends = [s for s in range(len(seq) - n - 1, -1, -1) if seq[s:s + n] == seq[-n:]]
        if ends:
            return seq[ends[0] + n]
    return None


def test_ngram_follow_equals_its_definition():
    rng = random.Random(0)
    for _ in range(3000):
        seq = [rng.randrange(rng.choice([2, 3, 5, 20])) for _ in range(rng.randint(0, 40))]
        max_n = rng.choice([1, 2, 4, 6])
        assert _follow(seq, max_n) == _follow_brute(seq, max_n), (seq, max_n)
