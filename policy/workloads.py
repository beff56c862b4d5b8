"""Pod specs inside Pods and pod controllers: where they are, what GPUs they request, where they may run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from policy.diagnostics import Path
from policy.quantity import parse_count

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

# Custom resources that wrap pod templates. Their operators create the Pods, which the webhook then checks;
# offline, `gpupolicy admit` can only say that they were not checked (webhook.md §2.4).
POD_TEMPLATE_CRDS: Mapping[str, frozenset[str]] = {
    "ray.io": frozenset({"RayCluster", "RayJob", "RayService"}),
    "kubeflow.org": frozenset({"PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob", "Notebook"}),
    "trainer.kubeflow.org": frozenset({"TrainJob"}),
    "jobset.x-k8s.io": frozenset({"JobSet"}),
    "leaderworkerset.x-k8s.io": frozenset({"LeaderWorkerSet"}),
    "serving.kserve.io": frozenset({"InferenceService", "ServingRuntime", "ClusterServingRuntime"}),
    "serving.knative.dev": frozenset({"Service", "Configuration"}),
    "batch.volcano.sh": frozenset({"Job"}),
    "apps.kruise.io": frozenset({"CloneSet", "AdvancedStatefulSet", "AdvancedDaemonSet"}),
    "argoproj.io": frozenset({"Rollout"}),
}


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
                resources = item.get("resources") if _is_mapping(item) else None
                for field in ("limits", "requests"):
                    table = resources.get(field) if _is_mapping(resources) else None
                    if _is_mapping(table):
                        found.update(k for k in table if isinstance(k, str))
        return frozenset(found)


def _is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # Objects come from json.loads, so nearly every mapping is a dict: test that first, in C, before the
    # abstract-class check (a few µs per review over the ~20 checks below; docs/performance.md).
    return type(value) is dict or isinstance(value, Mapping)


def api_group(obj: Mapping[str, Any]) -> str | None:
    """The API group of an object ("" for the core group), or None when apiVersion is missing or not text."""
    version = obj.get("apiVersion")
    if not isinstance(version, str):
        return None
    return version.rpartition("/")[0]


def find_workload(obj: Any) -> Workload | None:
    """The pod spec of a Pod or pod controller; None for every other object, however malformed."""
    if not _is_mapping(obj):
        return None
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        return None
    group = api_group(obj)
    # Without an apiVersion the kind alone decides; with one, a CRD that reuses a kind name (Knative's
    # Service, Volcano's Job) is not mistaken for the built-in.
    path = POD_SPEC_PATHS.get((group, kind)) if group is not None else _path_by_kind(kind)
    if path is None:
        return None
    spec = _descend(obj, path)
    if not _is_mapping(spec):
        return None
    metadata = obj.get("metadata")
    metadata = metadata if _is_mapping(metadata) else {}
    return Workload(kind, _name(metadata), _text(metadata.get("namespace")), path, spec)


def wraps_pod_templates(obj: Any) -> bool:
    """Whether the object is a custom resource known to embed pod templates (RayCluster, PyTorchJob, ...)."""
    if not _is_mapping(obj) or not isinstance(obj.get("kind"), str):
        return False
    return obj["kind"] in POD_TEMPLATE_CRDS.get(api_group(obj) or "", frozenset())


def requests_gpus_anywhere(value: Any, depth: int = 0) -> bool:
    """Whether some ``limits`` or ``requests`` mapping below ``value`` names an nvidia.com/ resource."""
    if depth > 40:
        return False
    if _is_mapping(value):
        for key, child in value.items():
            if key in ("limits", "requests") and _is_mapping(child) and any(
                isinstance(k, str) and k.startswith(GPU_PREFIX) for k in child
            ):
                return True
            if requests_gpus_anywhere(child, depth + 1):
                return True
    elif isinstance(value, list):
        return any(requests_gpus_anywhere(item, depth + 1) for item in value)
    return False


def _path_by_kind(kind: str) -> Path | None:
    return next((path for (_, k), path in POD_SPEC_PATHS.items() if k == kind), None)


def _descend(obj: Any, path: Path) -> Any:
    for part in path:
        if not _is_mapping(obj):
            return None
        obj = obj.get(part)
    return obj


def _name(metadata: Mapping[str, Any]) -> str:
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


@dataclass(frozen=True)
class GpuRequest:
    """A pod's GPU request: per container, and per resource the way the scheduler adds it up."""

    containers: tuple[ContainerRequest, ...]
    totals: tuple[tuple[str, int], ...]
    """Effective pod request per resource, sorted by resource name; only resources with a count above 0."""

    @property
    def empty(self) -> bool:
        return not self.totals

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(resource for resource, _ in self.totals)

    @classmethod
    def of(cls, containers: tuple[ContainerRequest, ...]) -> GpuRequest:
        """The request of these containers, totalled the way the scheduler adds them up."""
        return cls(containers, _effective_totals(list(containers)))

    def first_path(self, resource: str) -> Path:
        """Where the first container asking for ``resource`` writes it."""
        for container in self.containers:
            for amount in container.amounts:
                if amount.resource == resource:
                    return amount.path
        return ()


def read_gpu_request(workload: Workload) -> GpuRequest:
    """Every nvidia.com/ request of the pod spec; malformed containers and quantities are skipped.

    The effective request follows the scheduler (k8s resourcehelper.PodRequests): the sum over regular
    containers and sidecars, or, if larger, what an init container needs while it runs beside the
    sidecars started before it.
    """
    containers: list[ContainerRequest] = []
    for section in ("initContainers", "containers"):
        items = workload.pod_spec.get(section)
        if not isinstance(items, list):
            continue
        for index, item in enumerate(items):
            found = _container_request(item, (*workload.spec_path, section, index), section)
            if found is not None:
                containers.append(found)
    return GpuRequest(tuple(containers), _effective_totals(containers))


def _container_request(item: Any, path: Path, section: str) -> ContainerRequest | None:
    if not _is_mapping(item):
        return None
    resources = item.get("resources")
    if not _is_mapping(resources):
        return None
    amounts: dict[str, Amount] = {}
    # Extended resources cannot be overcommitted: a limit is required and a request must equal it, so the
    # limit decides; a request alone (refused by the API server) is still read for offline use.
    for field in ("requests", "limits"):
        table = resources.get(field)
        if not _is_mapping(table):
            continue
        for key, value in table.items():
            if isinstance(key, str) and key.startswith(GPU_PREFIX):
                count = parse_count(value)
                if count is not None:
                    amounts[key] = Amount(key, count, (*path, "resources", field, key))
    if not amounts:
        return None
    name = item.get("name")
    sidecar = section == "initContainers" and item.get("restartPolicy") == "Always"
    return ContainerRequest(name if isinstance(name, str) else f"#{path[-1]}", section, sidecar,
                            tuple(sorted(amounts.values(), key=lambda a: a.resource)))


def _effective_totals(containers: list[ContainerRequest]) -> tuple[tuple[str, int], ...]:
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

NODE_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True)
class NodeRequirement:
    """One nodeSelector entry or node-affinity match expression."""

    key: str
    operator: str
    values: tuple[str, ...]
    path: Path

    def describe(self) -> str:
        if self.operator == "In" and len(self.values) == 1 and self.path and self.path[-1] == self.key:
            return f"{self.key}={self.values[0]}"  # a nodeSelector entry
        if self.operator in ("Exists", "DoesNotExist"):
            return f"{self.key} {self.operator}"
        return f"{self.key} {self.operator} [{', '.join(self.values)}]"


@dataclass(frozen=True)
class AffinityTerm:
    """One required nodeSelectorTerm: its match expressions hold together (matchFields are not modelled)."""

    requirements: tuple[NodeRequirement, ...]
    matches_nothing: bool
    """An empty term matches no node (k8s nodeaffinity: empty terms are skipped)."""
    path: Path


@dataclass(frozen=True)
class Placement:
    """Where a pod may run: its nodeSelector and its required node-affinity terms (ORed)."""

    node_selector: tuple[NodeRequirement, ...]
    terms: tuple[AffinityTerm, ...]
    """Empty when the pod has no required node affinity."""

    @property
    def unconstrained(self) -> bool:
        return not self.node_selector and not self.terms


def read_placement(workload: Workload) -> Placement:
    """The pod's nodeSelector and required node affinity; malformed entries cannot exclude and are dropped."""
    spec, prefix = workload.pod_spec, workload.spec_path
    selector: list[NodeRequirement] = []
    raw = spec.get("nodeSelector")
    if _is_mapping(raw):
        for key, value in raw.items():
            if isinstance(key, str) and isinstance(value, str):
                selector.append(NodeRequirement(key, "In", (value,), (*prefix, "nodeSelector", key)))
    return Placement(tuple(selector), _terms(spec, prefix))


_REQUIRED = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")


def _terms(spec: Mapping[str, Any], prefix: Path) -> tuple[AffinityTerm, ...]:
    raw = _descend(spec, _REQUIRED)
    if not isinstance(raw, list):
        return ()
    terms = []
    for t, term in enumerate(raw):
        path = (*prefix, *_REQUIRED, t)
        if not _is_mapping(term):
            return ()  # one unreadable term could match anything: the affinity cannot exclude a class
        expressions = term.get("matchExpressions")
        fields = term.get("matchFields")
        given = bool(expressions) or bool(fields)
        reqs = tuple(_expressions(expressions, (*path, "matchExpressions")))
        terms.append(AffinityTerm(reqs, not given, path))
    return tuple(terms)


def _expressions(raw: Any, path: Path) -> list[NodeRequirement]:
    if not isinstance(raw, list):
        return []
    out = []
    for e, item in enumerate(raw):
        if not _is_mapping(item):
            continue
        key, operator, values = item.get("key"), item.get("operator"), item.get("values")
        if not isinstance(key, str) or not isinstance(operator, str) or operator not in NODE_OPERATORS:
            continue
        vals = tuple(v for v in values if isinstance(v, str)) if isinstance(values, list) else ()
        out.append(NodeRequirement(key, operator, vals, (*path, e)))
    return out


def placement_fields(workload: Workload) -> tuple[Any, Any]:
    """The raw fields placement is read from, for comparing an UPDATE's old and new object.

    Tolerations are left out on purpose: no rule reads them, so changing them cannot change a verdict.
    """
    return workload.pod_spec.get("nodeSelector"), _descend(workload.pod_spec, _REQUIRED)
