"""The draft's jit with its steps' inputs made once (engine/decode_steps.py) and sigma_{F,C}'s multipliers made
once per jit (sampling.step_scales) is bitwise the per-step jit it replaced: same tokens, q and logits, the same
K/V in every slot and the same generator state after, at T = 0 and T = 0.7 (C = 0.5 and 1), batch 1 and 3 with
finished rows, through the lean forward, the module call (hooks) and a model without a lean forward."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from exec_helpers import tiny_models

from saguaro_exec.engine.decode_steps import step_decoder
from saguaro_exec.engine.drafter import Drafter, _pad_rows
from saguaro_exec.engine.state import forwarded_rows
from saguaro_exec.model import ModelConfig, load_model, random_model
from saguaro_exec.model.transfer import to_device
from saguaro_exec.sampling import make_generator, saguaro_probs, sample, scale_top, step_scales, target_probs

ASSETS = Path(__file__).resolve().parents[2] / "saguaro_exec" / "assets" / "tiny"


def _old_saguaro_probs(logits, temperature, fanout, sampler_c):
    """sigma_{F,C} as sampling.saguaro_probs computed it per call before the multipliers were shared."""
    probs = target_probs(logits, temperature)
    if temperature <= 0.0 or sampler_c >= 1.0:
        return probs
    fan = torch.as_tensor(fanout)
    fmax = int(min(int(fan.max()), logits.shape[-1]))
    if fmax <= 0:
        return probs
    fan = to_device(fan, logits.device).expand(logits.shape[:-1])
    top = probs.topk(fmax, dim=-1).indices
    take = torch.arange(fmax, device=logits.device) < fan.unsqueeze(-1)
    in_top = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, top, take)
    scaled = torch.where(in_top, probs * sampler_c, probs)
    total = scaled.sum(-1, keepdim=True)
    return torch.where(total > 0, scaled / total.clamp_min(1e-30), probs)


def _reference_jit(dr: Drafter, fan: torch.Tensor):
    """Drafter.jit as it was: one ``decode`` per step with its slots as a list, sigma_{F,C} per step."""
    m = forwarded_rows(dr.done)
    chunks = [s[int(n):] for s, n in zip(dr.seqs[:m], dr.n_valid[:m])]
    logits = dr.runner.last_logits(chunks, dr.n_valid[:m])
    dr.n_valid = dr.lengths
    starts = dr.n_valid[:m].tolist()
    toks, qs, rows = [], [], []
    for i in range(dr.k):
        if dr.temperature <= 0:
            tok, q = logits.argmax(-1), None
        else:
            q = _old_saguaro_probs(logits, dr.temperature, fan[:m, i], dr.sampler_c)
            tok = sample(q, dr.gen)
        toks.append(tok)
        qs.append(q)
        rows.append(logits)
        if i + 1 < dr.k:
            logits = dr.runner.decode(tok.view(-1, 1), [s + i for s in starts])[:, 0]
    q_all = None if dr.temperature <= 0 else torch.stack(qs, 1)
    return _pad_rows(len(dr.seqs), torch.stack(toks, 1), q_all, torch.stack(rows, 1))


def _pair(model, prompts, done, temperature, c, k=7):
    out = []
    for _ in range(2):
        dr = Drafter(model, prompts, k, temperature, c, make_generator(3), 40)
        dr.prefill()
        dr.done = list(done)
        out.append(dr)
    return out


def _same(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))


def _check(model, prompts, done, temperature, c, hooked=False):
    new, ref = _pair(model, prompts, done, temperature, c)
    vocab, bsz, k = model.config.vocab_size, len(prompts), new.k
    fan = torch.tensor([[(b + i) % 4 for i in range(k + 1)] for b in range(bsz)])   # 0..3, some rows 0
    handle = model.register_forward_hook(lambda *a: None) if hooked else None
    try:
        for r in range(4):                                  # rounds: the prefix grows by accepted + bonus
            got, want = new.jit(fan), _reference_jit(ref, fan)
            for g, w in zip(got, want):
                assert _same(g, w), (r, temperature, c)
            assert torch.equal(new.n_valid, ref.n_valid)
            assert torch.equal(new.gen.get_state(), ref.gen.get_state())
            assert torch.equal(new.runner.cache.k, ref.runner.cache.k)
            assert torch.equal(new.runner.cache.v, ref.runner.cache.v)
            acc = [[k, 1, 0], [2, k, k], [0, 3, k], [1, 0, 2]][r][:bsz]   # K accepted: a 2-token chunk next
            bonus = [(7 * r + b) % vocab for b in range(bsz)]
            for dr in (new, ref):
                dr.advance(acc, bonus, got[0], dr.done, cached_spec=k - 1)
    finally:
        if handle is not None:
            handle.remove()


CASES = [([[5, 9, 2, 7]], [False]),                                     # batch 1
         ([[5, 9, 2, 7, 1], [3, 3], [8, 1, 4]], [False, True, False]),  # a finished row between live ones
         ([[5, 9, 2], [4, 4, 4, 1, 2, 6], [8]], [False, False, True])]  # a finished last row: not forwarded


@pytest.mark.parametrize("temperature,c", [(0.0, 1.0), (0.7, 0.5), (0.7, 1.0)])
def test_jit_with_steps_made_once_is_the_per_step_jit_bitwise(temperature, c):
    target, draft = tiny_models()
    shipped = load_model(ASSETS / "draft")
    for model in (draft, target, shipped):                 # 1 layer MQA, 2 layers GQA, the shipped draft
        for prompts, done in CASES:
            _check(model, prompts, done, temperature, c)
    _check(draft, *CASES[1], temperature, c, hooked=True)  # hooks: each step through the module call


def test_jit_without_a_lean_forward_decodes_each_step():
    """A model the lean forward does not serve (QK-norm): the steps fall back to ``decode``, same results."""
    cfg = ModelConfig(vocab_size=32, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                      intermediate_size=32, max_position_embeddings=256, qk_norm=True)
    model = random_model(cfg, seed=4, std=0.5)
    new, _ = _pair(model, *CASES[1], 0.7, 0.5)
    assert not new.runner.lean
    for prompts, done in CASES[:2]:
        _check(model, prompts, done, 0.7, 0.5)


def test_step_decoder_refuses_a_cache_overflow_before_any_step():
    _, draft = tiny_models()
    dr = Drafter(draft, [[1, 2, 3]], 3, 0.0, 1.0, make_generator(0), 4)
    with pytest.raises(RuntimeError, match="KV cache overflow"):
        step_decoder(dr.runner, [dr.runner.capacity - 1], 2)


def test_step_scales_are_saguaro_probs_multipliers_bitwise():
    """sigma_{F,C} from multipliers made for all steps at once is the per-call computation it replaced, with
    tied probabilities, rows with F = 0, F beyond the vocabulary and C = 0 with all the mass in the top F."""
    gen = torch.Generator().manual_seed(5)
    vocab, bsz, k = 12, 4, 5
    logits = torch.randn(bsz, k, vocab, generator=gen)
    logits[0, :, :6] = 1.5                                  # ties at the top
    logits[1, :, 3:] = -1e4                                 # all the mass in 3 tokens: C = 0 leaves none
    fan = torch.tensor([[0, 1, 2, 3, 20], [3, 3, 3, 0, 1], [2, 0, 1, 5, 12], [1, 4, 0, 0, 2]])
    for c in (0.0, 0.3, 1.0):
        scales = step_scales(fan, c, vocab)
        for i in range(k):
            want = _old_saguaro_probs(logits[:, i], 0.7, fan[:, i], c)
            assert torch.equal(scale_top(target_probs(logits[:, i], 0.7), scales[i]), want), (c, i)
            assert torch.equal(saguaro_probs(logits[:, i], 0.7, fan[:, i], c), want), (c, i)
    assert step_scales(torch.zeros(2, 3, dtype=torch.long), 0.5, vocab) == [None] * 3
