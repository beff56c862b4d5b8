"""How many GPUs a candidate needs for an inventory, and which slot hosts which process.

Time-slicing and MPS slots are all alike to the scheduler, so a GPU takes as many processes as it has
replicas.  MPS refuses a process above its per-client memory limit; vGPU packs by memory (first fit
decreasing, HAMi accounts each task's memory); MIG gives each process the smallest instance whose memory
holds it (a pod asks for one profile), searching the fewest GPUs whose instances host every process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from policy.hardware import mig
from policy.plan.candidates import Candidate, Target, usable_mib
from policy.plan.inventory import Workload

__all__ = ["Packing", "Process", "Slot", "expand", "pack"]


@dataclass(frozen=True)
class Process:
    """One replica of a workload."""

    workload: Workload
    index: int

    @property
    def memory_mib(self) -> int:
        return self.workload.memory_mib

    @property
    def activity(self) -> float:
        return self.workload.sm_activity


@dataclass(frozen=True)
class Slot:
    """Where a process runs: a GPU, or a MIG instance on one, with the compute and memory behind it."""

    gpu: int
    device: str
    """``GPU``, or the MIG instance's profile and start, e.g. ``3g.40gb@4``."""
    memory_mib: int
    """What the process may use: the device's memory, an enforced limit, or its even share when unenforced."""
    compute: float
    """The device's share of the whole GPU's SMs (1 for a GPU, slices / compute slices for MIG)."""
    replicas: int
    """Processes the device takes at once."""


@dataclass(frozen=True)
class Packing:
    gpus: int | None
    """GPUs needed to host every process (None when some process cannot be hosted at all)."""
    unhostable: tuple[tuple[Workload, str], ...]
    placement: tuple[tuple[Slot, Process], ...]
    per_gpu: int
    """Processes one GPU hosts at most (slots per GPU)."""


def expand(workloads: Sequence[Workload]) -> tuple[Process, ...]:
    return tuple(Process(w, i) for w in workloads for i in range(w.replicas))


def pack(target: Target, candidate: Candidate, workloads: Sequence[Workload], reserve_percent: float) -> Packing:
    processes = expand(workloads)
    refused = _refused(target, candidate, workloads, reserve_percent)
    if refused:
        return Packing(None, refused, (), _per_gpu(target, candidate))
    if candidate.mode == "exclusive":
        return _exclusive(target, processes)
    if candidate.mode in ("time-slicing", "mps"):
        return _slots(target, candidate, processes)
    if candidate.mode == "vgpu":
        return _by_memory(target, candidate, processes, usable_mib(target, reserve_percent))
    return _mig(target, candidate, processes)


def _per_gpu(target: Target, candidate: Candidate) -> int:
    if candidate.mode in ("time-slicing", "mps", "vgpu"):
        return candidate.replicas
    if candidate.mode in ("mig", "mig+time-slicing"):
        return sum(n * candidate.replicas_of(name) for name, n in candidate.layout)
    return 1


def _refused(target: Target, candidate: Candidate, workloads: Sequence[Workload],
             reserve_percent: float) -> tuple[tuple[Workload, str], ...]:
    """Workloads this candidate cannot host at all, with why."""
    out = []
    for w in workloads:
        if w.gpus > 1 and candidate.mode != "exclusive":
            out.append((w, f"needs {w.gpus} whole GPUs per pod; a shared slot is one GPU or less"))
        elif w.memory_mib > target.memory_mib:
            out.append((w, f"needs {w.memory_mib} MiB, more than the GPU's {target.memory_mib} MiB"))
        elif candidate.mode == "mps" and w.memory_mib > target.memory_mib // candidate.replicas:
            out.append((w, f"needs {w.memory_mib} MiB, above the MPS client limit "
                           f"{target.memory_mib // candidate.replicas} MiB (total / {candidate.replicas})"))
        elif candidate.mode == "vgpu" and w.memory_mib > usable_mib(target, reserve_percent):
            out.append((w, f"needs {w.memory_mib} MiB, more than the {usable_mib(target, reserve_percent)} MiB "
                           "HAMi may hand out after the reserve"))
        elif candidate.mode in ("mig", "mig+time-slicing"):
            largest = max(_mig_slot_memory(target, candidate), default=0)
            if w.memory_mib > largest:
                out.append((w, f"needs {w.memory_mib} MiB, more than the largest slot of this layout "
                               f"({largest} MiB)"))
    return tuple(out)


def _exclusive(target: Target, processes: Sequence[Process]) -> Packing:
    placement, gpu = [], 0
    for p in processes:
        placement.append((Slot(gpu, "GPU", target.memory_mib, 1.0, 1), p))
        gpu += p.workload.gpus
    return Packing(gpu, (), tuple(placement), 1)


def _slots(target: Target, candidate: Candidate, processes: Sequence[Process]) -> Packing:
    """Equal slots: ceil(processes / replicas) GPUs; processes dealt out busiest first, so load is even."""
    gpus = max(1, math.ceil(len(processes) / candidate.replicas))
    share = target.memory_mib // candidate.replicas
    ordered = sorted(processes, key=lambda p: (-p.activity, p.workload.key, p.index))
    placement = tuple((Slot(i % gpus, "GPU", share, 1.0, candidate.replicas), p) for i, p in enumerate(ordered))
    return Packing(gpus, (), placement, candidate.replicas)


def _by_memory(target: Target, candidate: Candidate, processes: Sequence[Process], usable: int) -> Packing:
    """First fit decreasing by memory, at most ``replicas`` tasks per GPU (HAMi's deviceSplitCount)."""
    free: list[int] = []
    count: list[int] = []
    placement = []
    for p in sorted(processes, key=lambda p: (-p.memory_mib, p.workload.key, p.index)):
        gpu = next((g for g in range(len(free)) if free[g] >= p.memory_mib and count[g] < candidate.replicas), None)
        if gpu is None:
            free.append(usable)
            count.append(0)
            gpu = len(free) - 1
        free[gpu] -= p.memory_mib
        count[gpu] += 1
        placement.append((Slot(gpu, "GPU", p.memory_mib, 1.0, candidate.replicas), p))
    return Packing(max(1, len(free)), (), tuple(placement), candidate.replicas)


def _mig_devices(target: Target, candidate: Candidate) -> list[Slot]:
    """The slots of one GPU (gpu index 0), smallest memory first, with the placement the driver accepts."""
    assert target.mig is not None
    placed = mig.place(target.mig, dict(candidate.layout))
    slots = []
    for instance in placed.placements:
        profile = target.mig.profile(instance.profile)
        assert profile is not None
        replicas = candidate.replicas_of(profile.name)
        compute = profile.compute_slices / target.mig.compute_slices
        device = f"{profile.name}@{instance.start}"
        slots += [Slot(0, device, profile.memory_mib // replicas, compute, replicas)] * replicas
    return sorted(slots, key=lambda s: (s.memory_mib, s.device))


def _mig_slot_memory(target: Target, candidate: Candidate) -> list[int]:
    return [s.memory_mib for s in _mig_devices(target, candidate)]


def _mig(target: Target, candidate: Candidate, processes: Sequence[Process]) -> Packing:
    one = _mig_devices(target, candidate)
    ordered = sorted(processes, key=lambda p: (-p.memory_mib, p.workload.key, p.index))
    gpus = max(1, math.ceil(len(processes) / len(one)))
    while True:
        placement = _smallest_fit(one, gpus, ordered)
        if placement is not None:
            return Packing(gpus, (), placement, len(one))
        gpus += 1


def _smallest_fit(one: Sequence[Slot], gpus: int, ordered: Sequence[Process]
                  ) -> tuple[tuple[Slot, Process], ...] | None:
    """Largest process first into the smallest free slot that holds it: optimal here, since a slot that holds a
    process holds every smaller one."""
    free = sorted((Slot(g, s.device, s.memory_mib, s.compute, s.replicas) for g in range(gpus) for s in one),
                  key=lambda s: (s.memory_mib, s.gpu, s.device))
    taken = [False] * len(free)
    placement = []
    for p in ordered:
        index = next((i for i, s in enumerate(free) if not taken[i] and s.memory_mib >= p.memory_mib), None)
        if index is None:
            return None
        taken[index] = True
        placement.append((free[index], p))
    return tuple(placement)
