"""gpupolicy admit: run the admission rules over application manifests, offline, as the webhook would."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cli.reporters import Report
    from policy.diagnostics import Diagnostic, Path
    from policy.engine import Engine
    from policy.source import Document

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-p", "--policy", required=True, metavar="SPEC", help="the cluster's ClusterGPUPolicy file")
    parser.add_argument("manifests", nargs="+", metavar="MANIFEST",
                        help="manifest files, or directories searched for *.yaml and *.yml (- for stdin)")
    parser.add_argument("--namespace-labels", action="append", default=[], metavar="NS=k=v,k2=v2",
                        help="labels of namespace NS (repeatable; Namespace objects in the manifests count too)")
    parser.add_argument("-n", "--namespace", default="default",
                        help="namespace of objects that name none (default: default)")
    parser.add_argument("--output", "-O", choices=("text", "json", "github"), default="text",
                        help="how to print findings (default: text)")


@dataclass
class _Tally:
    objects: int = 0
    denied: int = 0
    warned: int = 0
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)


def run(args: argparse.Namespace) -> int:
    from cli.manifests import namespace_objects, parse_namespace_flags, read_manifests
    from cli.reporters import REPORTER_BY_NAME, Report

    namespaces = parse_namespace_flags(args.namespace_labels)
    if isinstance(namespaces, str):
        print(f"gpupolicy admit: error: {namespaces}", file=sys.stderr)
        return 2
    report = Report()
    engine = _load_engine(args.policy, report)
    if engine is None:  # a broken policy is bad input, not a denied workload: CI must tell them apart
        sys.stdout.write(REPORTER_BY_NAME[args.output](report))
        return 2
    documents = list(read_manifests(args.manifests, report))
    tally = _Tally(namespaces=namespace_objects(documents))
    for ns, labels in namespaces.items():
        tally.namespaces.setdefault(ns, {}).update(labels)
    for doc in documents:
        report.extend(_admit_document(engine, doc, args.namespace, tally))
    print(f"gpupolicy admit: {tally.objects} workload(s) checked: {tally.denied} denied, "
          f"{tally.warned} with warnings", file=sys.stderr)
    sys.stdout.write(REPORTER_BY_NAME[args.output](report))
    return report.exit_code


def _load_engine(path: str, report: Report) -> Engine | None:
    from cli.inputs import load_spec
    from policy.engine import Engine
    from policy.offers import build_admission_policy

    policy, found = load_spec(path)
    if policy is None:
        report.files += 1
        report.extend(found)
        return None
    return Engine(build_admission_policy(policy))


def _admit_document(engine: Engine, doc: Document, default_ns: str, tally: _Tally) -> Iterator[Diagnostic]:
    from cli.manifests import objects
    from policy import workloads

    for obj, prefix in objects(doc.data):
        workload = workloads.find_workload(obj)
        if workload is None:
            if workloads.wraps_pod_templates(obj) and workloads.requests_gpus_anywhere(obj.get("spec")):
                yield _not_checked(obj, (*prefix, "kind"), doc.source.span((*prefix, "kind"), key=True))
            continue
        tally.objects += 1
        yield from _cloud_vgpu(workload, prefix, doc)
        ns = workload.namespace or default_ns
        decision = engine.evaluate(obj, tenants=engine.tenants_for(tally.namespaces.get(ns, {}), namespace=ns))
        tally.denied += not decision.allowed
        tally.warned += bool(decision.warnings)
        for d in decision.diagnostics:
            yield replace(d, message=f"{decision.subject} (namespace {ns}): {d.message}", path=(*prefix, *d.path),
                          span=doc.source.span((*prefix, *d.path), key=True))


def _cloud_vgpu(workload: Any, prefix: Path, doc: Document) -> Iterator[Diagnostic]:
    """A workload asking for a cloud's own vGPU resources: said, not judged (policy.cloud_vgpu)."""
    from policy import cloud_vgpu
    from policy.diagnostics import Diagnostic

    for product in cloud_vgpu.products_requested(workload.resource_names()):
        path = (*prefix, *workload.spec_path)
        yield Diagnostic(
            "cloud-vgpu-not-checked",
            f"{workload.subject} asks for {product.name} resources ({', '.join(product.resources)}); gpupolicy "
            f"does not check them: {product.managed_by} schedules and limits them",
            path, "size these pods with the cloud's own documentation (" + product.source + ")",
            severity="info", span=doc.source.span(path, key=True))


def _not_checked(obj: dict[str, Any], path: Path, span: Any) -> Diagnostic:
    from policy.diagnostics import Diagnostic

    name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
    return Diagnostic(
        "workload-not-checked",
        f"{obj['kind']} {name or '(unnamed)'} requests nvidia.com/ resources in pod templates its operator turns "
        "into Pods; gpupolicy checks those Pods when the operator creates them, not this object",
        path, "run the operator's Pods through the webhook (or render one Pod and admit it)",
        severity="info", span=span)
