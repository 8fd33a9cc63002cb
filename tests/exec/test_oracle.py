"""Oracle: at T = 0 on the shipped tiny pair, the engines' per-round records (accepted length, cache hit,
bonus rank, backup flag: the rows calibration fits) equal the plain reference's (saguaro_exec.reference),
round by round, for SD and for SSD with the neural and the fast backup.

Batch size 1, so every batch is one sequence the reference decodes alone; the fast backup's random
fall-back tokens come from the draft side's generator, seeded per batch (sampling.batch_seed "draft").
"""

import pytest
from exec_helpers import as_fn

from saguaro_exec import RunConfig, run
from saguaro_exec.io.assets import tiny_pair_paths
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
from saguaro_exec.io.tokenizer import load_tokenizer
from saguaro_exec.model import load_model
from saguaro_exec.reference import Round, sd_rounds, ssd_rounds
from saguaro_exec.sampling import batch_generator
from saguaro_sim import SpecConfig

TARGET_DIR, DRAFT_DIR = tiny_pair_paths()
TARGET, DRAFT = load_model(TARGET_DIR), load_model(DRAFT_DIR)
PROMPTS = [load_tokenizer(TARGET_DIR).encode(p) for p in (*BUILTIN_PROMPTS[:3], "Q")]  # "Q": no n-gram match
K, N_NEW, SEED = 3, 24, 3
FAN, FAN_MISS = (2, 2, 1, 1), (1, 1, 1, 1)


T_FN, D_FN = as_fn(TARGET), as_fn(DRAFT)     # full forwards without a cache, memoized


def _engine_rounds(mode: str, **kw) -> list[list[Round]]:
    spec = SpecConfig(mode=mode, k=K, fanout=FAN, fanout_miss=FAN_MISS, batch_size=1, temperature=0.0, **kw)
    rep = run(RunConfig(spec=spec, prompts=PROMPTS, max_new_tokens=N_NEW, seed=SEED, inline_draft=True))
    per_batch: list[list[Round]] = [[] for _ in PROMPTS]
    for row in rep.measurements.rounds:
        assert len(row["seq"]) == 1
        # batch 1: a refilled queue (AR / SD) names the prompt in seq, fixed batches (SSD) by batch_index
        per_batch[row["batch_index"] + row["seq"][0]].append(Round(row["accepted"][0], row["bonus_rank"][0],
                                                   row["hit"][0], row["from_backup"][0]))
    return per_batch


def test_sd_rounds_equal_the_reference():
    eos = tuple(TARGET.config.eos_ids)
    got = _engine_rounds("sd")
    want = [sd_rounds(T_FN, D_FN, p, N_NEW, K, eos) for p in PROMPTS]
    assert got == want
    ranks = [r.bonus_rank for rounds in want for r in rounds]
    assert any(r > 0 for r in ranks) and any(r.accepted < K for rounds in want for r in rounds)


@pytest.mark.parametrize("backup", ["neural", "fast"])
def test_ssd_rounds_equal_the_reference(backup):
    eos, vocab = tuple(TARGET.config.eos_ids), DRAFT.config.vocab_size
    got = _engine_rounds("ssd", backup=backup)
    want = [ssd_rounds(T_FN, D_FN, p, N_NEW, K, FAN, FAN_MISS, backup,
                       batch_generator(SEED, bi, "draft"), vocab, eos) for bi, p in enumerate(PROMPTS)]
    assert got == want
    hits = [r.hit for rounds in want for r in rounds]
    assert any(hits) and not all(hits)            # both a cache hit and a miss (backup) were compared
