"""Frozen records of the cluster objects verify and discover read, parsed from Kubernetes API JSON."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from policy.kube.quantity import parse_count
from policy.kube.scheduling import NodeTaint

Json = Mapping[str, Any]
NVIDIA_PREFIX = "nvidia.com/"


@dataclass(frozen=True)
class OwnerRef:
    kind: str
    name: str
    uid: str
    controller: bool


@dataclass(frozen=True)
class Container:
    name: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    requests: Mapping[str, str]
    limits: Mapping[str, str]
    waiting_reason: str = ""
    """Why the container is not running (CrashLoopBackOff, ContainerCreating, ...), from the pod's status."""


@dataclass(frozen=True)
class FieldManager:
    """One entry of an object's metadata.managedFields: who last wrote which labels, how and when."""

    manager: str
    """The field manager: a server-side apply's fieldManager, else the writer's user agent (kubectl-label, ...)."""
    operation: str
    """Apply or Update."""
    time: datetime | None
    """When this manager last changed a field it owns (the API server updates it with every such change)."""
    labels: frozenset[str]
    """The label keys it owns."""


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    capacity: Mapping[str, int]
    """Extended resources only (nvidia.com/* and other integer counts); cpu and memory are left out."""
    allocatable: Mapping[str, int]
    unschedulable: bool = False
    ready: bool = True
    kubelet_version: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    """What node agents report beside labels (HAMi's device plugin registers its GPUs here)."""
    taints: tuple[NodeTaint, ...] = ()
    managers: tuple[FieldManager, ...] | None = None
    """metadata.managedFields; None where the object came without them (`kubectl get -o yaml` leaves them out
    unless asked with --show-managed-fields)."""

    def label_owners(self, key: str) -> tuple[str, ...]:
        """The field managers that own a label key, sorted (empty when none does or managedFields are unknown)."""
        return tuple(sorted({m.manager for m in self.managers or () if key in m.labels}))

    def label_set_at(self, key: str) -> datetime | None:
        """The latest change by a manager owning the key: the label has held its value at least since then."""
        times = [m.time for m in self.managers or () if key in m.labels and m.time is not None]
        return max(times, default=None)


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    phase: str
    node_name: str
    owners: tuple[OwnerRef, ...]
    containers: tuple[Container, ...]
    init_containers: tuple[Container, ...]
    created: datetime | None
    ready: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    spec: Json = field(default_factory=dict)
    """The pod's spec as the API returned it: what the admission rule engine evaluates."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def controller(self) -> OwnerRef | None:
        return next((o for o in self.owners if o.controller), None)


@dataclass(frozen=True)
class DaemonSet:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    owners: tuple[OwnerRef, ...]
    generation: int
    observed_generation: int
    selector: Mapping[str, str]
    """spec.selector.matchLabels: how its pods are found."""
    node_selector: Mapping[str, str]
    containers: tuple[Container, ...]
    config_maps: tuple[str, ...]
    """Names of the ConfigMaps its pod template mounts as volumes."""
    desired: int
    current: int
    updated: int
    available: int
    ready: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ReplicaSet:
    namespace: str
    name: str
    uid: str
    owners: tuple[OwnerRef, ...]
    replicas: int
    ready: int
    available: int
    created: datetime | None

    def controller(self) -> OwnerRef | None:
        return next((o for o in self.owners if o.controller), None)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Deployment:
    namespace: str
    name: str
    uid: str
    generation: int
    observed_generation: int
    replicas: int
    updated: int
    ready: int
    available: int
    conditions: tuple[Condition, ...]
    containers: tuple[Container, ...] = ()
    config_maps: tuple[str, ...] = ()
    """Names of the ConfigMaps its pod template mounts as volumes."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Event:
    namespace: str
    involved_kind: str
    involved_name: str
    involved_uid: str
    reason: str
    message: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None


@dataclass(frozen=True)
class ConfigMap:
    namespace: str
    name: str
    data: Mapping[str, str]


AttributeValue = str | int | bool
"""A device attribute's value: resource.k8s.io/v1 DeviceAttribute holds exactly one of string, int, bool or version
(a semantic version, kept here as its string)."""


@dataclass(frozen=True)
class SliceDevice:
    """One device a DRA driver publishes (resource.k8s.io/v1 Device): its attributes and capacities, each under its
    fully qualified name (a bare name is the driver's: types.go QualifiedName, k8s.io/dynamic-resource-allocation
    cel.parseQualifiedName)."""

    name: str
    attributes: Mapping[str, AttributeValue]
    versions: frozenset[str]
    """The qualified names of the attributes that are versions, not strings."""
    capacity: Mapping[str, str]
    """Qualified name -> quantity, as the API serialises it (``80Gi``, ``14``)."""


@dataclass(frozen=True)
class ResourceSlice:
    """One resource.k8s.io/v1 ResourceSlice: the devices one driver publishes for a node (or a pool)."""

    name: str
    driver: str
    """spec.driver: the attributes' default domain as well."""
    node_name: str
    """spec.nodeName; empty for slices of a pool that is not one node's."""
    pool: str
    devices: tuple[SliceDevice, ...]


@dataclass(frozen=True)
class Snapshot:
    """What one read of the cluster saw; every list is complete for the scope that was read."""

    context: str
    server: str
    taken_at: datetime
    """The API server's clock (its Date header) when the read began: ages are measured from it."""
    nodes: tuple[Node, ...]
    daemonsets: tuple[DaemonSet, ...] = ()
    pods: tuple[Pod, ...] = ()
    """Pending pods of every namespace, plus the pods of device-plugin DaemonSets."""
    events: tuple[Event, ...] = ()
    """FailedScheduling events."""
    replicasets: tuple[ReplicaSet, ...] = ()
    deployments: tuple[Deployment, ...] = ()
    configmaps: tuple[ConfigMap, ...] = ()
    resource_slices: tuple[ResourceSlice, ...] = ()
    slices_unread: str | None = "the ResourceSlices were not read"
    """Why the ResourceSlices are unknown (not served, refused, not recorded), or None when they were read: an
    empty ``resource_slices`` then means no driver publishes anything."""


# --- parsing API JSON ------------------------------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp of the API (``2024-05-14T18:34:02Z``, or with fractional seconds) as aware UTC."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()} if isinstance(value, Mapping) else {}


def _counts(value: Any) -> dict[str, int]:
    out = {}
    for key, raw in _strings(value).items():
        count = parse_count(raw)
        if count is not None and key not in ("cpu", "memory", "pods", "ephemeral-storage"):
            out[key] = count
    return out


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _meta(obj: Json) -> Json:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _owners(meta: Json) -> tuple[OwnerRef, ...]:
    return tuple(
        OwnerRef(str(o.get("kind", "")), str(o.get("name", "")), str(o.get("uid", "")), bool(o.get("controller")))
        for o in meta.get("ownerReferences") or ()
        if isinstance(o, Mapping)
    )


def _containers(specs: Any, statuses: Any = ()) -> tuple[Container, ...]:
    waiting = {}
    for status in statuses or ():
        state = (status.get("state") or {}).get("waiting") or {}
        waiting[status.get("name")] = str(state.get("reason", ""))
    out = []
    for c in specs or ():
        resources = c.get("resources") or {}
        out.append(Container(
            name=str(c.get("name", "")),
            image=str(c.get("image", "")),
            command=tuple(str(a) for a in c.get("command") or ()),
            args=tuple(str(a) for a in c.get("args") or ()),
            requests=_strings(resources.get("requests")),
            limits=_strings(resources.get("limits")),
            waiting_reason=waiting.get(c.get("name"), ""),
        ))
    return tuple(out)


def _condition_true(conditions: Any, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions or ())


def field_managers(meta: Json) -> tuple[FieldManager, ...] | None:
    """metadata.managedFields (fieldsV1: label keys appear as ``f:<key>`` under ``f:metadata`` / ``f:labels``);
    None when the object carries none."""
    entries = meta.get("managedFields")
    if not isinstance(entries, list):
        return None
    found = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        fields = entry.get("fieldsV1") if isinstance(entry.get("fieldsV1"), Mapping) else {}
        labels = ((fields.get("f:metadata") or {}).get("f:labels") or {}) if isinstance(fields, Mapping) else {}
        keys = frozenset(k.removeprefix("f:") for k in labels if isinstance(k, str) and k.startswith("f:"))
        found.append(FieldManager(str(entry.get("manager", "")), str(entry.get("operation", "")),
                                  parse_time(entry.get("time")), keys))
    return tuple(found)


def node_from(obj: Json) -> Node:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    conditions = status.get("conditions")
    return Node(
        name=str(meta.get("name", "")),
        labels=_strings(meta.get("labels")),
        capacity=_counts(status.get("capacity")),
        allocatable=_counts(status.get("allocatable")),
        unschedulable=bool(spec.get("unschedulable")),
        # A node whose status lists no conditions (a trimmed fixture) is taken as ready, not as broken.
        ready=_condition_true(conditions, "Ready") if conditions else True,
        kubelet_version=str((status.get("nodeInfo") or {}).get("kubeletVersion", "")),
        annotations=_strings(meta.get("annotations")),
        taints=tuple(NodeTaint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
                     for t in spec.get("taints") or () if isinstance(t, Mapping)),
        managers=field_managers(meta),
    )


def pod_from(obj: Json) -> Pod:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    return Pod(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        phase=str(status.get("phase", "")),
        node_name=str(spec.get("nodeName", "")),
        owners=_owners(meta),
        containers=_containers(spec.get("containers"), status.get("containerStatuses")),
        init_containers=_containers(spec.get("initContainers"), status.get("initContainerStatuses")),
        created=parse_time(meta.get("creationTimestamp")),
        ready=_condition_true(status.get("conditions"), "Ready"),
        labels=_strings(meta.get("labels")),
        spec=dict(spec),
    )


def _config_map_volumes(pod_spec: Json) -> tuple[str, ...]:
    names = []
    for volume in pod_spec.get("volumes") or ():
        name = (volume.get("configMap") or {}).get("name")
        if name:
            names.append(str(name))
        for source in (volume.get("projected") or {}).get("sources") or ():
            projected = (source.get("configMap") or {}).get("name")
            if projected:
                names.append(str(projected))
    return tuple(names)


def daemonset_from(obj: Json) -> DaemonSet:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    return DaemonSet(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        labels=_strings(meta.get("labels")),
        owners=_owners(meta),
        generation=_int(meta.get("generation")),
        observed_generation=_int(status.get("observedGeneration")),
        selector=_strings((spec.get("selector") or {}).get("matchLabels")),
        node_selector=_strings(template.get("nodeSelector")),
        containers=_containers(template.get("containers")),
        config_maps=_config_map_volumes(template),
        desired=_int(status.get("desiredNumberScheduled")),
        current=_int(status.get("currentNumberScheduled")),
        updated=_int(status.get("updatedNumberScheduled")),
        available=_int(status.get("numberAvailable")),
        ready=_int(status.get("numberReady")),
    )


def replicaset_from(obj: Json) -> ReplicaSet:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    return ReplicaSet(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        owners=_owners(meta),
        replicas=_int(spec.get("replicas")),
        ready=_int(status.get("readyReplicas")),
        available=_int(status.get("availableReplicas")),
        created=parse_time(meta.get("creationTimestamp")),
    )


def deployment_from(obj: Json) -> Deployment:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    return Deployment(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        generation=_int(meta.get("generation")),
        observed_generation=_int(status.get("observedGeneration")),
        # spec.replicas defaults to 1 when omitted (apps/v1 defaulting).
        replicas=_int(spec.get("replicas", 1)),
        updated=_int(status.get("updatedReplicas")),
        ready=_int(status.get("readyReplicas")),
        available=_int(status.get("availableReplicas")),
        conditions=tuple(
            Condition(str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason", "")),
                      str(c.get("message", "")))
            for c in status.get("conditions") or ()
        ),
        containers=_containers(template.get("containers")),
        config_maps=_config_map_volumes(template),
    )


def event_from(obj: Json) -> Event:
    """A core/v1 Event; events the scheduler writes through events.k8s.io carry series and eventTime instead of
    count and first/lastTimestamp, so both spellings are read (as kubectl describe does)."""
    meta, involved = _meta(obj), obj.get("involvedObject") or {}
    series = obj.get("series") or {}
    count = _int(obj.get("count")) or _int(series.get("count")) or 1
    event_time = parse_time(obj.get("eventTime"))
    return Event(
        namespace=str(meta.get("namespace", "")),
        involved_kind=str(involved.get("kind", "")),
        involved_name=str(involved.get("name", "")),
        involved_uid=str(involved.get("uid", "")),
        reason=str(obj.get("reason", "")),
        message=str(obj.get("message", "")).strip(),
        count=count,
        first_seen=parse_time(obj.get("firstTimestamp")) or event_time,
        last_seen=parse_time(obj.get("lastTimestamp")) or parse_time(series.get("lastObservedTime")) or event_time,
    )


def configmap_from(obj: Json) -> ConfigMap:
    meta = _meta(obj)
    return ConfigMap(str(meta.get("namespace", "")), str(meta.get("name", "")), _strings(obj.get("data")))


def _attribute(raw: Any) -> tuple[AttributeValue, bool] | None:
    """A DeviceAttribute's one value and whether it is a version; None for none (or a kind this release lacks)."""
    if not isinstance(raw, Mapping):
        return None
    for key in ("string", "int", "bool", "version"):
        value = raw.get(key)
        if isinstance(value, str | int | bool):
            return value, key == "version"
    return None


def _qualified(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def slice_device_from(obj: Json, driver: str) -> SliceDevice:
    attributes: dict[str, AttributeValue] = {}
    versions = set()
    for name, raw in (obj.get("attributes") or {}).items():
        found = _attribute(raw)
        if found is not None:
            attributes[_qualified(str(name), driver)] = found[0]
            if found[1]:
                versions.add(_qualified(str(name), driver))
    capacity = {_qualified(str(name), driver): str(raw.get("value")) for name, raw in
                (obj.get("capacity") or {}).items() if isinstance(raw, Mapping) and raw.get("value") is not None}
    return SliceDevice(str(obj.get("name", "")), attributes, frozenset(versions), capacity)


def resource_slice_from(obj: Json) -> ResourceSlice:
    meta, spec = _meta(obj), obj.get("spec") or {}
    driver = str(spec.get("driver", ""))
    return ResourceSlice(
        name=str(meta.get("name", "")),
        driver=driver,
        node_name=str(spec.get("nodeName") or ""),
        pool=str((spec.get("pool") or {}).get("name", "")),
        devices=tuple(slice_device_from(d, driver) for d in spec.get("devices") or () if isinstance(d, Mapping)),
    )


def items(document: Json) -> Iterable[Json]:
    """The items of a List document, skipping anything that is not an object."""
    return (item for item in document.get("items") or () if isinstance(item, Mapping))
