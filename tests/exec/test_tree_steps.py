"""The tree's steps made ahead (one additive mask, RoPE tables and write indices for all K steps, the lean
forward called directly) are bitwise the per-step forward (``Transformer.forward``) with a bool mask grown
per step that the tree used to run: same drafted tokens, same K/V in every slot; the causal triangle's
additive form too; the CPU fork's numpy selection is the torch one."""

from __future__ import annotations

import torch
from exec_helpers import tiny_models

from saguaro_exec.engine.cached_model import CachedModel
from saguaro_exec.model import KVCache, causal_mask
from saguaro_exec.speculator.cache import Fork, _fork_width, _select, _select_host, build_tree


def _reference_tree(model, cache, f: Fork, prefix_len: torch.Tensor, k: int) -> torch.Tensor:
    """The tree as it was built before: ``Transformer.forward`` per step, the bool mask grown per step."""
    bsz, n = f.branch_t.shape
    top = int(prefix_len.max()) + k
    width = top + k * n
    seen = prefix_len.view(-1, 1) + f.branch_k
    mask = torch.arange(width).view(1, 1, width) < seen.unsqueeze(-1)
    tok, toks = f.branch_t, []
    for i in range(k):
        end = top + (i + 1) * n
        mask[:, :, end - n:end] = torch.eye(n, dtype=torch.bool)
        slots = torch.arange(end - n, end).expand(bsz, n)
        with torch.inference_mode():
            logits = model(tok, seen + i, cache, slots, mask[:, :, :end])
        tok = logits.argmax(-1)
        toks.append(tok)
    return torch.stack(toks, 2)


def _prefilled(model, rows: int, lengths: list[int], capacity: int = 96) -> CachedModel:
    runner = CachedModel(model, rows, capacity)
    gen = torch.Generator().manual_seed(7)
    vocab = model.config.vocab_size
    chunks = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
    runner.extend(chunks, [0] * len(lengths), graphed=False)
    return runner


def _fork(bsz: int, n: int, k: int, vocab: int) -> Fork:
    gen = torch.Generator().manual_seed(3)
    bk = torch.randint(0, k + 1, (bsz, n), generator=gen)
    bt = torch.randint(0, vocab, (bsz, n), generator=gen)
    ok = torch.ones(bsz, n, dtype=torch.bool)
    return Fork(bk, bt, ok, torch.zeros(bsz, k + 1, 2, dtype=torch.long), torch.zeros(bsz, k + 1, 2, dtype=torch.long))


def _check_tree(model, rows: int, lengths: list[int], hooked: bool = False) -> None:
    k, n = 4, 5
    runner = _prefilled(model, rows, lengths)
    ref_cache = KVCache(model.config, rows, runner.capacity)
    ref_cache.k.copy_(runner.cache.k)
    ref_cache.v.copy_(runner.cache.v)
    bsz = len(lengths)
    f = _fork(bsz, n, k, model.config.vocab_size)
    prefix_len = torch.tensor(lengths) - 1                 # as the draft: the glue wrote up to L + K
    handle = model.register_forward_hook(lambda *a: None) if hooked else None
    got = build_tree(runner, f, prefix_len, k, 0.0, 1.0, (1,) * (k + 1), None).tokens
    if handle is not None:
        handle.remove()
    want = _reference_tree(model, ref_cache.rows(0, bsz), f, prefix_len, k)
    assert torch.equal(got, want)
    assert torch.equal(runner.cache.k, ref_cache.k) and torch.equal(runner.cache.v, ref_cache.v)


def test_tree_steps_made_ahead_are_the_per_step_forward_bitwise():
    target, draft = tiny_models()
    for model in (draft, target):                          # 1 layer MQA, 2 layers GQA
        _check_tree(model, 2, [9, 4])
        _check_tree(model, 3, [6, 11])                     # fewer live rows than the cache (a row view)
        _check_tree(model, 1, [7], hooked=True)            # hooks: through the module call, same result


def test_lean_decode_with_the_additive_triangle_is_the_bool_mask_forward():
    """Batch-1 decode / glue chunks read the cached triangle (additive on the lean path): bitwise
    ``Transformer.forward`` with the bool causal mask."""
    target, _ = tiny_models()
    runner = _prefilled(target, 1, [10])
    assert runner._triangle is None or runner._triangle.dtype != torch.bool
    ref = KVCache(target.config, 1, runner.capacity)
    ref.k.copy_(runner.cache.k)
    ref.v.copy_(runner.cache.v)
    for start, chunk in ((10, [3, 1, 4, 1]), (14, [5])):
        got = runner.decode(torch.tensor([chunk]), [start])
        pos = torch.arange(start, start + len(chunk)).view(1, -1)
        with torch.inference_mode():
            want = target(torch.tensor([chunk]), pos, ref, pos, causal_mask(torch.tensor([start]), len(chunk),
                                                                            start + len(chunk)))
        assert torch.equal(got, want)
    assert runner._triangle.dtype == target.dtype
    assert torch.equal(runner.cache.k, ref.k) and torch.equal(runner.cache.v, ref.v)


def test_multi_row_decode_gathers_the_triangle_as_the_bool_mask_forward():
    """Rows at different positions (verify chunks of K + 1, AR steps of 1) read their masks as rows of the cached
    triangle: bitwise ``Transformer.forward`` with ``causal_mask``, and the cache written alike; fewer live rows
    than the cache (a row view) too."""
    target, _ = tiny_models()
    for rows, lengths, chunks in ((3, [10, 6, 13], [[3, 1, 4], [1, 5, 9], [2, 6, 5]]), (4, [7, 12], [[8], [9]])):
        runner = _prefilled(target, rows, lengths)
        ref = KVCache(target.config, len(lengths), runner.capacity)
        ref.k.copy_(runner.cache.k[:, :len(lengths)])
        ref.v.copy_(runner.cache.v[:, :len(lengths)])
        got = runner.decode(torch.tensor(chunks), lengths)
        width, need = len(chunks[0]), max(lengths) + len(chunks[0])
        pos = torch.tensor([list(range(n, n + width)) for n in lengths])
        with torch.inference_mode():
            want = target(torch.tensor(chunks), pos, ref, pos, causal_mask(torch.tensor(lengths), width, need))
        assert torch.equal(got, want)
        assert runner._triangle is not None and runner._triangle.dtype == target.dtype
        assert torch.equal(runner.cache.k[:, :len(lengths)], ref.k)


def test_fork_selection_on_the_host_is_the_torch_selection():
    """The CPU fork's numpy selection gives the torch selection's (the device path) values and dtypes: sent
    tokens ranked or not, zero fan-outs, the whole vocabulary ranked."""
    gen = torch.Generator().manual_seed(11)
    for bsz, k, vocab, width in ((1, 7, 272, 65), (3, 3, 20, 20), (4, 2, 50, 9)):
        top = torch.stack([torch.randperm(vocab, generator=gen)[:width] for _ in range(bsz * (k + 1))])
        top = top.view(bsz, k + 1, width)
        sent = torch.randint(0, vocab, (bsz, k), generator=gen)
        sent[0, 0] = top[0, 0, 2]                          # a sent token ranked third
        fan = torch.randint(0, 4, (bsz, k + 1), generator=gen)
        n = _fork_width(fan.tolist(), width)
        want, got = _select(top, sent, fan, n), _select_host(top, sent, fan, n)
        for name in ("branch_k", "branch_t", "valid", "top", "rank"):
            a, b = getattr(got, name), getattr(want, name)
            assert a.dtype == b.dtype and torch.equal(a, b), name
