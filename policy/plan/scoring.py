"""Contention, isolation, OOM risk and seed 001's weighted score of one candidate, with the reasons.

Slowdown of a process (its run time against a whole GPU to itself), per mode:
- time-slicing: (1 + switch overhead, when two or more share) x max(1, summed SM activity of the sharers);
- MPS: max(1, activity x replicas), as the plugin caps each client at 100/replicas % of the threads;
- MIG: (1 + MIG overhead) x max(1, activity / the instance's share of the SMs), and with time-slicing inside
  an instance, its sharers' summed activity instead, plus the switch overhead;
- vGPU: (1 + vGPU overhead) x max(1, summed SM activity of the sharers);
- exclusive: 1.
Latency-sensitive processes are planned for the worst case (the scheduler sees slots, not SM activity, so any
processes may share a device: the busiest ones do); batch processes for the packed, evenly dealt placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from policy.plan.candidates import Candidate, Target, usable_mib
from policy.plan.figures import COMPATIBILITY, DIMENSIONS, ISOLATION, MODES, Figures, Isolation
from policy.plan.inventory import Workload
from policy.plan.packing import Packing, Process, Slot, pack

__all__ = ["Evaluation", "OomRisk", "evaluate", "rank"]


@dataclass(frozen=True)
class OomRisk:
    """Whether co-located processes can run a GPU out of memory where nothing enforces a limit."""

    level: str
    """``none`` (memory enforced), ``low`` (unenforced, worst case fits), ``high`` (worst case does not fit)."""
    worst_mib: int = 0
    limit_mib: int = 0
    detail: str = ""


@dataclass(frozen=True)
class Evaluation:
    target: Target
    candidate: Candidate
    packing: Packing
    isolation: float
    performance: float
    compatibility: float
    cost: float
    mean_slowdown: float
    worst_slowdown: float
    slowdowns: tuple[tuple[str, float], ...]
    """Per workload label, the slowdown of its processes."""
    oom: OomRisk
    violations: tuple[str, ...]
    """Production workloads that would share memory and faults with neighbours."""
    score: float
    contributions: dict[str, float] = field(default_factory=dict)
    """Per dimension, weight x dimension score x 100: they add up to the score."""
    reasons: tuple[str, ...] = ()

    @property
    def hostable(self) -> bool:
        return self.packing.gpus is not None

    @property
    def fits(self) -> bool | None:
        """Within the class's GPUs (None when the class's node count is unknown)."""
        total = self.target.total_gpus
        if total is None or self.packing.gpus is None:
            return None if self.packing.gpus is not None else False
        return self.packing.gpus <= total

    @property
    def gpu_time(self) -> float | None:
        """GPUs needed x mean slowdown: the GPUs' worth the inventory occupies, as a slowed process holds its slot
        longer (a batch job) or needs proportionally more replicas to serve the same load (a service)."""
        return None if self.packing.gpus is None else self.packing.gpus * self.mean_slowdown

    @property
    def recommendable(self) -> bool:
        return self.hostable and self.fits is not False and self.oom.level != "high"

    @property
    def current(self) -> bool:
        return self.target.current == self.candidate

    @property
    def dimensions(self) -> dict[str, float]:
        return {"isolation": self.isolation, "overhead": self.performance, "compatibility": self.compatibility,
                "cost": self.cost}

    def rank_key(self) -> tuple[object, ...]:
        return (not self.hostable, self.fits is False, self.oom.level == "high", bool(self.violations),
                -round(self.score, 6), -self.packing.per_gpu, MODES.index(self.candidate.mode),
                len(self.candidate.layout), self.candidate.label)


def evaluate(target: Target, workloads: Sequence[Workload], figures: Figures,
             candidates: Sequence[Candidate]) -> tuple[Evaluation, ...]:
    """Every candidate evaluated and ranked (best first); cost is relative to the cheapest candidate, the one
    occupying the fewest GPUs' worth (GPUs needed x mean slowdown) among those that could be recommended."""
    packed = [(c, pack(target, c, workloads, figures.reserve_percent)) for c in candidates]
    first = [_evaluate(target, c, p, workloads, figures, None) for c, p in packed]
    cheapest = _cheapest(first)
    return rank([_evaluate(target, c, p, workloads, figures, cheapest) for c, p in packed])


def _cheapest(evaluations: Sequence[Evaluation]) -> float | None:
    """The fewest GPUs' worth among the candidates that could be recommended (without a production workload
    sharing memory, if any is), so a candidate ruled out anyway does not make the others look expensive."""
    pools = ([e for e in evaluations if e.recommendable and not e.violations],
             [e for e in evaluations if e.recommendable], [e for e in evaluations if e.hostable])
    pool = next((p for p in pools if p), [])
    return min((e.gpu_time for e in pool if e.gpu_time is not None), default=None)


def rank(evaluations: Sequence[Evaluation]) -> tuple[Evaluation, ...]:
    return tuple(sorted(evaluations, key=Evaluation.rank_key))


def _evaluate(target: Target, candidate: Candidate, packing: Packing, workloads: Sequence[Workload],
              figures: Figures, cheapest: float | None) -> Evaluation:
    placement = packing.placement
    slowdowns = _slowdowns(candidate, placement, figures) if placement else {}
    per_process = [slowdowns[p.workload.label] for _, p in placement]
    mean = sum(per_process) / len(per_process) if per_process else 1.0
    isolation = _isolation(candidate, placement)
    cost = min(1.0, cheapest / (packing.gpus * mean)) if packing.gpus and cheapest else 0.0
    dims = {"isolation": isolation, "overhead": 1 / mean, "compatibility": COMPATIBILITY[candidate.mode],
            "cost": cost}
    weights = figures.weights.normalised().as_dict()
    # A candidate that cannot host the inventory scores nothing in any dimension: its score is 0, and so is
    # every part of it the pictures stack.
    contributions = {d: round(100 * weights[d] * dims[d], 2) if packing.gpus is not None else 0.0
                     for d in DIMENSIONS}
    oom = _oom(target, candidate, workloads, figures)
    violations = _violations(candidate, placement)
    evaluation = Evaluation(
        target, candidate, packing, isolation, 1 / mean, dims["compatibility"], cost, mean,
        max(per_process, default=1.0), tuple(sorted(slowdowns.items())), oom, violations,
        round(sum(contributions.values()), 2) if packing.gpus is not None else 0.0, contributions)
    return _with_reasons(evaluation, workloads, figures)


# ---------------------------------------------------------------------------------------------------------------
# Contention
# ---------------------------------------------------------------------------------------------------------------


def _slowdowns(candidate: Candidate, placement: Sequence[tuple[Slot, Process]], figures: Figures
               ) -> dict[str, float]:
    """Slowdown per workload (all its processes alike): its worst process's, for the latency-sensitive."""
    devices: dict[tuple[int, str], list[Process]] = {}
    for slot, p in placement:
        devices.setdefault((slot.gpu, slot.device), []).append(p)
    out: dict[str, float] = {}
    for slot, p in placement:
        value = _slowdown(candidate, slot, p, devices, placement, figures)
        label = p.workload.label
        out[label] = max(out.get(label, 0.0), value)
    return {k: round(v, 4) for k, v in out.items()}


def _slowdown(candidate: Candidate, slot: Slot, p: Process, devices: dict[tuple[int, str], list[Process]],
              placement: Sequence[tuple[Slot, Process]], figures: Figures) -> float:
    mode = candidate.mode
    if mode == "exclusive":
        return 1.0
    if mode == "mps":
        return (1 + figures.overhead("mps")) * max(1.0, p.activity * candidate.replicas)
    sharers = devices[(slot.gpu, slot.device)]
    if p.workload.latency_sensitive:
        load, company = _worst_load(p, slot, placement)
    else:
        load, company = sum(q.activity for q in sharers), len(sharers) - 1
    shared = slot.replicas > 1 and company > 0
    factor = 1.0
    if mode in ("mig", "mig+time-slicing"):
        factor *= 1 + figures.overhead("mig")
    if mode == "vgpu":
        factor *= 1 + figures.overhead("vgpu")
    elif shared:
        factor *= 1 + figures.overhead("time-slicing")
    return factor * max(1.0, load / slot.compute)


def _worst_load(p: Process, slot: Slot, placement: Sequence[tuple[Slot, Process]]) -> tuple[float, int]:
    """The process plus the busiest others that could share its device (any process in such a slot), and how
    many of them there are."""
    others = sorted((q.activity for s, q in placement if q is not p and s.memory_mib == slot.memory_mib
                     and s.compute == slot.compute), reverse=True)[: slot.replicas - 1]
    return p.activity + sum(others), len(others)


# ---------------------------------------------------------------------------------------------------------------
# Isolation, memory, production
# ---------------------------------------------------------------------------------------------------------------


def _isolation_of(candidate: Candidate, slot: Slot) -> Isolation:
    if candidate.mode == "mig+time-slicing":
        return ISOLATION["mig+time-slicing" if slot.replicas > 1 else "mig"]
    return ISOLATION[candidate.mode]


def _isolation(candidate: Candidate, placement: Sequence[tuple[Slot, Process]]) -> float:
    """Mean over processes of the isolation each needs and gets: a production process needs memory, fault and
    compute isolation (seed 001: the tenant who needs hard isolation for an SLA); any other process needs none
    beyond what contention costs it, which the overhead dimension measures (at the worst case for the
    latency-sensitive), so it counts as fully served (seed 001: the answer depends on who the tenant is)."""
    if not placement:
        return 1.0
    return sum(_isolation_of(candidate, s).score if p.workload.production else 1.0
               for s, p in placement) / len(placement)


def _violations(candidate: Candidate, placement: Sequence[tuple[Slot, Process]]) -> tuple[str, ...]:
    """Production workloads placed where memory is not isolated in hardware (the advice
    production-tenant-without-memory-isolation, docs/sharing-modes.md)."""
    found = {p.workload.label for s, p in placement
             if p.workload.production and _isolation_of(candidate, s).memory < 1 and s.replicas > 1}
    return tuple(sorted(found))


def _oom(target: Target, candidate: Candidate, workloads: Sequence[Workload], figures: Figures) -> OomRisk:
    if candidate.mode != "time-slicing" and candidate.mode != "mig+time-slicing":
        return OomRisk("none", detail="memory is enforced per process" if candidate.mode != "exclusive"
                       else "one process per GPU")
    if candidate.mode == "mig+time-slicing":
        return OomRisk("low", detail="replicas of one MIG instance share its memory unchecked; sized so the "
                                     "largest process fits each replica")
    largest = max((w.memory_mib for w in workloads), default=0)
    worst = largest * candidate.replicas
    usable = usable_mib(target, figures.reserve_percent)
    arithmetic = (f"{candidate.replicas} x {largest} MiB = {worst} MiB "
                  f"{'<=' if worst <= usable else '>'} {usable} MiB usable "
                  f"({target.memory_mib} MiB - {figures.reserve_percent:g} % reserve)")
    return OomRisk("low" if worst <= usable else "high", worst, usable, arithmetic)


# ---------------------------------------------------------------------------------------------------------------
# Reasons
# ---------------------------------------------------------------------------------------------------------------


def _with_reasons(e: Evaluation, workloads: Sequence[Workload], figures: Figures) -> Evaluation:
    reasons: list[str] = []
    if not e.hostable:
        reasons += [f"cannot host {w.label}: {why}" for w, why in e.packing.unhostable]
    else:
        processes = len(e.packing.placement)
        reasons.append(f"hosts {processes} process(es) on {e.packing.gpus} GPU(s), "
                       f"{e.packing.per_gpu} slot(s) per GPU")
        total = e.target.total_gpus
        if total is not None:
            reasons.append(f"{'fits' if e.fits else 'does not fit'} the class's {total} GPU(s)")
    if e.oom.level != "none":
        reasons.append(f"memory not enforced, OOM risk {e.oom.level}: {e.oom.detail}")
    if e.hostable and e.slowdowns:
        busiest = max(e.slowdowns, key=lambda kv: kv[1])
        reasons.append(f"slowdown {e.mean_slowdown:.3f} on average, {busiest[1]:.3f} for {busiest[0]}"
                       + _overhead_note(e.candidate, figures))
    if e.violations:
        reasons.append(f"production workload(s) {', '.join(e.violations)} would share memory and faults "
                       "(production-tenant-without-memory-isolation)")
    return Evaluation(**{**e.__dict__, "reasons": tuple(reasons)})


def _overhead_note(candidate: Candidate, figures: Figures) -> str:
    mode = candidate.mode
    notes = {
        "time-slicing": f" (context switches {figures.overhead('time-slicing'):.1%} while sharing)",
        "mig": f" (MIG {figures.overhead('mig'):.1%}, compute capped at the instance's slices)",
        "mig+time-slicing": f" (MIG {figures.overhead('mig'):.1%}, plus {figures.overhead('time-slicing'):.1%} "
                            "context switches inside shared instances)",
        "vgpu": f" (vGPU layer {figures.overhead('vgpu'):.1%})",
        "mps": f" (each client capped at 1/{candidate.replicas} of the threads)",
    }
    return notes.get(mode, "")
