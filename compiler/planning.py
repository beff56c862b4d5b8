"""A plan rendered for people and programs: the ranked table per class with its reasons (text, Markdown),
a versioned JSON document, and the pictures (MIG slices, slots before and after, scores, simulation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compiler import pictures, serialize
from policy.hardware import mig
from policy.plan.figures import DIMENSIONS
from policy.plan.recommend import ClassPlan, Plan, sharing_fragment
from policy.plan.scoring import Evaluation

PLAN_VERSION = 1
DEFAULT_TOP = 8


def _status(e: Evaluation) -> str:
    if not e.hostable:
        return "cannot host"
    if e.fits is False:
        return "too few GPUs"
    if e.oom.level == "high":
        return "OOM risk"
    if e.violations:
        return "production shares memory"
    return "ok"


def _rows(c: ClassPlan, top: int | None) -> Sequence[Evaluation]:
    return c.evaluations if top is None else c.evaluations[:top]


# ---------------------------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------------------------


def plan_dict(plan: Plan) -> dict[str, Any]:
    return {
        "version": PLAN_VERSION,
        "weights": plan.figures.weights.normalised().as_dict(),
        "overheads": dict(sorted(plan.figures.overheads.items())),
        "reservePercent": plan.figures.reserve_percent,
        "classes": [_class_dict(c, plan) for c in plan.classes],
        "notes": list(plan.notes),
    }


def _class_dict(c: ClassPlan, plan: Plan) -> dict[str, Any]:
    best = c.best
    return {
        "name": c.target.name,
        "product": c.target.product,
        "memoryMiB": c.target.memory_mib,
        "gpus": c.target.total_gpus,
        "workloads": [{"name": w.label, "replicas": w.replicas, "memoryMiB": w.memory_mib,
                       "smActivity": w.sm_activity, "production": w.production,
                       "latencySensitive": w.latency_sensitive, "runtimeSeconds": w.runtime_s, "source": w.source}
                      for w in c.workloads],
        "recommendation": None if best is None else {
            "candidate": best.candidate.label, "sharing": sharing_fragment(best, plan.figures)},
        "whyNot": [{"mode": mode, "reason": why} for mode, why in c.why_not()],
        "candidates": [_evaluation_dict(e) for e in c.evaluations],
        "simulation": [{"candidate": s.label, "mode": s.mode, "gpus": s.gpus, "makespanSeconds": s.makespan_s,
                        "utilization": s.utilization, "completed": s.completed,
                        "unplaceable": list(s.unplaceable), "ooms": s.ooms} for s in c.simulations],
    }


def _evaluation_dict(e: Evaluation) -> dict[str, Any]:
    return {
        "candidate": e.candidate.label, "mode": e.candidate.mode, "status": _status(e), "score": e.score,
        "current": e.current, "gpusNeeded": e.packing.gpus, "slotsPerGpu": e.packing.per_gpu,
        "dimensions": {d: round(v, 4) for d, v in e.dimensions.items()},
        "contributions": e.contributions, "meanSlowdown": e.mean_slowdown, "worstSlowdown": e.worst_slowdown,
        "oomRisk": {"level": e.oom.level, "detail": e.oom.detail}, "productionSharing": list(e.violations),
        "reasons": list(e.reasons),
    }


# ---------------------------------------------------------------------------------------------------------------
# Text and Markdown
# ---------------------------------------------------------------------------------------------------------------


def _table(c: ClassPlan, top: int | None) -> list[tuple[str, ...]]:
    rows = [("RANK", "CANDIDATE", "SCORE", *(d.upper() for d in DIMENSIONS), "GPUS", "SLOTS/GPU", "STATUS")]
    for i, e in enumerate(_rows(c, top), start=1):
        rows.append((str(i), e.candidate.label + (" (current)" if e.current else ""), f"{e.score:.1f}",
                     *(f"{e.dimensions[d]:.2f}" for d in DIMENSIONS),
                     "-" if e.packing.gpus is None else str(e.packing.gpus), str(e.packing.per_gpu), _status(e)))
    return rows


def _heading(c: ClassPlan) -> str:
    gpus = "" if c.target.total_gpus is None else f", {c.target.total_gpus} GPU(s)"
    return f"{c.target.name}: {c.target.product} ({c.target.memory_mib} MiB{gpus}), {len(c.workloads)} workload(s)"


def render_text(plan: Plan, *, top: int | None = DEFAULT_TOP) -> str:
    lines: list[str] = []
    for c in plan.classes:
        lines.append(_heading(c))
        if not c.workloads:
            lines += ["  no workload runs here", ""]
            continue
        rows = _table(c, top)
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        hidden = len(c.evaluations) - len(rows) + 1
        if hidden > 0:
            lines.append(f"  ... {hidden} more (--all)")
        lines += _recommendation(c, plan, markdown=False)
        lines.append("")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def _recommendation(c: ClassPlan, plan: Plan, *, markdown: bool) -> list[str]:
    """The recommendation, its reasons, the spec fragment that configures it, why each other mode lost and the
    simulation: indented lines for the terminal, a list with nested items and a YAML block for Markdown."""
    item, sub = ("- ", "  - ") if markdown else ("  ", "    - ")
    best = c.best
    if best is None:
        return [f"{item}no recommendation: no candidate hosts these workloads within the class"]
    out = [f"{item}recommended: {best.candidate.label} (score {best.score:.1f})"]
    out += [f"{sub}{r}" for r in best.reasons]
    out += _fragment(c, plan, markdown=markdown)
    out += [f"{item}why not {mode}: {why}" for mode, why in c.why_not()]
    for s in c.simulations:
        finish = f"makespan {s.makespan_s:.1f} s" if s.makespan_s is not None else (
            f"{len(s.unplaceable)} task(s) cannot run")
        out.append(f"{item}simulated {s.label}: {finish}, utilization {s.utilization:.1%}, "
                   f"{s.completed} done" + (f", {s.ooms} OOM(s)" if s.ooms else ""))
    return out


def _fragment(c: ClassPlan, plan: Plan, *, markdown: bool) -> list[str]:
    """The class's ``sharing`` as it goes into the spec (under ``spec.nodeClasses[]``), ready to copy."""
    assert c.best is not None
    where = f"class {c.target.name}" if c.target.class_index is not None else "a class of these GPUs"
    yaml = serialize.dump_yaml({"sharing": sharing_fragment(c.best, plan.figures)}).decode("utf-8").splitlines()
    if markdown:
        return ["", f"Spec fragment for {where}:", "", "```yaml", *yaml, "```", ""]
    return [f"  spec fragment for {where}:", *(f"    {line}" for line in yaml)]


def render_markdown(plan: Plan, *, top: int | None = DEFAULT_TOP, pictures_dir: str | None = None) -> str:
    weights = ", ".join(f"{d} {w:.2f}" for d, w in plan.figures.weights.normalised().as_dict().items())
    lines = ["# GPU sharing plan", "", f"Weights: {weights}. Reserve {plan.figures.reserve_percent:g} %.", ""]
    for c in plan.classes:
        lines += [f"## {_heading(c)}", ""]
        if not c.workloads:
            lines += ["No workload runs here.", ""]
            continue
        rows = _table(c, top)
        lines.append("| " + " | ".join(rows[0]) + " |")
        lines.append("|" + "---|" * len(rows[0]))
        lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        lines.append("")
        lines += _recommendation(c, plan, markdown=True)
        if pictures_dir is not None:
            lines.append("")
            lines += [f"![{name}]({pictures_dir}/{name})" for name in sorted(_class_pictures(c, plan))]
        lines.append("")
    lines += [f"- note: {n}" for n in plan.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Pictures
# ---------------------------------------------------------------------------------------------------------------


def plan_pictures(plan: Plan, *, top: int = DEFAULT_TOP) -> dict[str, bytes]:
    """File name -> SVG bytes, per class: the score breakdown, the recommendation's slots or MIG slices, and the
    simulation when there was one."""
    out: dict[str, bytes] = {}
    for c in plan.classes:
        out.update(_class_pictures(c, plan, top=top))
    return dict(sorted(out.items()))


def _class_pictures(c: ClassPlan, plan: Plan, *, top: int = DEFAULT_TOP) -> dict[str, bytes]:
    if not c.workloads:
        return {}
    name = c.target.name
    out = {f"{name}-scores.svg": pictures.scores(
        f"{name}: weighted score per candidate ({c.target.product})",
        [pictures.Bar(e.candidate.label, tuple((d, e.contributions[d]) for d in DIMENSIONS), _status(e))
         for e in c.evaluations[:top]],
        subtitle="seed 001's dimensions, each weight x score x 100; status after the total")}
    best = c.best
    if best is not None:
        out[f"{name}-recommended.svg"] = _recommended_picture(c, best)
    if c.simulations:
        out[f"{name}-simulation.svg"] = pictures.simulation(
            f"{name}: batch simulation per candidate",
            [(s.label, s.makespan_s, s.utilization, f"{len(s.unplaceable)} task(s) cannot run")
             for s in c.simulations],
            subtitle=f"{c.simulations[0].gpus} GPU(s); tasks start in order on any free slot")
    return out


def _recommended_picture(c: ClassPlan, best: Evaluation) -> bytes:
    target, cand = c.target, best.candidate
    if cand.mode in ("mig", "mig+time-slicing") and target.mig is not None:
        placed = mig.place(target.mig, dict(cand.layout))
        hosts = _hosts(best)
        instances = []
        for p in placed.placements:
            profile = target.mig.profile(p.profile)
            assert profile is not None
            instances.append(pictures.Instance(p.profile, p.start, p.size, profile.memory_mib,
                                               profile.compute_slices, cand.replicas_of(p.profile),
                                               hosts.get(f"{p.profile}@{p.start}", "")))
        return pictures.mig_gpu(f"{target.name}: recommended {cand.label}", target.mig.placement_units,
                                target.mig.compute_slices, [("GPU 0 of the plan", instances)],
                                subtitle=f"{best.packing.gpus} GPU(s) host the inventory; labels under the "
                                         "boxes: what GPU 0 hosts")
    memory = target.memory_mib
    replicas = best.packing.per_gpu
    per_slot = best.packing.placement[0][0].memory_mib if best.packing.placement else memory
    enforced = cand.mode in ("exclusive", "mps", "vgpu")
    gpus = best.packing.gpus or 1
    return pictures.slots(f"{target.name}: recommended {cand.label}", [
        pictures.SlotRow(f"before: {gpus} GPU(s) exclusive", gpus, 1, memory, scope="in all"),
        pictures.SlotRow(f"after: {cand.label}", gpus, replicas, per_slot, enforced, scope="in all")],
        subtitle=f"{len(best.packing.placement)} process(es) of the inventory; memory per slot as a pod can "
                 "count on it")


def _hosts(best: Evaluation) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    for slot, process in best.packing.placement:
        if slot.gpu == 0:
            found.setdefault(slot.device, []).append(process.workload.name)
    return {device: ", ".join(sorted(set(names))) for device, names in found.items()}
