"""Nodes on the real API server, written the way a cluster's writers write them.

Nothing here runs a kubelet: a Node is an object the test creates under the field manager `kubelet`, its status
patched the same way, and every later label change is an Update (merge patch) or an Apply by the manager that
makes it in a cluster (a person's kubectl, NFD for GPU Feature Discovery, the MIG manager, the GPU Operator,
gpupolicy's reconciler).  The API server records the ownership itself (metadata.managedFields), so what
`cluster verify` and the reconciler read is what a cluster would show after those writes.

`write_recorded` replays a recorded Node (tests/cluster/recorded) this way: each managedFields entry of the
recording becomes a write of its labels by its manager, in the recorded order; the entries' times are the
server's (now), not the recording's."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from kube_api import KubeAPI
from polling import poll

Obj = dict[str, Any]
EVENTS_NAMESPACE = "default"
#: the parts of a recorded Node the API server sets itself and refuses or overwrites on create
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


class Nodes:
    """The Nodes (and the events about them) of the shared API server."""

    def __init__(self, api: KubeAPI) -> None:
        self.api = api

    def add(self, obj: Obj, manager: str = "kubelet") -> None:
        answer = self.api.request("POST", f"/api/v1/nodes?fieldManager={manager}", obj)
        assert answer.status == 201, answer.body

    def change(self, name: str, labels: Mapping[str, str | None], manager: str = "kubectl-label") -> None:
        """An Update by `manager` (kubectl label, node provisioning, the operator): set or (None) remove labels."""
        answer = self.api.request("PATCH", f"/api/v1/nodes/{name}?fieldManager={manager}",
                                  {"metadata": {"labels": dict(labels)}}, content_type="application/merge-patch+json")
        assert answer.status == 200, answer.body

    def apply(self, name: str, labels: Mapping[str, str], manager: str) -> None:
        """A server-side apply of exactly these labels by `manager` (what gpupolicy's reconciler sends)."""
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}
        answer = self.api.request("PATCH", f"/api/v1/nodes/{name}?fieldManager={manager}", json.dumps(body).encode(),
                                  content_type="application/apply-patch+yaml")
        assert answer.status == 200, answer.body

    def set_status(self, name: str, status: Obj, manager: str = "kubelet") -> None:
        answer = self.api.request("PATCH", f"/api/v1/nodes/{name}/status?fieldManager={manager}", {"status": status},
                                  content_type="application/merge-patch+json")
        assert answer.status == 200, answer.body

    def get(self, name: str) -> Obj:
        answer = self.api.request("GET", f"/api/v1/nodes/{name}")
        assert answer.status == 200, answer.body
        found: Obj = answer.body
        return found

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.get(name)["metadata"].get("labels") or {})

    def names(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.api.request("GET", "/api/v1/nodes").body["items"])

    def label_of(self, key: str) -> dict[str, str | None]:
        """node -> its value of label `key` (None where it has none), for every node."""
        return {name: self.labels(name).get(key) for name in self.names()}

    def events(self, reason: str, component: str) -> list[Obj]:
        items = self.api.request("GET", f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events").body["items"]
        return [e for e in items if e["reason"] == reason and e["source"].get("component") == component]

    def clear(self) -> None:
        """No node and no event in `default`: the server is the session's, and what one test leaves would be in
        the next one's way (the reconciler and verify read every node)."""
        for path in ("/api/v1/nodes", f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events"):
            answer = self.api.request("DELETE", path)
            assert answer.status == 200, answer.body
        poll(lambda: self.names() == [] or None, what="the nodes to be deleted")

    def write_recorded(self, recorded: Obj) -> None:
        """A recorded Node written by the managers its managedFields name, each writing the labels it owns."""
        node = copy.deepcopy(recorded)
        metadata = node["metadata"]
        labels: dict[str, str] = dict(metadata.get("labels") or {})
        entries = metadata.get("managedFields") or []
        for key in SERVER_SET:
            metadata.pop(key, None)
        owned = {entry["manager"]: [k.removeprefix("f:") for k in entry["fieldsV1"].get("f:metadata", {})
                                    .get("f:labels", {})] for entry in entries}
        later = {k for manager, keys in owned.items() if manager != "kubelet" for k in keys}
        status = node.pop("status", None)
        metadata["labels"] = {k: v for k, v in labels.items() if k not in later}
        self.add(node)
        if status:
            self.set_status(metadata["name"], status)
        for entry in entries:
            manager, keys = entry["manager"], owned[entry["manager"]]
            if manager == "kubelet" or not keys:
                continue
            chosen = {k: labels[k] for k in keys if k in labels}
            if entry["operation"] == "Apply":
                self.apply(metadata["name"], chosen, manager)
            else:
                self.change(metadata["name"], chosen, manager)
