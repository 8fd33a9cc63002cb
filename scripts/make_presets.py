"""Write the shipped roofline preset profiles to calibration/profiles/ (deterministic: rerun after edits).

Latencies come from the roofline model with a software-stack level (calibration.stack: "serving", fitted to
published vLLM / NIM step times; "saguaro", our executor as measured on the H200); acceptance and hit curves are
orientation values assumed from the paper's reported ranges, not measured. The 70B presets all use the paper's
layout (target on 4 devices, draft on a 5th). Profiles h200-llama8b-llama1b-{eager,graphs} and cpu-* are
written from measurements by other tools and are not touched here.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.profile import PRESET_DIR, Profile  # noqa: E402
from calibration.roofline import ASSUMED, paper_acceptance, paper_hits, roofline  # noqa: E402

# name: (hardware, target, target_tp, draft, alpha at T=0, alpha at T=0.7, hit-curve c at T=0, r, stack)
PRESETS = {
    "h100-llama70b-tp4-llama1b": ("h100", "llama-3.1-70b", 4, "llama-3.2-1b", 0.80, 0.70, 0.27, 0.53, "serving"),
    "b200-llama70b-tp4-llama1b": ("b200", "llama-3.1-70b", 4, "llama-3.2-1b", 0.80, 0.70, 0.27, 0.53, "serving"),
    "a100-llama70b-tp4-llama1b": ("a100", "llama-3.1-70b", 4, "llama-3.2-1b", 0.80, 0.70, 0.27, 0.53, "serving"),
    "mi300x-llama70b-tp4-llama1b": ("mi300x", "llama-3.1-70b", 4, "llama-3.2-1b", 0.80, 0.70, 0.27, 0.53,
                                    "serving"),
    "h100-llama8b-llama1b": ("h100", "llama-3.1-8b", 1, "llama-3.2-1b", 0.76, 0.66, 0.30, 0.52, "serving"),
    "h100-qwen32b-tp2-qwen0.6b": ("h100", "qwen3-32b", 2, "qwen3-0.6b", 0.74, 0.64, 0.32, 0.50, "serving"),
    # the second level: our executor as measured, on the hardware and shapes it was measured on
    "h200-llama8b-llama1b-saguaro": ("h200", "llama-3.1-8b", 1, "llama-3.2-1b", 0.76, 0.66, 0.30, 0.52, "saguaro"),
}


def build(name: str) -> Profile:
    """The preset profile `name` from the table above."""
    hw, target, tp, draft, a0, a07, c, r, stack = PRESETS[name]
    p = roofline(hardware=hw, target=target, target_tp=tp, draft=draft, draft_tp=1,
                 acceptance=paper_acceptance(a0, a07), hits=paper_hits(c, r), name=name, stack=stack)
    prov = dict(p.provenance)
    prov.update({"acceptance": ASSUMED, "hits": ASSUMED, "c_effect": ASSUMED,
                 "generated_by": "scripts/make_presets.py"})
    return p.with_(provenance=prov)


def main(argv: list[str] | None = None) -> int:
    """Write every preset (or the named ones) into --out (default calibration/profiles/)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"presets to write (default all: {', '.join(PRESETS)})")
    ap.add_argument("--out", default=str(PRESET_DIR), help="output folder")
    args = ap.parse_args(argv)
    for name in args.names or PRESETS:
        if name not in PRESETS:
            print(f"names: unknown preset {name!r}; allowed: {', '.join(PRESETS)}", file=sys.stderr)
            return 2
        path = os.path.join(args.out, f"{name}.json")
        build(name).to_json(path)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
