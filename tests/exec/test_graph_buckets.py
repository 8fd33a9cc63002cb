"""The GPU fast path's CPU-checkable parts: bucketing and padding functions, the branch count fork needs,
the graph pool's static-buffer forwards (run eagerly on CPU: same padding, buckets, leases), greedy
equality of AR/SD/SSD through that path, the config fields and flags, and host-transfer helpers."""

from __future__ import annotations

import gc
import pickle
import time

import pytest
import torch
from exec_helpers import plain_greedy, tiny_models

from calibration.errors import ConfigError
from saguaro_exec import RunConfig, run
from saguaro_exec.engine.ar import run_ar
from saguaro_exec.engine.cached_model import CachedModel
from saguaro_exec.engine.sd import run_sd
from saguaro_exec.engine.settings import Decoding, Drafting
from saguaro_exec.engine.ssd import run_ssd
from saguaro_exec.model import allow, causal_mask, prefix_mask
from saguaro_exec.model.accel import Accel, check_accel, resolve_accel
from saguaro_exec.model.graphs import bucket_batch, bucket_capacity, bucket_slots, pad_step
from saguaro_exec.model.transfer import to_device, to_host
from saguaro_exec.sampling import make_generator
from saguaro_exec.speculator.cache import fork, fork_width
from saguaro_exec.speculator.inline import InlineLink
from saguaro_exec.speculator.process import DraftArgs
from saguaro_exec.speculator.worker import WorkerSpec
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [3, 3, 3, 3, 3, 3, 3, 9], [30], [5, 6, 7]]
N_NEW = 20
GREEDY = [plain_greedy(TARGET, p, N_NEW) for p in PROMPTS]


def test_bucket_batch_is_next_power_of_two():
    assert [bucket_batch(b) for b in (1, 2, 3, 4, 5, 8, 9, 16, 17)] == [1, 2, 4, 4, 8, 8, 16, 16, 32]
    with pytest.raises(ValueError):
        bucket_batch(0)


def test_bucket_slots_and_capacity():
    assert [bucket_capacity(c) for c in (1, 255, 256, 257, 600)] == [256, 256, 256, 512, 768]
    assert bucket_slots(1, 300) == 256 and bucket_slots(256, 300) == 256
    assert bucket_slots(257, 300) == 300 and bucket_slots(300, 300) == 300     # capped at the capacity
    assert bucket_slots(3, 10, step=4) == 4 and bucket_slots(9, 10, step=4) == 10
    for bad in (0, 301):
        with pytest.raises(ValueError):
            bucket_slots(bad, 300)


def test_pad_step_adds_rows_that_only_see_their_own_slots():
    start = torch.tensor([4, 9, 0])
    tokens = torch.tensor([[5, 6], [7, 8], [9, 10]])
    pos = start.view(-1, 1) + torch.arange(2)
    mask = causal_mask(start, 2, 12)
    seqlens = (start + 2).to(torch.int32)
    t, p, s, m, q = pad_step(tokens, pos, pos, mask, seqlens, 4)
    assert t.shape == (4, 2) and m.shape == (4, 2, 12) and q.dtype == torch.int32
    assert torch.equal(t[:3], tokens) and torch.equal(p[:3], pos) and torch.equal(m[:3], mask)
    assert t[3].tolist() == [0, 0] and p[3].tolist() == [0, 1] and s[3].tolist() == [0, 1]
    assert m[3, 0].nonzero().flatten().tolist() == [0] and m[3, 1].nonzero().flatten().tolist() == [0, 1]
    assert q.tolist() == [6, 11, 2, 2]
    same = pad_step(tokens, pos, pos, None, None, 3)
    assert same[0] is tokens and same[3] is None and same[4] is None
    with pytest.raises(ValueError):
        pad_step(tokens, pos, pos, mask, None, 2)


@pytest.mark.parametrize("vocab,n_rank", [(40, 8), (6, 8), (5, 2), (9, 3)])
def test_fork_width_equals_the_selected_branch_count(vocab, n_rank):
    """fork's branch count, computed on the host from the fan-out, is the count its data selects."""
    g = torch.Generator().manual_seed(vocab)
    for _ in range(20):
        bsz, k = 3, 3
        d_logits = torch.randn(bsz, k + 1, vocab, generator=g)
        sent = torch.randint(0, vocab, (bsz, k), generator=g)
        fan = torch.randint(0, min(vocab, 7) + 1, (bsz, k + 1), generator=g)
        width = min(vocab, max(n_rank, int(fan.max())) + 1)
        top = d_logits.topk(width, dim=-1).indices
        sent_pad = torch.cat([sent, torch.full((bsz, 1), -1)], 1)
        keep = top != sent_pad.unsqueeze(-1)
        rank = torch.where(keep, keep.long().cumsum(-1) - 1, torch.full_like(top, -1))
        counted = max(1, int((keep & (rank < fan.unsqueeze(-1))).reshape(bsz, -1).sum(-1).max()))
        assert fork_width(fan, width) == counted
        f = fork(d_logits, sent, fan, n_rank)
        assert f.branch_t.shape == (bsz, counted)
        assert f.valid.sum(-1).tolist() == (keep & (rank < fan.unsqueeze(-1))).reshape(bsz, -1).sum(-1).tolist()


def test_pool_forwards_match_plain_and_reuse_cache_and_shapes():
    """CachedModel through the pool (3 rows padded to 4, slots bucketed) gives the plain cache's logits for
    extend, decode and a tree step; a later lease reuses the cache and its captured shapes."""
    accel = Accel(graphs=True)
    chunks = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    start = torch.zeros(3, dtype=torch.long)
    outs = []
    for a in (None, accel):
        r = CachedModel(TARGET, 3, 40, a)
        pre, _ = r.extend(chunks, start, graphed=False)
        lens = torch.tensor([3, 2, 4])
        step = r.last_logits([[10], [11], [12]], lens)
        dec = r.decode(torch.tensor([[13, 14], [15, 16], [17, 18]]), lens + 1)
        slots = torch.tensor([[9, 10]] * 3)                  # two branches after the prefix
        mask = allow(prefix_mask(lens + 3, 2, 12), slots.unsqueeze(-1))
        tree = r.forward(torch.tensor([[1, 2]] * 3), (lens + 3).view(-1, 1).expand(3, 2), slots, mask)
        outs.append((pre, step, dec, tree))
    for plain, pooled in zip(*outs):
        torch.testing.assert_close(pooled, plain, atol=1e-5, rtol=1e-5)
    pool = accel.pool(TARGET)
    assert r.cache.batch == 4 and r.cache.capacity == 256
    shapes = pool.captures
    assert shapes == 2                   # T=1 and T=2 (S bucket 256; the tree step shares the T=2 mask form)
    cache = r.cache
    del r
    gc.collect()
    again = CachedModel(TARGET, 4, 100, accel)          # same buckets (4 rows, 256 slots): the same cache
    assert again.cache is cache
    again.last_logits([[1], [2], [3], [4]], torch.tensor([3, 2, 4, 1]))
    assert pool.captures == shapes


def test_engines_through_the_pool_match_plain_greedy():
    """AR, SD and SSD (inline draft) with Accel(graphs=True) for both models, batch 3 (padded to 4) over
    two batches (cache and shapes reused): the target's own greedy tokens."""
    accel, daccel, t0 = Accel(graphs=True), Accel(graphs=True), time.perf_counter()
    dec = Decoding(N_NEW, 0.0, t_start=t0)
    batches = [PROMPTS[:3], PROMPTS[3:]]
    ar, sd, ssd = [], [], []
    ws = WorkerSpec(k=3, fanout=(2, 1, 1, 1), fanout_miss=(1, 1, 1, 1), sampler_c=1.0, backup="neural",
                    temperature=0.0, max_new=N_NEW, accel=daccel)
    args = DraftArgs(source=DRAFT, device="cpu", dtype="float32", batches=batches, ws=ws, seed=0, t_start=t0,
                     threads=1, timeout_s=60.0)
    with InlineLink(args, TARGET.config.vocab_size) as link:
        for bi, batch in enumerate(batches):
            gen = make_generator(bi)
            ar += run_ar(TARGET, batch, dec, gen, accel).tokens
            sd += run_sd(TARGET, DRAFT, batch, dec, Drafting(3, (1, 1, 1, 1)), (gen, make_generator(9)),
                         accel=(accel, daccel)).tokens
            ssd += run_ssd(TARGET, link, batch, dec, 3, gen, accel=accel).tokens
    assert ar == GREEDY and sd == GREEDY and ssd == GREEDY
    assert accel.captures > 0 and daccel.captures > 0


def _ssd_sampled(accel: Accel | None, daccel: Accel, seed: int) -> list[list[int]]:
    t0 = time.perf_counter()
    ws = WorkerSpec(k=2, fanout=(2, 2, 1), fanout_miss=(1, 1, 1), sampler_c=0.5, backup="neural",
                    temperature=0.8, max_new=N_NEW, accel=daccel)
    args = DraftArgs(source=DRAFT, device="cpu", dtype="float32", batches=[PROMPTS[:3]], ws=ws, seed=seed,
                     t_start=t0, threads=1, timeout_s=60.0)
    with InlineLink(args, TARGET.config.vocab_size) as link:
        return run_ssd(TARGET, link, PROMPTS[:3], Decoding(N_NEW, 0.8, t_start=t0), 2, make_generator(seed),
                       accel=accel).tokens


def test_ssd_through_the_pool_samples_as_the_plain_path():
    """T > 0 through the pool (fork, tree sampling, q on the pool's path): the same seeds draw the same
    tokens as the plain path (the pool only pads rows and slots), and another seed draws other tokens."""
    pooled = _ssd_sampled(Accel(graphs=True), Accel(graphs=True), seed=1)
    assert [len(t) for t in pooled] == [N_NEW] * 3
    assert pooled == _ssd_sampled(None, Accel(graphs=False), seed=1)
    assert pooled != _ssd_sampled(Accel(graphs=True), Accel(graphs=True), seed=2)


def test_cuda_graphs_off_keeps_greedy_output_and_records_meta():
    base = dict(target=TARGET, draft=DRAFT, prompts=PROMPTS[:3], max_new_tokens=N_NEW, inline_draft=True)
    for mode in ("ar", "sd", "ssd"):
        spec = SpecConfig(mode=mode, k=3, batch_size=2)
        off = run(RunConfig(spec=spec, cuda_graphs="off", attention="sdpa", **base))
        auto = run(RunConfig(spec=spec, **base))
        assert off.token_ids == auto.token_ids == GREEDY[:3]
        meta = auto.measurements.meta
        assert meta["cuda_graphs"] is False and meta["attention"] == "sdpa" and meta["graph_captures"] == 0
        assert meta["draft_cuda_graphs"] is (None if mode == "ar" else False)


@pytest.mark.parametrize("field,kwargs,needle", [
    ("cuda_graphs", dict(cuda_graphs="yes"), "unknown value"),
    ("cuda_graphs", dict(cuda_graphs="on"), "needs CUDA"),
    ("cuda_graphs", dict(cuda_graphs=True), "unknown value"),
    ("attention", dict(attention="xformers"), "unknown value"),
    ("attention", dict(attention="flash"), "needs CUDA"),
])
def test_bad_accel_fields_raise_config_error(field, kwargs, needle):
    with pytest.raises(ConfigError) as e:
        RunConfig(**kwargs)
    assert e.value.field == field and needle in e.value.problem


def test_flash_needs_half_precision_and_the_package():
    with pytest.raises(ConfigError, match="bfloat16") as e:
        check_accel("auto", "flash", ["cuda"], "float32")
    assert e.value.field == "attention"
    try:
        import flash_attn  # noqa: F401
    except Exception:
        with pytest.raises(ConfigError, match="flash_attn") as e:
            check_accel("auto", "flash", ["cuda"], "bfloat16")
        assert e.value.field == "attention"
    with pytest.raises(ConfigError, match="needs CUDA") as e:
        check_accel("on", "sdpa", ["cuda", "cpu"], "float32")          # a CPU draft device
    assert e.value.field == "cuda_graphs"


def test_resolve_accel():
    assert resolve_accel("auto", "auto", "cpu", "float32") == Accel(graphs=False, attention="sdpa")
    assert resolve_accel("auto", "auto", "cuda", "float32") == Accel(graphs=True, attention="sdpa")
    assert resolve_accel("off", "sdpa", "cuda:1", "bfloat16") == Accel(graphs=False, attention="sdpa")
    assert resolve_accel("on", "flash", "cuda", "bfloat16") == Accel(graphs=True, attention="flash")


def test_accel_pickles_without_its_pools():
    a = Accel(graphs=True)
    a.pool(TARGET)
    assert a.captures == 0 and len(a._pools) == 1
    b = pickle.loads(pickle.dumps(WorkerSpec(k=1, fanout=(1, 1), fanout_miss=(1, 1), sampler_c=1.0,
                                             backup="fast", temperature=0.0, max_new=4, accel=a))).accel
    assert b == a and b._pools == {}
    assert Accel(graphs=False).pool(TARGET) is None


def test_cli_rejects_bad_accel_flags(capsys):
    from saguaro.cli import main

    for argv, needle in ((["--cuda-graphs", "on"], "--cuda-graphs"), (["--attention", "fast"], "--attention")):
        assert main(["run", "--mode", "ar", "--max-new-tokens", "2", *argv]) == 2
        assert needle in capsys.readouterr().err


def test_transfers_pass_cpu_tensors_through():
    a, b = torch.tensor([1, 2]), torch.tensor([[True, False]])
    assert to_host(a, b) == (a, b)
    assert to_device(a, "cpu") is a
