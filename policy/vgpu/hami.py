"""Project-HAMi v2.10, the software vGPU behind the vgpu sharing mode: names, value ranges and node records.

Every fact here was read in HAMi's source at the tag gpupolicy targets (Project-HAMi/HAMi@v2.10.0); the
citation follows each one. The compiler, the admission rules, `cluster verify` and `discover` read them from
here, so a HAMi release that moves one of them is changed in one place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: The release whose formats gpupolicy writes and whose behaviour the admission rules mirror.
SUPPORTED_VERSION = (2, 10)
DEFAULT_VERSION = "v2.10.0"
#: The image of the scheduler extender, the webhook, the device plugin and vGPUmonitor (charts/hami values.yaml
#: global.imageTag, devicePlugin.image).
IMAGE_NAME = "projecthami/hami"
IMAGE_REPOSITORY = f"docker.io/{IMAGE_NAME}"
CHART_REPOSITORY = "https://project-hami.github.io/HAMi/"
DEFAULT_SCHEDULER_NAME = "hami-scheduler"  # charts/hami values.yaml schedulerName

# The five NVIDIA resource names and their defaults (charts/hami values.yaml:25-29; pkg/device/nvidia/device.go
# NvidiaConfig). Only the count resource is advertised by the device plugin; the other four are read from the
# container's limits by the webhook and the scheduler and never appear on a node (the kubelet drops them).
DEFAULT_COUNT = "nvidia.com/gpu"
DEFAULT_MEMORY = "nvidia.com/gpumem"
DEFAULT_MEMORY_PERCENTAGE = "nvidia.com/gpumem-percentage"
DEFAULT_CORES = "nvidia.com/gpucores"
DEFAULT_PRIORITY = "nvidia.com/priority"
#: HAMi's per-vGPU resources under their default names, which no NVIDIA device plugin advertises.
DEFAULT_ATTRIBUTES = frozenset({DEFAULT_MEMORY, DEFAULT_MEMORY_PERCENTAGE, DEFAULT_CORES, DEFAULT_PRIORITY})

# Pod annotations users set (pkg/device/nvidia/device.go:40-60; pkg/util/types.go).
USE_GPUTYPE = "nvidia.com/use-gputype"
NOUSE_GPUTYPE = "nvidia.com/nouse-gputype"
VGPU_MODE = "nvidia.com/vgpu-mode"
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
#: Operating modes a device can register (device.go:61-63). mps is a stub in v2.10.0 (plugin/mps.go:57-69).
HAMI_CORE, MIG_MODE = "hami-core", "mig"
OPERATING_MODES = (HAMI_CORE, MIG_MODE)
#: hami.io/gpu-scheduler-policy words (pkg/scheduler/policy/gpu_policy.go); anything else silently means spread.
GPU_POLICIES = ("binpack", "spread", "topology-aware", "mutex", "numa")
#: hami.io/node-scheduler-policy: anything but spread silently means binpack (policy/node_policy.go:48-54).
NODE_POLICIES = ("binpack", "spread")

#: The label HAMi's webhook selectors exclude (charts/hami templates/scheduler/webhook.yaml); its own pods carry it.
WEBHOOK_IGNORE = ("hami.io/webhook", "ignore")
#: Written by the device plugin: the GPUs it registered (plugin/register.go; JSON since v2.8.0).
NODE_REGISTER = "hami.io/node-nvidia-register"
#: Written by the scheduler while it trusts the node (pkg/device/devices.go:576-615).
NODE_HANDSHAKE = "hami.io/node-handshake"

#: gpuCorePolicy values HAMi-core acts on (device.go:76-83); the webhook injects anything but default.
CorePolicy = Literal["default", "force", "disable"]
CORE_POLICIES: tuple[CorePolicy, ...] = ("default", "force", "disable")
#: libCudaLogLevel values HAMi names (device.go:85-92): errors, warnings, infos, debugs.
LOG_LEVELS = ("0", "1", "3", "4")
#: HAMi keeps memory in int32 MiB (DeviceInfo.Devmem, ContainerDeviceRequest.Memreq).
MAX_INT32 = 2**31 - 1
#: The most memory a percentage or gpucores request means; HAMi clamps above (device.go:560-566, 772-776).
MAX_PERCENT = 100


def parse_version(version: str) -> tuple[int, int, int]:
    """``v2.10.0`` -> (2, 10, 0); the model's pattern guarantees the shape."""
    major, minor, patch = version.lstrip("v").split("-")[0].split(".")
    return int(major), int(minor), int(patch)


def registered_memory(physical_mib: int, scaling: float) -> int:
    """The MiB HAMi registers per GPU: int32(float64(physical) * deviceMemoryScaling), truncated as Go converts
    (plugin/register.go:148-152); the most one vGPU may ask for."""
    return int(physical_mib * scaling) if scaling != 1 else physical_mib


def registered_cores(scaling: float) -> int:
    """The cores HAMi registers per GPU: int32(deviceCoreScaling * 100), truncated (plugin/register.go:175-178)."""
    return int(scaling * 100)


def device_type(product: str) -> str:
    """The type HAMi registers for a GPU, from its GFD product label: the NVML name (GFD turns its spaces into
    dashes), prefixed ``NVIDIA-`` unless it starts with NVIDIA (register.go:170-174). Matching with
    :func:`type_matches` ignores the space/dash difference, so the dashed form is enough."""
    return product if product.upper().startswith("NVIDIA") else f"NVIDIA-{product}"


def _fold(text: str) -> str:
    return text.upper().replace(" ", "-")


def type_matches(words: str, gpu_type: str) -> bool:
    """Whether a comma list of ``use-gputype`` words matches a device type: HAMi's case-insensitive substring
    test (pkg/device/devices.go CheckType), with spaces and dashes taken as equal (NVML names have spaces
    where GFD's product labels have dashes)."""
    folded = _fold(gpu_type)
    return any(w.strip() and _fold(w.strip()) in folded for w in words.split(","))


def words(value: str) -> tuple[str, ...]:
    """The non-empty, trimmed entries of a comma-separated annotation value."""
    return tuple(w.strip() for w in value.split(",") if w.strip())


# --- the device plugin's registration annotation, as cluster verify and discover read it ------------------------


@dataclass(frozen=True)
class RegisteredGpu:
    """One GPU of a node as HAMi's device plugin registered it in hami.io/node-nvidia-register."""

    id: str
    count: int
    """deviceSplitCount: how many vGPUs the GPU takes."""
    devmem: int
    """Registered MiB: the physical memory times deviceMemoryScaling."""
    devcore: int
    """Registered cores: 100 times deviceCoreScaling."""
    type: str
    mode: str
    """hami-core or mig; an absent mode reads as hami-core (no config.json, devices.go omitempty)."""
    health: bool


def parse_register(value: str) -> tuple[RegisteredGpu, ...] | None:
    """The GPUs of a hami.io/node-nvidia-register value, JSON (v2.8.0+) or the legacy ``id,count,...:`` text
    (v2.7 and older, devices.go DecodeNodeDevices); None when it is neither."""
    text = value.strip()
    if text.startswith("["):
        return _parse_json(text)
    return _parse_legacy(text)


def _parse_json(text: str) -> tuple[RegisteredGpu, ...] | None:
    try:
        items = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return None
    # Every field is omitempty (devices.go DeviceInfo), so a zero count or a false health is simply absent.
    return tuple(RegisteredGpu(str(i.get("id", "")), _int(i.get("count")), _int(i.get("devmem")),
                               _int(i.get("devcore")), str(i.get("type", "")), str(i.get("mode") or HAMI_CORE),
                               i.get("health") is True) for i in items)


def _parse_legacy(text: str) -> tuple[RegisteredGpu, ...] | None:
    if ":" not in text:
        return None
    found = []
    for segment in filter(None, text.split(":")):
        items = segment.split(",")
        if len(items) not in (7, 9) or not all(re.fullmatch(r"-?\d+", v) for v in (items[1], items[2], items[3])):
            return None
        mode = items[8] if len(items) == 9 else HAMI_CORE
        found.append(RegisteredGpu(items[0], int(items[1]), int(items[2]), int(items[3]), items[4], mode,
                                   items[6].lower() == "true"))
    return tuple(found)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def registered_on(annotations: Mapping[str, str]) -> tuple[RegisteredGpu, ...] | None:
    """The GPUs a node's annotations say HAMi registered; None when the node has no readable registration."""
    raw = annotations.get(NODE_REGISTER)
    return parse_register(raw) if raw else None
