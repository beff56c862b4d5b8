"""Helpers for the `gpupolicy cluster` tests: the compiled tree's objects as a cluster runs them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from recorded_responses import RecordedResponses

from compiler import compile_policy
from policy.load import load_policy

ROOT = Path(__file__).resolve().parents[2]
TKE_SPEC = ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml"
FLEET_SPEC = Path(__file__).parent / "recorded" / "fleet" / "cluster.yaml"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


@dataclass
class Cluster:
    server: RecordedResponses
    kubeconfig: Path


#: The tree's directories whose DaemonSets, Deployments and ConfigMaps verify expects to run.
NODE_COMPONENTS = ("device-plugin/", "feature-discovery/", "mig/", "mig-manager/", "node-labels/")


def compiled_objects(spec: Path) -> list[Obj]:
    """The DaemonSets, Deployments and ConfigMaps of the spec's compiled tree that configure GPU nodes."""
    result = load_policy(spec.read_text(encoding="utf-8"), filename=str(spec))
    assert result.policy is not None, result.diagnostics
    tree = compile_policy(result.policy)
    found = [yaml.safe_load(tree[p]) for p in tree if p.startswith(NODE_COMPONENTS)
             and not p.endswith("kustomization.yaml")]
    return [o for o in found if o["kind"] in ("ConfigMap", "DaemonSet", "Deployment")]


def applied(objects: list[Obj], placement: Mapping[str, list[str]]) -> dict[str, list[Obj]]:
    """The compiled objects as the API server returns them once applied and rolled out: uids, generations,
    DaemonSet status, and one Running pod per DaemonSet and node (placement: DaemonSet name -> nodes)."""
    out: dict[str, list[Obj]] = {"daemonsets": [], "pods": [], "configmaps": [], "deployments": []}
    for obj in copy.deepcopy(objects):
        meta = obj["metadata"]
        meta.update(uid=f"uid-{meta['namespace']}-{meta['name']}", generation=1, resourceVersion="5151")
        if obj["kind"] == "ConfigMap":
            out["configmaps"].append(obj)
            continue
        if obj["kind"] == "Deployment":
            replicas = obj["spec"].get("replicas", 1)
            obj["status"] = {"replicas": replicas, "updatedReplicas": replicas, "readyReplicas": replicas,
                             "availableReplicas": replicas, "observedGeneration": 1}
            out["deployments"].append(obj)
            continue
        nodes = placement.get(meta["name"], [])
        obj["status"] = {"desiredNumberScheduled": len(nodes), "currentNumberScheduled": len(nodes),
                         "updatedNumberScheduled": len(nodes), "numberAvailable": len(nodes),
                         "numberReady": len(nodes), "observedGeneration": 1}
        out["daemonsets"].append(obj)
        out["pods"] += [daemon_pod(obj, node) for node in nodes]
    return out


def daemon_pod(daemonset: Obj, node: str, *, ready: bool = True, waiting: str = "") -> Obj:
    meta, template = daemonset["metadata"], daemonset["spec"]["template"]
    name = f"{meta['name']}-{node.replace('.', '')[-5:]}"
    containers = template["spec"]["containers"]
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": "2025-06-12T07:20:00Z"}}
    return {
        "metadata": {"name": name, "namespace": meta["namespace"], "uid": f"uid-{name}",
                     "labels": dict(template["metadata"]["labels"]),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta["name"],
                                          "uid": meta["uid"], "controller": True}]},
        "spec": {"nodeName": node, "containers": containers},
        "status": {"phase": "Running",  # a crash-looping container leaves the pod Running, not ready
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "containerStatuses": [{"name": c["name"], "ready": ready, "state": state} for c in containers]},
    }


def by_name(items: list[Obj], name: str) -> Obj:
    return next(o for o in items if o["metadata"]["name"] == name)


