"""The lean inference forward (model/lean_forward.py) computes the same floating-point operations as the
module forward: bitwise-equal logits and K/V for decode, verification and tree steps, on the shipped tiny
checkpoints and on random models with biases, GQA or not, and after the weights change in place."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from saguaro_exec.model import ModelConfig, load_model, random_model
from saguaro_exec.model.lean_forward import lean_eligible
from saguaro_exec.model.masks import causal_mask

ASSETS = Path(__file__).resolve().parents[2] / "saguaro_exec" / "assets" / "tiny"


def _module_forward(model, *args):
    """The module forward: with grad enabled the lean path is not taken."""
    with torch.enable_grad():
        return model(*args).detach()


def _steps(model, batch: int = 2, capacity: int = 48):
    """(lean logits, module logits, lean cache, module cache) over a prefill, a decode, a verify chunk and a
    tree step with a branch mask, each on both caches."""
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    caches = [model.new_cache(batch, capacity), model.new_cache(batch, capacity)]
    outs: list[list[torch.Tensor]] = [[], []]
    start = torch.tensor([0] * batch)
    lens = [9, 1, 4]
    for t in lens:                                  # prefill 9, decode 1, verify 4: contiguous causal chunks
        tok = torch.randint(0, vocab, (batch, t), generator=gen)
        pos = start.view(-1, 1) + torch.arange(t).view(1, -1)
        mask = causal_mask(start, t, int(start.max()) + t)
        for i, lean in enumerate((True, False)):
            args = (tok, pos, caches[i], pos, mask)
            with torch.inference_mode():
                outs[i].append(model(*args) if lean else _module_forward(model, *args))
        start = start + t
    n = 5                                            # tree step: n branches see a prefix and their own slot
    s0 = int(start.max())
    tok = torch.randint(0, vocab, (batch, n), generator=gen)
    slots = s0 + torch.arange(n).view(1, -1).expand(batch, n)
    pos = torch.tensor([[s0 - 3 + j % 3 for j in range(n)]] * batch)
    mask = torch.zeros(batch, n, s0 + n, dtype=torch.bool)
    for j in range(n):
        mask[:, j, : s0 - 3 + j % 3] = True
        mask[:, j, s0 + j] = True
    for i, lean in enumerate((True, False)):
        with torch.inference_mode():
            args = (tok, pos, caches[i], slots, mask)
            outs[i].append(model(*args) if lean else _module_forward(model, *args))
    return outs[0], outs[1], caches[0], caches[1]


def _assert_same(model):
    with torch.inference_mode():
        assert lean_eligible(model, model.new_cache(1, 4), torch.ones(1, 1, 1, dtype=torch.bool), None)
    lean, ref, c_lean, c_ref = _steps(model)
    for a, b in zip(lean, ref):
        assert torch.equal(a, b), (a - b).abs().max()
    assert torch.equal(c_lean.k, c_ref.k) and torch.equal(c_lean.v, c_ref.v)


@pytest.mark.parametrize("name", ["draft", "target-deep"])
def test_lean_forward_is_bitwise_the_module_forward_on_checkpoints(name):
    _assert_same(load_model(ASSETS / name))


@pytest.mark.parametrize("arch,kv", [("llama", 2), ("llama", 4), ("qwen2", 2)])
def test_lean_forward_with_biases_and_gqa(arch, kv):
    cfg = ModelConfig(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=kv,
                      intermediate_size=48, architecture=arch, attention_bias=True)
    model = random_model(cfg, seed=3, std=0.3)
    with torch.no_grad():                            # biases random too (random_model zeroes them)
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.3)
    _assert_same(model)


def test_lean_forward_follows_weights_changed_in_place():
    """The concatenated q/k/v and gate/up weights are rebuilt after an in-place update of any source."""
    cfg = ModelConfig(vocab_size=40, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
                      intermediate_size=48)
    model = random_model(cfg, seed=4, std=0.3)
    _assert_same(model)
    with torch.no_grad():
        model.model.layers[0].self_attn.v_proj.weight.mul_(-1.5)
        model.model.layers[0].mlp.up_proj.weight.add_(0.1)
    _assert_same(model)


def test_lean_forward_follows_replaced_parameters_and_half_precision():
    """A parameter replaced after a forward (a copied source and a directly read one) is picked up; in
    bfloat16 (norms through their modules) the lean forward is still the module forward."""
    cfg = ModelConfig(vocab_size=40, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
                      intermediate_size=48)
    model = random_model(cfg, seed=5, std=0.3)
    _assert_same(model)
    attn = model.model.layers[0].self_attn
    for lin in (attn.q_proj, attn.o_proj):
        lin.weight = torch.nn.Parameter(lin.weight.detach() * 0.5)
    _assert_same(model)
    _assert_same(model.to(torch.bfloat16))


def test_lean_forward_follows_the_embedding_norm_and_new_data():
    """The first layer's normed-embedding table follows in-place updates of the embedding and of that norm;
    the transposed weight views follow a weight given new data (``p.data = ...``, as ``Module.to`` does)."""
    cfg = ModelConfig(vocab_size=40, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=48)
    model = random_model(cfg, seed=6, std=0.3)
    _assert_same(model)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.3)
    _assert_same(model)
    with torch.no_grad():
        model.model.layers[0].input_layernorm.weight.add_(0.2)
    _assert_same(model)
    for lin in (model.model.layers[1].self_attn.o_proj, model.model.layers[0].mlp.down_proj, model.lm_head):
        lin.weight.data = lin.weight.data * -0.7
        _assert_same(model)
