"""CUDA checks of the model layer (skipped without a GPU): cached/tree paths on the device, and an
8B-shape random model's step latencies (printed; run with -s to see them)."""

import time

import pytest
import torch

from saguaro_exec.model import (
    GraphedForward,
    ModelConfig,
    allow,
    causal_mask,
    contiguous_slots,
    prefix_mask,
    random_model,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

LLAMA31_8B = ModelConfig(
    vocab_size=128256, hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8, intermediate_size=14336,
    rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    max_position_embeddings=131072, bos_token_id=128000, eos_token_id=[128001, 128008, 128009])


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 6e-2)])
def test_cuda_cached_paths_match_full_forward(dtype, tol):
    cfg = ModelConfig(vocab_size=272, hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=256, architecture="qwen3", qk_norm=True)
    m = random_model(cfg, seed=0, device="cuda", dtype=dtype, std=0.1)
    B, T = 4, 33
    tokens = torch.randint(0, 272, (B, T), device="cuda")
    with torch.no_grad():
        ref = m(tokens)
        cache = m.new_cache(B, 64)
        z = torch.zeros(B, dtype=torch.long, device="cuda")
        a = m(tokens[:, :28], contiguous_slots(z, 28), cache, contiguous_slots(z, 28), causal_mask(z, 28, 28))
        s = torch.full((B,), 28, device="cuda")
        b = m(tokens[:, 28:], contiguous_slots(s, 5), cache, contiguous_slots(s, 5), causal_mask(s, 5, 33))
        out = torch.cat([a, b], 1)
        # tree step: 3 branches of one token each after a 28-token prefix
        br = torch.randint(0, 272, (B, 3), device="cuda")
        slots = contiguous_slots(s, 3)
        mask = allow(prefix_mask(s, 3, 31), slots.unsqueeze(-1))
        tree = m(br, s.view(B, 1).expand(B, 3), cache, slots, mask)
        for j in range(3):
            seq = torch.cat([tokens[:, :28], br[:, j : j + 1]], 1)
            torch.testing.assert_close(tree[:, j], m(seq)[:, -1], atol=tol, rtol=tol)
    assert out.dtype == torch.float32 and out.device.type == "cuda"
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)


def _time(fn, *args, iters=20):
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters


@pytest.mark.slow
def test_llama31_8b_shape_step_latency():
    t0 = time.perf_counter()
    m = random_model(LLAMA31_8B, seed=0, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    build = time.perf_counter() - t0
    print(f"\n8B random model: build {build:.1f}s, weights {torch.cuda.memory_allocated() / 2**30:.1f} GiB")
    ctx = 1024
    for B in (1, 8):
        cache = m.new_cache(B, ctx + 64)
        for T in (1, 5, 16):
            start = torch.full((B,), ctx, device="cuda")
            tokens = torch.randint(0, 128000, (B, T), device="cuda")
            pos, slots = contiguous_slots(start, T), contiguous_slots(start, T)
            mask = causal_mask(start, T, ctx + T)
            with torch.no_grad():
                dt = _time(m, tokens, pos, cache, slots, mask)
                logits = m(tokens, pos, cache, slots, mask)
            assert torch.isfinite(logits).all()
            graphed = GraphedForward(m, cache, T, ctx + T)
            dt_g = _time(graphed, tokens, pos, slots, mask)
            torch.testing.assert_close(graphed(tokens, pos, slots, mask), logits, atol=0.5, rtol=0.05)
            print(f"8B bf16 B={B} T={T} ctx={ctx}: eager {dt * 1e3:.2f} ms, cuda graph {dt_g * 1e3:.2f} ms/forward")


def test_graphed_forward_matches_eager():
    cfg = ModelConfig(vocab_size=272, hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256)
    m = random_model(cfg, seed=0, device="cuda", std=0.1)
    B = 2
    tokens = torch.randint(0, 272, (B, 12), device="cuda")
    with torch.no_grad():
        ref = m(tokens)
        cache = m.new_cache(B, 32)
        z = torch.zeros(B, dtype=torch.long, device="cuda")
        m(tokens[:, :8], contiguous_slots(z, 8), cache, contiguous_slots(z, 8), causal_mask(z, 8, 8))
        step = GraphedForward(m, cache, T=1, S=32)
        outs = []
        for t in range(8, 12):
            s = torch.full((B,), t, device="cuda")
            pos = s.view(B, 1)
            outs.append(step(tokens[:, t : t + 1], pos, pos, causal_mask(s, 1, t + 1)).clone())
    torch.testing.assert_close(torch.cat(outs, 1), ref[:, 8:], atol=1e-4, rtol=1e-4)
