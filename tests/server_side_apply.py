"""Server-side apply, as the API server computes it, for tests: field ownership per manager and conflicts.

A test stand-in for the Kubernetes field manager (k8s.io/apiserver fieldmanager, sigs.k8s.io/structured-merge-diff),
written from the documented rules (https://kubernetes.io/docs/reference/using-api/server-side-apply/):
- every manager owns a set of fields; an Apply sets the applier's set to exactly the fields it sent;
- applying a field another manager owns with a *different* value is a conflict (with an Apply or an Update
  manager alike); with ``force`` the applier takes the field over, without it the request fails (409);
- applying the same value shares ownership; a field the applier owned before and no longer sends is removed from
  the object unless another manager still owns it;
- an Update (create, PUT, merge patch) gives its manager every field it changed or set, taken from the others;
- fields set by deserialization defaulting belong to the manager whose request carried the object
  (kubernetes/kubernetes#129960 contrasts late defaults with these "deserialization defaults").
Maps are merged key by key (granular, like labels and CRD objects); lists and scalars are atomic, which is what the
objects these tests apply contain (ClusterPolicy fields, node labels). Identity fields are never owned.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Path = tuple[str, ...]
_IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"),
             ("metadata", "managedFields"), ("metadata", "resourceVersion"), ("metadata", "uid")}


def leaves(obj: Mapping[str, Any], prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """(path, value) of every scalar or list in an object; maps are walked key by key."""
    for key, value in obj.items():
        path = (*prefix, key)
        if path in _IDENTITY or (prefix == () and key == "status"):
            continue
        if isinstance(value, Mapping):
            yield from leaves(value, path)  # an empty map owns nothing (labels: {} clears no one's labels)
        else:
            yield path, value


def _paths(fields: Mapping[str, Any], prefix: Path = ()) -> Iterator[Path]:
    """The owned paths of a fieldsV1 set: ``f:<name>`` keys down to an empty set (a leaf)."""
    for key, value in fields.items():
        if not key.startswith("f:"):
            continue  # "." (the node itself), k:/v: list keys: not in the objects these tests manage
        path = (*prefix, key[2:])
        if isinstance(value, Mapping) and value:
            yield from _paths(value, path)
        else:
            yield path


def get(obj: Mapping[str, Any], path: Path) -> Any:
    node: Any = obj
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _set(obj: Obj, path: Path, value: Any) -> None:
    node = obj
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = copy.deepcopy(value)


def _delete(obj: Obj, path: Path) -> None:
    parents = [obj]
    for part in path[:-1]:
        parents.append(parents[-1].get(part, {}))
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):  # drop maps the removal left empty
        if parents[depth] == {}:
            parents[depth - 1].pop(path[depth - 1], None)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


@dataclass(frozen=True)
class Conflict:
    manager: str
    operation: str
    path: Path

    def __str__(self) -> str:
        return f'conflict with "{self.manager}"{"" if self.operation == "Apply" else " (not APPLY)"}: ' \
               + "".join(f".{p}" if "." not in p and "/" not in p else f'[{p}]' for p in self.path)


@dataclass
class ManagedObject:
    """A live object and its managedFields: manager -> (operation, owned paths), and when each manager last changed
    a field it owns (the entry's ``time``, set to ``clock`` by every change here)."""

    obj: Obj
    managers: dict[str, tuple[str, set[Path]]] = field(default_factory=dict)
    times: dict[str, str] = field(default_factory=dict)
    clock: str = ""

    @classmethod
    def recorded(cls, obj: Obj, *, clock: str = "") -> ManagedObject:
        """An object as recorded with its managedFields (fieldsV1), whose managers keep their owned fields and times."""
        managers: dict[str, tuple[str, set[Path]]] = {}
        times: dict[str, str] = {}
        for entry in obj.get("metadata", {}).get("managedFields") or ():
            managers[entry["manager"]] = (entry.get("operation", "Update"), set(_paths(entry.get("fieldsV1") or {})))
            if entry.get("time"):
                times[entry["manager"]] = entry["time"]
        return cls(copy.deepcopy(obj), managers, times, clock)

    def owners(self, path: Path) -> list[tuple[str, str]]:
        return sorted((m, op) for m, (op, paths) in self.managers.items() if path in paths)

    def update(self, new: Obj, manager: str) -> None:
        """A create, PUT or merge patch by ``manager``: it owns every field it set or changed."""
        before = dict(leaves(self.obj))
        after = dict(leaves(new))
        changed = {p for p, v in after.items() if before.get(p, _MISSING) != v}
        changed |= {p for p in before if p not in after}
        for other, (op, paths) in self.managers.items():
            self.managers[other] = (op, paths - changed)
        op, mine = self.managers.get(manager, ("Update", set()))
        self.managers[manager] = ("Update", (mine | changed) & set(after))
        self._touch(manager, changed)
        self.obj = copy.deepcopy(new)

    def apply(self, applied: Obj, manager: str, *, force: bool = False) -> list[Conflict]:
        """An Apply by ``manager``; returns the conflicts and changes nothing when there are any (unless forced)."""
        sent = dict(leaves(applied))
        conflicts = [Conflict(other, op, path)
                     for path, value in sorted(sent.items())
                     for other, op in self.owners(path)
                     if other != manager and get(self.obj, path) != value]
        if conflicts and not force:
            return conflicts
        taken = {c.path for c in conflicts}
        for other, (op, paths) in list(self.managers.items()):
            if other != manager:
                self.managers[other] = (op, paths - taken)
        _, before = self.managers.get(manager, ("Apply", set()))
        for path in before - set(sent):
            if not any(path in paths for m, (_, paths) in self.managers.items() if m != manager):
                _delete(self.obj, path)
        changed = {p for p, v in sent.items() if get(self.obj, p) != v} | (before - set(sent))
        for path, value in sent.items():
            _set(self.obj, path, value)
        self.managers[manager] = ("Apply", set(sent))
        self.managers = {m: v for m, v in self.managers.items() if v[1]}
        self._touch(manager, changed)
        return conflicts

    def _touch(self, manager: str, changed: set[Path]) -> None:
        if changed and self.clock:
            self.times[manager] = self.clock

    def managed_fields(self) -> list[Obj]:
        """metadata.managedFields as the API server returns them (fieldsV1)."""
        out = []
        for manager, (operation, paths) in sorted(self.managers.items()):
            fields: Obj = {}
            for path in sorted(paths):
                node = fields
                for part in path:
                    node = node.setdefault(f"f:{part}", {})
            entry = {"manager": manager, "operation": operation, "apiVersion": self.obj.get("apiVersion", "v1"),
                     "fieldsType": "FieldsV1", "fieldsV1": fields}
            if manager in self.times:
                entry["time"] = self.times[manager]
            out.append(entry)
        return out

    def live(self) -> Obj:
        """The object with its managedFields, as a GET returns it."""
        obj = copy.deepcopy(self.obj)
        obj.setdefault("metadata", {})["managedFields"] = self.managed_fields()
        return obj
