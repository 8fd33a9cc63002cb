"""The GPU fast path of one process: CUDA graphs (``RunConfig.cuda_graphs``) and the attention backend
(``RunConfig.attention``), chosen here and nowhere else.

``Accel`` travels with the engines (``CachedModel`` reads it) and, inside ``WorkerSpec``, to the draft
process. It owns the per-model ``GraphPool``s of the process, so captured graphs and their caches are
reused by every batch of a run; the pools are not pickled (each process builds its own).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from calibration.errors import ConfigError, check_choice
from saguaro_exec.devices import is_cuda

CUDA_GRAPHS = ("auto", "on", "off")
ATTENTION = ("auto", "sdpa", "flash")
FLASH_DTYPES = ("bfloat16", "float16")


@dataclass(frozen=True)
class Accel:
    """graphs: run steps through CUDA graphs (captured lazily per shape bucket); attention: "sdpa" | "flash"
    (flash-attn for decode and verify chunks; tree steps always use SDPA with their mask)."""

    graphs: bool = False
    attention: str = "sdpa"
    _pools: dict = field(default_factory=dict, compare=False, repr=False)

    def pool(self, model):
        """This process's GraphPool for ``model`` (None when graphs are off or ``model`` is not a plain
        Transformer, e.g. a tensor-parallel target)."""
        from saguaro_exec.model import Transformer
        from saguaro_exec.model.graphs import GraphPool

        if not self.graphs or not isinstance(model, Transformer):
            return None
        pool = self._pools.get(id(model))
        if pool is None:
            pool = self._pools[id(model)] = GraphPool(model)
        return pool

    def uses_flash(self, model) -> bool:
        """Whether ``model``'s causal chunks go through flash-attn."""
        from saguaro_exec.model import Transformer

        return self.attention == "flash" and isinstance(model, Transformer)

    @property
    def captures(self) -> int:
        """Forwards captured so far by this process's pools."""
        return sum(p.captures for p in self._pools.values())

    def __getstate__(self) -> dict:
        return {"graphs": self.graphs, "attention": self.attention}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "graphs", state["graphs"])
        object.__setattr__(self, "attention", state["attention"])
        object.__setattr__(self, "_pools", {})


def check_accel(cuda_graphs: object, attention: object, devices: list[str], dtype: str) -> None:
    """RunConfig's checks of the two fields: ConfigError naming the field for a bad value, graphs "on"
    or attention "flash" without a CUDA device, or "flash" with float32 or without the flash_attn package."""
    check_choice("cuda_graphs", cuda_graphs, CUDA_GRAPHS)
    check_choice("attention", attention, ATTENTION)
    cpu = [d for d in devices if not is_cuda(d)]
    if cuda_graphs == "on" and cpu:
        raise ConfigError("cuda_graphs", f"\"on\" needs CUDA devices, got {cpu[0]!r}",
                          "auto | off (auto = on exactly when the device is CUDA)")
    if attention == "flash":
        if cpu:
            raise ConfigError("attention", f"\"flash\" needs CUDA devices, got {cpu[0]!r}", "auto | sdpa")
        if dtype not in FLASH_DTYPES:
            raise ConfigError("attention", f"\"flash\" needs dtype bfloat16 or float16, got {dtype!r}",
                              "auto | sdpa, or dtype = \"bfloat16\"")
        from saguaro_exec.model.flash import flash_available

        if not flash_available():
            raise ConfigError("attention", "\"flash\": the flash_attn package does not import here",
                              "auto | sdpa (or install flash-attn)")


def resolve_accel(cuda_graphs: str, attention: str, device: str, dtype: str) -> Accel:
    """The fast path for models on ``device``: graphs when "on", or "auto" on CUDA; flash when asked, or
    "auto" on CUDA with bf16/fp16 and the package importing; SDPA otherwise."""
    cuda = is_cuda(device)
    graphs = cuda_graphs == "on" or (cuda_graphs == "auto" and cuda)
    flash = attention == "flash"
    if attention == "auto" and cuda and dtype in FLASH_DTYPES:
        from saguaro_exec.model.flash import flash_available

        flash = flash_available()
    return Accel(graphs=graphs, attention="flash" if flash else "sdpa")
