"""Continuous batching at the row level (engine/refill.py): a batch of ``batch_size`` rows works through a
longer queue of prompts, a finished row taking the next prompt at once. At T = 0 every prompt's output
must equal the target's own greedy tokens (rows finish at different rounds: per-request lengths, EOS);
rounds name more distinct requests than there are rows, and no round forwards a finished row (a forward
hook on the real target counts the rows of every step)."""

import pytest
import torch
from exec_helpers import plain_greedy, tiny_models

from saguaro_exec import RunConfig, run
from saguaro_exec.engine.ar import run_ar
from saguaro_exec.engine.sd import run_sd
from saguaro_exec.engine.settings import Decoding, Drafting
from saguaro_exec.engine.state import BatchState
from saguaro_exec.model import causal_mask
from saguaro_exec.sampling import make_generator
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3, 9], [30, 4, 4], [5, 6, 7, 8], [9, 9, 9],
           [11, 12, 13, 14, 15, 16], [2, 2, 2]]
LENS = [20, 5, 13, 2, 17, 9, 3, 11]           # per-request max new tokens: rows finish at different rounds
N_NEW = max(LENS)
GREEDY = [plain_greedy(TARGET, p, n) for p, n in zip(PROMPTS, LENS)]


def _forward_rows(model):
    """Record (rows, tokens, first position) of every forward of ``model`` (a hook on the real module)."""
    seen = []
    handle = model.register_forward_hook(lambda m, args, out: seen.append((*args[0].shape, int(args[1].min()))))
    return seen, handle


def _check_rounds(rounds, width, seen, step_tokens):
    """Refill really happened and every forward of a round's width ``step_tokens`` had only live rows."""
    rids = {i for r in rounds for i in r["seq"]}
    assert rids == set(range(len(PROMPTS))) and len(rids) > width
    assert all(len(r["seq"]) == r["batch"] <= width for r in rounds)
    assert any(r.get("refill") for r in rounds[1:])                       # admitted mid-run
    last = {}
    for r in rounds:
        for i in r["seq"]:
            assert last.get(i, r["round"] - 1) == r["round"] - 1, "a request left and came back"
            last[i] = r["round"]
    steps = [rows for rows, t, pos in seen if t == step_tokens and pos > 0]   # prefills start at 0
    assert steps == [r["batch"] for r in rounds]                         # no finished row forwarded


@pytest.mark.parametrize("width", [1, 3])
def test_ar_refill_matches_greedy(width):
    dec = Decoding(N_NEW, 0.0)
    seen, handle = _forward_rows(TARGET)
    try:
        res = run_ar(TARGET, PROMPTS, dec, make_generator(0), width=width, out_lens=LENS)
    finally:
        handle.remove()
    assert res.tokens == GREEDY
    _check_rounds(res.rounds, width, seen, 1)
    assert all(f <= e for f, e in zip(res.first_s, res.finish_s))


@pytest.mark.parametrize("k,width", [(2, 3), (4, 2)])
def test_sd_refill_matches_greedy(k, width):
    dec = Decoding(N_NEW, 0.0)
    seen, handle = _forward_rows(TARGET)
    try:
        res = run_sd(TARGET, DRAFT, PROMPTS, dec, Drafting(k, (1,) * (k + 1)), (make_generator(0), make_generator(1)),
                     width=width, out_lens=LENS)
    finally:
        handle.remove()
    assert res.tokens == GREEDY
    _check_rounds(res.rounds, width, seen, k + 1)
    for r in res.rounds:
        assert len(r["accepted"]) == len(r["bonus_rank"]) == len(r["context"]) == r["batch"]


@pytest.mark.parametrize("mode", ["ar", "sd"])
def test_run_refills_from_the_prompt_queue(mode):
    """``run`` takes all prompts as one queue through spec.batch_size rows (one max length here)."""
    rep = run(RunConfig(spec=SpecConfig(mode=mode, k=3, batch_size=3), target=TARGET, draft=DRAFT,
                        prompts=PROMPTS, max_new_tokens=12))
    assert rep.token_ids == [plain_greedy(TARGET, p, 12) for p in PROMPTS]
    rows = rep.measurements.rounds
    assert len({i for r in rows for i in r["seq"]}) == len(PROMPTS) and max(r["batch"] for r in rows) == 3


def test_state_refill_moves_the_last_row_into_a_finished_one():
    st = BatchState([[1], [2], [3], [4], [5]], max_new=1, eos_ids=[], width=3)
    assert st.refill(0.0) == ([], [0, 1, 2]) and st.rids == [0, 1, 2]
    st.append(1, [7], 0)                                   # request 1 done: request 3 takes its slot
    assert st.refill(0.0) == ([], [1]) and st.rids == [0, 3, 2]
    st.append(0, [7], 1)
    st.append(1, [7], 1)                                   # two done, one request left
    moves, new = st.refill(0.0)
    assert (moves, new, st.rids) == ([(2, 1)], [0], [4, 2])
    for b in range(2):
        st.append(b, [7], 2)
    assert st.refill(0.0) == ([], []) and len(st) == 0 and st.all_done()
    assert st.outputs() == [[7]] * 5 and st.finish_round == [1, 0, 2, 1, 2]


def test_state_refill_waits_for_arrivals():
    st = BatchState([[1], [2]], max_new=1, eos_ids=[], width=2, arrivals=[0.0, 1.0])
    assert st.refill(0.5) == ([], [0]) and st.next_arrival() == 1.0
    assert st.refill(1.0) == ([], [1]) and st.slots[1].admit_s == 1.0


def test_refill_keeps_other_rows_context_in_the_cache():
    """A refilled row's prefill leaves the other rows' K/V bit for bit."""
    from saguaro_exec.engine.cached_model import CachedModel

    cm = CachedModel(TARGET, 3, 32)
    cm.extend([[1, 2, 3], [4, 5], [6]], torch.zeros(3, dtype=torch.long))
    k0 = cm.cache.k.clone()
    cm.prefill_row(1, [9, 9, 9, 9])
    assert torch.equal(cm.cache.k[:, 0], k0[:, 0]) and torch.equal(cm.cache.k[:, 2], k0[:, 2])
    assert not torch.equal(cm.cache.k[:, 1, :, :4], k0[:, 1, :, :4])


def test_batched_prefill_of_refilled_rows_matches_one_forward_per_row():
    """Refilled rows prefilled together (runs of consecutive rows in one forward; one whole-batch forward for a
    cache that cannot be viewed) hold the K/V one prefill per row gives, and the other rows keep theirs."""
    from saguaro_exec.engine.cached_model import CachedModel

    chunks = {0: [5, 6, 7], 2: [8, 9, 10, 11, 12], 3: [13, 14]}
    base = CachedModel(TARGET, 4, 32)
    base.extend([[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]], torch.zeros(4, dtype=torch.long))
    k0 = base.cache.k.clone()
    per_row = CachedModel(TARGET, 4, 32)
    batched = CachedModel(TARGET, 4, 32)
    whole = CachedModel(TARGET, 4, 32)
    for cm in (per_row, batched, whole):
        cm.cache.k.copy_(k0)
        cm.cache.v.copy_(base.cache.v)
    for r, c in chunks.items():
        per_row.model(torch.tensor([c]), torch.arange(len(c)).view(1, -1), per_row.cache.rows(r, 1),
                      torch.arange(len(c)).view(1, -1), causal_mask(torch.zeros(1, dtype=torch.long), len(c), len(c)))
    batched.prefill_rows(list(chunks), list(chunks.values()))
    whole._prefill_whole(sorted(chunks.items()))
    for cm in (batched, whole):
        for r, c in chunks.items():
            for a, b in ((cm.cache.k, per_row.cache.k), (cm.cache.v, per_row.cache.v)):
                assert torch.allclose(a[:, r, :, :len(c)], b[:, r, :, :len(c)], atol=1e-5)
        assert torch.equal(cm.cache.k[:, 1, :, :31], k0[:, 1, :, :31])   # the row not refilled: untouched
    assert torch.equal(batched.cache.k[:, 1], k0[:, 1])


@pytest.mark.parametrize("protocol,backup,inline", [("reply", "neural", False), ("push", "fast", False),
                                                    ("push", "neural", False), ("reply", "fast", True)])
def test_ssd_refill_matches_greedy(protocol, backup, inline):
    """SSD refills rows on both sides by the same rule (the draft from the outcome's done flags): a
    refilled row's first speculation is the backup's, and every output is the target's greedy one."""
    spec = SpecConfig(mode="ssd", k=3, batch_size=3, fanout=(2, 1, 1, 1), backup=backup)
    rep = run(RunConfig(spec=spec, target=TARGET, draft=DRAFT, prompts=PROMPTS, max_new_tokens=12,
                        inline_draft=inline, ssd_protocol=protocol))
    assert rep.token_ids == [plain_greedy(TARGET, p, 12) for p in PROMPTS]
    rows = rep.measurements.rounds
    assert len({i for r in rows for i in r["seq"]}) == len(PROMPTS)
    refilled = [(r, i) for r in rows for i in r.get("refill", [])]
    assert len(refilled) == len(PROMPTS) - 3
    for r, i in refilled:                                  # the admitted request's first round: a backup
        assert r["from_backup"][r["seq"].index(i)]
