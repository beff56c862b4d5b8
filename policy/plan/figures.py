"""The planner's figures: overheads, isolation levels, compatibility and default weights, each with its source.

docs/plan.md renders these tables; change a figure here and the docs test tells you to update the prose too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Literal

__all__ = [
    "COMPATIBILITY",
    "DIMENSIONS",
    "ISOLATION",
    "MODES",
    "OVERHEAD",
    "Figures",
    "Isolation",
    "PlanMode",
    "Weights",
    "parse_overheads",
    "parse_weights",
]

PlanMode = Literal["exclusive", "time-slicing", "mps", "mig", "mig+time-slicing", "vgpu"]
MODES: tuple[PlanMode, ...] = ("exclusive", "time-slicing", "mps", "mig", "mig+time-slicing", "vgpu")
DIMENSIONS = ("isolation", "overhead", "compatibility", "cost")

#: Slowdown a mode adds on top of compute contention, as a fraction of run time (1 + overhead).  Where a
#: source gives a range, the default is its midpoint.
#: - time-slicing 10-15 %: context switches between processes (seed 003's comparison table, its own estimate;
#:   NVIDIA's time-slicing documentation states no figure); paid only while two or more processes share the GPU.
#: - MIG 2-3 %: "close to a physical GPU" (seed 003's comparison table, its own estimate).
#: - vGPU 5-10 %: the software virtualisation layer intercepting driver calls (seed 001).
#: - MPS 0 %: the MPS server shares one set of scheduling resources between its clients, "eliminating the
#:   overhead of swapping" (NVIDIA, Multi-Process Service guide, "Reduced GPU context switching").
OVERHEAD: dict[str, float] = {
    "exclusive": 0.0,
    "time-slicing": 0.125,
    "mps": 0.0,
    "mig": 0.025,
    "vgpu": 0.075,
}


@dataclass(frozen=True)
class Isolation:
    """What a process is protected from, each 0 (nothing), 0.5 (enforced in software) or 1 (in hardware)."""

    memory: float
    fault: float
    compute: float

    @property
    def score(self) -> float:
        return (self.memory + self.fault + self.compute) / 3


#: Per mode, the isolation one process gets.  Sources: seed 003's comparison table (time-slicing: no memory,
#: fault or compute isolation; MIG: all three in hardware); NVIDIA's device plugin pins an MPS client's device
#: memory to total/replicas and its active threads to 100/replicas (device-plugin.md §3), while a fatal error
#: in one MPS client reaches every client (MPS guide); HAMi-core limits memory and SMs per container in
#: software, with no fault isolation (seed 001; HAMi docs).  A process on a time-sliced MIG instance shares
#: memory and faults with its instance's other replicas only: half, for a blast radius bounded by hardware.
ISOLATION: dict[str, Isolation] = {
    "exclusive": Isolation(1.0, 1.0, 1.0),
    "time-slicing": Isolation(0.0, 0.0, 0.0),
    "mps": Isolation(0.5, 0.0, 0.5),
    "mig": Isolation(1.0, 1.0, 1.0),
    "mig+time-slicing": Isolation(0.5, 0.5, 0.5),
    "vgpu": Isolation(0.5, 0.0, 0.5),
}

#: How little has to change around the workloads (seed 001's compatibility dimension), 0-1.  Exclusive and
#: time-slicing change nothing a pod sees (seed 001: time-slicing is "the least hassle"; seed 003: a ConfigMap
#: change on any GPU since Kepler).  MPS needs device plugin v0.15+ and puts the GPU in EXCLUSIVE_PROCESS mode
#: behind one MPS server.  vGPU is transparent to applications (seed 001) but needs HAMi's scheduler, webhook
#: and device plugin beside or instead of NVIDIA's.  MIG needs applications sized to the instances (seed 001),
#: requests of nvidia.com/mig-<profile> under the mixed strategy, and a drain to change the layout (seed 003).
COMPATIBILITY: dict[str, float] = {
    "exclusive": 1.0,
    "time-slicing": 1.0,
    "mps": 0.75,
    "vgpu": 0.75,
    "mig": 0.5,
    "mig+time-slicing": 0.5,
}


@dataclass(frozen=True)
class Weights:
    """Weights of seed 001's four dimensions.  Seed 001 turns the choice into a weighted average of isolation,
    performance overhead, compatibility and cost but gives no numbers, so each weighs the same by default.
    The dimensions are made so equal weights answer sensibly: isolation counts only for production processes
    and cost is GPU-time, so time-slicing wins where it is cheaper and good enough (scoring.py)."""

    isolation: float = 0.25
    overhead: float = 0.25
    compatibility: float = 0.25
    cost: float = 0.25

    def normalised(self) -> Weights:
        total = sum(getattr(self, f.name) for f in fields(self))
        return Weights(*(getattr(self, f.name) / total for f in fields(self)))

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Figures:
    """Everything a plan is computed with that a user may change."""

    weights: Weights = Weights()
    overheads: dict[str, float] = field(default_factory=lambda: dict(OVERHEAD))
    reserve_percent: float = 10.0
    """Memory kept free per GPU when sizing replicas (seed 003 kept 10 %)."""

    def overhead(self, mode: str) -> float:
        return self.overheads.get(mode, 0.0)

    def with_weights(self, weights: Weights) -> Figures:
        return replace(self, weights=weights)


_PAIR = re.compile(r"^\s*(?P<key>[a-z+-]+)\s*=\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<percent>%?)\s*$")


def _pairs(text: str, known: tuple[str, ...], what: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _PAIR.match(item)
        if match is None:
            raise ValueError(f"{item!r} is not NAME=NUMBER; write e.g. isolation=0.4")
        key = match["key"]
        if key not in known:
            raise ValueError(f"unknown {what} {key!r}; choose from {', '.join(known)}")
        value = float(match["value"]) / (100 if match["percent"] else 1)
        out[key] = value
    return out


def parse_weights(text: str, base: Weights = Weights()) -> Weights:
    """``isolation=0.4,cost=0.3``: the named weights replaced, the rest kept; the sum need not be 1."""
    given = _pairs(text, DIMENSIONS, "dimension")
    weights = replace(base, **given)
    if sum(weights.as_dict().values()) <= 0:
        raise ValueError("the weights add up to 0; give at least one a positive weight")
    return weights


def parse_overheads(text: str, base: dict[str, float] | None = None) -> dict[str, float]:
    """``time-slicing=15%,vgpu=0.1``: the named overheads replaced (fractions, or percents with %)."""
    out = dict(OVERHEAD if base is None else base)
    for key, value in _pairs(text, tuple(OVERHEAD), "mode").items():
        if value >= 1:
            raise ValueError(f"overhead of {key} must be below 100 %, got {value:g}")
        out[key] = value
    return out
