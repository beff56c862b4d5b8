"""Pod templates inside workload custom resources: found by the workload-kinds table, judged as Pods, located back.

A KServe InferenceService, a RayCluster or an Argo Workflow carries several pod templates, some not shaped like a
pod spec (KServe's predictor.model, Argo's template.container and podSpecPatch, Dynamo's resources.limits.gpu). Each
template becomes one Pod the rules judge as they judge any Pod; every finding is then moved back to where its field
really is in the custom resource and names the template. Every walk here is linear in the object: each table path
visits the parts of the object it names, once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from policy.admission import fractions
from policy.admission.fixes import Fix
from policy.admission.workloads import GpuRequest, Workload, find_workload, lookup, read_gpu_request
from policy.kube.fields import Path, is_mapping
from policy.spec import plain_data
from policy.spec.diagnostics import Diagnostic, format_path, value_at
from policy.spec.model import PodTemplateRef, WorkloadKind

#: A podSpecPatch longer than this is not parsed (a pod spec patch of a few fields is a few hundred characters).
MAX_PATCH_CHARS = 64 * 1024

_ITEMS = 0  # a step over every item of a list
_VALUES = 1  # a step over every value of a map
Step = str | int


def parse(pattern: str) -> tuple[Step, ...]:
    """A table path as steps: keys, and _ITEMS / _VALUES wildcards (``.`` is no step at all)."""
    if pattern == ".":
        return ()
    steps: list[Step] = []
    for part in pattern.split("."):
        if part == "*":
            steps.append(_VALUES)
        elif part.endswith("[*]"):
            steps += [part[:-3], _ITEMS]
        else:
            steps.append(part)
    return tuple(steps)


def walk(value: Any, steps: Sequence[Step], at: Path = ()) -> Iterator[tuple[Any, Path]]:
    """Every value the steps reach from ``value``, with its path (wildcards filled in), in document order."""
    found: list[tuple[Any, Path]] = [(value, at)]
    for step in steps:
        nxt: list[tuple[Any, Path]] = []
        for current, path in found:
            if step == _ITEMS:
                if isinstance(current, list):
                    nxt += [(item, (*path, i)) for i, item in enumerate(current)]
            elif step == _VALUES:
                if is_mapping(current):
                    nxt += [(child, (*path, key)) for key, child in current.items() if isinstance(key, str)]
            elif is_mapping(current) and step in current:
                nxt.append((current[step], (*path, step)))
        found = nxt
    return iter(found)


#: The fields of a core/v1 PodSpec (k8s.io/api core/v1 types.go PodSpec, v1.34): a template's Pod is built from
#: these alone, so two templates that differ only in their own fields (an Argo template's name, inputs, steps) are
#: the same Pod, and the engine's memo judges it once.
POD_SPEC_FIELDS = frozenset({
    "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy", "terminationGracePeriodSeconds",
    "activeDeadlineSeconds", "dnsPolicy", "nodeSelector", "serviceAccountName", "serviceAccount",
    "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace",
    "securityContext", "imagePullSecrets", "hostname", "subdomain", "affinity", "schedulerName", "tolerations",
    "hostAliases", "priorityClassName", "priority", "dnsConfig", "readinessGates", "runtimeClassName",
    "enableServiceLinks", "preemptionPolicy", "overhead", "topologySpreadConstraints", "setHostnameAsFQDN", "os",
    "hostUsers", "schedulingGates", "resourceClaims", "resources"})


@dataclass(frozen=True)
class Ask:
    """What a template's Pod asks for, worked out once: its pod spec, its nvidia.com/ request and its KAI
    fractional-GPU annotations (the engine judges from these and does not read them again)."""

    workload: Workload
    request: GpuRequest
    fraction: fractions.Fraction | None

    @property
    def any(self) -> bool:
        """Whether the Pod asks for any nvidia.com/ resource (or writes an amount the API server refuses), or for a
        fractional GPU of KAI Scheduler."""
        return not self.request.empty or self.fraction is not None


@dataclass(frozen=True)
class Template:
    """One pod template of a custom resource, as the Pod the rules judge, and where its parts really are."""

    path: Path
    """Where the template is in the object."""
    pod: Mapping[str, Any]
    """The Pod the rules judge: the template's pod spec fields, with the containers written elsewhere appended."""
    spec_path: Path
    """Where the pod spec fields are in the object."""
    moved: Mapping[tuple[str, int], Path] = field(default_factory=dict)
    """Containers of ``pod`` that are not at their own index in the object's lists: where they really are."""
    keys: Mapping[tuple[str, str], Path] = field(default_factory=dict)
    """For the container built from custom GPU keys: (limits|requests, resource) -> where the key is."""
    keyed: int | None = None
    """Index of that container in ``pod``'s containers."""
    metadata_path: Path | None = None
    """Where the template's own metadata (labels, annotations) is, if it has one."""
    metadata_home: Path | None = None
    """Where the template's metadata is or would be written (a PodTemplateSpec's, beside its spec)."""
    rebuilt: bool = False
    """``pod``'s spec was built (containers added, a patch merged), not taken as the object has it."""
    opaque: frozenset[tuple[str, int]] = frozenset()
    """Containers of ``pod`` set inside a string (a podSpecPatch): their findings point at the string itself, and no
    edit of the object reaches them."""
    renamed: Mapping[tuple[str, int], str] = field(default_factory=dict)
    """Containers of ``pod`` whose resources the object writes under another key (Kubeflow Trainer's
    ``resourcesPerNode``): findings point there; an edit, which writes ``resources``, does not reach them."""
    own: frozenset[str] = POD_SPEC_FIELDS
    """The pod spec fields the object writes at ``spec_path`` itself."""
    steps: _RefSteps | None = field(default=None, compare=False)
    """How the template was found (to build it again from an edited object)."""

    @functools.cached_property
    def ask(self) -> Ask | None:
        """What the Pod asks for; None for a template that is no Pod at all."""
        workload = find_workload(self.pod)
        if workload is None:
            return None
        return Ask(workload, read_gpu_request(workload), fractions.read(self.pod, workload))

    @property
    def label(self) -> str:
        return format_path(self.path)

    @property
    def direct(self) -> bool:
        """True when ``pod``'s spec is the object's own pod spec, unchanged: a fix found on it applies as it is."""
        return not self.rebuilt and self.spec_path[-1:] == ("spec",)

    def real(self, path: Path) -> Path:
        """Where a path into ``pod`` is in the object (for a finding: the nearest place the object writes it)."""
        head, rest = (path[0], path[1:]) if path else ("", ())
        if head == "metadata":
            return (*self.metadata_path, *rest) if self.metadata_path is not None else path
        if head != "spec":
            return path
        if len(rest) >= 2 and rest[0] in ("containers", "initContainers") and isinstance(rest[1], int):
            where = (str(rest[0]), rest[1])
            if rest[0] == "containers" and rest[1] == self.keyed:
                key = (str(rest[3]), str(rest[4])) if len(rest) >= 5 and rest[2] == "resources" else None
                return self.keys.get(key, next(iter(self.keys.values()))) if key else next(iter(self.keys.values()))
            if where in self.moved:
                if where in self.opaque:
                    return self.moved[where]
                tail = rest[2:]
                if where in self.renamed and tail[:1] == ("resources",):
                    tail = (self.renamed[where], *tail[1:])
                return (*self.moved[where], *tail)
        return (*self.spec_path, *rest)

    def where(self, path: Path) -> Path | None:
        """Where a field of ``pod`` an edit writes is in the object, or None where the object has no such field of
        its own: a container built from GPU keys or set in a string, a pod spec field the template does not write
        (an Argo template's nodeSelector is its own; a Kubeflow TrainJob's trainer has none)."""
        head, rest = (path[0], path[1:]) if path else ("", ())
        if head == "metadata":
            home = self.metadata_path or self.metadata_home
            return (*home, *rest) if home is not None else None
        if head != "spec" or not rest:
            return None
        if rest[0] in ("containers", "initContainers") and len(rest) >= 2 and isinstance(rest[1], int):
            where = (str(rest[0]), rest[1])
            if (rest[0] == "containers" and rest[1] == self.keyed) or where in self.opaque or where in self.renamed:
                return None
            if where in self.moved:
                return (*self.moved[where], *rest[2:])
        return (*self.spec_path, *rest) if rest[0] in self.own else None

    def locate(self, d: Diagnostic) -> Diagnostic:
        """A finding on ``pod`` as a finding on the object: its path moved back, its message naming the template;
        its fix moved onto the object's own fields where it has them (Engine gives it its JSON Patch), else None."""
        fix = d.fix.relocated(self.where) if d.fix is not None else None
        return replace(d, message=f"pod template {self.label}: {d.message}", path=self.real(d.path), fix=fix)

    @property
    def base(self) -> Path:
        """Where the part of the object holding everything of the template is: the PodTemplateSpec of a template at
        ``template.spec`` (its metadata is beside its spec), else the template itself. An edit of the template is
        made on a copy of this part alone, so that fixing each of many templates costs each template's size."""
        return self.path[:-1] if self.metadata_home is not None else self.path

    def again(self, obj: Mapping[str, Any], value: Mapping[str, Any]) -> Template | None:
        """This template as an edited copy of its part of the object (``value``, at ``base``) has it."""
        at = value_at(value, self.path[len(self.base):]) if self.path[len(self.base):] else value
        if self.steps is None or not is_mapping(at):
            return None
        metadata = obj.get("metadata")
        return _template(obj, at, self.path, self.steps, metadata if is_mapping(metadata) else {})


def joined(found: Sequence[tuple[Template, tuple[Diagnostic, ...]]]) -> tuple[Diagnostic, ...]:
    """Every template's findings, each with one fix for the whole object: the fixes of every template that has
    findings, joined (each was checked on its own template, and the templates' pods are judged apart). Where a
    template with an error has no fix, no joined fix is given, and each finding keeps its hint in words. No fix
    moves the object to another namespace (policy/admission/fixes.py, Fix.cost), so the templates' fixes always
    compose."""
    denied = [diagnostics for _, diagnostics in found if diagnostics]
    if len(denied) < 2:
        return tuple(d for diagnostics in denied for d in diagnostics)
    fixes = [next((d.fix for d in diagnostics if d.fix is not None), None) for diagnostics in denied]
    whole = Fix.join(fixes) if None not in fixes else None  # type: ignore[arg-type]
    hint = whole.describe() if whole is not None else ""
    return tuple(replace(d, fix=whole, hint=hint) if whole is not None and d.fix is not None else replace(d, fix=None)
                 for diagnostics in denied for d in diagnostics)


class KindTable:
    """The workload-kinds table, indexed once per policy."""

    def __init__(self, kinds: Sequence[WorkloadKind]) -> None:
        self._by_key: dict[tuple[str, str], WorkloadKind] = {}
        self._by_kind: dict[str, WorkloadKind] = {}
        for kind in kinds:
            self._by_key.setdefault((kind.group, kind.kind), kind)
            self._by_kind.setdefault(kind.kind, kind)
        self._steps = {id(ref): _RefSteps.of(ref) for kind in kinds for ref in kind.templates}

    def kind_of(self, obj: Any) -> WorkloadKind | None:
        """The table's entry for the object's group and kind (by kind alone when it names no apiVersion)."""
        found: WorkloadKind | None = lookup(self._by_key, self._by_kind, obj)
        return found

    def templates(self, obj: Any) -> tuple[Template, ...] | None:
        """Every pod template of a table kind's object, in table order; None for an object of no table kind."""
        kind = self.kind_of(obj)
        if kind is None:
            return None
        metadata = obj.get("metadata")
        metadata = metadata if is_mapping(metadata) else {}
        found: list[Template] = []
        for ref in kind.templates:
            steps = self._steps[id(ref)]
            for value, path in walk(obj, steps.path):
                if is_mapping(value):
                    found.append(_template(obj, value, path, steps, metadata))
        return tuple(found)


@dataclass(frozen=True)
class _RefSteps:
    """A PodTemplateRef's paths, parsed once."""

    path: tuple[Step, ...]
    pod_spec: tuple[Step, ...]
    containers: tuple[tuple[tuple[Step, ...], str, str, bool], ...]
    patch: tuple[Step, ...] | None
    keys: tuple[tuple[tuple[Step, ...], str, str], ...]
    own: frozenset[str]
    """The pod spec fields written at the pod spec's place (PodTemplateRef.spec_fields)."""

    @classmethod
    def of(cls, ref: PodTemplateRef) -> _RefSteps:
        own = POD_SPEC_FIELDS if ref.spec_fields is None else POD_SPEC_FIELDS.intersection(ref.spec_fields)
        return cls(parse(ref.path), parse(ref.pod_spec),
                   tuple((parse(c.path), c.name or c.path, c.resources, c.init) for c in ref.containers),
                   parse(ref.pod_spec_patch) if ref.pod_spec_patch else None,
                   tuple((parse(k.path), k.field, k.resource) for k in ref.gpu_keys), frozenset(own))


def _template(obj: Mapping[str, Any], value: Mapping[str, Any], path: Path, steps: _RefSteps,
              metadata: Mapping[str, Any]) -> Template:
    # the spec and its path from one match, so a wildcard in the pod spec's place is filled in where it matched
    spec, spec_path = next(((v, where) for v, where in walk(value, steps.pod_spec, path) if is_mapping(v)),
                           ({}, (*path, *(s for s in steps.pod_spec if isinstance(s, str)))))
    lists = {section: list(items) if section in steps.own and isinstance(items := spec.get(section), list) else []
             for section in ("containers", "initContainers")}
    moved: dict[tuple[str, int], Path] = {}
    renamed: dict[tuple[str, int], str] = {}
    for ref_steps, name, resources, init in steps.containers:
        section = "initContainers" if init else "containers"
        for item, where in walk(value, ref_steps, path):
            if is_mapping(item):
                moved[(section, len(lists[section]))] = where
                if resources != "resources":
                    renamed[(section, len(lists[section]))] = resources
                lists[section].append(_container(item, name, resources))
    extra: dict[str, Any] = {}
    before = set(moved.items())
    if steps.patch is not None:
        extra = _apply_patch(value, spec, path, steps.patch, lists, moved)
    opaque = frozenset(k for k, v in moved.items() if (k, v) not in before)
    keys: dict[tuple[str, str], Path] = {}
    keyed = None
    tables: dict[str, dict[str, Any]] = {}
    for key_steps, table, resource in steps.keys:
        for amount, where in walk(value, key_steps, path):
            if amount is not None and not is_mapping(amount) and not isinstance(amount, list):
                tables.setdefault(table, {})[resource] = amount
                keys[(table, resource)] = where
    if keys:
        keyed = len(lists["containers"])
        lists["containers"].append({"name": format_path(path), "resources": tables})
    changed = bool(moved or keys or extra)
    # Only pod spec fields: the template's own fields (an Argo template's name, inputs, outputs) are no part of the
    # Pod, and would make identical templates different Pods to the engine's memo.
    own = spec if all(k in steps.own for k in spec) else {k: v for k, v in spec.items() if k in steps.own}
    pod_spec = {**own, **extra, **{s: items for s, items in lists.items() if items}} if changed else own
    # A PodTemplateSpec's labels and annotations are beside its spec (template.metadata for template.spec); an Argo
    # template, whose pod spec fields are the template's own, writes them in its own metadata.
    home = (*path[:-1], "metadata") if path[-1:] == ("spec",) and not steps.pod_spec else None
    if home is not None:
        metadata_path: Path | None = home
    elif not steps.pod_spec and is_mapping(value.get("metadata")):
        metadata_path = (*path, "metadata")
    else:
        metadata_path = None
    template_metadata = value_at(obj, metadata_path) if metadata_path is not None else None
    template_metadata = template_metadata if is_mapping(template_metadata) else None
    pod_metadata: dict[str, Any] = {k: metadata[k] for k in ("name", "generateName", "namespace") if k in metadata}
    if template_metadata is not None:
        pod_metadata.update({k: template_metadata[k] for k in ("labels", "annotations") if k in template_metadata})
    return Template(path, {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": pod_spec}, spec_path,
                    moved, keys, keyed, metadata_path if template_metadata is not None else None, home, changed,
                    opaque, renamed, steps.own, steps)


def _container(item: Mapping[str, Any], name: str, resources: str) -> dict[str, Any]:
    """A container written outside the pod spec's lists, as a container: every field it has (securityContext,
    restartPolicy: rules read them too), its resources from the kind's own key, a name where it has none."""
    container = {k: v for k, v in item.items() if k != resources}
    container["name"] = item.get("name") if isinstance(item.get("name"), str) else name
    container["resources"] = item.get(resources)
    return container


def _apply_patch(value: Mapping[str, Any], spec: Mapping[str, Any], path: Path, patch_steps: tuple[Step, ...],
                 lists: dict[str, list[Any]], moved: dict[tuple[str, int], Path]) -> dict[str, Any]:
    """Merge a podSpecPatch string into the template's containers (by name, resources table by table) and return
    the placement fields it sets (nodeSelector merged by key with the pod spec's, tolerations appended to its,
    affinity and nodeName replaced), as Argo applies it with a strategic merge patch
    (workflow/controller/workflowpod.go)."""
    found = next(walk(value, patch_steps, path), None)
    if found is None or not isinstance(found[0], str) or len(found[0]) > MAX_PATCH_CHARS:
        return {}
    text, where = found
    try:
        parsed = plain_data.documents(text)
        patch = plain_data.unshared(parsed[0], MAX_PATCH_CHARS) if len(parsed) == 1 else None
    except (ValueError, yaml.YAMLError):  # JSONDecodeError and TooLarge are ValueErrors
        # Argo refuses the workflow's pods (its YAML parser refuses invalid text and excessive aliasing alike):
        # the patch asks for nothing the rules can read
        return {}
    if not is_mapping(patch):
        return {}
    for section in ("containers", "initContainers"):
        items = patch.get(section)
        by_name = {c.get("name"): i for i, c in enumerate(lists[section]) if is_mapping(c)}
        for item in items if isinstance(items, list) else ():
            if not is_mapping(item):
                continue
            index = by_name.get(item.get("name"))
            if index is None:
                index = len(lists[section])
                lists[section].append({"name": item.get("name"), "resources": item.get("resources")})
            else:
                lists[section][index] = {**lists[section][index],
                                         "resources": _merge_resources(lists[section][index].get("resources"),
                                                                       item.get("resources"))}
            moved[(section, index)] = where
    extra: dict[str, Any] = {}
    if is_mapping(patch.get("nodeSelector")):
        base = spec.get("nodeSelector")
        extra["nodeSelector"] = {**(base if is_mapping(base) else {}), **patch["nodeSelector"]}
    if isinstance(patch.get("tolerations"), list):
        base = spec.get("tolerations")
        extra["tolerations"] = [*(base if isinstance(base, list) else []), *patch["tolerations"]]
    for key in ("affinity", "nodeName"):
        if key in patch:
            extra[key] = patch[key]
    return extra


def _merge_resources(base: Any, patch: Any) -> Any:
    if not is_mapping(patch):
        return base
    base = base if is_mapping(base) else {}
    out = dict(base)
    for table in ("limits", "requests"):
        if is_mapping(patch.get(table)):
            mine = base.get(table)
            out[table] = {**(mine if is_mapping(mine) else {}), **patch[table]}
    return out
