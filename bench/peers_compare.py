"""Token-for-token comparison of decoders at T = 0, and, where two disagree, why: the target's logits at the
first differing position from uncached full forwards of both implementations (a near-tie that cached paths
round differently, or one decoder choosing a token that neither full forward prefers)."""

from __future__ import annotations

import torch

NEAR_TIE = 1e-3     # logit margin below which float32 rounding between code paths can flip an argmax


def first_mismatch(ours: list[list[int]], ref: list[list[int]]) -> dict | None:
    """The first (prompt, position) where two sets of outputs differ (a length difference counts at the
    shorter one's end), or None when they are token-identical."""
    if len(ours) != len(ref):
        return {"prompt": min(len(ours), len(ref)), "position": 0, "got": None, "expected": None,
                "detail": f"{len(ours)} outputs against {len(ref)}"}
    for i, (a, b) in enumerate(zip(ours, ref)):
        for j, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return {"prompt": i, "position": j, "got": x, "expected": y}
        if len(a) != len(b):
            j = min(len(a), len(b))
            return {"prompt": i, "position": j, "got": a[j] if j < len(a) else None,
                    "expected": b[j] if j < len(b) else None,
                    "detail": f"lengths {len(a)} against {len(b)} (one stopped at EOS or max_new_tokens)"}
    return None


def _top2(logits: torch.Tensor) -> dict:
    v, i = logits.topk(2)
    return {"top": [int(i[0]), int(i[1])], "logits": [float(v[0]), float(v[1])], "margin": float(v[0] - v[1])}


@torch.no_grad()
def explain(mismatch: dict, prompt: list[int], ref: list[int], hf_target, our_target) -> dict:
    """The target's next-token logits after prompt + ref[:position], from an uncached forward of each
    implementation (HF ``use_cache=False``, ours without a KV cache), and a one-line verdict."""
    pos = mismatch["position"]
    got, expected = mismatch["got"], mismatch["expected"]
    x = torch.tensor([prompt + ref[:pos]], dtype=torch.long)
    hf = hf_target(input_ids=x, use_cache=False).logits[0, -1].float()
    ours = our_target(x)[0, -1].float()
    out = {"hf_uncached": _top2(hf), "ours_uncached": _top2(ours),
           "max_abs_logit_diff": float((hf - ours).abs().max())}
    if got is None or expected is None:
        out["verdict"] = mismatch.get("detail", "length difference")
        return out
    gap = {name: float(lg[expected] - lg[got]) for name, lg in (("hf", hf), ("ours", ours))}
    out["logit_expected_minus_got"] = gap
    if min(abs(g) for g in gap.values()) < NEAR_TIE:
        out["verdict"] = (f"near-tie: tokens {expected} and {got} differ by {min(gap.values(), key=abs):.2e} in the "
                          "target's logits; float32 rounding of the different code paths picks either")
    elif gap["hf"] > 0 and gap["ours"] > 0:
        out["verdict"] = (f"decoder error: both uncached forwards prefer {expected} by > {NEAR_TIE:g} "
                          f"(hf {gap['hf']:.3g}, ours {gap['ours']:.3g}) but {got} was emitted")
    elif gap["hf"] < 0 and gap["ours"] < 0:
        out["verdict"] = (f"reference error: both uncached forwards prefer {got} (hf {-gap['hf']:.3g}, ours "
                          f"{-gap['ours']:.3g}) but the reference emitted {expected}")
    else:
        out["verdict"] = (f"model mismatch: the implementations disagree (hf prefers "
                          f"{expected if gap['hf'] > 0 else got}, ours {expected if gap['ours'] > 0 else got}; "
                          f"max |logit diff| {out['max_abs_logit_diff']:.3g})")
    return out
