"""The sharing a GPU node runs now, read off its GPU Feature Discovery labels and extended resources, as spec data.

GFD labels what its config makes the device plugin advertise (reference device-plugin.md §6): under MIG mixed, one
``nvidia.com/mig-<profile>.count`` (devices) and ``.replicas`` per profile, ``nvidia.com/gpu.count`` the physical
GPUs; under MIG single, ``nvidia.com/gpu.product`` ends in ``-MIG-<profile>`` and ``gpu.count`` counts MIG devices;
without MIG, ``gpu.replicas`` above 1 with ``gpu.sharing-strategy`` (v0.15+, ``mps`` or ``time-slicing``; older GFDs
time-slice only) and ``nvidia.com/gpu.shared`` in the capacity when renameByDefault is on. Resource names come from
the capacity where it is known: an old GFD labelled ``mig-3g.21gb`` a profile the plugin advertised as
``nvidia.com/mig-3g.20gb`` (fixtures/nodes/nvidia-docs-a100-sxm4-40gb-mig-mixed-label-resource-mismatch.yaml).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cluster import facts
from cluster.resources import Node
from policy.hardware import catalog, mig
from policy.hardware.releases import MIG_PREFIX

_SHARED_RESOURCE = "nvidia.com/gpu.shared"
_UNSETTLED = ("pending", "rebooting", "failed")


@dataclass(frozen=True)
class LiveSharing:
    """A node's sharing as the spec's ``sharing`` value, in words, and what the labels leave open."""

    data: Any
    """``"exclusive"`` or a mapping with one of timeSlicing, mps, mig, as a spec writes it."""
    summary: str
    """``MIG mixed, 7x 1g.12gb per GPU, time-sliced 2x`` (for the draft's comment)."""
    physical_gpus: int | None = None
    """GPUs per node where the labels count something else (MIG single counts MIG devices) or do not say (MIG
    mixed without nvidia.com/gpu.count): an estimate."""
    todo: tuple[str, ...] = ()
    """What the labels cannot say and someone must check."""


def settled(node: Node) -> bool:
    """Whether mig-manager has finished with the node (no state label, or success)."""
    return node.labels.get(facts.MIG_CONFIG_STATE) not in _UNSETTLED


def read_sharing(node: Node) -> LiveSharing:
    """The sharing the node's labels and capacity show."""
    labels = node.labels
    product = facts.parse_product(labels.get(facts.PRODUCT, ""))
    model = catalog.lookup(product.model) or catalog.lookup(f"NVIDIA-{product.model}")
    if product.mig_profile and product.mig_profile != "INVALID":
        return _mig_single(node, product.mig_profile, model)
    profiles = _mig_devices(node)
    if profiles:
        return _mig_mixed(node, profiles, model)
    return _replicated(node)


def _mig_single(node: Node, profile: str, model: catalog.GpuModel | None) -> LiveSharing:
    devices = facts.label_int(node.labels, facts.COUNT) or 1
    found = model.mig.profile(profile) if model and model.mig else None
    gpus = math.ceil(devices / found.max_count) if found else 1
    per_gpu = devices // gpus if devices % gpus == 0 else devices
    replicas = facts.label_int(node.labels, facts.REPLICAS) or 1
    data: dict[str, Any] = {"strategy": "single", "layout": {profile: per_gpu}}
    if replicas > 1:
        data["timeSlicing"] = {profile: replicas}
    todo = (f"MIG single: nvidia.com/gpu.count ({devices}) counts MIG devices, so {gpus} GPU(s) per node is an "
            "estimate; set gpu.count to the number of GPUs `nvidia-smi -L` lists on a node",)
    return LiveSharing({"mig": data}, f"MIG single, {per_gpu}x {profile} per GPU" + _sliced(replicas), gpus, todo)


def _mig_devices(node: Node) -> dict[str, tuple[int, int]]:
    """Profile -> (MIG devices per node, time-slicing replicas), from the capacity's resource names."""
    resources = facts.gpu_resources(node.capacity or node.allocatable)
    out: dict[str, tuple[int, int]] = {}
    for resource, advertised in sorted(resources.items()):
        if not resource.startswith(MIG_PREFIX) or advertised <= 0:
            continue
        replicas = facts.label_int(node.labels, f"{resource}.replicas") or 1
        devices = facts.label_int(node.labels, f"{resource}.count") or advertised // replicas
        out[resource.removeprefix(MIG_PREFIX)] = (devices, replicas)
    if out:
        return out
    for key, value in sorted(node.labels.items()):  # no capacity recorded: the labels alone
        if key.startswith(MIG_PREFIX) and key.endswith(".count") and value.isdigit() and int(value) > 0:
            resource = key.removesuffix(".count")
            out[resource.removeprefix(MIG_PREFIX)] = (int(value),
                                                      facts.label_int(node.labels, f"{resource}.replicas") or 1)
    return out


def _mig_mixed(node: Node, profiles: Mapping[str, tuple[int, int]], model: catalog.GpuModel | None) -> LiveSharing:
    labelled = facts.label_int(node.labels, facts.COUNT)
    totals = {p: devices for p, (devices, _) in profiles.items()}
    sliced = {p: replicas for p, (_, replicas) in profiles.items() if replicas > 1}
    geometry = model.mig if model else None
    data: dict[str, Any] = {"strategy": "mixed"}
    todo: list[str] = []
    devices = ", ".join(f"{n}x {p}" for p, n in totals.items())
    found = None
    if geometry is not None:
        found = mig.split(geometry, totals, labelled) if labelled else mig.fewest_gpus(geometry, totals)
    gpus = found.gpus if found is not None else labelled or 1
    if found is not None and not labelled:
        # GFD writes gpu.count (device-plugin.md §6), but a partial dump may lack it: the fewest GPUs that hold
        # the advertised MIG devices is the one count that is surely no more than the node has.
        todo.append(f"the node has no nvidia.com/gpu.count label: {gpus} GPU(s) is the fewest that can hold its "
                    f"MIG devices ({devices}), and the layout one split of them that fits; set gpu.count to the "
                    "number of GPUs `nvidia-smi -L` lists on a node, and the layout to what `nvidia-smi mig -lgi` "
                    "lists per GPU")
    if found is not None and found.even:
        data["layout"] = found.groups[0][1]
    elif found is not None:
        data["groups"] = [{"gpus": list(indices), "layout": layout} for indices, layout in found.groups]
        todo.append("the labels give MIG devices per node, not per GPU: the groups are one arrangement that fits; "
                    "make them what `nvidia-smi mig -lgi` lists per GPU on a node")
    else:
        data["layout"] = {p: max(1, n // gpus) for p, n in totals.items()}
        todo.append(f"{devices} over {gpus} GPU(s) fits no per-GPU layout gpupolicy knows: write the layout "
                    "`nvidia-smi mig -lgi` lists per GPU on a node")
    if sliced:
        data["timeSlicing"] = sliced
    return LiveSharing({"mig": data}, f"MIG mixed, {devices} per node over {gpus} GPU(s)"
                       + (f", time-sliced {_replicas(sliced)}" if sliced else ""),
                       gpus if found is not None and not labelled else None, tuple(todo))


def _replicated(node: Node) -> LiveSharing:
    labels = node.labels
    gpus = facts.label_int(labels, facts.COUNT) or 1
    renamed = node.allocatable.get(_SHARED_RESOURCE, 0) or node.capacity.get(_SHARED_RESOURCE, 0)
    replicas = facts.label_int(labels, facts.REPLICAS) or 0
    if replicas < 2:
        advertised = renamed or node.allocatable.get("nvidia.com/gpu", 0)
        replicas = advertised // gpus if advertised and advertised % gpus == 0 else replicas
    if replicas < 2:
        return LiveSharing("exclusive", "whole GPUs")
    mode = "mps" if labels.get(facts.SHARING_STRATEGY) == "mps" else "timeSlicing"
    data: dict[str, Any] = {"replicas": replicas}
    if renamed:
        data["renameByDefault"] = True
    words = "MPS" if mode == "mps" else "time-slicing"
    return LiveSharing({mode: data}, f"{words}, {replicas} replicas per GPU" + (
        f", advertised as {_SHARED_RESOURCE}" if renamed else ""))


def _sliced(replicas: int) -> str:
    return f", time-sliced {replicas}x" if replicas > 1 else ""


def _replicas(sliced: Mapping[str, int]) -> str:
    return ", ".join(f"{p} {n}x" for p, n in sliced.items())
