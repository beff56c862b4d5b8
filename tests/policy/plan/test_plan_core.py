"""The planner's core on the seeds' numbers: seed 003's sizing, a production tenant on MIG, seed 001's simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from policy.hardware import mig
from policy.load import load_policy
from policy.plan import candidates, figures, inventory, recommend, simulate
from policy.spec.model import SHARING_MODES

ROOT = Path(__file__).resolve().parents[3]
FIGURES = figures.Figures()


def _resolved(name: str):
    result = load_policy((ROOT / "examples/clusters" / name / "cluster.yaml").read_text(), filename=name)
    assert result.ok
    return result.resolved


def _inventory(text: str, filename: str = "inventory.yaml") -> inventory.Inventory:
    parse = inventory.parse_csv if filename.endswith(".csv") else inventory.parse_yaml
    entries, problems = parse(text, filename=filename)
    assert problems == ()
    result, problems = inventory.merge((), entries)
    assert problems == ()
    return result


def _plan(spec: str, inventory_path: str) -> recommend.Plan:
    path = ROOT / inventory_path
    targets = candidates.targets_for_policy(_resolved(spec))
    return recommend.make_plan(targets, _inventory(path.read_text(), path.name), FIGURES)


# --- seed 003: L20 46068 MiB, T4 15360 MiB, 4621 / 4401 MiB per process, 10 % reserve -------------------------


def test_seed_003_numbers_give_time_slicing_with_8_and_3_replicas() -> None:
    plan = _plan("tke-l20-t4", "examples/plan/tke-l20-t4/inventory.yaml")
    best = {c.target.name: c.best for c in plan.classes}
    assert best["l20"].candidate.mode == "time-slicing" and best["l20"].candidate.replicas == 8
    assert best["t4"].candidate.mode == "time-slicing" and best["t4"].candidate.replicas == 3
    assert recommend.sharing_fragment(best["l20"], FIGURES) == {
        "timeSlicing": {"sizing": {"memoryPerReplica": "4621Mi", "reserve": "10%"}}}
    # One more replica would let the worst case outgrow the usable memory: 9 x 4621 > 46068 - 4606.
    nine = next(e for e in plan.classes[0].evaluations if e.candidate.label == "time-slicing x9")
    assert nine.oom.level == "high" and not nine.recommendable
    why = dict(plan.classes[0].why_not())
    assert "v0.14.5 has no MPS" in why["mps"] and "needs 4 GPU(s), the class has 1" in why["exclusive"]


def test_seed_003_fragments_validate_in_the_spec() -> None:
    """The recommendation, put into the spec, loads without an error and compiles to the same 11 slots."""
    plan = _plan("tke-l20-t4", "examples/plan/tke-l20-t4/inventory.yaml")
    resolved = _resolved("tke-l20-t4")
    data = resolved.policy.model_dump(by_alias=True, exclude_unset=True, mode="json")
    sharing, sections = recommend.draft_changes(plan)
    assert sections == {}  # no vGPU here, so no HAMi section
    for index, value in sharing.items():
        data["spec"]["nodeClasses"][index]["sharing"] = value
    import yaml

    result = load_policy(yaml.safe_dump(data), filename="draft.yaml")
    assert result.ok, result.diagnostics
    assert [o.per_node for c in result.resolved.classes for o in c.offers] == [8, 3]


# --- a production tenant on MIG-capable GPUs ---------------------------------------------------------------------


def test_production_tenant_on_h20_gets_a_mig_layout_the_validator_accepts() -> None:
    plan = _plan("h20-mig", "examples/plan/h20-production/inventory.csv")
    (h20,) = plan.classes
    best = h20.best
    assert best is not None and best.candidate.mode == "mig"
    assert mig.place(h20.target.mig, dict(best.candidate.layout)).fits
    why = dict(h20.why_not())
    assert "production workload(s) chat/chat-7b would share memory and faults" in why["time-slicing"]
    assert "production-tenant-without-memory-isolation" in why["time-slicing"]
    # The fragment, as the class's sharing, passes every check (layout, profiles, strategy).
    fragment = recommend.class_fragment(h20, FIGURES, _resolved("h20-mig").policy.spec.node_classes[0]
                                        .model_dump(by_alias=True, exclude_unset=True, mode="json"))
    text = (ROOT / "examples/clusters/h20-mig/cluster.yaml").read_text()
    import yaml

    data = yaml.safe_load(text)
    data["spec"]["nodeClasses"][0] = fragment
    assert load_policy(yaml.safe_dump(data), filename="h20.yaml").ok


def test_isolation_weighs_only_where_a_production_workload_needs_it() -> None:
    """Seed 001: the answer depends on the tenant.  Research notebooks share (the cheapest good-enough mode); the
    same notebooks as production get MIG on the same GPUs; a team that does not count cost gets whole GPUs."""
    research = "name,namespace,replicas,memory,smActivity\nnotebooks,research,20,6Gi,0.05\n"
    production = "name,namespace,replicas,memory,smActivity,production\nnotebooks,research,20,6Gi,0.05,true\n"
    targets = candidates.targets_for_policy(_resolved("h20-mig"))
    shared = recommend.make_plan(targets, _inventory(research, "inv.csv"), FIGURES).classes[0].best
    isolated = recommend.make_plan(targets, _inventory(production, "inv.csv"), FIGURES).classes[0].best
    no_cost = recommend.make_plan(targets, _inventory(production, "inv.csv"),
                                  FIGURES.with_weights(figures.parse_weights("cost=0"))).classes[0].best
    assert shared.candidate.mode == "time-slicing" and shared.isolation == 1.0
    assert isolated.candidate.mode == "mig"
    assert no_cost.candidate.mode == "exclusive"


# --- the score trades cost against the overhead contention costs ---------------------------------------------------


def _named_plan(model: str, text: str) -> recommend.ClassPlan:
    target = candidates.target_for_model(model)
    assert target is not None
    return recommend.make_plan([target], _inventory(text), FIGURES).classes[0]


def _spec_plan(text: str) -> recommend.Plan:
    result = load_policy(text, filename="cluster.yaml")
    assert result.ok, result.diagnostics
    path = ROOT / "examples/plan/tke-l20-t4/inventory.yaml"
    return recommend.make_plan(candidates.targets_for_policy(result.resolved),
                               _inventory(path.read_text(), path.name), FIGURES)


def test_seed_003_numbers_pick_time_slicing_even_with_gpus_to_spare() -> None:
    """With 4 nodes per class exclusive fits too; time-slicing still wins, on score: 4 idle-ish whole GPUs for
    four 5 % processes cost more than the context switches of one shared GPU."""
    text = (ROOT / "examples/clusters/tke-l20-t4/cluster.yaml").read_text().replace("nodes: 1", "nodes: 4")
    plan = _spec_plan(text)
    for c, replicas in zip(plan.classes, (8, 3), strict=True):
        best = c.best
        assert best.candidate.mode == "time-slicing" and best.candidate.replicas == replicas
        exclusive = next(e for e in c.evaluations if e.candidate.mode == "exclusive")
        assert exclusive.recommendable and exclusive.score < best.score
        assert "cost" in dict(c.why_not())["exclusive"]


def test_many_small_processes_share_one_gpu_rather_than_take_sixteen() -> None:
    plan = _named_plan("L20", "workloads: [{name: small, replicas: 16, memory: 2Gi, smActivity: 0.02}]")
    by_mode = {e.candidate.mode: e for e in reversed(plan.evaluations) if e.recommendable}
    assert by_mode["exclusive"].packing.gpus == 16 and by_mode["time-slicing"].packing.gpus == 1
    assert by_mode["time-slicing"].score > by_mode["exclusive"].score
    assert plan.best.candidate.mode != "exclusive" and plan.best.packing.gpus == 1


@pytest.mark.parametrize("latency", [False, True])
def test_compute_bound_processes_get_whole_gpus(latency: bool) -> None:
    """Sharing saves nothing when the processes keep their GPUs busy: four at 90 % SM on one time-sliced GPU run
    four times slower, so they occupy as many GPUs' worth as exclusive and pay the context switches on top."""
    flag = ", latencySensitive: true" if latency else ""
    plan = _named_plan("L20", f"workloads: [{{name: train, replicas: 4, memory: 10Gi, smActivity: 0.9{flag}}}]")
    assert plan.best.candidate.mode == "exclusive"
    sliced = next(e for e in plan.evaluations if e.candidate.mode == "time-slicing")
    assert sliced.recommendable and sliced.gpu_time >= plan.best.gpu_time
    assert "overhead" in dict(plan.why_not())["time-slicing"]


def test_every_candidate_fragment_of_a_mode_the_model_knows_validates() -> None:
    """Each non-vgpu fragment the planner can emit for the mixed fleet loads through policy.load."""
    import yaml

    resolved = _resolved("mixed-fleet")
    base = resolved.policy.model_dump(by_alias=True, exclude_unset=True, mode="json")
    inv = _inventory("workloads: [{name: svc, replicas: 6, memory: 9Gi, smActivity: 0.2}]")
    plan = recommend.make_plan(candidates.targets_for_policy(resolved), inv, FIGURES)
    checked = 0
    for class_plan in plan.classes:
        for e in class_plan.evaluations:
            if not e.recommendable or e.candidate.mode == "vgpu":
                continue
            data = yaml.safe_load(yaml.safe_dump(base))
            data["spec"]["nodeClasses"][class_plan.target.class_index]["sharing"] = \
                recommend.sharing_fragment(e, FIGURES)
            result = load_policy(yaml.safe_dump(data), filename="fragment.yaml")
            # A tenant whose allowed mode no class offers any more is the tenants' business, not the fragment's.
            errors = [d for d in result.diagnostics if d.severity == "error" and not d.code.startswith("tenant-")]
            assert not errors, (e.candidate.label, errors)
            checked += 1
    assert checked > 20


def test_vgpu_fragments_validate_once_the_model_knows_vgpu() -> None:
    """Gated on the model, never skipped: until the vgpu mode lands the spec refuses exactly the vgpu keys; from
    then on the planner's vgpu fragments must validate."""
    import yaml

    resolved = _resolved("tke-l20-t4")
    targets = candidates.targets_for_policy(resolved, vgpu=True)
    text = (ROOT / "examples/plan/tke-l20-t4/inventory.yaml").read_text()
    plan = recommend.make_plan(targets, _inventory(text), FIGURES)
    data = resolved.policy.model_dump(by_alias=True, exclude_unset=True, mode="json")
    for class_plan in plan.classes:
        e = next(e for e in class_plan.evaluations if e.candidate.mode == "vgpu")
        data["spec"]["nodeClasses"][class_plan.target.class_index]["sharing"] = recommend.sharing_fragment(e, FIGURES)
    data["spec"]["hami"] = dict(recommend.HAMI_DEFAULTS)
    result = load_policy(yaml.safe_dump(data), filename="vgpu.yaml")
    if "vgpu" in SHARING_MODES:
        assert result.ok, result.diagnostics
    else:
        refused = {d.path[-1] for d in result.diagnostics if d.severity == "error"}
        assert refused == {"vgpu", "hami"}, result.diagnostics


# --- seed 001's simulator ---------------------------------------------------------------------------------------


def test_seed_001_generator_gives_the_articles_tasks() -> None:
    tasks = simulate.seed001_tasks(24, 42)
    # The article prints no list; these are what its own code draws (Python, random.seed(42)).
    assert [(t.memory_mib, t.work_s) for t in tasks[:3]] == [(round(7.1 * 1024), 1.2), (round(4.2 * 1024), 2.6),
                                                            (round(7.9 * 1024), 5.7)]
    assert round(sum(t.work_s for t in tasks), 1) == 87.3
    assert simulate.seed001_tasks(24, 42) == tasks and simulate.seed001_tasks(24, 7) != tasks


def _seed001_runs() -> dict[str, simulate.SimResult]:
    card = candidates.seed001_card()
    tasks = simulate.seed001_tasks()
    workloads = [inventory.Workload(t.name, "b", 1, t.memory_mib, 1.0, runtime_s=t.work_s) for t in tasks]
    return {c.label: simulate.simulate(card, c, tasks, FIGURES)
            for c in candidates.candidates(card, workloads, FIGURES.reserve_percent)}


def test_seed_001_qualitative_result_holds_on_its_own_batch() -> None:
    runs = _seed001_runs()
    vgpu = next(r for r in runs.values() if r.mode == "vgpu")
    sliced = [r for r in runs.values() if r.mode == "time-slicing" and r.makespan_s is not None]
    # vGPU's elastic split uses the card better than time-slicing, which pays its context switches.
    assert all(vgpu.utilization > r.utilization and vgpu.makespan_s < r.makespan_s for r in sliced)
    # Static MIG partitions bound by memory (small tasks on small instances, large on a larger one, as the
    # article assigns them) strand compute: the lowest utilization and the longest makespan of all.
    bucketed = runs["mig 1g.8gb x2 + 2g.16gb x1"]
    finished = [r for r in runs.values() if r.makespan_s is not None]
    assert bucketed.utilization == min(r.utilization for r in finished)
    assert bucketed.makespan_s == max(r.makespan_s for r in finished)


def test_seed_001_deviations_are_what_the_docs_say() -> None:
    runs = _seed001_runs()
    # The article's four equal 8 GB partitions cannot take its 8 tasks above 8 GB at all.
    four = runs["mig 1g.8gb x4"]
    assert four.makespan_s is None and len(four.unplaceable) == 8
    # No candidate finishes 87.3 s of whole-card work faster than the card alone (the article's MIG: 53.8 s).
    assert min(r.makespan_s for r in runs.values() if r.makespan_s) == pytest.approx(87.3)
    # A layout matched to the batch does better than the article's MIG: 2 x 2g.16gb.
    assert runs["mig 2g.16gb x2"].utilization > 0.9


def test_the_simulation_is_deterministic() -> None:
    assert _seed001_runs() == _seed001_runs()


def test_time_slicing_oversubscribed_memory_ooms_and_retries() -> None:
    card = candidates.seed001_card()
    tasks = [simulate.Task(f"t{i}", 12 * 1024, 2.0) for i in range(4)]
    result = simulate.simulate(card, candidates.Candidate("time-slicing", 3), tasks, FIGURES)
    assert result.ooms > 0 and result.completed == 4


@pytest.mark.parametrize(("version", "double_memory"), [("v0.13.0", False), ("v0.14.0", True)])
def test_mig_candidates_are_only_layouts_the_targeted_plugin_release_starts_with(version: str,
                                                                                double_memory: bool) -> None:
    """v0.12 and v0.13 exit at start on the double-memory 1g profile (policy/hardware/releases.py): not a candidate
    there."""
    target = candidates.target_for_model("H100", plugin=tuple(int(x) for x in version[1:].split(".")))
    assert target is not None
    workloads = _inventory("workloads: [{name: a, replicas: 4, memory: 9Gi, smActivity: 0.2}]").workloads
    layouts = [c.layout for c in candidates.candidates(target, workloads, 10) if c.mode == "mig"]
    assert layouts
    assert any("1g.20gb" in dict(layout) for layout in layouts) is double_memory
