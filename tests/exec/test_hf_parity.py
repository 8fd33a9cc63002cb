"""Parity with Hugging Face transformers: random checkpoints written by transformers' own save_pretrained
load through our loader and give the same fp32 logits (max abs diff <= 1e-4) and the same greedy tokens
(through the real executor, saguaro_exec.run) as transformers' forward and generate."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers (a test-only optional dependency) is "
                                   "not installed: pip install transformers torch==<pinned>")

from saguaro_exec import RunConfig, run  # noqa: E402
from saguaro_exec.model import load_model  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402

VOCAB, NEW_TOKENS = 96, 12
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=256, bos_token_id=None, eos_token_id=None, pad_token_id=None)
LLAMA31_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
if int(transformers.__version__.split(".")[0]) >= 5:       # transformers 5: one rope_parameters dict
    LLAMA31 = {"rope_parameters": LLAMA31_ROPE}
else:                                                      # 4.x: rope_theta + rope_scaling
    LLAMA31 = {"rope_theta": 500000.0, "rope_scaling": {k: v for k, v in LLAMA31_ROPE.items() if k != "rope_theta"}}

CASES = {
    "llama-gqa": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2), {}),
    "llama31-rope-scaling": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2, **LLAMA31), {}),
    "llama-tied": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=4, tie_word_embeddings=True), {}),
    "llama-attention-bias": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2, attention_bias=True),
                             {}),
    "llama-sharded": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2), {"max_shard_size": "40KB"}),
    "qwen3-qk-norm": ("Qwen3Config", "Qwen3ForCausalLM", dict(num_key_value_heads=2, head_dim=32), {}),
    "qwen3-bias-tied": ("Qwen3Config", "Qwen3ForCausalLM", dict(num_key_value_heads=2, head_dim=16,
                                                                attention_bias=True, tie_word_embeddings=True), {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2), {}),
    "qwen2-tied-sharded": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=1, tie_word_embeddings=True),
                           {"max_shard_size": "40KB"}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def checkpoint(request, tmp_path_factory):
    """(name, transformers model, checkpoint folder written by its save_pretrained)."""
    cfg_cls, model_cls, extra, save_kw = CASES[request.param]
    config = getattr(transformers, cfg_cls)(**SHAPE, **extra)
    torch.manual_seed(sum(map(ord, request.param)))
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():                       # every weight random, biases and norms included
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name else 0.15 * torch.randn_like(p))
    path = tmp_path_factory.mktemp(request.param) / "ck"
    model.save_pretrained(path, **save_kw)
    if "max_shard_size" in save_kw:
        assert (path / "model.safetensors.index.json").is_file()
    return request.param, model, path


def test_logits_match_transformers(checkpoint):
    name, hf, path = checkpoint
    ours = load_model(path)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (3, 80), generator=gen)     # past the llama3 original context (32)
    with torch.no_grad():
        want = hf(tokens).logits.float()
        got = ours(tokens)
    assert got.shape == want.shape
    diff = (got - want).abs().max().item()
    assert diff <= 1e-4, f"{name}: max |logit diff| {diff:.2e}"


def test_greedy_tokens_match_transformers(checkpoint):
    name, hf, path = checkpoint
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, VOCAB, (n,), generator=gen).tolist() for n in (5, 9)]
    report = run(RunConfig(spec=SpecConfig(mode="ar", k=0), target=str(path), prompts=prompts,
                           max_new_tokens=NEW_TOKENS))
    for prompt, ours in zip(prompts, report.token_ids):
        with torch.no_grad():
            out = hf.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                              min_new_tokens=NEW_TOKENS)
        assert list(ours) == out[0, len(prompt):].tolist(), name


def test_checkpoint_config_is_what_transformers_wrote(checkpoint):
    """Our reading of the config.json transformers wrote (not a config we wrote ourselves)."""
    name, hf, path = checkpoint
    written = json.loads((path / "config.json").read_text())
    cfg = load_model(path).config
    assert cfg.architecture == written["model_type"]
    assert cfg.rope_type == ("llama3" if name == "llama31-rope-scaling" else "default")
    assert cfg.tie_word_embeddings == hf.config.tie_word_embeddings
    assert cfg.num_kv_heads == hf.config.num_key_value_heads
