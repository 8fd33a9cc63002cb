"""Shared helpers for the executor tests (no tests here): tiny random models, plain greedy, chi-square."""

from __future__ import annotations

import functools
import itertools
import os

import numpy as np
import torch

from saguaro_exec.model import ModelConfig, random_model


def tiny_models(vocab: int = 32, std: float = 0.5, context: int = 2048):
    """(target, draft): a 2-layer and a 1-layer random model over the same vocabulary, ``context`` positions
    (runs that must outlast a signal ask for a long one: generation never runs past it)."""
    t = ModelConfig(vocab_size=vocab, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                    intermediate_size=64, max_position_embeddings=context)
    d = ModelConfig(vocab_size=vocab, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                    intermediate_size=32, max_position_embeddings=context)
    return random_model(t, seed=1, std=std), random_model(d, seed=2, std=std)


def as_fn(model):
    """prefix -> next-token logits, full forward without a cache, memoized (for the reference)."""

    @functools.cache
    def fn(prefix: tuple) -> torch.Tensor:
        with torch.no_grad():
            return model(torch.tensor([prefix]))[0, -1].float()

    return lambda prefix: fn(tuple(prefix))


def plain_greedy(model, prompt: list[int], n: int) -> list[int]:
    """The target's own greedy continuation, recomputed from scratch every step (no KV cache)."""
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq]))[0, -1].argmax()))
    return seq[len(prompt):]


def exact_joint(fn, prompt: list[int], m: int, vocab: int, temperature: float) -> dict:
    """Exact probability of every m-token continuation under ``fn`` at ``temperature``."""
    out = {}
    for seq in itertools.product(range(vocab), repeat=m):
        prob, prefix = 1.0, list(prompt)
        for t in seq:
            prob *= float(torch.softmax(fn(prefix) / temperature, -1)[t])
            prefix.append(t)
        out[seq] = prob
    return out


def chi2_pvalue(samples: list[tuple], exact: dict, min_expected: float = 5.0) -> float:
    """Pearson chi-square p-value of the samples against exact cell probabilities; cells with expected
    count < min_expected are pooled into one."""
    n = len(samples)
    counts: dict = {}
    for s in samples:
        counts[tuple(s)] = counts.get(tuple(s), 0) + 1
    obs, exp, pool_o, pool_e = [], [], 0.0, 0.0
    for cell, prob in exact.items():
        if prob * n >= min_expected:
            obs.append(counts.get(cell, 0))
            exp.append(prob * n)
        else:
            pool_o += counts.get(cell, 0)
            pool_e += prob * n
    if pool_e > 0:
        obs.append(pool_o)
        exp.append(pool_e)
    from scipy.stats import chisquare

    obs_a, exp_a = np.array(obs, dtype=float), np.array(exp, dtype=float)
    exp_a *= obs_a.sum() / exp_a.sum()
    return float(chisquare(obs_a, exp_a).pvalue)


def handoff_held(pid: int | str = "self") -> bool:
    """Whether a process still holds or maps a shared-memory hand-off channel (speculator/shm.py)."""
    fd_dir = f"/proc/{pid}/fd"
    links = []
    for f in os.listdir(fd_dir):
        try:
            links.append(os.readlink(os.path.join(fd_dir, f)))
        except OSError:
            continue
    with open(f"/proc/{pid}/maps") as maps:
        return any("saguaro-handoff" in x for x in links) or "saguaro-handoff" in maps.read()
