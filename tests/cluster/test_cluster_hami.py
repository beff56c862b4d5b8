"""cluster verify and discover on HAMi nodes and on cloud vGPU nodes, from API records (no cluster needed).

HAMi's device plugin registers each node's GPUs in the annotation hami.io/node-nvidia-register (JSON since v2.8.0);
its scheduler reads its device-config from the ConfigMap <release>-scheduler-device. The records below are shaped
like the API server returns them; the annotation values follow a real v2.8.0 node (policy/vgpu/hami.py cites it).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_support import applied

from cluster import discover, expected, render
from cluster.resources import ConfigMap, Snapshot, configmap_from, daemonset_from, node_from, pod_from
from cluster.verify import verify
from compiler import compile_policy
from compiler.targets import hami as hami_target
from policy.load import load_policy, load_policy_or_raise

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "clusters" / "vgpu-platform" / "cluster.yaml"
POLICY = load_policy_or_raise(SPEC.read_text(encoding="utf-8"), filename=str(SPEC))
TREE = compile_policy(POLICY)
WANTED = expected.from_tree(TREE)
TAKEN = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
L40S = "NVIDIA L40S"


def registration(count: int = 5, devmem: int = 46068, gpus: int = 4, mode: str | None = "hami-core",
                 healthy: bool = True) -> str:
    return json.dumps([{"id": f"GPU-{i:04d}", **({"index": i} if i else {}), "count": count, "devmem": devmem,
                        "devcore": 100, "type": L40S, **({"mode": mode} if mode else {}),
                        **({"health": True} if healthy else {})} for i in range(gpus)])


def node(name: str, labels: dict[str, str], *, annotations: dict[str, str] | None = None,
         allocatable: dict[str, str] | None = None, gfd: bool = True) -> dict[str, Any]:
    gfd_labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-L40S",
                  "nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "46068"} if gfd else {}
    resources = allocatable if allocatable is not None else {"nvidia.com/gpu": "20"}
    return {"metadata": {"name": name, "labels": {**labels, **gfd_labels}, "annotations": annotations or {}},
            "status": {"capacity": resources, "allocatable": resources,
                       "nodeInfo": {"kubeletVersion": "v1.31.4"}}}


def platform_node(name: str, **kwargs: Any) -> dict[str, Any]:
    annotations = kwargs.pop("annotations", {"hami.io/node-nvidia-register": registration()})
    return node(name, {"node-pool": "platform-vgpu"}, annotations=annotations, **kwargs)


def scheduler_config(content: str | None = None) -> dict[str, Any]:
    values = yaml.safe_load(TREE[hami_target.VALUES_PATH])
    text = content if content is not None else values["device-config"]["content"].rstrip("\n")  # helm's |-
    return {"metadata": {"name": "hami-scheduler-device", "namespace": "kube-system"},
            "data": {"device-config.yaml": text}}


def snapshot(nodes: list[dict[str, Any]], *, config: dict[str, Any] | None = None,
             extra_daemonsets: list[dict[str, Any]] = ()) -> Snapshot:  # type: ignore[assignment]
    objects = [yaml.safe_load(TREE[p]) for p in TREE if p.startswith(("hami/configmap", "hami/daemonset"))]
    placement = {"hami-device-plugin-platform-vgpu": [n["metadata"]["name"] for n in nodes
                                                       if n["metadata"]["labels"].get("node-pool") == "platform-vgpu"]}
    live = applied(objects, placement)
    configmaps = [configmap_from(c) for c in live["configmaps"]]
    if config is not None:
        configmaps.append(configmap_from(config))
    return Snapshot("hami-test", "https://10.0.0.1:6443", TAKEN, tuple(node_from(n) for n in nodes),
                    tuple(daemonset_from(d) for d in [*live["daemonsets"], *extra_daemonsets]),
                    tuple(pod_from(p) for p in live["pods"]), configmaps=tuple(configmaps))


def codes(result: Any, subject: str | None = None) -> list[str]:
    return sorted(f.code for f in result.findings if subject is None or f.subject == subject)


# ---- HAMi nodes --------------------------------------------------------------------------------------------------


def test_a_hami_node_registered_as_its_class_says_agrees() -> None:
    result = verify(snapshot([platform_node("p1")], config=scheduler_config()), POLICY, WANTED)
    assert codes(result, "node/p1") == []
    assert "hami-scheduler-not-installed" not in codes(result)
    (status,) = [s for s in result.classes if s.name == "platform-vgpu"]
    assert status.advertised == (("nvidia.com/gpu", 20),)


def test_a_legacy_registration_without_mode_reads_as_hami_core() -> None:
    legacy = ":".join(f"GPU-{i},5,46068,100,NVIDIA-{L40S},0,true" for i in range(4)) + ":"
    result = verify(snapshot([platform_node("p1", annotations={"hami.io/node-nvidia-register": legacy})],
                             config=scheduler_config()), POLICY, WANTED)
    assert codes(result, "node/p1") == []


@pytest.mark.parametrize(("annotation", "code", "part"), [
    (None, "hami-node-not-registered", "has no hami.io/node-nvidia-register annotation"),
    ("garbage", "hami-node-not-registered", "has an unreadable hami.io/node-nvidia-register"),
    (registration(count=10), "hami-registration-mismatch", "count 10 where the class gives 5"),
    (registration(devmem=36854), "hami-registration-mismatch", "devmem 36854 where the class gives 46068"),
    (registration(gpus=3), "hami-registration-mismatch", "3 GPU(s) registered, the class has 4"),
    (registration(mode="mig"), "hami-registration-mismatch", "mode mig where the class gives hami-core"),
    (registration(healthy=False), "hami-gpu-unhealthy", "unhealthy"),
], ids=["not registered", "unreadable", "another split count", "another memory scaling", "a GPU missing",
        "dynamic MIG", "unhealthy"])
def test_what_hami_registered_is_compared_with_the_class(annotation: str | None, code: str, part: str) -> None:
    annotations = {"hami.io/node-nvidia-register": annotation} if annotation is not None else {}
    result = verify(snapshot([platform_node("p1", annotations=annotations)], config=scheduler_config()), POLICY,
                    WANTED)
    found = [f for f in result.findings if f.subject == "node/p1"]
    assert [f.code for f in found] == [code], [f.message for f in found]
    assert part in found[0].message and found[0].node_class == "platform-vgpu"


def test_a_node_advertising_whole_gpus_runs_nvidias_plugin_instead_of_hamis() -> None:
    result = verify(snapshot([platform_node("p1", allocatable={"nvidia.com/gpu": "4"})], config=scheduler_config()),
                    POLICY, WANTED)
    (finding,) = [f for f in result.findings if f.code == "allocatable-mismatch"]
    assert "NVIDIA's device plugin serves it instead of HAMi's" in finding.hint


def test_hamis_chart_plugin_left_running_is_reported_with_the_values_that_turn_it_off() -> None:
    chart = copy.deepcopy(yaml.safe_load(TREE["hami/daemonset-platform-vgpu.yaml"]))
    chart["metadata"].update(name="hami-device-plugin", uid="uid-chart", generation=1)
    chart["status"] = {"desiredNumberScheduled": 1, "observedGeneration": 1}
    result = verify(snapshot([platform_node("p1")], config=scheduler_config(), extra_daemonsets=[chart]), POLICY,
                    WANTED)
    (finding,) = [f for f in result.findings if f.code == "unmanaged-device-plugin"]
    assert "runs HAMi's device plugin" in finding.message and "devicePlugin.enabled: false" in finding.hint


def test_hamis_scheduler_missing_or_running_other_values_is_an_error() -> None:
    missing = verify(snapshot([platform_node("p1")]), POLICY, WANTED)
    assert "hami-scheduler-not-installed" in codes(missing)
    drifted = verify(snapshot([platform_node("p1")], config=scheduler_config("nvidia:\n  resourceCountName: x\n")),
                     POLICY, WANTED)
    (finding,) = [f for f in drifted.findings if f.code == "hami-scheduler-config-drift"]
    assert finding.hint.startswith("upgrade the release with the tree's values: let GitOps sync HAMi's release "
                                   "from the tree (Flux: the HelmRelease hami of its flux/, in flux-system")
    assert "without GitOps: helm upgrade --install hami hami-charts/hami --version 2.10.0" in finding.hint
    assert "hami-scheduler-config-drift" not in codes(verify(snapshot([platform_node("p1")],
                                                                      config=scheduler_config()), POLICY, WANTED))


def test_a_pending_pod_asking_for_more_memory_than_any_platform_gpu_is_explained() -> None:
    pending = pod_from({"metadata": {"name": "big", "namespace": "inference", "uid": "u1",
                                     "creationTimestamp": "2026-09-01T11:00:00Z"},
                        "spec": {"schedulerName": "hami-scheduler", "containers": [
                            {"name": "app", "image": "x", "resources": {"limits": {
                                "nvidia.com/gpu": "1", "nvidia.com/gpumem": "60000"}}}]},
                        "status": {"phase": "Pending"}})
    seen = snapshot([platform_node("p1")], config=scheduler_config())
    seen = Snapshot(seen.context, seen.server, seen.taken_at, seen.nodes, seen.daemonsets, (*seen.pods, pending),
                    configmaps=seen.configmaps)
    (finding,) = [f for f in verify(seen, POLICY, WANTED).findings if f.subject == "pod/inference/big"]
    assert finding.code == "pending-pod-unsatisfiable" and "CardInsufficientMemory" in finding.message


# ---- cloud vGPU nodes ---------------------------------------------------------------------------------------------


def test_a_qgpu_node_outside_every_class_is_left_alone_and_said_so() -> None:
    qgpu = node("q1", {"qgpu-device-enable": "enable"}, gfd=False,
                allocatable={"tke.cloud.tencent.com/qgpu-core": "100", "tke.cloud.tencent.com/qgpu-memory": "44"})
    result = verify(snapshot([platform_node("p1"), qgpu], config=scheduler_config()), POLICY, WANTED)
    (finding,) = [f for f in result.findings if f.subject == "node/q1"]
    assert (finding.code, finding.severity) == ("cloud-vgpu-node", "info")
    assert "Tencent TKE qGPU" in finding.message and "gpupolicy leaves it alone" in finding.message
    assert "info[cloud-vgpu-node]" in render.render_text(result)


def test_a_cgpu_node_a_class_selects_is_an_error() -> None:
    cgpu = node("c1", {"node-pool": "dev-ts", "ack.node.gpu.schedule": "cgpu"},
                allocatable={"aliyun.com/gpu-mem": "15"})
    result = verify(snapshot([platform_node("p1"), cgpu], config=scheduler_config()), POLICY, WANTED)
    found = [f for f in result.findings if f.code == "cloud-vgpu-node-in-class"]
    assert [f.subject for f in found] == ["node/c1"] and "Alibaba ACK cGPU" in found[0].message


# ---- discover --------------------------------------------------------------------------------------------------


def hami_daemonset(namespace: str = "kube-system", tag: str = "v2.10.0") -> dict[str, Any]:
    chart = copy.deepcopy(yaml.safe_load(TREE["hami/daemonset-platform-vgpu.yaml"]))
    chart["metadata"].update(name="hami-device-plugin", namespace=namespace, uid="uid-hami")
    for container in chart["spec"]["template"]["spec"]["containers"]:
        container["image"] = f"docker.io/projecthami/hami:{tag}"
    chart["status"] = {"desiredNumberScheduled": 2}
    return chart


def test_discover_drafts_hami_nodes_without_gfd_as_the_vgpu_class_they_are() -> None:
    nodes = [node(f"p{i}", {"node.kubernetes.io/instance-type": "gn7i.16xlarge", "gpu": "on"}, gfd=False,
                  annotations={"hami.io/node-nvidia-register": registration(count=8, devmem=36854)})
             for i in (1, 2)]
    nodes.append(node("q1", {"qgpu-device-enable": "enable"}, gfd=False,
                      allocatable={"tke.cloud.tencent.com/qgpu-core": "100"}))
    nodes.append({"metadata": {"name": "cpu-1", "labels": {"node.kubernetes.io/instance-type": "c6.large"}},
                  "status": {}})
    seen = Snapshot("hami", "https://x", TAKEN, tuple(node_from(n) for n in nodes),
                    (daemonset_from(hami_daemonset()),))
    draft = discover.discover(seen, name="hami")
    data = discover.draft_data(draft)
    (drafted,) = data["spec"]["nodeClasses"]
    assert drafted["gpu"] == {"model": "NVIDIA-L40S", "count": 4}
    assert drafted["sharing"] == {"vgpu": {"splitCount": 8, "memoryScaling": 0.8}}
    assert data["spec"]["hami"] == {"namespace": "kube-system", "version": "v2.10.0"}
    assert "version" not in data["spec"]["devicePlugin"]  # HAMi's plugin is not NVIDIA's
    assert any("q1: a Tencent TKE qGPU node" in s for s in draft.skipped)
    text = discover.render_draft(draft)
    assert yaml.safe_load(text) == data
    assert "HAMi runs here: its device plugin registers each GPU as 8 vGPUs" in text
    result = load_policy(text, filename="draft.yaml")
    assert result.ok, result.diagnostics
    assert compile_policy(result.policy)[f"hami/daemonset-{drafted['name']}.yaml"]  # type: ignore[arg-type]


def test_discover_keeps_gfd_names_and_reads_hamis_split_beside_them() -> None:
    nodes = [platform_node("p1"), platform_node("p2")]
    seen = Snapshot("hami", "https://x", TAKEN, tuple(node_from(n) for n in nodes))
    (drafted,) = discover.draft_data(discover.discover(seen, name="hami"))["spec"]["nodeClasses"]
    assert (drafted["gpu"], drafted["sharing"]) == ({"model": "NVIDIA-L40S", "count": 4},
                                                    {"vgpu": {"splitCount": 5}})


def test_configmap_records_are_compared_as_yaml() -> None:
    assert isinstance(configmap_from(scheduler_config()), ConfigMap)


def test_under_the_operator_a_vgpu_node_with_the_operators_plugin_label_on_is_reported() -> None:
    text = SPEC.read_text(encoding="utf-8").replace("deploy: standalone", "deploy: gpu-operator")
    policy = load_policy_or_raise(text, filename="operator.yaml")
    wanted = expected.from_tree(compile_policy(policy))
    labelled = platform_node("p1")
    labelled["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] = "true"
    result = verify(snapshot([labelled], config=scheduler_config()), policy, wanted)
    (finding,) = [f for f in result.findings if f.code == "node-label-conflict"]
    assert finding.message.startswith("nvidia.com/gpu.deploy.device-plugin is 'true' on node p1, set by a writer "
                                      "verify cannot name")
    assert "class platform-vgpu's label plan wants 'false'" in finding.message
