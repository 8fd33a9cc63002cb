"""saguaro_exec.run keeps what is alive at its start out of the cyclic GC while it decodes (shorter collector
pauses per round) and gives the caller's objects back to the collector afterwards, unless the caller froze them."""

import gc

from exec_helpers import tiny_models

from saguaro_exec import RunConfig, run
from saguaro_exec.run import frozen_gc
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()


def test_frozen_during_the_run_and_unfrozen_after():
    assert gc.get_freeze_count() == 0
    with frozen_gc():
        assert gc.get_freeze_count() > 0           # everything alive now is out of the collector's walks
        junk = [[]]
        junk[0].append(junk)                       # a cycle made during the run is still collectable
        del junk
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0
    rep = run(RunConfig(spec=SpecConfig(mode="sd", k=2), target=TARGET, draft=DRAFT, prompts=[[1, 2, 3]],
                        max_new_tokens=6))
    assert len(rep.token_ids[0]) == 6 and gc.get_freeze_count() == 0


def test_a_callers_own_freeze_is_left_alone():
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with frozen_gc():
            assert gc.get_freeze_count() >= before
        assert gc.get_freeze_count() >= before > 0  # not unfrozen by us
    finally:
        gc.unfreeze()
