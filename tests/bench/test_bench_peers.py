"""bench/bench_peers.py: ours against Hugging Face transformers on the deep tiny pair. The --quick run is
real (real models, our draft process, transformers' generate) and must give token-identical outputs at T = 0;
transformers is optional, so those tests skip with the reason when it is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.peers_compare import explain, first_mismatch
from bench.peers_hf import missing_reason
from bench.peers_sys import quiet_box, steal_share

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_peers.py"
PEERS = {"ours_ar", "ours_sd", "ours_ssd", "hf_greedy", "hf_assisted_k", "hf_assisted_default", "hf_pld"}
needs_hf = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


def _bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(SCRIPT), "--no-progress", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> dict:
    if missing_reason() is not None:
        pytest.skip(missing_reason())
    out = tmp_path_factory.mktemp("peers") / "peers.json"
    proc = _bench("--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


@needs_hf
def test_quick_run_writes_every_peer_with_interleaved_medians(quick):
    assert set(quick["peers"]) == PEERS
    reps = quick["meta"]["repeats"]
    assert quick["meta"]["quick"] and reps == 2 and quick["meta"]["threads"] == 1
    assert len(quick["meta"]["order"]) == reps and all(sorted(p) == sorted(PEERS) for p in quick["meta"]["order"])
    for name, r in quick["peers"].items():
        assert len(r["tokens_per_s_all"]) == reps and all(v > 0 for v in r["tokens_per_s_all"]), name
        assert min(r["tokens_per_s_all"]) <= r["tokens_per_s_median"] <= max(r["tokens_per_s_all"])
        assert r["tokens"] == sum(min(12, len(t)) for t in r["token_ids"]) > 0
    for key in ("ar_vs_greedy", "sd_vs_assisted_k", "sd_vs_assisted_default", "sd_vs_pld"):
        r = quick["ratios"][key]
        assert r["of_medians"] == pytest.approx(quick["peers"][r["ours"]]["tokens_per_s_median"]
                                                / quick["peers"][r["transformers"]]["tokens_per_s_median"])
        assert len(r["paired_all"]) == reps


@needs_hf
def test_quick_run_is_token_identical_to_greedy_generate_at_t0(quick):
    ref = quick["peers"]["hf_greedy"]["token_ids"]
    assert len(ref) == 2 and all(len(t) == 12 for t in ref)
    for name, r in quick["peers"].items():
        assert r["token_ids"] == ref, (name, r["first_mismatch"])
        assert r["identical_to_greedy_generate"] and r["same_output_every_pass"] and r["first_mismatch"] is None
    assert quick["token_identity"]["all_identical"]


@needs_hf
def test_matched_k_really_matches_and_defaults_differ(quick):
    """Same draft, same K, greedy: transformers' assisted generation accepts what our SD accepts, so both
    need the same number of target forwards; the defaults draft another number of tokens per round."""
    sd, hk, hd = (quick["peers"][n] for n in ("ours_sd", "hf_assisted_k", "hf_assisted_default"))
    assert hk["settings"]["num_assistant_tokens"] == 3 and hk["settings"]["num_assistant_tokens_schedule"] == "constant"
    assert hd["settings"]["num_assistant_tokens"] != 3
    assert hk["target_forwards"] == sd["target_forwards"]
    assert quick["peers"]["hf_greedy"]["tokens_per_target_forward"] == 1.0
    assert quick["peers"]["ours_ar"]["tokens_per_target_forward"] == 1.0


@needs_hf
def test_quick_run_records_load_and_steal_and_is_not_a_measurement(quick):
    ms = quick["machine_state"]
    for when in ("start", "end"):
        assert len(ms[when]["load_average"]) == 3 and ms[when]["steal_window_s"] > 0
    assert ms["steal_share_run"] is None or 0.0 <= ms["steal_share_run"] <= 1.0
    assert quick["targets"]["valid_measurement"] is False        # --quick never counts


@pytest.mark.parametrize("args, flag", [(["--k", "0"], "--k"), (["--prompts", "99"], "--prompts"),
                                        (["--max-new-tokens", "5000"], "--max-new-tokens"),
                                        (["--target", "/nonexistent"], "--target"),
                                        (["--fanout", "1,2"], "--fanout")])
def test_bad_flags_exit_2_with_one_line_and_no_output(tmp_path, args, flag):
    out = tmp_path / "peers.json"
    proc = _bench("--quick", "--out", str(out), *args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: {flag}") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not out.exists()


def test_first_mismatch_finds_the_first_differing_token_or_length():
    assert first_mismatch([[1, 2, 3], [4]], [[1, 2, 3], [4]]) is None
    assert first_mismatch([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 6]]) == \
        {"prompt": 1, "position": 1, "got": 5, "expected": 6}
    m = first_mismatch([[1, 2]], [[1, 2, 9]])
    assert (m["prompt"], m["position"], m["got"], m["expected"]) == (0, 2, None, 9) and "lengths" in m["detail"]


def test_steal_share_and_quiet_box():
    a = [100, 0, 50, 800, 0, 0, 0, 50]
    b = [200, 0, 100, 1600, 0, 0, 0, 100]
    assert steal_share(a, b) == pytest.approx(50 / 1000)
    assert steal_share(a, a) is None and steal_share(None, b) is None
    assert quiet_box({"load_average": [0.5, 0, 0]}, 0.01)["quiet"]
    assert not quiet_box({"load_average": [1.5, 0, 0]}, 0.01)["quiet"]
    assert not quiet_box({"load_average": [0.5, 0, 0]}, 0.2)["quiet"]


@needs_hf
def test_explain_blames_the_decoder_that_emits_a_non_argmax_token():
    """A made-up difference (the runner-up token emitted where greedy has the argmax) is diagnosed as a
    decoder error from the uncached forwards of both implementations, which agree on the real model."""
    import torch

    from bench.peers_hf import load
    from saguaro_exec.io.assets import tiny_deep_pair_paths
    from saguaro_exec.model import load_model

    target, _ = tiny_deep_pair_paths()
    hf, ours = load(str(target)), load_model(target, device="cpu", dtype=torch.float32)
    prompt = list(b"def f(x):\n    return ")
    with torch.no_grad():
        top2 = ours(torch.tensor([prompt]))[0, -1].topk(2).indices.tolist()
    m = {"prompt": 0, "position": 0, "got": top2[1], "expected": top2[0]}
    e = explain(m, prompt, [top2[0]], hf, ours)
    assert e["hf_uncached"]["top"] == e["ours_uncached"]["top"] == top2
    assert e["max_abs_logit_diff"] < 1e-3
    assert e["verdict"].startswith("decoder error")


def test_prompts_are_a_count_of_built_ins_or_a_file_encoded_with_the_targets_tokenizer(tmp_path):
    from bench.bench_peers import _prompt_ids
    from saguaro_exec.io.assets import tiny_deep_pair_paths
    from saguaro_exec.io.prompts import BUILTIN_PROMPTS

    target = str(tiny_deep_pair_paths()[0])
    ids, source = _prompt_ids("2", target)
    assert ids == [list(p.encode()) for p in BUILTIN_PROMPTS[:2]] and source == "built-in[:2]"
    f = tmp_path / "p.json"
    f.write_text(json.dumps(["ab", "\u00e9"]))
    assert _prompt_ids(str(f), target) == ([[97, 98], [0xC3, 0xA9]], str(f))
