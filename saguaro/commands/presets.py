"""`saguaro presets`: list the shipped profiles, hardware presets and model shapes (or show one profile)."""

from __future__ import annotations

import argparse

from calibration.errors import ConfigError
from calibration.hardware import HARDWARE
from calibration.profile import list_presets
from calibration.shapes import SHAPES
from saguaro.commands.common import load_profile, print_json, table

CONTEXT = 1024  # context length at which the listed latencies are evaluated


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = subparsers.add_parser("presets", help="list profiles, hardware and model shapes",
                              description="List shipped profile presets, hardware presets and model-shape presets.")
    p.add_argument("name", nargs="?", help="show one profile (preset name or JSON path) in full")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON only")
    return p


def _profile_row(name: str) -> dict:
    try:
        p = load_profile(name)
    except ConfigError as e:
        return {"name": name, "error": str(e)}
    prov = p.provenance
    stack = prov.get("stack", {}).get("name") if isinstance(prov.get("stack"), dict) else None
    source = prov.get("source", "?") + (f"/{stack}" if stack else "")  # roofline/serving, roofline/saguaro
    return {"name": name, "source": source, "target_ms": p.target(1, 1, CONTEXT) * 1e3,
            "draft_ms": p.draft(1, 1, CONTEXT) * 1e3, "alpha_t0": p.acceptance.mean_alpha(4, 0.0),
            "miss_f1_t0": p.hits.miss(1, 0, 0.0), "link_us": p.link_s * 1e6,
            "target_devices": prov.get("target_devices", 1)}


def main(args: argparse.Namespace) -> int:
    """Print the lists (or one profile)."""
    if args.name:
        try:
            p = load_profile(args.name)
        except ConfigError as e:
            raise ConfigError("name" if e.field == "--profile" else e.field, e.problem, e.allowed) from None
        if args.json:
            print_json(p.to_dict())
            return 0
        print(f"profile {p.name}: vocab {p.vocab_size}, link {p.link_s * 1e6:.1f} us, "
              f"fast backup {p.fast_backup_s * 1e6:.1f} us")
        rows = [[b, n, p.target(b, n, CONTEXT) * 1e3, p.draft(b, n, CONTEXT) * 1e3]
                for b, n in ((1, 1), (1, 8), (8, 8), (32, 8), (1, 64))]
        print(table(rows, ["batch", "new tokens", "target ms", "draft ms"]))
        for t in sorted(p.acceptance.by_temperature):
            print(f"T={t}: acceptance {p.acceptance.mean_alpha(4, t):.3f}, miss(F=1) {p.hits.miss(1, 0, t):.3f}, "
                  f"miss(F=8) {p.hits.miss(8, 0, t):.3f}")
        print("provenance:", ", ".join(f"{k}={v}" for k, v in p.provenance.items() if not isinstance(v, dict)))
        return 0
    profiles = [_profile_row(n) for n in list_presets()]
    if args.json:
        print_json({"profiles": profiles, "hardware": {k: h.to_dict() for k, h in HARDWARE.items()},
                    "models": {k: s.to_dict() for k, s in SHAPES.items()}})
        return 0
    print(f"Profiles (calibration/profiles/; latency at batch 1, context {CONTEXT}):")
    ok = [r for r in profiles if "error" not in r]
    print(table([[r["name"], r["source"], r["target_devices"], r["target_ms"], r["draft_ms"], r["link_us"],
                  r["alpha_t0"], r["miss_f1_t0"]] for r in ok],
                ["name", "source", "tgt dev", "target ms/tok", "draft ms/step", "link us", "alpha T=0",
                 "miss F=1"]))
    for r in profiles:
        if "error" in r:
            print(f"  {r['name']}: unreadable ({r['error']})")
    print("\nHardware:")
    print(table([[h.name, h.description, h.mem_bw / 1e12, h.peak_flops / 1e12, h.nvlink_bw / 1e9, h.efficiency]
                 for h in HARDWARE.values()],
                ["name", "description", "HBM TB/s", "bf16 TFLOP/s", "link GB/s/dir", "efficiency"]))
    print("\nModel shapes:")
    print(table([[s.name, s.params() / 1e9, s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate,
                  s.vocab, s.tied_embeddings] for s in SHAPES.values()],
                ["name", "params B", "layers", "hidden", "heads", "kv heads", "head dim", "interm.", "vocab", "tied"]))
    return 0
