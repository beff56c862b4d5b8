"""The plan: per target its workloads, ranked candidates, the recommendation with why the others lost, the
spec fragment that configures it, and a simulation of its batch jobs; plus the full draft spec."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policy.plan import simulate as sim
from policy.plan.candidates import Candidate, Target, candidates, safe_replicas
from policy.plan.figures import DIMENSIONS, MODES, Figures
from policy.plan.inventory import Inventory, Workload
from policy.plan.scoring import Evaluation, evaluate

__all__ = ["HAMI_DEFAULTS", "ClassPlan", "Plan", "class_fragment", "draft_changes", "make_plan",
           "sharing_fragment"]

#: The cluster-wide HAMi settings a spec with a vgpu class needs (names fixed with the vgpu mode's spec).
HAMI_DEFAULTS = {"namespace": "kube-system", "schedulerName": "hami-scheduler"}
_FALLBACK_SELECTOR = "gpupolicy.dev/node-class"


@dataclass(frozen=True)
class ClassPlan:
    target: Target
    workloads: tuple[Workload, ...]
    evaluations: tuple[Evaluation, ...]
    """Best first."""
    simulations: tuple[sim.SimResult, ...] = ()

    @property
    def best(self) -> Evaluation | None:
        first = self.evaluations[0] if self.evaluations else None
        return first if first is not None and first.recommendable else None

    def why_not(self) -> tuple[tuple[str, str], ...]:
        """For the best candidate of every other mode: why it ranks below the recommendation."""
        best = self.best
        if best is None:
            return ()
        out = []
        for mode in MODES:
            if mode == best.candidate.mode:
                continue
            rival = next((e for e in self.evaluations if e.candidate.mode == mode), None)
            if rival is not None:
                out.append((mode, f"{rival.candidate.label}: {_lost(rival, best)}"))
        out += [(mode, f"not evaluated: {why}") for mode, why in self.target.excluded]
        return tuple(out)


@dataclass(frozen=True)
class Plan:
    classes: tuple[ClassPlan, ...]
    figures: Figures
    notes: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Every target with workloads has a recommendation."""
        return all(c.best is not None for c in self.classes if c.workloads)


def make_plan(targets: Sequence[Target], inventory: Inventory, figures: Figures, *,
              tasks: Sequence[sim.Task] | None = None) -> Plan:
    """Rank every candidate of every target for the workloads it hosts; simulate ``tasks`` (default: the batch
    workloads' replicas) under each target's best candidate per mode, on all the class's GPUs (one card for a
    named model), so every candidate runs the batch on the same hardware."""
    plans = []
    for target in targets:
        hosted = tuple(w for w in inventory.workloads if target.hosts(w))
        ranked = evaluate(target, hosted, figures, candidates(target, hosted, figures.reserve_percent))
        batch = tuple(tasks) if tasks is not None else sim.tasks_from_inventory(hosted)
        simulations = tuple(sim.simulate(target, e.candidate, batch, figures, target.total_gpus or 1)
                            for e in _per_mode(ranked, every_mig=True)) if batch else ()
        plans.append(ClassPlan(target, hosted, ranked, simulations))
    unplaced = [w.label for w in inventory.workloads if not any(t.hosts(w) for t in targets)]
    notes = list(inventory.notes)
    if unplaced:
        notes.append(f"no class or GPU model matches {', '.join(unplaced)} (its gpu field)")
    return Plan(tuple(plans), figures, tuple(notes))


MAX_SIMULATED_LAYOUTS = 4


def _per_mode(ranked: Sequence[Evaluation], every_mig: bool = False) -> list[Evaluation]:
    """The best hostable candidate of each mode, and with ``every_mig`` the best few MIG layouts."""
    seen: set[str] = set()
    out = []
    for e in ranked:
        if every_mig and e.candidate.mode == "mig":
            # The best few layouts, even one that cannot take every task: the simulation shows which.
            if sum(1 for o in out if o.candidate.mode == "mig") < MAX_SIMULATED_LAYOUTS:
                out.append(e)
            continue
        if not e.hostable:
            continue
        if e.candidate.mode not in seen:
            seen.add(e.candidate.mode)
            out.append(e)
    return out


def _lost(rival: Evaluation, best: Evaluation) -> str:
    if not rival.hostable:
        return "; ".join(f"cannot host {w.label} ({why})" for w, why in rival.packing.unhostable)
    if rival.fits is False:
        return f"needs {rival.packing.gpus} GPU(s), the class has {rival.target.total_gpus}"
    if rival.oom.level == "high":
        return f"OOM risk: {rival.oom.detail}"
    if rival.violations and not best.violations:
        return (f"production workload(s) {', '.join(rival.violations)} would share memory and faults with "
                "their neighbours (production-tenant-without-memory-isolation)")
    gaps = sorted(((best.contributions[d] - rival.contributions[d], d) for d in DIMENSIONS), reverse=True)
    detail = ", ".join(f"{d} {rival.dimensions[d]:.2f} vs {best.dimensions[d]:.2f}"
                       for gap, d in gaps if gap > 0.005)
    if rival.score == best.score:
        return f"same score {rival.score:.1f}; the recommendation offers more slots per GPU"
    return f"score {rival.score:.1f} vs {best.score:.1f}" + (f" ({detail})" if detail else "")


# ---------------------------------------------------------------------------------------------------------------
# Spec fragments
# ---------------------------------------------------------------------------------------------------------------


def sharing_fragment(evaluation: Evaluation, figures: Figures) -> Any:
    """The class's ``sharing`` value for a candidate: what `gpupolicy compile` turns into the configuration."""
    c = evaluation.candidate
    if c.mode == "exclusive":
        return "exclusive"
    if c.mode in ("time-slicing", "mps", "vgpu"):
        key = {"time-slicing": "timeSlicing", "mps": "mps", "vgpu": "vgpu"}[c.mode]
        body: dict[str, Any] = _replicated(evaluation, figures)
        if c.mode == "vgpu":
            body = {("splitCount" if k == "replicas" else k): v for k, v in body.items()}
            body.update({"memoryScaling": 1.0, "coreScaling": 1.0})
        return {key: body}
    body = {"strategy": "mixed", "layout": dict(c.layout)}
    if c.shared:
        body["timeSlicing"] = dict(c.shared)
    return {"mig": body}


def _replicated(evaluation: Evaluation, figures: Figures) -> dict[str, Any]:
    c = evaluation.candidate
    target = evaluation.target
    if c.sized_mib is not None and safe_replicas(target, c.sized_mib, figures.reserve_percent) == c.replicas:
        return {"sizing": {"memoryPerReplica": f"{c.sized_mib}Mi", "reserve": f"{figures.reserve_percent:g}%"}}
    return {"replicas": c.replicas}


def class_fragment(plan: ClassPlan, figures: Figures, spec_class: Mapping[str, Any] | None = None
                   ) -> dict[str, Any] | None:
    """A whole node class with the recommended sharing: the spec's class when there is one, else a new class
    selected by a label to put on the nodes."""
    best = plan.best
    if best is None:
        return None
    if spec_class is not None:
        out = copy.deepcopy(dict(spec_class))
    else:
        target = plan.target
        out = {"name": target.name, "nodeSelector": {_FALLBACK_SELECTOR: target.name},
               "nodes": max(1, -(-(best.packing.gpus or 1) // target.gpus_per_node)),
               "gpu": {"model": target.product, "count": target.gpus_per_node}}
    out["sharing"] = sharing_fragment(best, figures)
    return out


def uses_vgpu(plan: Plan) -> bool:
    return any(c.best is not None and c.best.candidate.mode == "vgpu" for c in plan.classes)


def draft_changes(plan: Plan) -> tuple[dict[int, Any], dict[str, Any]]:
    """What a draft changes in the spec: per planned class (by index) its new sharing, and the sections to add
    where the spec has none (HAMi's, when a class gets vGPU)."""
    sharing = {c.target.class_index: sharing_fragment(c.best, plan.figures) for c in plan.classes
               if c.target.class_index is not None and c.best is not None and c.workloads}
    return sharing, ({"hami": dict(HAMI_DEFAULTS)} if uses_vgpu(plan) else {})


def current_candidate(plan: ClassPlan) -> Candidate | None:
    return plan.target.current
