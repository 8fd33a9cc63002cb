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

import torch
import torch.nn.functional as F

from saguaro_exec.engine.cached_model import CachedModel
from saguaro_exec.model.transfer import to_device, to_host
from saguaro_exec.sampling import saguaro_probs, sample


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
    host); few torch calls: each costs microseconds on the overhead-bound CPU path."""
    bsz, kp1, vocab = d_logits.shape
    dev = d_logits.device
    fans = fan.tolist()
    width = min(vocab, max(n_rank, max(max(r) for r in fans)) + 1)
    top = d_logits.float().topk(width, dim=-1).indices                       # [B, K+1, R] best first
    keep = top != F.pad(to_device(sent, dev), (0, 1), value=-1).unsqueeze(-1)
    rank = torch.where(keep, keep.cumsum(-1) - 1, -1)
    flat_sel = (keep & (rank < to_device(fan, dev).unsqueeze(-1))).view(bsz, -1)
    n = _fork_width(fans, width)
    idx = torch.argsort(~flat_sel, dim=-1, stable=True)[:, :n]              # selected first, in order
    return Fork(branch_k=idx // width, branch_t=top.view(bsz, -1).gather(1, idx),
                valid=flat_sel.gather(1, idx), top=top, rank=rank)


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
    longest row's L + K), so each step's mask update is one block copy, its slots one view, and step i
    attends only the slots written so far."""
    bsz, n = f.branch_t.shape
    dev = f.branch_t.device
    top = int(prefix_len.max()) + k                                          # first tree slot, every row
    width = top + k * n
    if width > runner.capacity:
        raise RuntimeError(f"tree needs {width} cache slots, capacity {runner.capacity}")
    seen = to_device(prefix_len, dev).view(-1, 1) + f.branch_k               # [B, N]: prefix + accepted
    mask = torch.arange(width, device=dev).view(1, 1, width) < seen.unsqueeze(-1)   # [B, N, S]
    own = torch.eye(n, dtype=torch.bool, device=dev)                         # step i: branch j's own slot
    slots = torch.arange(top, width, device=dev).view(k, 1, n).expand(k, bsz, n)
    tok = f.branch_t
    toks, qs = [], []
    for i in range(k):                       # step i attends slots [0, top + (i+1) N): none later is written yet
        end = top + (i + 1) * n
        mask[:, :, end - n:end] = own
        logits = runner.forward(tok, seen + i, slots[i], mask[:, :, :end])   # [B, N, V]
        if temperature <= 0:
            tok = logits.argmax(-1)
        else:
            q = saguaro_probs(logits, temperature, fan[i], sampler_c)
            tok = sample(q, gen)
            qs.append(q)
        toks.append(tok)
    q_all = torch.stack(qs, 2) if qs else None
    return SpecCache(fork=f, tokens=torch.stack(toks, 2), q=q_all)
