"""Bad input through the Python API: every case raises ConfigError naming the field (or file) and what is
allowed; nothing else escapes (no TypeError / KeyError / IndexError from deep inside)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from calibration.errors import ConfigError
from calibration.profile import Profile, load_preset
from saguaro_exec import RunConfig, run
from saguaro_exec.model import ModelConfig, load_model, random_model, save_model
from saguaro_sim import SpecConfig


def raises_naming(fn, *needles: str) -> ConfigError:
    """Call fn; it must raise ConfigError whose message names every needle and says what is allowed."""
    with pytest.raises(ConfigError) as ei:
        fn()
    msg = str(ei.value)
    for n in needles:
        assert n in msg, msg
    assert "allowed:" in msg or "missing" in msg or "not" in msg, msg
    return ei.value


SPEC_BAD = [
    ({"mode": "fast"}, "mode"), ({"mode": 3}, "mode"), ({"k": 0}, "k"), ({"k": 65}, "k"), ({"k": 2.5}, "k"),
    ({"k": "4"}, "k"), ({"k": True}, "k"), ({"fanout": (1, 2)}, "fanout"), ({"fanout": "4,3"}, "fanout"),
    ({"fanout": (4, -1, 1, 1, 1)}, "fanout"), ({"fanout_miss": (1,)}, "fanout_miss"), ({"budget": 0}, "budget"),
    ({"budget": 10**6}, "budget"), ({"fanout": (9, 9, 9, 9, 9), "budget": 8}, "fanout"),
    ({"sampler_c": 1.5}, "sampler_c"), ({"sampler_c": -0.1}, "sampler_c"), ({"sampler_c": float("nan")}, "sampler_c"),
    ({"backup": "magic"}, "backup"), ({"temperature": -1.0}, "temperature"), ({"temperature": 11.0}, "temperature"),
    ({"batch_size": 0}, "batch_size"), ({"batch_size": None}, "batch_size"), ({"draft_devices": 0}, "draft_devices"),
    ({"fanout_shape": "cubic"}, "fanout_shape"), ({"frobnicate": 1}, "frobnicate"),
]


@pytest.mark.parametrize("d, field", SPEC_BAD, ids=[str(d) for d, _ in SPEC_BAD])
def test_spec_config_fields(d, field):
    raises_naming(lambda: SpecConfig.from_dict(d), field)


RUN_BAD = [
    ({"spec": {"mode": "ssd"}}, "spec"), ({"target": 3}, "target"), ({"target": "/nonexistent/ckpt"}, "target"),
    ({"draft": "/nonexistent/ckpt"}, "draft"), ({"prompts": []}, "prompts"), ({"prompts": [""]}, "prompts"),
    ({"prompts": [[]]}, "prompts"), ({"prompts": ["a", [1]]}, "prompts"), ({"prompts": "hello"}, "prompts"),
    ({"prompt_file": 3}, "prompt_file"), ({"prompt_file": "/nonexistent.txt"}, "prompt_file"),
    ({"prompts": ["a"], "prompt_file": __file__}, "prompt_file"), ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": 1.5}, "max_new_tokens"), ({"device": "tpu"}, "device"), ({"device": "cuda:x"}, "device"),
    ({"draft_device": "gpu"}, "draft_device"), ({"dtype": "float8"}, "dtype"), ({"seed": -1}, "seed"),
    ({"timeout_s": 0}, "timeout_s"), ({"profile": 3}, "profile"), ({"threads": 0}, "threads"),
    ({"inline_draft": "yes"}, "inline_draft"), ({"draft_timeout_s": 0.0}, "draft_timeout_s"),
    ({"ssd_protocol": "tcp"}, "ssd_protocol"),
    ({"draft_timeout_s": "5"}, "draft_timeout_s"), ({"fallback": "retry"}, "fallback"),
    ({"inject_fault": "explode@3"}, "inject_fault"), ({"inject_fault": "die@-1"}, "inject_fault"),
    ({"inject_fault": "die@1", "spec": SpecConfig(mode="sd")}, "inject_fault"),
    ({"inject_fault": "die@1", "inline_draft": True}, "inject_fault"),
]


@pytest.mark.parametrize("kw, field", RUN_BAD, ids=[str(k) for k, _ in RUN_BAD])
def test_run_config_fields(kw, field):
    raises_naming(lambda: RunConfig(**kw), field)


@pytest.mark.parametrize("text, needles", [
    ("max_new_tokens = 8\nfrobnicate = 1\n", ["frobnicate", "unknown key"]),
    ("[spec]\nk = 2\nwhat = 1\n", ["spec.what", "unknown key"]),
    ("[spec]\nk = \"two\"\n", ["spec.k"]),
    ("max_new_tokens = \"many\"\n", ["max_new_tokens"]),
    ("max_new_tokens = 8\n[spec\nk = 2\n", ["syntax error"]),
    ("device = \"cuda:zero\"\n", ["device"]),
    ("spec = 3\n", ["spec"]),
])
def test_run_config_toml(tmp_path, text, needles):
    f = tmp_path / "run.toml"
    f.write_text(text)
    raises_naming(lambda: RunConfig.from_toml(f), str(f), *needles)


def _preset() -> dict:
    return load_preset("cpu-tinypair-ssd").to_dict()


def _negative_knot(d: dict) -> None:
    """A piecewise latency block (whatever form the shipped profile's fit chose) with a negative knot."""
    d["target"] = load_preset("h200-llama8b-llama1b-eager").to_dict()["target"]
    d["target"]["params"]["knots_y"][0] = -0.001


def _profile_case(mutate):
    d = _preset()
    mutate(d)
    return d


PROFILE_BAD = [
    ("negative latency", lambda d: _negative_knot(d), "knots_y[0]"),
    ("latency params not an object", lambda d: d["draft"].__setitem__("params", [1, 2]), "profile.draft.params"),
    ("unknown latency kind", lambda d: d["draft"].__setitem__("kind", "magic"), "kind"),
    ("negative link", lambda d: d.__setitem__("link_s", -1e-6), "link_s"),
    ("acceptance above 1", lambda d: d["acceptance"]["by_temperature"]["0.0"].__setitem__(0, 1.2), "acceptance"),
    ("acceptance below 0", lambda d: d["acceptance"]["by_temperature"]["0.0"].__setitem__(0, -0.1), "acceptance"),
    ("c_effect key", lambda d: d["acceptance"].__setitem__("c_effect", {"half": 0.9}), "c_effect"),
    ("hit above 1", lambda d: d["hits"]["by_temperature"]["0.0"]["primary"]["table"][0].__setitem__(1, 1.5),
     "table[0][1]"),
    ("hits not monotone", lambda d: d["hits"]["by_temperature"]["0.0"]["primary"]["table"].__setitem__(
        0, [0.0, 0.6, 0.4]), "must not decrease"),
    ("hit table not rows", lambda d: d["hits"]["by_temperature"]["0.0"]["primary"].__setitem__("table", 0.5),
     "table"),
    ("missing target", lambda d: d.pop("target"), "profile.target"),
    ("unknown key", lambda d: d.__setitem__("colour", "red"), "profile.colour"),
    ("provenance not an object", lambda d: d.__setitem__("provenance", "me"), "provenance"),
    ("vocab size", lambda d: d.__setitem__("vocab_size", 0), "vocab_size"),
]


@pytest.mark.parametrize("name, mutate, needle", PROFILE_BAD, ids=[c[0] for c in PROFILE_BAD])
def test_profile_fields(tmp_path, name, mutate, needle):
    f = tmp_path / "p.json"
    f.write_text(json.dumps(_profile_case(mutate)))
    raises_naming(lambda: Profile.from_json(f), str(f), needle)


@pytest.mark.parametrize("name, text, needle", [
    ("corrupt", "{not json", "p.json"),
    ("truncated", None, "p.json"),
    ("future schema", "future", "schema_version"),
    ("missing schema", "missing", "schema_version"),
    ("not an object", "[1, 2]", "p.json"),
    ("empty", "", "p.json"),
])
def test_profile_files(tmp_path, name, text, needle):
    d = _preset()
    if text is None:
        full = json.dumps(d)
        text = full[: len(full) // 2]
    elif text == "future":
        text = json.dumps({**d, "schema_version": 99})
    elif text == "missing":
        d.pop("schema_version")
        text = json.dumps(d)
    f = tmp_path / "p.json"
    f.write_text(text)
    raises_naming(lambda: Profile.from_json(f), needle)


# checkpoints --------------------------------------------------------------------------------------
def _tiny(vocab: int = 32, hidden: int = 16):
    return random_model(ModelConfig(vocab_size=vocab, hidden_size=hidden, num_layers=1, num_heads=2,
                                    num_kv_heads=1, intermediate_size=32, max_position_embeddings=64), seed=1)


@pytest.fixture()
def ckpt(tmp_path) -> Path:
    return save_model(_tiny(), tmp_path / "ck")


def _run(target, draft=None, mode="ssd", **kw) -> None:
    run(RunConfig(spec=SpecConfig(mode=mode, k=2), target=target, draft=draft if draft is not None else target,
                  prompts=kw.pop("prompts", [[1, 2]]), max_new_tokens=4, **kw))


def test_checkpoint_missing_dir(tmp_path):
    raises_naming(lambda: _run(str(tmp_path / "none")), "target", "does not exist")


def test_checkpoint_missing_shard(ckpt):
    (ckpt / "model.safetensors").unlink()
    raises_naming(lambda: _run(str(ckpt), mode="ar"), "checkpoint weights")


def test_checkpoint_truncated_shard(ckpt):
    f = ckpt / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    raises_naming(lambda: _run(str(ckpt), mode="ar"), "truncated")


def test_checkpoint_unsupported_architecture(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(architectures=["MambaForCausalLM"], model_type="mamba")
    (ckpt / "config.json").write_text(json.dumps(cfg))
    raises_naming(lambda: _run(str(ckpt), mode="ar"), "architectures", "MambaForCausalLM")


def test_checkpoint_shape_mismatch(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["intermediate_size"] = 48
    (ckpt / "config.json").write_text(json.dumps(cfg))
    raises_naming(lambda: _run(str(ckpt), mode="ar"), "shape", "does not match")


@pytest.mark.parametrize("mode", ["sd", "ssd"])
def test_checkpoint_vocab_mismatch(tmp_path, ckpt, mode):
    other = save_model(_tiny(vocab=40), tmp_path / "other")
    raises_naming(lambda: _run(str(ckpt), str(other), mode=mode), "draft", "vocabulary")


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('SAGUARO_PWNED', '/nonexistent/pwned')}",))


def test_checkpoints_are_never_unpickled(tmp_path, ckpt, monkeypatch):
    """A pickle beside (or instead of) the safetensors is never loaded: nothing in it runs."""
    flag = tmp_path / "pwned"
    monkeypatch.setenv("SAGUARO_PWNED", str(flag))
    torch.save({"model.embed_tokens.weight": _Exploit()}, ckpt / "pytorch_model.bin")
    load_model(ckpt)
    assert not flag.exists()
    (ckpt / "model.safetensors").unlink()
    raises_naming(lambda: load_model(ckpt), "pickle", "never unpickled")
    assert not flag.exists()


def test_no_unpickling_of_user_files_in_the_source():
    """The one torch.load in the library reads the args file its own parent wrote (weights_only elsewhere)."""
    root = Path(__file__).resolve().parents[2]
    hits = []
    for pkg in ("saguaro_exec", "calibration", "saguaro_sim", "saguaro"):
        for f in (root / pkg).rglob("*.py"):
            text = f.read_text()
            for needle in ("torch.load(", "pickle.load", "pickle.loads"):
                if needle in text:
                    hits.append((f.relative_to(root).as_posix(), needle))
    assert hits == [("saguaro_exec/speculator/process.py", "torch.load(")]


# prompts and devices ------------------------------------------------------------------------------
@pytest.mark.parametrize("prompts, needle", [
    ([[1, 2], [40]], "prompts[1]"),            # token id outside the vocabulary (32)
    ([[-1]], "prompts[0]"),
    ([list(range(1, 30)) * 3], "context"),     # 87 tokens, context 64
])
def test_prompt_ids(ckpt, prompts, needle):
    raises_naming(lambda: _run(str(ckpt), mode="ar", prompts=prompts), needle)


def test_prompt_file_invalid_utf8_and_json(tmp_path):
    bad = tmp_path / "p.txt"
    bad.write_bytes(b"hello\n\xff\xfe world\n")
    raises_naming(lambda: RunConfig(prompt_file=str(bad)).load_prompts(), "prompt_file", "UTF-8")
    bad_json = tmp_path / "p.json"
    bad_json.write_text('["a", ')
    raises_naming(lambda: RunConfig(prompt_file=str(bad_json)).load_prompts(), "prompt_file", "JSON")
    empty = tmp_path / "e.json"
    empty.write_text('["a", ""]')
    raises_naming(lambda: RunConfig(prompt_file=str(empty)).load_prompts(), "prompts")


def test_text_prompt_longer_than_context():
    raises_naming(lambda: run(RunConfig(spec=SpecConfig(mode="ar"), prompts=["x" * 2000], max_new_tokens=2)),
                  "prompts[0]", "context")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("kw", [{"device": "cuda"}, {"device": "cpu", "draft_device": "cuda:1"}])
def test_cuda_without_cuda(kw):
    raises_naming(lambda: run(RunConfig(spec=SpecConfig(mode="sd"), **kw)), "device", "CUDA is not available")
