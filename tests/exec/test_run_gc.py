"""saguaro_exec.run runs no cyclic-GC pass while it decodes (what is alive at its start frozen, automatic
collection off) and restores both afterwards, unless the caller had frozen or disabled them itself; a cycle made
during the run is still collectable."""

import gc

from exec_helpers import tiny_models

from saguaro_exec import RunConfig, run
from saguaro_exec.run import frozen_gc
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()


def test_frozen_during_the_run_and_unfrozen_after():
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    with frozen_gc():
        assert gc.get_freeze_count() > 0           # everything alive now is out of the collector's walks
        assert not gc.isenabled()                  # and no automatic pass stalls a round
        junk = [[]]
        junk[0].append(junk)                       # a cycle made during the run is still collectable
        del junk
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    rep = run(RunConfig(spec=SpecConfig(mode="sd", k=2), target=TARGET, draft=DRAFT, prompts=[[1, 2, 3]],
                        max_new_tokens=6))
    assert len(rep.token_ids[0]) == 6 and gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_callers_own_freeze_and_disable_are_left_alone():
    gc.freeze()
    gc.disable()
    try:
        before = gc.get_freeze_count()
        # frozen objects that die leave the count (another thread, e.g. a pytest-xdist worker's, frees some):
        # an unfreeze by us would drop it to 0
        with frozen_gc():
            assert gc.get_freeze_count() > 0.9 * before
        assert gc.get_freeze_count() > 0.9 * before > 0 and not gc.isenabled()   # neither undone by us
    finally:
        gc.unfreeze()
        gc.enable()
