"""Token sampling: temperature, Saguaro sampling sigma_{F,C}, and the lossless verification rule.

All functions are batched over leading dimensions and draw randomness only from an explicit
``torch.Generator`` so that runs are reproducible. Temperature 0 means greedy everywhere.
"""

from __future__ import annotations

import torch

from saguaro_exec.model.transfer import to_device


def make_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A seeded generator on ``device`` (all sampling randomness flows through one of these)."""
    gen = torch.Generator(device=torch.device(device))
    gen.manual_seed(int(seed))
    return gen


_SEED_ROLES = ("target", "draft", "fallback")


def batch_seed(seed: int, batch: int, role: str) -> int:
    """The seed of one of batch ``batch``'s generators, distinct per batch and role: "target" (the
    verifier's or AR's sampling), "draft" (the draft's: SD here or the SSD draft process) or "fallback"
    (the in-process draft after a draft fault, a stream apart from the lost process's). Large primes keep
    the streams of a run's batches apart."""
    if role not in _SEED_ROLES:
        raise ValueError(f"role {role!r}: allowed {_SEED_ROLES}")
    if role == "target":
        return seed + 104729 * batch
    return seed + 7919 * (batch + 1) + (role == "fallback")


def batch_generator(seed: int, batch: int, role: str, device: str | torch.device = "cpu") -> torch.Generator:
    """``make_generator(batch_seed(seed, batch, role), device)``."""
    return make_generator(batch_seed(seed, batch, role), device)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """``logits.argmax(-1)`` (the first maximum, int64). On the CPU through numpy: torch's CPU argmax over
    the last dim reads a [32, 272] tree step in ~15 us, numpy's in ~2 (the same index, ties included)."""
    if logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.dim() > 1:
        return torch.from_numpy(logits.numpy().argmax(-1))
    return logits.argmax(-1)


def target_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / T) over the last dim; one-hot argmax at T = 0."""
    if logits.dtype != torch.float32:
        logits = logits.float()
    if temperature <= 0.0:
        out = torch.zeros_like(logits)
        return out.scatter_(-1, greedy(logits).unsqueeze(-1).to(out.device), 1.0)
    return torch.softmax(logits / temperature, dim=-1)


def saguaro_probs(logits: torch.Tensor, temperature: float, fanout: torch.Tensor | int,
                  sampler_c: float) -> torch.Tensor:
    """sigma_{F,C}: the draft's softmax with the mass of its top-F tokens scaled by C (Definition 14).

    ``fanout`` is an int or a tensor broadcastable to ``logits.shape[:-1]`` (pass it on the host: its
    maximum is read there, so a device ``logits`` needs no host sync). C = 1 is plain sampling;
    at T = 0 the draft is greedy (one-hot), whatever C. Rows whose scaled mass would vanish (C = 0 with
    F >= V) fall back to plain softmax.
    """
    probs = target_probs(logits, temperature)
    if temperature <= 0.0 or sampler_c >= 1.0:
        return probs
    fan = torch.as_tensor(fanout)
    fmax = int(min(int(fan.max()), logits.shape[-1]))
    if fmax <= 0:
        return probs
    fan = to_device(fan, logits.device).expand(logits.shape[:-1])
    take = torch.arange(fmax, device=logits.device) < fan.unsqueeze(-1)  # first F_row of the top fmax
    return scale_top(probs, torch.ones(take.shape, dtype=probs.dtype, device=probs.device).masked_fill_(take, sampler_c))


def step_scales(fanout: torch.Tensor, sampler_c: float, vocab: int, device: torch.device | str = "cpu"
                ) -> list[torch.Tensor | None]:
    """``scale_top``'s multipliers for K steps made at once from fanout [B, K] (on the host), on ``device``: per step
    [B, that step's max F] (C for each row's first F_row, 1 after), None where sigma_{F,C} is the plain softmax
    (C >= 1, or no row of the step has F > 0); what ``saguaro_probs`` makes per call."""
    k = fanout.shape[1]
    fmax = fanout.amax(0).clamp_max(vocab).tolist() if sampler_c < 1.0 else [0] * k
    top = max(fmax, default=0)
    if top <= 0:
        return [None] * k
    take = torch.arange(top) < fanout.unsqueeze(-1)                             # [B, K, top]
    scales = to_device(torch.ones(take.shape, dtype=torch.float32).masked_fill_(take, sampler_c), device)
    return [scales[:, i, :f] if f > 0 else None for i, f in enumerate(fmax)]


def scale_top(probs: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
    """sigma_{F,C} from the softmax ``probs`` (float32): the j-th most likely token's mass times scales[..., j]
    (C or 1; probs * 1 is probs), renormalized; rows whose scaled mass vanished keep ``probs``."""
    if scales is None:
        return probs
    top = probs.topk(scales.shape[-1], dim=-1).indices                       # [..., fmax], best first
    scaled = probs * torch.ones_like(probs).scatter_(-1, top, scales)
    total = scaled.sum(-1, keepdim=True)
    return torch.where(total > 0, scaled / total.clamp_min(1e-30), probs)


def sample(probs: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    """One token id per row of ``probs`` (any leading shape, rows need not be normalized), by inverse
    CDF in float64: P(i) = probs_i / sum; zero-probability tokens are never drawn. (~7x faster than
    torch.multinomial for small batches on CPU.)"""
    flat = (probs if probs.dim() == 2 else probs.reshape(-1, probs.shape[-1])).double()
    cdf = flat.cumsum(-1)
    u = torch.rand(flat.shape[0], 1, generator=gen, device=flat.device, dtype=torch.float64) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_max(flat.shape[-1] - 1).view(probs.shape[:-1])


def leading_true(flags: torch.Tensor) -> torch.Tensor:
    """Number of leading True values along the last dim (the accepted prefix length)."""
    return flags.long().cumprod(-1).sum(-1)


def verify(p: torch.Tensor, q: torch.Tensor | None, tokens: torch.Tensor, temperature: float,
           gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative-sampling verification of ``tokens`` [B, K] against target probs ``p`` [B, K+1, V].

    ``q`` [B, K, V] is the distribution each draft token was actually sampled from. Token i is
    accepted with min(1, p_i/q_i); at the first rejection the bonus comes from norm(max(0, p - q)),
    after K accepts from p_{K+1}. At T = 0 (``q`` may be None) this is exact greedy matching.
    Returns (accepted count [B], bonus token [B]).
    """
    bsz, k = tokens.shape
    rows = torch.arange(bsz, device=tokens.device)
    if temperature <= 0.0:
        best = greedy(p)                                             # [B, K+1]
        acc = leading_true(best[:, :k] == tokens)
        return acc, best[rows, acc]
    assert q is not None, "verification at temperature > 0 needs the draft distributions q"
    p_tok = p[:, :k].gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    q_tok = q.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    u = torch.rand(bsz, k, generator=gen, device=p.device)
    acc = leading_true(u * q_tok < p_tok)                            # u < p/q without dividing
    p_at = p[rows, acc]                                              # [B, V]
    q_pad = torch.cat([q, torch.zeros_like(q[:, :1])], dim=1)        # q_{K+1} = 0 -> residual = p
    resid = (p_at - q_pad[rows, acc]).clamp_min(0.0)
    mass = resid.sum(-1, keepdim=True)
    resid = torch.where(mass > 0, resid / mass.clamp_min(1e-30), p_at)
    return acc, sample(resid, gen)
