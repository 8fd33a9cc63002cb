"""Tensor-parallel target over torch.distributed (gloo on CPU here, NCCL on GPUs): sharded logits equal the
single-process model's, AR / SD / SSD keep the target's greedy output, workers never outlive a run (normal
end, an error in a worker, SIGINT / SIGKILL of the verifier), bad placement is a ConfigError, and the
simulator's message sizes are the bytes the executor sends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from exec_helpers import plain_greedy, tiny_models
from test_exec_processes import alive, children, wait_gone

from calibration.errors import ConfigError
from saguaro import cli
from saguaro_exec import RunConfig, run
from saguaro_exec.engine.cached_model import CachedModel
from saguaro_exec.faults import RunError
from saguaro_exec.io.assets import tiny_pair_paths
from saguaro_exec.model import allow, load_model, prefix_mask, save_model
from saguaro_exec.tp.protocol import TPArgs
from saguaro_exec.tp.shard import load_tp_shard, shard_slice
from saguaro_exec.tp.target import FAULT_ENV, TPTarget
from saguaro_sim import SpecConfig

TARGET, DRAFT = tiny_models()
REPO = Path(__file__).resolve().parents[2]
PROMPTS = [[1, 2, 3], [4, 5]]


def _tp(source: object, world: int = 2) -> TPTarget:
    return TPTarget(TPArgs(source=source, devices=["cpu"] * world, dtype="float32", threads=1, timeout_s=60))


def test_shards_tile_the_full_weights(tmp_path):
    """Slices read from a checkpoint equal slices of the in-memory model; the ranks' slices tile each tensor."""
    save_model(TARGET, tmp_path / "t")
    full = TARGET.state_dict()
    shards = [load_tp_shard(tmp_path / "t", r, 2, None, "cpu", torch.float32).state_dict() for r in range(2)]
    mem = load_tp_shard(TARGET, 1, 2, None, "cpu", torch.float32).state_dict()
    assert shards[1].keys() == mem.keys() and all(torch.equal(shards[1][n], mem[n]) for n in mem)
    split = 0
    for name, t in full.items():
        cut = shard_slice(name, tuple(t.shape), 0, 2)
        if cut is None:
            assert all(torch.equal(s[name], t) for s in shards)
            continue
        split += 1
        assert torch.equal(torch.cat([s[name] for s in shards], dim=cut[0]), t)
    assert split == 7 * TARGET.config.num_layers          # q k v o gate up down in every layer


def test_tp2_logits_match_tp1_prefill_verify_tree():
    """TP=2 over gloo vs the single-process tiny target (fp32): prefill, verify and tree forwards."""
    path = tiny_pair_paths()[0]
    ref = load_model(path)
    with _tp(str(path)) as tp:
        one, two = CachedModel(ref, 2, 32), CachedModel(tp, 2, 32)
        chunks, start = [[10, 20, 30, 40, 50], [60, 70, 80]], torch.zeros(2, dtype=torch.long)
        a, b = one.extend(chunks, start)[0], two.extend(chunks, start)[0]                    # prefill (padded)
        torch.testing.assert_close(b, a, atol=1e-4, rtol=0)
        start = torch.tensor([5, 3])
        spec = [[1, 2, 3], [4, 5, 6]]
        a, b = one.tail_logits(spec, start, 3), two.tail_logits(spec, start, 3)             # verify, K + 1 = 3
        torch.testing.assert_close(b, a, atol=1e-4, rtol=0)
        lengths = torch.tensor([8, 6])                                                       # tree: 2 roots + a child
        toks = torch.tensor([[7, 8, 9], [11, 12, 13]])
        pos = lengths.view(-1, 1) + torch.tensor([[0, 0, 1]])
        slots = torch.tensor([[20, 21, 22]]).expand(2, 3)
        mask = allow(prefix_mask(lengths, 3, 23), torch.tensor([[[20, -1], [21, -1], [20, 22]]]).expand(2, 3, 2))
        a, b = one.forward(toks, pos, slots, mask), two.forward(toks, pos, slots, mask)
        torch.testing.assert_close(b, a, atol=1e-4, rtol=0)
        assert two.cache.k.shape[2] == ref.config.num_kv_heads // 2                         # its own KV heads


@pytest.mark.parametrize("mode", ["ar", "sd", "ssd"])
def test_greedy_tokens_equal_the_targets_and_no_orphans(mode):
    before = children(os.getpid())
    want = [plain_greedy(TARGET, p, 10) for p in PROMPTS]
    extra = {} if mode == "ar" else {"fanout": (2, 1, 1)}
    rep = run(RunConfig(spec=SpecConfig(mode=mode, k=2, batch_size=2, **extra), target=TARGET, draft=DRAFT,
                        prompts=PROMPTS, max_new_tokens=10, target_devices=["cpu", "cpu"]))
    assert rep.token_ids == want
    assert rep.measurements.meta["target_devices"] == ["cpu", "cpu"] and rep.measurements.meta["tp_size"] == 2
    assert children(os.getpid()) <= before


def test_error_in_a_worker_is_reported_and_no_process_is_left(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "3")                      # rank 1 raises at its 4th forward
    before = children(os.getpid())
    with pytest.raises(RunError, match="(?s)worker 1 failed.*injected fault in a tensor-parallel worker"):
        run(RunConfig(spec=SpecConfig(mode="ar"), target=TARGET, prompts=[[1, 2, 3]], max_new_tokens=20,
                      target_devices=["cpu", "cpu"]))
    assert children(os.getpid()) <= before


SCRIPT = textwrap.dedent("""
    import sys
    sys.path[:0] = [{repo!r}, {tests!r}]
    from exec_helpers import tiny_models
    from saguaro_exec import RunConfig, run
    from saguaro_sim import SpecConfig
    t, d = tiny_models(context=1 << 18)
    run(RunConfig(spec=SpecConfig(mode="ar"), target=t, prompts=[[1, 2, 3]], max_new_tokens=100000,
                  target_devices=["cpu", "cpu"]))
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_workers_die_with_an_interrupted_or_killed_verifier(sig):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(repo=str(REPO), tests=str(REPO / "tests" / "exec"))],
                            stderr=subprocess.PIPE)
    try:
        end, workers = time.time() + 60, []
        while not workers and time.time() < end:
            assert proc.poll() is None, proc.stderr.read().decode()
            workers = [c for c in children(proc.pid) if b"tp.worker:serve" in Path(f"/proc/{c}/cmdline").read_bytes()]
            time.sleep(0.1)
        assert workers, "no tensor-parallel worker started"
        workdir = Path(Path(f"/proc/{workers[0]}/cmdline").read_bytes().split(b"\0")[7].decode())
        args_file = workdir / "args"
        assert workdir.name.startswith("saguaro-tp-")
        while args_file.exists() and time.time() < end:     # removed once every rank has loaded its shard
            time.sleep(0.05)
        assert not args_file.exists(), "the tensor-parallel ranks never finished loading"
        time.sleep(0.5)                                     # into the decoding loop
        assert alive(workers[0])
        proc.send_signal(sig)
        proc.wait(timeout=20)
        assert wait_gone(workers[0]), f"worker {workers[0]} outlived its verifier ({sig.name})"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.mark.parametrize("value, device, needle", [
    ("cpu,cpu", "cpu", "non-empty list"),
    ([], "cpu", "non-empty list"),
    (["cpu", "gpu"], "cpu", "unknown device 'gpu'"),
    (["cpu", "cuda:1"], "cpu", "mixes cpu and cuda"),
    (["cuda:0", "cuda:0"], "cuda:0", "GPU twice"),
    (["cuda:0", "cuda:1"], "cpu", "not the run's device"),
    (["cpu"] * 3, "cpu", "num_heads = 4 is not divisible by 3"),
    (["cpu"] * 4, "cpu", "num_kv_heads = 2 is not divisible by 4"),
])
def test_bad_target_devices_are_config_errors(value, device, needle):
    with pytest.raises(ConfigError, match=needle) as e:
        RunConfig(target=TARGET, device=device, target_devices=value)
    assert e.value.field == "target_devices"


def test_target_devices_from_toml(tmp_path):
    (tmp_path / "ok.toml").write_text('target_devices = ["cpu", "cpu"]\n[spec]\nmode = "ar"\n')
    assert RunConfig.from_toml(tmp_path / "ok.toml").resolved_target_devices == ["cpu", "cpu"]
    assert RunConfig().resolved_target_devices == ["cpu"]
    (tmp_path / "bad.toml").write_text('device = "cpu"\ntarget_devices = ["cpu", "cpu", "cpu"]\n')
    with pytest.raises(ConfigError, match="bad.toml: target_devices"):
        RunConfig.from_toml(tmp_path / "bad.toml")


def test_cli_bad_target_devices_exit_2_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    for bad, needle in (("cpu,cpu,cpu", "not divisible by 3"), ("cpu,tpu", "unknown device 'tpu'")):
        code = cli.main(["run", "--target-devices", bad, "--mode", "ar", "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and "--target-devices" in err and needle in err, err
        assert not out.exists()


def test_simulator_message_bytes_are_the_executors():
    """saguaro_sim.analytic.message_bytes = the byte sizes of saguaro_exec.speculator.protocol' real tensors."""
    from saguaro_exec.speculator.protocol import Reply, outcome_tensor, reply_tensor
    from saguaro_sim.analytic import message_bytes

    b, vocab = 3, 50
    for k in (2, 9):
        reply = Reply(hit=torch.ones(b, dtype=torch.bool), rank=torch.zeros(b, dtype=torch.long),
                      from_backup=torch.zeros(b, dtype=torch.bool), tokens=torch.zeros(b, k, dtype=torch.long),
                      q=None, times={"reply": (0.0, 1.0)})
        head = reply_tensor(reply)
        q = torch.zeros(b, k, vocab, dtype=torch.float32)                 # the draft process sends q as float32
        out = outcome_tensor(torch.zeros(b, dtype=torch.long), torch.zeros(b, dtype=torch.long), [False] * b, False)
        nbytes = lambda t: t.numel() * t.element_size()  # noqa: E731
        for temperature, down in ((0.0, nbytes(head)), (1.0, nbytes(head) + nbytes(q))):
            assert message_bytes(SpecConfig(k=k, temperature=temperature), vocab, b) == (nbytes(out), down)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices (NCCL)")
def test_tp2_nccl_greedy_equals_single_gpu():
    """The shipped tiny pair (checkpoints: every rank loads its slice) on cuda:0 vs split over cuda:0, cuda:1."""
    spec, prompts = SpecConfig(mode="sd", k=2, fanout=(2, 1, 1)), ["The quick brown", "Once upon"]
    one = run(RunConfig(spec=spec, prompts=prompts, max_new_tokens=16, device="cuda:0", draft_device="cuda:0"))
    two = run(RunConfig(spec=spec, prompts=prompts, max_new_tokens=16, device="cuda:0", draft_device="cuda:0",
                        target_devices=["cuda:0", "cuda:1"]))
    assert two.token_ids == one.token_ids and two.measurements.meta["tp_size"] == 2
