"""Where a pod may run, in the scheduler's terms: node requirements, required node affinity, tolerations and
taints (k8s.io/api core/v1; k8s.io/component-helpers scheduling/corev1/nodeaffinity)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policy.kube.fields import Path, descend, is_mapping

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
    size: int = 0
    """matchExpressions plus matchFields entries as written, readable or not (a fix that removes the last one
    must remove the term instead, or the term would match nothing)."""


@dataclass(frozen=True)
class Toleration:
    """One pod toleration (k8s.io/api core/v1 toleration.go ToleratesTaint)."""

    key: str
    operator: str
    """``Equal`` (also when empty), ``Exists``, or the numeric ``Lt`` / ``Gt``."""
    value: str
    effect: str
    """Empty tolerates every effect."""

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == value
        if self.operator == "Exists":
            return True
        if self.operator in ("Lt", "Gt"):
            # Compared as integers behind the alpha gate TaintTolerationComparisonOperators; counted as
            # tolerating whenever the comparison holds, so a class is never wrongly left out.
            mine, theirs = _decimal(self.value), _decimal(value)
            return mine is not None and theirs is not None and (theirs < mine if self.operator == "Lt"
                                                                 else theirs > mine)
        return False


@dataclass(frozen=True)
class NodeTaint:
    """One taint of a node (or of every node of a class), as the scheduler and the kubelet match it."""

    key: str
    value: str
    effect: str

    def describe(self) -> str:
        """``dedicated=training:NoSchedule``, as kubectl writes a taint."""
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    def tolerated_by(self, tolerations: Sequence[Toleration]) -> bool:
        return any(t.tolerates(self.key, self.value, self.effect) for t in tolerations)


#: What an unreadable toleration is read as: one that tolerates everything. The API server refuses such pods,
#: and counting more classes as reachable can only make the tenant rule stricter, never let a pod through.
TOLERATE_ALL = Toleration("", "Exists", "", "")


@dataclass(frozen=True)
class Placement:
    """Where a pod may run: its nodeSelector, its required node-affinity terms (ORed), its tolerations, and the
    node it names, if any."""

    node_selector: tuple[NodeRequirement, ...]
    terms: tuple[AffinityTerm, ...]
    """Empty when the pod has no required node affinity."""
    tolerations: tuple[Toleration, ...] = ()
    node_name: str | None = None
    """spec.nodeName: the scheduler is bypassed and the kubelet of that node admits the pod, checking its
    nodeSelector, required node affinity and NoExecute taints (pkg/kubelet/lifecycle/predicate.go)."""
    node_missing: bool = False
    """The node spec.nodeName names is known not to exist (no kubelet would ever run the pod)."""

    @property
    def unconstrained(self) -> bool:
        """No nodeSelector and no required node affinity (tolerations and taints are checked apart)."""
        return not self.node_selector and not self.terms


def read_tolerations(raw: Any) -> tuple[Toleration, ...]:
    if not isinstance(raw, list):
        return ()
    out = []
    for item in raw:
        if is_mapping(item):  # tested once per item, not once per field
            key, operator, value, effect = (item.get("key", ""), item.get("operator", ""), item.get("value", ""),
                                            item.get("effect", ""))
            if (isinstance(key, str) and isinstance(operator, str) and isinstance(value, str)
                    and isinstance(effect, str) and operator in _OPERATORS):
                out.append(Toleration(key, operator, value, effect))
                continue
        if item is not None:
            out.append(TOLERATE_ALL)
    return tuple(out)


_OPERATORS = frozenset({"", "Equal", "Exists", "Lt", "Gt"})


def _decimal(text: str) -> int | None:
    # content.IsDecimalInteger then strconv.ParseInt: an optional '-', ASCII digits, no leading zero.
    return int(text) if re.fullmatch(r"-?(0|[1-9][0-9]{0,18})", text) else None


REQUIRED_AFFINITY = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")


def read_affinity_terms(spec: Mapping[str, Any], prefix: Path) -> tuple[AffinityTerm, ...]:
    raw = descend(spec, REQUIRED_AFFINITY)
    if not isinstance(raw, list):
        return ()
    terms = []
    for t, term in enumerate(raw):
        path = (*prefix, *REQUIRED_AFFINITY, t)
        if not is_mapping(term):
            return ()  # one unreadable term could match anything: the affinity cannot exclude a class
        expressions = term.get("matchExpressions")
        fields = term.get("matchFields")
        given = bool(expressions) or bool(fields)
        reqs = tuple(_expressions(expressions, (*path, "matchExpressions")))
        size = sum(len(part) for part in (expressions, fields) if isinstance(part, list))
        terms.append(AffinityTerm(reqs, not given, path, size))
    return tuple(terms)


def _expressions(raw: Any, path: Path) -> list[NodeRequirement]:
    if not isinstance(raw, list):
        return []
    out = []
    for e, item in enumerate(raw):
        if not is_mapping(item):
            continue
        key, operator, values = item.get("key"), item.get("operator"), item.get("values")
        if not isinstance(key, str) or not isinstance(operator, str) or operator not in NODE_OPERATORS:
            continue
        vals = tuple(v for v in values if isinstance(v, str)) if isinstance(values, list) else ()
        out.append(NodeRequirement(key, operator, vals, (*path, e)))
    return out
