"""A batch of tasks run under each candidate, on the real layouts: makespan and utilization, deterministic.

Seed 001 ends with such a simulator (24 tasks, seed 42, a 32 GB card, time-slicing against MIG against vGPU).
This one keeps its task generator and its question but models what the article leaves out (docs/plan.md,
"The simulator"):

- a task is ``work`` seconds of a whole GPU at its SM activity (seed 001's tasks keep the card busy: 1.0);
- the devices are the candidate's: whole GPUs with slots (time-slicing, MPS, vGPU) or MIG instances with
  their share of the SMs; tasks start in order wherever a slot is free (the scheduler backfills);
- co-running tasks share a device's compute in proportion to their activity (processor sharing), and pay the
  mode's overhead: time-slicing's only while two or more run, MIG's and vGPU's always; an MPS client is capped
  at 1/replicas of the threads;
- memory is checked where something enforces it (MPS's client limit, HAMi's accounting, the MIG profile a task
  asks for); where nothing does (time-slicing), a task that starts into a full GPU fails with an OOM and waits
  for the next completion before it is retried;
- a MIG task asks for the smallest profile of the layout that holds it and waits for an instance of it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from policy.plan.candidates import Candidate, Target, usable_mib
from policy.plan.figures import Figures
from policy.plan.inventory import Workload

__all__ = ["SimResult", "Task", "seed001_tasks", "simulate", "tasks_from_inventory"]

_EPSILON = 1e-9


@dataclass(frozen=True)
class Task:
    name: str
    memory_mib: int
    work_s: float
    """Run time alone on a whole GPU."""
    activity: float = 1.0


@dataclass(frozen=True)
class SimResult:
    label: str
    mode: str
    gpus: int
    makespan_s: float | None
    """When the last task finished (None when some task can never run)."""
    utilization: float
    """Useful SM work done over the GPUs' time until the makespan."""
    completed: int
    unplaceable: tuple[str, ...]
    ooms: int


def seed001_tasks(n: int = 24, seed: int = 42) -> tuple[Task, ...]:
    """Seed 001's generator: memory uniform in 2-10 GB and run time in 1-8 s, each rounded to 0.1, drawn in that
    order from Python's Mersenne Twister seeded with ``seed`` (the article's demo is Python too, so the same
    seed gives the same tasks).  GB are read as GiB."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        memory = round(rng.uniform(2, 10), 1)
        work = round(rng.uniform(1, 8), 1)
        tasks.append(Task(f"job-{i}", round(memory * 1024), work))
    return tuple(tasks)


def tasks_from_inventory(workloads: Sequence[Workload]) -> tuple[Task, ...]:
    """One task per replica of every batch workload (those with a run time)."""
    return tuple(Task(f"{w.label}-{i}", w.memory_mib, w.runtime_s, max(w.sm_activity, 0.01))
                 for w in workloads if w.runtime_s is not None for i in range(w.replicas))


@dataclass
class _Device:
    gpu: int
    memory_mib: int
    compute: float
    slots: int
    enforced: bool
    always: float
    """Overhead paid whenever a task runs."""
    when_shared: float
    """Overhead paid while two or more tasks run."""
    client_cap: float | None = None
    profile: str | None = None
    running: list[list[object]] = field(default_factory=list)
    """[task, remaining work] pairs."""

    def used(self) -> int:
        return sum(t.memory_mib for t, _ in self.running)  # type: ignore[attr-defined]


def _devices(target: Target, candidate: Candidate, gpus: int, figures: Figures) -> list[_Device]:
    mode = candidate.mode
    ts = figures.overhead("time-slicing")
    out: list[_Device] = []
    for g in range(gpus):
        if mode == "exclusive":
            out.append(_Device(g, target.memory_mib, 1.0, 1, True, 0.0, 0.0))
        elif mode == "time-slicing":
            out.append(_Device(g, target.memory_mib, 1.0, candidate.replicas, False, 0.0, ts))
        elif mode == "mps":
            out.append(_Device(g, target.memory_mib // candidate.replicas, 1.0, candidate.replicas, True,
                               figures.overhead("mps"), 0.0, client_cap=1 / candidate.replicas))
        elif mode == "vgpu":
            out.append(_Device(g, usable_mib(target, figures.reserve_percent), 1.0, candidate.replicas, True,
                               figures.overhead("vgpu"), 0.0))
        else:
            out += _mig_devices(target, candidate, g, figures)
    return out


def _mig_devices(target: Target, candidate: Candidate, gpu: int, figures: Figures) -> list[_Device]:
    assert target.mig is not None
    out = []
    for name, count in candidate.layout:
        profile = target.mig.profile(name)
        assert profile is not None
        replicas = candidate.replicas_of(name)
        for _ in range(count):
            out.append(_Device(gpu, profile.memory_mib, profile.compute_slices / target.mig.compute_slices, replicas,
                               replicas == 1, figures.overhead("mig"),
                               figures.overhead("time-slicing") if replicas > 1 else 0.0, profile=name))
    return out


def _binding(devices: Sequence[_Device], task: Task) -> str | None:
    """The MIG profile a task asks for: the smallest whose slot holds it (None outside MIG)."""
    slots = sorted({(d.memory_mib // d.slots, d.profile) for d in devices if d.profile is not None})
    return next((p for size, p in slots if size >= task.memory_mib), None) if slots else None


def _placeable(devices: Sequence[_Device], task: Task) -> bool:
    if any(d.profile is not None for d in devices):
        return _binding(devices, task) is not None
    return any(task.memory_mib <= d.memory_mib for d in devices)


def simulate(target: Target, candidate: Candidate, tasks: Sequence[Task], figures: Figures,
             gpus: int = 1) -> SimResult:
    devices = _devices(target, candidate, gpus, figures)
    placeable = [t for t in tasks if _placeable(devices, t)]
    unplaceable = tuple(t.name for t in tasks if t not in placeable)
    binding = {t.name: _binding(devices, t) for t in placeable}
    queue, blocked = list(placeable), set()
    clock, ooms, done_work = 0.0, 0, 0.0
    completed = 0
    while queue or any(d.running for d in devices):
        ooms += _start(devices, queue, blocked, binding)
        if not any(d.running for d in devices):
            if blocked:
                blocked.clear()
                continue
            break  # pragma: no cover - every placeable task fits an empty device
        step, finished = _advance(devices)
        clock += step
        for task in finished:
            done_work += task.work_s * task.activity
            completed += 1
        if finished:
            blocked.clear()
    makespan = None if unplaceable or queue else round(clock, 2)
    utilization = done_work / (clock * gpus) if clock > 0 else 0.0
    return SimResult(candidate.label, candidate.mode, gpus, makespan, round(utilization, 3), completed,
                     unplaceable, ooms)


def _start(devices: list[_Device], queue: list[Task], blocked: set[str], binding: dict[str, str | None]) -> int:
    """Start every queued task that finds a slot, in order; returns the OOMs this caused."""
    ooms = 0
    for task in list(queue):
        if task.name in blocked:
            continue
        wanted = binding[task.name]
        free = [d for d in devices if len(d.running) < d.slots and d.profile == wanted
                and (not d.enforced or d.used() + task.memory_mib <= d.memory_mib)]
        if not free:
            continue
        device = min(free, key=lambda d: (len(d.running), d.gpu, devices.index(d)))
        queue.remove(task)
        if not device.enforced and device.used() + task.memory_mib > device.memory_mib:
            ooms += 1  # the process fails allocating; its pod restarts and queues again
            queue.append(task)
            blocked.add(task.name)
            continue
        device.running.append([task, task.work_s])
    return ooms


def _rates(device: _Device) -> list[float]:
    tasks = [t for t, _ in device.running]
    factor = 1 / (1 + device.always)
    if len(tasks) > 1:
        factor /= 1 + device.when_shared
    if device.client_cap is not None:
        return [factor * min(1.0, device.client_cap / t.activity) for t in tasks]  # type: ignore[attr-defined]
    load = sum(t.activity for t in tasks)  # type: ignore[attr-defined]
    return [factor * min(1.0, device.compute / load)] * len(tasks)


def _advance(devices: list[_Device]) -> tuple[float, list[Task]]:
    rates = {id(d): _rates(d) for d in devices if d.running}
    step = min(remaining / rate for d in devices if d.running
               for (_, remaining), rate in zip(d.running, rates[id(d)], strict=True))
    finished: list[Task] = []
    for d in devices:
        if not d.running:
            continue
        keep = []
        for (task, remaining), rate in zip(d.running, rates[id(d)], strict=True):
            left = remaining - rate * step  # type: ignore[operator]
            if left <= _EPSILON:
                finished.append(task)  # type: ignore[arg-type]
            else:
                keep.append([task, left])
        d.running = keep
    return step, finished
