"""The capacity report as data: slots before and after per class and in total, rendered as REPORT.md and JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler import dra_report, operator_fields, serialize
from compiler.targets import admission_policy, flux, gpu_operator, namespaces, tenancy_guard
from compiler.targets import hami as hami_target
from compiler.targets.monitoring import collectors
from compiler.targets.monitoring import rules as monitoring_rules
from policy import checks
from policy.checks import advice
from policy.hardware import dra as dra_facts
from policy.hardware import labels, releases
from policy.resolved.resolve import GPU, Offer, ResolvedClass, ResolvedPolicy
from policy.resolved.vgpu_scope import hami_scope
from policy.spec.diagnostics import format_path
from policy.spec.model import VAP_MINOR, HamiResourceNames
from policy.vgpu import hami

REPORT_VERSION = 2
EXCLUSIVE = GPU

# Overhead per sharing mode, as seed 003 estimated it from its production rollout (NVIDIA's MIG and time-slicing
# pages state no percentage): time-slicing pays context switches, MIG almost nothing, MPS shares one context.
OVERHEAD = {
    "exclusive": "0% (one pod owns the GPU)",
    "time-slicing": "~10-15% (context switching between processes)",
    "mps": "no context switching (one shared context), but no fault isolation: one client's fatal error "
           "affects every client of the GPU",
    "mig": "~2-3% (hardware partitions)",
    "mig+time-slicing": "~2-3% (MIG) plus ~10-15% context switching inside each shared instance",
    # Seed 001 puts software vGPU at 5-10% (the interception of CUDA calls); HAMi's own vLLM benchmark on an
    # A100 measured +1.3-3.4% latency for v2.9.0 (Project-HAMi/website docs/userguide/benchmark.md).
    "vgpu": "~5-10% (HAMi-core intercepts every CUDA call to enforce the limits; HAMi measured +1-3% latency "
            "with vLLM at v2.9.0)",
}
ISOLATION = {
    "exclusive": "whole GPU",
    "none": "none (memory and faults shared)",
    "mps-memory-limit": "MPS memory limit per client (no fault isolation)",
    "mig-hardware": "MIG hardware (memory, cache, faults)",
    "hami-core": "HAMi-core software limits on memory and SMs per container (no fault isolation)",
}


@dataclass(frozen=True)
class Slots:
    """Schedulable slots of one resource name on one class: per node and over all the class's nodes."""

    resource: str
    per_node: int
    total: int | None
    memory_mib: int
    """What one slot can count on: the device's memory, an MPS limit, or an even share of a shared device."""
    memory_enforced: bool
    """False where replicas share one device's memory with no limit (time-slicing)."""
    device_memory_mib: int
    """Memory of the device (GPU or MIG instance) behind the slots."""
    isolation: str
    replicas: int
    devices_per_node: int
    memory_estimated: bool = False
    """The device's memory is the catalog's estimate, not a measured figure."""
    mig_profile: str | None = None
    """The MIG profile behind the slots; its name may differ from the resource's (policy/hardware/releases.py)."""
    device_class: str | None = None
    """The DeviceClass whose claims alone reach the slots (a DRA class without the extended-resource bridge: no
    pod can ask for ``resource``)."""

    @property
    def shown(self) -> str:
        """What pods (or their claims) ask for, as Markdown."""
        return f"DeviceClass `{self.device_class}` (claims)" if self.device_class else f"`{self.resource}`"

    @property
    def renamed(self) -> bool:
        """The targeted plugin release advertises the profile under another resource name than its own."""
        return self.mig_profile is not None and self.resource not in (
            EXCLUSIVE, releases.mig_resource(self.mig_profile, "mixed"))


@dataclass(frozen=True)
class ClassReport:
    name: str
    description: str
    product: str
    mode: str
    nodes: int | None
    gpus_per_node: int
    before: Slots
    after: tuple[Slots, ...]
    overhead: str
    sizing: str | None
    node_selector: dict[str, str]
    node_labels: dict[str, str]
    """Labels the output needs on the class's nodes (may be empty); nobody sets them by hand."""
    labels_set_by: dict[str, str]
    """Per label of node_labels, who sets it: the tree's label reconciler, the GPU Operator or GFD."""
    details: tuple[str, ...] = ()
    """What a pod of the class asks for and gets, where the slot figures do not say it (vgpu classes)."""

    @property
    def physical_gpus(self) -> int | None:
        return None if self.nodes is None else self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Finding:
    """A warning of the spec's checks, or advice (warning or info) where the spec contradicts the
    sharing-mode decision matrix (policy.checks.advice)."""

    severity: str
    code: str
    path: str
    message: str
    hint: str


@dataclass(frozen=True)
class MonitoringReport:
    """What monitoring/ holds, and what the exporters outside the tree must be configured with."""

    namespace: str
    labels: dict[str, str]
    recording_rules: int
    alerts: tuple[str, ...]
    dashboard: bool
    webhook: bool
    reconciler: bool
    node_label_allowlist: tuple[str, ...]
    kube_prometheus_stack_values: dict[str, Any]
    dcgm_counters: tuple[str, ...]
    dcgm_exporter_values: dict[str, Any] | None
    """The dcgm-exporter chart's values to set, or None where the tree's ClusterPolicy configures it."""

    def to_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "labels": self.labels, "recordingRules": self.recording_rules,
                "alerts": list(self.alerts), "dashboard": self.dashboard, "webhookServiceMonitor": self.webhook,
                "reconcilerPodMonitor": self.reconciler,
                "kubeStateMetrics": {"nodeLabelAllowlist": list(self.node_label_allowlist)},
                "dcgmExporter": {"counters": list(self.dcgm_counters),
                                 "configuredByClusterPolicy": self.dcgm_exporter_values is None}}


@dataclass(frozen=True)
class CapacityReport:
    cluster: str
    deploy: str
    plugin_version: str
    classes: tuple[ClassReport, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    monitoring: MonitoringReport | None = None
    dra: dra_report.DraReport | None = None

    @property
    def counted(self) -> tuple[ClassReport, ...]:
        """Classes whose node count is known: only they enter the totals."""
        return tuple(c for c in self.classes if c.nodes is not None)

    @property
    def uncounted(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.classes if c.nodes is None)

    def totals(self) -> dict[str, Any]:
        after: dict[str, int] = {}
        claimed: dict[str, int] = {}
        for c in self.counted:
            for s in c.after:
                into, key = (claimed, s.device_class) if s.device_class else (after, s.resource)
                into[key] = into.get(key, 0) + (s.total or 0)
        return {
            "nodes": sum(c.nodes or 0 for c in self.counted),
            "physicalGpus": sum(c.physical_gpus or 0 for c in self.counted),
            "slotsBefore": sum(c.before.total or 0 for c in self.counted),
            "slotsAfter": sum(after.values()) + sum(claimed.values()),
            "slotsAfterByResource": dict(sorted(after.items())),
            # Only where some DRA class has no extended-resource bridge, so the other reports stay as they were.
            **({"claimSlotsByDeviceClass": dict(sorted(claimed.items()))} if claimed else {}),
            "classesWithoutNodeCount": list(self.uncounted),
        }

    def to_dict(self) -> dict[str, Any]:
        """report.json: a stable, versioned document (camelCase keys like the spec)."""
        return {
            "version": REPORT_VERSION,
            "cluster": self.cluster,
            "devicePlugin": {"deploy": self.deploy, "version": self.plugin_version},
            "classes": [_class_dict(c) for c in self.classes],
            "totals": self.totals(),
            "findings": [{"severity": f.severity, "code": f.code, "path": f.path, "message": f.message,
                          "hint": f.hint} for f in self.findings],
            "notes": list(self.notes),
            "monitoring": self.monitoring.to_dict() if self.monitoring else None,
            # Only trees with a DRA pool have the key, so the others' report.json stays as it was.
            **({"dra": self.dra.to_dict()} if self.dra else {}),
        }


def _slots_dict(s: Slots) -> dict[str, Any]:
    return {"resource": s.resource, "perNode": s.per_node, "total": s.total, "memoryMiB": s.memory_mib,
            "memoryEnforced": s.memory_enforced, "memoryEstimated": s.memory_estimated,
            "deviceMemoryMiB": s.device_memory_mib,
            "isolation": s.isolation, "replicas": s.replicas, "devicesPerNode": s.devices_per_node,
            "migProfile": s.mig_profile, **({"deviceClass": s.device_class} if s.device_class else {})}


def _class_dict(c: ClassReport) -> dict[str, Any]:
    return {
        "name": c.name,
        "description": c.description,
        "product": c.product,
        "mode": c.mode,
        "nodes": c.nodes,
        "gpusPerNode": c.gpus_per_node,
        "physicalGpus": c.physical_gpus,
        "before": _slots_dict(c.before),
        "after": [_slots_dict(s) for s in c.after],
        "overhead": c.overhead,
        "sizing": c.sizing,
        "nodeSelector": c.node_selector,
        "nodeLabels": c.node_labels,
        "labelsSetBy": c.labels_set_by,
        "details": list(c.details),
    }


# ----------------------------------------------------------------------- building


def build_report(resolved: ResolvedPolicy) -> CapacityReport:
    """The capacity report of a checked policy; pure, so REPORT.md changes only when the spec does."""
    policy = resolved.policy
    names = policy.spec.hami.resource_names
    classes = tuple(_class_report(rc, names) for rc in sorted(resolved.classes, key=lambda rc: rc.name))
    found = [d for d in checks.run(resolved) if d.severity == "warning"] + list(advice.advise(resolved))
    findings = tuple(Finding(d.severity, d.code, format_path(d.path), d.message, d.hint) for d in found)
    return CapacityReport(
        cluster=policy.metadata.name,
        deploy=policy.spec.device_plugin.deploy,
        plugin_version=policy.spec.device_plugin.version,
        classes=classes,
        findings=findings,
        notes=_notes(resolved),
        monitoring=_monitoring(resolved),
        dra=dra_report.build(resolved),
    )


def _monitoring(resolved: ResolvedPolicy) -> MonitoringReport | None:
    settings = resolved.spec.monitoring
    if not settings.enabled:
        return None
    ctx = monitoring_rules.Context(resolved)
    dcgm = settings.dcgm_exporter.enabled
    operator = resolved.spec.device_plugin.deploy == "gpu-operator"
    return MonitoringReport(
        namespace=settings.namespace or resolved.spec.admission.namespace,
        labels=dict(settings.labels),
        recording_rules=len(monitoring_rules.recording_rules(ctx)),
        alerts=tuple(a.name for a in monitoring_rules.alerts(ctx)),
        dashboard=settings.dashboard.enabled,
        webhook=ctx.admission,
        reconciler=monitoring_rules.reconciler_runs(resolved),
        node_label_allowlist=collectors.ksm_allowlist(resolved),
        kube_prometheus_stack_values=collectors.kube_prometheus_stack_values(resolved),
        dcgm_counters=tuple(c.field for c in collectors.DCGM_COUNTERS if c.used) if dcgm else (),
        dcgm_exporter_values=collectors.dcgm_exporter_chart_values(resolved) if dcgm and not operator else None,
    )


def _class_report(resolved: ResolvedClass, names: HamiResourceNames) -> ClassReport:
    node_class = resolved.spec
    nodes = node_class.nodes
    gpus = node_class.gpu.count
    memory = resolved.memory_mib or 0
    before = Slots(EXCLUSIVE, gpus, None if nodes is None else nodes * gpus, memory, True, memory,
                   ISOLATION["exclusive"], 1, gpus)
    after = tuple(_slots(o, nodes, memory) for o in resolved.offers)
    return ClassReport(
        name=node_class.name,
        description=node_class.description,
        product=resolved.product,
        mode=resolved.mode_name,
        nodes=nodes,
        gpus_per_node=gpus,
        before=before,
        after=after,
        overhead=_overhead(resolved),
        sizing=resolved.sizing.explain() if resolved.sizing else None,
        node_selector=dict(sorted(node_class.node_selector.items())),
        node_labels=resolved.required_labels,
        labels_set_by={key: label_setter(resolved, key) for key in resolved.required_labels},
        details=_vgpu_details(resolved, names) if resolved.vgpu is not None else (),
    )


def _vgpu_details(resolved: ResolvedClass, names: HamiResourceNames) -> tuple[str, ...]:
    """How a pod sizes its vGPU, what a pod that does not gets, and how cores are enforced (docs/vgpu.md)."""
    vgpu = resolved.vgpu
    assert vgpu is not None
    card = f"{vgpu.card_memory_mib} MiB" if vgpu.card_memory_mib else "the GPU's memory"
    policy = {"default": "throttled to gpucores only while other pods use the GPU",
              "force": "always throttled to gpucores",
              "disable": "never throttled (gpucores is only accounted)"}[vgpu.core_policy]
    return (
        f"vGPUs: up to {vgpu.split_count} per GPU. A container asks for N vGPUs ({names.count}: N), each on a "
        f"different GPU, and sizes each with {names.memory} (MiB, at most {card}) or {names.memory_percentage}, "
        f"and {names.cores} (percent of the GPU's SMs; {vgpu.cores} per GPU).",
        f"A container asking only for {names.count} gets the whole GPU's memory and, from HAMi's webhook, "
        f"{names.cores}: 100: a whole GPU, not a share.",
        f"SM limit ({vgpu.core_policy}): {policy}.",
    )


LABEL_SETTERS = {
    "reconciler": "gpupolicy's label reconciler (node-labels/)",
    "operator": "the GPU Operator (migManager.config.default: all-disabled)",
    "gfd": "GPU Feature Discovery, running with the class's config",
}


def label_setter(resolved: ResolvedClass, key: str) -> str:
    if key in resolved.reconciled_labels:
        return LABEL_SETTERS["reconciler"]
    return LABEL_SETTERS["gfd"] if key == labels.MPS_CAPABLE else LABEL_SETTERS["operator"]


def _slots(offer: Offer, nodes: int | None, gpu_memory_mib: int) -> Slots:
    total = None if nodes is None else nodes * offer.per_node
    claimed = offer.resource.removeprefix(dra_facts.IMPLICIT_PREFIX) if offer.claim_only else None
    if offer.isolation == "mig-hardware":
        return Slots(offer.resource, offer.per_node, total, offer.slot_memory_mib, offer.memory_enforced,
                     offer.memory_mib, _isolation(offer), offer.replicas, offer.devices_per_node,
                     offer.memory_estimated, offer.mig_profile, claimed)
    return Slots(offer.resource, offer.per_node, total, offer.slot_memory_mib, offer.memory_enforced, gpu_memory_mib,
                 _isolation(offer), offer.replicas, offer.devices_per_node, device_class=claimed)


def _isolation(offer: Offer) -> str:
    text = ISOLATION[offer.isolation]
    if offer.isolation == "mig-hardware" and offer.replicas > 1:
        return f"{text} between instances; none between the {offer.replicas} replicas of one instance"
    return text


def _overhead(resolved: ResolvedClass) -> str:
    return OVERHEAD[resolved.mode_name]


def _notes(resolved: ResolvedPolicy) -> tuple[str, ...]:
    plugin = resolved.spec.device_plugin
    notes: list[str] = [*admission_policy.report_notes(resolved), *tenancy_guard.report_notes(resolved),
                        *_hami_notes(resolved)]
    if plugin.deploy == "standalone" and resolved.plugin_classes:
        notes.append(
            "Each node class gets its own device-plugin DaemonSet, selected by the labels its nodes already "
            "carry. Remove or re-target any other NVIDIA device plugin on these nodes first (for example a "
            "cloud-managed nvidia-device-plugin-daemonset): two plugins on one node register nvidia.com/gpu twice."
        )
        notes.append(
            "A config change renames that class's ConfigMap and so rolls exactly that class's DaemonSet; "
            "no manual rollout restart is needed."
        )
        if any(rc.mig_manager for rc in resolved.classes):
            notes.append(
                "NVIDIA's MIG manager runs on every MIG-capable class's nodes (mig-manager/) with the mig-parted "
                "config in mig/; the class's device plugin, GFD and MPS daemon run there only once it has run "
                "(nvidia.com/mig.config.state success or failed), and step aside while it repartitions. It "
                "never drains workloads: docs/operations.md (MIG reconfiguration) says when to drain."
                + (" The DRA driver's kubelet plugin waits for it the same way on the DRA classes' nodes, so it "
                   "starts again after each re-partition and publishes the new MIG devices (it lists them only "
                   "when it starts)." if any(rc.mig_manager for rc in resolved.dra_classes) else "")
            )
        if plugin.labels_nodes:
            notes.append(
                "GPU Feature Discovery runs per class with the class's config (feature-discovery/) and publishes its "
                "labels through Node Feature Discovery, which must run in the cluster (its nfd-worker reads "
                "GFD's feature file)."
            )
    elif resolved.plugin_classes:
        notes.extend(_operator_notes(resolved))
    notes += _namespace_notes(resolved)
    if any(rc.reconciled_labels for rc in resolved.classes):
        notes.append(
            "gpupolicy's label reconciler (node-labels/) sets the labels under Node labels on every node of a "
            "class, including nodes that join later, and on no other key; it never overwrites a value that "
            "someone else set (an event and the gpupolicy_node_label_conflicts metric say so instead)."
        )
        notes.append(_reconciler_guard_note(resolved))
    if (audit := resolved.spec.audit).enabled:
        kind = "wgpolicyk8s.io PolicyReports" if audit.format == "policy-report" else "openreports.io Reports"
        notes.append(
            f"The in-cluster audit (audit/) runs `gpupolicy cluster audit --write-reports` on schedule "
            f"`{audit.schedule}` in namespace {resolved.spec.audit_namespace} and writes {kind} (their CRDs must "
            "be installed, e.g. by Policy Reporter or Kyverno): docs/audit.md#in-cluster-audit."
        )
    return tuple(notes)


def _reconciler_guard_note(resolved: ResolvedPolicy) -> str:
    if resolved.spec.vap_available:
        return ("Its RBAC (patch nodes) cannot name label keys, so a ValidatingAdmissionPolicy (node-labels/) holds "
                "its ServiceAccount to the keys it owns, set to values of its plan, and to nothing else of a Node.")
    return (f"Its RBAC (patch nodes) would let it patch any label of any node: RBAC cannot name label keys, and the "
            f"ValidatingAdmissionPolicy that narrows it to its own keys needs Kubernetes 1.{VAP_MINOR} "
            f"(spec.kubernetesVersion is {resolved.spec.kubernetes_version}).")


def _namespace_notes(resolved: ResolvedPolicy) -> list[str]:
    wanted = namespaces.needed(resolved)
    if not wanted:
        return []
    levels = ", ".join(f"{name} ({level})" for name, level in wanted.items())
    if resolved.spec.create_namespaces:
        return [f"namespaces/ creates {levels} before anything else (sync wave -2), each labelled with the Pod "
                "Security level its pods need (privileged where node agents mount host paths); Argo CD and Flux "
                "never prune or delete them, since that would delete everything in them."]
    return [f"spec.createNamespaces is false: these namespaces must exist before the tree is applied, labelled "
            f"pod-security.kubernetes.io/enforce with the level in brackets: {levels}."]


def _operator_notes(resolved: ResolvedPolicy) -> list[str]:
    plugin = resolved.spec.device_plugin
    operator = plugin.operator
    release = resolved.operator_release
    notes = [f"Written for GPU Operator {release.version}, whose chart deploys device plugin {release.device_plugin}."
             if release else "The GPU Operator release is unknown (see the warnings)."]
    fields = ", ".join(operator_fields.owned_paths(operator_fields.render(resolved)))
    if operator.installer == "helm":
        version = f" {release.version}" if release else ""
        notes.append(
            f"{gpu_operator.VALUES_FILE} holds the GPU Operator chart{version} values of {fields}, pointing its "
            "ClusterPolicy at the tree's content-named ConfigMaps. The operator's Helm release takes them last: "
            f"a Flux HelmRelease from ConfigMap {flux.OPERATOR_VALUES} in the tree's flux/ (valuesFrom, optional; "
            "it upgrades as soon as the ConfigMap changes), a multi-source Argo CD Application with this file as "
            "its last helm.valueFiles entry, from a ref: values source "
            "(examples/gitops/flux/h20-inference/gpu-operator.yaml, "
            "examples/gitops/argocd/application-gpu-operator.yaml; docs/ci-and-gitops.md). The release stays the "
            "only writer of the ClusterPolicy, so no sync reverts another; the tree applies none."
        )
    else:
        notes.append(
            f"gpu-operator/clusterpolicy.yaml sets {fields} of ClusterPolicy {operator.effective_cluster_policy_name} "
            "and nothing else (no labels). It patches an existing object, never creates one (a ClusterPolicy "
            "needs eight more required fields): apply it after the operator's own. Apply server-side and force: "
            "the creator (the OpenShift console writes mig.strategy: single and an empty devicePlugin.config) owns "
            "those fields with other values. Argo CD and Flux do both by themselves (ServerSideApply=true and "
            "ssa: Merge are set on it); kubectl: `kubectl apply --server-side --force-conflicts "
            "--field-manager=gpupolicy -k <this directory>`."
        )
    default = resolved.default_config
    notes.append(
        f"devicePlugin.config.default is {default} (the only class), so its nodes need no "
        "nvidia.com/device-plugin.config label." if default else
        "devicePlugin.config.default is empty: a GPU node no class selects gets the empty config (the operator "
        "sets FALLBACK_STRATEGIES=empty), whole GPUs and no sharing."
    )
    if resolved.has_mig:
        notes.append(
            "The operator's MIG manager repartitions a node when nvidia.com/mig.config changes; it pauses the "
            "operator's GPU clients but never drains workloads: docs/operations.md (MIG reconfiguration)."
        )
    tainted = sorted({t.describe() for rc in resolved.classes for t in rc.taints})
    if tainted and operator.installer == "helm":
        notes.append(
            f"{gpu_operator.VALUES_FILE} sets daemonsets.tolerations to the chart's default (nvidia.com/gpu "
            f"NoSchedule) plus the classes' taints ({', '.join(tainted)}), so the device plugin, GPU Feature "
            "Discovery and MIG manager run on those nodes. Helm replaces a list, it does not merge it: "
            "tolerations the release had in its own values must be added to the spec's classes as taints."
        )
    elif tainted:
        # NVIDIA/gpu-operator@v26.7.0:deployments/gpu-operator/values.yaml daemonsets.tolerations: nvidia.com/gpu only.
        notes.append(
            f"The operator's DaemonSets tolerate only ClusterPolicy spec.daemonsets.tolerations (by default "
            f"nvidia.com/gpu:NoSchedule): add the classes' taints ({', '.join(tainted)}) there, or the device "
            "plugin, GPU Feature Discovery and MIG manager never run on those nodes."
        )
    return notes


def _hami_notes(resolved: ResolvedPolicy) -> list[str]:
    if not resolved.vgpu_classes:
        return []
    settings = resolved.spec.hami
    scope = hami_scope(resolved)
    notes = [
        f"vgpu classes run HAMi {settings.version}: the tree's hami/ holds one HAMi device-plugin DaemonSet per "
        f"vgpu class, and {hami_target.VALUES_PATH} the values for HAMi's chart {settings.chart_version} "
        f"({hami.CHART_REPOSITORY}), which installs its scheduler and webhook with its own device plugin off, as "
        f"release {settings.release_name} in {settings.namespace}. Flux installs it from the tree's flux/ (a "
        "HelmRepository, a HelmRelease and the values in a ConfigMap it reads); Argo CD from a multi-source "
        f"Application whose helm.valueFiles names this tree's {hami_target.VALUES_PATH} "
        "(examples/gitops/argocd/application-hami.yaml; docs/ci-and-gitops.md). Sync the chart before the tree "
        "(Flux dependsOn, an earlier Argo CD sync wave), so no node runs HAMi's chart plugin and a class's plugin "
        "at once.",
    ]
    if scope.scoped:
        notes.append(
            f"HAMi's count resource {settings.resource_names.count} is also what the NVIDIA-plugin classes offer, so "
            "HAMi's webhook is limited to the namespaces that may use vgpu classes (the values' namespaceSelector): "
            "their GPU pods go to HAMi's scheduler, every other namespace's stay with NVIDIA's plugin.")
    return notes


# ----------------------------------------------------------------------- rendering


def _mib(mib: int) -> str:
    return f"{mib} MiB ({mib / 1024:.1f} GiB)" if mib else "unknown"


def _slot_memory(s: Slots) -> str:
    estimated = ", estimated (no nvidia-smi capture for this profile)" if s.memory_estimated else ""
    return _mib(s.memory_mib) + estimated + ("" if s.memory_enforced or not s.memory_mib else ", not enforced")


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def render_markdown(report: CapacityReport) -> str:
    """REPORT.md: what a reviewer needs to approve the change, in the order they ask it."""
    totals = report.totals()
    lines = [
        f"# GPU capacity: {report.cluster}",
        "",
        f"Generated by `gpupolicy compile` from the cluster spec; do not edit. Device plugin {report.plugin_version}, "
        f"deployed {report.deploy}.",
        "",
        "## Summary",
        "",
        "| | before (exclusive) | after |",
        "|---|---:|---:|",
        f"| nodes | {totals['nodes']} | {totals['nodes']} |",
        f"| physical GPUs | {totals['physicalGpus']} | {totals['physicalGpus']} |",
        f"| schedulable GPU slots | {totals['slotsBefore']} | {totals['slotsAfter']} |",
    ]
    for resource, n in totals["slotsAfterByResource"].items():
        lines.append(f"| `{resource}` | {totals['slotsBefore'] if resource == EXCLUSIVE else 0} | {n} |")
    for device_class, n in totals.get("claimSlotsByDeviceClass", {}).items():
        lines.append(f"| DeviceClass `{device_class}` (claims) | 0 | {n} |")
    lines.append("")
    lines.append(f"**{totals['slotsBefore']} → {totals['slotsAfter']} schedulable GPU slots.**")
    if report.uncounted:
        lines.append("")
        lines.append(f"Totals leave out classes without a node count: {', '.join(report.uncounted)}.")
    lines += ["", "## Per class", "", _class_table(report)]
    for c in report.classes:
        lines += ["", *_class_section(c, report.plugin_version)]
    if report.dra is not None:
        lines += ["", "## DRA pool", "", *dra_report.markdown(report.dra)]
    lines += ["", "## Node labels", "", *_label_plan(report)]
    lines += ["", "## Warnings and advice", ""]
    lines += [f"- {f.severity} `{f.code}` at `{f.path}`: {f.message}" + (f" Fix: {f.hint}" if f.hint else "")
              for f in report.findings] or ["None."]
    if report.monitoring is not None:
        lines += ["", "## Monitoring", "", *_monitoring_section(report.monitoring)]
    lines += ["", "## Notes", "", *[f"- {n}" for n in report.notes]]
    return "\n".join(lines) + "\n"


def _class_table(report: CapacityReport) -> str:
    rows = [
        "| class | GPU | mode | nodes | GPUs | slots before | slots after | resource | memory per slot | isolation |",
        "|---|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for c in report.classes:
        for i, s in enumerate(c.after):
            head = (f"| {c.name} | {c.product} | {c.mode} | {_count(c.nodes)} | {_count(c.physical_gpus)} | "
                    f"{_count(c.before.total)}" if i == 0 else "| | | | | |")
            rows.append(f"{head} | {_count(s.total)} | {s.shown} | {_slot_memory(s)} | {s.isolation} |")
    return "\n".join(rows)


def picture_path(class_name: str) -> str:
    """Where the tree keeps a class's capacity picture (Kustomize ignores files no kustomization lists)."""
    return f"pictures/{class_name}.svg"


def _class_section(c: ClassReport, plugin: str) -> list[str]:
    picture = "MIG layout" if c.mode.partition("+")[0] == "mig" else "slots before and after"  # mig+time-slicing too
    out = [f"### {c.name}" + (f": {c.description}" if c.description else ""), "",
           f"![{c.name}: {picture}]({picture_path(c.name)})", ""]
    out.append(f"- GPU: {c.gpus_per_node} × {c.product} per node, {_count(c.nodes)} node(s)")
    out.append(f"- Before: {c.before.per_node} `{EXCLUSIVE}` per node, {_mib(c.before.memory_mib)} each")
    for s in c.after:
        per = f"{s.devices_per_node} device(s)" + (f" × {s.replicas} replica(s)" if s.replicas > 1 else "")
        memory = f"{_mib(s.memory_mib)} per slot"
        if not s.memory_enforced:
            memory += f", not enforced ({s.replicas} slots share one {s.device_memory_mib} MiB device)"
        what = f"{s.mig_profile} instances, which device plugin {plugin} advertises as `{s.resource}`; " \
            if s.renamed and not s.resource.startswith(dra_facts.IMPLICIT_PREFIX) else ""
        out.append(f"- After: {s.per_node} {s.shown} per node ({per}); {what}{memory}; "
                   f"isolation: {s.isolation}")
    out += [f"- {line}" for line in c.details]
    out.append(f"- Overhead: {c.overhead}")
    if c.sizing:
        out.append(f"- Sizing: {c.sizing}")
    return out


def _label_plan(report: CapacityReport) -> list[str]:
    needing = [c for c in report.classes if c.node_labels]
    if not needing:
        return ["None: every workload selects its nodes by the labels they already carry."]
    out = ["Labels the output needs on each class's nodes, and who sets them (nobody sets them by hand, and new "
           "nodes get them too):", ""]
    for c in needing:
        selector = ", ".join(f"{k}={v}" for k, v in c.node_selector.items())
        out.append(f"- **{c.name}** (nodes matching `{selector}`):")
        out += [f"  - `{k}={v}`: {c.labels_set_by[k]}" for k, v in c.node_labels.items()]
    return out


def _yaml_block(data: Any) -> list[str]:
    return ["```yaml", *serialize.dump_yaml(data).decode("utf-8").splitlines(), "```"]


def _monitoring_section(m: MonitoringReport) -> list[str]:
    labels = ", ".join(f"`{k}={v}`" for k, v in sorted(m.labels.items())) or "no labels"
    parts = ["the PrometheusRule `gpupolicy`"]
    if m.dashboard:
        parts.append("the Grafana dashboard (ConfigMap `gpupolicy-dashboard`, for the Grafana sidecar)")
    if m.webhook:
        parts.append("the webhook's ServiceMonitor")
    if m.reconciler:
        parts.append("the node-label reconciler's PodMonitor")
    out = [
        f"`monitoring/` holds {', '.join(parts[:-1]) + ' and ' if len(parts) > 1 else ''}{parts[-1]}, in "
        f"namespace `{m.namespace}` with "
        f"{labels} so that Prometheus loads them: {m.recording_rules} recording rules carry each class's "
        f"expectations, and {len(m.alerts)} alerts compare the cluster with them, each linked to its runbook.",
        "",
        "The alerts see only what the exporters report. kube-state-metrics exports a node label only when it is "
        "allow-listed; these are the labels the rules read (with kube-prometheus-stack, in its values; without, "
        f"as `--metric-labels-allowlist=nodes=[{','.join(m.node_label_allowlist)}]`):",
        "",
        *_yaml_block(m.kube_prometheus_stack_values),
    ]
    if m.dcgm_counters and m.dcgm_exporter_values is None:
        out += ["", "dcgm-exporter is run by the GPU Operator: the tree's `dcgmExporter` fields (in the operator's "
                "Helm values, or the ClusterPolicy patch) point it at the counters in "
                "`dcgm-exporter/configmap.yaml` and configure its ServiceMonitor (pod labels kept, the node's name "
                "added, the labels above)."]
    elif m.dcgm_counters:
        out += ["", "dcgm-exporter must run on the GPU nodes with the counters the rules read "
                "(`DCGM_FI_PROF_SM_ACTIVE` is off in its default list) and a ServiceMonitor that keeps its pod "
                "labels and adds the node's name; with its Helm chart (4.8.2), these values:", "",
                *_yaml_block(m.dcgm_exporter_values)]
    return out


def _slot_cell(s: Slots) -> str:
    if not s.memory_mib:
        return "?"
    return ("~" if s.memory_estimated else "") + f"{s.memory_mib} MiB" + ("" if s.memory_enforced else "*")


def render_text(report: CapacityReport) -> str:
    """The terminal table of `gpupolicy explain`: the same facts as REPORT.md, aligned for a terminal."""
    header = ("CLASS", "GPU", "MODE", "NODES", "GPUS", "BEFORE", "AFTER", "RESOURCE", "MEM/SLOT", "ISOLATION")
    rows: list[tuple[str, ...]] = [header]
    for c in report.classes:
        for i, s in enumerate(c.after):
            first = (c.name, c.product, c.mode, _count(c.nodes), _count(c.physical_gpus), _count(c.before.total))
            rows.append((*(first if i == 0 else ("",) * 6), _count(s.total), s.shown.replace("`", ""), _slot_cell(s),
                         s.isolation))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows]
    totals = report.totals()
    if any(not s.memory_enforced for c in report.classes for s in c.after):
        lines.append("* not enforced: the replicas share the device's memory with no limit")
    if any(s.memory_estimated for c in report.classes for s in c.after):
        lines.append("~ estimated: no nvidia-smi capture of this MIG profile's memory; measure it on a node")
    lines += ["", f"{report.cluster}: {totals['nodes']} node(s), {totals['physicalGpus']} GPU(s), "
              f"{totals['slotsBefore']} -> {totals['slotsAfter']} schedulable GPU slots"]
    if report.uncounted:
        lines.append(f"  (without classes lacking a node count: {', '.join(report.uncounted)})")
    for c in report.classes:
        lines.append(f"{c.name}: overhead {c.overhead}")
        lines += [f"{c.name}: {line}" for line in c.details]
        if c.sizing:
            lines.append(f"{c.name}: sizing {c.sizing}")
        for key, value in c.node_labels.items():
            lines.append(f"{c.name}: label {key}={value} set by {c.labels_set_by[key]}")
    lines += [f"{f.severity}[{f.code}] {f.path}: {f.message}" for f in report.findings]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines) + "\n"
