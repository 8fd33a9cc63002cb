"""Checkpoint I/O: save/load round trip, sharded checkpoints, clear errors for bad checkpoints, tokenizer."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from saguaro_exec.io.tokenizer import ByteTokenizer, load_tokenizer
from saguaro_exec.model import ConfigError, ModelConfig, load_model, random_model, read_config, save_model


def small(arch="llama", tie=False, dtype=torch.float32):
    cfg = ModelConfig(vocab_size=272, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                      intermediate_size=48, architecture=arch, qk_norm=arch == "qwen3",
                      tie_word_embeddings=tie, bos_token_id=256, eos_token_id=257)
    return random_model(cfg, seed=3, dtype=dtype)


def same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) and sa[k].dtype == sb[k].dtype for k in sa)


@pytest.mark.parametrize("arch,tie,dtype", [("llama", False, torch.float32), ("llama", True, torch.float32),
                                            ("qwen3", True, torch.bfloat16)])
def test_round_trip_bit_exact(tmp_path, arch, tie, dtype):
    m = small(arch, tie, dtype)
    save_model(m, tmp_path / "ck")
    save_model(m, tmp_path / "ck")  # overwrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no temp dirs left behind
    m2 = load_model(tmp_path / "ck", dtype=dtype)
    assert m2.config == m.config
    assert same_weights(m, m2)
    assert (m2.lm_head.weight is m2.model.embed_tokens.weight) == tie
    tokens = torch.randint(0, 272, (2, 6))
    with torch.no_grad():
        assert torch.equal(m(tokens), m2(tokens))
    hf = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert hf["num_hidden_layers"] == 2 and hf["model_type"] == arch


def shard(src, dst, n_shards=3):
    """Rewrite a single-file checkpoint into HF's sharded layout."""
    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    tensors = load_file(src / "model.safetensors")
    names = sorted(tensors)
    weight_map = {}
    for i in range(n_shards):
        fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::n_shards]}
        save_file(part, dst / fname)
        weight_map.update({n: fname for n in part})
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dst


def test_sharded_checkpoint_loads(tmp_path):
    m = small()
    save_model(m, tmp_path / "single")
    d = shard(tmp_path / "single", tmp_path / "sharded")
    assert same_weights(m, load_model(d))


@pytest.fixture
def ckpt(tmp_path):
    save_model(small(), tmp_path / "single")
    return shard(tmp_path / "single", tmp_path / "ck")


def test_missing_directory(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_model(tmp_path / "nope")


def test_missing_config(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(ConfigError, match="config.json"):
        load_model(ckpt)


def test_unsupported_architecture(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(architectures=["GPT2LMHeadModel"], model_type="gpt2")
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="GPT2LMHeadModel"):
        load_model(ckpt)


def test_missing_shard(ckpt):
    (ckpt / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(ConfigError, match="model-00002-of-00003"):
        load_model(ckpt)


def test_truncated_shard(ckpt):
    f = ckpt / "model-00001-of-00003.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(ConfigError, match="truncated"):
        load_model(ckpt)


def test_missing_tensor(tmp_path):
    save_model(small(), tmp_path / "ck")
    tensors = load_file(tmp_path / "ck" / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, tmp_path / "ck" / "model.safetensors")
    with pytest.raises(ConfigError, match="model.layers.1.mlp.up_proj.weight"):
        load_model(tmp_path / "ck")


def test_shape_mismatch(tmp_path):
    save_model(small(), tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    cfg["intermediate_size"] = 64
    (tmp_path / "ck" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="shape"):
        load_model(tmp_path / "ck")


def test_pickle_only_checkpoint_is_refused(tmp_path):
    save_model(small(), tmp_path / "ck")
    (tmp_path / "ck" / "model.safetensors").unlink()
    (tmp_path / "ck" / "pytorch_model.bin").write_bytes(b"not unpickled")
    with pytest.raises(ConfigError, match="pickle"):
        load_model(tmp_path / "ck")


def test_bad_config_field_is_named(tmp_path):
    save_model(small(), tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    cfg["num_key_value_heads"] = 3
    (tmp_path / "ck" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="num_kv_heads"):
        read_config(tmp_path / "ck")


def test_byte_tokenizer_round_trip(tmp_path):
    tok = ByteTokenizer(256, 257)
    text = "def f(x):\n    return 'héllo' + x  # ünïcode"
    ids = tok.encode(text, bos=True)
    assert ids[0] == 256 and max(ids[1:]) < 256
    assert tok.decode(ids + [257]) == text
    assert tok.decode([0xC3]) == "\ufffd"  # invalid utf-8 is replaced, never raises
    save_model(small(), tmp_path / "ck", extra_files={"byte_tokenizer.json": tok.to_json()})
    loaded = load_tokenizer(tmp_path / "ck")
    assert isinstance(loaded, ByteTokenizer) and (loaded.bos_id, loaded.eos_id) == (256, 257)


def test_hf_tokenizer_json_is_used(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    t = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tmp_path.joinpath("ck").mkdir()
    t.save(str(tmp_path / "ck" / "tokenizer.json"))
    tok = load_tokenizer(tmp_path / "ck")
    assert tok.encode("hello world") == [1, 2]
    with pytest.raises(ConfigError):
        load_tokenizer(tmp_path)
