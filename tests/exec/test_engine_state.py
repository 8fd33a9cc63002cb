"""engine/state.py (one Sequence per request, held in a BatchState's slots) and sampling.batch_seed (the
per-batch, per-role seeds every run draws from: fixed, since recorded runs must replay)."""

import pytest

from saguaro_exec.engine.state import BatchState, Sequence
from saguaro_exec.sampling import batch_seed


def test_sequence_stops_at_eos_and_max_new():
    s = Sequence.from_prompt([5, 6], max_new=10, eos_ids=[9])
    s.append([1, 2], round_idx=0)
    assert (s.done, s.output, s.finish_round) == (False, [1, 2], -1)
    s.append([3, 9, 4], round_idx=1)                      # cut after the EOS
    assert (s.done, s.output, s.tokens, s.finish_round) == (True, [1, 2, 3, 9], [5, 6, 1, 2, 3, 9], 1)
    s.append([7], round_idx=2)                            # a finished sequence takes nothing
    assert s.tokens == [5, 6, 1, 2, 3, 9]
    long = Sequence.from_prompt([1], max_new=2, eos_ids=[])
    long.append([4, 4, 4], round_idx=0)                   # a round may overshoot max_new: output is cut
    assert long.done and long.output == [4, 4] and long.finish_round == 0
    with pytest.raises(ValueError, match="zero tokens"):
        Sequence.from_prompt([], 3, [])


def test_batch_state_slots():
    st = BatchState([[1], [2, 3]], max_new=2, eos_ids=[0])
    assert len(st) == 2 and st.live() == [0, 1] and st.seqs == [[1], [2, 3]]
    st.append(0, [0], 0)
    assert st.done == [True, False] and st.live() == [1] and st.finish_round == [0, -1] and not st.all_done()
    st.append(1, [7, 8], 1)
    assert st.all_done() and st.outputs() == [[0], [7, 8]] and st.seqs[1] is st.slots[1].tokens


def test_batch_seeds_are_the_recorded_ones():
    for seed in (0, 17):
        for bi in (0, 1, 5):
            assert batch_seed(seed, bi, "target") == seed + 104729 * bi
            assert batch_seed(seed, bi, "draft") == seed + 7919 * (bi + 1)
            assert batch_seed(seed, bi, "fallback") == seed + 7919 * (bi + 1) + 1
    with pytest.raises(ValueError, match="role"):
        batch_seed(0, 0, "tree")
