"""Where the shipped tiny byte-level target/draft pair (and its deeper target for CPU benchmarks) lives."""

from __future__ import annotations

from pathlib import Path

TINY_DIR = Path(__file__).resolve().parent.parent / "assets" / "tiny"


def tiny_pair_paths() -> tuple[Path, Path]:
    """(target_dir, draft_dir): HF-layout checkpoint directories of the shipped tiny pair."""
    target, draft = TINY_DIR / "target", TINY_DIR / "draft"
    for p in (target, draft):
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"tiny pair checkpoint {p} is missing; train it with scripts/train_tiny.py")
    return target, draft


def tiny_deep_pair_paths() -> tuple[Path, Path]:
    """(target_dir, draft_dir): the 12-layer tiny target with the shipped tiny draft. Its forward costs
    ~12x the draft's on CPU (the 4-layer target's ~4x), so speculative decoding pays off there."""
    target, draft = TINY_DIR / "target-deep", TINY_DIR / "draft"
    for p in (target, draft):
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"tiny deep-pair checkpoint {p} is missing; train it with "
                                    f"scripts/train_tiny.py --model {p.name}")
    return target, draft
