"""The one device-string rule (cpu | cuda | cuda:N) and every device check of a run: syntax (RunConfig),
tensor-parallel placement (``target_devices``) and, at run time, that the devices exist on this machine."""

from __future__ import annotations

import os
import re

from calibration.errors import ConfigError, check_choice

_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+)$")
ALLOWED = "a list of cpu | cuda | cuda:N, all of one kind, one per rank, starting with `device`"


def is_device(value: object) -> bool:
    """cpu | cuda | cuda:N."""
    return isinstance(value, str) and bool(_DEVICE.match(value))


def is_cuda(device: str) -> bool:
    """cuda or cuda:N (a device string that passed ``is_device``)."""
    return device.startswith("cuda")


def device_index(device: str) -> int:
    """N of cuda:N (0 for a bare cuda)."""
    return int(device.split(":")[1]) if ":" in device else 0


def check_device(name: str, value: object) -> None:
    """ConfigError(name, ...) unless ``value`` is cpu | cuda | cuda:N."""
    if not is_device(value):
        raise ConfigError(name, f"unknown device {value!r}", "cpu | cuda | cuda:N")


def check_present(devices: list[str], target_devices: list[str]) -> None:
    """At run time: CUDA is available for every cuda device, and a split target's GPUs are all visible."""
    import torch

    for d in devices:
        if is_cuda(d) and not torch.cuda.is_available():
            raise ConfigError("device", f"{d!r} requested but CUDA is not available", "cpu")
    if len(target_devices) > 1 and is_cuda(target_devices[0]):
        visible = torch.cuda.device_count()
        if visible <= max(device_index(d) for d in target_devices):
            raise ConfigError("target_devices", f"{target_devices} needs more GPUs than the {visible} visible",
                              "cuda:N with N < torch.cuda.device_count()")


def _target_config(target: object) -> tuple[object, str]:
    """(ModelConfig, name) of the run's target: in memory, a checkpoint directory, or the tiny pair's."""
    from saguaro_exec.model import Transformer, read_config

    if isinstance(target, Transformer):
        return target.config, "the in-memory target"
    if target is None:
        from saguaro_exec.io.assets import tiny_pair_paths

        target = tiny_pair_paths()[0]
    return read_config(target), os.fspath(target)


def check_target_devices(value: object, device: str, target: object) -> list[str] | None:
    """``value`` as a list (None stays None); ConfigError("target_devices", ...) when it is not a list of
    devices of one kind starting with ``device``, repeats a GPU, or its size does not divide the target's
    attention heads, KV heads and intermediate size."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
        raise ConfigError("target_devices", f"expected a non-empty list of devices, got {value!r}", ALLOWED)
    devices = list(value)
    for d in devices:
        if not is_device(d):
            raise ConfigError("target_devices", f"unknown device {d!r}", ALLOWED)
    kinds = {d.split(":")[0] for d in devices}
    if len(kinds) > 1:
        raise ConfigError("target_devices", f"mixes {' and '.join(sorted(kinds))} devices", ALLOWED)
    if kinds == {"cuda"}:
        idx = [device_index(d) for d in devices]
        if len(set(idx)) < len(idx):
            raise ConfigError("target_devices", f"{devices} uses a GPU twice (NCCL needs one rank per GPU)",
                              "distinct cuda:N devices")
        same_first = is_cuda(device) and device_index(device) == idx[0]
    else:
        same_first = device == "cpu"
    if not same_first:
        raise ConfigError("target_devices", f"first entry {devices[0]!r} is not the run's device {device!r}",
                          "target_devices[0] == device (rank 0, the verifier, runs there)")
    if len(devices) > 1:
        from saguaro_exec.tp.shard import tp_divisibility

        config, name = _target_config(target)
        why = tp_divisibility(config, len(devices))
        if why is not None:
            raise ConfigError("target_devices", f"{len(devices)} ranks cannot split {name}: {why}",
                              "a number of devices dividing num_heads, num_kv_heads and intermediate_size")
    return devices


DRAFT_PLACEMENTS = ("process", "stream")


def check_draft_placement(placement: object, spec: object, inline_draft: bool) -> None:
    """draft_placement: "process" | "stream"; "stream" is SSD's, and not with inline_draft (also in-process)."""
    check_choice("draft_placement", placement, DRAFT_PLACEMENTS)
    if placement == "stream" and spec.mode != "ssd":
        raise ConfigError("draft_placement", f"\"stream\" with mode = {spec.mode!r} (AR has no draft; SD's "
                          "runs in this process already)", "\"stream\" with mode = \"ssd\"")
    if placement == "stream" and inline_draft:
        raise ConfigError("draft_placement", "\"stream\" together with inline_draft", "one of them")
