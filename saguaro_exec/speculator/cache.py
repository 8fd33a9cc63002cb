"""SSD's speculation cache: forking the candidate outcomes (k, t) and drafting all branches as a tree.

A branch (k, t) is one outcome the verifier may report: "the first k sent tokens accepted, then bonus
token t". ``fork`` picks the branches (the draft's top tokens at each position k, minus the token sent
there, as many as the fan-out allows); ``build_tree`` drafts K tokens for every branch at once.

Tree layout in the draft's KV cache, per sequence (L = true prefix length, K lookahead, N branches):
slots [0, L+K) hold the prefix and the sent speculation s_1..s_K (written by the glue forward); tree
step i writes branch j at slot M + i*N + j, M = the batch's longest L + K (one offset for every row;
a shorter row's slots between its L + K and M are never seen). Branch (k, t) sees slots [0, L+k) (the
prefix and the k accepted tokens) and its own earlier tree slots, nothing of other branches; its
logical positions continue from L + k, so RoPE sees the sequence it would really be. The tree slots
are scratch: after the outcome only the accepted sent tokens' K/V stay valid (``Drafter.advance``),
and the next glue forward writes from there on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from saguaro_exec.engine.cached_model import CachedModel
from saguaro_exec.model.transfer import to_device, to_host
from saguaro_exec.sampling import greedy, saguaro_probs, sample


@dataclass
class Fork:
    """Candidate outcomes per row: branch_k/branch_t/valid [B, N]; ``top`` [B, K+1, R] the draft's
    ranking at each position and ``rank`` its 0-based rank excluding the sent token (-1 = excluded)."""

    branch_k: torch.Tensor
    branch_t: torch.Tensor
    valid: torch.Tensor
    top: torch.Tensor
    rank: torch.Tensor


@dataclass
class SpecCache:
    """S^T: the drafted speculation (K tokens, their q) for every forked outcome of every row."""

    fork: Fork
    tokens: torch.Tensor            # [B, N, K]
    q: torch.Tensor | None          # [B, N, K, V] at temperature > 0

    def host(self) -> SpecCache:
        """The fork and the drafted tokens on the host, in one transfer (q stays where it is)."""
        f = self.fork
        bk, bt, ok, top, rank, toks = to_host(f.branch_k, f.branch_t, f.valid, f.top, f.rank, self.tokens)
        return SpecCache(Fork(bk, bt, ok, top, rank), toks, self.q)


def fork(d_logits: torch.Tensor, sent: torch.Tensor, fan: torch.Tensor, n_rank: int) -> Fork:
    """Top-F_k draft tokens at each position k from D_0..D_K [B, K+1, V], excluding the token sent at
    k (it can never be the bonus after its own rejection); fan [B, K+1] per-row fan-out (host), sent [B, K].
    Runs where ``d_logits`` is, without a host sync (the branch count comes from ``fork_width``, on the
    host); after the ranking, on the CPU a dozen numpy calls over the small integer arrays (a torch call
    costs several times a numpy one there), elsewhere the same selection in torch (``_select``)."""
    vocab = d_logits.shape[-1]
    fans = fan.tolist()
    width = min(vocab, max(n_rank, max(max(r) for r in fans)) + 1)
    top = d_logits.float().topk(width, dim=-1).indices                       # [B, K+1, R] best first
    n = _fork_width(fans, width)
    if top.device.type == "cpu" and sent.device.type == "cpu":
        return _select_host(top, sent, fan, n)
    return _select(top, sent, fan, n)


def _select(top: torch.Tensor, sent: torch.Tensor, fan: torch.Tensor, n: int) -> Fork:
    """The fork's branches from the ranking ``top`` [B, K+1, R], first ``n`` selected per row, in order."""
    bsz, _, width = top.shape
    dev = top.device
    keep = top != F.pad(to_device(sent, dev), (0, 1), value=-1).unsqueeze(-1)
    rank = torch.where(keep, keep.cumsum(-1) - 1, -1)
    flat_sel = (keep & (rank < to_device(fan, dev).unsqueeze(-1))).view(bsz, -1)
    idx = torch.argsort(~flat_sel, dim=-1, stable=True)[:, :n]              # selected first, in order
    return Fork(branch_k=idx // width, branch_t=top.view(bsz, -1).gather(1, idx),
                valid=flat_sel.gather(1, idx), top=top, rank=rank)


def _select_host(top: torch.Tensor, sent: torch.Tensor, fan: torch.Tensor, n: int) -> Fork:
    """``_select`` in numpy over CPU tensors (the same values and dtypes; tests/exec/test_tree_steps.py)."""
    t = top.numpy()
    bsz, _, width = t.shape
    keep = np.ones(t.shape, dtype=bool)                                      # position K: nothing excluded
    np.not_equal(t[:, :-1], sent.numpy()[..., None], out=keep[:, :-1])
    rank = np.where(keep, keep.cumsum(-1) - 1, -1)
    flat_sel = (keep & (rank < fan.numpy()[..., None])).reshape(bsz, -1)
    idx = np.argsort(~flat_sel, axis=-1, kind="stable")[:, :n]
    return Fork(branch_k=torch.from_numpy(idx // width),
                branch_t=torch.from_numpy(np.take_along_axis(t.reshape(bsz, -1), idx, 1)),
                valid=torch.from_numpy(np.take_along_axis(flat_sel, idx, 1)), top=top,
                rank=torch.from_numpy(rank.astype(np.int64, copy=False)))


def fork_width(fan: torch.Tensor, width: int) -> int:
    """Branches ``fork`` selects per row (at least 1), from the fan-out alone: at position k < K the sent
    token is excluded from the ``width`` ranked tokens (when ranked), at K nothing is; fan never exceeds
    width - 1 unless width is the whole vocabulary, where the sent token is always ranked."""
    return _fork_width(fan.tolist(), width)


def _fork_width(fans: list[list[int]], width: int) -> int:
    return max(1, max(sum(min(f, width - 1) for f in r[:-1]) + min(r[-1], width) for r in fans))


def tree_slots(k: int, branches: int) -> int:
    """Cache slots the tree region needs per sequence."""
    return k * branches


@torch.inference_mode()
def build_tree(runner: CachedModel, f: Fork, prefix_len: torch.Tensor, k: int, temperature: float,
               sampler_c: float, fan: tuple[int, ...], gen: torch.Generator | None) -> SpecCache:
    """K batched tree steps over all branches; each step samples from sigma_{F_i,C} (greedy at T=0). Runs
    where the fork's tensors are (prefix_len on the host), without a host sync: ``SpecCache.host`` then
    brings the fork and tokens over in one transfer. Every row's tree region starts at the same slot (the
    longest row's L + K), so step i's slots are one block and it attends only the slots written so far,
    a prefix of one mask made for all K steps; the steps' positions, slots (and on the lean path their
    RoPE tables and write indices, ``CachedModel.step_inputs``) are made once too."""
    bsz, n = f.branch_t.shape
    dev = f.branch_t.device
    top = int(prefix_len.max()) + k                                          # first tree slot, every row
    width = top + k * n
    if width > runner.capacity:
        raise RuntimeError(f"tree needs {width} cache slots, capacity {runner.capacity}")
    seen = to_device(prefix_len, dev).view(-1, 1) + f.branch_k               # [B, N]: prefix + accepted
    mask = torch.arange(width, device=dev).view(1, 1, width) < seen.unsqueeze(-1)   # [B, N, S]
    mask[:, :, top:] = _own_slots(n, k, dev)             # branch j's slot of every step: step i's prefix of the
    mask = runner.step_mask(mask)                        # mask, [0, top + (i+1) N), holds steps 0..i only
    pos = seen + torch.arange(k, device=dev).view(k, 1, 1)                   # [K, B, N]
    slots = torch.arange(top, width, device=dev).view(k, 1, n).expand(k, bsz, n)
    steps = zip(pos.unbind(0), slots.unbind(0), runner.step_inputs(pos, slots))
    tok = f.branch_t
    toks, qs = [], []
    for i, (pos_i, slots_i, made) in enumerate(steps):
        logits = runner.tree_step(tok, pos_i, slots_i, mask[:, :, :top + (i + 1) * n], made)   # [B, N, V]
        if temperature <= 0:
            tok = greedy(logits)
        else:
            q = saguaro_probs(logits, temperature, fan[i], sampler_c)
            tok = sample(q, gen)
            qs.append(q)
        toks.append(tok)
    q_all = torch.stack(qs, 2) if qs else None
    return SpecCache(fork=f, tokens=torch.stack(toks, 2), q=q_all)


_OWN: dict = {}


def _own_slots(n: int, k: int, dev: torch.device) -> torch.Tensor:
    """[N, K*N] bool: branch j sees tree slot i*N + j of every step i (made once per shape and device)."""
    key = (n, k, dev)
    got = _OWN.get(key)
    if got is None:
        got = _OWN[key] = torch.eye(n, dtype=torch.bool, device=dev).repeat(1, k)
    return got
