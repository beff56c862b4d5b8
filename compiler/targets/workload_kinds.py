"""The workload-kinds table as the API server sees it: webhook rules per API group, and CEL that tells whether an
object of a table kind asks for a GPU in one of its pod templates (the webhook's matchCondition).

The CEL walks each template path the way policy/admission/templates.py does: ``has()`` before every field (a missing
field is an error in CEL, not false), ``exists`` over a list's items or a map's keys, so an object of any shape
evaluates to true or false, never to an error (an erroring matchCondition goes to failurePolicy).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from policy.admission.fractions import ASKING
from policy.admission.templates import DEFAULTED_CONTAINERS, parse, workflow_at
from policy.spec import workload_kinds
from policy.spec.model import ClusterGPUPolicy, PodTemplateRef, WorkloadKind

__all__ = ["asks_for_gpu", "kinds_of", "resource_rules"]

OPERATIONS = ("CREATE", "UPDATE")
#: CEL's reserved words: a field of that name is written __name__ (Kubernetes' CEL property-name escaping).
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = frozenset({"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
                       "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while"})


def kinds_of(policy: ClusterGPUPolicy) -> tuple[WorkloadKind, ...]:
    """The built-in table with the spec's own kinds."""
    return workload_kinds.merged(policy.spec.admission.workload_kinds)


def resource_rules(kinds: Sequence[WorkloadKind]) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """(group, versions, resources) per API group of the table, sorted: one webhook rule each. A rule matches every
    combination of its versions and resources; a version a resource does not serve matches nothing."""
    groups: dict[str, tuple[set[str], set[str]]] = {}
    for kind in kinds:
        versions, resources = groups.setdefault(kind.group, (set(), set()))
        versions.update(kind.versions)
        resources.add(kind.resource)
    return tuple((g, tuple(sorted(v)), tuple(sorted(r))) for g, (v, r) in sorted(groups.items()))


def select(var: str, name: str) -> tuple[str, str]:
    """(CEL true when ``var`` has the field, CEL of the field) for a field of a custom resource. The API server
    hands admission CEL a custom resource as an unstructured map (reference cel-monitoring.md: the __dot__ escaping
    is for schema property names only, a map key is read as written), so a plain identifier is selected as such and
    any other name (a '-', a '.', a reserved word) by index, present when it is ``in`` the map."""
    if _IDENTIFIER.fullmatch(name) and name not in _RESERVED:
        return f"has({var}.{name})", f"{var}.{name}"
    key = "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return f"{key} in {var}", f"{var}[{key}]"


def asks_for_gpu(var: str, kinds: Sequence[WorkloadKind]) -> str:
    """CEL, true when ``var`` (object or oldObject) is of a table kind and one of its templates asks for an
    nvidia.com/ resource, sets a custom GPU key, carries KAI Scheduler's fractional-GPU annotations in its
    metadata or a pod spec patch, or, for an Argo kind, its WorkflowSpec gives every template's pod such
    annotations or a patch; each kind's templates are read only for that kind."""
    parts = []
    for kind in kinds:
        templates = " || ".join(f"{_template(var, ref)}{_kai(var, ref)}{_workflow(var, kind, ref)}"
                                for ref in kind.templates)
        parts.append(f"(request.kind.group == '{kind.group}' && request.kind.kind == '{kind.kind}' && ({templates}))")
    return " || ".join(parts) if parts else "false"


class _Names:
    """Fresh comprehension variables: nested exists() must not shadow one another."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"w{self.n}"


def _walk(var: str, steps: Sequence[str | int], leaf: str, names: _Names) -> str:
    """CEL true when some value the steps reach from ``var`` makes ``leaf`` true; ``leaf`` uses ``@`` for it."""
    if not steps:
        return leaf.replace("@", var)
    step, rest = steps[0], steps[1:]
    if isinstance(step, str):
        present, child = select(var, step)
        return f"{present} && {_walk(child, rest, leaf, names)}"
    name = names()
    if step == 0:  # every item of a list
        return f"{var}.exists({name}, {_walk(name, rest, leaf, names)})"
    return f"{var}.exists({name}, {_walk(f'{var}[{name}]', rest, leaf, names)})"  # every value of a map


def _resources(resources: str) -> str:
    present, table = select("@", resources)
    return (f"{present} && ((has({table}.limits) && {table}.limits.exists(k, k.startsWith('nvidia.com/')))"
            f" || (has({table}.requests) && {table}.requests.exists(k, k.startsWith('nvidia.com/'))))")


def _template(var: str, ref: PodTemplateRef) -> str:
    names = _Names()
    pod_spec = parse(ref.pod_spec)
    leaves = [_walk("@", (*pod_spec, section, 0), _resources("resources"), names)
              for section in ("containers", "initContainers")]
    leaves += [_walk("@", parse(c.path), _resources(c.resources), names) for c in ref.containers]
    leaves += [_walk("@", parse(k.path), "true", names) for k in ref.gpu_keys]
    if ref.pod_spec_patch:
        leaves.append(_walk("@", parse(ref.pod_spec_patch), _PATCH, names))
    body = " || ".join(f"({leaf})" for leaf in leaves)
    return f"({_walk(var, parse(ref.path), f'({body})', names)})"


#: A pod spec patch is sent whatever its text: the engine parses it as YAML, where ``nvidia\u002ecom/gpu`` (or
#: any other escape) is nvidia.com/gpu, so no substring test of the text can tell that it asks for none.
_PATCH = "type(@) == string && size(@) > 0"
#: KAI Scheduler's annotations (policy/admission/fractions.py) in an annotations map at ``@``.
KAI_ANNOTATIONS = "type(@) == map && (" + " || ".join(f"'{key}' in @" for key in ASKING) + ")"


def _workflow(var: str, kind: WorkloadKind, ref: PodTemplateRef) -> str:
    """`` || CEL`` true when an Argo kind's WorkflowSpec gives the templates' pods a podSpecPatch, KAI annotations
    or nvidia.com/ resources (spec.podSpecPatch, templateDefaults.podSpecPatch, podMetadata,
    templateDefaults.metadata, templateDefaults.container and .script: what the engine applies to each template's
    pod, policy/admission/templates.py _Workflow); "" for other kinds."""
    at = workflow_at(kind, ref)
    if at is None:
        return ""
    names = _Names()
    leaves = [_walk("@", steps, leaf, names) for steps, leaf in (
        (("podSpecPatch",), _PATCH), (("templateDefaults", "podSpecPatch"), _PATCH),
        (("podMetadata", "annotations"), KAI_ANNOTATIONS),
        (("templateDefaults", "metadata", "annotations"), KAI_ANNOTATIONS),
        *((("templateDefaults", main), _resources("resources")) for main in DEFAULTED_CONTAINERS))]
    return f" || ({_walk(var, at, '(' + ' || '.join(f'({leaf})' for leaf in leaves) + ')', names)})"


def _kai(var: str, ref: PodTemplateRef) -> str:
    """`` || CEL`` true when the template's metadata carries gpu-fraction or gpu-memory (policy/admission/fractions.py),
    where the engine reads a template's metadata: beside a PodTemplateSpec's spec, or an Argo template's own; "" for
    a template with none (its pod spec elsewhere)."""
    if ref.pod_spec != ".":
        return ""
    steps = parse(ref.path)
    base = steps[:-1] if steps[-1:] == ("spec",) else steps
    return f" || ({_walk(var, (*base, 'metadata', 'annotations'), KAI_ANNOTATIONS, _Names())})"
