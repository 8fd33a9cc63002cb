"""Measured step times the stack levels (calibration.stack) are fitted to, each with its source.

kind "step": one forward of `batch` sequences adding `new` tokens after `context` (seconds, median).
kind "e2e": a whole request batch: prefill of `batch` x `input` tokens, then `output - 1` decode steps.
kind "delta": t(context_hi) - t(context) at the same (batch, new): the context-dependent part only (used where the
fixed costs of the run are not those of the level, e.g. eager runs for the tree-attention term).
`group` names the held-out unit of the cross-validation (bench/bench_presets.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from calibration.hardware import GB, TFLOPS, Hardware
from calibration.shapes import ModelShape


@dataclass(frozen=True)
class Point:
    """One measured point: where it ran, what it timed, and the measured seconds."""

    level: str
    source: str
    group: str
    hardware: str | Hardware
    model: str | ModelShape
    tp: int
    kind: str
    batch: int
    new: int
    context: float
    measured_s: float
    dtype_bytes: float = 2
    output: int = 0            # e2e: output tokens per sequence (input tokens = `new`)
    context_hi: float = 0.0    # delta: the longer context
    weight: float = 1.0


# NVIDIA A100 40GB SXM datasheet: HBM2 1,555 GB/s, 312 TFLOPS dense BF16, NVLink 600 GB/s, PCIe Gen4 64 GB/s
A100_40GB = Hardware("a100-40gb", "NVIDIA A100 40GB SXM", mem_bw=1555 * GB, peak_flops=312 * TFLOPS,
                     memory_bytes=40 * GB, nvlink_bw=300 * GB, pcie_bw=32 * GB, efficiency=0.65, launch_s_per_layer=5e-6)

VLLM_CI = "vLLM performance benchmark, buildkite.com/vllm/performance-benchmark/builds/9515 (latency tests: input 32, " \
          "output 128, batch 8, median end-to-end latency)"
NIM = "NVIDIA NIM LLM benchmarking 1.0.0 performance page, docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance " \
      "(Llama-3.3-70B-Instruct NIM 1.8.0, fp8, TP2 on 2 x H100 80G, concurrency 1, ITL)"
A100_BLOG = "johnmusgrave.com/p/vllm-throughput-latency-sweep-on (vLLM 0.23.0, Llama-3.1-8B-Instruct bf16, one A100 " \
            "40GB, 1024 in / 128 out, one request at a time: 'about 75 tokens/sec')"
H200_GRAPHS = "bench/gpu_results/2026-11-30-h200/results.json, graphs (CUDA-graph replay, median of 20, context 1024)"
H200_EAGER = "bench/gpu_results/2026-11-30-h200/results.json, latency grid (eager, median of 10, context 512 vs 2048)"

SERVING: tuple[Point, ...] = (
    # 833.53 ms median end-to-end, Llama-3.1-8B TP1 on H200 (source: VLLM_CI)
    Point("serving", VLLM_CI, "vllm-h200-8b", "h200", "llama-3.1-8b", 1, "e2e", 8, 32, 0, 0.83353, output=128),
    # 2077.56 ms median end-to-end, Llama-3 70B (same shape as 3.1) TP4 on H200 (source: VLLM_CI)
    Point("serving", VLLM_CI, "vllm-h200-70b-tp4", "h200", "llama-3.1-70b", 4, "e2e", 8, 32, 0, 2.07756, output=128),
    # ITL 18.58 ms at 5000 in / 500 out (mean context ~5250), fp8 weights and KV assumed 1 byte (source: NIM)
    Point("serving", NIM, "nim-h100-70b-fp8-tp2", "h100", "llama-3.1-70b", 2, "step", 1, 1, 5250, 0.01858,
          dtype_bytes=1),
    # ITL 18.91 ms at 500 in / 2000 out (mean context ~1500) (source: NIM)
    Point("serving", NIM, "nim-h100-70b-fp8-tp2", "h100", "llama-3.1-70b", 2, "step", 1, 1, 1500, 0.01891,
          dtype_bytes=1),
    # ~75 tokens/s = 13.3 ms per decode step at ~1088 context, batch 1 (source: A100_BLOG; 'about': rounded)
    Point("serving", A100_BLOG, "vllm-a100-40gb-8b", A100_40GB, "llama-3.1-8b", 1, "step", 1, 1, 1088, 1 / 75),
)
# Not found (searched vLLM / SGLang issues, docs and pages): published optimized-engine step times at verify or
# tree widths (new tokens > 1) and for Llama-3.2-1B on H100/H200; the serving level's multi-token terms are
# therefore assumed (calibration.stack_fit.SERVING_ASSUMED), not fitted.

# CUDA-graph step times of random-weight bf16 models on one H200 (source: H200_GRAPHS), context 1024
_GRAPHS = {"llama-3.1-8b": {(1, 1): 7.345339, (1, 5): 8.901647, (4, 1): 7.763618, (4, 5): 9.757183,
                            (1, 17): 9.599101},
           "llama-3.2-1b": {(1, 1): 2.315282, (1, 5): 3.049983, (4, 1): 2.547347, (4, 5): 3.279258,
                            (1, 17): 3.264378}}
# eager context deltas at batch 16, the widths whose deltas stand above the eager noise (source: H200_EAGER):
# (model, new): (t at 512, t at 2048) in ms
_EAGER_DELTAS = {("llama-3.1-8b", 33): (23.448, 30.693), ("llama-3.1-8b", 65): (37.080, 43.546),
                 ("llama-3.2-1b", 65): (10.999, 12.610), ("llama-3.2-1b", 129): (16.826, 22.823)}

SAGUARO: tuple[Point, ...] = tuple(
    Point("saguaro", H200_GRAPHS, f"b{b}-n{n}", "h200", model, 1, "step", b, n, 1024, ms / 1e3)
    for model, pts in _GRAPHS.items() for (b, n), ms in pts.items()
) + tuple(
    Point("saguaro", H200_EAGER, f"delta-{model}-n{n}", "h200", model, 1, "delta", 16, n, 512, (hi - lo) / 1e3,
          context_hi=2048, weight=0.5)
    for (model, n), (lo, hi) in _EAGER_DELTAS.items()
)

POINTS = {"serving": SERVING, "saguaro": SAGUARO}
