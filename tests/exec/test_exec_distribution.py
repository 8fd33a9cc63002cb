"""Temperature > 0: SD and SSD with Saguaro sampling (C < 1) are lossless in distribution.

Setup: random target and draft models over a 6-token vocabulary (peaked: logit std ~2), prompt
[1, 2, 3], T = 1. The statistic is the joint distribution of the first m generated tokens against
the target's exact one (enumerated), Pearson chi-square with cells of expected count < 5 pooled;
a correct sampler must give p > 1e-3 (fixed seeds, so each run is deterministic), a broken one
p < 1e-3.
Sample sizes and power: reference N = 1500 (m = 2), engines N = 3000 (m = 3). The broken verifier
(q = the draft's plain softmax while the draft really samples from sigma_{F,C}, i.e. it ignores C)
shifts the joint so much that these seeds give p = 7e-44 (reference) and 4e-95 (SD engine): a
chi-square statistic of several hundred against a 1e-3 critical value of ~60 (about 30 pooled cells),
i.e. power > 0.999 at these sizes. Correct samplers gave p = 0.025 (reference SSD), 0.015 (SD engine),
0.57 (SSD engine) here, and 0.03-0.91 over three more seeds at N = 4000 for both engines.
Speed: the reference (memoized full forwards) runs SSD over a 1-token lookahead; the real SD engine
and the real SSD engine (draft process) run N identical prompts as one batch, N independent samples.
"""

import pytest
import torch
from exec_helpers import as_fn, chi2_pvalue, exact_joint

from saguaro_exec import RunConfig, run
from saguaro_exec.engine.drafter import Drafter
from saguaro_exec.model import ModelConfig, random_model
from saguaro_exec.reference import sd_generate, ssd_generate
from saguaro_exec.sampling import make_generator, target_probs
from saguaro_sim import SpecConfig

V, PROMPT, TEMP = 6, [1, 2, 3], 1.0
_CFG = ModelConfig(vocab_size=V, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32)
TARGET, DRAFT = random_model(_CFG, seed=1, std=0.5), random_model(_CFG, seed=2, std=0.5)
T_FN, D_FN = as_fn(TARGET), as_fn(DRAFT)
EXACT = {m: exact_joint(T_FN, PROMPT, m, V, TEMP) for m in (2, 3)}


def _ref_ssd(n: int, plain_q: bool) -> tuple[float, float]:
    gen = make_generator(11)
    samples, hits = [], []
    for _ in range(n):
        out, h = ssd_generate(T_FN, D_FN, PROMPT, 2, 1, (2, 1), (1, 1), 0.3, TEMP, gen, plain_q=plain_q)
        samples.append(tuple(out))
        hits += h
    return chi2_pvalue(samples, EXACT[2]), sum(hits) / len(hits)


def test_reference_ssd_matches_target_and_broken_verifier_is_rejected():
    p_ok, hit_rate = _ref_ssd(1500, plain_q=False)
    assert p_ok > 1e-3
    assert 0.1 < hit_rate < 0.95              # both cache hits and misses (backup) were exercised
    p_bad, _ = _ref_ssd(1500, plain_q=True)
    assert p_bad < 1e-3


def test_reference_sd_with_small_c_matches_target():
    gen = make_generator(12)
    samples = [tuple(sd_generate(T_FN, D_FN, PROMPT, 3, 2, TEMP, gen, (2, 1, 1), 0.3)) for _ in range(1500)]
    assert chi2_pvalue(samples, EXACT[3]) > 1e-3


def _engine(mode: str, n: int, inline: bool = False, protocol: str = "auto", **spec) -> list[tuple]:
    # the draft process prefills its n rows one by one before its first reply (speculator/worker.py) while the
    # verifier's are batched: on a loaded 2-core box that takes longer than the default 5 s reply timeout
    cfg = RunConfig(spec=SpecConfig(mode=mode, temperature=TEMP, batch_size=n, **spec), target=TARGET,
                    draft=DRAFT, prompts=[PROMPT] * n, max_new_tokens=3, seed=5, inline_draft=inline,
                    ssd_protocol=protocol, draft_timeout_s=60.0)
    rep = run(cfg)
    return [tuple(t) for t in rep.token_ids], rep


def test_sd_engine_matches_target_and_ignoring_c_is_rejected(monkeypatch):
    samples, _ = _engine("sd", 3000, k=2, fanout=(2, 1, 1), sampler_c=0.3)
    assert chi2_pvalue(samples, EXACT[3]) > 1e-3

    real_pick = Drafter._pick

    def broken_pick(self, logits, fan):           # samples from sigma_{F,C}, reports the plain softmax
        tok, _ = real_pick(self, logits, fan)
        return tok, target_probs(logits, self.temperature)

    monkeypatch.setattr(Drafter, "_pick", broken_pick)
    bad, _ = _engine("sd", 3000, k=2, fanout=(2, 1, 1), sampler_c=0.3)
    assert chi2_pvalue(bad, EXACT[3]) < 1e-3


@pytest.mark.parametrize("protocol,backup", [("reply", "neural"), ("push", "neural"), ("push", "fast")])
def test_ssd_engine_in_draft_process_matches_target(protocol, backup):
    """The real SSD engine, draft in its own process, N = 3000 rows in one batch, K = 2; both message
    protocols (push: the verifier looks hits up in the cache the draft sent it), and the fast backup at
    T > 0 (its n-gram or random proposals verified against q = one-hot: exact for every draw)."""
    samples, rep = _engine("ssd", 3000, protocol=protocol, k=2, fanout=(2, 1, 1), fanout_miss=(1, 1, 1),
                           sampler_c=0.3, backup=backup)
    assert rep.measurements.meta["ssd_protocol"] == protocol
    assert not rep.measurements.meta["faults"]   # SSD ran: no draft fault handed the batch to the SD fallback
    assert chi2_pvalue(samples, EXACT[3]) > 1e-3
    assert 0.05 < rep.hit_rate < 0.95             # cached speculations (hits) and backups both used
    assert torch.tensor([len(s) for s in samples]).eq(3).all()
