"""gpupolicy admit: run the admission rules over application manifests, offline, as the webhook would."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cli.reporters import Report
    from policy.admission.engine import Engine
    from policy.resolved.tenancy import Tenancy
    from policy.spec.diagnostics import Diagnostic, Path
    from policy.spec.source import Document

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
    parser.add_argument("--nodes", metavar="FILE",
                        help="the cluster's nodes (kubectl get nodes -o yaml): a pod naming one in spec.nodeName is "
                             "judged on the classes that node's labels select")


@dataclass
class _Tally:
    objects: int = 0
    denied: int = 0
    warned: int = 0
    unchecked: int = 0
    relabelled: int = 0
    """Namespaces whose tenant labels someone other than a tenancy manager set (metadata.managedFields)."""
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)


def run(args: argparse.Namespace) -> int:
    from cli.manifests import namespace_objects, parse_namespace_flags, read_manifests
    from cli.reporters import REPORTER_BY_NAME, Report

    namespaces = parse_namespace_flags(args.namespace_labels)
    if isinstance(namespaces, str):
        print(f"gpupolicy admit: error: {namespaces}", file=sys.stderr)
        return 2
    nodes = _read_nodes(args.nodes) if args.nodes else {}
    if isinstance(nodes, str):
        print(f"gpupolicy admit: error: {nodes}", file=sys.stderr)
        return 2
    report = Report()
    loaded = _load_engine(args.policy, report, nodes)
    if loaded is None:  # a broken policy is bad input, not a denied workload: CI must tell them apart
        sys.stdout.write(REPORTER_BY_NAME[args.output](report))
        return 2
    engine, tenancy = loaded
    documents = list(read_manifests(args.manifests, report))
    tally = _Tally(namespaces=namespace_objects(documents))
    for ns, labels in namespaces.items():
        tally.namespaces.setdefault(ns, {}).update(labels)
    for doc in documents:
        report.extend(_admit_document(engine, doc, args.namespace, tally, tenancy))
    relabelled = (f"; {tally.relabelled} namespace(s) with tenant labels set by someone other than a manager"
                  if tally.relabelled else "")
    # Both counts, always: CI must tell "nothing was checked" from "everything was allowed".
    print(f"gpupolicy admit: {tally.objects} workload(s) checked: {tally.denied} denied, "
          f"{tally.warned} with warnings; {tally.unchecked} object(s) asking for GPUs not checked{relabelled}",
          file=sys.stderr)
    report.workloads = {"checked": tally.objects, "notChecked": tally.unchecked, "denied": tally.denied,
                        "warned": tally.warned}
    sys.stdout.write(REPORTER_BY_NAME[args.output](report))
    return report.exit_code


def _read_nodes(path: str) -> dict[str, dict[str, str]] | str:
    """Node name -> labels from a Node list (kubectl get nodes -o yaml or -o json) or Node documents, read as
    `cluster audit` reads its dumps (cli/recorded.py); an error message for a file that holds no Node (one that
    cannot be read has its reason printed first)."""
    from cli.recorded import read_objects

    objects = read_objects([path])
    if objects is None:
        return f"--nodes {path}: cannot be read (see above); give the output of `kubectl get nodes -o yaml`"
    nodes = {}
    for item in objects:
        metadata = item.get("metadata") if item.get("kind") == "Node" else None
        if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
            labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
            nodes[metadata["name"]] = {str(k): str(v) for k, v in labels.items()}
    if not nodes:
        return f"--nodes {path}: no Node object in it; give the output of `kubectl get nodes -o yaml`"
    return nodes


def _load_engine(path: str, report: Report,
                 nodes: dict[str, dict[str, str]] | None = None) -> tuple[Engine, Tenancy] | None:
    """The rule engine of the spec, and who may set its tenants' labels; None (findings reported) for a broken spec."""
    from cli.inputs import load_spec
    from policy.admission.engine import Engine
    from policy.resolved.offers import build_admission_policy
    from policy.resolved.tenancy import tenancy

    policy, found = load_spec(path)
    if policy is None:
        report.files += 1
        report.extend(found)
        return None
    return Engine(build_admission_policy(policy), nodes=nodes), tenancy(policy.spec)


def _admit_document(engine: Engine, doc: Document, default_ns: str, tally: _Tally,
                    tenancy: Tenancy) -> Iterator[Diagnostic]:
    from cli.manifests import objects
    from policy.admission import workloads
    from policy.admission.engine import NOT_CHECKED
    from policy.resolved.tenancy import namespace_label_findings

    for obj, prefix in objects(doc.data):
        if obj.get("kind") == "Namespace":
            # Who chose the namespace's tenant, where its managedFields say (kubectl get --show-managed-fields).
            found = [replace(d, path=(*prefix, *d.path), span=doc.source.span((*prefix, *d.path), key=True))
                     for d in namespace_label_findings(tenancy, obj)]
            tally.relabelled += bool(found)
            yield from found
        workload = workloads.find_workload(obj)
        ns = (workload.namespace if workload else None) or _namespace(obj) or default_ns
        if workload is not None:
            yield from _cloud_vgpu(workload, prefix, doc)
        decision = engine.evaluate(obj, tenants=engine.tenants_for(tally.namespaces.get(ns, {}), namespace=ns))
        # What the engine judged (a Pod or controller asking for GPUs, a workload custom resource one of whose
        # templates does, a DRA claim or claim template), as it worked that out: nothing is read twice here.
        checked = decision.checked
        if checked and workload is not None:
            yield from _unknown_annotations(obj, workload, prefix, doc)
        tally.unchecked += any(d.code == NOT_CHECKED for d in decision.diagnostics)
        tally.objects += checked
        tally.denied += not decision.allowed
        tally.warned += bool(decision.warnings)
        named = workload is not None or checked
        for d in decision.diagnostics:
            yield replace(d, message=f"{decision.subject} (namespace {ns}): {d.message}" if named else d.message,
                          path=(*prefix, *d.path), span=doc.source.span((*prefix, *d.path), key=True),
                          fix=d.fix.under(prefix) if d.fix is not None else None)


def _cloud_vgpu(workload: Any, prefix: Path, doc: Document) -> Iterator[Diagnostic]:
    """A workload asking for a cloud's own vGPU resources: said, not judged (policy.vgpu.cloud_vgpu)."""
    from policy.spec.diagnostics import Diagnostic
    from policy.vgpu import cloud_vgpu

    for product in cloud_vgpu.products_requested(workload.resource_names()):
        path = (*prefix, *workload.spec_path)
        yield Diagnostic(
            "cloud-vgpu-not-checked",
            f"{workload.subject} asks for {product.name} resources ({', '.join(product.resources)}); gpupolicy "
            f"does not check them: {product.managed_by} schedules and limits them",
            path, "size these pods with the cloud's own documentation (" + product.source + ")",
            severity="info", span=doc.source.span(path, key=True))


def _unknown_annotations(obj: dict[str, Any], workload: Any, prefix: Path, doc: Document) -> Iterator[Diagnostic]:
    """A GPU pod's annotations that name a GPU and that no scheduler or plugin gpupolicy knows reads: often a
    misspelt KAI or HAMi key (gpu_fraction, gpu-fractions), which leaves the pod with what its resources say."""
    from policy.admission import fractions
    from policy.spec.diagnostics import Diagnostic

    for key, at in fractions.unknown_gpu_annotations(obj, workload):
        path = (*prefix, *at)
        yield Diagnostic(
            "unknown-gpu-annotation",
            f"{workload.subject} carries the annotation {key!r}, which names a GPU but which neither KAI Scheduler "
            "(gpu-fraction, gpu-memory, gpu-fraction-num-devices, gpu-fraction-container-name), HAMi nor NVIDIA's "
            "device plugin reads, so it changes nothing gpupolicy checks",
            path, "correct its spelling, or remove it (docs/admission.md lists the keys that are read)",
            severity="warning", span=doc.source.span(path, key=True))


def _namespace(obj: dict[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    found = metadata.get("namespace") if isinstance(metadata, dict) else None
    return found if isinstance(found, str) and found else None
