"""Transformer forward paths: full vs cached decode, multi-token verify, tree masks, GQA / QK-norm / RoPE scaling."""

import math

import pytest
import torch

from saguaro_exec.model import (
    ConfigError,
    KVCache,
    ModelConfig,
    allow,
    causal_mask,
    contiguous_slots,
    prefix_mask,
    random_model,
)
from saguaro_exec.model.rope import inv_freq

LLAMA31_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 32}


def make(arch="llama", kv=2, tie=False, scaling=None, seed=0):
    cfg = ModelConfig(vocab_size=100, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=kv,
                      intermediate_size=96, qk_norm=arch == "qwen3", architecture=arch,
                      tie_word_embeddings=tie, rope_scaling=scaling, rope_theta=500.0)
    return random_model(cfg, seed=seed, std=0.2)


VARIANTS = [
    dict(arch="llama", kv=4),                            # MHA
    dict(arch="llama", kv=2, tie=True),                  # GQA, tied
    dict(arch="llama", kv=1, scaling=LLAMA31_SCALING),   # MQA + Llama-3.1 rope scaling
    dict(arch="qwen3", kv=2),                            # QK-norm
]


def full_logits(m, tokens):
    with torch.no_grad():
        return m(tokens)


@pytest.mark.parametrize("variant", VARIANTS)
def test_multi_token_equals_token_by_token(variant):
    m = make(**variant)
    torch.manual_seed(0)
    B, T = 3, 9
    tokens = torch.randint(0, 100, (B, T))
    ref = full_logits(m, tokens)
    with torch.no_grad():
        # token-by-token decode
        cache = m.new_cache(B, 16)
        steps = []
        for t in range(T):
            pos = torch.full((B, 1), t)
            steps.append(m(tokens[:, t:t + 1], pos, cache, pos, causal_mask(torch.full((B,), t), 1, t + 1)))
        decode = torch.cat(steps, 1)
        # prefill 4, then verify the remaining 5 in one call (T = K + 1)
        cache2 = m.new_cache(B, 16)
        start = torch.zeros(B, dtype=torch.long)
        a = m(tokens[:, :4], contiguous_slots(start, 4), cache2, contiguous_slots(start, 4), causal_mask(start, 4, 4))
        start = torch.full((B,), 4)
        b = m(tokens[:, 4:], contiguous_slots(start, 5), cache2, contiguous_slots(start, 5), causal_mask(start, 5, 9))
    assert decode.dtype == torch.float32
    torch.testing.assert_close(decode, ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.cat([a, b], 1), ref, atol=1e-4, rtol=1e-4)


def test_ragged_rows_with_different_start():
    """Rows at different lengths in one batch: each row's logits match its own unbatched run."""
    m = make(kv=2)
    torch.manual_seed(1)
    seqs = [torch.randint(0, 100, (n,)) for n in (5, 8)]
    with torch.no_grad():
        cache = m.new_cache(2, 12)
        # prefill both rows' prefixes (lengths 4 and 7) padded to 7; row 0's padding lands in unused slots
        lens = torch.tensor([4, 7])
        pre = torch.zeros(2, 7, dtype=torch.long)
        for b, s in enumerate(seqs):
            pre[b, : lens[b]] = s[: lens[b]]
        zero = torch.zeros(2, dtype=torch.long)
        m(pre, contiguous_slots(zero, 7), cache, contiguous_slots(zero, 7), causal_mask(zero, 7, 7))
        # one decode step for each row at its own length
        nxt = torch.stack([seqs[0][4], seqs[1][7]]).view(2, 1)
        out = m(nxt, lens.view(2, 1), cache, lens.view(2, 1), causal_mask(lens, 1, 8))
    for b, s in enumerate(seqs):
        ref = full_logits(m, s[: lens[b] + 1].view(1, -1))[0, -1]
        torch.testing.assert_close(out[b, 0], ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("variant", [VARIANTS[1], VARIANTS[3]])
def test_tree_step_equals_separate_branches(variant):
    """Draft tree steps: branches of different glue lengths share one prefix; each query sees the prefix,
    its glue tokens and its own earlier tree tokens only."""
    m = make(**variant)
    torch.manual_seed(2)
    P = 6
    prefix = torch.randint(0, 100, (1, P))
    glue = [[], [11], [12, 13]]                      # per-branch glue tokens
    tree = [[21, 22], [31, 32], [41, 42]]            # per-branch tokens of two tree steps
    nb = len(glue)
    with torch.no_grad():
        cache = m.new_cache(1, 32)
        zero = torch.zeros(1, dtype=torch.long)
        m(prefix, contiguous_slots(zero, P), cache, contiguous_slots(zero, P), causal_mask(zero, P, P))
        # glue: all glue tokens in one call, flattened, each sees prefix + its own branch's earlier glue
        flat = [(j, i, tok) for j, g in enumerate(glue) for i, tok in enumerate(g)]
        glue_slot = {}
        next_slot = P
        if flat:
            toks, pos, slots, vis = [], [], [], []
            for j, i, tok in flat:
                glue_slot[(j, i)] = next_slot
                toks.append(tok)
                pos.append(P + i)
                slots.append(next_slot)
                vis.append([glue_slot[(j, k)] for k in range(i + 1)])
                next_slot += 1
            T, S = len(toks), next_slot
            mask = allow(prefix_mask(torch.tensor([P]), T, S), _pad(vis))
            m(torch.tensor([toks]), torch.tensor([pos]), cache, torch.tensor([slots]), mask)
        own = [[glue_slot[(j, i)] for i in range(len(glue[j]))] for j in range(nb)]
        outs = []
        for step in range(2):  # T = number of branches
            toks = [tree[j][step] for j in range(nb)]
            pos = [P + len(glue[j]) + step for j in range(nb)]
            slots = list(range(next_slot, next_slot + nb))
            for j in range(nb):
                own[j].append(slots[j])
            next_slot += nb
            mask = allow(prefix_mask(torch.tensor([P]), nb, next_slot), _pad(own))
            outs.append(m(torch.tensor([toks]), torch.tensor([pos]), cache, torch.tensor([slots]), mask)[0])
    for j in range(nb):
        seq = torch.cat([prefix[0], torch.tensor(glue[j] + tree[j], dtype=torch.long)]).view(1, -1)
        ref = full_logits(m, seq)[0, -2:]
        torch.testing.assert_close(torch.stack([outs[0][j], outs[1][j]]), ref, atol=1e-4, rtol=1e-4)

    # accept branch 2: copy its glue + tree K/V contiguous after the prefix, then keep decoding
    j = 2
    accepted = own[j]
    dst = list(range(P, P + len(accepted)))
    cache.copy_slots(0, accepted, dst)
    L = P + len(accepted)
    with torch.no_grad():
        out = m(torch.tensor([[7]]), torch.tensor([[L]]), cache, torch.tensor([[L]]), causal_mask(torch.tensor([L]), 1, L + 1))
    seq = torch.cat([prefix[0], torch.tensor(glue[j] + tree[j] + [7])]).view(1, -1)
    torch.testing.assert_close(out[0, 0], full_logits(m, seq)[0, -1], atol=1e-4, rtol=1e-4)


def _pad(rows):
    n = max(len(r) for r in rows)
    return torch.tensor([[r + [-1] * (n - len(r)) for r in rows]])


def test_copy_slots_batched_matches_per_row():
    cfg = ModelConfig(vocab_size=10, hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=8)
    a = KVCache(cfg, 2, 8)
    a.k.normal_()
    a.v.normal_()
    b = KVCache(cfg, 2, 8)
    b.k.copy_(a.k)
    b.v.copy_(a.v)
    a.copy_slots(0, [5, 6], [2, 3])
    a.copy_slots(1, [4, 7], [3, 4])
    b.copy_slots_batched(torch.tensor([[5, 6], [4, 7]]), torch.tensor([[2, 3], [3, 4]]))
    assert torch.equal(a.k, b.k) and torch.equal(a.v, b.v)
    a.reset()
    assert a.k.abs().sum() == 0


def test_masks():
    m = causal_mask(torch.tensor([0, 2]), 2, 5)
    assert m.shape == (2, 2, 5)
    assert m[0].tolist() == [[True, False, False, False, False], [True, True, False, False, False]]
    assert m[1].tolist() == [[True, True, True, False, False], [True, True, True, True, False]]
    p = allow(prefix_mask(torch.tensor([1]), 2, 4), torch.tensor([[[3, -1], [2, 3]]]))
    assert p[0].tolist() == [[True, False, False, True], [True, False, True, True]]


def test_llama3_rope_scaling_frequencies():
    cfg = ModelConfig(vocab_size=10, hidden_size=64, num_layers=1, num_heads=1, num_kv_heads=1, intermediate_size=8,
                      rope_theta=500000.0, rope_scaling=dict(LLAMA31_SCALING, original_max_position_embeddings=8192))
    plain = ModelConfig(vocab_size=10, hidden_size=64, num_layers=1, num_heads=1, num_kv_heads=1, intermediate_size=8,
                        rope_theta=500000.0)
    f, f0 = inv_freq(cfg), inv_freq(plain)
    wavelen = 2 * math.pi / f0
    hi = wavelen < 8192 / 4
    lo = wavelen > 8192 / 1
    assert torch.equal(f[hi], f0[hi])                       # high frequencies untouched
    torch.testing.assert_close(f[lo], f0[lo] / 8.0)          # low frequencies divided by factor
    mid = ~hi & ~lo
    assert bool(((f[mid] <= f0[mid]) & (f[mid] >= f0[mid] / 8.0)).all())


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="num_kv_heads"):
        ModelConfig(vocab_size=10, hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=3, intermediate_size=8)
    with pytest.raises(ConfigError, match="architecture"):
        ModelConfig(vocab_size=10, hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=4, intermediate_size=8,
                    architecture="gpt2")
    with pytest.raises(ConfigError, match="rope_scaling"):
        ModelConfig(vocab_size=10, hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=4, intermediate_size=8,
                    rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(ConfigError, match="hidden_size"):
        ModelConfig(vocab_size=10, hidden_size=0, num_layers=1, num_heads=4, num_kv_heads=4, intermediate_size=8)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_config_hf_round_trip(arch):
    cfg = ModelConfig(vocab_size=258, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=96,
                      architecture=arch, qk_norm=arch == "qwen3", rope_scaling=LLAMA31_SCALING if arch == "llama" else None,
                      bos_token_id=256, eos_token_id=257)
    hf = cfg.to_hf()
    assert hf["architectures"] == [{"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]]
    assert ModelConfig.from_hf(hf) == cfg


def test_from_hf_real_llama31_layout():
    hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096,
          "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
          "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
          "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192, "rope_type": "llama3"},
          "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]}
    cfg = ModelConfig.from_hf(hf)
    assert (cfg.head_dim, cfg.num_kv_heads, cfg.rope_type, cfg.eos_ids) == (128, 8, "llama3", [128001, 128008, 128009])
    assert abs(cfg.num_params() - 8.03e9) / 8.03e9 < 0.01


def test_grad_flows_for_training():
    m = make(kv=2).train()
    tokens = torch.randint(0, 100, (2, 8))
    logits = m(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 100), tokens[:, 1:].reshape(-1))
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())
