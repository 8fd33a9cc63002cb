"""Hardware presets for the roofline cost model: HBM bandwidth, dense bf16 FLOP/s, interconnects.

Peak numbers are from the vendors' datasheets (cited per entry). Latencies, per-layer launch floors and
default efficiencies are not datasheet numbers: they are assumptions typical of tuned inference stacks
(CUDA graphs, NCCL), stated as such, and meant to be replaced by a measured profile (`saguaro calibrate`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from calibration.errors import ConfigError, check_number

GB = 1e9
TFLOPS = 1e12


@dataclass(frozen=True)
class Hardware:
    """One accelerator: peaks per device, interconnect per direction, and assumed overheads.

    nvlink_bw / pcie_bw are one-direction bytes/s (datasheets quote bidirectional totals: halved here);
    allreduce_latency_s is the fixed cost of one small tensor-parallel all-reduce; p2p_latency_s the
    one-way latency of a small point-to-point message; launch_s_per_layer the kernel-launch floor per
    transformer layer per forward; fixed_s the per-forward floor (sampling, host sync).
    """

    name: str
    description: str
    mem_bw: float
    peak_flops: float
    memory_bytes: float
    nvlink_bw: float
    pcie_bw: float
    efficiency: float = 0.7
    allreduce_latency_s: float = 8e-6
    p2p_latency_s: float = 15e-6
    pcie_latency_s: float = 25e-6
    launch_s_per_layer: float = 4e-6
    fixed_s: float = 60e-6

    def __post_init__(self) -> None:
        for key in ("mem_bw", "peak_flops", "memory_bytes", "nvlink_bw", "pcie_bw", "efficiency"):
            check_number(f"hardware.{key}", getattr(self, key), 0.0, lo_open=True)
        check_number("hardware.efficiency", self.efficiency, 0.0, 1.0, lo_open=True)
        for key in ("allreduce_latency_s", "p2p_latency_s", "pcie_latency_s", "launch_s_per_layer", "fixed_s"):
            check_number(f"hardware.{key}", getattr(self, key), 0.0, 1.0)

    def to_dict(self) -> dict:
        """Plain numbers (for provenance and `saguaro presets --json`)."""
        return asdict(self)


HARDWARE: dict[str, Hardware] = {
    # NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): HBM2e 2,039 GB/s; BF16 Tensor Core 312 TFLOPS
    # dense (624 with sparsity); 80 GB; NVLink 600 GB/s (bidirectional); PCIe Gen4 64 GB/s (bidirectional).
    "a100": Hardware("a100", "NVIDIA A100 80GB SXM", mem_bw=2039 * GB, peak_flops=312 * TFLOPS,
                     memory_bytes=80 * GB, nvlink_bw=600 / 2 * GB, pcie_bw=64 / 2 * GB, efficiency=0.65,
                     launch_s_per_layer=5e-6),
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM): HBM3 3.35 TB/s; BF16 Tensor Core 1,979 TFLOPS with
    # sparsity -> 989 dense; 80 GB; NVLink 900 GB/s (bidirectional); PCIe Gen5 128 GB/s (bidirectional).
    "h100": Hardware("h100", "NVIDIA H100 SXM 80GB", mem_bw=3350 * GB, peak_flops=989 * TFLOPS,
                     memory_bytes=80 * GB, nvlink_bw=900 / 2 * GB, pcie_bw=128 / 2 * GB, efficiency=0.7),
    # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): HBM3e 4.8 TB/s, 141 GB; BF16 1,979 TFLOPS with
    # sparsity -> 989 dense (same GH100 compute as H100); NVLink 900 GB/s; PCIe Gen5 128 GB/s.
    "h200": Hardware("h200", "NVIDIA H200 SXM 141GB", mem_bw=4800 * GB, peak_flops=989 * TFLOPS,
                     memory_bytes=141 * GB, nvlink_bw=900 / 2 * GB, pcie_bw=128 / 2 * GB, efficiency=0.7),
    # NVIDIA HGX B200 datasheet: per GPU HBM3e 8 TB/s, 180-192 GB (192 GB used); FP16/BF16 Tensor Core
    # 36 PFLOPS per 8 GPUs with sparsity -> 2.25 PFLOPS dense per GPU; NVLink 5 1.8 TB/s (bidirectional);
    # PCIe Gen5 128 GB/s (bidirectional). Efficiency assumed lower while kernels mature.
    "b200": Hardware("b200", "NVIDIA B200 (HGX)", mem_bw=8000 * GB, peak_flops=2250 * TFLOPS,
                     memory_bytes=192 * GB, nvlink_bw=1800 / 2 * GB, pcie_bw=128 / 2 * GB, efficiency=0.65,
                     allreduce_latency_s=7e-6),
    # AMD Instinct MI300X datasheet: HBM3 5.3 TB/s, 192 GB; peak BF16 1,307.4 TFLOPS dense (2,614.9 with
    # sparsity); Infinity Fabric 7 links x 128 GB/s = 896 GB/s aggregate peer bandwidth (bidirectional);
    # PCIe Gen5 x16 128 GB/s (bidirectional). Efficiency and latencies assumed (RCCL, ROCm kernels).
    "mi300x": Hardware("mi300x", "AMD Instinct MI300X OAM", mem_bw=5300 * GB, peak_flops=1307.4 * TFLOPS,
                       memory_bytes=192 * GB, nvlink_bw=896 / 2 * GB, pcie_bw=128 / 2 * GB, efficiency=0.55,
                       allreduce_latency_s=12e-6, p2p_latency_s=20e-6, launch_s_per_layer=6e-6),
}

_ALIASES = {"a100-80gb": "a100", "a100-sxm": "a100", "a100-80gb-sxm": "a100", "h100-sxm": "h100",
            "h200-sxm": "h200", "mi300": "mi300x", "b200-hgx": "b200"}


def get_hardware(name: str | Hardware) -> Hardware:
    """A hardware preset by name (case-insensitive; a Hardware passes through); ConfigError lists the known."""
    if isinstance(name, Hardware):
        return name
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in HARDWARE:
        raise ConfigError("hardware", f"unknown hardware {name!r}", ", ".join(HARDWARE))
    return HARDWARE[key]
