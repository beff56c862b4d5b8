"""The node-label plan: which labels gpupolicy owns on which nodes, computed once from the resolved classes.

The compiler writes it into the label reconciler's ConfigMap; the reconciler (cluster/reconciler.py) reads it
back and applies it. Ownership is by key: the plan names every key gpupolicy may write (``owned_keys``); any
other key is never touched, and a value of an owned key that another writer set is a conflict to report, not
to overwrite.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policy.hardware.labels import OPERATOR_DEFAULTS, OPERATOR_FIELD_MANAGER
from policy.kube import selectors
from policy.resolved.resolve import ResolvedPolicy

PLAN_VERSION = 1
#: The server-side-apply field manager of the reconciler: the API server records which label keys it owns.
FIELD_MANAGER = "gpupolicy-node-labels"


@dataclass(frozen=True)
class ClassLabels:
    name: str
    node_selector: Mapping[str, str]
    labels: Mapping[str, str]


@dataclass(frozen=True)
class LabelPlan:
    cluster: str
    classes: tuple[ClassLabels, ...]
    operator_defaults: Mapping[str, str] = field(default_factory=dict)
    """Owned keys whose GPU Operator default (policy.hardware.labels.OPERATOR_DEFAULTS) the reconciler replaces: deploy
    gpu-operator only, where the operator runs and may label a node first."""

    def overrides(self, key: str, have: str | None, owners: Iterable[str]) -> bool:
        """Whether ``have`` is the GPU Operator's default for ``key``, written by the operator and nobody else:
        the reconciler then takes the key over (a forced apply), where any other writer's value is a conflict."""
        writers = set(owners)
        return (have is not None and self.operator_defaults.get(key) == have
                and writers == {OPERATOR_FIELD_MANAGER})

    @property
    def owned_keys(self) -> tuple[str, ...]:
        return tuple(sorted({key for c in self.classes for key in c.labels}))

    def matching(self, node_labels: Mapping[str, str]) -> tuple[ClassLabels, ...]:
        """The classes whose selector a node's labels satisfy (one, unless selectors overlap)."""
        return tuple(c for c in self.classes
                     if selectors.matches(selectors.requirements_from(c.node_selector), node_labels))

    def to_json(self) -> str:
        document = {"version": PLAN_VERSION, "cluster": self.cluster, "fieldManager": FIELD_MANAGER,
                    "ownedKeys": list(self.owned_keys),
                    "classes": [{"name": c.name, "nodeSelector": dict(sorted(c.node_selector.items())),
                                 "labels": dict(sorted(c.labels.items()))} for c in self.classes]}
        if self.operator_defaults:
            document["operatorDefaults"] = dict(sorted(self.operator_defaults.items()))
        return json.dumps(document, indent=2, sort_keys=True) + "\n"


def build_plan(resolved: ResolvedPolicy) -> LabelPlan:
    """Every class with labels the reconciler owns (``ResolvedClass.reconciled_labels``), by name."""
    classes = tuple(ClassLabels(rc.name, dict(rc.node_selector), dict(rc.reconciled_labels))
                    for rc in sorted(resolved.classes, key=lambda rc: rc.name) if rc.reconciled_labels)
    owned = {key for c in classes for key in c.labels}
    defaults = {key: value for key, value in OPERATOR_DEFAULTS.items() if key in owned} \
        if resolved.spec.device_plugin.deploy == "gpu-operator" else {}
    return LabelPlan(resolved.name, classes, defaults)


def plan_from_json(text: str) -> LabelPlan:
    """The plan written by ``to_json``; ValueError with the reason for anything else (never a partial plan)."""
    try:
        document: Any = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(document, dict) or document.get("version") != PLAN_VERSION:
        raise ValueError(f"not a version {PLAN_VERSION} label plan")
    classes = []
    for item in document.get("classes") or ():
        selector, labels = item.get("nodeSelector"), item.get("labels")
        if not (isinstance(item.get("name"), str) and _strings(selector) and _strings(labels) and selector):
            raise ValueError(f"class entry {item!r} needs a name, a non-empty nodeSelector and labels")
        classes.append(ClassLabels(item["name"], dict(selector), dict(labels)))
    defaults = document.get("operatorDefaults") or {}
    if not _strings(defaults):
        raise ValueError(f"operatorDefaults {defaults!r} must map label keys to values")
    return LabelPlan(str(document.get("cluster", "")), tuple(classes), dict(defaults))


def _strings(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
