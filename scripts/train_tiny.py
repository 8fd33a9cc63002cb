"""Train the shipped tiny byte-level target/draft pair on the CPython standard library's own source.

    python scripts/train_tiny.py --model target          # one model (run target and draft in parallel)
    python scripts/train_tiny.py --model draft
    python scripts/train_tiny.py --evaluate              # held-out perplexity, n-gram diversity, SD acceptance
    python scripts/train_tiny.py --model target-deep     # 12-layer target for CPU speed benchmarks
    python scripts/train_tiny.py --evaluate --eval-target target-deep   # -> eval_target-deep.json

Deterministic: fixed seed, sorted file order, fixed step counts (not time budgets), single thread.
Data: every *.py under sysconfig stdlib except site-packages and test directories; a file goes to the
held-out split when crc32(relative path) % 12 == 0 (~1 MB), the rest is training text (~11 MB).
Checkpoints: saguaro_exec/assets/tiny/{target,draft,target-deep} (config.json in Llama layout + model.safetensors).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import sysconfig
import time
import zlib
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from saguaro_exec.io.tokenizer import BYTE_TOKENIZER_FILE, ByteTokenizer  # noqa: E402
from saguaro_exec.model import ModelConfig, load_model, random_model, save_model  # noqa: E402

SEED = 1234
BOS, EOS, VOCAB = 256, 257, 272  # 256 bytes + BOS + EOS, padded to 272 (multiple of 16); shared by both
OUT = ROOT / "saguaro_exec" / "assets" / "tiny"

SHAPES = {
    "target": dict(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=352),
    "draft": dict(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=176),
    # Deeper target for CPU speed benchmarks: per-forward cost on CPU is per-layer overhead, so 12 layers
    # make a target forward ~12x the draft's (the 4-layer one is ~4x), the regime where SD/SSD pay off.
    "target-deep": dict(hidden_size=128, num_layers=12, num_heads=4, num_kv_heads=2, intermediate_size=352),
}
# Step counts are fixed up front (sized for ~15 / ~3 single-thread CPU minutes). Length curriculum: short
# windows first (cheap tokens), then the last `long_steps` on 1024-byte windows with the same tokens per
# step, so attention works over the whole context the executor uses (RoPE models trained only on short
# windows fall apart beyond them: a draft trained on 128-byte windows scored 16 ppl/byte at 256).
CONTEXT = 1024
TRAIN = {
    "target": dict(steps=1600, long_steps=300, batch=16, seq_len=256, lr=3e-3, warmup=100),  # 6.6M tokens
    "draft": dict(steps=2500, long_steps=500, batch=32, seq_len=128, lr=5e-3, warmup=100),   # 10M tokens
    "target-deep": dict(steps=800, long_steps=150, batch=16, seq_len=256, lr=3e-3, warmup=100),  # 3.3M, ~18 min
}


def model_config(which: str) -> ModelConfig:
    """Llama-layout config of one shipped model (`which` in SHAPES); all share vocab, RoPE and context."""
    return ModelConfig(vocab_size=VOCAB, architecture="llama", rope_theta=10000.0, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, max_position_embeddings=CONTEXT, bos_token_id=BOS,
                       eos_token_id=EOS, **SHAPES[which])


# ---------------------------------------------------------------------------------------------- data
def corpus() -> tuple[torch.Tensor, torch.Tensor, dict]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idle_test"}
    files = sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))
    train, held = bytearray(), bytearray()
    n_held = 0
    for p in files:
        rel = p.relative_to(root).as_posix()
        doc = p.read_bytes()
        dst = held if zlib.crc32(rel.encode()) % 12 == 0 else train
        n_held += dst is held
        dst.extend(doc)
        dst.append(0)  # file separator (NUL byte; BOS/EOS stay out of the training text)
    info = dict(stdlib=str(root), python=sys.version.split()[0], files=len(files), held_out_files=n_held,
                train_bytes=len(train), held_out_bytes=len(held))
    as_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).long()  # noqa: E731
    return as_tensor(train), as_tensor(held), info


def batch_from(data: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch,), generator=gen)
    return torch.stack([data[s : s + seq_len + 1] for s in starts.tolist()])


# ---------------------------------------------------------------------------------------------- train
def train(which: str, steps: int | None = None) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    hp = dict(TRAIN[which], steps=steps or TRAIN[which]["steps"])
    train_data, held, info = corpus()
    cfg = model_config(which)
    model = random_model(cfg, seed=SEED).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(SEED + 1)
    log = open(OUT / f"train_{which}.log", "w")
    print(f"{which}: {cfg.num_params()} params, {info}", file=log, flush=True)
    t0 = time.time()
    for step in range(hp["steps"]):
        lr = hp["lr"] * min(1.0, (step + 1) / hp["warmup"])
        lr *= 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / hp["steps"]))  # cosine to 10%
        for g in opt.param_groups:
            g["lr"] = lr
        if step < hp["steps"] - hp["long_steps"]:
            xy = batch_from(train_data, hp["batch"], hp["seq_len"], gen)
        else:
            xy = batch_from(train_data, hp["batch"] * hp["seq_len"] // CONTEXT, CONTEXT, gen)
        logits = model(xy[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == hp["steps"] - 1:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} t {time.time() - t0:.0f}s", file=log, flush=True)
    model.eval()
    wall, cpu = time.time() - t0, time.process_time()
    ppl, ppl_long = heldout_ppl(model, held), heldout_ppl(model, held, seq_len=CONTEXT, n_windows=64)
    print(f"done: held-out ppl/byte {ppl:.3f} (256-byte windows), {ppl_long:.3f} (1024), wall {wall:.0f}s, "
          f"cpu {cpu:.0f}s", file=log, flush=True)
    save_model(model, OUT / which, extra_files={BYTE_TOKENIZER_FILE: ByteTokenizer(BOS, EOS, VOCAB).to_json()})
    (OUT / f"train_{which}.json").write_text(json.dumps(
        dict(model=which, seed=SEED, params=cfg.num_params(), shape=SHAPES[which], hparams=hp,
             train_wall_s=round(wall), train_cpu_s=round(cpu), heldout_ppl_per_byte=round(ppl, 3),
             heldout_ppl_per_byte_1024=round(ppl_long, 3), data=info), indent=2) + "\n")


@torch.no_grad()
def heldout_ppl(model, held: torch.Tensor, seq_len: int = 256, n_windows: int = 256) -> float:
    """exp(mean cross-entropy per byte) over n_windows evenly spaced held-out windows (last half of each
    window scored, so every scored byte has >= seq_len/2 bytes of context)."""
    n_batch = max(1, 8192 // seq_len)
    stride = (held.numel() - seq_len - 1) // n_windows
    total, count = 0.0, 0
    for i in range(0, n_windows, n_batch):
        xy = torch.stack([held[s : s + seq_len + 1]
                          for s in range(i * stride, min(i + n_batch, n_windows) * stride, stride)])
        logits = model(xy[:, :-1])[:, seq_len // 2 :]
        ce = F.cross_entropy(logits.reshape(-1, VOCAB), xy[:, 1 + seq_len // 2 :].reshape(-1), reduction="sum")
        total, count = total + ce.item(), count + logits.shape[0] * logits.shape[1]
    return math.exp(total / count)


# ---------------------------------------------------------------------------------------------- evaluate
def probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits[..., :BOS + 2].clone()
    logits[..., BOS] = -float("inf")  # never emit BOS
    if temperature == 0:
        return F.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return torch.softmax(logits / temperature, -1)


@torch.no_grad()
def sample(model, prompt: list[int], n: int, temperature: float, gen: torch.Generator) -> list[int]:
    seq = list(prompt)
    for _ in range(n):
        p = probs(model(torch.tensor([seq[-CONTEXT:]]))[0, -1], temperature)
        seq.append(int(torch.multinomial(p, 1, generator=gen)))
    return seq[len(prompt) :]


@torch.no_grad()
def sd_acceptance(target, draft, prompt: list[int], n_new: int, k: int, temperature: float, gen) -> tuple[int, int, int]:
    """Plain speculative decoding (Leviathan et al.) without a cache: returns (accepted, examined, rounds).
    examined counts draft tokens that reached the accept test (all accepted ones + the first rejected)."""
    seq, accepted, examined, rounds = list(prompt), 0, 0, 0
    while len(seq) - len(prompt) < n_new:
        rounds += 1
        ctx, qs = list(seq), []
        for _ in range(k):
            q = probs(draft(torch.tensor([ctx[-CONTEXT:]]))[0, -1], temperature)
            qs.append(q)
            ctx.append(int(torch.multinomial(q, 1, generator=gen)))
        window = ctx[-CONTEXT:]
        p_all = probs(target(torch.tensor([window]))[0, -k - 1 :], temperature)
        for i in range(k):
            x, p, q = ctx[len(seq)], p_all[i], qs[i]
            examined += 1
            if torch.rand((), generator=gen) < torch.clamp(p[x] / q[x], max=1.0):
                seq.append(x)
                accepted += 1
                continue
            residual = torch.clamp(p - q, min=0)
            seq.append(int(torch.multinomial(residual / residual.sum(), 1, generator=gen)))
            break
        else:
            seq.append(int(torch.multinomial(p_all[k], 1, generator=gen)))
    return accepted, examined, rounds


@torch.no_grad()
def teacher_forced_acceptance(target, draft, held: torch.Tensor, temperature: float, seq_len: int = 256,
                              n_windows: int = 128) -> float:
    """Expected per-token acceptance along held-out text (no generation, so no repetition loops):
    mean over positions of sum_x min(p(x), q(x)), which is 1[argmax p == argmax q] at T=0."""
    stride = (held.numel() - seq_len - 1) // n_windows
    total, count = 0.0, 0
    for i in range(0, n_windows, 16):
        x = torch.stack([held[s : s + seq_len] for s in range(i * stride, min(i + 16, n_windows) * stride, stride)])
        p, q = probs(target(x), temperature), probs(draft(x), temperature)
        total += torch.minimum(p, q).sum(-1)[:, seq_len // 2 :].sum().item()
        count += x.shape[0] * (seq_len - seq_len // 2)
    return total / count


def distinct(tokens: list[int], n: int) -> float:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / max(len(grams), 1)


def evaluate(n_prompts: int, n_new: int, k: int, target_name: str = "target") -> None:
    """Measure the draft against `target_name`; writes eval.json (shipped target) or eval_<name>.json."""
    torch.set_num_threads(1)
    _, held, info = corpus()
    target, draft = load_model(OUT / target_name), load_model(OUT / "draft")
    report: dict = {"data": info,
                    "ppl_per_byte_256": {"target": heldout_ppl(target, held), "draft": heldout_ppl(draft, held)},
                    "ppl_per_byte_1024": {n: heldout_ppl(m, held, seq_len=CONTEXT, n_windows=64)
                                          for n, m in (("target", target), ("draft", draft))}}
    stride = (held.numel() - 400) // n_prompts
    prompts = [held[i * stride : i * stride + 128].tolist() for i in range(n_prompts)]
    refs = [held[i * stride + 128 : i * stride + 128 + n_new].tolist() for i in range(n_prompts)]
    div: dict = {"held_out_reference": {n: sum(distinct(r, n) for r in refs) / n_prompts for n in (2, 4, 8)}}
    for name, model in (("target", target), ("draft", draft)):
        for temp in (0.0, 0.7):
            gen = torch.Generator().manual_seed(SEED)
            outs = [sample(model, p, n_new, temp, gen) for p in prompts]
            div[f"{name}_T{temp}"] = {n: sum(distinct(o, n) for o in outs) / n_prompts for n in (2, 4, 8)}
    report["distinct_ngram_fraction"] = div
    acc: dict = {}
    for temp in (0.0, 0.7):
        gen = torch.Generator().manual_seed(SEED)
        a = e = r = 0
        for p in prompts:
            da, de, dr = sd_acceptance(target, draft, p, n_new, k, temp, gen)
            a, e, r = a + da, e + de, r + dr
        acc[f"T{temp}"] = {"per_token_acceptance": a / e, "accepted_per_round": a / r,
                           "tokens_per_round": (a + r) / r, "rounds": r}
    report["sd_acceptance"] = {"k": k, "prompts": n_prompts, "new_tokens_per_prompt": n_new, **acc}
    report["teacher_forced_acceptance"] = {f"T{t}": teacher_forced_acceptance(target, draft, held, t)
                                           for t in (0.0, 0.7)}
    text = json.dumps(report, indent=2, default=float) + "\n"
    (OUT / ("eval.json" if target_name == "target" else f"eval_{target_name}.json")).write_text(text)
    print(text)


def main() -> None:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=list(SHAPES), help="train this model")
    ap.add_argument("--evaluate", action="store_true", help="measure the saved pair")
    ap.add_argument("--eval-target", default="target", choices=[m for m in SHAPES if m != "draft"],
                    help="target that --evaluate measures the draft against")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--out", type=Path, default=OUT, help="checkpoint folder (default: the shipped assets)")
    ap.add_argument("--steps", type=int, help="override the step count (smoke tests only)")
    args = ap.parse_args()
    OUT = args.out
    OUT.mkdir(parents=True, exist_ok=True)
    if args.model:
        train(args.model, args.steps)
    if args.evaluate:
        evaluate(args.prompts, args.new_tokens, args.k, args.eval_target)
    if not (args.model or args.evaluate):
        ap.error("give --model target|draft|target-deep and/or --evaluate")


if __name__ == "__main__":
    main()
