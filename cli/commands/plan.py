"""gpupolicy plan: choose each node class's sharing mode and sizing from measured workloads."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cli.reporters import Report
    from policy.plan.candidates import Target
    from policy.plan.figures import Figures
    from policy.plan.inventory import Derived, Entry
    from policy.resolved.resolve import ResolvedPolicy

_ERROR = "gpupolicy plan: error: "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inventory", nargs="*", metavar="INVENTORY",
                        help="workload inventories: YAML (.yaml, .yml, - for stdin) or CSV (.csv) files")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-p", "--policy", metavar="SPEC",
                       help="plan every node class of this spec (a `cluster discover` draft works)")
    where.add_argument("--gpu", action="append", default=[], metavar="MODEL",
                       help="plan for a GPU model of the catalog (repeatable), or for seed 001's hypothetical "
                            "card by its memory (32Gi)")
    parser.add_argument("--manifests", action="append", default=[], metavar="PATH",
                        help="application manifests (files or directories) to derive workloads from")
    parser.add_argument("--namespace-labels", action="append", default=[], metavar="NS=k=v,k2=v2",
                        help="labels of namespace NS, to find its tenant in the spec (repeatable)")
    parser.add_argument("-n", "--namespace", default="default", help="namespace of objects that name none")
    parser.add_argument("--prometheus-memory", metavar="FILE",
                        help="/api/v1/query result of the peak-memory PromQL in docs/plan.md (DCGM_FI_DEV_FB_USED)")
    parser.add_argument("--prometheus-sm", metavar="FILE",
                        help="/api/v1/query result of the SM-activity PromQL in docs/plan.md (DCGM_FI_PROF_SM_ACTIVE)")
    parser.add_argument("--weights", metavar="DIM=W,...", default="",
                        help="weights of isolation, overhead, compatibility, cost (default: 0.25 each)")
    parser.add_argument("--overheads", metavar="MODE=F,...", default="",
                        help="overhead per mode as a fraction or percent, e.g. time-slicing=15%%")
    parser.add_argument("--reserve", default="10%", help="memory kept free per GPU when sizing (default: 10%%)")
    parser.add_argument("--modes", metavar="MODE,...",
                        help="only these modes (exclusive, time-slicing, mps, mig, mig+time-slicing, vgpu); "
                             "vgpu is evaluated with a spec only when asked here or the spec has a hami section")
    parser.add_argument("--random-tasks", type=int, metavar="N",
                        help="add N batch tasks from seed 001's generator (memory 2-10 GB, run time 1-8 s)")
    parser.add_argument("--seed", type=int, default=42, help="seed of --random-tasks (default: 42)")
    parser.add_argument("--output", "-O", choices=("text", "json", "markdown"), default="text",
                        help="a table (text), a Markdown report, or the plan document (json)")
    parser.add_argument("--pictures", metavar="DIR", help="write SVG pictures of each class's plan into DIR")
    parser.add_argument("--draft", action="store_true",
                        help="print the spec with each class's sharing replaced by the recommendation (needs -p)")
    parser.add_argument("--all", action="store_true", help="list every candidate (default: the best 8 per class)")


def run(args: argparse.Namespace) -> int:
    from cli.main import ExitCode

    if not args.policy and not args.gpu:
        return _usage("name the GPUs to plan for: -p SPEC, or --gpu MODEL")
    if args.draft and not args.policy:
        return _usage("--draft replaces the sharing of a spec's classes: give -p SPEC")
    if not args.inventory and not args.manifests and not args.random_tasks:
        return _usage("give an inventory file, --manifests with Prometheus exports, or --random-tasks")
    figures = _figures(args)
    if isinstance(figures, str):
        return _usage(figures)
    targets = _targets(args, figures)
    if isinstance(targets, int):
        return targets
    resolved, targets, spec_text = targets
    inventory = _inventory(args, resolved)
    if isinstance(inventory, int):
        return inventory
    return _plan(args, spec_text, targets, inventory, figures) or ExitCode.OK


def _usage(message: str) -> int:
    print(_ERROR + message, file=sys.stderr)
    return 2


def _figures(args: argparse.Namespace) -> Figures | str:
    from policy.hardware import sizing
    from policy.plan import figures

    try:
        return figures.Figures(figures.parse_weights(args.weights), figures.parse_overheads(args.overheads),
                               sizing.parse_percent(args.reserve))
    except ValueError as err:
        return str(err)


def _modes(args: argparse.Namespace) -> tuple[Any, ...] | str:
    from policy.plan.figures import MODES

    if not args.modes:
        return MODES
    asked = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    unknown = [m for m in asked if m not in MODES]
    return f"--modes: unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}" if unknown else asked


def _targets(args: argparse.Namespace, figures: Figures
             ) -> tuple[ResolvedPolicy | None, tuple[Target, ...], str | None] | int:
    """The targets to plan for, with the spec they come from and its text (None for --gpu), or an exit code."""
    from cli.inputs import read_text
    from cli.reporters import Report, load_or_report, render_text
    from policy.hardware import sizing
    from policy.plan import candidates
    from policy.spec.diagnostics import Diagnostic

    modes = _modes(args)
    if isinstance(modes, str):
        return _usage(modes)
    if args.policy:
        # Read once (it may be stdin): a draft edits this text.
        text = read_text(args.policy)
        if isinstance(text, Diagnostic):
            sys.stderr.write(render_text(Report([text], files=1)))
            return 2
        resolved = load_or_report(args.policy, text=text)
        if isinstance(resolved, int):
            return 2  # the spec is an input here: a broken one is bad input
        # HAMi runs where the spec says how (spec.hami) or already has a vgpu class.
        hami = "hami" in resolved.spec.model_fields_set or bool(resolved.vgpu_classes) or "vgpu" in (args.modes or "")
        return resolved, candidates.targets_for_policy(resolved, modes=modes, vgpu=hami), text
    found = []
    for name in args.gpu:
        target = candidates.target_for_model(name, modes=modes)
        if target is None:
            try:
                target = candidates.seed001_card(sizing.parse_memory_mib(name), modes=modes)
            except ValueError:
                from policy.hardware import catalog

                close = catalog.suggest(name)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                return _usage(f"--gpu {name!r} is neither a GPU model of the catalog nor a memory size{hint}")
        found.append(target)
    return None, tuple(found), None


def _inventory(args: argparse.Namespace, resolved: ResolvedPolicy | None) -> Any:
    from cli.reporters import Report, render_text
    from policy.plan import inventory

    report = Report()
    entries = _entries(args.inventory, report)
    derived, notes = _derived(args, resolved, report)
    if report.diagnostics:
        sys.stderr.write(render_text(report))
        return 2
    result, problems = inventory.merge(derived, entries, tenant_of=_tenant_of(args, resolved))
    if args.random_tasks:
        result = _with_random_tasks(result, args.random_tasks, args.seed)
    if problems:
        sys.stderr.write(render_text(Report(list(problems), files=report.files)))
        return 2
    return inventory.Inventory(result.workloads, (*result.notes, *notes))


def _entries(paths: list[str], report: Report) -> list[Entry]:
    from cli.inputs import read_text
    from policy.plan import inventory
    from policy.spec.diagnostics import Diagnostic

    entries: list[Entry] = []
    for path in paths:
        report.files += 1
        text = read_text(path)
        if isinstance(text, Diagnostic):
            report.extend([text])
            continue
        parse = inventory.parse_csv if path.lower().endswith(".csv") else inventory.parse_yaml
        found, problems = parse(text, filename=path)
        entries += found
        report.extend(problems)
    return entries


def _derived(args: argparse.Namespace, resolved: ResolvedPolicy | None, report: Report
             ) -> tuple[tuple[Derived, ...], tuple[str, ...]]:
    from cli.manifests import objects, read_manifests
    from policy.plan import inventory

    documents = list(read_manifests(args.manifests, report)) if args.manifests else []
    classes_for = _classes_for(resolved)
    found = [(obj, doc.source.span(prefix)) for doc in documents for obj, prefix in objects(doc.data)]
    derived = inventory.from_manifests(found, default_namespace=args.namespace, classes_for=classes_for)
    memory = _export(args.prometheus_memory, "memory", report)
    activity = _export(args.prometheus_sm, "sm-activity", report)
    if not (memory[0] or activity[0]):
        return derived, ()
    merged, notes = inventory.with_measurements(derived, inventory.Measurements(memory[0], activity[0]))
    return merged, (*memory[1], *activity[1], *notes)


def _export(path: str | None, metric: Any, report: Report) -> tuple[dict[tuple[str, str], float], tuple[str, ...]]:
    from cli.inputs import read_text
    from policy.plan import inventory
    from policy.spec.diagnostics import Diagnostic

    if path is None:
        return {}, ()
    report.files += 1
    text = read_text(path)
    if isinstance(text, Diagnostic):
        report.extend([text])
        return {}, ()
    values, problems, notes = inventory.parse_prometheus(text, filename=path, metric=metric)
    report.extend(problems)
    return values, notes


def _classes_for(resolved: ResolvedPolicy | None) -> Any:
    """The node classes a pod's placement allows (nodeSelector, required node affinity), with a spec."""
    if resolved is None:
        return None
    from policy.admission import workloads
    from policy.admission.rules import ClassView, placement_conflict
    from policy.resolved.offers import build_admission_policy

    views = [ClassView.from_doc(c) for c in build_admission_policy(resolved).classes]

    def classes_for(workload: workloads.Workload) -> tuple[str, ...]:
        placement = workloads.read_placement(workload)
        if placement.unconstrained:
            return ()
        return tuple(v.name for v in views if placement_conflict(placement, v) is None)

    return classes_for


def _tenant_of(args: argparse.Namespace, resolved: ResolvedPolicy | None) -> Any:
    """(tenant, production) for a namespace, from the spec's tenants and the namespaces' labels."""
    if resolved is None or not resolved.spec.tenants:
        return None
    from cli.manifests import parse_namespace_flags
    from policy.admission.engine import Engine
    from policy.resolved.offers import build_admission_policy

    labels = parse_namespace_flags(args.namespace_labels)
    labels = labels if isinstance(labels, dict) else {}
    engine = Engine(build_admission_policy(resolved))
    tenants = {t.name: t for t in resolved.spec.tenants}

    def tenant_of(namespace: str) -> tuple[str, bool] | None:
        names = engine.tenants_for(labels.get(namespace, {}), namespace=namespace)
        if not names:
            return None
        return names[0], any(tenants[n].production for n in names)

    return tenant_of


def _with_random_tasks(result: Any, n: int, seed: int) -> Any:
    from policy.plan import inventory, simulate

    tasks = simulate.seed001_tasks(n, seed)
    extra = tuple(inventory.Workload(t.name, "batch", 1, t.memory_mib, t.activity, runtime_s=t.work_s,
                                     source=f"seed 001 generator (seed {seed})") for t in tasks)
    return inventory.Inventory((*result.workloads, *extra), result.notes)


def _plan(args: argparse.Namespace, spec_text: str | None, targets: tuple[Target, ...], inventory: Any,
          figures: Figures) -> int:
    from cli import spec_edit
    from compiler import planning, serialize
    from policy.plan import recommend

    plan = recommend.make_plan(targets, inventory, figures)
    top = None if args.all else planning.DEFAULT_TOP
    if args.pictures and _write_pictures(args.pictures, planning.plan_pictures(plan)):
        return 2
    if args.draft:
        assert spec_text is not None
        sharing, sections = recommend.draft_changes(plan)
        text = spec_edit.edit_spec(spec_text, sharing, sections)
        sys.stdout.write(text)
        return _check_draft(text) or (0 if plan.complete else 1)
    if args.output == "json":
        sys.stdout.write(serialize.dump_json(planning.plan_dict(plan)).decode("utf-8"))
    elif args.output == "markdown":
        sys.stdout.write(planning.render_markdown(plan, top=top, pictures_dir=args.pictures))
    else:
        sys.stdout.write(planning.render_text(plan, top=top))
    return 0 if plan.complete else 1


def _check_draft(text: str) -> int:
    """1 after printing why, when the drafted spec does not validate (e.g. a tenant allows a mode no class offers
    any more); 0 when it does."""
    from cli.reporters import Report, render_text
    from policy.load import load_policy

    errors = [d for d in load_policy(text, filename="<draft>").diagnostics if d.severity == "error"]
    if not errors:
        return 0
    sys.stderr.write(render_text(Report(diagnostics=errors, files=1)))
    print("gpupolicy plan: the draft needs the edits above before it validates", file=sys.stderr)
    return 1


def _write_pictures(directory: str, files: dict[str, bytes]) -> bool:
    """Write the pictures; True (after saying why) when the directory cannot be written."""
    from pathlib import Path

    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (out / name).write_bytes(data)
    except OSError as err:
        print(f"{_ERROR}cannot write pictures into {directory}: {err.strerror}", file=sys.stderr)
        return True
    print(f"gpupolicy plan: wrote {len(files)} picture(s) into {directory}", file=sys.stderr)
    return False
