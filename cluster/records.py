"""A snapshot from recorded objects (``kubectl get nodes,daemonsets,pods -A -o yaml`` saved to files), for
`cluster discover` and `cluster verify` without a cluster: offline, in CI, or on what a colleague pasted."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from cluster import ClusterError
from cluster.resources import (
    Json,
    Snapshot,
    configmap_from,
    daemonset_from,
    deployment_from,
    event_from,
    node_from,
    parse_time,
    pod_from,
    replicaset_from,
    resource_slice_from,
)
from policy.kube.lists import list_items

_PARSERS: Mapping[str, Callable[[Json], Any]] = {
    "Node": node_from, "DaemonSet": daemonset_from, "Pod": pod_from, "Event": event_from,
    "ReplicaSet": replicaset_from, "Deployment": deployment_from, "ConfigMap": configmap_from,
    "ResourceSlice": resource_slice_from,
}
_FIELDS = {"Node": "nodes", "DaemonSet": "daemonsets", "Pod": "pods", "Event": "events", "ReplicaSet": "replicasets",
           "Deployment": "deployments", "ConfigMap": "configmaps", "ResourceSlice": "resource_slices"}
#: The moment of a recording without timestamps: ages are then measured from the epoch, and say so by being huge.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class RecordsError(ClusterError):
    """The files hold nothing to read a cluster from."""


def snapshot_from(documents: Iterable[Any], *, source: str) -> tuple[Snapshot, dict[str, int]]:
    """The snapshot the documents describe, and how many objects of each kind nothing reads were skipped.

    Documents are objects or Lists of them (``kind: List`` or a typed list such as ``NodeList``, whose items may
    omit their kind). Ages are measured from the latest timestamp the objects carry: the recording's moment."""
    found: dict[str, list[Any]] = {field: [] for field in _FIELDS.values()}
    skipped: dict[str, int] = {}
    latest = _EPOCH
    for obj in list_items(documents):
        kind = obj.get("kind")
        parser = _PARSERS.get(kind) if isinstance(kind, str) else None
        if parser is None:
            name = kind if isinstance(kind, str) else "(no kind)"
            skipped[name] = skipped.get(name, 0) + 1
            continue
        found[_FIELDS[str(kind)]].append(parser(obj))
        latest = max([latest, *_times(obj)])
    if not any(found.values()):
        raise RecordsError(f"{source} holds no Node, DaemonSet, Pod, Event, ReplicaSet, Deployment, ConfigMap or "
                           "ResourceSlice",
                           "save what the cluster shows, e.g. kubectl get nodes,daemonsets -A -o yaml > nodes.yaml")
    # Pods are kept once, as a live read keeps them (a crash-looping plugin pod is Pending too).
    pods = tuple({p.uid or p.key: p for p in found["pods"]}.values())
    snapshot = Snapshot(f"recorded objects in {source}", "", latest, tuple(found["nodes"]), tuple(found["daemonsets"]),
                        pods, tuple(found["events"]), tuple(found["replicasets"]), tuple(found["deployments"]),
                        tuple(found["configmaps"]), tuple(found["resource_slices"]),
                        # A recording without slices says nothing of them: they were not saved, or none exist.
                        None if found["resource_slices"] else
                        f"{source} holds no ResourceSlice (save them with kubectl get resourceslices -o yaml)")
    return snapshot, skipped


def _times(obj: Any, depth: int = 0) -> Iterator[datetime]:
    """Every RFC 3339 timestamp under a key named like the API's (creationTimestamp, lastTimestamp, eventTime,
    lastHeartbeatTime, ...)."""
    if depth > 12 or not isinstance(obj, dict):
        if isinstance(obj, list) and depth <= 12:
            for item in obj:
                yield from _times(item, depth + 1)
        return
    for key, value in obj.items():
        if isinstance(key, str) and key.endswith(("Timestamp", "Time")) and isinstance(value, str):
            moment = parse_time(value)
            if moment is not None:
                yield moment
        elif isinstance(value, dict | list):
            yield from _times(value, depth + 1)
