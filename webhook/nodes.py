"""The node cache as the webhook sees it: what it asks (a pinned pod's node, within the review's deadline), what it
counts, and how a policy's label keys reach it. The cache itself is live-cluster I/O (cluster/nodes.py); the command
line hands a factory of it to the server, so nothing here imports it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from webhook import store as webhook_store

#: What a lookup may spend of the review's remaining budget: the rest is the rules' and the answer's.
LOOKUP_SHARE = 0.5


class CacheState(Protocol):
    synced: bool
    nodes: int
    last_event: float | None


class NodeSource(Protocol):
    """cluster.nodes.NodeCache, structurally."""

    @property
    def state(self) -> CacheState: ...

    def use_keys(self, keys: Iterable[str]) -> None: ...

    def lookup(self, name: str, *, deadline: float) -> tuple[str, Mapping[str, str] | None]: ...

    def start(self) -> Any: ...


class LookupCounter(Protocol):
    def node_lookup(self, outcome: str) -> None: ...


#: Builds a worker's cache after the fork, given what it reports to (metrics); the command line makes it.
NodeSourceFactory = Callable[[Any], NodeSource]


def nodes_for(source: NodeSource | None, name: str | None, deadline: float,
              metrics: LookupCounter | None = None) -> dict[str, Mapping[str, str] | None] | None:
    """The engine's per-review node list for a pod naming node ``name``: {name: labels}, {name: None} for a node
    that does not exist, or None (judge on every class) when there is no cache, no pinned node, or the cache cannot
    say. The lookup gets at most half of what is left of the budget, so an API server slow to answer one GET
    leaves the rules their time (the lookup itself never waits past that)."""
    if source is None or name is None:
        return None
    now = time.monotonic()
    outcome, labels = source.lookup(name, deadline=now + max(0.0, deadline - now) * LOOKUP_SHARE)
    if metrics is not None:
        metrics.node_lookup(outcome)
    if outcome == "unknown":
        return None
    return {name: labels}


class KeysFollowPolicy:
    """A store observer that gives the cache the label keys of each policy loaded (Engine.selector_keys)."""

    def __init__(self, source: NodeSource) -> None:
        self.source = source

    def policy_loaded(self, snapshot: webhook_store.Snapshot) -> None:
        keys = getattr(snapshot.engine, "selector_keys", None)
        if keys is not None:
            self.source.use_keys(keys)

    def policy_reload_failed(self) -> None:
        pass  # the last good policy, and its keys, stay
