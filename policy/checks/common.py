"""What every spec check shares: its signature and the paths of a node class."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from policy.resolved.resolve import ResolvedPolicy
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import ClusterGPUPolicy, NodeClass

Check = Callable[[ResolvedPolicy], Iterator[Diagnostic]]


def classes_of(policy: ClusterGPUPolicy) -> Iterator[tuple[int, NodeClass]]:
    return enumerate(policy.spec.node_classes)


def class_path(i: int, *rest: str | int) -> tuple[str | int, ...]:
    return ("spec", "nodeClasses", i, *rest)
