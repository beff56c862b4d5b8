"""A live cluster against its policy: per node class and per node, every place where reality differs from the spec."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from cluster import dra_devices, facts
from cluster.expected import Expected, ExpectedDaemonSet
from cluster.findings import Finding, FindingCode, Severity
from cluster.resources import DaemonSet, Deployment, Event, Node, Pod, ReplicaSet, Snapshot
from compiler.report import label_setter
from compiler.targets import hami as hami_target
from compiler.targets import mig_manager
from compiler.targets import node_labels as reconciler_target
from compiler.targets.hami import VALUES_PATH
from policy.admission.engine import Engine
from policy.admission.rules import ClassView, placement_conflict
from policy.admission.workloads import find_workload, read_gpu_request, read_placement
from policy.hardware import catalog, drivers, labels
from policy.hardware.releases import GPU, MIG_PREFIX
from policy.kube import selectors
from policy.resolved import offers
from policy.resolved.node_labels import FIELD_MANAGER, LabelPlan, build_plan
from policy.resolved.resolve import Offer, ResolvedClass, resolve
from policy.spec.model import ClusterGPUPolicy
from policy.vgpu import cloud_vgpu, hami

# Rules whose denial means the scheduler can never place the pod (the others deny for kubelet or tenant reasons).
_UNSCHEDULABLE_RULES = frozenset({"gpu-request-unsatisfiable", "mig-strategy-mismatch", "vgpu-memory-unsatisfiable",
                                  "vgpu-count-above-gpus", "hami-annotation-invalid"})
_PLUGIN_RESOURCES = (GPU, f"{GPU}.shared", MIG_PREFIX)
_SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}
#: The MIG manager waits up to 5 minutes for each group of GPU clients to leave before it applies a layout, and a
#: wait that times out leaves the node pending for good (mig-parted pkg/mig/reconfigure; operator-migmanager notes
#: A.5 step 8): pending or rebooting for longer than this is stuck, not in progress.
MIG_STUCK_SECONDS = 30 * 60
_NO_MANAGED_FIELDS = ("the objects carry no managedFields, which `kubectl get` leaves out unless given "
                      "--show-managed-fields")


@dataclass(frozen=True)
class NodeMigState:
    """What the MIG manager reports on one node: the config it was asked for and how far it got."""

    node: str
    config: str | None
    """nvidia.com/mig.config on the node."""
    state: str | None
    """nvidia.com/mig.config.state: pending, rebooting, success or failed (None: no MIG manager has reported)."""
    seconds: int | None
    """How long the state has held at least, on the snapshot's clock: since the last change by the manager that
    owns the label (metadata.managedFields); None when that is unknown."""

    def describe(self) -> str:
        held = f" for {human_duration(self.seconds)}" if self.seconds is not None else ""
        return f"{self.node} {self.config or '(no config)'} {self.state or 'unreported'}{held}"


@dataclass(frozen=True)
class ClassStatus:
    """A class as found: its nodes, and per resource what it promises per node against what they advertise."""

    name: str
    nodes: tuple[str, ...]
    expected_nodes: int | None
    promised_per_node: tuple[tuple[str, int], ...]
    advertised: tuple[tuple[str, int], ...]
    """Per resource, the allocatable summed over the class's nodes."""
    mig_states: tuple[NodeMigState, ...] = ()
    """Per node, the MIG manager's state, for classes whose nodes select a MIG config (all-disabled included)."""

    def promised_total(self, resource: str) -> int:
        return dict(self.promised_per_node).get(resource, 0) * len(self.nodes)


@dataclass(frozen=True)
class Verification:
    """Everything `cluster verify` found; it agrees when no finding is an error."""

    cluster: str
    context: str
    server: str
    taken_at: datetime
    nodes: int
    gpu_nodes: int
    classes: tuple[ClassStatus, ...]
    findings: tuple[Finding, ...]
    labels_checked: bool

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def agrees(self) -> bool:
        return self.count("error") == 0


# --- the view every check reads ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _View:
    snapshot: Snapshot
    policy: ClusterGPUPolicy
    expected: Expected
    classes: tuple[ResolvedClass, ...]
    matches: Mapping[str, tuple[str, ...]]
    """Node name -> every class whose nodeSelector selects it."""
    plugin_pods: Mapping[str, tuple[tuple[DaemonSet, Pod], ...]] = field(default_factory=dict)
    """Node name -> the device-plugin pods on it, with their DaemonSet."""
    label_plan: LabelPlan | None = None
    """What the tree's label reconciler does (policy.resolved.node_labels): which labels it owns, which defaults it
    replaces."""

    def members(self, name: str) -> tuple[Node, ...]:
        """The nodes of a class: selected by it and by no other class."""
        return tuple(n for n in self.snapshot.nodes if self.matches[n.name] == (name,))

    @property
    def standalone(self) -> bool:
        return self.policy.spec.device_plugin.deploy == "standalone"

    @property
    def gfd_seen(self) -> bool:
        return any(facts.has_gfd_labels(n) for n in self.snapshot.nodes)


def _view(snapshot: Snapshot, policy: ClusterGPUPolicy, expected: Expected) -> _View:
    resolved = resolve(policy)
    classes = resolved.classes
    matches = {
        node.name: tuple(c.name for c in classes
                         if selectors.matches(selectors.requirements_from(c.node_selector), node.labels))
        for node in snapshot.nodes
    }
    return _View(snapshot, policy, expected, classes, matches, _plugin_pods(snapshot), build_plan(resolved))


def _plugin_pods(snapshot: Snapshot) -> dict[str, tuple[tuple[DaemonSet, Pod], ...]]:
    by_uid = {ds.uid: ds for ds in snapshot.daemonsets if facts.is_device_plugin(ds)}
    found: dict[str, list[tuple[DaemonSet, Pod]]] = {}
    for pod in snapshot.pods:
        owner = pod.controller()
        if owner and owner.kind == "DaemonSet" and owner.uid in by_uid and pod.node_name:
            found.setdefault(pod.node_name, []).append((by_uid[owner.uid], pod))
    return {node: tuple(pairs) for node, pairs in found.items()}


def verify(snapshot: Snapshot, policy: ClusterGPUPolicy, expected: Expected) -> Verification:
    """Compare one read of the cluster with a policy and its compiled tree (``expected.from_tree``)."""
    view = _view(snapshot, policy, expected)
    found = [
        *_membership(view),
        *(f for c in view.classes for f in _class_findings(view, c)),
        *_daemonset_findings(view),
        *_double_plugins(view),
        *_hami_scheduler(view),
        *_pending_pods(view),
    ]
    if not view.gfd_seen and any(facts.is_gpu_node(n) for n in snapshot.nodes):
        found.append(_no_gfd())
    return Verification(
        cluster=policy.metadata.name,
        context=snapshot.context,
        server=snapshot.server,
        taken_at=snapshot.taken_at,
        nodes=len(snapshot.nodes),
        gpu_nodes=sum(1 for n in snapshot.nodes if facts.is_gpu_node(n)),
        classes=tuple(_status(view, c) for c in view.classes),
        findings=tuple(found),
        labels_checked=view.gfd_seen,
    )


def _status(view: _View, resolved: ResolvedClass) -> ClassStatus:
    nodes = view.members(resolved.name)
    if resolved.dra:
        # A DRA class's devices are in ResourceSlices, not in allocatable: its slots are the devices published,
        # per DeviceClass (what claims name; pods ask for an extended resource only where the bridge is on).
        keys = [dra_devices.device_class_of(resolved, o) for o in resolved.offers]
        advertised = tuple((k, dra_devices.published_slots(view.snapshot, nodes, o))
                           for k, o in zip(keys, resolved.offers, strict=True))
    else:
        keys = [o.resource for o in resolved.offers]
        advertised = tuple((o.resource, sum(n.allocatable.get(o.resource, 0) for n in nodes))
                           for o in resolved.offers)
    mig = tuple(_mig_state_of(view, n) for n in nodes) if resolved.mig_config is not None else ()
    return ClassStatus(resolved.name, tuple(n.name for n in nodes), resolved.nodes,
                       tuple((k, o.per_node) for k, o in zip(keys, resolved.offers, strict=True)), advertised, mig)


def _no_gfd() -> Finding:
    return Finding(
        "gfd-labels-missing",
        "no node carries GPU Feature Discovery labels (nvidia.com/gpu.product): GPU labels were not checked; "
        "class membership, allocatable, device-plugin DaemonSets and Pending pods were",
        "deploy GPU Feature Discovery (device-plugin Helm chart: --set gfd.enabled=true; the GPU Operator runs it "
        "by default) so product, replicas and MIG state can be checked too",
        severity="warning",
    )


# --- which class a node belongs to ------------------------------------------------------------------------------


def _membership(view: _View) -> Iterator[Finding]:
    for node in view.snapshot.nodes:
        names = view.matches[node.name]
        product = cloud_vgpu.product_of_node(node.labels, node.capacity)
        if product is not None:
            yield _cloud_node(node, product, names)
        elif len(names) > 1:
            yield Finding(
                "node-in-several-classes",
                f"node {node.name} is selected by classes {_and(names)}: each class's device plugin would "
                "register the same GPUs, and the last to register wins",
                "make the nodeSelectors disjoint: give the classes a key with different values "
                f"(this node has {_describe_labels(node)})",
                subject=f"node/{node.name}",
            )
        elif not names and facts.is_gpu_node(node):
            yield Finding(
                "unclassified-gpu-node",
                f"node {node.name} has GPUs ({_describe_gpus(node)}) but no class selects it, so the policy "
                "neither configures its device plugin nor counts its capacity",
                "add a class whose nodeSelector matches it (e.g. "
                f"{facts.INSTANCE_TYPE}={node.labels.get(facts.INSTANCE_TYPE, '<instance type>')}); "
                "`gpupolicy cluster discover` drafts one",
                subject=f"node/{node.name}",
            )


def _cloud_node(node: Node, product: cloud_vgpu.CloudVgpu, names: tuple[str, ...]) -> Finding:
    """A node the cloud shares with its own vGPU: gpupolicy must not configure it, and does not count it."""
    if names:
        return Finding(
            "cloud-vgpu-node-in-class",
            f"node {node.name} is a {product.name} node, configured by {product.managed_by}, but class "
            f"{_and(names)} selects it: the class's device plugin would register the GPUs beside the cloud's",
            f"narrow the class's nodeSelector to leave the node out (this node has {_describe_labels(node)}); "
            "gpupolicy does not configure cloud vGPU nodes",
            node_class=names[0] if len(names) == 1 else "", subject=f"node/{node.name}")
    return Finding(
        "cloud-vgpu-node",
        f"node {node.name} is a {product.name} node, configured by {product.managed_by}: gpupolicy leaves it "
        "alone (no device plugin, no capacity count, no admission checks of its pods' cloud vGPU resources)",
        "nothing to do; size and admit its pods with the cloud's own tools", "info", subject=f"node/{node.name}")


def _describe_gpus(node: Node) -> str:
    parts = []
    if facts.PRODUCT in node.labels:
        parts.append(f"{facts.PRODUCT}={node.labels[facts.PRODUCT]}")
    parts += [f"allocatable {k} {v}" for k, v in sorted(facts.gpu_resources(node.allocatable).items())]
    return ", ".join(parts) or f"{facts.PRESENT}=true"


def _describe_labels(node: Node) -> str:
    keys = [k for k in (facts.INSTANCE_TYPE, "node-pool", "gpu-pool") if k in node.labels]
    return ", ".join(f"{k}={node.labels[k]}" for k in keys) or "no instance-type or pool label"


# --- one class: its size and each of its nodes ------------------------------------------------------------------


def _class_findings(view: _View, resolved: ResolvedClass) -> Iterator[Finding]:
    nodes = view.members(resolved.name)
    yield from _class_size(resolved, nodes)
    if resolved.dra:
        yield from dra_devices.class_findings(view.snapshot, resolved, nodes, view.expected.device_classes,
                                              {c.name: c for c in view.classes if c.dra},
                                              view.policy.spec.dra.namespace)
    for node in nodes:
        yield from _node_findings(view, resolved, node)


def _class_size(resolved: ResolvedClass, nodes: tuple[Node, ...]) -> Iterator[Finding]:
    selector = _fmt_labels(resolved.node_selector)
    if not nodes:
        yield Finding("class-without-nodes", f"no node matches class {resolved.name}'s nodeSelector ({selector})",
                      "check the selector against `kubectl get nodes --show-labels`, or drop the class",
                      "warning", resolved.name)
    elif resolved.nodes is not None and resolved.nodes != len(nodes):
        yield Finding("node-count-mismatch",
                      f"class {resolved.name} has {len(nodes)} node(s); the spec says nodes: {resolved.nodes}",
                      f"set nodes: {len(nodes)} so the capacity report is right (autoscaled pools may vary)",
                      "warning", resolved.name)


def _node_findings(view: _View, resolved: ResolvedClass, node: Node) -> Iterator[Finding]:
    at = {"node_class": resolved.name, "subject": f"node/{node.name}"}
    if resolved.dra:
        # NVIDIA's DRA driver publishes the class's devices in ResourceSlices, not in the node's allocatable (they
        # are compared per class, dra_devices): here only the labels and taints the tree relies on are checked.
        yield from _required_labels(view, resolved, node, at)
        yield from _taints(resolved, node, at)
        return
    yield from dra_devices.unexpected(view.snapshot, node, resolved.name)
    if not facts.is_gpu_node(node):
        yield Finding("class-selects-non-gpu-node",
                      f"class {resolved.name} selects node {node.name}, which shows no GPU (no GFD labels, no "
                      "nvidia.com/* capacity)",
                      "narrow the nodeSelector to GPU nodes, or check the node's driver and device plugin", **at)
        return
    yield from _allocatable(resolved, node, at)
    yield from _unexpected_resources(resolved, node, at)
    yield from _required_labels(view, resolved, node, at)
    yield from _taints(resolved, node, at)
    if resolved.mig_config is not None:
        yield from _mig_state(view, resolved, node, at)
    if resolved.vgpu is not None:
        yield from _hami_registration(resolved, node, at)
    if facts.has_gfd_labels(node):
        yield from _gfd_labels(resolved, node, at)
        yield from _memory(resolved, node, at)
        yield from _driver(resolved, node, at)
    elif view.gfd_seen:
        yield Finding("gfd-labels-missing",
                      f"node {node.name} has no GPU Feature Discovery labels while other GPU nodes do",
                      "check that the GFD DaemonSet tolerates and selects this node", "warning", **at)


def _allocatable(resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    for offer in resolved.offers:
        have = node.allocatable.get(offer.resource, 0)
        if have == offer.per_node:
            continue
        capacity = node.capacity.get(offer.resource, 0)
        yield Finding(
            "allocatable-mismatch",
            f"{offer.resource}: node {node.name} advertises {have} allocatable, the class promises "
            f"{offer.per_node} ({offer.describe()})",
            _allocatable_hint(resolved, offer, have, capacity),
            **at,
        )


def _allocatable_hint(resolved: ResolvedClass, offer: Offer, have: int, capacity: int) -> str:
    if resolved.vgpu is not None and have == offer.devices_per_node:
        return ("the node advertises whole GPUs: NVIDIA's device plugin serves it instead of HAMi's; keep only the "
                f"tree's hami-device-plugin-{resolved.name} DaemonSet on it")
    if resolved.vgpu is not None and have == 0:
        return f"nothing advertises it: is the class's HAMi device plugin (hami-device-plugin-{resolved.name}) running?"
    if offer.mig_profile and have == 0:
        return ("no MIG device of this profile is advertised: check nvidia.com/mig.config.state and that the "
                "device plugin runs with the class's MIG strategy")
    if capacity > have:
        return (f"capacity is {capacity} but only {have} allocatable: the device plugin reports "
                f"{capacity - have} device(s) unhealthy; check the plugin log and nvidia-smi on the node")
    if offer.replicas > 1 and have == offer.devices_per_node:
        return ("the plugin advertises whole GPUs: the sharing config has not taken effect; make the class's "
                "device-plugin DaemonSet run the tree's ConfigMap (see its findings); the plugin reads its "
                "config only at start")
    if have == 0:
        return "nothing advertises it: is the class's device plugin running on this node?"
    return "the node's GPUs or the plugin's config differ from the class: compare gpu.count and the sharing config"


def _unexpected_resources(resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    offered = {o.resource for o in resolved.offers}
    for resource, count in sorted(facts.gpu_resources(node.allocatable).items()):
        if resource in offered or count == 0:
            continue
        plugin_made = resource.startswith(_PLUGIN_RESOURCES)
        yield Finding(
            "unexpected-gpu-resource",
            f"node {node.name} advertises {resource}: {count}, which class {resolved.name} does not offer "
            f"(it offers {_and(sorted(offered))})",
            "a GPU outside the MIG layout, or a plugin running another config; check the node's DaemonSets"
            if plugin_made else "another device plugin (e.g. HAMi) registers it beside NVIDIA's",
            "error" if plugin_made else "warning",
            **at,
        )


_LABEL_WHY = {
    labels.DEVICE_PLUGIN_CONFIG: "the GPU Operator's config-manager picks the class's config by it; without "
                                       "it the node gets the empty config (whole GPUs)",
    labels.MIG_CONFIG: "mig-manager applies the MIG layout this label names",
    labels.MPS_CAPABLE: "the MPS control daemon runs only on nodes labelled nvidia.com/mps.capable=true",
    labels.DEVICE_PLUGIN_DEPLOY: "the GPU Operator runs its device plugin beside HAMi's unless it is false",
}


def _required_labels(view: _View, resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    """The labels the compiled output needs on the node (REPORT.md lists them with who sets each): the ones the
    tree's label reconciler owns, checked for ownership conflicts, and the others, which their owner sets."""
    for key, want in resolved.required_labels.items():
        have = node.labels.get(key)
        if have == want:
            continue
        if key in resolved.reconciled_labels:
            yield _reconciled_label(view, resolved, node, key, have, want, at)
            continue
        yield Finding(
            "node-label-missing",
            f"node {node.name} has {key}={have}, class {resolved.name} needs {want}" if have is not None
            else f"node {node.name} lacks {key}={want}: {_LABEL_WHY.get(key, 'the class needs it')}",
            f"{label_setter(resolved, key)} sets it: check that it runs and reaches this node",
            **at,
        )


def _reconciled_label(view: _View, resolved: ResolvedClass, node: Node, key: str, have: str | None, want: str,
                      at: Mapping[str, str]) -> Finding:
    """A label of the label plan that the node lacks or carries with another value, and who set that value."""
    namespace = view.policy.spec.admission.namespace
    logs = f"kubectl -n {namespace} logs deployment/{reconciler_target.NAME}"
    if have is None:
        return Finding("node-label-missing",
                       f"node {node.name} lacks {key}={want}: {_LABEL_WHY.get(key, 'the class needs it')}; "
                       "gpupolicy's label reconciler sets it",
                       f"check that the tree's node-labels/ is applied and its reconciler runs ({logs})", **at)
    owners = node.label_owners(key)
    others = [o for o in owners if o != FIELD_MANAGER]
    if view.label_plan is not None and view.label_plan.overrides(key, have, others):
        return Finding("node-label-missing",
                       f"node {node.name} carries the GPU Operator's default {key}={have}, not {want}: "
                       f"{_LABEL_WHY.get(key, 'the class needs it')}; gpupolicy's label reconciler replaces the "
                       "default (the operator sets it only where the label is missing, and never changes it back)",
                       f"check that the tree's node-labels/ is applied and its reconciler runs ({logs})", **at)
    if node.managers is not None and owners == (FIELD_MANAGER,):
        return Finding("node-label-stale",
                       f"{key} is {have!r} on node {node.name}, set by gpupolicy's label reconciler from another "
                       f"label plan; class {resolved.name}'s plan wants {want!r}",
                       f"apply the tree: the reconciler that runs is not the one of node-labels/ ({logs})", **at)
    writer = (", ".join(others) if others else "a writer the API server did not record") \
        if node.managers is not None else f"a writer verify cannot name ({_NO_MANAGED_FIELDS})"
    return Finding(
        "node-label-conflict",
        f"{key} is {have!r} on node {node.name}, set by {writer}; class {resolved.name}'s label plan wants {want!r}. "
        "gpupolicy's label reconciler never overwrites a value another writer set (its LabelConflict event and "
        "gpupolicy_node_label_conflicts report it too)",
        f"if {want!r} is right, stop the other writer (node pool labels, provisioning) and remove its value "
        f"(kubectl label node {node.name} {key}-): the reconciler then sets {key}={want}; if {have!r} is right, "
        f"change class {resolved.name} in the spec",
        **at,
    )


def _taints(resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    """The class's taints against the node's: admission counts a tainted class as out of reach of pods that do
    not tolerate it, so a missing taint lets such pods land where their tenant may not be, and an undeclared one
    makes pods admission let through pend."""
    have = {(t.key, t.value, t.effect) for t in node.taints}
    declared = {(t.key, t.value, t.effect) for t in resolved.taints}
    for taint in resolved.taints:
        if (taint.key, taint.value, taint.effect) in have:
            continue
        scheduling = taint.effect != "PreferNoSchedule"
        yield Finding(
            "node-taint-missing",
            f"node {node.name} lacks the taint {taint.describe()} of class {resolved.name}"
            + (": admission counts the class as out of reach of pods that do not tolerate it, and such pods may "
               "land here" if scheduling else ""),
            f"kubectl taint nodes {node.name} {taint.describe()} (or set it in the node pool's taints)",
            "error" if scheduling else "warning", **at)
    for taint in facts.lasting_taints(node):
        if taint.effect == "PreferNoSchedule" or (taint.key, taint.value, taint.effect) in declared:
            continue
        yield Finding(
            "node-taint-undeclared",
            f"node {node.name} carries the taint {taint.describe()}, which class {resolved.name} does not declare: "
            "admission counts the class as a place pods may land without tolerating it, and such pods pend",
            f"add it to the class (taints: [{{key: {taint.key}, "
            + (f"value: {taint.value}, " if taint.value else "") + f"effect: {taint.effect}}}]), or remove it from "
            f"the node (kubectl taint nodes {node.name} {taint.key}:{taint.effect}-)",
            "warning", **at)


# --- GPU Feature Discovery labels -------------------------------------------------------------------------------


def _gfd_labels(resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    expected = {k: v for k, v in resolved.gfd_labels.items()
                if k not in resolved.node_selector and k != facts.PRESENT}
    for key, want in expected.items():
        # Per-profile MIG labels exist only once the layout is applied (mig-config-not-applied says when it is
        # not), and an old GFD named some differently from the resource (fixtures: mig-3g.21gb labels for
        # nvidia.com/mig-3g.20gb): only labels that exist are compared.
        present_only = key.startswith(MIG_PREFIX)
        if key.endswith(".product") and (key in node.labels or not present_only):
            yield from _product(resolved, node, key, want, at)
        elif not key.endswith(".product"):
            yield from _label(resolved, node, key, want, at, only_if_present=present_only)
    yield from _sharing_strategy(resolved, node, at)


def _label(resolved: ResolvedClass, node: Node, key: str, want: str, at: Mapping[str, str],
           only_if_present: bool = False) -> Iterator[Finding]:
    have = node.labels.get(key)
    if have == want or (have is None and only_if_present):
        return
    shown = "missing" if have is None else have
    yield Finding("gfd-label-mismatch", f"{key} is {shown} on node {node.name}, class {resolved.name} expects {want}",
                  _label_hint(key), **at)


def _label_hint(key: str) -> str:
    if key.endswith(".count"):
        return "fix gpu.count (or the MIG layout) in the spec, or check with nvidia-smi whether a GPU is missing"
    if key.endswith((".replicas", ".sharing-strategy")):
        return ("GFD labels the config it runs with: make GFD read the class's config (the device-plugin chart "
                "shares it with gfd.enabled=true) and restart it")
    if key == facts.MIG_STRATEGY:
        return "run the device plugin and GFD with the class's migStrategy (the tree's config sets it)"
    return "compare the node with the class; GFD relabels within a minute of a config change"


def _product(resolved: ResolvedClass, node: Node, key: str, want: str, at: Mapping[str, str]) -> Iterator[Finding]:
    have = node.labels.get(key)
    if have is None:
        yield from _label(resolved, node, key, want, at)
        return
    w, h = facts.parse_product(want), facts.parse_product(have)
    if not same_model(w.model, h.model):
        yield Finding("gpu-model-mismatch",
                      f"node {node.name} has {h.model} GPUs, class {resolved.name} is for {w.model}",
                      "narrow the class's nodeSelector, or add a class for this GPU", **at)
    elif w.mig_profile != h.mig_profile:
        yield Finding("gfd-label-mismatch",
                      f"{key} is {have} on node {node.name}, class {resolved.name} expects {want}: the MIG layout "
                      "the class wants is not what GFD sees", "check nvidia.com/mig.config and its state", **at)
    elif w.shared != h.shared:
        yield Finding("gfd-label-mismatch", _shared_message(resolved, node, key, have, want, w.shared),
                      "make GFD run with the class's config (GFD appends -SHARED when its config gives replicas > 1 "
                      "and no rename) and restart it", **at)


def _shared_message(resolved: ResolvedClass, node: Node, key: str, have: str, want: str, shared: bool) -> str:
    head = f"{key} is {have} on node {node.name}, class {resolved.name} expects {want}"
    if shared:
        return f"{head}: {resolved.mode_name} is not active for GPU Feature Discovery on this node"
    return f"{head}: the GPUs are shared although the class keeps them {resolved.mode_name}"


def same_model(a: str, b: str) -> bool:
    """Whether two product names are one GPU model (``A100-SXM4-40GB`` and ``NVIDIA-A100-SXM4-40GB`` are)."""
    if a.lower() == b.lower() or a.lower().removeprefix("nvidia-") == b.lower().removeprefix("nvidia-"):
        return True
    found_a, found_b = catalog.lookup(a), catalog.lookup(b)
    return found_a is not None and found_a is found_b


def _sharing_strategy(resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    """nvidia.com/gpu.sharing-strategy exists from GFD v0.15; older nodes simply lack it."""
    if resolved.mode == "mig":
        return
    offer = resolved.offers[0]
    # HAMi shares without telling GFD, which labels the GPUs as unshared.
    shared = offer.shared and resolved.vgpu is None
    want = ("mps" if resolved.mode == "mps" else "time-slicing") if shared else "none"
    yield from _label(resolved, node, facts.SHARING_STRATEGY, want, at, only_if_present=True)


def _hami_registration(resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    """What HAMi's device plugin registered on the node (hami.io/node-nvidia-register) against the class: the
    scheduler places vGPUs by these figures, not by the spec (pkg/device/nvidia/device.go GetNodeDevices)."""
    vgpu = resolved.vgpu
    assert vgpu is not None
    plugin = f"hami-device-plugin-{resolved.name}"
    gpus = hami.registered_on(node.annotations)
    if gpus is None:
        broken = hami.NODE_REGISTER in node.annotations
        yield Finding("hami-node-not-registered",
                      f"node {node.name} has {'an unreadable' if broken else 'no'} {hami.NODE_REGISTER} annotation: "
                      "HAMi's device plugin has not registered its GPUs, so hami-scheduler places no vGPU pod there",
                      f"check the {plugin} pod on the node (its device-plugin container's log)", **at)
        return
    # The node's own figure (GFD's nvidia.com/gpu.memory, which is NVML's total, as HAMi's) or the spec's stated
    # one; the catalog's can differ from NVML by an ECC reserve, so it is not compared.
    stated = resolved.spec.gpu.memory
    physical = facts.memory_mib(node.labels) or (int(stated) if stated is not None else None)
    want_memory = hami.registered_memory(physical, vgpu.memory_scaling) if physical else None
    wrong = []
    if len(gpus) != resolved.gpu_count:
        wrong.append(f"{len(gpus)} GPU(s) registered, the class has {resolved.gpu_count}")
    for key, want, have in (("count", vgpu.split_count, {g.count for g in gpus}),
                            ("devcore", vgpu.cores, {g.devcore for g in gpus}),
                            ("mode", hami.HAMI_CORE, {g.mode for g in gpus}),
                            ("devmem", want_memory, {g.devmem for g in gpus})):
        if want is not None and have != {want}:
            wrong.append(f"{key} {_and(sorted(map(str, have)))} where the class gives {want}")
    if wrong:
        yield Finding("hami-registration-mismatch",
                      f"node {node.name}: HAMi registered its GPUs otherwise than class {resolved.name} configures "
                      f"them: {'; '.join(wrong)}",
                      f"make sure the node runs {plugin} with the tree's ConfigMap (no HAMi chart plugin beside it), "
                      "and that gpu.count and gpu.memory match the node", **at)
    sick = sorted(g.id for g in gpus if not g.health)
    if sick:
        yield Finding("hami-gpu-unhealthy", f"node {node.name}: HAMi reports GPU(s) {_and(sick)} unhealthy, so "
                      "hami-scheduler places no vGPU on them", "check nvidia-smi and the kernel log (Xid errors) on "
                      "the node", "warning", **at)


def _hami_scheduler(view: _View) -> Iterator[Finding]:
    """HAMi's scheduler runs with the device config the tree's Helm values carry (the names must agree)."""
    want = view.expected.hami_device_config
    if want is None:
        return
    settings = view.policy.spec.hami
    name = f"{settings.fullname}-scheduler-device"
    live = next((cm for cm in view.snapshot.configmaps
                 if (cm.namespace, cm.name) == (settings.namespace, name)), None)
    install = (f"let GitOps sync HAMi's release from the tree (Flux: the HelmRelease {settings.release_name} of its "
               "flux/, in flux-system; Argo CD: the Application rendering the chart with its hami-values.yaml), or "
               f"without GitOps: {hami_target.install_command(settings)}")
    if live is None:
        yield Finding("hami-scheduler-not-installed",
                      f"ConfigMap {settings.namespace}/{name} does not exist: HAMi's scheduler is not installed (or "
                      "under another release name), so no vGPU pod is ever placed", install,
                      subject=f"configmap/{settings.namespace}/{name}")
    elif _yaml(live.data.get("device-config.yaml", "")) != _yaml(want):
        yield Finding("hami-scheduler-config-drift",
                      f"HAMi's scheduler runs with another device-config.yaml than {VALUES_PATH} gives "
                      f"(ConfigMap {settings.namespace}/{name}): its resource names or defaults may disagree with "
                      "the vgpu classes' device plugins", f"upgrade the release with the tree's values: {install}; "
                      "the scheduler reads the file at start, so its pods restart with it",
                      subject=f"configmap/{settings.namespace}/{name}")


def _yaml(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _mig_state_of(view: _View, node: Node) -> NodeMigState:
    state = node.labels.get(facts.MIG_CONFIG_STATE)
    since = node.label_set_at(facts.MIG_CONFIG_STATE) if state is not None else None
    seconds = max(int((view.snapshot.taken_at - since).total_seconds()), 0) if since is not None else None
    return NodeMigState(node.name, node.labels.get(labels.MIG_CONFIG), state, seconds)


def _mig_state(view: _View, resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    """What the MIG manager reports for a node of a class that selects a MIG config (all-disabled included), and
    for how long: a state held past MIG_STUCK_SECONDS is stuck."""
    found = _mig_state_of(view, node)
    if found.state == labels.MIG_STATE_SUCCESS:
        return
    held = (f" for {human_duration(found.seconds)}" if found.seconds is not None
            else f" for an unknown time ({_NO_MANAGED_FIELDS})" if found.state is not None else "")
    head = f"{facts.MIG_CONFIG_STATE} is {found.state or 'missing'} on node {node.name}{held}"
    plugin = view.policy.spec.device_plugin
    operator = plugin.deploy == "gpu-operator"
    manager = "the GPU Operator's MIG manager" if operator else "the tree's nvidia-mig-manager DaemonSet"
    namespace = plugin.operator.namespace if operator else plugin.namespace
    logs = f"kubectl -n {namespace} logs -l app=nvidia-mig-manager --tail=100 (the pod on {node.name})"
    if found.state is None:
        yield Finding("mig-config-not-applied", f"{head}: no MIG manager has reported on it, so class "
                      f"{resolved.name}'s config {resolved.mig_config} is not applied",
                      f"check that {manager} runs on the node and that it carries "
                      f"{labels.MIG_CONFIG}={resolved.mig_config}", **at)
    elif found.state in ("pending", "rebooting") and found.seconds is not None and found.seconds < MIG_STUCK_SECONDS:
        yield Finding("mig-config-in-progress", f"{head}: the MIG manager is applying {found.config}; the class's "
                      "GPU clients return once it reports success", "wait; verify again in a few minutes",
                      "warning", **at)
    elif found.state in ("pending", "rebooting"):
        yield Finding("mig-config-not-applied", f"{head}: the MIG manager is stuck applying {found.config} (it "
                      "waits at most 5 minutes for each group of GPU clients to leave)",
                      f"read its log ({logs}); a pod or host process still on the GPU blocks it: drain the node, "
                      "then restart the MIG manager pod there (docs/operations.md, MIG reconfiguration)", **at)
    else:
        yield Finding("mig-config-not-applied", f"{head}: the MIG manager could not apply {found.config}",
                      f"read its log ({logs}); drain the node if GPU clients block the change, then restart the "
                      "MIG manager pod there: it retries (setting the same label again does not)", **at)


def _driver(resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    """The node's NVIDIA driver, as GFD reports it, against the class's stated gpu.driverVersion and against what
    the class needs from the driver (policy/hardware/drivers.py: MIG layouts, MPS memory limits)."""
    text = facts.driver_version(node.labels)
    if text is None:
        return
    source = labels.DRIVER_VERSION_FULL if labels.DRIVER_VERSION_FULL in node.labels else \
        "/".join(labels.DRIVER_VERSION_PARTS)
    try:
        driver = drivers.parse_driver(text)
    except ValueError:
        yield Finding("driver-version-unreadable", f"node {node.name} reports NVIDIA driver {text!r} ({source}), "
                      "which is not a version such as 550.54.15: the driver gates were not checked",
                      "check GPU Feature Discovery on the node", "warning", **at)
        return
    stated = resolved.spec.gpu.driver_version
    if stated is not None and drivers.parse_driver(stated) != driver[: len(drivers.parse_driver(stated))]:
        yield Finding("driver-version-mismatch", f"node {node.name} runs NVIDIA driver {text} ({source}), class "
                      f"{resolved.name} states {stated}: the spec's driver checks were made for {stated}",
                      f"set gpu.driverVersion: \"{text}\" in class {resolved.name} (or the branch "
                      f"\"{driver[0]}\"), or bring the node to {stated}", "warning", **at)
    for gate in resolved.driver_gates:
        if gate.satisfied_by(driver) is False:
            yield Finding("driver-too-old", f"node {node.name} runs NVIDIA driver {text} ({source}): {gate.what} "
                          f"needs {gate.release} or newer",
                          f"upgrade the node's driver to {gate.release} or newer, or {gate.otherwise} in class "
                          f"{resolved.name}", **at)


def _memory(resolved: ResolvedClass, node: Node, at: Mapping[str, str]) -> Iterator[Finding]:
    measured = facts.memory_mib(node.labels)
    sized = resolved.sizing
    if sized is None or measured is None or resolved.mode == "mig" or measured >= sized.total_mib:
        return
    yield Finding("gpu-memory-below-sizing",
                  f"node {node.name} reports {measured} MiB per GPU, class {resolved.name} was sized for "
                  f"{sized.total_mib} MiB ({sized.explain()})",
                  f"set gpu.memory: {measured}Mi so sizing uses what the node has", "warning", **at)


# --- device-plugin DaemonSets and ConfigMaps --------------------------------------------------------------------


def _daemonset_findings(view: _View) -> Iterator[Finding]:
    live = {(ds.namespace, ds.name): ds for ds in view.snapshot.daemonsets}
    for want in view.expected.daemonsets:
        have = live.get((want.daemonset.namespace, want.daemonset.name))
        if have is None:
            yield _missing_daemonset(want)
            continue
        yield from _workload_spec(want.node_class, want.daemonset, have)
        yield from _rollout(want.node_class, have)
        if want.is_plugin:
            yield from _plugin_on_nodes(view, want, have)
    yield from _deployment_findings(view)
    yield from _configmaps(view)
    yield from _unmanaged(view, set(live) - {(d.daemonset.namespace, d.daemonset.name)
                                             for d in view.expected.daemonsets})


def _missing_daemonset(want: ExpectedDaemonSet) -> Finding:
    ds = want.daemonset
    return Finding("daemonset-missing", f"DaemonSet {ds.key} of the compiled tree does not exist",
                   "apply the compiled tree (kubectl apply -k out/<cluster>, or let Argo CD / Flux sync it)",
                   node_class=want.node_class, subject=f"daemonset/{ds.key}")


def _workload_spec(node_class: str, want: DaemonSet | Deployment, have: DaemonSet | Deployment
                   ) -> Iterator[Finding]:
    """Config and image drift of one of the tree's workloads (a DaemonSet or a Deployment)."""
    deployment = isinstance(have, Deployment)
    config_code: FindingCode = "deployment-config-mismatch" if deployment else "daemonset-config-mismatch"
    image_code: FindingCode = "deployment-image-mismatch" if deployment else "daemonset-image-mismatch"
    title = type(have).__name__
    at = {"node_class": node_class, "subject": f"{title.lower()}/{have.key}"}
    if set(want.config_maps) != set(have.config_maps):
        yield Finding(config_code,
                      f"{title} {have.key} mounts ConfigMap {_and(have.config_maps) or 'none'}, the tree says "
                      f"{_and(want.config_maps)}: it runs another config than the policy's",
                      f"sync the compiled tree; the content-named ConfigMap then rolls the {title} by itself", **at)
    images = {c.name: c.image for c in have.containers}
    for container in want.containers:
        if images.get(container.name, container.image) != container.image:
            yield Finding(image_code,
                          f"{title} {have.key} runs {images[container.name]} in {container.name}, the tree says "
                          f"{container.image}", f"sync the compiled tree, or set {_image_field(want)} to what runs",
                          **at)


def _image_field(want: DaemonSet | Deployment) -> str:
    """The spec field that chose a workload's image."""
    if isinstance(want, Deployment):
        return "admission.image (the reconciler runs the webhook's image)"
    if want.name.startswith(f"{mig_manager.APP}-"):
        return "devicePlugin.migManager.image"
    if want.name.startswith(f"{hami_target.PLUGIN_APP}-"):
        return "hami.image"
    return "devicePlugin.image"


def _deployment_findings(view: _View) -> Iterator[Finding]:
    """The tree's controllers (the node-label reconciler): missing, drifted, or not available."""
    live = {(d.namespace, d.name): d for d in view.snapshot.deployments}
    for want in view.expected.deployments:
        have = live.get((want.namespace, want.name))
        at = {"node_class": "", "subject": f"deployment/{want.key}"}
        if have is None:
            yield Finding("deployment-missing", f"Deployment {want.key} of the compiled tree does not exist",
                          "apply the compiled tree (kubectl apply -k out/<cluster>, or let Argo CD / Flux sync it)",
                          **at)
            continue
        yield from _workload_spec("", want, have)
        stale = have.observed_generation < have.generation
        if stale or have.available < have.replicas or have.updated < have.replicas:
            yield Finding("deployment-not-ready",
                          f"Deployment {have.key} is not available: {have.available} of {have.replicas} replica(s) "
                          f"available, {have.updated} updated" + (
                              f", generation {have.generation} not yet observed ({have.observed_generation})"
                              if stale else ""),
                          f"kubectl -n {have.namespace} rollout status deployment/{have.name}; look at its pods",
                          **at)


def _rollout(node_class: str, ds: DaemonSet) -> Iterator[Finding]:
    stale = ds.observed_generation < ds.generation
    if not stale and ds.desired == ds.updated == ds.available:
        return
    yield Finding(
        "daemonset-rollout-incomplete",
        f"DaemonSet {ds.key} is not rolled out: desired {ds.desired}, updated {ds.updated}, available "
        f"{ds.available}" + (f", generation {ds.generation} not yet observed ({ds.observed_generation})"
                             if stale else ""),
        f"kubectl -n {ds.namespace} rollout status daemonset/{ds.name}; look at the pods that are not ready",
        node_class=node_class, subject=f"daemonset/{ds.key}",
    )


def _plugin_on_nodes(view: _View, want: ExpectedDaemonSet, have: DaemonSet) -> Iterator[Finding]:
    for node in view.members(want.node_class):
        pods = [pod for ds, pod in view.plugin_pods.get(node.name, ()) if ds.uid == have.uid]
        at = {"node_class": want.node_class, "subject": f"node/{node.name}"}
        if not pods:
            yield Finding("device-plugin-not-running", f"no pod of DaemonSet {have.key} runs on node {node.name}",
                          "check the node's taints against the DaemonSet's tolerations, and its nodeSelector",
                          **at)
        for pod in pods:
            if not pod.ready:
                reasons = sorted({c.waiting_reason for c in pod.containers if c.waiting_reason})
                yield Finding("device-plugin-not-ready",
                              f"device-plugin pod {pod.key} on node {node.name} is not ready"
                              + (f" ({', '.join(reasons)})" if reasons else ""),
                              f"kubectl -n {pod.namespace} logs {pod.name}", **at)


def _configmaps(view: _View) -> Iterator[Finding]:
    live = {(cm.namespace, cm.name): cm for cm in view.snapshot.configmaps}
    for want in view.expected.configmaps:
        at = {"node_class": _class_of_configmap(view, want.name), "subject": f"configmap/{want.namespace}/{want.name}"}
        have = live.get((want.namespace, want.name))
        if have is None:
            yield Finding("configmap-missing", f"ConfigMap {want.namespace}/{want.name} of the compiled tree does "
                          "not exist", "apply the compiled tree; pods mounting it cannot start without it", **at)
        elif have is not None and dict(have.data) != dict(want.data):
            changed = sorted(k for k in {*have.data, *want.data} if have.data.get(k) != want.data.get(k))
            yield Finding("configmap-modified", f"ConfigMap {want.namespace}/{want.name} differs from the tree in "
                          f"key(s) {_and(changed)}: it was edited in the cluster",
                          "edit the spec and recompile instead; a content-named ConfigMap must not change", **at)


def _class_of_configmap(view: _View, name: str) -> str:
    owners = [d.node_class for d in view.expected.daemonsets if name in d.daemonset.config_maps]
    return owners[0] if len(set(owners)) == 1 else ""


def _unmanaged(view: _View, extra: set[tuple[str, str]]) -> Iterator[Finding]:
    for ds in view.snapshot.daemonsets:
        if (ds.namespace, ds.name) not in extra or not facts.is_device_plugin(ds):
            continue
        if not view.standalone and any(o.kind == "ClusterPolicy" for o in ds.owners):
            continue  # the GPU Operator's own plugin is the one the policy configures
        if facts.is_hami_plugin(ds):
            what, fix = "HAMi's device plugin", ("switch HAMi's chart plugin off: upgrade the release with the tree's "
                                                 f"{VALUES_PATH} (devicePlugin.enabled: false)")
        else:
            what, fix = "an NVIDIA device plugin", (f"once the tree's DaemonSets run, delete it (kubectl -n "
                                                    f"{ds.namespace} delete daemonset {ds.name}) or narrow its "
                                                    "nodeSelector to nodes no class selects")
        yield Finding(
            "unmanaged-device-plugin",
            f"DaemonSet {ds.key} runs {what} on {ds.desired} node(s) but is not in the compiled tree",
            fix, "warning", subject=f"daemonset/{ds.key}",
        )


def _double_plugins(view: _View) -> Iterator[Finding]:
    for node in view.snapshot.nodes:
        sets = sorted({ds.key for ds, _ in view.plugin_pods.get(node.name, ())})
        if len(sets) < 2:
            continue
        names = view.matches[node.name]
        yield Finding(
            "multiple-device-plugins",
            f"node {node.name} runs pods of {len(sets)} device-plugin DaemonSets ({_and(sets)}): each registers "
            "the same GPUs with the kubelet, and the last to register wins",
            "keep only the tree's DaemonSet on this node: delete the other or narrow its nodeSelector",
            node_class=names[0] if len(names) == 1 else "", subject=f"node/{node.name}",
        )


# --- Pending pods and the rollouts they block --------------------------------------------------------------------


@dataclass(frozen=True)
class _PendingPod:
    pod: Pod
    requests: tuple[tuple[str, int], ...]
    finding: Finding


def _pending_pods(view: _View) -> Iterator[Finding]:
    engine = Engine(offers.build_admission_policy(view.policy))
    explained = []
    for pod in view.snapshot.pods:
        if pod.phase != "Pending" or pod.node_name:
            continue  # a pod with a node is past scheduling (pulling images, say): not ours to explain
        obj = _pod_object(pod)
        workload = find_workload(obj)
        requests = read_gpu_request(workload).totals if workload else ()
        if requests:
            explained.append(_PendingPod(pod, requests, _explain_pending(view, engine, pod, obj, requests)))
    yield from (p.finding for p in explained)
    yield from _stuck_rollouts(view, explained)


def _pod_object(pod: Pod) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "labels": dict(pod.labels)},
            "spec": dict(pod.spec)}


def _explain_pending(view: _View, engine: Engine, pod: Pod, obj: dict[str, Any],
                     requests: tuple[tuple[str, int], ...]) -> Finding:
    tenants = engine.tenants_for({}, namespace=pod.namespace)
    decision = engine.evaluate(obj, tenants=tenants, operation="CREATE")
    never = [d for d in decision.diagnostics if d.code in _UNSCHEDULABLE_RULES]
    head = f"pod {pod.key} has been Pending for {_age(view, pod.created)} asking for {_fmt_requests(requests)}"
    details = (*_event_lines(view, pod), *_owner_lines(view, pod))
    at = {"subject": f"pod/{pod.key}", "details": details}
    if never:
        rule = never[0]
        return Finding("pending-pod-unsatisfiable", f"{head}, which no node class can satisfy: {rule.message}",
                       rule.hint, **at)
    candidates = _candidates(engine, obj, requests)
    short = [(name, resource, advertised, promised)
             for name in candidates for resource, _ in requests
             for advertised, promised in [_supply(view, name, resource)] if advertised < promised]
    if short:
        gaps = "; ".join(f"class {n} promises {p} {r}, its nodes advertise {a}" for n, r, a, p in short)
        return Finding("pending-pod-capacity-not-applied",
                       f"{head}: the policy places it on {_and(candidates)}, but {gaps}",
                       "fix the class's allocatable and DaemonSet findings; the scheduler retries on its own", **at)
    supply = ", ".join(f"{r} {sum(_supply(view, n, r)[0] for n in candidates)}" for r, _ in requests)
    return Finding("pending-pod-cluster-full",
                   f"{head}: the policy places it on {_and(candidates)}, whose nodes advertise all they promise "
                   f"({supply}); they are in use, or the pod's other constraints rule them out",
                   "free slots, add nodes to one of those classes, or raise their replicas; the scheduler's "
                   "message below names the constraint", "warning", **at)


def _candidates(engine: Engine, obj: dict[str, Any], requests: tuple[tuple[str, int], ...]) -> tuple[str, ...]:
    """The classes the engine would let the pod land on: placement allows them and they offer enough."""
    workload = find_workload(obj)
    placement = read_placement(workload) if workload else None
    views: tuple[ClassView, ...] = engine.classes
    return tuple(v.name for v in views
                 if v.fits(requests) and (placement is None or placement_conflict(placement, v) is None))


def _supply(view: _View, name: str, resource: str) -> tuple[int, int]:
    """(advertised, promised) of one resource over a class's nodes."""
    nodes = view.members(name)
    resolved = next(c for c in view.classes if c.name == name)
    offer = resolved.offer(resource)
    promised = offer.per_node * len(nodes) if offer else 0
    return sum(n.allocatable.get(resource, 0) for n in nodes), promised


def _event_lines(view: _View, pod: Pod) -> tuple[str, ...]:
    events = sorted((e for e in view.snapshot.events if _about(e, pod)),
                    key=lambda e: e.last_seen or view.snapshot.taken_at, reverse=True)
    return tuple(_event_line(view, e) for e in events)


def _about(event: Event, pod: Pod) -> bool:
    if event.involved_kind != "Pod" or event.reason != "FailedScheduling":
        return False
    if event.involved_uid and pod.uid:
        return event.involved_uid == pod.uid
    return (event.namespace, event.involved_name) == (pod.namespace, pod.name)


def _event_line(view: _View, event: Event) -> str:
    """Like kubectl describe: ``FailedScheduling (x1303 over 4d12h, last 3m ago): 0/8 nodes are available: ...``."""
    seen = []
    if event.count > 1 and event.first_seen:
        seen.append(f"x{event.count} over {_age(view, event.first_seen)}")
    seen.append(f"last {_age(view, event.last_seen)} ago")
    return f"FailedScheduling ({', '.join(seen)}): {event.message}"


def _owner_lines(view: _View, pod: Pod) -> tuple[str, ...]:
    chain = [f"Pod {pod.key}"]
    rs = _replicaset_of(view, pod)
    owner = pod.controller()
    if rs is not None:
        chain.append(f"ReplicaSet {rs.name}")
        deployment = _deployment_of(view, rs)
        if deployment is not None:
            chain.append(f"Deployment {deployment.name}")
    elif owner is not None:
        chain.append(f"{owner.kind} {owner.name}")
    return (" -> ".join(chain),) if len(chain) > 1 else ()


def _replicaset_of(view: _View, pod: Pod) -> ReplicaSet | None:
    owner = pod.controller()
    if owner is None or owner.kind != "ReplicaSet":
        return None
    return next((rs for rs in view.snapshot.replicasets
                 if rs.namespace == pod.namespace and (rs.uid == owner.uid or rs.name == owner.name)), None)


def _deployment_of(view: _View, rs: ReplicaSet) -> Deployment | None:
    owner = rs.controller()
    if owner is None or owner.kind != "Deployment":
        return None
    return next((d for d in view.snapshot.deployments
                 if d.namespace == rs.namespace and (d.uid == owner.uid or d.name == owner.name)), None)


def _stuck_rollouts(view: _View, pending: list[_PendingPod]) -> Iterator[Finding]:
    by_deployment: dict[str, tuple[Deployment, list[tuple[ReplicaSet, _PendingPod]]]] = {}
    for item in pending:
        rs = _replicaset_of(view, item.pod)
        deployment = _deployment_of(view, rs) if rs else None
        if rs is None or deployment is None or not _rolling(deployment):
            continue
        by_deployment.setdefault(deployment.key, (deployment, []))[1].append((rs, item))
    for deployment, blocked in by_deployment.values():
        yield _stuck(view, deployment, blocked)


def _rolling(deployment: Deployment) -> bool:
    progressing = next((c for c in deployment.conditions if c.type == "Progressing"), None)
    return (deployment.updated < deployment.replicas or deployment.available < deployment.replicas
            or (progressing is not None and progressing.status == "False"))


def _stuck(view: _View, deployment: Deployment, blocked: list[tuple[ReplicaSet, _PendingPod]]) -> Finding:
    new = blocked[0][0]
    waiting = ", ".join(f"{p.pod.name} (Pending {_age(view, p.pod.created)})" for _, p in blocked)
    old = [rs for rs in view.snapshot.replicasets
           if _deployment_of(view, rs) == deployment and rs.uid != new.uid and rs.replicas > 0]
    tail = "".join(f"; old ReplicaSet {rs.name} still runs {rs.replicas} pod(s)" for rs in old)
    details = tuple(f"{c.type}={c.status} {c.reason}: {c.message}" for c in deployment.conditions
                    if c.type == "Progressing")
    severity = min((p.finding.severity for _, p in blocked), key=_SEVERITY_RANK.__getitem__)
    return Finding(
        "rollout-stuck",
        f"Deployment {deployment.key} is stuck mid-rollout ({deployment.updated} of {deployment.replicas} replicas "
        f"updated, {deployment.available} available): new ReplicaSet {new.name} waits for {waiting}{tail}",
        "fix the Pending pod's finding; the Deployment controller resumes the rollout once the pod is scheduled",
        severity, subject=f"deployment/{deployment.key}", details=details,
    )


# --- formatting ------------------------------------------------------------------------------------------------


def _age(view: _View, when: datetime | None) -> str:
    if when is None:
        return "an unknown time"
    return human_duration(int((view.snapshot.taken_at - when).total_seconds()))


def human_duration(seconds: int) -> str:
    """A duration the way kubectl prints ages (apimachinery duration.HumanDuration): 45s, 5m30s, 4d12h, 28d."""
    seconds = max(seconds, 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    return f"{years}y{days % 365}d" if years < 8 else f"{years}y"


def _fmt_requests(requests: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{resource}: {count}" for resource, count in requests)


def _fmt_labels(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _and(items: Iterable[str]) -> str:
    names = list(items)
    if len(names) < 2:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]
