"""Ours against Hugging Face transformers on the same model pair, prompts and lengths: 1 thread each, T = 0.

    .venv/bin/python bench/bench_peers.py --out out/bench_peers.json

Peers: ours AR / SD / SSD (saguaro_exec.run, RunConfig threads = 1; SSD's draft runs in a second process) and
transformers' greedy ``generate``, assisted generation (``assistant_model=``) with num_assistant_tokens = --k
(constant schedule) and with its defaults, and prompt-lookup decoding (``prompt_lookup_num_tokens`` = --k).
Both sides get the same token ids (the target's tokenizer, no BOS), batch 1. One warm-up pass per peer (it
also counts transformers' forwards), then --repeats passes, every peer once per pass in a shuffled order;
tokens/s are medians over the passes, ratios ours/transformers from those medians and per pass. Every output
is compared token for token with transformers' greedy ``generate``; a difference is explained from uncached
forwards of both implementations. Load average and CPU steal (/proc/stat) are recorded at the start and end.
Exit status: 0, 1 when some output differs from greedy ``generate`` (the JSON is still written), 2 on bad
input or a missing transformers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fidelity_stats import interleaved_order, repeat_spread  # noqa: E402
from bench.peers_compare import explain, first_mismatch  # noqa: E402
from bench.peers_hf import PeerRun  # noqa: E402
from bench.peers_sys import cpu_times, quiet_box, snapshot, steal_share  # noqa: E402
from calibration.errors import ConfigError, check_number  # noqa: E402
from calibration.jsonio import write_atomic  # noqa: E402
from saguaro_exec import RunConfig, run  # noqa: E402
from saguaro_exec.io.assets import tiny_deep_pair_paths  # noqa: E402
from saguaro_exec.io.prompts import BUILTIN_PROMPTS  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402

OURS = ("ours_ar", "ours_sd", "ours_ssd")
HF = ("hf_greedy", "hf_assisted_k", "hf_assisted_default", "hf_pld")
REFERENCE = "hf_greedy"
QUICK = {"max_new_tokens": 12, "prompts": "2", "repeats": 2}
DEFAULTS = {"max_new_tokens": 128, "prompts": "4", "repeats": 5}
# (name, ours, transformers): the comparisons
KEY_RATIOS = (("ar_vs_greedy", "ours_ar", "hf_greedy"), ("sd_vs_assisted_k", "ours_sd", "hf_assisted_k"),
              ("sd_vs_assisted_default", "ours_sd", "hf_assisted_default"), ("sd_vs_pld", "ours_sd", "hf_pld"),
              ("ssd_vs_assisted_k", "ours_ssd", "hf_assisted_k"),
              ("ssd_vs_assisted_default", "ours_ssd", "hf_assisted_default"))


class OursPeer:
    """One of our modes through saguaro_exec.run, batch 1, 1 thread; the prompts as token ids."""

    def __init__(self, name: str, spec: SpecConfig, target: str, draft: str) -> None:
        self.name, self.spec, self.target, self.draft = name, spec, target, draft

    def settings(self) -> dict:
        return {"spec": self.spec.to_dict(), "threads": 1}

    def run(self, prompts: list[list[int]], max_new: int, count: bool = False) -> PeerRun:
        rep = run(RunConfig(spec=self.spec, target=self.target, draft=self.draft, prompts=prompts,
                            max_new_tokens=max_new, threads=1))
        return PeerRun(rep.token_ids, rep.wall_s, rep.measurements.totals["rounds"])


def _ours(target: str, draft: str, k: int, fanout: tuple[int, ...] | None) -> dict[str, OursPeer]:
    specs = {"ours_ar": SpecConfig(mode="ar", k=0, budget=0),
             "ours_sd": SpecConfig(mode="sd", k=k),
             "ours_ssd": SpecConfig(mode="ssd", k=k, fanout=fanout)}
    return {n: OursPeer(n, s, target, draft) for n, s in specs.items()}


def _prompt_ids(spec: str, target: str) -> tuple[list[list[int]], str]:
    """--prompts N (the first N built-in prompts) or a prompt file, encoded with the target's tokenizer."""
    from saguaro_exec.io.tokenizer import load_tokenizer

    if spec.isdigit():
        n = int(spec)
        check_number("--prompts", n, 1, len(BUILTIN_PROMPTS), integer=True)
        texts, source = list(BUILTIN_PROMPTS[:n]), f"built-in[:{n}]"
    else:
        if not Path(spec).is_file():
            raise ConfigError("--prompts", f"{spec!r} is neither a count nor an existing file",
                              f"1..{len(BUILTIN_PROMPTS)} | a prompt file (.json list, .jsonl, or one per line)")
        texts, source = RunConfig(prompt_file=spec).load_prompts(), spec
    if not all(isinstance(t, str) for t in texts):
        return [list(t) for t in texts], source
    tok = load_tokenizer(target)
    return [tok.encode(t) for t in texts], source


def check_args(args: argparse.Namespace) -> None:
    """Fill --quick's and the defaults' values, encode the prompts; ConfigError naming the flag on bad input."""
    base = QUICK if args.quick else DEFAULTS
    for key, value in base.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    check_number("--k", args.k, 1, 64, integer=True)
    check_number("--max-new-tokens", args.max_new_tokens, 1, 100_000, integer=True)
    check_number("--repeats", args.repeats, 1, 1000, integer=True)
    for flag in ("target", "draft"):
        if not (Path(getattr(args, flag)) / "config.json").is_file():
            raise ConfigError(f"--{flag}", f"{getattr(args, flag)!r} has no config.json",
                              "a local Hugging Face checkpoint directory")
    try:
        args.fanout_t = tuple(int(x) for x in args.fanout.split(",")) if args.fanout else None
        if args.fanout_t is not None:
            SpecConfig(mode="ssd", k=args.k, fanout=args.fanout_t)
    except (ValueError, ConfigError) as e:
        raise ConfigError("--fanout", f"{args.fanout!r}: {e}", f"{args.k + 1} comma-separated positive ints") from None
    args.prompt_ids, args.prompt_source = _prompt_ids(args.prompts, args.target)
    _check_lengths(args.prompt_ids, args)


def _check_lengths(prompts: list[list[int]], args: argparse.Namespace) -> None:
    from saguaro_exec.model import read_config

    ctx = read_config(args.target).max_position_embeddings
    longest = max(len(p) for p in prompts)
    if longest + args.max_new_tokens + args.k + 2 > ctx:
        raise ConfigError("--max-new-tokens", f"{args.max_new_tokens} after a {longest}-token prompt overruns the "
                          f"target's context of {ctx}", f"<= {ctx - longest - args.k - 2}")


def _median_row(name: str, passes: list[PeerRun], warm: PeerRun, ref: list[list[int]]) -> dict:
    tps = [p.tokens_per_s for p in passes]
    mism = [first_mismatch(p.tokens, ref) for p in [warm, *passes]]
    return {"tokens_per_s_median": statistics.median(tps), "tokens_per_s_all": tps,
            "spread": repeat_spread(tps), "tokens": passes[0].n_tokens,
            "seconds_median": statistics.median(p.seconds for p in passes),
            "tokens_per_target_forward": warm.tokens_per_target_forward,
            "target_forwards": warm.target_forwards, "draft_forwards": warm.draft_forwards,
            "identical_to_greedy_generate": all(m is None for m in mism),
            "same_output_every_pass": all(p.tokens == warm.tokens for p in passes),
            "first_mismatch": next((m for m in mism if m is not None), None), "token_ids": warm.tokens}


def _ratios(rows: dict, per_pass: dict) -> dict:
    out = {}
    for key, a, b in KEY_RATIOS:
        paired = [x.tokens_per_s / y.tokens_per_s for x, y in zip(per_pass[a], per_pass[b])]
        out[key] = {"ours": a, "transformers": b,
                    "of_medians": rows[a]["tokens_per_s_median"] / rows[b]["tokens_per_s_median"],
                    "paired_median": statistics.median(paired), "paired_all": paired}
    return out


def bench(args: argparse.Namespace) -> dict:
    """Warm-up, interleaved passes, comparison and diagnosis; returns the JSON document."""
    import torch

    from bench import peers_hf

    prompts, source = args.prompt_ids, args.prompt_source
    state0 = snapshot()
    stat0 = cpu_times()
    torch.set_num_threads(1)
    hf_target, hf_draft = peers_hf.load(args.target), peers_hf.load(args.draft)
    eos = hf_target.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    peers = {**_ours(args.target, args.draft, args.k, args.fanout_t),
             **peers_hf.make_peers(hf_target, hf_draft, args.k, eos)}
    settings = {n: peer.settings() for n, peer in peers.items()}   # before a heuristic schedule moves them
    order = interleaved_order([], list(peers), args.repeats, seed=args.seed)
    from tqdm import tqdm

    bar = tqdm(total=len(peers) * (args.repeats + 1), desc="bench_peers", unit="run", file=sys.stderr,
               disable=args.no_progress)
    warm, per_pass = {}, {n: [] for n in peers}
    for name, peer in peers.items():                 # warm-up (untimed): caches, graphs, forward counts
        bar.set_postfix_str(f"warm-up {name}")
        warm[name] = peer.run(prompts, args.max_new_tokens, count=True)
        bar.update()
    for i, names in enumerate(order):
        for name in names:
            bar.set_postfix_str(f"pass {i + 1} {name}")
            per_pass[name].append(peers[name].run(prompts, args.max_new_tokens))
            bar.update()
    bar.close()
    stat1 = cpu_times()
    state1 = snapshot()
    ref = warm[REFERENCE].tokens
    rows = {n: {"settings": settings[n], **_median_row(n, per_pass[n], warm[n], ref)} for n in peers}
    if any(r["first_mismatch"] for r in rows.values()):
        from saguaro_exec.model import load_model

        ours_target = load_model(args.target, device="cpu", dtype=torch.float32)
        for r in rows.values():
            if (m := r["first_mismatch"]) is not None and m["prompt"] < len(prompts):
                m["explanation"] = explain(m, prompts[m["prompt"]], ref[m["prompt"]], hf_target, ours_target)
    run_steal = steal_share(stat0, stat1)
    ratios = _ratios(rows, per_pass)
    best_assisted = min(ratios["sd_vs_assisted_k"]["of_medians"], ratios["sd_vs_assisted_default"]["of_medians"])
    quiet = quiet_box(state0, run_steal)
    return {
        "meta": {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "machine": platform.node(),
                 "cpus": os.cpu_count(), "command": " ".join(sys.argv), **peers_hf.versions(),
                 "target": args.target, "draft": args.draft, "k": args.k, "fanout": args.fanout or "default",
                 "max_new_tokens": args.max_new_tokens, "prompts": len(prompts), "prompt_source": source,
                 "prompt_lengths": [len(p) for p in prompts], "repeats": args.repeats, "quick": args.quick,
                 "threads": 1, "temperature": 0.0, "batch_size": 1, "reference": REFERENCE,
                 "hf_attention": getattr(hf_target.config, "_attn_implementation", None),
                 "order": order},
        "machine_state": {"start": state0, "end": state1, "steal_share_run": run_steal, **quiet},
        "peers": rows,
        "ratios": ratios,
        "token_identity": {"reference": REFERENCE, "all_identical": all(r["identical_to_greedy_generate"]
                                                                         for r in rows.values()),
                           **{n: r["identical_to_greedy_generate"] for n, r in rows.items()}},
        "targets": {"ar_vs_greedy>=1.3": ratios["ar_vs_greedy"]["of_medians"] >= 1.3,
                    "sd_vs_assisted>=1.5": best_assisted >= 1.5,
                    "valid_measurement": quiet["quiet"] and args.repeats >= 5 and not args.quick},
    }


def table(result: dict) -> str:
    """Per-peer medians, the key ratios, token identity and the machine state, as text."""
    lines = [f"{'peer':>20} {'tok/s med':>9} {'spread':>6} {'tok/fwd':>7} {'= greedy':>8}"]
    for name, r in result["peers"].items():
        tpf = "-" if r["tokens_per_target_forward"] is None else f"{r['tokens_per_target_forward']:.2f}"
        lines.append(f"{name:>20} {r['tokens_per_s_median']:>9.1f} {r['spread']:>6.2f} {tpf:>7} "
                     f"{'yes' if r['identical_to_greedy_generate'] else 'NO':>8}")
        if (m := r["first_mismatch"]) is not None:
            why = m.get("explanation", {}).get("verdict", m.get("detail", ""))
            lines.append(f"{'':>20}   first difference: prompt {m['prompt']} token {m['position']}: "
                         f"{m['got']} vs {m['expected']}; {why}")
    for key, r in result["ratios"].items():
        lines.append(f"{key:>24}: x{r['of_medians']:.2f} (paired median x{r['paired_median']:.2f})")
    ms = result["machine_state"]
    lines.append(f"load average start {ms['start']['load_average'][0]:.2f} end {ms['end']['load_average'][0]:.2f}; "
                 f"steal over the run {ms['steal_share_run'] if ms['steal_share_run'] is None else round(ms['steal_share_run'], 4)}; "
                 f"targets: " + ", ".join(f"{k}: {'met' if v else 'NOT met'}" for k, v in result["targets"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    tiny_t, tiny_d = tiny_deep_pair_paths()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default=str(tiny_t), help="target checkpoint directory (default: the deep tiny target)")
    p.add_argument("--draft", default=str(tiny_d), help="draft checkpoint directory (default: the tiny draft)")
    p.add_argument("--k", type=int, default=3, help="lookahead: ours SD/SSD, transformers num_assistant_tokens "
                   "and prompt_lookup_num_tokens")
    p.add_argument("--fanout", default="", help="ours SSD fan-out F_0..F_K, comma separated (default: geometric)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 128 (--quick 12)")
    p.add_argument("--prompts", default=None, help="N (the first N built-in prompts) or a prompt file (default 4, "
                   "--quick 2)")
    p.add_argument("--repeats", type=int, default=None, help="timed passes, medians reported (default 5, --quick 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the interleaved run order")
    p.add_argument("--quick", action="store_true", help="tiny lengths: a smoke test, not a measurement")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.add_argument("--out", default="out/bench_peers.json")
    args = p.parse_args(argv)
    from bench.peers_hf import missing_reason

    try:
        check_args(args)
        if (why := missing_reason()) is not None:
            raise ConfigError("transformers", why)
        result = bench(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_atomic(args.out, json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"wrote {args.out}")
    return 0 if result["token_identity"]["all_identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
