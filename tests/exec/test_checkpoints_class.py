"""Class "checkpoints never loaded wrong" and "silently wrong output" (issue 15): config.json fields are typed
and range-checked (a string "false" is not true, 10,000,000 layers are refused), defaults follow transformers
per architecture, attention biases and Qwen2 load, unused or missing tensors are errors naming them,
generation never runs past max_position_embeddings, and hub ids resolve from the local hub cache offline."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from calibration.errors import ConfigError
from saguaro_exec import RunConfig, run
from saguaro_exec.io.assets import TINY_DIR
from saguaro_exec.model import ModelConfig, load_model, random_model, read_config, save_model
from saguaro_sim import SpecConfig

ROOT = Path(__file__).resolve().parents[2]


def small(arch="llama", bias=False, layers=2, **kw):
    cfg = ModelConfig(vocab_size=272, hidden_size=32, num_layers=layers, num_heads=4, num_kv_heads=2,
                      intermediate_size=48, architecture=arch, qk_norm=arch == "qwen3", attention_bias=bias,
                      bos_token_id=256, eos_token_id=257, **kw)
    return random_model(cfg, seed=5)


def edit_config(ck: Path, **changes) -> None:
    d = json.loads((ck / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    (ck / "config.json").write_text(json.dumps(d))


@pytest.fixture
def ck(tmp_path) -> Path:
    return save_model(small(), tmp_path / "ck")


@pytest.mark.parametrize("key, value", [("tie_word_embeddings", "false"), ("attention_bias", "true"),
                                        ("attention_bias", 1), ("num_hidden_layers", 10_000_000),
                                        ("num_hidden_layers", 2.0), ("hidden_size", -4), ("vocab_size", 10**30),
                                        ("rms_norm_eps", 0), ("rms_norm_eps", "1e-6"), ("rope_theta", 1e300),
                                        ("max_position_embeddings", 1 << 40), ("num_attention_heads", True),
                                        ("eos_token_id", "2"), ("layer_types", ["sliding_attention"] * 2),
                                        ("rope_scaling", "llama3"), ("mlp_bias", True)])
def test_config_json_field_refused_naming_the_key(ck, key, value):
    edit_config(ck, **{key: value})
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as ei:
        load_model(ck)
    assert key in str(ei.value) and time.perf_counter() - t0 < 5, str(ei.value)


def test_defaults_follow_transformers_per_architecture(tmp_path):
    for arch, head_dim, max_pos in (("llama", 8, 2048), ("qwen2", 8, 32768), ("qwen3", 128, 32768)):
        d = small(arch, bias=arch == "qwen2").config.to_hf()
        for key in ("rms_norm_eps", "rope_theta", "head_dim", "max_position_embeddings", "tie_word_embeddings",
                    "attention_bias"):
            d.pop(key)
        cfg = ModelConfig.from_hf(d)
        assert (cfg.rms_norm_eps, cfg.rope_theta, cfg.head_dim, cfg.max_position_embeddings) == \
            (1e-6, 10000.0, head_dim, max_pos), arch
        assert (cfg.qkv_bias, cfg.o_bias) == ((True, False) if arch == "qwen2" else (False, False))


@pytest.mark.parametrize("arch, bias", [("llama", True), ("qwen3", True), ("qwen2", True)])
def test_attention_biases_round_trip(tmp_path, arch, bias):
    m = small(arch, bias)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith(".bias"):
                p.normal_()
    save_model(m, tmp_path / "ck")
    names = set(load_file(tmp_path / "ck" / "model.safetensors"))
    assert ("model.layers.0.self_attn.o_proj.bias" in names) == (arch != "qwen2")
    assert "model.layers.0.self_attn.q_proj.bias" in names
    m2 = load_model(tmp_path / "ck")
    tokens = torch.randint(0, 272, (2, 5))
    with torch.no_grad():
        assert torch.equal(m(tokens), m2(tokens))


def test_unused_checkpoint_tensors_are_an_error(ck):
    edit_config(ck, num_hidden_layers=1)                 # fewer layers than the weights
    with pytest.raises(ConfigError, match=r"model\.layers\.1\.") as ei:
        load_model(ck)
    assert "unused" in str(ei.value)


def test_bias_in_the_weights_but_not_in_config_is_unused(ck):
    t = load_file(ck / "model.safetensors")
    t["model.layers.0.self_attn.o_proj.bias"] = torch.zeros(32)
    save_file(t, ck / "model.safetensors")
    with pytest.raises(ConfigError, match="o_proj.bias"):
        load_model(ck)


def test_missing_tensors_named(ck):
    t = load_file(ck / "model.safetensors")
    del t["model.layers.1.mlp.up_proj.weight"]
    save_file(t, ck / "model.safetensors")
    with pytest.raises(ConfigError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_model(ck)


def test_generation_past_max_position_embeddings_refused(capsys):
    from saguaro import cli

    with pytest.raises(ConfigError, match="max_new_tokens"):
        run(RunConfig(spec=SpecConfig(mode="ar", k=0), max_new_tokens=1020, prompts=["def f(x):"]))
    code = cli.main(["run", "--mode", "ar", "--max-new-tokens", "1000000", "--prompt", "abc"])
    err = capsys.readouterr().err
    assert code == 2 and "--max-new-tokens" in err and len(err.strip().splitlines()) == 1, err


# ------------------------------------------------------------------------------------------- hub ids
def hub_cache(home: Path, repo_id: str, src: Path) -> Path:
    """A hub cache laid out as huggingface_hub lays it out: models--org--name/{blobs, refs/main, snapshots/<commit>}
    with snapshot files symlinked to content-addressed blobs."""
    from huggingface_hub.constants import HUGGINGFACE_HUB_CACHE  # noqa: F401 - the library's own layout
    from huggingface_hub.file_download import repo_folder_name

    repo = home / "hub" / repo_folder_name(repo_id=repo_id, repo_type="model")
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for f in src.iterdir():
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    return snap


def test_hub_id_resolves_from_the_local_cache_offline(tmp_path):
    pytest.importorskip("huggingface_hub", reason="hub ids need the optional huggingface_hub")
    home = tmp_path / "hf"
    hub_cache(home, "tiny-org/tiny-target", TINY_DIR / "target")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    base = [sys.executable, "-m", "saguaro", "run", "--mode", "ar", "--max-new-tokens", "4", "--prompt", "def f",
            "--json"]
    p = subprocess.run(base + ["--target", "tiny-org/tiny-target"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    local = subprocess.run(base + ["--target", str(TINY_DIR / "target")], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=300)
    assert json.loads(p.stdout)["texts"] == json.loads(local.stdout)["texts"]
    missing = subprocess.run(base + ["--target", "tiny-org/not-cached"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=300)
    assert missing.returncode == 2 and "--target" in missing.stderr and "local hub cache" in missing.stderr, \
        missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_hub_id_api(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub", reason="hub ids need the optional huggingface_hub")
    import huggingface_hub.constants as c

    snap = hub_cache(tmp_path, "org/model", TINY_DIR / "draft")
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert read_config("org/model") == read_config(TINY_DIR / "draft")
    assert load_model("org/model").config == read_config(snap)
    with pytest.raises(ConfigError, match="local hub cache"):
        read_config("org/other")
    shutil.rmtree(tmp_path / "hub")


def test_hub_id_through_run_config(tmp_path, monkeypatch):
    """RunConfig takes a cached hub id as it takes a folder, and names the field for an uncached one."""
    pytest.importorskip("huggingface_hub", reason="hub ids need the optional huggingface_hub")
    import huggingface_hub.constants as c

    from saguaro_exec import RunConfig
    from saguaro_sim import SpecConfig

    hub_cache(tmp_path, "org/model", TINY_DIR / "draft")
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    RunConfig(spec=SpecConfig(mode="sd", k=2), target=str(TINY_DIR / "target"), draft="org/model")
    with pytest.raises(ConfigError, match="draft") as e:
        RunConfig(spec=SpecConfig(mode="sd", k=2), target=str(TINY_DIR / "target"), draft="org/other")
    assert "local hub cache" in str(e.value)
