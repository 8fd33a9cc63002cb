"""The verifier's check of a reply's draft distributions (validate.check_reply_q, on a miss's critical path at
T > 0): a valid q passes; each way a q can be impossible (negative, NaN, inf, rows not summing to 1, a sent
token the q gives no mass) is a malformed-reply DraftFault naming it; finished rows are not checked."""

import math

import pytest
import torch

from saguaro_exec.faults import DraftFault
from saguaro_exec.speculator.validate import check_reply_q

B, K, V = 3, 4, 11


def _reply():
    gen = torch.Generator().manual_seed(0)
    q = torch.softmax(torch.randn(B, K, V, generator=gen), -1)
    return q, q.argmax(-1), torch.ones(B, dtype=torch.bool)


def test_valid_q_passes():
    q, tokens, live = _reply()
    check_reply_q(q, tokens, live)
    check_reply_q(q[:, :, :], tokens, torch.tensor([True, False, True]))


@pytest.mark.parametrize("garble,says", [
    (lambda q, t: q[1, 2].__setitem__(3, -0.01), "negative or non-finite"),
    (lambda q, t: q[0, 0].__setitem__(0, math.nan), "negative or non-finite"),
    (lambda q, t: q[2, 3].__setitem__(5, math.inf), "negative or non-finite"),
    (lambda q, t: q[1].mul_(0.9), "do not sum to 1"),
    (lambda q, t: (q[0, 1].__setitem__(int(t[0, 1]), 0.0), q[0, 1].div_(q[0, 1].sum())), "zero probability"),
])
def test_each_impossible_q_is_a_malformed_reply(garble, says):
    q, tokens, live = _reply()
    garble(q, tokens)
    with pytest.raises(DraftFault, match=says) as err:
        check_reply_q(q, tokens, live)
    assert err.value.kind == "malformed"


def test_finished_rows_are_not_checked():
    q, tokens, live = _reply()
    q[1].fill_(-1.0)
    check_reply_q(q, tokens, torch.tensor([True, False, True]))
    with pytest.raises(DraftFault):
        check_reply_q(q, tokens, live)
