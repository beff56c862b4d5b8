"""Label-selector algebra: matching labels, and whether two selectors can select one object."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]

#: The label the API server puts on every namespace with its own name (Kubernetes 1.21+).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Requirement:
    """One label requirement, the shape shared by label selectors and node affinity terms."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values  # NotIn


def requirements_from(
    match_labels: Mapping[str, str], expressions: Iterable[tuple[str, str, Iterable[str]]] = ()
) -> tuple[Requirement, ...]:
    """Normalise matchLabels plus matchExpressions into a conjunction of requirements."""
    reqs = [Requirement(k, "In", frozenset([v])) for k, v in sorted(match_labels.items())]
    reqs += [Requirement(k, op, frozenset(vals)) for k, op, vals in expressions]  # type: ignore[arg-type]
    return tuple(reqs)


def matches(requirements: Iterable[Requirement], labels: Mapping[str, str]) -> bool:
    """True when ``labels`` satisfy every requirement (an empty selector matches everything)."""
    return all(r.matches(labels) for r in requirements)


def may_overlap(a: Iterable[Requirement], b: Iterable[Requirement]) -> bool:
    """Whether some label set satisfies both conjunctions (exact for these four operators)."""
    by_key: dict[str, list[Requirement]] = {}
    for req in (*a, *b):
        by_key.setdefault(req.key, []).append(req)
    return all(_key_satisfiable(reqs) for reqs in by_key.values())


def _key_satisfiable(reqs: list[Requirement]) -> bool:
    must_exist = any(r.operator in ("In", "Exists") for r in reqs)
    must_not_exist = any(r.operator == "DoesNotExist" for r in reqs)
    if must_exist and must_not_exist:
        return False
    if not must_exist:
        return True  # leaving the label off satisfies NotIn and DoesNotExist alike
    allowed: set[str] | None = None
    for r in reqs:
        if r.operator == "In":
            allowed = set(r.values) if allowed is None else allowed & r.values
    excluded = set().union(*(r.values for r in reqs if r.operator == "NotIn"))
    if allowed is None:
        return True  # Exists plus NotIn: some other value works
    return bool(allowed - excluded)


def conflicting_key(a: Mapping[str, str], b: Mapping[str, str]) -> str | None:
    """A key both equality selectors name with different values (it proves them disjoint)."""
    for key in sorted(a.keys() & b.keys()):
        if a[key] != b[key]:
            return key
    return None


_NEGATION: dict[str, Operator] = {"In": "NotIn", "NotIn": "In", "Exists": "DoesNotExist", "DoesNotExist": "Exists"}


def negate(requirements: tuple[Requirement, ...]) -> Requirement | None:
    """The single requirement matching exactly what ``requirements`` does not, if one exists.

    A label selector is a conjunction, so only a one-requirement selector has a negation that is
    itself a selector (De Morgan turns longer ones into a disjunction).
    """
    if len(requirements) != 1:
        return None
    only = requirements[0]
    return Requirement(only.key, _NEGATION[only.operator], only.values)
