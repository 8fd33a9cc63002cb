"""Executor runs at real shapes for bench/gpu_check.py: AR / SD / SSD timed, each next to the tokens/s the
simulator predicts from the profile fitted to the same machine's grid, plus the SSD / SD projection with the
draft on a second GPU.

Synthetic acceptance (issue 14, saguaro_exec/engine/synthetic.py: accepted lengths drawn from the profile's
AcceptanceModel, bonus tokens hitting the cache with its HitCurve's probabilities; timing only) is what the
runs use: `synthetic_kwargs` returns the RunConfig keywords. Without that mode (an older executor) it returns
None and the runs use random weights, whose acceptance is ~0 (timing only), and the predictions use the
acceptance and hit rate each run measured.
"""

from __future__ import annotations

import dataclasses

import torch

from calibration import AcceptanceModel, HitCurve, Profile
from calibration.shapes import ModelShape
from saguaro_sim import SpecConfig, Workload, simulate

SYNTHETIC_FIELD = "synthetic"
PROMPT_TOKENS = 128


def synthetic_kwargs(profile: Profile, seed: int = 0) -> dict | None:
    """RunConfig keywords for synthetic-acceptance timing with the profile's acceptance and hit curves, or None
    while the executor has no such mode (RunConfig lacks a `synthetic` field)."""
    import saguaro_exec

    if SYNTHETIC_FIELD not in {f.name for f in dataclasses.fields(saguaro_exec.RunConfig)}:
        return None
    from saguaro_exec.engine.synthetic import SyntheticAcceptance

    return {SYNTHETIC_FIELD: SyntheticAcceptance(profile.acceptance, profile.hits, seed, f"profile {profile.name}")}


def as_measured(profile: Profile, k: int, tokens_per_round: float, hit_rate: float | None) -> Profile:
    """The profile with the acceptance and hit rate a run measured (geometric / flat approximations)."""
    acc = (AcceptanceModel.from_acceptance_length(tokens_per_round, k) if 1.0001 < tokens_per_round < k + 1
           else AcceptanceModel.geometric(0.0 if tokens_per_round <= 1.0001 else 1.0))
    hits = profile.hits if hit_rate is None else HitCurve.power_law(max(1e-6, 1.0 - hit_rate), 0.0)
    return profile.with_(acceptance=acc, hits=hits)


def predicted_tokens_per_s(profile: Profile, spec: SpecConfig, batch: int, new_tokens: int) -> float:
    """Simulated throughput (tokens/s, all sequences) of one run's configuration and workload."""
    wl = Workload(num_sequences=batch, output_tokens=new_tokens, prompt_tokens=PROMPT_TOKENS)
    return float(simulate(profile, spec, wl, seed=0).throughput)


def shape_runs(target: ModelShape, draft: ModelShape, profile: Profile, device: str, dtype: torch.dtype,
               quick: bool, log, model_config) -> list[dict]:
    """AR / SD / SSD at one pair's shapes, CUDA graphs at their default; measured vs predicted tokens/s."""
    import saguaro_exec
    from saguaro_exec.model import random_model

    tgt = random_model(model_config(target, 4096), seed=0, device=device, dtype=dtype)
    drf = random_model(model_config(draft, 4096), seed=1, device=device, dtype=dtype)
    synth = synthetic_kwargs(profile)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for batch in (1,) if quick else (1, 4):
        prompts = [torch.randint(0, target.vocab, (PROMPT_TOKENS,), generator=gen).tolist() for _ in range(batch)]
        for mode in ("ar", "sd", "ssd"):
            spec = SpecConfig(mode=mode, k=4, budget=16, batch_size=batch)
            n_new = 16 if quick else 48
            cfg = saguaro_exec.RunConfig(spec=spec, target=tgt, draft=drf, prompts=prompts, max_new_tokens=n_new,
                                         device=device, seed=0, dtype=str(dtype).removeprefix("torch."),
                                         **(synth or {}))
            rep = saguaro_exec.run(cfg)
            used = profile if synth else as_measured(profile, 4, rep.mean_tokens_per_round, rep.hit_rate)
            pred = predicted_tokens_per_s(used, spec, batch, n_new)
            row = {"pair": f"{target.name}/{draft.name}", "mode": mode, "batch": batch, "new_tokens": n_new,
                   "acceptance": "synthetic (timing only)" if synth else "random weights, measured (timing only)",
                   "placement": "draft process on the target's GPU" if mode == "ssd" else "one process",
                   "tokens_per_s": rep.tokens_per_s, "predicted_tokens_per_s": pred,
                   "error": (pred - rep.tokens_per_s) / rep.tokens_per_s if rep.tokens_per_s else None,
                   "tokens_per_round": rep.mean_tokens_per_round, "hit_rate": rep.hit_rate,
                   "cuda_graphs": rep.measurements.meta.get("cuda_graphs"), "wall_s": rep.wall_s}
            log(f"{row['pair']} {mode} b={batch}: {rep.tokens_per_s:.1f} tok/s measured, {pred:.1f} predicted")
            rows.append(row)
    del tgt, drf
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return rows


def second_gpu_projection(profile: Profile, batch: int = 1) -> dict:
    """SSD vs SD the simulator projects for the profile's pair with the draft on its own GPU (separate devices,
    the profile's acceptance and hit curves)."""
    wl = Workload(num_sequences=max(4, batch), output_tokens=256, prompt_tokens=PROMPT_TOKENS)
    sd = simulate(profile, SpecConfig(mode="sd", k=4, batch_size=batch), wl, seed=0)
    ssd = simulate(profile, SpecConfig(mode="ssd", k=4, budget=16, batch_size=batch), wl, seed=0)
    ar = simulate(profile, SpecConfig(mode="ar", batch_size=batch), wl, seed=0)
    return {"batch": batch, "ar_tokens_per_s_per_seq": ar.tokens_per_s_per_seq,
            "sd_tokens_per_s_per_seq": sd.tokens_per_s_per_seq, "ssd_tokens_per_s_per_seq": ssd.tokens_per_s_per_seq,
            "ssd_over_sd": ssd.tokens_per_s_per_seq / sd.tokens_per_s_per_seq}
