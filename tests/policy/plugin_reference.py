"""What a k8s-device-plugin release advertises a MIG device as: a second implementation, for the tests only.

Written from NVIDIA/k8s-device-plugin's source at each tag (`dp@<tag>:<path>`), independently of
policy/hardware/releases.py: it keeps its own tables (GI profile ID -> NVML enum per chip, per-release constants), names
profiles from their memory with go-nvlib's own formula instead of reading the catalog's names, and matches
with Python's `re` the way the plugin's Go regexp does. Where the two implementations disagree, one of them
misread the source.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from policy.hardware.catalog import GpuModel, MigProfile

EXIT = "exit"
"""The plugin does not start: the DaemonSet pod crash-loops and the node advertises nothing."""

# NVML GI profile enum per GI profile ID, per chip family (placement units, compute slices); go-nvml const.go
# (dp@v0.20.0:vendor/github.com/NVIDIA/go-nvml/pkg/nvml/const.go:1185-1222) against nvidia-smi's IDs.
_ENUMS: dict[tuple[int, int], dict[int, int]] = {
    (8, 7): {19: 0, 14: 1, 9: 2, 5: 3, 0: 4, 20: 7, 15: 9},
    (4, 4): {14: 0, 5: 1, 0: 3, 21: 7, 6: 8},
    (12, 4): {14: 0, 5: 1, 0: 3, 21: 7, 47: 10, 35: 11, 32: 12, 67: 13, 66: 14, 65: 15, 64: 16},
}
# go-nvlib NewMigProfile: the attribute each enum carries (dp@v0.17.4:vendor/github.com/NVIDIA/go-nvlib/pkg/
# nvlib/device/mig_profile.go:60-144).
_ATTRIBUTES = {7: "+me", 8: "+me", 10: "+gfx", 11: "+gfx", 12: "+gfx", 13: "-me", 14: "-me", 15: "+me.all",
               16: "+me.all"}


def enum_of(model: GpuModel, profile: MigProfile) -> int:
    assert model.mig is not None
    return _ENUMS[(model.mig.placement_units, model.mig.compute_slices)][profile.gi_profile_id]


@dataclass(frozen=True)
class Code:
    """What one release's code does, read off its vendored go-nvml and go-nvlib."""

    profile_count: int
    """GPU_INSTANCE_PROFILE_COUNT: the mixed walk covers enums below it."""
    nameable: int | None
    """Enums the device-profile code can turn into a profile (None: v0.12's own GetAttributes code, any)."""
    anchored: bool


def code(tag: str) -> Code:
    v = tuple(int(x) for x in tag.lstrip("v").split("."))
    if v < (0, 13, 0):
        return Code(8, None, False)  # dp@v0.12.0:internal/rm/nvml.go:160-199, 309-335; const.go:555
    if v < (0, 14, 0):
        return Code(8, 8, False)  # dp@v0.13.0: go-nvlib GetProfile loops enums 0-7 (mig_device.go:102)
    if v < (0, 17, 3):
        return Code(10, 10, False)  # dp@v0.14.0:const.go:617
    if v < (0, 17, 4):
        return Code(17, 10, False)  # dp@v0.17.3: go-nvml COUNT=17, go-nvlib v0.7.2 knows 0-9
    if v < (0, 20, 0):
        return Code(17, 17, False)  # dp@v0.17.4: go-nvlib v0.7.4
    return Code(18, 17, True)  # dp@v0.20.0: COUNT=18, go-nvlib v0.12.0 knows 0-16; resources.go anchors


def _gonvlib_name(model: GpuModel, profile: MigProfile, enum: int) -> str:
    """go-nvlib's String() of a GI profile: getMigMemorySizeGB (dp@v0.20.0:.../mig_profile.go:384-392)."""
    total = model.memory_mib * 2**20
    fraction = math.ceil(profile.memory_mib * 2**20 / total * 8) / 8
    gb = math.floor(fraction * math.ceil(total / 2**30) + 0.5)  # Go's math.Round: half away from zero
    return f"{profile.compute_slices}g.{gb}gb{_ATTRIBUTES.get(enum, '')}"


def _v12_name(profile: MigProfile) -> str:
    """v0.12: fmt.Sprintf("%dg.%dgb", slices, (MemorySizeMB + 1023) / 1024), no attributes."""
    return f"{profile.compute_slices}g.{(profile.memory_mib + 1023) // 1024}gb"


def _name(tag: str, model: GpuModel, profile: MigProfile) -> str | None:
    c, enum = code(tag), enum_of(model, profile)
    if c.nameable is None:
        return _v12_name(profile)
    return _gonvlib_name(model, profile, enum) if enum < c.nameable else None


def advertised(tag: str, model: GpuModel, profile: MigProfile, strategy: str) -> str:
    """The resource a `profile` instance on a `model` node is advertised as by release `tag`, or EXIT."""
    assert model.mig is not None
    c = code(tag)
    device = _name(tag, model, profile)
    if device is None:
        return EXIT  # buildMigDeviceMap: "error getting MIG profile" (both strategies)
    if strategy == "single":
        return "nvidia.com/gpu"  # AddMIGResource("*", "gpu")
    patterns: list[str] = []
    for p in sorted(model.mig.profiles, key=lambda p: enum_of(model, p)):
        if enum_of(model, p) >= c.profile_count:
            continue
        name = _name(tag, model, p)
        if name is None:
            return EXIT  # VisitMigProfiles: "invalid GPU Instance Profile ID" during the walk
        if name not in patterns:
            patterns.append(name)
    for pattern in patterns:  # the first pattern that matches wins (device_map.go buildMigDeviceMap)
        regex = re.escape(pattern)
        if (re.fullmatch if c.anchored else re.search)(regex, device):
            return "nvidia.com/mig-" + pattern.replace("+", ".")
    return EXIT  # "MIG profile '...' does not match any resource patterns"
