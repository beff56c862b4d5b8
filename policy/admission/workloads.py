"""Pod specs inside Pods and pod controllers: where they are, what GPUs they request, where they may run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from policy.kube.fields import Path, descend, is_mapping
from policy.kube.quantity import NEGATIVE_ERROR, NOT_INTEGER_ERROR, count_problem
from policy.kube.scheduling import (
    REQUIRED_AFFINITY,
    NodeRequirement,
    Placement,
    read_affinity_terms,
    read_tolerations,
)

GPU_PREFIX = "nvidia.com/"

# Where the pod spec lives, by API group and kind (webhook.md §2.4; Kyverno's autogen list of pod controllers).
_TEMPLATE = ("spec", "template", "spec")
POD_SPEC_PATHS: Mapping[tuple[str, str], Path] = {
    ("", "Pod"): ("spec",),
    ("", "ReplicationController"): _TEMPLATE,
    ("", "PodTemplate"): ("template", "spec"),
    ("apps", "Deployment"): _TEMPLATE,
    ("apps", "ReplicaSet"): _TEMPLATE,
    ("apps", "StatefulSet"): _TEMPLATE,
    ("apps", "DaemonSet"): _TEMPLATE,
    ("extensions", "Deployment"): _TEMPLATE,  # pre-1.16 manifests still found in repositories
    ("extensions", "ReplicaSet"): _TEMPLATE,
    ("extensions", "DaemonSet"): _TEMPLATE,
    ("batch", "Job"): _TEMPLATE,
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template", "spec"),
}
_KINDS = frozenset(kind for _, kind in POD_SPEC_PATHS)
_BY_KIND: Mapping[str, Path] = {kind: path for (_, kind), path in reversed(POD_SPEC_PATHS.items())}
"""The first entry of each kind, for an object that names no apiVersion."""

@dataclass(frozen=True)
class Workload:
    """A Pod or pod controller, and the pod spec it carries."""

    kind: str
    name: str
    namespace: str | None
    spec_path: Path
    """Path of the pod spec inside the object, e.g. ("spec", "template", "spec")."""
    pod_spec: Mapping[str, Any]

    @property
    def subject(self) -> str:
        """How messages name the object: ``Deployment nlp-inference``."""
        return f"{self.kind} {self.name}"

    def resource_names(self) -> frozenset[str]:
        """Every resource name any container limits or requests, of any vendor."""
        found: set[str] = set()
        for section in ("initContainers", "containers"):
            items = self.pod_spec.get(section)
            for item in items if isinstance(items, list) else ():
                resources = item.get("resources") if is_mapping(item) else None
                for field in ("limits", "requests"):
                    table = resources.get(field) if is_mapping(resources) else None
                    if is_mapping(table):
                        found.update(k for k in table if isinstance(k, str))
        return frozenset(found)


def api_group(obj: Mapping[str, Any]) -> str | None:
    """The API group of an object ("" for the core group), or None when apiVersion is missing or not text."""
    version = obj.get("apiVersion")
    if not isinstance(version, str):
        return None
    return version.rpartition("/")[0]


def kind_key(obj: Any) -> tuple[str | None, str] | None:
    """(API group, kind) of an object, the group None where it names no apiVersion; None for no kind at all."""
    if not is_mapping(obj) or not isinstance(kind := obj.get("kind"), str):
        return None
    return api_group(obj), kind


def lookup(table: Mapping[tuple[str, str], Any], by_kind: Mapping[str, Any], obj: Any) -> Any:
    """The entry of a (group, kind) table for the object: by group and kind, or by kind alone for an object that
    names no apiVersion. With one, a CRD that reuses a kind name (Knative's Service, Volcano's Job) is not mistaken
    for the built-in (nor for another group's kind of that name)."""
    key = kind_key(obj)
    if key is None:
        return None
    group, kind = key
    return by_kind.get(kind) if group is None else table.get((group, kind))


def subject_of(obj: Mapping[str, Any]) -> str:
    """How messages name an object: ``Deployment nlp-inference``, ``RayCluster raycluster-*``."""
    return f"{obj.get('kind')} {object_name(obj.get('metadata'))}"


def find_workload(obj: Any) -> Workload | None:
    """The pod spec of a Pod or pod controller; None for every other object, however malformed."""
    if not is_mapping(obj) or not isinstance(obj.get("kind"), str) or obj["kind"] not in _KINDS:
        return None  # a kind of any other type (a map, a list) is no kind: never hashed
    path = lookup(POD_SPEC_PATHS, _BY_KIND, obj)
    if path is None:
        return None
    kind = obj["kind"]
    spec = descend(obj, path)
    if not is_mapping(spec):
        return None
    metadata = obj.get("metadata")
    metadata = metadata if is_mapping(metadata) else {}
    return Workload(kind, object_name(metadata), _text(metadata.get("namespace")), path, spec)


def gpu_resources_anywhere(value: Any, depth: int = 0) -> tuple[str, ...]:
    """The nvidia.com/ resources any ``limits`` or ``requests`` mapping below ``value`` names, sorted."""
    found: set[str] = set()
    _collect(value, depth, found)
    return tuple(sorted(found))


def _collect(value: Any, depth: int, found: set[str]) -> None:
    if depth > 40:
        return
    if is_mapping(value):
        for key, child in value.items():
            if key in ("limits", "requests") and is_mapping(child):
                found.update(k for k in child if isinstance(k, str) and k.startswith(GPU_PREFIX))
            _collect(child, depth + 1, found)
    elif isinstance(value, list):
        for item in value:
            _collect(item, depth + 1, found)


def object_name(metadata: Any) -> str:
    """An object's name as messages give it: its name, ``prefix-*`` for a generateName, else ``(unnamed)``."""
    if not is_mapping(metadata):
        return "(unnamed)"
    name = _text(metadata.get("name"))
    if name:
        return name
    generated = _text(metadata.get("generateName"))
    return f"{generated}*" if generated else "(unnamed)"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- GPU requests ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Amount:
    """One nvidia.com/ resource one container asks for, and where the request is written."""

    resource: str
    count: int
    path: Path


@dataclass(frozen=True)
class ContainerRequest:
    """The nvidia.com/ resources of one container (regular or init)."""

    name: str
    section: str
    """``containers`` or ``initContainers``."""
    sidecar: bool
    """An init container with restartPolicy: Always: it keeps running beside the regular containers."""
    amounts: tuple[Amount, ...]

    def count(self, resource: str) -> int:
        return next((a.count for a in self.amounts if a.resource == resource), 0)


ProblemKind = Literal["unreadable", "negative", "not-integer", "limit-missing", "request-differs"]


@dataclass(frozen=True)
class RequestProblem:
    """An nvidia.com/ amount the API server refuses (pkg/apis/core/validation: extended resources are
    non-negative integers, cannot be overcommitted, so need a limit, and a request must equal it)."""

    kind: ProblemKind
    container: str
    container_path: Path
    """Path of the container in the object (``(..., "containers", 0)``)."""
    resource: str
    field: str
    """``limits`` or ``requests``: where the amount at fault is written."""
    given: Any
    """The value as written (the limit, for limit-missing: the request)."""
    reason: str
    """The API server's words: ``must be an integer``, ``Limit must be set for non overcommitable resources``."""
    limit: int | None = None
    """The container's valid limit for the resource, where it has one (request-differs)."""

    @property
    def path(self) -> Path:
        return (*self.container_path, "resources", self.field, self.resource)


@dataclass(frozen=True)
class GpuRequest:
    """A pod's GPU request: per container, and per resource the way the scheduler adds it up."""

    containers: tuple[ContainerRequest, ...]
    totals: tuple[tuple[str, int], ...]
    """Effective pod request per resource, sorted by resource name; only resources with a count above 0."""
    problems: tuple[RequestProblem, ...] = ()
    """Amounts the API server would refuse; they count towards ``totals`` only where a valid value is known."""

    @property
    def empty(self) -> bool:
        return not self.totals and not self.problems

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(resource for resource, _ in self.totals)

    @classmethod
    def of(cls, containers: tuple[ContainerRequest, ...], problems: tuple[RequestProblem, ...] = ()) -> GpuRequest:
        """The request of these containers, totalled the way the scheduler adds them up."""
        return cls(containers, effective_totals(list(containers)), problems)

    def first_path(self, resource: str) -> Path:
        """Where the first container asking for ``resource`` writes it."""
        return self._first_paths.get(resource, ())

    @cached_property
    def _first_paths(self) -> Mapping[str, Path]:
        # Indexed once: rules ask for one path per resource, and a pod may ask for thousands of resources.
        found: dict[str, Path] = {}
        for container in self.containers:
            for amount in container.amounts:
                found.setdefault(amount.resource, amount.path)
        return found

    @property
    def gpu_containers(self) -> int:
        """Containers that run together and ask for a GPU resource: the regular ones and the sidecars (each needs
        at least one device of what it asks for, on the one node the pod runs on)."""
        return sum(1 for c in self.containers if (c.section == "containers" or c.sidecar)
                   and any(a.count > 0 for a in c.amounts))


def read_gpu_request(workload: Workload) -> GpuRequest:
    """Every nvidia.com/ request of the pod spec, and every amount the API server would refuse; containers
    that are not mappings are skipped (the API server refuses those objects before any webhook sees them).

    The effective request follows the scheduler (k8s resourcehelper.PodRequests): the sum over regular
    containers and sidecars, or, if larger, what an init container needs while it runs beside the
    sidecars started before it.
    """
    containers: list[ContainerRequest] = []
    problems: list[RequestProblem] = []
    for section in ("initContainers", "containers"):
        items = workload.pod_spec.get(section)
        if not isinstance(items, list):
            continue
        for index, item in enumerate(items):
            found = _container_request(item, (*workload.spec_path, section, index), section, problems)
            if found is not None:
                containers.append(found)
    return GpuRequest(tuple(containers), effective_totals(containers), tuple(problems))


def _container_request(item: Any, path: Path, section: str, problems: list[RequestProblem]) -> ContainerRequest | None:
    if not is_mapping(item):
        return None
    resources = item.get("resources")
    if not is_mapping(resources):
        return None
    tables: dict[str, Mapping[str, Any]] = {}
    for field in ("requests", "limits"):
        table = resources.get(field)
        if is_mapping(table):
            # Most containers ask for no GPU: find that out before building anything (a plain loop, the
            # fastest way through the few keys of a sidecar's resources).
            for key in table:
                if type(key) is str and key.startswith(GPU_PREFIX):
                    tables[field] = table
                    break
    if not tables:
        return None
    name = item.get("name")
    name = name if isinstance(name, str) else f"#{path[-1]}"
    keys = sorted({k for table in tables.values() for k in table if isinstance(k, str) and k.startswith(GPU_PREFIX)})
    amounts = []
    for key in keys:
        count = _amount(name, path, key, tables, problems)
        if count is not None:
            amounts.append(Amount(key, count, (*path, "resources", "limits" if key in tables.get("limits", {})
                                               else "requests", key)))
    if not amounts:
        return None
    sidecar = section == "initContainers" and item.get("restartPolicy") == "Always"
    return ContainerRequest(name, section, sidecar, tuple(amounts))


def _amount(name: str, path: Path, key: str, tables: Mapping[str, Mapping[str, Any]],
            problems: list[RequestProblem]) -> int | None:
    """The count one container asks for of ``key``, recording what the API server would refuse.

    The limit decides (extended resources cannot be overcommitted, so the request defaults to it and must
    equal it); a request without a limit, refused by the API server, still counts for the other rules."""
    found: dict[str, int | None] = {}
    for field in ("limits", "requests"):
        if key in tables.get(field, {}):
            value = tables[field][key]
            found[field], reason = count_problem(value)
            if reason is not None:
                kind: ProblemKind = "unreadable" if reason not in (NEGATIVE_ERROR, NOT_INTEGER_ERROR) else (
                    "negative" if reason == NEGATIVE_ERROR else "not-integer")
                problems.append(RequestProblem(kind, name, path, key, field, value, reason))
    limit, request = found.get("limits"), found.get("requests")
    if "limits" not in found:
        problems.append(RequestProblem("limit-missing", name, path, key, "requests", tables["requests"][key],
                                       "Limit must be set for non overcommitable resources"))
    elif limit is not None and request is not None and request != limit:
        problems.append(RequestProblem("request-differs", name, path, key, "requests", tables["requests"][key],
                                       f"must be equal to {key} limit of {limit}", limit))
    return limit if limit is not None else request


def effective_totals(containers: Sequence[ContainerRequest]) -> tuple[tuple[str, int], ...]:
    regular: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in containers:
        if c.section == "containers":
            _add(regular, c)
            continue
        if c.sidecar:
            _add(sidecars, c)
            running = dict(sidecars)
        else:
            running = dict(sidecars)
            _add(running, c)
        for resource, count in running.items():
            init_peak[resource] = max(init_peak.get(resource, 0), count)
    totals = {r: max(regular.get(r, 0) + sidecars.get(r, 0), init_peak.get(r, 0))
              for r in {*regular, *sidecars, *init_peak}}
    return tuple(sorted((r, n) for r, n in totals.items() if n > 0))


def _add(into: dict[str, int], container: ContainerRequest) -> None:
    for amount in container.amounts:
        into[amount.resource] = into.get(amount.resource, 0) + amount.count


# --- placement ------------------------------------------------------------------------------------------------

def read_placement(workload: Workload, *, tolerations: bool = True) -> Placement:
    """The pod's nodeSelector, required node affinity, tolerations (unless not asked for: they matter only where
    some class is tainted) and nodeName; malformed selector entries cannot exclude and are dropped."""
    spec, prefix = workload.pod_spec, workload.spec_path
    selector: list[NodeRequirement] = []
    raw = spec.get("nodeSelector")
    if is_mapping(raw):
        for key, value in raw.items():
            if isinstance(key, str) and isinstance(value, str):
                selector.append(NodeRequirement(key, "In", (value,), (*prefix, "nodeSelector", key)))
    node_name = spec.get("nodeName")
    return Placement(tuple(selector), read_affinity_terms(spec, prefix),
                     read_tolerations(spec.get("tolerations")) if tolerations else (),
                     node_name if isinstance(node_name, str) and node_name else None)


def placement_fields(workload: Workload) -> tuple[Any, ...]:
    """The raw fields placement is read from, for comparing an UPDATE's old and new object (tolerations and
    nodeName included: they decide which tainted classes and which node the pod may reach; schedulerName: HAMi's
    vGPUs are allocated only by its scheduler)."""
    spec = workload.pod_spec
    return (spec.get("nodeSelector"), descend(spec, REQUIRED_AFFINITY), spec.get("tolerations"), spec.get("nodeName"),
            spec.get("schedulerName"))


def pinned_node(obj: Any) -> str | None:
    """The node a Pod or pod template names in spec.nodeName, or None: what the webhook looks up in its node cache
    before judging the object (read as read_placement reads it)."""
    workload = find_workload(obj)
    name = workload.pod_spec.get("nodeName") if workload is not None else None
    return name if isinstance(name, str) and name else None
