"""The fidelity benchmark's configurations: what the fit sees (CALIBRATION) and what it must predict (TESTS)."""

from __future__ import annotations

from saguaro_sim import SpecConfig as S

CALIBRATION = [  # acceptance/hits at T 0, 0.7, 1.0 up to K = 8, C < 1, both backups, SD and AR, widths 1..6
    S(mode="ssd", k=8, budget=32, temperature=0.0),
    S(mode="ssd", k=8, budget=32, temperature=0.7),
    S(mode="ssd", k=8, budget=32, temperature=1.0),
    S(mode="ssd", k=2, budget=6, temperature=0.0),  # a small tree too: executor costs at a second width
    S(mode="ssd", k=2, budget=6, temperature=0.7),
    S(mode="ssd", k=6, budget=24, temperature=0.7, sampler_c=0.5),
    S(mode="ssd", k=6, budget=24, temperature=0.7, backup="fast", batch_size=2),
    S(mode="ssd", k=6, budget=24, temperature=0.0, backup="fast", batch_size=2),  # fast-backup acceptance at T=0
    S(mode="ssd", k=4, budget=12, temperature=0.0, batch_size=4),               # forwards at width 4
    S(mode="sd", k=4, temperature=0.0),
    S(mode="sd", k=4, temperature=0.7, batch_size=2),
    S(mode="ar", k=0, batch_size=2),
    # widths 6, then 2 (the queue's tail): per-width executor costs need a lever arm, or a line fitted at widths
    # 1-2 is extrapolated to 8 (bench/fidelity_phases.py on the 2026-12-01 runs); AR and SD also sampled
    S(mode="ar", k=0, temperature=0.0, batch_size=6),
    S(mode="ar", k=0, temperature=0.7, batch_size=6),
    S(mode="sd", k=4, temperature=0.0, batch_size=6),
    S(mode="sd", k=3, temperature=0.7, batch_size=6),
    # SSD sampled at width 4 with a 64-branch-token tree: the sampled tree / glue / fork lines and the draft's
    # own round (q rows) were fitted at widths 1-2 only and ran 0.2-0.9 ms short per round at T0.7 b4
    # (bench/fidelity_phases.py on the 2026-12-01 session-5 runs); appended, so older saved runs still replay
    S(mode="ssd", k=6, budget=16, temperature=1.0, batch_size=4),
    # greedy SSD at width 8 (the greedy tree line had no lever arm past width 4: 0.7 ms short at b8), and
    # acceptance at K = 2 for T = 1 (SSD) and T = 0 (SD): the unmeasured K = 3 below them read no table
    S(mode="ssd", k=4, budget=16, temperature=0.0, batch_size=8),
    S(mode="ssd", k=2, budget=6, temperature=1.0),
    S(mode="sd", k=2, temperature=0.0),
    # sampled AR at a second width: its overhead line was fitted at width 6 alone (flat), and charged width 4
    # 0.27 ms where 0.13 ran (2026-12-02 session 9: ar T0.7 b4 -11%)
    S(mode="ar", k=0, temperature=1.0, batch_size=2),
]
QUICK_CALIBRATION = [CALIBRATION[i] for i in (0, 1, 3, 6, 9, 11)]

TESTS = [  # configurations the fit did not see: batch 1/2/4/8, T 0/0.7/1.0, both backups, C < 1, both shapes, K 2..8
    ("ssd k2 geo T0 b1", S(mode="ssd", k=2, budget=12, temperature=0.0)),
    ("ssd k6 geo T0 b1", S(mode="ssd", k=6, budget=28, temperature=0.0)),
    ("ssd k8 uni T0 b1", S(mode="ssd", k=8, budget=27, fanout_shape="uniform", temperature=0.0)),
    ("ssd k3 uni T0 b1", S(mode="ssd", k=3, budget=16, fanout_shape="uniform", temperature=0.0)),
    ("ssd k5 geo T0.7 b1", S(mode="ssd", k=5, budget=24, temperature=0.7)),
    ("ssd k3 uni T1 b1", S(mode="ssd", k=3, budget=8, fanout_shape="uniform", temperature=1.0)),
    ("ssd k4 C0.7 T0.7 b1", S(mode="ssd", k=4, budget=16, temperature=0.7, sampler_c=0.7)),
    ("ssd k4 fast T0 b1", S(mode="ssd", k=4, budget=16, temperature=0.0, backup="fast")),
    ("ssd k3 neural T0 b2", S(mode="ssd", k=3, budget=16, temperature=0.0, batch_size=2)),
    ("ssd k7 uni T0 b2", S(mode="ssd", k=7, budget=24, fanout_shape="uniform", temperature=0.0, batch_size=2)),
    ("ssd k5 C0.5 T1 b2", S(mode="ssd", k=5, budget=18, temperature=1.0, sampler_c=0.5, batch_size=2)),
    ("ssd k3 fast T0.7 b4", S(mode="ssd", k=3, budget=16, temperature=0.7, backup="fast", batch_size=4)),
    ("ssd k4 neural T0.7 b4", S(mode="ssd", k=4, budget=20, temperature=0.7, batch_size=4)),
    ("ssd k3 fast T0 b8", S(mode="ssd", k=3, budget=12, temperature=0.0, backup="fast", batch_size=8)),
    ("sd k2 T0.7 b1", S(mode="sd", k=2, temperature=0.7)),
    ("sd k6 T0 b1", S(mode="sd", k=6, temperature=0.0)),
    ("sd k3 T0 b4", S(mode="sd", k=3, temperature=0.0, batch_size=4)),
    ("sd k5 T1 b8", S(mode="sd", k=5, temperature=1.0, batch_size=8)),
    ("ar T0 b1", S(mode="ar", k=0, temperature=0.0)),
    ("ar T0.7 b4", S(mode="ar", k=0, temperature=0.7, batch_size=4)),
    ("ar T1 b8", S(mode="ar", k=0, temperature=1.0, batch_size=8)),
]
QUICK_TESTS = ["ssd k3 neural T0 b2", "ssd k5 geo T0.7 b1", "sd k3 T0 b4", "ar T0 b1"]


def coverage(tests: list[tuple[str, S]]) -> dict:
    """What the test set spans (batch sizes, temperatures, backups, C < 1, shapes, K), to check it is unseen
    and covers what the issue asks."""
    ssd = [s for _, s in tests if s.mode == "ssd"]
    return {"n": len(tests), "batch": sorted({s.batch_size for _, s in tests}),
            "temperature": sorted({s.temperature for _, s in tests}), "backup": sorted({s.backup for s in ssd}),
            "sampler_c_below_1": any(s.sampler_c < 1 for _, s in tests),
            "shape": sorted({s.fanout_shape for s in ssd}), "k": sorted({s.k for _, s in tests if s.mode != "ar"})}
