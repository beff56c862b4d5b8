"""Builds the recorded API responses, tests/cluster/recorded/<scenario>/*.json (python tests/cluster/build_recorded.py).

The label sets follow the real GFD dumps in /work/shared/fixtures/nodes (named per node below) and the GFD rules of
device-plugin.md §6; the seed cluster follows seed 003 (TKE, 8 nodes, L20 + T4, plugin v0.14.5, a rollout stuck 28
days). Nothing here was captured from a live API server: see README.md. A test rebuilds these in memory and
compares, so the JSON and this script cannot drift apart.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent / "recorded"
TAKEN_AT = datetime(2025, 6, 12, 8, 0, 0, tzinfo=UTC)
Obj = dict[str, Any]


def ago(**delta: float) -> str:
    return (TAKEN_AT - timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta(name: str, namespace: str | None = None, **extra: Any) -> Obj:
    out: Obj = {"name": name, "uid": f"uid-{namespace + '-' if namespace else ''}{name}",
                "resourceVersion": "4242", "creationTimestamp": extra.pop("created", ago(days=200))}
    if namespace:
        out["namespace"] = namespace
    out.update(extra)
    return out


def owner(kind: str, name: str, namespace: str, api: str = "apps/v1") -> Obj:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": f"uid-{namespace}-{name}", "controller": True,
            "blockOwnerDeletion": True}


def node(name: str, labels: dict[str, str], gpus: dict[str, int], *, kubelet: str = "v1.30.0-tke.5",
         cpu: str = "32", memory: str = "97421144Ki") -> Obj:
    resources = {"cpu": cpu, "memory": memory, "pods": "61", "ephemeral-storage": "103078840Ki",
                 **{k: str(v) for k, v in gpus.items()}}
    return {
        "metadata": meta(name, labels=dict(sorted(labels.items()))),
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status", "lastHeartbeatTime": ago(seconds=20),
                            "lastTransitionTime": ago(days=60)}],
            "nodeInfo": {"kubeletVersion": kubelet, "containerRuntimeVersion": "containerd://1.6.9-tke.8",
                         "osImage": "TencentOS Server 3.1 (Final)", "architecture": "amd64"},
        },
    }


def as_list(kind: str, api: str, objects: list[Obj]) -> Obj:
    return {"kind": kind, "apiVersion": api, "metadata": {"resourceVersion": "4242"}, "items": objects}


# --- seed 003: the TKE cluster --------------------------------------------------------------------------------

TKE_BASE = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux", "failure-domain.beta.kubernetes.io/region": "sh",
            "topology.kubernetes.io/region": "sh", "tke.cloud.tencent.com/cbs-mountable": "true"}


def tke_node(ip: str, instance_type: str, pool: str, zone: str, extra: dict[str, str] | None = None,
             gpus: dict[str, int] | None = None, cpu: str = "8", memory: str = "15896604Ki") -> Obj:
    labels = {**TKE_BASE, "kubernetes.io/hostname": ip, "node.kubernetes.io/instance-type": instance_type,
              "beta.kubernetes.io/instance-type": instance_type, "tke.cloud.tencent.com/nodepool-id": pool,
              "failure-domain.beta.kubernetes.io/zone": zone, "topology.kubernetes.io/zone": zone,
              "cloud.tencent.com/node-instance-id": f"ins-{ip.replace('.', '')[-8:]}", **(extra or {})}
    return node(ip, labels, gpus or {}, cpu=cpu, memory=memory)


def gfd_labels(product: str, memory: int, compute: str, family: str, replicas: int) -> dict[str, str]:
    """A GFD v0.8 label set (the GFD of plugin v0.14.x): no sharing-strategy label yet (v0.15+); the
    mig.strategy label follows the plugin's --mig-strategy=single even on non-MIG GPUs (as on the OpenShift T4
    dump, fixtures/nodes/nvidia-docs-openshift-t4-time-sliced-g4dn.yaml)."""
    major, minor = compute.split(".")
    return {
        "nvidia.com/cuda.driver.major": "570", "nvidia.com/cuda.driver.minor": "158",
        "nvidia.com/cuda.driver.rev": "01",
        "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "8",
        "nvidia.com/gfd.timestamp": "1749714000",
        "nvidia.com/gpu.compute.major": major, "nvidia.com/gpu.compute.minor": minor,
        "nvidia.com/gpu.count": "1", "nvidia.com/gpu.family": family, "nvidia.com/gpu.machine": "CVM",
        "nvidia.com/gpu.memory": str(memory), "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.replicas": str(replicas), "nvidia.com/mig.capable": "false",
        "nvidia.com/mig.strategy": "single",
    }


def seed_nodes(*, shared: bool) -> list[Obj]:
    l20_replicas, t4_replicas = (8, 3) if shared else (1, 1)
    suffix = "-SHARED" if shared else ""
    gpu_enable = {"nvidia-device-enable": "enable"}
    l20 = tke_node("10.0.1.12", "PNV5b.8XLARGE96", "np-l20infer", "200005",
                   {**gpu_enable, **gfd_labels(f"NVIDIA-L20{suffix}", 46068, "8.9", "ada-lovelace", l20_replicas)},
                   {"nvidia.com/gpu": l20_replicas}, cpu="32", memory="97421144Ki")
    t4 = tke_node("10.0.2.7", "GN7.2XLARGE32", "np-t4infer", "200003",
                  {**gpu_enable, **gfd_labels(f"Tesla-T4{suffix}", 15360, "7.5", "turing", t4_replicas)},
                  {"nvidia.com/gpu": t4_replicas}, cpu="8", memory="31868404Ki")
    cpu_nodes = [tke_node(f"10.0.0.{i}", "S5.2XLARGE16", "np-general", "200003" if i % 2 else "200005")
                 for i in (3, 4, 5, 6)]
    cpu_nodes += [tke_node(f"10.0.0.{i}", "SA2.4XLARGE32", "np-batch", "200005", cpu="16") for i in (8, 9)]
    return [*cpu_nodes, l20, t4]


TKE_PLUGIN_IMAGE = "sgccr.ccs.tencentyun.com/tkeimages/nvidia-device-plugin:v0.14.5"


def tke_plugin_daemonset() -> Obj:
    """The TKE-installed plugin as the seed describes it: helm release nvidia-gpu, no --config-file."""
    selector = {"name": "nvidia-device-plugin-ds"}
    return {
        "metadata": meta("nvidia-device-plugin-daemonset", "kube-system", generation=1,
                         labels={"app.kubernetes.io/managed-by": "Helm"},
                         annotations={"meta.helm.sh/release-name": "nvidia-gpu",
                                      "meta.helm.sh/release-namespace": "kube-system"}),
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": selector}, "spec": {
                "nodeSelector": {"nvidia-device-enable": "enable"},
                "tolerations": [{"operator": "Exists"}],
                "priorityClassName": "system-node-critical",
                "containers": [{
                    "name": "nvidia-device-plugin-ctr", "image": TKE_PLUGIN_IMAGE,
                    "command": ["nvidia-device-plugin"],
                    "args": ["--mig-strategy=single", "--fail-on-init-error=false", "--pass-device-specs=true"],
                    "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility,compute"}],
                    "resources": {"limits": {"cpu": "100m", "memory": "100Mi"},
                                  "requests": {"cpu": "100m", "memory": "100Mi"}},
                    "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
                }],
                "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
            }},
        },
        "status": {"currentNumberScheduled": 2, "desiredNumberScheduled": 2, "numberAvailable": 2,
                   "numberMisscheduled": 0, "numberReady": 2, "observedGeneration": 1, "updatedNumberScheduled": 2},
    }


def system_daemonset(name: str, image: str, nodes: int = 8) -> Obj:
    selector = {"k8s-app": name}
    return {
        "metadata": meta(name, "kube-system", generation=3),
        "spec": {"selector": {"matchLabels": selector}, "template": {"metadata": {"labels": selector}, "spec": {
            "containers": [{"name": name, "image": image}]}}},
        "status": {"currentNumberScheduled": nodes, "desiredNumberScheduled": nodes, "numberAvailable": nodes,
                   "numberReady": nodes, "observedGeneration": 3, "updatedNumberScheduled": nodes},
    }


def pod(name: str, namespace: str, *, owner_ref: Obj, gpus: dict[str, str] | None, phase: str, node_name: str = "",
        created: str, image: str = "ccr.ccs.tencentyun.com/nlp/pii-infer:2.3.1", extra_spec: Obj | None = None,
        status_extra: Obj | None = None, labels: dict[str, str] | None = None) -> Obj:
    resources: Obj = {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}
    for key, value in (gpus or {}).items():
        resources["requests"][key] = value
        resources["limits"][key] = value
    spec: Obj = {"containers": [{"name": name.split("-")[0], "image": image, "resources": resources}],
                 "restartPolicy": "Always", "schedulerName": "default-scheduler", **(extra_spec or {})}
    if node_name:
        spec["nodeName"] = node_name
    status: Obj = {"phase": phase, "qosClass": "Burstable", **(status_extra or {})}
    return {"metadata": meta(name, namespace, created=created, ownerReferences=[owner_ref], labels=labels or {}),
            "spec": spec, "status": status}


def unschedulable(message: str, since: str) -> Obj:
    return {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                            "lastTransitionTime": since}]}


def running(since: str) -> Obj:
    return {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": since},
                           {"type": "PodScheduled", "status": "True", "lastTransitionTime": since}],
            "startTime": since}


NLP_OLD, NLP_NEW = "nlp-inference-5d8f7c9b6", "nlp-inference-7b9c6d5f4"
SEED_MESSAGE = "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."


def seed_before() -> dict[str, Obj]:
    stuck_since = ago(days=28, hours=2)
    rs_owner_old = owner("ReplicaSet", NLP_OLD, "nlp")
    rs_owner_new = owner("ReplicaSet", NLP_NEW, "nlp")
    labels = {"app": "nlp-inference"}
    pods = [
        pod(f"{NLP_OLD}-9qzvx", "nlp", owner_ref=rs_owner_old, gpus={"nvidia.com/gpu": "1"}, phase="Running",
            node_name="10.0.1.12", created=ago(days=63), status_extra=running(ago(days=63)), labels=labels),
        pod(f"{NLP_OLD}-tl4hp", "nlp", owner_ref=rs_owner_old, gpus={"nvidia.com/gpu": "1"}, phase="Running",
            node_name="10.0.2.7", created=ago(days=63), status_extra=running(ago(days=63)), labels=labels),
        pod(f"{NLP_NEW}-x8k2q", "nlp", owner_ref=rs_owner_new, gpus={"nvidia.com/gpu": "1"}, phase="Pending",
            created=stuck_since, status_extra=unschedulable(SEED_MESSAGE, stuck_since), labels=labels),
        *plugin_pods(),
    ]
    return {
        "nodes": as_list("NodeList", "v1", seed_nodes(shared=False)),
        "daemonsets": as_list("DaemonSetList", "apps/v1", [
            system_daemonset("kube-proxy", "ccr.ccs.tencentyun.com/tkeimages/kube-proxy:v1.30.0-tke.5"),
            system_daemonset("tke-cni-agent", "ccr.ccs.tencentyun.com/tkeimages/tke-cni-agent:v0.1.7"),
            tke_plugin_daemonset(),
        ]),
        "pods": as_list("PodList", "v1", pods),
        "events": as_list("EventList", "v1", [{
            "metadata": meta(f"{NLP_NEW}-x8k2q.17d3a1b2c4e5f607", "nlp", created=ago(days=4, hours=12)),
            "involvedObject": {"kind": "Pod", "namespace": "nlp", "name": f"{NLP_NEW}-x8k2q",
                               "uid": f"uid-nlp-{NLP_NEW}-x8k2q", "apiVersion": "v1", "resourceVersion": "4242"},
            "reason": "FailedScheduling", "message": SEED_MESSAGE, "type": "Warning", "count": 1303,
            "firstTimestamp": ago(days=4, hours=12), "lastTimestamp": ago(minutes=3),
            "source": {"component": "default-scheduler"}, "reportingComponent": "default-scheduler",
        }]),
        "replicasets": as_list("ReplicaSetList", "apps/v1", [
            replicaset(NLP_OLD, replicas=2, ready=2, revision="1", created=ago(days=63)),
            replicaset(NLP_NEW, replicas=1, ready=0, revision="2", created=stuck_since),
        ]),
        "deployments": as_list("DeploymentList", "apps/v1", [deployment(updated=1, available=2, stuck=True)]),
        "configmaps": as_list("ConfigMapList", "v1", system_configmaps()),
    }


def plugin_pods() -> list[Obj]:
    ds = owner("DaemonSet", "nvidia-device-plugin-daemonset", "kube-system")
    return [
        {"metadata": meta(f"nvidia-device-plugin-daemonset-{suffix}", "kube-system", created=ago(days=120),
                          ownerReferences=[ds], labels={"name": "nvidia-device-plugin-ds"}),
         "spec": {"nodeName": node_name,
                  "containers": [{"name": "nvidia-device-plugin-ctr", "image": TKE_PLUGIN_IMAGE}]},
         "status": {"phase": "Running", **running(ago(days=120)),
                    "containerStatuses": [{"name": "nvidia-device-plugin-ctr", "ready": True, "restartCount": 0,
                                           "state": {"running": {"startedAt": ago(days=120)}}}]}}
        for suffix, node_name in (("6lq9d", "10.0.1.12"), ("rb2xw", "10.0.2.7"))
    ]


def replicaset(name: str, *, replicas: int, ready: int, revision: str, created: str) -> Obj:
    return {
        "metadata": meta(name, "nlp", created=created, generation=1,
                         ownerReferences=[owner("Deployment", "nlp-inference", "nlp")],
                         annotations={"deployment.kubernetes.io/revision": revision,
                                      "deployment.kubernetes.io/desired-replicas": "2"}),
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "nlp-inference"}}},
        "status": {"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready,
                   "fullyLabeledReplicas": replicas, "observedGeneration": 1},
    }


def deployment(*, updated: int, available: int, stuck: bool) -> Obj:
    progressing = ({"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                    "message": f'ReplicaSet "{NLP_NEW}" has timed out progressing.',
                    "lastUpdateTime": ago(days=28), "lastTransitionTime": ago(days=28)} if stuck else
                   {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                    "message": f'ReplicaSet "{NLP_NEW}" has successfully progressed.',
                    "lastUpdateTime": ago(minutes=30), "lastTransitionTime": ago(days=28)})
    return {
        "metadata": meta("nlp-inference", "nlp", created=ago(days=180), generation=2,
                         annotations={"deployment.kubernetes.io/revision": "2"}),
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "nlp-inference"}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}},
        "status": {"observedGeneration": 2, "replicas": 3 if stuck else 2, "updatedReplicas": updated,
                   "readyReplicas": available, "availableReplicas": available,
                   **({"unavailableReplicas": 1} if stuck else {}),
                   "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                                   "message": "Deployment has minimum availability.",
                                   "lastUpdateTime": ago(days=63), "lastTransitionTime": ago(days=63)},
                                  progressing]},
    }


def system_configmaps() -> list[Obj]:
    return [{"metadata": meta("coredns", "kube-system"), "data": {"Corefile": ".:53 {\n    errors\n}\n"}},
            {"metadata": meta("kube-root-ca.crt", "kube-system"), "data": {"ca.crt": "<redacted>"}}]


def seed_after() -> dict[str, Obj]:
    """The cluster once the compiled tree is applied: 8 + 3 slots, the rollout done, TKE's plugin removed.
    The tree's DaemonSets, ConfigMaps and plugin pods are added by the tests from compile_policy's output."""
    labels = {"app": "nlp-inference"}
    rs_owner = owner("ReplicaSet", NLP_NEW, "nlp")
    pods = [pod(f"{NLP_NEW}-{suffix}", "nlp", owner_ref=rs_owner, gpus={"nvidia.com/gpu": "1"}, phase="Running",
                node_name=node_name, created=ago(minutes=40), status_extra=running(ago(minutes=39)), labels=labels)
            for suffix, node_name in (("x8k2q", "10.0.1.12"), ("m2c7n", "10.0.2.7"))]
    return {
        "nodes": as_list("NodeList", "v1", seed_nodes(shared=True)),
        "daemonsets": as_list("DaemonSetList", "apps/v1", [
            system_daemonset("kube-proxy", "ccr.ccs.tencentyun.com/tkeimages/kube-proxy:v1.30.0-tke.5"),
            system_daemonset("tke-cni-agent", "ccr.ccs.tencentyun.com/tkeimages/tke-cni-agent:v0.1.7"),
        ]),
        "pods": as_list("PodList", "v1", pods),
        "events": as_list("EventList", "v1", []),
        "replicasets": as_list("ReplicaSetList", "apps/v1", [
            replicaset(NLP_OLD, replicas=0, ready=0, revision="1", created=ago(days=63)),
            replicaset(NLP_NEW, replicas=2, ready=2, revision="2", created=ago(days=28, hours=2)),
        ]),
        "deployments": as_list("DeploymentList", "apps/v1", [deployment(updated=2, available=2, stuck=False)]),
        "configmaps": as_list("ConfigMapList", "v1", system_configmaps()),
    }


# --- a mixed fleet: H20 MIG mixed, A100 MPS, an unclassified T4 ---------------------------------------------------

OPERATOR_BASE = {
    "nvidia.com/cuda.driver-version.full": "550.54.15", "nvidia.com/cuda.driver-version.major": "550",
    "nvidia.com/cuda.driver-version.minor": "54", "nvidia.com/cuda.driver-version.revision": "15",
    "nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "54", "nvidia.com/cuda.driver.rev": "15",
    "nvidia.com/cuda.runtime-version.full": "12.4", "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "4", "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "4", "nvidia.com/gfd.timestamp": "1749713000", "nvidia.com/gpu.present": "true",
    "feature.node.kubernetes.io/pci-10de.present": "true",
}


def fleet_node(name: str, pool: str, instance_type: str, labels: dict[str, str], gpus: dict[str, int],
               *, state_since: str | None = None, reconciled: tuple[str, ...] = ()) -> Obj:
    base = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
            "node.kubernetes.io/instance-type": instance_type, "topology.kubernetes.io/zone": "cn-beijing-a"}
    if pool:
        base["gpu-pool"] = pool
    made = node(name, {**base, **labels}, gpus, kubelet="v1.31.4", cpu="192", memory="2113470584Ki")
    made["metadata"]["managedFields"] = managed_fields(made["metadata"]["labels"], state_since, reconciled)
    return made


def managed_fields(labels: dict[str, str], state_since: str | None, reconciled: tuple[str, ...]) -> list[Obj]:
    """metadata.managedFields as the API server records them (constructed: see README.md): the kubelet owns the
    labels it registered the node with, NFD's master those GPU Feature Discovery publishes, the MIG manager
    nvidia.com/mig.config.state (changed at ``state_since``) and gpupolicy's reconciler, through server-side apply,
    the ``reconciled`` keys. Managers of Update operations are named after the writer's user agent."""
    state = "nvidia.com/mig.config.state"
    owners: dict[tuple[str, str, str], set[str]] = {}
    for key in labels:
        if key in reconciled:
            owners.setdefault(("gpupolicy-node-labels", "Apply", ago(minutes=50)), set()).add(key)
            if key != "nvidia.com/mig.config":
                continue  # GFD publishes mps.capable too: both write the same value, and both own it
        if key == state:
            owners.setdefault(("nvidia-mig-manager", "Update", state_since or ago(days=2)), set()).add(key)
        elif key.startswith(("nvidia.com/", "feature.node.kubernetes.io/")) and key != "nvidia.com/mig.config":
            owners.setdefault(("nfd-master", "Update", ago(minutes=1)), set()).add(key)
        elif key not in reconciled:
            # every label has an owner on an API server: a mig.config no reconciler applied came with the node's
            # registration (kubelet --node-labels, as a node pool's template sets it)
            owners.setdefault(("kubelet", "Update", ago(days=200)), set()).add(key)
    return [{"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": manager, "operation": operation, "time": time,
             "fieldsV1": {"f:metadata": {"f:labels": {f"f:{key}": {} for key in sorted(keys)}}}}
            for (manager, operation, time), keys in sorted(owners.items())]


def h20_labels(*, applied: bool) -> dict[str, str]:
    """GFD v0.17 on an 8x H20 node, MIG mixed 7x 1g.12gb per GPU with 2 time-slicing replicas, shaped like
    fixtures/nodes/nvidia-docs-h100-mig-mixed-all-balanced.yaml (gpu.replicas "0" once MIG is on); before the
    layout is applied the node shows the full GPUs and mig.config.state pending (as in
    nvidia-docs-h100-mig-single-1g10gb-pending-partial.yaml)."""
    labels = {**OPERATOR_BASE, "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
              "nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.machine": "G5500-V7",
              "nvidia.com/gpu.memory": "97871", "nvidia.com/gpu.mode": "compute",
              "nvidia.com/gpu.product": "NVIDIA-H20", "nvidia.com/mig.capable": "true",
              "nvidia.com/mig.config": "h20", "nvidia.com/mig.strategy": "mixed", "nvidia.com/mps.capable": "false"}
    if not applied:
        return {**labels, "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
                "nvidia.com/mig.config.state": "pending"}
    profile = "nvidia.com/mig-1g.12gb"
    return {**labels, "nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.sharing-strategy": "none",
            "nvidia.com/mig.config.state": "success",
            f"{profile}.count": "56", f"{profile}.engines.copy": "1", f"{profile}.engines.decoder": "1",
            f"{profile}.engines.encoder": "0", f"{profile}.engines.jpeg": "1", f"{profile}.engines.ofa": "0",
            f"{profile}.memory": "11008", f"{profile}.multiprocessors": "8",
            f"{profile}.product": "NVIDIA-H20-MIG-1g.12gb-SHARED", f"{profile}.replicas": "2",
            f"{profile}.sharing-strategy": "time-slicing", f"{profile}.slices.ci": "1", f"{profile}.slices.gi": "1"}


def a100_labels(*, mps: bool) -> dict[str, str]:
    """GFD v0.17 on 4x A100-SXM4-80GB with MPS (replicas 4): -SHARED product, sharing-strategy mps, mps.capable."""
    return {**OPERATOR_BASE, "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/gpu.count": "4", "nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.machine": "p4de.24xlarge",
            "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.mode": "compute",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED" if mps else "NVIDIA-A100-SXM4-80GB",
            "nvidia.com/gpu.replicas": "4" if mps else "1",
            "nvidia.com/gpu.sharing-strategy": "mps" if mps else "none",
            "nvidia.com/mig.capable": "true", "nvidia.com/mig.config": "all-disabled",
            "nvidia.com/mig.config.state": "success", "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mps.capable": "true" if mps else "false"}


def t4_orphan_labels() -> dict[str, str]:
    """Verbatim from fixtures/nodes/nvidia-docs-openshift-t4-time-sliced-g4dn.yaml (gpu.memory in bytes)."""
    return {"nvidia.com/cuda.driver.major": "510", "nvidia.com/cuda.driver.minor": "73",
            "nvidia.com/cuda.driver.rev": "08", "nvidia.com/cuda.runtime.major": "11",
            "nvidia.com/cuda.runtime.minor": "7", "nvidia.com/device-plugin.config": "Tesla-T4",
            "nvidia.com/gfd.timestamp": "1655482336", "nvidia.com/gpu.compute.major": "7",
            "nvidia.com/gpu.compute.minor": "5", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.family": "turing",
            "nvidia.com/gpu.machine": "g4dn.xlarge", "nvidia.com/gpu.memory": "16106127360",
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "Tesla-T4-SHARED",
            "nvidia.com/gpu.replicas": "8", "nvidia.com/mig.strategy": "single"}


FLEET_MESSAGE = "0/7 nodes are available: 7 Insufficient nvidia.com/mig-1g.10gb."


def fleet() -> dict[str, Obj]:
    mig, mps = "nvidia.com/mig.config", "nvidia.com/mps.capable"
    nodes = [
        fleet_node("h20-node-1", "h20", "G5500V7", h20_labels(applied=True), {"nvidia.com/mig-1g.12gb": 112,
                                                                             "nvidia.com/gpu": 0},
                   reconciled=(mig,)),
        # pending for 47 minutes: longer than the MIG manager ever waits for GPU clients to leave
        fleet_node("h20-node-2", "h20", "G5500V7", h20_labels(applied=False), {"nvidia.com/gpu": 8},
                   state_since=ago(minutes=47), reconciled=(mig,)),
        fleet_node("a100-mps-1", "a100-mps", "p4d.24xlarge", a100_labels(mps=True), {"nvidia.com/gpu": 16},
                   reconciled=(mig, mps)),
        # GFD published mps.capable=false first, so the reconciler left it (a conflict verify names)
        fleet_node("a100-mps-2", "a100-mps", "p4d.24xlarge", a100_labels(mps=False), {"nvidia.com/gpu": 4},
                   reconciled=(mig,)),
        fleet_node("a100-spare", "a100-mps", "p4de.24xlarge", a100_labels(mps=True), {"nvidia.com/gpu": 16}),
        fleet_node("t4-legacy", "", "g4dn.xlarge", t4_orphan_labels(), {"nvidia.com/gpu": 8}),
        fleet_node("cpu-1", "", "m6i.4xlarge", {}, {}),
    ]
    pending = pod("embed-batch-7k2lq", "ml", owner_ref=owner("Job", "embed-batch", "ml", "batch/v1"),
                  gpus={"nvidia.com/mig-1g.10gb": "1"}, phase="Pending", created=ago(hours=5),
                  image="registry.example.com/ml/embed:1.4", status_extra=unschedulable(FLEET_MESSAGE, ago(hours=5)))
    # Written through events.k8s.io/v1 by the scheduler: the core/v1 view has series and eventTime, no count.
    event = {
        "metadata": meta("embed-batch-7k2lq.17d3b0c9a8e7f6d5", "ml", created=ago(hours=5)),
        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "embed-batch-7k2lq",
                           "uid": "uid-ml-embed-batch-7k2lq", "apiVersion": "v1"},
        "reason": "FailedScheduling", "message": FLEET_MESSAGE, "type": "Warning",
        "eventTime": ago(hours=5).replace("Z", ".000000Z"), "action": "Scheduling",
        "reportingComponent": "default-scheduler", "reportingInstance": "default-scheduler-master-1",
        "series": {"count": 41, "lastObservedTime": ago(minutes=7).replace("Z", ".000000Z")},
        "firstTimestamp": None, "lastTimestamp": None,
    }
    return {
        "nodes": as_list("NodeList", "v1", nodes),
        "daemonsets": as_list("DaemonSetList", "apps/v1", [
            system_daemonset("kube-proxy", "registry.k8s.io/kube-proxy:v1.31.4", nodes=7),
        ]),
        "pods": as_list("PodList", "v1", [pending]),
        "events": as_list("EventList", "v1", [event]),
        "replicasets": as_list("ReplicaSetList", "apps/v1", []),
        "deployments": as_list("DeploymentList", "apps/v1", []),
        "configmaps": as_list("ConfigMapList", "v1", []),
    }


SCENARIOS = {"seed-003-before": seed_before, "seed-003-after": seed_after, "fleet": fleet}


def render(document: Obj) -> str:
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def build() -> dict[str, str]:
    """Relative path -> JSON text of every recorded response."""
    return {f"{scenario}/{resource}.json": render(document)
            for scenario, make in SCENARIOS.items() for resource, document in make().items()}


def main() -> None:
    for path, text in build().items():
        target = HERE / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
