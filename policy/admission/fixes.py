"""Fixes: the typed edits a hint stands for, applied to the admitted object mechanically.

A finding's hint is rendered from its Fix, so the text and the edit cannot disagree; the engine keeps a Fix
only after applying it to the object and re-running every rule on the result (policy/admission/remedies.py). Each edit
applies itself to a copy of the object and records what it did as RFC 6902 JSON Patch operations (paths are
RFC 6901 pointers into the object), which `gpupolicy admit --output json` and the webhook hand out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

from policy.kube.scheduling import NodeTaint
from policy.spec.diagnostics import Path, quotable, value_at

PatchOp = dict[str, Any]
"""A JSON Patch operation whose ``path`` is kept as a tuple until the fix is written out (Fix.to_dict)."""
Doc = dict[str, Any]


def pointer(path: Path) -> str:
    """An RFC 6901 JSON pointer: ``/spec/containers/0/resources/limits/nvidia.com~1gpu``."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _rooted(root: Path, path: Path) -> str:
    return pointer((*root, *path))


Where = Callable[[Path], "Path | None"]
"""Where a path into the object a fix was found for is in another object (a custom resource holding it as a pod
template), or None where that object has no such field (policy/admission/templates.py, Template.where)."""
_E = TypeVar("_E", bound="_PodSpecEdit")


class _PodSpecEdit:
    """An edit of one pod spec field (``spec_path`` + ``field``): moved with that field."""

    spec_path: Path
    field: ClassVar[str]

    def relocated(self: _E, where: Where) -> _E | None:
        found = where((*self.spec_path, self.field))
        return replace(self, spec_path=found[:-1]) if found is not None else None  # type: ignore[type-var]


class _FieldEdit:
    """An edit of one field at ``path``: moved with it."""

    path: Path

    def relocated(self: Any, where: Where) -> Any:
        found = where(self.path)
        return replace(self, path=found) if found is not None else None


class _ContainerEdit:
    """An edit of one container's resources: moved with the container (never onto one whose resources are written
    under another key or inside a string, where ``where`` answers None)."""

    container_path: Path

    def relocated(self: Any, where: Where) -> Any:
        found = where(self.container_path)
        return replace(self, container_path=found) if found is not None else None


#: Edits a hint names one by one: a pod of 1,000 containers gets a hint of a few lines, not of 1,000 clauses.
MAX_DESCRIBED = 8


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


# --- copy-on-write access into a shared object --------------------------------------------------------------------


def _writable(doc: Doc, path: Path) -> Any:
    """The container at ``path``, every level on the way copied first, so an edit never touches the parts the
    copy shares with the original object; None where the path is absent."""
    current: Any = doc
    for part in path:
        child = value_at(current, (part,))
        if not isinstance(child, dict | list):
            return None
        child = dict(child) if isinstance(child, dict) else list(child)
        current[part] = child
        current = child
    return current


def _put(doc: Doc, path: Path, value: Any) -> PatchOp:
    """Set ``path`` to ``value``; missing parent mappings (a nodeSelector, a container's resources and limits) are
    created with it, by one ``add`` at the deepest mapping the object has, replacing what was there where it is no
    mapping (as JSON Patch's add replaces a member)."""
    for depth in range(len(path) - 1, -1, -1):
        parent = _writable(doc, path[:depth])
        if isinstance(parent, dict):  # whatever it holds at path[depth] is replaced, as JSON Patch's add does
            added = value
            for part in reversed(path[depth + 1:]):
                added = {part: added}
            parent[path[depth]] = added
            return {"op": "add", "path": path[:depth + 1], "value": added}
        if isinstance(parent, list) and isinstance(path[depth], int):
            break  # an item the list lacks: nothing to add the field to (a list where a mapping belongs is replaced)
    raise ValueError(f"no mapping to write {path} into")


def _remove(doc: Doc, path: Path) -> list[PatchOp]:
    """Remove ``path``; nothing (and no op, which JSON Patch would refuse) where it is absent."""
    if value_at(doc, path) is None and not _present(doc, path):
        return []
    parent = _writable(doc, path[:-1])
    del parent[path[-1]]
    return [{"op": "remove", "path": path}]


def _present(doc: Doc, path: Path) -> bool:
    parent = value_at(doc, path[:-1])
    if isinstance(parent, dict):
        return path[-1] in parent
    return isinstance(parent, list) and isinstance(path[-1], int) and 0 <= path[-1] < len(parent)


# --- placement -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetNodeSelector(_PodSpecEdit):
    """Set one nodeSelector entry of the pod spec."""

    spec_path: Path
    key: str
    value: str
    overrides: bool = False
    """The pod's nodeSelector already names the key with another value (the object's stated intent)."""
    kind: ClassVar[str] = "set-node-selector"
    field: ClassVar[str] = "nodeSelector"

    def apply(self, doc: Doc) -> list[PatchOp]:
        return [_put(doc, (*self.spec_path, "nodeSelector", self.key), self.value)]

    def describe(self) -> str:
        return f"set nodeSelector {self.key}: {self.value}"

    def to_dict(self, root: Path = ()) -> dict[str, Any]:
        return {"kind": self.kind, "path": _rooted(root, (*self.spec_path, "nodeSelector", self.key)),
                "value": self.value}


@dataclass(frozen=True)
class AddToleration(_PodSpecEdit):
    """Add a toleration of one taint to the pod spec."""

    spec_path: Path
    key: str
    operator: str
    value: str
    effect: str
    kind: ClassVar[str] = "add-toleration"
    field: ClassVar[str] = "tolerations"

    @property
    def toleration(self) -> dict[str, str]:
        found = {"key": self.key, "operator": self.operator, "effect": self.effect}
        return {**found, "value": self.value} if self.operator == "Equal" else found

    def apply(self, doc: Doc) -> list[PatchOp]:
        path = (*self.spec_path, "tolerations")
        have = _writable(doc, path)
        if isinstance(have, list):
            have.append(self.toleration)
            return [{"op": "add", "path": (*path, "-"), "value": self.toleration}]
        return [_put(doc, path, [self.toleration])]

    def describe(self) -> str:
        return f"tolerate the taint {NodeTaint(self.key, self.value, self.effect).describe()}"

    def to_dict(self, root: Path = ()) -> dict[str, Any]:
        return {"kind": self.kind, "path": _rooted(root, (*self.spec_path, "tolerations")), "value": self.toleration}


@dataclass(frozen=True)
class Pin:
    """Send the pod to one class: its nodeSelector entries, what must go for them to hold, and the taints of
    its nodes to tolerate."""

    node_class: str
    edits: tuple[SetNodeSelector | RemovePlacement | AddToleration, ...]

    def relocated(self, where: Where) -> Pin | None:
        edits = tuple(e.relocated(where) for e in self.edits)
        return replace(self, edits=edits) if None not in edits else None  # type: ignore[arg-type]

    def describe(self) -> str:
        entries = [e for e in self.edits if isinstance(e, SetNodeSelector)]
        rest = [e.describe() for e in self.edits if not isinstance(e, SetNodeSelector)]
        if not entries:
            return f"{_join(rest)} (class {self.node_class})"
        text = (f"pin the pod to class {self.node_class} with nodeSelector {{"
                + ", ".join(f"{e.key}: {e.value}" for e in entries) + "}")
        return f"{text}, {_join(rest)}" if rest else text


# --- other fields the rules read -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetField(_FieldEdit):
    """Set one field of the object a rule reads (a scheduler name, an annotation) to a value."""

    path: Path
    value: str
    what: str
    """``schedulerName``, ``annotation nvidia.com/vgpu-mode``: the field as the hint names it."""
    kind: ClassVar[str] = "set-field"

    def apply(self, doc: Doc) -> list[PatchOp]:
        return [_put(doc, self.path, self.value)]

    def describe(self) -> str:
        return f"set {self.what} to {self.value}"

    def to_dict(self, root: Path = ()) -> dict[str, Any]:
        return {"kind": self.kind, "path": _rooted(root, self.path), "value": self.value}


@dataclass(frozen=True)
class RemoveField(_FieldEdit):
    """Remove one field of the object a rule reads (spec.nodeName, a container's privileged flag, an annotation)."""

    path: Path
    what: str
    kind: ClassVar[str] = "remove-field"

    def apply(self, doc: Doc) -> list[PatchOp]:
        return _remove(doc, self.path)

    def describe(self) -> str:
        return f"remove {self.what}"

    def to_dict(self, root: Path = ()) -> dict[str, Any]:
        return {"kind": self.kind, "path": _rooted(root, self.path)}


@dataclass(frozen=True)
class RemovePlacement(RemoveField):
    """Remove a nodeSelector entry, a node-affinity expression or term, or the whole required node affinity
    (``what``: ``nodeSelector nvidia.com/gpu.product=Tesla-T4``, as the hint names it)."""

    kind: ClassVar[str] = "remove-placement"


# --- the GPU request -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetAmount(_ContainerEdit):
    """Write one amount into a container's limits, and into its requests where it has one (they must be equal)."""

    container_path: Path
    container: str
    resource: str
    count: int
    fields: tuple[str, ...] = ("limits",)
    """``limits``, plus ``requests`` where the container's requests name the resource too."""
    kind: ClassVar[str] = "set-resource"

    def apply(self, doc: Doc) -> list[PatchOp]:
        return [_put(doc, (*self.container_path, "resources", f, self.resource), self.count) for f in self.fields]

    def describe(self) -> str:
        both = " (limits and requests)" if "requests" in self.fields else ""
        return f'request {self.resource}: {self.count} in container "{self.container}"{both}'

    def to_dict(self, root: Path = ()) -> dict[str, Any]:
        return {"kind": self.kind, "path": _rooted(root, self.container_path), "resource": self.resource,
                "count": self.count, "fields": list(self.fields)}


@dataclass(frozen=True)
class RenameResource(_ContainerEdit):
    """Ask for another resource instead of one a container names, in its limits and requests alike."""

    container_path: Path
    container: str
    resource: str
    instead: str
    count: int
    fields: tuple[str, ...] = ("limits",)
    """Where the new resource is written: ``limits``, plus ``requests`` where the old one was requested too."""
    respells: bool = False
    """The rename answers mig-strategy-mismatch: the same count of the devices the selected nodes advertise, under
    the other MIG strategy's name (the pod keeps its placement and its amount)."""
    kind: ClassVar[str] = "rename-resource"

    def apply(self, doc: Doc) -> list[PatchOp]:
        resources = (*self.container_path, "resources")
        ops = [op for f in ("limits", "requests") for op in _remove(doc, (*resources, f, self.resource))]
        return ops + [_put(doc, (*resources, f, self.instead), self.count) for f in self.fields]

    def describe(self) -> str:
        return f'request {self.instead}: {self.count} instead of {self.resource} in container "{self.container}"'

    def to_dict(self, root: Path = ()) -> dict[str, Any]:
        return {"kind": self.kind, "path": _rooted(root, self.container_path), "resource": self.resource,
                "instead": self.instead, "count": self.count, "fields": list(self.fields)}


@dataclass(frozen=True)
class RemoveResource(_ContainerEdit):
    """Drop one resource from a container's limits and requests."""

    container_path: Path
    container: str
    resource: str
    kind: ClassVar[str] = "remove-resource"

    def apply(self, doc: Doc) -> list[PatchOp]:
        return [op for f in ("limits", "requests") for op in _remove(doc, (*self.container_path, "resources", f,
                                                                           self.resource))]

    def describe(self) -> str:
        return f'remove {self.resource} from container "{self.container}"'

    def to_dict(self, root: Path = ()) -> dict[str, Any]:
        return {"kind": self.kind, "path": _rooted(root, self.container_path), "resource": self.resource}


Edit = (SetNodeSelector | RemovePlacement | AddToleration | SetField | RemoveField | SetAmount | RenameResource
        | RemoveResource)
Step = Edit | Pin


@dataclass(frozen=True)
class Fix:
    """Edits that, applied together, admit the object; ``patch`` is filled in once the engine applied them."""

    steps: tuple[Step, ...]
    note: str = ""
    """Why, in a few words, appended to the hint in parentheses."""
    patch: tuple[PatchOp, ...] = ()
    """The object edits as JSON Patch operations on the object the fix was found for."""
    root: Path = ()
    """Where that object sits in the document a reader holds (``items/3`` of a List); paths are prefixed with it."""
    alternatives: tuple[Fix, ...] = ()
    """Other fixes the hint names after this one ("or ..."), each applied and re-evaluated like this one before it
    is kept (policy/admission/remedies.py): a hint names no alternative that would be denied in turn."""

    @functools.cached_property
    def edits(self) -> tuple[Edit, ...]:
        return tuple(e for s in self.steps for e in (s.edits if isinstance(s, Pin) else (s,)))

    @functools.cached_property
    def cost(self) -> tuple[int, int, int, int, int]:
        """How much the fix changes, to prefer the least: whether it drops what the object states (a nodeSelector
        entry or affinity it wrote, its scheduler, a field), whether it changes the amount asked for (a count, a
        resource removed, another resource), whether it replaces a nodeSelector value the object set, whether it
        respells the request for the other MIG strategy (RenameResource.respells); then its number of steps. So a
        placement change comes first, a replaced
        selector value included: the pod keeps what it asked for and goes where that is offered. No fix moves the
        object to another namespace: the namespace picks the tenant, and a fix stays inside it."""
        edits = self.edits
        drops = any(isinstance(e, SetField | RemoveField) for e in edits)
        replaces = any(isinstance(e, SetNodeSelector) and e.overrides for e in edits)
        respells = any(isinstance(e, RenameResource) and e.respells for e in edits)
        amount = any(isinstance(e, SetAmount | RemoveResource) or (isinstance(e, RenameResource) and not e.respells)
                     for e in edits)
        return int(drops), int(amount), int(replaces), int(respells), len(self.steps)

    def then(self, other: Fix) -> Fix:
        """This fix's steps, then the other's (notes joined; alternatives, checked for one fix alone, dropped)."""
        return Fix.join((self, other))

    @staticmethod
    def join(fixes: Sequence[Fix]) -> Fix:
        """The fixes' steps and patches in order, in one pass (folding ``then`` copies what it gathered each time:
        quadratic in the fixes), notes joined once each; alternatives, checked for one fix alone, dropped."""
        notes = "; ".join(dict.fromkeys(f.note for f in fixes if f.note))
        return Fix(tuple(s for f in fixes for s in f.steps), notes, tuple(op for f in fixes for op in f.patch))

    def describe(self) -> str:
        """The fix in words; a fix of many edits names the first MAX_DESCRIBED (its JSON form has every one)."""
        # the same edit in several templates (pin each to one class) is named once; the JSON has each
        distinct = list(dict.fromkeys(s.describe() for s in self.steps))
        named = distinct[:MAX_DESCRIBED]
        if len(distinct) > MAX_DESCRIBED:
            named.append(f"{len(distinct) - MAX_DESCRIBED} more edits like them")
        text = _join(named)
        notes = [n for n in (self.note, self._or()) if n]
        return f"{text} ({'; '.join(notes)})" if notes else text

    def _or(self) -> str:
        """The alternatives as the hint names them: only what differs where they rename the same resource."""
        if not self.alternatives:
            return ""
        parts = [_instead(self, a) or a.describe() for a in self.alternatives]
        return "or, also admitted, " + " or ".join(parts)

    def apply(self, obj: Mapping[str, Any]) -> tuple[Doc, tuple[PatchOp, ...]]:
        """A copy of ``obj`` with every edit made (sharing the parts no edit touches), and the operations."""
        doc = dict(obj)
        ops = [op for edit in self.edits for op in edit.apply(doc)]
        return doc, tuple(ops)

    def relocated(self, where: Where) -> Fix | None:
        """The same edits at the paths ``where`` gives them in another object; None where some edit's field has no
        place there. Alternatives that have none are dropped. The JSON Patch is moved too where every operation's
        path has a place, which is right only where the other object holds the same fields there (a pod spec that
        is the object's own): otherwise apply the result to that object for its patch."""
        steps = tuple(s.relocated(where) for s in self.steps)
        if None in steps:
            return None
        ops = tuple({**op, "path": path} for op in self.patch if (path := where(op["path"])) is not None)
        others = tuple(a for a in (a.relocated(where) for a in self.alternatives) if a is not None)
        return Fix(steps, self.note, ops if len(ops) == len(self.patch) else (), (), others)  # type: ignore[arg-type]

    def under(self, prefix: Path) -> Fix:
        """The same fix for a reader holding the object at ``prefix`` of a larger document."""
        return replace(self, root=(*prefix, *self.root), alternatives=tuple(a.under(prefix) for a in self.alternatives))

    def to_dict(self) -> dict[str, Any]:
        """The fix as data: the typed edits and the JSON Patch."""
        out: dict[str, Any] = {
            "edits": [e.to_dict(self.root) for e in self.edits],
            "jsonPatch": [{**op, "path": pointer((*self.root, *op["path"]))} for op in self.patch],
        }
        if self.alternatives:
            out["alternatives"] = [a.to_dict() for a in self.alternatives]
        return out

    @functools.cached_property
    def quoted(self) -> dict[str, Any] | None:
        """``to_dict()`` where every string in it survives `bounded` whole, else None (diagnostics.quotable): what
        answers and reports carry. Kept, as a memoised verdict answers with the same fix many times."""
        return quotable(self.to_dict())


def _instead(fix: Fix, other: Fix) -> str:
    """``nvidia.com/mig-2g.20gb: 1`` where ``other`` is ``fix`` with one resource renamed to another, else ""."""
    if len(fix.steps) != 1 or len(other.steps) != 1:
        return ""
    mine, theirs = fix.steps[0], other.steps[0]
    if not isinstance(mine, RenameResource) or not isinstance(theirs, RenameResource):
        return ""
    same = replace(theirs, instead=mine.instead, count=mine.count) == mine
    return f"{theirs.instead}: {theirs.count}" if same else ""
