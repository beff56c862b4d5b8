"""Pod templates inside workload custom resources: found by the workload-kinds table, judged as Pods, located back.

A KServe InferenceService, a RayCluster or an Argo Workflow carries several pod templates, some not shaped like a
pod spec (KServe's predictor.model, Argo's template.container and podSpecPatch, Dynamo's resources.limits.gpu). Each
template becomes one Pod the rules judge as they judge any Pod; every finding is then moved back to where its field
really is in the custom resource and names the template. Every walk here is linear in the object: each table path
visits the parts of the object it names, once.

An Argo template's pod is not the template alone: Argo's controller adds the workflow's own fields (its
nodeSelector, affinity, tolerations, schedulerName, podMetadata, podSpecPatch, templateDefaults, and the placement of
the steps or DAG template that runs the template), as `_Workflow` reads them; a finding on a part that came from
there points at the field that wrote it.
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
    sources: _Sources | None = field(default=None, compare=False)
    """Parts of ``pod`` written elsewhere than the template's own fields (an Argo workflow's nodeSelector, a
    podSpecPatch's tolerations): where each really is, and whether an edit of the template's own fields reaches it."""
    context: _Context | None = field(default=None, compare=False)
    """The Argo workflow the template is run in, and the steps or DAG template that runs it (to build it again)."""

    @functools.cached_property
    def ask(self) -> Ask | None:
        """What the Pod asks for; None for a template that is no Pod at all."""
        workload = find_workload(self.pod)
        if workload is None:
            return None
        return Ask(workload, read_gpu_request(workload), fractions.read(self.pod, workload))

    @property
    def label(self) -> str:
        """The template's path; for an Argo template run by steps or DAG templates of different placements (one Pod
        for each), also the one that runs it."""
        if self.context is None or not self.context.several:
            return format_path(self.path)
        caller = self.context.caller_path
        return f"{format_path(self.path)} (run by {format_path(caller) if caller else 'no steps or DAG template'})"

    @property
    def direct(self) -> bool:
        """True when ``pod``'s spec is the object's own pod spec, unchanged: a fix found on it applies as it is."""
        return not self.rebuilt and self.spec_path[-1:] == ("spec",)

    def real(self, path: Path) -> Path:
        """Where a path into ``pod`` is in the object (for a finding: the nearest place the object writes it)."""
        head, rest = (path[0], path[1:]) if path else ("", ())
        found = self.sources.find(path) if self.sources is not None else None
        if found is not None:
            origin, depth = found
            return origin.path if origin.opaque else (*origin.path, *path[depth:])
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
        (an Argo template's nodeSelector is its own; a Kubeflow TrainJob's trainer has none), or one the template's own
        field would not give back whole (an Argo workflow's tolerations: a template's own replace them all)."""
        head, rest = (path[0], path[1:]) if path else ("", ())
        found = self.sources.find(path) if self.sources is not None else None
        if found is not None:
            origin, depth = found
            if origin.reach == _FIXED:
                return None
            if origin.reach == _OWN:
                return (*origin.path, *path[depth:])
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
        return _template(obj, at, self.path, self.steps, metadata if is_mapping(metadata) else {}, self.context)


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
        self._steps = {(id(kind), id(ref)): _RefSteps.of(kind, ref)
                       for kind in kinds for ref in kind.templates}

    def kind_of(self, obj: Any) -> WorkloadKind | None:
        """The table's entry for the object's group and kind (by kind alone when it names no apiVersion)."""
        found: WorkloadKind | None = lookup(self._by_key, self._by_kind, obj)
        return found

    def templates(self, obj: Any) -> tuple[Template, ...] | None:
        """Every pod template of a table kind's object, in table order; None for an object of no table kind. An
        Argo template run by steps or DAG templates of different placements is one Template for each."""
        kind = self.kind_of(obj)
        if kind is None:
            return None
        metadata = obj.get("metadata")
        metadata = metadata if is_mapping(metadata) else {}
        found: list[Template] = []
        for ref in kind.templates:
            steps = self._steps[(id(kind), id(ref))]
            workflow = _Workflow.of(obj, steps.workflow) if steps.workflow is not None else None
            for value, path in walk(obj, steps.path):
                if is_mapping(value):
                    for context in workflow.contexts(value) if workflow is not None else (None,):
                        found.append(_template(obj, value, path, steps, metadata, context))
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
    workflow: tuple[str, ...] | None = None
    """Where an Argo kind's WorkflowSpec is, for templates at its ``templates[*]``: their pods get its fields."""

    @classmethod
    def of(cls, kind: WorkloadKind, ref: PodTemplateRef) -> _RefSteps:
        own = POD_SPEC_FIELDS if ref.spec_fields is None else POD_SPEC_FIELDS.intersection(ref.spec_fields)
        path = parse(ref.path)
        return cls(path, parse(ref.pod_spec),
                   tuple((parse(c.path), c.name or c.path, c.resources, c.init) for c in ref.containers),
                   parse(ref.pod_spec_patch) if ref.pod_spec_patch else None,
                   tuple((parse(k.path), k.field, k.resource) for k in ref.gpu_keys), frozenset(own),
                   workflow_at(kind, ref))


def _template(obj: Mapping[str, Any], value: Mapping[str, Any], path: Path, steps: _RefSteps,
              metadata: Mapping[str, Any], context: _Context | None = None) -> Template:
    # the spec and its path from one match, so a wildcard in the pod spec's place is filled in where it matched
    spec, spec_path = next(((v, where) for v, where in walk(value, steps.pod_spec, path) if is_mapping(v)),
                           ({}, (*path, *(s for s in steps.pod_spec if isinstance(s, str)))))
    lists = {section: list(items) if section in steps.own and isinstance(items := spec.get(section), list) else []
             for section in ("containers", "initContainers")}
    moved: dict[tuple[str, int], Path] = {}
    renamed: dict[tuple[str, int], str] = {}
    sources = _Sources()
    for ref_steps, name, resources, init in steps.containers:
        section = "initContainers" if init else "containers"
        for item, where in walk(value, ref_steps, path):
            if is_mapping(item):
                index = (section, len(lists[section]))
                moved[index] = where
                if resources != "resources":
                    renamed[index] = resources
                if context is not None:
                    item = context.defaulted_container(ref_steps, item, index, sources)
                lists[section].append(_container(item, name, resources))
    # Only pod spec fields: the template's own fields (an Argo template's name, inputs, outputs) are no part of the
    # Pod, and would make identical templates different Pods to the engine's memo.
    own = spec if all(k in steps.own for k in spec) else {k: v for k, v in spec.items() if k in steps.own}
    extra = context.placement(own, spec_path, sources) if context is not None else {}
    before = set(moved.items())
    for text, where in _patches(value, path, steps, context):
        patch = _read_patch(text)
        if patch is not None:
            _apply_patch(patch, where, {**own, **extra}, lists, moved, extra, sources)
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
    if context is not None:
        context.metadata(template_metadata or {}, pod_metadata, sources)
    return Template(path, {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": pod_spec}, spec_path,
                    moved, keys, keyed, metadata_path if template_metadata is not None else None, home, changed,
                    opaque, renamed, steps.own, steps, sources if sources else None, context)


def _container(item: Mapping[str, Any], name: str, resources: str) -> dict[str, Any]:
    """A container written outside the pod spec's lists, as a container: every field it has (securityContext,
    restartPolicy: rules read them too), its resources from the kind's own key, a name where it has none."""
    container = {k: v for k, v in item.items() if k != resources}
    container["name"] = item.get("name") if isinstance(item.get("name"), str) else name
    container["resources"] = item.get(resources)
    return container


# --- where the parts of a built Pod really are -----------------------------------------------------------------------

_OWN = 0  # the template's own field, at another place in the Pod (a toleration after its templateDefaults' ones)
_KEYED = 1  # an entry the template's own field of that name overrides (a podMetadata annotation, a schedulerName)
_FIXED = 2  # a part no edit of the template's own fields gives back whole (a workflow's nodeSelector, a patch's part)


@dataclass(frozen=True)
class _Origin:
    path: Path
    """Where the part is in the object."""
    opaque: bool
    """It is set inside a string (a podSpecPatch): a finding points at the string itself."""
    reach: int
    """What an edit of the Pod's part does at the template (_OWN, _KEYED or _FIXED)."""


class _Sources:
    """Parts of a built Pod and where each really is: a trie of Pod paths, a part set again replacing what was
    recorded beneath it (a patch's tolerations replace the list of the templateDefaults' ones)."""

    _HERE = ("",)  # the trie key of a node's own origin: no step of a path is a tuple

    def __init__(self) -> None:
        self._root: dict[Any, Any] = {}

    def __bool__(self) -> bool:
        return bool(self._root)

    def set(self, path: Path, origin: _Origin) -> None:
        node = self._root
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = {self._HERE: origin}

    def find(self, path: Path) -> tuple[_Origin, int] | None:
        """The origin of the nearest recorded part holding ``path``, and that part's length; None where ``path`` is
        the template's own."""
        node, found = self._root, None
        for depth, step in enumerate(path, 1):
            node = node.get(step) if isinstance(node, dict) else None
            if node is None:
                break
            if self._HERE in node:
                found = (node[self._HERE], depth)
        return found


# --- Argo Workflows: what its controller adds to a template's pod ----------------------------------------------------

#: The kinds whose ``<spec>.templates[*]`` are templates of the WorkflowSpec at ``<spec>`` (a CronWorkflow's at
#: spec.workflowSpec). A WorkflowTemplate's own spec fields reach its pods where it is run as a workflow (a
#: Workflow's workflowTemplateRef); a template another workflow calls by templateRef gets that workflow's instead.
ARGO_KINDS = frozenset(("argoproj.io", k) for k in ("Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate",
                                                     "CronWorkflow"))
#: The template types Argo runs as a pod of their own (wfv1.Template.GetType; steps, dag, suspend run none; http
#: and plugin run in the workflow's agent pod, which takes no workflow placement).
_POD_TYPES = ("container", "script", "containerSet", "resource", "data")
#: The template types whose main container Argo merges onto templateDefaults' field of the same name.
DEFAULTED_CONTAINERS = ("container", "script")
#: The placement Argo takes from the template, else the steps or DAG template that runs it, else the workflow.
_PLACEMENT = ("nodeSelector", "affinity", "tolerations")


def workflow_at(kind: WorkloadKind, ref: PodTemplateRef) -> tuple[str, ...] | None:
    """Where an Argo kind's WorkflowSpec is, for a ref to the ``templates[*]`` under it (spec, spec.workflowSpec):
    the fields of that spec (podMetadata, podSpecPatch, templateDefaults, placement) reach each template's pod.
    None for any other kind or ref."""
    if (kind.group, kind.kind) not in ARGO_KINDS:
        return None
    path = parse(ref.path)
    head = path[:-2]
    if path[-2:] != ("templates", _ITEMS) or not all(isinstance(s, str) for s in head):
        return None
    return tuple(s for s in head if isinstance(s, str))


def _has(name: str, value: Any) -> bool:
    """Whether a template or workflow sets the field, as addSchedulingConstraints asks it (len(...) > 0 for a map
    or a list, != nil for affinity, != "" for schedulerName)."""
    if name == "affinity":
        return is_mapping(value)
    if name == "schedulerName":
        return isinstance(value, str) and value != ""
    if name == "tolerations":
        return isinstance(value, list) and len(value) > 0
    return is_mapping(value) and len(value) > 0


@dataclass(frozen=True)
class _Workflow:
    """An Argo WorkflowSpec, read for the fields its controller puts in the pod of each of its templates.

    As argoproj/argo-workflows builds the pod (v4.1.2, same in v3.6.2; workflow/controller/workflowpod.go):
    ``addSchedulingConstraints`` sets nodeSelector, affinity and tolerations each from the template where it sets
    it (a non-empty map or list, a non-nil affinity), else from the boundary template (the steps or DAG template
    whose node runs it: ``GetBoundaryTemplate``), else from the workflow: whole, never merged; schedulerName from
    the template, else the workflow. ``addMetadata`` copies spec.podMetadata's labels and annotations, then the
    template's. ``processPodSpecPatch`` then applies spec.podSpecPatch, then the template's, each a strategic
    merge patch of the pod spec (workflow/util/util.go ``ApplyPodSpecPatch``). Before all of it, the template (and
    the boundary template) was merged onto spec.templateDefaults with a strategic merge patch
    (workflow/controller/operator.go ``mergedTemplateDefaultsInto``): the template's nodeSelector keys and
    metadata win over the defaults', its tolerations are merged with the defaults' by key, its affinity into
    theirs, and its schedulerName and podSpecPatch win where set.
    """

    spec: Mapping[str, Any]
    path: Path
    templates: Sequence[Any]
    callers: Mapping[str, tuple[int, ...]]
    """Template name -> the steps and DAG templates that run it (by template, hooks or onExit), in order."""
    roots: frozenset[str]
    """Templates run with no boundary: the entrypoint, the exit handler, the workflow's hooks."""
    unique: frozenset[str]
    """Names only one template has (Argo refuses a workflow whose template names repeat)."""
    _memo: dict[tuple[Any, ...], tuple[int | None, ...]] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, obj: Mapping[str, Any], at: tuple[str, ...]) -> _Workflow | None:
        """The WorkflowSpec at ``at``, its templates' callers found in one pass over them."""
        spec = value_at(obj, at) if at else obj
        if not is_mapping(spec):
            return None
        templates = spec.get("templates")
        templates = templates if isinstance(templates, list) else []
        callers: dict[str, list[int]] = {}
        seen: dict[str, int] = {}
        for index, template in enumerate(templates):
            if not is_mapping(template):
                continue
            name = template.get("name")
            if isinstance(name, str):
                seen[name] = seen.get(name, 0) + 1
            for called in dict.fromkeys(_called(template)):
                callers.setdefault(called, []).append(index)
        hooks = spec.get("hooks")
        roots = (spec.get("entrypoint"), spec.get("onExit"),
                 *(h.get("template") for h in (hooks.values() if is_mapping(hooks) else ()) if is_mapping(h)))
        return cls(spec, at, templates, {k: tuple(v) for k, v in callers.items()},
                   frozenset(r for r in roots if isinstance(r, str)),
                   frozenset(name for name, count in seen.items() if count == 1))

    @property
    def defaults(self) -> Mapping[str, Any]:
        found = self.spec.get("templateDefaults")
        return found if is_mapping(found) else {}

    def contexts(self, template: Mapping[str, Any]) -> tuple[_Context | None, ...]:
        """The runs of a template that build different pods: one for each steps or DAG template running it whose
        placement reaches its pod (where the template and its defaults do not set that field themselves), and one
        without any where it is run outside them (or by nothing in this object); (None,) for a template that
        runs no pod of its own, which gets nothing from the workflow."""
        if not any(is_mapping(template.get(t)) for t in _POD_TYPES):
            return (None,)
        name = template.get("name")
        defaults = self.defaults
        sets = tuple(_has(f, template.get(f)) or _has(f, defaults.get(f)) for f in _PLACEMENT)
        key = (name if isinstance(name, str) else None, sets)
        runs = self._memo.get(key)
        if runs is None:  # once per name and what it sets: linear in the callers, however many templates call
            callers = self.callers.get(name, ()) if isinstance(name, str) and name in self.unique else ()
            distinct: dict[tuple[int | None, ...], int | None] = {}
            for caller in (*((None,) if not callers or name in self.roots else ()), *callers):
                placement = tuple(self.boundary(caller, f) for f, own in zip(_PLACEMENT, sets, strict=True)
                                  if not own)
                distinct.setdefault(placement, caller)
            runs = self._memo[key] = tuple(distinct.values())
        return tuple(_Context(self, caller, len(runs) > 1) for caller in runs)

    def boundary(self, caller: int | None, name: str) -> int | None:
        """The caller, where it sets the field for the pods it runs; else None (the workflow's, if any)."""
        return caller if caller is not None and _has(name, self.templates[caller].get(name)) else None


def _called(template: Mapping[str, Any]) -> Iterator[str]:
    """The names of the templates a steps or DAG template runs: its steps' and tasks' templates, hooks, onExit."""
    groups = template.get("steps")
    steps = [step for group in (groups if isinstance(groups, list) else ()) if isinstance(group, list)
             for step in group]
    dag = template.get("dag")
    tasks = dag.get("tasks") if is_mapping(dag) else None
    for step in (*steps, *(tasks if isinstance(tasks, list) else ())):
        if not is_mapping(step):
            continue
        hooks = step.get("hooks")
        for name in (step.get("template"), step.get("onExit"),
                     *(h.get("template") for h in (hooks.values() if is_mapping(hooks) else ()) if is_mapping(h))):
            if isinstance(name, str):
                yield name


@dataclass(frozen=True)
class _Context:
    """One run of an Argo template: its workflow, and the steps or DAG template that runs it, if any."""

    workflow: _Workflow
    caller: int | None
    several: bool
    """The template is run by others of different placements too (its label names this run's caller)."""

    @property
    def caller_path(self) -> Path | None:
        return (*self.workflow.path, "templates", self.caller) if self.caller is not None else None

    def defaulted_container(self, steps: tuple[Step, ...], item: Mapping[str, Any], index: tuple[str, int],
                            sources: _Sources) -> Mapping[str, Any]:
        """The template's main container merged onto templateDefaults' of its type: Argo merges the defaults'
        ``container`` into a container template's and ``script`` into a script template's, and drops the defaults
        of every other type (operator.go ``mergedTemplateDefaultsInto``, then ``SetType``). What the container
        takes from the defaults (a GPU limit for every step) is recorded as theirs: findings point there; an edit
        of the template's own container overrides it (the template is merged onto the defaults) but cannot remove
        it."""
        if len(steps) != 1 or steps[0] not in DEFAULTED_CONTAINERS:
            return item
        theirs = self.workflow.defaults.get(steps[0])
        if not is_mapping(theirs):
            return item
        at = (*self.workflow.path, "templateDefaults", str(steps[0]))
        merged: Mapping[str, Any] = _merge(theirs, item, ("spec", *index), sources, base_at=at)
        return merged

    def placement(self, own: Mapping[str, Any], spec_path: Path, sources: _Sources) -> dict[str, Any]:
        """The placement fields of the pod that differ from the template's own (see _Workflow), where each is
        recorded in ``sources``."""
        workflow, out = self.workflow, {}
        defaults, at = workflow.defaults, (*workflow.path, "templateDefaults")
        for name in (*_PLACEMENT, "schedulerName"):
            mine, theirs = own.get(name), defaults.get(name)
            if _has(name, theirs):
                mine = out[name] = _defaulted(name, theirs, mine, (*at, name), (*spec_path, name), sources)
            if _has(name, mine):
                continue
            caller = workflow.boundary(self.caller, name) if name != "schedulerName" else None
            if caller is not None:
                out[name] = workflow.templates[caller][name]
                sources.set(("spec", name), _Origin((*workflow.path, "templates", caller, name), False, _FIXED))
            elif _has(name, workflow.spec.get(name)):
                out[name] = workflow.spec[name]
                reach = _KEYED if name == "schedulerName" else _FIXED  # a template's own schedulerName wins
                sources.set(("spec", name), _Origin((*workflow.path, name), False, reach))
        return out

    def metadata(self, mine: Mapping[str, Any], pod: dict[str, Any], sources: _Sources) -> None:
        """The pod's labels and annotations: spec.podMetadata's, then templateDefaults.metadata's, then the
        template's own, key by key."""
        workflow = self.workflow
        layers = ((workflow.spec.get("podMetadata"), (*workflow.path, "podMetadata")),
                  (workflow.defaults.get("metadata"), (*workflow.path, "templateDefaults", "metadata")))
        for key in ("labels", "annotations"):
            own = mine.get(key)
            own = own if is_mapping(own) else {}
            merged: dict[str, Any] = {}
            for layer, at in layers:
                entries = layer.get(key) if is_mapping(layer) else None
                for name, value in entries.items() if is_mapping(entries) else ():
                    if name not in own:
                        merged[name] = value
                        sources.set(("metadata", key, name), _Origin((*at, key, name), False, _KEYED))
            if merged:
                pod[key] = {**merged, **own}


def _defaulted(name: str, theirs: Any, mine: Any, at: Path, mine_at: Path, sources: _Sources) -> Any:
    """A template's field merged onto its templateDefaults' (a strategic merge patch of wfv1.Template: a map key
    by key, tolerations by their key, scalars and lists replaced where the template sets them)."""
    if name == "schedulerName":
        if _has(name, mine):
            return mine
        sources.set(("spec", name), _Origin(at, False, _KEYED))
        return theirs
    if name == "tolerations":
        merged, origins = _by_key(theirs, mine if isinstance(mine, list) else [], at, mine_at)
        for i, origin in enumerate(origins):
            sources.set(("spec", name, i), origin)
        return merged
    return _merge(theirs, mine if is_mapping(mine) else {}, ("spec", name), sources, base_at=at)


def _by_key(theirs: list[Any], mine: list[Any], at: Path, mine_at: Path) -> tuple[list[Any], list[_Origin]]:
    """Tolerations merged by key (wfv1.Template.tolerations: patchStrategy merge, patchMergeKey key): the defaults'
    in order, each merged with the template's of the same key, then the template's other ones."""
    merged = list(theirs)
    origins = [_Origin((*at, i), False, _FIXED) for i in range(len(theirs))]
    first: dict[str, int] = {}
    for i, item in enumerate(theirs):
        if is_mapping(item) and isinstance(item.get("key"), str):
            first.setdefault(item["key"], i)
    for j, item in enumerate(mine):
        i = first.get(item.get("key")) if is_mapping(item) and isinstance(item.get("key"), str) else None
        if i is not None and is_mapping(merged[i]):
            merged[i] = {**merged[i], **item}
            origins[i] = _Origin((*mine_at, j), False, _OWN)
        else:
            merged.append(item)
            origins.append(_Origin((*mine_at, j), False, _OWN))
    return merged, origins


def _merge(base: Any, patch: Any, at: Path, sources: _Sources, *, base_at: Path | None = None,
           patch_at: Path | None = None) -> Any:
    """A strategic merge patch of a map with no list merge keys (a nodeSelector, an affinity): maps merged key by
    key, anything else replaced by the patch. The parts the base keeps are recorded as at ``base_at`` (a
    templateDefaults field), or the parts the patch sets as in the string at ``patch_at`` (a podSpecPatch, where a
    null removes the key, as in the patch's own JSON)."""
    if not is_mapping(base) or not is_mapping(patch):
        if patch_at is not None:
            sources.set(at, _Origin(patch_at, True, _FIXED))
        return patch
    out = dict(base)
    for key, value in patch.items():
        if value is None:  # a template's null is no value (Go's omitempty); a patch's removes the key
            if patch_at is not None:
                out.pop(key, None)
            continue
        out[key] = _merge(base.get(key), value, (*at, key), sources, patch_at=patch_at,
                          base_at=(*base_at, key) if base_at is not None and key in base else None)
    if base_at is not None:
        for key in base:
            if patch.get(key) is None:
                sources.set((*at, key), _Origin((*base_at, key), False, _FIXED))
    return out


def _patches(value: Mapping[str, Any], path: Path, steps: _RefSteps,
             context: _Context | None) -> list[tuple[Any, Path]]:
    """The podSpecPatch strings applied to the template's pod, in Argo's order: the workflow's, then the
    template's own (else its templateDefaults', where the template sets none)."""
    mine = next(walk(value, steps.patch, path), None) if steps.patch is not None else None
    if context is None:
        return [mine] if mine is not None else []
    workflow, found = context.workflow, []
    if "podSpecPatch" in workflow.spec:
        found.append((workflow.spec["podSpecPatch"], (*workflow.path, "podSpecPatch")))
    if mine is None or mine[0] == "":
        default = workflow.defaults.get("podSpecPatch")
        mine = (default, (*workflow.path, "templateDefaults", "podSpecPatch")) if default is not None else None
    return [*found, mine] if mine is not None else found


def _read_patch(text: Any) -> Mapping[str, Any] | None:
    """A podSpecPatch string as data; None for one Argo refuses (or too long to be read)."""
    if not isinstance(text, str) or len(text) > MAX_PATCH_CHARS:
        return None
    try:
        parsed = plain_data.documents(text)
        patch = plain_data.unshared(parsed[0], MAX_PATCH_CHARS) if len(parsed) == 1 else None
    except (ValueError, yaml.YAMLError):  # JSONDecodeError and TooLarge are ValueErrors
        # Argo refuses the workflow's pods (its YAML parser refuses invalid text and excessive aliasing alike):
        # the patch asks for nothing the rules can read
        return None
    return patch if is_mapping(patch) else None


def _apply_patch(patch: Mapping[str, Any], where: Path, spec: Mapping[str, Any], lists: dict[str, list[Any]],
                 moved: dict[tuple[str, int], Path], extra: dict[str, Any], sources: _Sources) -> None:
    """Merge a podSpecPatch into the template's containers (by name, resources table by table) and into the
    placement fields of ``spec`` (into ``extra``), as Argo applies it: a strategic merge patch of core/v1 PodSpec
    (workflow/util/util.go ApplyPodSpecPatch), whose nodeSelector and affinity are merged key by key, whose
    tolerations (no patchStrategy in k8s.io/api core/v1 types.go PodSpec) are replaced whole, like nodeName and
    schedulerName."""
    for section in ("containers", "initContainers"):
        items = patch.get(section)
        by_name = {c["name"]: i for i, c in enumerate(lists[section])
                   if is_mapping(c) and isinstance(c.get("name"), str)}
        for item in items if isinstance(items, list) else ():
            if not is_mapping(item):
                continue
            index = by_name.get(item["name"]) if isinstance(item.get("name"), str) else None
            if index is None:
                index = len(lists[section])
                lists[section].append({"name": item.get("name"), "resources": item.get("resources")})
            elif is_mapping(item.get("resources")):
                lists[section][index] = {**lists[section][index],
                                         "resources": _merge_resources(lists[section][index].get("resources"),
                                                                       item.get("resources"))}
            else:
                continue  # the patch leaves this container's resources as they were
            moved[(section, index)] = where
    for key in ("nodeSelector", "affinity"):
        if is_mapping(patch.get(key)) or (key in patch and patch[key] is None):
            base = spec.get(key)
            extra[key] = _merge(base if is_mapping(base) else {}, patch[key], ("spec", key), sources, patch_at=where)
    for key in ("tolerations", "nodeName", "schedulerName"):
        if key in patch:
            extra[key] = patch[key]
            sources.set(("spec", key), _Origin(where, True, _FIXED))


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
