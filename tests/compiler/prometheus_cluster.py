"""A synthetic cluster as Prometheus series, for promtool unit tests of the compiled rules.

`healthy(resolved)` writes the series a correctly configured cluster of the policy exports: kube-state-metrics
(one node per class with its labels and allocatable, the device-plugin pods and DaemonSets, a running GPU
Deployment), dcgm-exporter (every GPU or MIG instance, per-pod series on shared GPUs when the spec says the
exporter reports them), the API server's view of the webhook and the webhook's own metrics. Each entry of
`SCENARIOS` then breaks one thing (the fault, which its alert must report with exactly the labels given) and
adds a near miss (something alike that must not fire); tests run both through `promtool test rules`.

The series are what the exporters emit, read from their sources (reference cel-monitoring.md Part 2): a
label value matters, a label the rules do not read is left out. MIG GPUs report each instance
(GPU_I_ID, GPU_I_PROFILE) and the parent GPU.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from external_tools import require_tool

from compiler.targets import admission_webhook, device_plugin, gpu_operator, hami, node_labels
from compiler.targets.monitoring import modes, rules
from compiler.targets.monitoring import signals as sig
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy
from policy.spec.model import ClusterGPUPolicy, Monitoring

MINUTES = 200
"""Length of every series, one sample a minute."""
APPS = "apps"
WEBHOOK_PODS = ("gpupolicy-webhook-a", "gpupolicy-webhook-b")
Labels = dict[str, str]


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def check_rules(groups: list[dict[str, Any]], directory: Path) -> subprocess.CompletedProcess[str]:
    """`promtool check rules` over these rule groups, written to a file in `directory`."""
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return promtool("check", "rules", str(path), cwd=directory)


def check_queries(exprs: list[str], directory: Path) -> subprocess.CompletedProcess[str]:
    """promtool's PromQL parser over expressions: each one recorded by a throwaway rule."""
    return check_rules([{"name": "queries", "rules": [{"record": f"query:n{i}:value", "expr": e}
                                                       for i, e in enumerate(exprs)]}], directory)


def constant(value: float, minutes: int = MINUTES) -> str:
    return f"{_num(value)}x{minutes}"


def counter(per_minute: float, minutes: int = MINUTES) -> str:
    return f"0+{_num(per_minute)}x{minutes}"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def series_name(metric: str, labels: Labels) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{metric}{{{inner}}}"


@dataclass
class Device:
    """One GPU, or one MIG instance of it, as dcgm-exporter labels it."""

    node_class: str
    labels: Labels
    memory_mib: int
    shared: bool
    budget_mib: int
    mig_parent: bool = False
    """A MIG-enabled GPU's own series: no pod runs on it, only on its instances."""


@dataclass
class Cluster:
    resolved: ResolvedPolicy
    series: dict[tuple[str, tuple[tuple[str, str], ...]], str] = field(default_factory=dict)
    devices: list[Device] = field(default_factory=list)

    # -- editing

    def set(self, metric: str, labels: Labels, values: str) -> None:
        self.series[(metric, tuple(sorted(labels.items())))] = values

    def drop(self, keep: Callable[[str, Labels], bool]) -> None:
        self.series = {k: v for k, v in self.series.items() if keep(k[0], dict(k[1]))}

    def copy(self) -> Cluster:
        return copy.deepcopy(self)

    def promtool_series(self, metrics: set[str] | None = None) -> list[dict[str, str]]:
        """The input series of a promtool test; only those of `metrics`, when given."""
        return [{"series": series_name(metric, dict(labels)), "values": values}
                for (metric, labels), values in sorted(self.series.items()) if metrics is None or metric in metrics]

    # -- what the healthy cluster holds

    @property
    def classes(self) -> tuple[ResolvedClass, ...]:
        return tuple(sorted(self.resolved.classes, key=lambda c: c.name))

    @property
    def settings(self) -> Monitoring:
        return self.resolved.spec.monitoring

    def node(self, c: ResolvedClass) -> str:
        return f"{c.name}-node-0"

    def node_labels(self, c: ResolvedClass) -> Labels:
        wanted = {**c.node_selector, **rules.drift_labels(c), **c.required_labels}
        if c.mig_config is not None:
            wanted["nvidia.com/mig.config.state"] = "success"
        return {"node": self.node(c), **{sig.ksm_label(k): v for k, v in wanted.items()}}

    def devices_of(self, c: ResolvedClass) -> list[Device]:
        return [d for d in self.devices if d.node_class == c.name]


def plugin_of(resolved: ResolvedPolicy, c: ResolvedClass) -> tuple[str, str]:
    """(namespace, DaemonSet) of the device plugin on the class's nodes: HAMi's for a vgpu class, else the
    tree's per-class plugin, or the GPU Operator's one."""
    plugin = resolved.spec.device_plugin
    if c.vgpu is not None:
        return resolved.spec.hami.namespace, hami.daemonset_name(c.name)
    if plugin.deploy == "standalone":
        return plugin.namespace, device_plugin.plugin_daemonset_name(c.name)
    return plugin.operator.namespace, gpu_operator.PLUGIN_DAEMONSET


def _class_devices(c: ResolvedClass, node: str) -> Iterator[Device]:
    mig = c.spec.sharing.mig
    if mig is None:
        offer = c.offers[0]
        for i in range(c.gpu_count):
            yield Device(c.name, {"node": node, "gpu": str(i), "UUID": f"GPU-{c.name}-{i}"}, c.memory_mib or 0,
                         offer.shared, offer.slot_memory_mib)
        return
    for gpus, layout in mig.layouts(c.gpu_count):
        for gpu in gpus:
            parent = {"node": node, "gpu": str(gpu), "UUID": f"GPU-{c.name}-{gpu}"}
            yield Device(c.name, parent, c.memory_mib or 0, False, 0, mig_parent=True)
            instance = 1
            for profile, count in sorted(layout.items()):
                offer = next(o for o in c.offers if o.mig_profile == profile)
                for _ in range(count):
                    yield Device(c.name, {**parent, "GPU_I_ID": str(instance), "GPU_I_PROFILE": profile},
                                 offer.memory_mib, offer.shared, offer.slot_memory_mib)
                    instance += 1


def _pod_labels(device: Device, pod: str) -> Labels:
    return {**device.labels, "namespace": APPS, "pod": pod, "container": "main", "pod_uid": f"uid-{pod}"}


def set_device(cluster: Cluster, device: Device, *, used_ratio: float, sm_active: float) -> None:
    used = int(device.memory_mib * used_ratio)
    cluster.set(sig.DCGM_FB_USED, device.labels, constant(used))
    cluster.set(sig.DCGM_FB_FREE, device.labels, constant(device.memory_mib - used))
    cluster.set(sig.DCGM_SM_ACTIVE, device.labels, constant(sm_active))
    cluster.set(sig.DCGM_GR_ENGINE_ACTIVE, device.labels, constant(min(1.0, sm_active + 0.1)))
    if "GPU_I_ID" not in device.labels:  # dcgm-exporter reports no GPU_UTIL for MIG instances
        cluster.set(sig.DCGM_GPU_UTIL, device.labels, constant(int(sm_active * 100)))


def set_pod(cluster: Cluster, device: Device, pod: str, *, memory_mib: int, utilization: int) -> None:
    cluster.set(sig.DCGM_FB_USED, _pod_labels(device, pod), constant(memory_mib))
    if "GPU_I_ID" not in device.labels:
        cluster.set(sig.DCGM_GPU_UTIL, _pod_labels(device, pod), constant(utilization))


def healthy(resolved: ResolvedPolicy) -> Cluster:
    cluster = Cluster(resolved)
    for c in cluster.classes:
        node = cluster.node(c)
        cluster.set(sig.KSM_NODE_LABELS, cluster.node_labels(c), constant(1))
        for offer in c.offers:
            resource = {"node": node, "resource": sig.ksm_resource(offer.resource), "unit": "integer"}
            cluster.set(sig.KSM_ALLOCATABLE, resource, constant(offer.per_node))
            cluster.set(sig.KSM_CAPACITY, resource, constant(offer.per_node))
        namespace, plugin = plugin_of(resolved, c)
        pod = {"namespace": namespace, "pod": f"{plugin}-{c.name}"}
        cluster.set(sig.KSM_POD_INFO, {**pod, "node": node, "created_by_kind": "DaemonSet",
                                       "created_by_name": plugin}, constant(1))
        cluster.set(sig.KSM_POD_PHASE, {**pod, "phase": "Running"}, constant(1))
        cluster.devices += _class_devices(c, node)
    for namespace, ds in rules.plugin_daemonsets(resolved).watched:
        labels = {"namespace": namespace, "daemonset": ds}
        for metric in (sig.KSM_DS_DESIRED, sig.KSM_DS_UPDATED, sig.KSM_DS_AVAILABLE):
            cluster.set(metric, labels, constant(1))
        for metric in (sig.KSM_DS_OBSERVED_GENERATION, sig.KSM_DS_GENERATION):
            cluster.set(metric, labels, constant(2))
    if resolved.spec.monitoring.dcgm_exporter.enabled:
        _healthy_gpus(cluster)
    for c in cluster.classes:  # a running Deployment on every class, one slot each
        _healthy_workload(cluster, f"{c.name}-serving", f"{c.name}-serving-7f9c", node=cluster.node(c),
                          resource=sig.ksm_resource(c.offers[0].resource))
    if resolved.spec.admission.enabled:
        _healthy_webhook(cluster)
    if rules.reconciler_runs(resolved):
        _healthy_reconciler(cluster)
    return cluster


def _healthy_reconciler(cluster: Cluster) -> None:
    """The node-label reconciler runs, has applied its labels and met no conflict (the gauge has no series)."""
    namespace = cluster.resolved.spec.admission.namespace
    cluster.set(sig.KSM_DEPLOYMENT_AVAILABLE, {"namespace": namespace, "deployment": node_labels.NAME}, constant(1))
    cluster.set(sig.RECONCILER_ERRORS, {"namespace": namespace, "pod": f"{node_labels.NAME}-0", "verb": "patch"},
                constant(0))


def _healthy_gpus(cluster: Cluster) -> None:
    per_pod = cluster.settings.dcgm_exporter.per_pod_metrics
    for device in cluster.devices:
        set_device(cluster, device, used_ratio=0.3, sm_active=0.4)
        if not per_pod or device.mig_parent:
            continue
        # Two pods share a shared device, each well inside its budget and its share of the SMs; one pod has
        # a device of its own (dcgm-exporter reports per-pod series for every device a pod holds).
        for pod in ("a", "b") if device.shared else ("a",):
            set_pod(cluster, device, f"{device.node_class}-{device.labels['UUID']}-{pod}",
                    memory_mib=device.budget_mib // 2 if device.shared else device.memory_mib // 4, utilization=15)


def workload(cluster: Cluster, deployment: str, replica_set: str, *, phase: str, gpus: bool = True,
             node: str = "", resource: str = "nvidia_com_gpu") -> Labels:
    """A Deployment's pod through its ReplicaSet, in `phase` (on `node`, or none while Pending); returns the
    pod's (namespace, pod) labels."""
    pod = {"namespace": APPS, "pod": f"{replica_set}-1"}
    cluster.set(sig.KSM_POD_OWNER, {**pod, "owner_kind": "ReplicaSet", "owner_name": replica_set}, constant(1))
    cluster.set(sig.KSM_REPLICASET_OWNER, {"namespace": APPS, "replicaset": replica_set, "owner_kind": "Deployment",
                                           "owner_name": deployment}, constant(1))
    for each in ("Pending", "Running"):
        cluster.set(sig.KSM_POD_PHASE, {**pod, "phase": each}, constant(1 if each == phase else 0))
    requested = {"resource": resource, "unit": "integer"} if gpus else {"resource": "cpu", "unit": "core"}
    for metric in (sig.KSM_POD_REQUESTS, sig.KSM_POD_LIMITS):  # kube-state-metrics labels them with the node
        cluster.set(metric, {**pod, "container": "main", "node": node, **requested}, constant(1))
    return pod


def deployment(cluster: Cluster, name: str, *, desired: int, updated: int) -> None:
    labels = {"namespace": APPS, "deployment": name}
    cluster.set(sig.KSM_DEPLOYMENT_SPEC_REPLICAS, labels, constant(desired))
    cluster.set(sig.KSM_DEPLOYMENT_UPDATED, labels, constant(updated))


def _healthy_workload(cluster: Cluster, name: str, replica_set: str, *, node: str, resource: str) -> None:
    workload(cluster, name, replica_set, phase="Running", node=node, resource=resource)
    deployment(cluster, name, desired=1, updated=1)


def webhook_name() -> str:
    return admission_webhook.DEFAULT_WEBHOOK


def webhook_buckets(cluster: Cluster, name: str, slow: bool) -> None:
    """The API server's latency histogram of a webhook: every call under 25 ms, or every call over 1 s."""
    edges = ("0.005", "0.025", "0.1", "0.5", "1", "2.5", "10", "25", "+Inf")
    for le in edges:
        fast_enough = le in ("2.5", "10", "25", "+Inf") if slow else le not in ("0.005",)
        cluster.set(sig.APISERVER_WEBHOOK_DURATION, {"name": name, "type": "validating", "operation": "CREATE",
                                                      "rejected": "false", "le": le},
                    counter(10 if fast_enough else 0))


def _healthy_webhook(cluster: Cluster) -> None:
    namespace = cluster.resolved.spec.admission.namespace
    desired = cluster.resolved.spec.admission.replicas
    labels = {"namespace": namespace, "deployment": admission_webhook.NAME}
    cluster.set(sig.KSM_DEPLOYMENT_SPEC_REPLICAS, labels, constant(desired))
    cluster.set(sig.KSM_DEPLOYMENT_AVAILABLE, labels, constant(desired))
    name = webhook_name()
    cluster.set(sig.APISERVER_WEBHOOK_REJECTIONS, {"name": name, "type": "validating", "operation": "CREATE",
                                                    "error_type": "no_error", "rejection_code": "403"}, counter(1))
    cluster.set(sig.APISERVER_WEBHOOK_FAIL_OPEN, {"name": name, "type": "validating"}, constant(0))
    webhook_buckets(cluster, name, slow=False)
    for pod in WEBHOOK_PODS:
        target = {"namespace": namespace, "pod": pod}
        cluster.set(sig.WEBHOOK_CERT_EXPIRY, target, constant(90 * 86400))
        cluster.set(sig.WEBHOOK_POLICY_INFO, {**target, "cluster": cluster.resolved.name, "digest": "d1"}, constant(1))
        cluster.set(sig.WEBHOOK_CERT_RELOADS, {**target, "outcome": "success"}, constant(0))
        cluster.set(sig.WEBHOOK_POLICY_RELOAD_FAILURES, target, constant(0))
        cluster.set(sig.WEBHOOK_INTERNAL_ERRORS, target, constant(0))
        cluster.set(sig.WEBHOOK_DECISIONS, {**target, "rule": "none", "outcome": "allow", "kind": "Deployment",
                                            "operation": "CREATE"}, counter(3))
        for le in ("0.0005", "0.001", "0.0025", "+Inf"):  # the webhook's own histogram: every review in 2 ms
            cluster.set(sig.WEBHOOK_DURATION, {**target, "le": le}, counter(0 if le == "0.0005" else 3))
        cluster.set(sig.WEBHOOK_DROPPED_CONNECTIONS, {**target, "reason": "timeout"}, constant(0))
        # synced; a webhook run without its cache exports the gauge too, as 0
        cluster.set(sig.WEBHOOK_NODE_CACHE_SYNCED, target, constant(1 if cluster.resolved.spec.admission.node_cache
                                                                    else 0))


# ----------------------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    fault: Cluster
    """The healthy cluster with one thing broken (and the near miss)."""
    near_miss: Cluster
    """The healthy cluster with only the near miss: the alert must stay silent."""
    expected: list[Labels]
    """The labels of every alert the fault raises (severity added by the test)."""
    eval_minutes: int


Build = Callable[[Cluster], Scenario | None]
SCENARIOS: dict[str, Build] = {}


def scenario(alert: str) -> Callable[[Build], Build]:
    def register(build: Build) -> Build:
        SCENARIOS[alert] = build
        return build

    return register


def _pair(base: Cluster, fault: Callable[[Cluster], list[Labels]], near: Callable[[Cluster], None] | None,
          eval_minutes: int) -> Scenario:
    near_miss = base.copy()
    if near is not None:
        near(near_miss)
    broken = near_miss.copy()
    expected = fault(broken)
    return Scenario(broken, near_miss, expected, eval_minutes)


def _class_labels(c: ResolvedClass) -> Labels:
    return {"class": c.name, "sharing": c.mode_name}


@scenario("GPUPolicyAllocatableDrift")
def _drift(base: Cluster) -> Scenario:
    def fault(cl: Cluster) -> list[Labels]:
        first = cl.classes[0]
        offer = first.offers[0]
        resource = sig.ksm_resource(offer.resource)
        labels = {"node": cl.node(first), "resource": resource, "unit": "integer"}
        cl.set(sig.KSM_ALLOCATABLE, labels, constant(offer.per_node // 2))
        out = [{"node": cl.node(first), "resource": resource, "class": first.name}]
        if len(cl.classes) > 1:  # the other branch: a resource the node does not advertise at all
            second = cl.classes[1]
            missing = sig.ksm_resource(second.offers[0].resource)
            cl.drop(lambda m, lab: not (m == sig.KSM_ALLOCATABLE and lab["node"] == cl.node(second)
                                        and lab["resource"] == missing))
            out.append({"node": cl.node(second), "resource": missing, "class": second.name})
        return out

    return _pair(base, fault, None, 35)


@scenario("GPUPolicyUnexpectedGPUResource")
def _unexpected(base: Cluster) -> Scenario:
    candidates = ("nvidia_com_gpu_shared", "nvidia_com_mig_1g_5gb", "nvidia_com_gpu")

    def stray(c: ResolvedClass) -> str:
        offered = {sig.ksm_resource(o.resource) for o in c.offers}
        return next(r for r in candidates if r not in offered)

    def near(cl: Cluster) -> None:  # the same resource advertised as 0 (a plugin that lists it empty)
        last = cl.classes[-1]
        cl.set(sig.KSM_ALLOCATABLE, {"node": cl.node(last), "resource": stray(last), "unit": "integer"}, constant(0))

    def fault(cl: Cluster) -> list[Labels]:
        first = cl.classes[0]
        cl.set(sig.KSM_ALLOCATABLE, {"node": cl.node(first), "resource": stray(first), "unit": "integer"},
               constant(2))
        return [{"node": cl.node(first), "resource": stray(first), "class": first.name}]

    return _pair(base, fault, near, 35)


@scenario("GPUPolicyUnmanagedGPUNode")
def _unmanaged(base: Cluster) -> Scenario:
    def near(cl: Cluster) -> None:  # a CPU node: lists the resource with nothing behind it
        cl.set(sig.KSM_NODE_LABELS, {"node": "cpu-0", "label_node_pool": "cpu"}, constant(1))
        cl.set(sig.KSM_CAPACITY, {"node": "cpu-0", "resource": "nvidia_com_gpu", "unit": "integer"}, constant(0))

    def fault(cl: Cluster) -> list[Labels]:
        cl.set(sig.KSM_NODE_LABELS, {"node": "stray-0", "label_node_pool": "legacy-gpu"}, constant(1))
        cl.set(sig.KSM_CAPACITY, {"node": "stray-0", "resource": "nvidia_com_gpu", "unit": "integer"}, constant(1))
        return [{"node": "stray-0"}]

    return _pair(base, fault, near, 50)


@scenario("GPUPolicyClassWithoutNodes")
def _without_nodes(base: Cluster) -> Scenario | None:
    counted = [c for c in base.classes if c.nodes]
    if not counted:
        return None

    def fault(cl: Cluster) -> list[Labels]:
        target = counted[0]
        # The selector's label changed on the node (the -SHARED product rewrite, a renamed pool label).
        labels = cl.node_labels(target)
        cl.drop(lambda m, lab: not (m == sig.KSM_NODE_LABELS and lab["node"] == cl.node(target)))
        renamed = {k: (v + "-renamed" if k == sig.ksm_label(next(iter(sorted(target.node_selector)))) else v)
                   for k, v in labels.items()}
        cl.set(sig.KSM_NODE_LABELS, renamed, constant(1))
        return [{"class": target.name}]

    return _pair(base, fault, None, 50)


def _label_scenario(base: Cluster, wanted: Callable[[ResolvedClass], dict[str, str]]) -> Scenario | None:
    labelled = [c for c in base.classes if wanted(c)]
    if not labelled:
        return None
    target = labelled[0]
    key, value = next(iter(wanted(target).items()))

    def near(cl: Cluster) -> None:  # a node outside every class without the label: not ours to judge
        cl.set(sig.KSM_NODE_LABELS, {"node": "cpu-0", "label_node_pool": "cpu"}, constant(1))

    def fault(cl: Cluster) -> list[Labels]:
        labels = cl.node_labels(target)
        cl.drop(lambda m, lab: not (m == sig.KSM_NODE_LABELS and lab["node"] == cl.node(target)))
        cl.set(sig.KSM_NODE_LABELS, {**labels, sig.ksm_label(key): value + "-other"}, constant(1))
        return [{"node": cl.node(target), **_class_labels(target), "label": key, "expected": value}]

    return _pair(base, fault, near, 35)


@scenario("GPUPolicySharingLabelDrift")
def _sharing_drift(base: Cluster) -> Scenario | None:
    return _label_scenario(base, rules.drift_labels)


@scenario("GPUPolicyNodeLabelMissing")
def _label_missing(base: Cluster) -> Scenario | None:
    return _label_scenario(base, lambda c: dict(c.required_labels))


def _mig_node(base: Cluster) -> ResolvedClass | None:
    return next((c for c in base.classes if c.mig_config is not None), None)


def _set_mig_state(cl: Cluster, c: ResolvedClass, values: dict[str, str]) -> None:
    labels = cl.node_labels(c)
    cl.drop(lambda m, lab: not (m == sig.KSM_NODE_LABELS and lab["node"] == cl.node(c)))
    for state, series in values.items():
        cl.set(sig.KSM_NODE_LABELS, {**labels, sig.ksm_label("nvidia.com/mig.config.state"): state}, series)


@scenario("GPUPolicyMIGReconfigFailed")
def _mig_failed(base: Cluster) -> Scenario | None:
    target = _mig_node(base)
    if target is None:
        return None

    def near(cl: Cluster) -> None:  # failed once, then succeeded on the retry
        others = [c for c in cl.classes if c.mig_config is not None and c is not target]
        if others:
            _set_mig_state(cl, others[0], {"failed": "1x3 _x196", "success": "_x3 1x196"})

    def fault(cl: Cluster) -> list[Labels]:
        _set_mig_state(cl, target, {"failed": constant(1)})
        return [{"node": cl.node(target)}]

    return _pair(base, fault, near, 20)


@scenario("GPUPolicyMIGReconfigStuck")
def _mig_stuck(base: Cluster) -> Scenario | None:
    target = _mig_node(base)
    if target is None:
        return None

    def near(cl: Cluster) -> None:  # a reboot that finished in ten minutes
        _set_mig_state(cl, target, {"rebooting": "1x10 _x189", "success": "_x10 1x189"})

    def fault(cl: Cluster) -> list[Labels]:
        _set_mig_state(cl, target, {"pending": constant(1)})
        return [{"node": cl.node(target)}]

    return _pair(base, fault, near, 50)


@scenario("GPUPolicyDevicePluginRolloutStuck")
def _rollout_stuck(base: Cluster) -> Scenario:
    driven = rules.plugin_daemonsets(base.resolved).watched

    def near(cl: Cluster) -> None:  # a rollout that moves: one pod updated after 20 minutes
        if len(driven) > 1:
            namespace, name = driven[-1]
            cl.set(sig.KSM_DS_UPDATED, {"namespace": namespace, "daemonset": name}, "0x20 1x179")

    def fault(cl: Cluster) -> list[Labels]:
        namespace, name = driven[0]
        cl.set(sig.KSM_DS_UPDATED, {"namespace": namespace, "daemonset": name}, constant(0))
        return [{"namespace": namespace, "daemonset": name}]

    return _pair(base, fault, near, 40)


@scenario("GPUPolicyDevicePluginNotRegistered")
def _not_registered(base: Cluster) -> Scenario:

    def silence(cl: Cluster, c: ResolvedClass) -> None:
        for offer in c.offers:
            cl.set(sig.KSM_ALLOCATABLE, {"node": cl.node(c), "resource": sig.ksm_resource(offer.resource),
                                         "unit": "integer"}, constant(0))

    def near(cl: Cluster) -> None:  # the plugin pod itself is not running yet: the rollout alert's business
        if len(cl.classes) > 1:
            last = cl.classes[-1]
            silence(cl, last)
            for (metric, labels), _ in list(cl.series.items()):
                lab = dict(labels)
                if metric == sig.KSM_POD_INFO and lab["node"] == cl.node(last):
                    pod = {"namespace": lab["namespace"], "pod": lab["pod"]}
                    cl.set(sig.KSM_POD_PHASE, {**pod, "phase": "Running"}, constant(0))
                    cl.set(sig.KSM_POD_PHASE, {**pod, "phase": "Pending"}, constant(1))

    def fault(cl: Cluster) -> list[Labels]:
        first = cl.classes[0]
        silence(cl, first)
        return [{"node": cl.node(first), "resource": sig.ksm_resource(o.resource), "class": first.name}
                for o in first.offers]

    return _pair(base, fault, near, 30)


@scenario("GPUPolicyGPUsUnhealthy")
def _unhealthy(base: Cluster) -> Scenario:
    def fault(cl: Cluster) -> list[Labels]:
        first = cl.classes[0]
        offer = first.offers[0]
        resource = sig.ksm_resource(offer.resource)
        cl.set(sig.KSM_ALLOCATABLE, {"node": cl.node(first), "resource": resource, "unit": "integer"},
               constant(offer.per_node - 1))
        return [{"node": cl.node(first), "resource": resource, "class": first.name}]

    return _pair(base, fault, None, 35)


@scenario("GPUPolicyKubeletRejectedGPUPod")
def _rejected(base: Cluster) -> Scenario:
    def reject(cl: Cluster, name: str, gpus: bool) -> Labels:
        pod = workload(cl, name, f"{name}-5d8b", phase="Pending", gpus=gpus)
        cl.set(sig.KSM_POD_REASON, {**pod, "reason": "UnexpectedAdmissionError"}, constant(1))
        return pod

    def near(cl: Cluster) -> None:  # a CPU pod the kubelet rejected for reasons of its own
        reject(cl, "cpu-job", gpus=False)

    def fault(cl: Cluster) -> list[Labels]:
        return [reject(cl, "nlp-inference", gpus=True)]

    return _pair(base, fault, near, 10)


@scenario("GPUPolicyGPUPodUnschedulable")
def _unschedulable(base: Cluster) -> Scenario:
    def wait(cl: Cluster, name: str, gpus: bool, values: str) -> Labels:
        pod = workload(cl, name, f"{name}-5d8b", phase="Pending", gpus=gpus)
        cl.set(sig.KSM_POD_UNSCHEDULABLE, pod, values)
        return pod

    def near(cl: Cluster) -> None:
        wait(cl, "cpu-job", False, constant(1))  # a CPU pod
        wait(cl, "brief", True, "1x10 _x189")  # a GPU pod that found a slot after ten minutes

    def fault(cl: Cluster) -> list[Labels]:
        return [wait(cl, "nlp-inference", True, constant(1))]

    return _pair(base, fault, near, 50)


@scenario("GPUPolicyGPURolloutBlocked")
def _rollout_blocked(base: Cluster) -> Scenario:
    def near(cl: Cluster) -> None:  # a CPU Deployment behind a Pending pod is not ours
        workload(cl, "web", "web-old", phase="Running", gpus=False)
        workload(cl, "web", "web-new", phase="Pending", gpus=False)
        deployment(cl, "web", desired=2, updated=1)

    def fault(cl: Cluster) -> list[Labels]:
        # Seed 003: the new ReplicaSet's first pod waits for a GPU, so the old one is never scaled down.
        workload(cl, "nlp", "nlp-old", phase="Running")
        workload(cl, "nlp", "nlp-new", phase="Pending")
        deployment(cl, "nlp", desired=2, updated=1)
        return [{"namespace": APPS, "deployment": "nlp"}]

    return _pair(base, fault, near, 50)


def _needs_admission(base: Cluster) -> bool:
    return base.resolved.spec.admission.enabled


@scenario("GPUPolicyWebhookUnavailable")
def _unavailable(base: Cluster) -> Scenario | None:
    if not _needs_admission(base):
        return None

    def near(cl: Cluster) -> None:  # another webhook failing, and ours denying (no_error) a lot
        cl.set(sig.APISERVER_WEBHOOK_REJECTIONS, {"name": "validate.kyverno.svc", "type": "validating",
                                                  "operation": "CREATE", "error_type": "calling_webhook_error",
                                                  "rejection_code": "500"}, counter(5))
        cl.set(sig.APISERVER_WEBHOOK_REJECTIONS, {"name": webhook_name(), "type": "validating", "operation": "CREATE",
                                                  "error_type": "no_error", "rejection_code": "403"}, counter(20))

    def fault(cl: Cluster) -> list[Labels]:
        cl.set(sig.APISERVER_WEBHOOK_REJECTIONS, {"name": webhook_name(), "type": "validating", "operation": "CREATE",
                                                  "error_type": "calling_webhook_error", "rejection_code": "500"},
               counter(2))
        return [{"name": webhook_name()}]

    return _pair(base, fault, near, 20)


@scenario("GPUPolicyAdmissionPolicyErrors")
def _policy_errors(base: Cluster) -> Scenario | None:
    names = rules.watched_policies(base.resolved)
    if not names:
        return None
    typed = base.resolved.spec.kubernetes_minor >= sig.POLICY_CHECK_ERROR_TYPE_MINOR

    def check(policy: str, action: str, error: str) -> Labels:
        # 1.30 labels a check {policy, policy_binding, enforcement_action, state}; 1.31 on trades state for error_type
        labels = {"policy": policy, "policy_binding": policy, "enforcement_action": action}
        return {**labels, "error_type": error} if typed else {**labels, "state": "active"}

    def near(cl: Cluster) -> None:  # ours denying (a verdict), another policy's errors
        cl.set(sig.APISERVER_POLICY_CHECKS, check(names[0], "deny", "no_error"), counter(20))
        cl.set(sig.APISERVER_POLICY_CHECKS, check("kyverno-require-labels", "allow", "out_of_budget"), counter(5))

    def fault(cl: Cluster) -> list[Labels]:
        # a 2,000-container pod runs the policy out of its budget; failurePolicy Ignore lets it through
        cl.set(sig.APISERVER_POLICY_CHECKS, check(names[0], "allow", "out_of_budget"), counter(1))
        found = {"policy": names[0], "policy_binding": names[0]}
        return [{**found, "error_type": "out_of_budget"} if typed else found]

    return _pair(base, fault, near, 20)


@scenario("GPUPolicyWebhookSlow")
def _slow(base: Cluster) -> Scenario | None:
    if not _needs_admission(base):
        return None

    def near(cl: Cluster) -> None:
        webhook_buckets(cl, "validate.kyverno.svc", slow=True)

    def fault(cl: Cluster) -> list[Labels]:
        webhook_buckets(cl, webhook_name(), slow=True)
        return [{"name": webhook_name()}]

    return _pair(base, fault, near, 25)


def _webhook_counter_scenario(base: Cluster, metric: str, extra: Labels, near_extra: Labels | None) -> Scenario | None:
    if not _needs_admission(base):
        return None
    namespace = base.resolved.spec.admission.namespace
    target = {"namespace": namespace, "pod": WEBHOOK_PODS[0]}

    def near(cl: Cluster) -> None:
        if near_extra is not None:
            cl.set(metric, {**target, **near_extra}, counter(1))

    def fault(cl: Cluster) -> list[Labels]:
        cl.set(metric, {**target, **extra}, counter(1))
        return [target]

    return _pair(base, fault, near, 10)


@scenario("GPUPolicyWebhookInternalErrors")
def _internal_errors(base: Cluster) -> Scenario | None:
    return _webhook_counter_scenario(base, sig.WEBHOOK_INTERNAL_ERRORS, {}, None)


@scenario("GPUPolicyWebhookCertificateReloadFailing")
def _reload_cert(base: Cluster) -> Scenario | None:
    return _webhook_counter_scenario(base, sig.WEBHOOK_CERT_RELOADS, {"outcome": "failure"}, {"outcome": "success"})


@scenario("GPUPolicyReloadFailing")
def _reload_policy(base: Cluster) -> Scenario | None:
    return _webhook_counter_scenario(base, sig.WEBHOOK_POLICY_RELOAD_FAILURES, {}, None)


@scenario("GPUPolicyWebhookReplicasUnavailable")
def _replicas(base: Cluster) -> Scenario | None:
    if not _needs_admission(base):
        return None
    namespace = base.resolved.spec.admission.namespace
    desired = base.resolved.spec.admission.replicas

    def near(cl: Cluster) -> None:  # another Deployment of the namespace short of replicas
        other = {"namespace": namespace, "deployment": "unrelated"}
        cl.set(sig.KSM_DEPLOYMENT_SPEC_REPLICAS, other, constant(2))
        cl.set(sig.KSM_DEPLOYMENT_AVAILABLE, other, constant(0))

    def fault(cl: Cluster) -> list[Labels]:
        labels = {"namespace": namespace, "deployment": admission_webhook.NAME}
        cl.set(sig.KSM_DEPLOYMENT_AVAILABLE, labels, constant(desired - 1))
        return [labels]

    return _pair(base, fault, near, 30)


@scenario("GPUPolicyWebhookCertificateExpiring")
def _expiring(base: Cluster) -> Scenario | None:
    if not _needs_admission(base):
        return None
    namespace = base.resolved.spec.admission.namespace

    def near(cl: Cluster) -> None:  # a worker that has not loaded its certificate yet reports 0
        cl.set(sig.WEBHOOK_CERT_EXPIRY, {"namespace": namespace, "pod": WEBHOOK_PODS[1]}, constant(0))

    def fault(cl: Cluster) -> list[Labels]:
        target = {"namespace": namespace, "pod": WEBHOOK_PODS[0]}
        cl.set(sig.WEBHOOK_CERT_EXPIRY, target, constant(7 * 86400))  # 7 days after promtool's epoch
        return [target]

    return _pair(base, fault, near, 80)


@scenario("GPUPolicyReplicasDisagree")
def _disagree(base: Cluster) -> Scenario | None:
    if not _needs_admission(base):
        return None
    namespace = base.resolved.spec.admission.namespace

    def near(cl: Cluster) -> None:  # a policy the pod left behind reads 0, not 1
        cl.set(sig.WEBHOOK_POLICY_INFO, {"namespace": namespace, "pod": WEBHOOK_PODS[0],
                                         "cluster": cl.resolved.name, "digest": "d0"}, constant(0))

    def fault(cl: Cluster) -> list[Labels]:
        pod = {"namespace": namespace, "pod": WEBHOOK_PODS[1], "cluster": cl.resolved.name}
        cl.drop(lambda m, lab: not (m == sig.WEBHOOK_POLICY_INFO and lab["pod"] == WEBHOOK_PODS[1]))
        cl.set(sig.WEBHOOK_POLICY_INFO, {**pod, "digest": "d2"}, constant(1))
        return [{"namespace": namespace}]

    return _pair(base, fault, near, 30)


@scenario("GPUPolicyWebhookNodeCacheUnsynced")
def _node_cache_unsynced(base: Cluster) -> Scenario | None:
    if not rules.Context(base.resolved).node_cache:
        return None
    namespace = base.resolved.spec.admission.namespace

    def near(cl: Cluster) -> None:
        # a pod unsynced at its start and for 15 minutes later on, synced again since; one unsynced for the last 7
        # minutes only (not yet the alert's 10); another namespace's webhook
        cl.set(sig.WEBHOOK_NODE_CACHE_SYNCED, {"namespace": namespace, "pod": WEBHOOK_PODS[1]}, "0x2 1x10 0x15 1x172")
        cl.set(sig.WEBHOOK_NODE_CACHE_SYNCED, {"namespace": namespace, "pod": "gpupolicy-webhook-c"}, "1x32 0x167")
        cl.set(sig.WEBHOOK_NODE_CACHE_SYNCED, {"namespace": "other-webhook", "pod": "other-webhook-0"}, constant(0))

    def fault(cl: Cluster) -> list[Labels]:  # synced, then unsynced for good after 20 minutes
        target = {"namespace": namespace, "pod": WEBHOOK_PODS[0]}
        cl.set(sig.WEBHOOK_NODE_CACHE_SYNCED, target, "1x20 0x179")
        return [target]

    return _pair(base, fault, near, 40)


@scenario("GPUPolicyDeniesSurge")
def _surge(base: Cluster) -> Scenario | None:
    if not _needs_admission(base):
        return None
    namespace = base.resolved.spec.admission.namespace
    target = {"namespace": namespace, "pod": WEBHOOK_PODS[0], "kind": "Deployment", "operation": "CREATE"}

    def near(cl: Cluster) -> None:  # many allowed reviews, and a trickle of denials of another rule
        cl.set(sig.WEBHOOK_DECISIONS, {**target, "rule": "none", "outcome": "allow"}, counter(50))
        cl.set(sig.WEBHOOK_DECISIONS, {**target, "rule": "mig-strategy-mismatch", "outcome": "deny"}, counter(0.2))

    def fault(cl: Cluster) -> list[Labels]:
        cl.set(sig.WEBHOOK_DECISIONS, {**target, "rule": "shared-gpu-request-above-one", "outcome": "deny"},
               counter(2))
        return [{"rule": "shared-gpu-request-above-one"}]

    return _pair(base, fault, near, 20)


def _reconciler(base: Cluster) -> bool:
    return rules.reconciler_runs(base.resolved)


@scenario("GPUPolicyNodeLabelConflict")
def _conflict(base: Cluster) -> Scenario | None:
    if not _reconciler(base):
        return None
    namespace = base.resolved.spec.admission.namespace
    node = base.node(base.classes[0])
    target = {"namespace": namespace, "pod": f"{node_labels.NAME}-0", "key": "nvidia.com/mig.config"}

    def near(cl: Cluster) -> None:  # a conflict the reconciler saw once, before the other writer gave way
        cl.set(sig.RECONCILER_CONFLICTS, {**target, "node": cl.node(cl.classes[-1])}, "1x5 _x194")

    def fault(cl: Cluster) -> list[Labels]:
        cl.set(sig.RECONCILER_CONFLICTS, {**target, "node": node}, constant(1))
        return [{"node": node, "key": "nvidia.com/mig.config"}]

    return _pair(base, fault, near, 30)


@scenario("GPUPolicyNodeLabelReconcilerFailing")
def _reconciler_failing(base: Cluster) -> Scenario | None:
    if not _reconciler(base):
        return None
    namespace = base.resolved.spec.admission.namespace
    pod = {"namespace": namespace, "pod": f"{node_labels.NAME}-0"}

    def near(cl: Cluster) -> None:  # one error, long ago: the reconciler retried and went on
        cl.set(sig.RECONCILER_ERRORS, {**pod, "verb": "list/watch"}, "0x10 1x189")

    def fault(cl: Cluster) -> list[Labels]:
        cl.set(sig.RECONCILER_ERRORS, {**pod, "verb": "patch"}, counter(1))
        cl.set(sig.KSM_DEPLOYMENT_AVAILABLE, {"namespace": namespace, "deployment": node_labels.NAME}, constant(0))
        return [{"namespace": namespace, "verb": "patch"}, {"namespace": namespace, "deployment": node_labels.NAME}]

    return _pair(base, fault, near, 40)


def _needs_dcgm(base: Cluster) -> bool:
    return base.settings.dcgm_exporter.enabled


@scenario("GPUPolicyDCGMMetricsMissing")
def _dcgm_missing(base: Cluster) -> Scenario | None:
    if not _needs_dcgm(base):
        return None

    def near(cl: Cluster) -> None:  # a GPU node outside every class without dcgm-exporter
        cl.set(sig.KSM_NODE_LABELS, {"node": "stray-0", "label_node_pool": "legacy-gpu"}, constant(1))

    def fault(cl: Cluster) -> list[Labels]:
        first = cl.classes[0]
        cl.drop(lambda m, lab: not (m.startswith("DCGM_") and lab.get("node") == cl.node(first)))
        return [{"node": cl.node(first), **_class_labels(first)}]

    return _pair(base, fault, near, 50)


def _device_alert_labels(device: Device, c: ResolvedClass) -> Labels:
    return {**device.labels, **_class_labels(c)}


def _first_device(cl: Cluster, want: Callable[[ResolvedClass, Device], bool]) -> tuple[ResolvedClass, Device] | None:
    for c in cl.classes:
        for d in cl.devices_of(c):
            if want(c, d):
                return c, d
    return None


@scenario("GPUPolicySharedGPUMemoryPressure")
def _pressure(base: Cluster) -> Scenario | None:
    if not _needs_dcgm(base):
        return None
    found = _first_device(base, lambda c, d: modes.watch(c).memory_pressure and d.shared)
    if found is None:
        return None
    target, device = found
    exclusive = _first_device(base, lambda c, d: not modes.watch(c).memory_pressure)

    def near(cl: Cluster) -> None:  # a full GPU of a class nothing shares: one pod's own business
        if exclusive is not None:
            set_device(cl, exclusive[1], used_ratio=0.99, sm_active=0.4)
        # and a shared device just under its class's threshold
        ratio = rules.memory_pressure_ratio(target, cl.settings)
        others = [d for d in cl.devices_of(target) if d.shared and d.labels != device.labels]
        if others:
            set_device(cl, others[0], used_ratio=ratio - 0.02, sm_active=0.4)

    def fault(cl: Cluster) -> list[Labels]:
        set_device(cl, device, used_ratio=0.97, sm_active=0.4)
        return [_device_alert_labels(device, target)]

    return _pair(base, fault, near, 25)


def _pod_devices(base: Cluster, flag: Callable[[modes.Watch], bool]) -> tuple[ResolvedClass, Device] | None:
    if not base.settings.dcgm_exporter.per_pod_metrics or not _needs_dcgm(base):
        return None
    return _first_device(base, lambda c, d: flag(modes.watch(c)) and d.shared)


@scenario("GPUPolicyPodOverSliceMemory")
def _over_budget(base: Cluster) -> Scenario | None:
    found = _pod_devices(base, lambda w: w.pod_memory_budget)
    if found is None:
        return None
    target, device = found
    pod = f"{target.name}-{device.labels['UUID']}-a"

    def near(cl: Cluster) -> None:  # the other pod right at its budget
        set_pod(cl, device, f"{target.name}-{device.labels['UUID']}-b", memory_mib=device.budget_mib, utilization=15)

    def fault(cl: Cluster) -> list[Labels]:
        set_pod(cl, device, pod, memory_mib=device.budget_mib + 500, utilization=15)
        labels = {**_device_alert_labels(device, target), "namespace": APPS, "pod": pod}
        return [labels]

    return _pair(base, fault, near, 30)


@scenario("GPUPolicySharedGPUComputeHog")
def _hog(base: Cluster) -> Scenario | None:
    found = _pod_devices(base, lambda w: w.compute_hog)
    if found is None:
        return None
    target, device = found
    uuid = device.labels["UUID"]

    def near(cl: Cluster) -> None:  # a pod alone on its GPU may use all of it
        alone = [d for d in cl.devices_of(target) if d.labels != device.labels]
        if alone:
            cl.drop(lambda m, lab: not (lab.get("UUID") == alone[0].labels["UUID"] and "pod" in lab))
            set_pod(cl, alone[0], f"{target.name}-alone", memory_mib=device.budget_mib // 2, utilization=95)

    def fault(cl: Cluster) -> list[Labels]:
        pod = f"{target.name}-{uuid}-a"
        set_pod(cl, device, pod, memory_mib=device.budget_mib // 2, utilization=90)
        return [{**_device_alert_labels(device, target), "namespace": APPS, "pod": pod}]

    return _pair(base, fault, near, 30)


@scenario("GPUPolicyIdleGPUMemory")
def _idle(base: Cluster) -> Scenario | None:
    if not _needs_dcgm(base):
        return None
    target, device = base.classes[0], base.devices_of(base.classes[0])[0]
    others = base.devices_of(target)[1:]

    def near(cl: Cluster) -> None:  # holding as much memory, but working
        if others:
            set_device(cl, others[0], used_ratio=0.6, sm_active=0.3)

    def fault(cl: Cluster) -> list[Labels]:
        set_device(cl, device, used_ratio=0.6, sm_active=0.01)
        return [_device_alert_labels(device, target)]

    return _pair(base, fault, near, 140)


# ----------------------------------------------------------------------------------------- specs


def fleet(classes: int) -> ClusterGPUPolicy:
    """A GPU Operator cluster of `classes` T4 pools, time-sliced and exclusive in turn."""
    from policy.load import load_policy

    lines = ["apiVersion: gpupolicy.dev/v1alpha1", "kind: ClusterGPUPolicy", "metadata: {name: fleet}", "spec:",
             "  devicePlugin: {deploy: gpu-operator}", "  monitoring: {enabled: true}", "  nodeClasses:"]
    for i in range(classes):
        sharing = "{timeSlicing: {replicas: 4}}" if i % 2 else "exclusive"
        lines.append(f"    - {{name: pool-{i:03d}, nodeSelector: {{node-pool: pool-{i:03d}}}, nodes: 2, "
                     f"gpu: {{model: T4, count: 1}}, sharing: {sharing}}}")
    loaded = load_policy("\n".join(lines) + "\n", filename="fleet.yaml")
    assert loaded.ok and loaded.policy is not None, [d.message for d in loaded.diagnostics]
    return loaded.policy
