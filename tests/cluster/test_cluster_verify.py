"""gpupolicy cluster verify against recorded clusters (recorded_responses.py serves them with the recorded moment as
its clock; the parts that need an API server of their own are in tests/kube/test_kube_cluster_verify.py)."""

from __future__ import annotations

import json

from cluster_support import FLEET_SPEC, TKE_SPEC, applied, by_name, compiled_objects, daemon_pod
from recorded_responses import load_scenario

SEED_GPU_NODES = {"l20": ["10.0.1.12"], "t4": ["10.0.2.7"]}


def findings(out: str) -> list[tuple[str, str, str]]:
    """(code, class, subject) of every finding of a JSON report."""
    return [(f["code"], f["class"] or "", f["subject"] or "") for f in json.loads(out)["findings"]]


def seed_after_objects() -> dict[str, list[dict]]:
    placement = {f"nvidia-device-plugin-{c}": nodes for c, nodes in SEED_GPU_NODES.items()}
    return applied(compiled_objects(TKE_SPEC), placement)


# --- the seed: before and after ---------------------------------------------------------------------------------


def test_the_seed_cluster_before_the_fix_differs_in_allocatable_labels_daemonsets_and_a_stuck_rollout(
        cluster, gpupolicy):
    seed = cluster("seed-003-before")
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig, "--output", "json")
    assert result.code == 1, result.err
    l20_cm, t4_cm = (o["metadata"]["name"] for o in compiled_objects(TKE_SPEC) if o["kind"] == "ConfigMap")
    assert findings(result.out) == [
        ("allocatable-mismatch", "l20", "node/10.0.1.12"),
        ("gfd-label-mismatch", "l20", "node/10.0.1.12"),
        ("gfd-label-mismatch", "l20", "node/10.0.1.12"),
        ("allocatable-mismatch", "t4", "node/10.0.2.7"),
        ("gfd-label-mismatch", "t4", "node/10.0.2.7"),
        ("gfd-label-mismatch", "t4", "node/10.0.2.7"),
        ("daemonset-missing", "l20", "daemonset/kube-system/nvidia-device-plugin-l20"),
        ("daemonset-missing", "t4", "daemonset/kube-system/nvidia-device-plugin-t4"),
        ("configmap-missing", "l20", f"configmap/kube-system/{l20_cm}"),
        ("configmap-missing", "t4", f"configmap/kube-system/{t4_cm}"),
        ("unmanaged-device-plugin", "", "daemonset/kube-system/nvidia-device-plugin-daemonset"),
        ("pending-pod-capacity-not-applied", "", "pod/nlp/nlp-inference-7b9c6d5f4-x8k2q"),
        ("rollout-stuck", "", "deployment/nlp/nlp-inference"),
    ]
    report = json.loads(result.out)
    assert report["summary"] == {"nodes": 8, "gpuNodes": 2, "errors": 12, "warnings": 1, "agrees": False,
                                 "labelsChecked": True, "exitCode": 1}
    assert [c["advertised"] for c in report["classes"]] == [{"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1}]


def test_the_seed_pending_pod_is_explained_with_its_events_owner_chain_and_the_classes_that_fall_short(
        cluster, gpupolicy):
    seed = cluster("seed-003-before")
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig, "-O", "json")
    pending, rollout = (f for f in json.loads(result.out)["findings"] if f["subject"].startswith(("pod/", "deploy")))
    assert pending["message"] == (
        "pod nlp/nlp-inference-7b9c6d5f4-x8k2q has been Pending for 28d asking for nvidia.com/gpu: 1: the policy "
        "places it on l20 and t4, but class l20 promises 8 nvidia.com/gpu, its nodes advertise 1; class t4 "
        "promises 3 nvidia.com/gpu, its nodes advertise 1")
    assert pending["details"] == [
        "FailedScheduling (x1303 over 4d12h, last 3m ago): 0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
        "Pod nlp/nlp-inference-7b9c6d5f4-x8k2q -> ReplicaSet nlp-inference-7b9c6d5f4 -> Deployment nlp-inference",
    ]
    assert rollout["message"] == (
        "Deployment nlp/nlp-inference is stuck mid-rollout (1 of 2 replicas updated, 2 available): new ReplicaSet "
        "nlp-inference-7b9c6d5f4 waits for nlp-inference-7b9c6d5f4-x8k2q (Pending 28d); old ReplicaSet "
        "nlp-inference-5d8f7c9b6 still runs 2 pod(s)")
    assert rollout["details"] == ['Progressing=False ProgressDeadlineExceeded: ReplicaSet "nlp-inference-7b9c6d5f4" '
                                  'has timed out progressing.']


def test_the_text_report_groups_findings_by_class_then_node_and_ends_with_a_verdict(cluster, gpupolicy):
    seed = cluster("seed-003-before")
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig)
    lines = result.out.splitlines()
    assert lines[0].startswith("Cluster tke-prod (http://127.0.0.1:") and lines[0].endswith(
        "against policy tke-prod: 8 nodes, 2 with GPUs, 2 classes.")
    assert "class l20: 1 node, nvidia.com/gpu 1 of 8 advertised: 5 errors" in lines
    assert lines[lines.index("class l20: 1 node, nvidia.com/gpu 1 of 8 advertised: 5 errors") + 1] == "  node 10.0.1.12"
    assert "Pending GPU pods and the rollouts they block" in lines
    assert lines[-1] == "12 errors, 1 warning: the cluster differs from policy tke-prod."


def test_the_seed_cluster_after_applying_the_tree_agrees_and_exits_0(cluster, gpupolicy):
    seed = cluster("seed-003-after", add=seed_after_objects())
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig)
    assert (result.code, result.err) == (0, "")
    assert "class l20: 1 node, nvidia.com/gpu 8 of 8 advertised: agrees" in result.out
    assert "class t4: 1 node, nvidia.com/gpu 3 of 3 advertised: agrees" in result.out
    assert result.out.endswith("The cluster agrees with policy tke-prod.\n")


def test_a_pending_pod_on_a_full_but_correct_cluster_is_a_warning_that_does_not_fail(cluster, gpupolicy):
    extra = seed_after_objects()
    extra["pods"].append(PENDING_BATCH_POD)
    seed = cluster("seed-003-after", add=extra)
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig, "-O", "json")
    assert result.code == 0
    (finding,) = json.loads(result.out)["findings"]
    assert (finding["code"], finding["severity"]) == ("pending-pod-cluster-full", "warning")
    assert "whose nodes advertise all they promise (nvidia.com/gpu 11)" in finding["message"]


PENDING_BATCH_POD = {
    "metadata": {"name": "nlp-batch-0", "namespace": "nlp", "uid": "uid-nlp-batch-0",
                 "creationTimestamp": "2025-06-12T07:50:00Z",
                 "ownerReferences": [{"kind": "StatefulSet", "name": "nlp-batch", "uid": "uid-sts",
                                      "controller": True}]},
    "spec": {"containers": [{"name": "batch", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    "status": {"phase": "Pending"},
}


def test_a_cluster_without_gfd_labels_is_still_checked_for_allocatable_and_daemonsets(cluster, gpupolicy):
    nodes = load_scenario("seed-003-before")["nodes"]
    for node in nodes:
        node["metadata"]["labels"] = {k: v for k, v in node["metadata"]["labels"].items()
                                      if not k.startswith("nvidia.com/")}
    seed = cluster("seed-003-before", replace={"nodes": nodes})
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig, "-O", "json")
    report = json.loads(result.out)
    codes = {code for code, _, _ in findings(result.out)}
    assert result.code == 1
    assert report["summary"]["labelsChecked"] is False
    assert "gfd-label-mismatch" not in codes
    assert {"allocatable-mismatch", "daemonset-missing", "gfd-labels-missing"} <= codes
    missing = next(f for f in report["findings"] if f["code"] == "gfd-labels-missing")
    assert missing["severity"] == "warning"
    assert "class membership, allocatable, device-plugin DaemonSets and Pending pods were" in missing["message"]


def test_verify_only_reads(cluster, gpupolicy):
    seed = cluster("seed-003-before")
    gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig)
    assert {method for method, _ in seed.server.requests} == {"GET"}


# --- a fleet with MIG, MPS, overlaps and drifted DaemonSets ---------------------------------------------------------


def fleet_objects() -> dict[str, list[dict]]:
    objects = compiled_objects(FLEET_SPEC)
    live = applied(objects, {
        "nvidia-device-plugin-h20": ["h20-node-1"],
        "nvidia-device-plugin-a100-mps": ["a100-mps-1", "a100-mps-2", "a100-spare"],
        "mps-control-daemon-a100-mps": ["a100-mps-1", "a100-spare"],
        "nvidia-device-plugin-a100-train": ["a100-spare"],
    })
    h20 = by_name(live["daemonsets"], "nvidia-device-plugin-h20")
    h20["metadata"]["generation"] = 4  # a new config is being rolled: one node updated, one pod crash-looping
    h20["status"].update(desiredNumberScheduled=2, updatedNumberScheduled=1, numberAvailable=1, observedGeneration=3)
    live["pods"].append(daemon_pod(h20, "h20-node-2", ready=False, waiting="CrashLoopBackOff"))
    mps = by_name(live["daemonsets"], "nvidia-device-plugin-a100-mps")
    old = "nvidia-device-plugin-a100-mps-0123456789"
    mps["spec"]["template"]["spec"]["volumes"][1]["configMap"]["name"] = old
    live["configmaps"] = [c for c in live["configmaps"] if not c["metadata"]["name"].startswith(
        "nvidia-device-plugin-a100-mps-")]
    h20_config = next(c for c in live["configmaps"] if c["metadata"]["name"].startswith("nvidia-device-plugin-h20-"))
    h20_config["data"]["h20"] = h20_config["data"]["h20"].replace("replicas: 2", "replicas: 4")  # hand-edited
    return live


def test_the_fleet_recording_shows_every_kind_of_node_and_daemonset_drift(cluster, gpupolicy):
    fleet = cluster("fleet", add=fleet_objects(), context="fleet")
    result = gpupolicy("cluster", "verify", "-p", FLEET_SPEC, "--kubeconfig", fleet.kubeconfig, "-O", "json")
    assert result.code == 1, result.err
    assert result.err == ("gpupolicy cluster verify: note: the spec has 2 error(s) verify can look past "
                          "(overlapping-node-classes); gpupolicy validate lists them\n")
    found = findings(result.out)
    a100_mps_config, h20_config = (o["metadata"]["name"] for o in compiled_objects(FLEET_SPEC)
                                   if o["metadata"]["name"].startswith(("nvidia-device-plugin-a100-mps-",
                                                                        "nvidia-device-plugin-h20-")))
    assert found == [
        ("node-in-several-classes", "", "node/a100-spare"),
        ("unclassified-gpu-node", "", "node/t4-legacy"),
        ("allocatable-mismatch", "h20", "node/h20-node-2"),
        ("unexpected-gpu-resource", "h20", "node/h20-node-2"),
        ("mig-config-not-applied", "h20", "node/h20-node-2"),
        ("allocatable-mismatch", "a100-mps", "node/a100-mps-2"),
        ("node-label-conflict", "a100-mps", "node/a100-mps-2"),
        ("gfd-label-mismatch", "a100-mps", "node/a100-mps-2"),
        ("gfd-label-mismatch", "a100-mps", "node/a100-mps-2"),
        ("gfd-label-mismatch", "a100-mps", "node/a100-mps-2"),
        ("class-without-nodes", "a100-train", ""),
        ("daemonset-config-mismatch", "a100-mps", "daemonset/nvidia-device-plugin/nvidia-device-plugin-a100-mps"),
        ("daemonset-rollout-incomplete", "h20", "daemonset/nvidia-device-plugin/nvidia-device-plugin-h20"),
        ("device-plugin-not-ready", "h20", "node/h20-node-2"),
        ("configmap-missing", "a100-mps", f"configmap/nvidia-device-plugin/{a100_mps_config}"),
        ("configmap-modified", "h20", f"configmap/nvidia-device-plugin/{h20_config}"),
        ("multiple-device-plugins", "", "node/a100-spare"),
        ("pending-pod-unsatisfiable", "", "pod/ml/embed-batch-7k2lq"),
    ]


def test_fleet_messages_name_the_mig_state_the_overlap_and_the_nearest_mig_profile(cluster, gpupolicy):
    fleet = cluster("fleet", add=fleet_objects(), context="fleet")
    result = gpupolicy("cluster", "verify", "-p", FLEET_SPEC, "--kubeconfig", fleet.kubeconfig, "-O", "json")
    by_code = {}
    for f in json.loads(result.out)["findings"]:
        by_code.setdefault(f["code"], f)
    assert by_code["node-in-several-classes"]["message"].startswith(
        "node a100-spare is selected by classes a100-mps and a100-train")
    assert by_code["mig-config-not-applied"]["message"] == (
        "nvidia.com/mig.config.state is pending on node h20-node-2 for 47m: the MIG manager is stuck applying h20 "
        "(it waits at most 5 minutes for each group of GPU clients to leave)")
    assert by_code["node-label-conflict"]["message"] == (
        "nvidia.com/mps.capable is 'false' on node a100-mps-2, set by nfd-master; class a100-mps's label plan wants "
        "'true'. gpupolicy's label reconciler never overwrites a value another writer set (its LabelConflict event "
        "and gpupolicy_node_label_conflicts report it too)")
    assert by_code["unexpected-gpu-resource"]["message"].startswith(
        "node h20-node-2 advertises nvidia.com/gpu: 8, which class h20 does not offer")
    assert by_code["unclassified-gpu-node"]["message"] == (
        "node t4-legacy has GPUs (nvidia.com/gpu.product=Tesla-T4-SHARED, allocatable nvidia.com/gpu 8) but no class "
        "selects it, so the policy neither configures its device plugin nor counts its capacity")
    pending = by_code["pending-pod-unsatisfiable"]
    assert "nvidia.com/mig-1g.10gb" in pending["message"] and "1g.12gb" in pending["hint"]
    assert pending["details"] == [
        "FailedScheduling (x41 over 5h, last 7m ago): 0/7 nodes are available: 7 Insufficient nvidia.com/mig-1g.10gb.",
        "Pod ml/embed-batch-7k2lq -> Job embed-batch",
    ]
    assert by_code["device-plugin-not-ready"]["message"].endswith("is not ready (CrashLoopBackOff)")
    assert by_code["multiple-device-plugins"]["message"].startswith(
        "node a100-spare runs pods of 2 device-plugin DaemonSets (nvidia-device-plugin/nvidia-device-plugin-a100-mps "
        "and nvidia-device-plugin/nvidia-device-plugin-a100-train)")


# --- the tree's MIG managers, GPU Feature Discovery and label reconciler -----------------------------------------

MIXED_FLEET = TKE_SPEC.parents[1] / "mixed-fleet" / "cluster.yaml"
TREE_AGENTS = ("daemonset/nvidia-device-plugin/nvidia-mig-manager-", "daemonset/nvidia-device-plugin/gpu-feature-",
               "deployment/")


def agent_findings(out: str) -> list[tuple[str, str, str]]:
    return [f for f in findings(out) if f[2].startswith(TREE_AGENTS)]


def mixed_fleet_objects() -> dict[str, list[dict]]:
    return applied(compiled_objects(MIXED_FLEET), {})


def test_the_mig_managers_feature_discovery_and_reconciler_of_the_tree_are_expected(cluster, gpupolicy):
    objects = mixed_fleet_objects()
    agents = sorted(f"daemonset/{d['metadata']['namespace']}/{d['metadata']['name']}" for d in objects["daemonsets"]
                    if d["metadata"]["name"].startswith(("nvidia-mig-manager-", "gpu-feature-discovery-")))
    assert len(agents) == 7  # the MIG managers of 3 MIG-capable classes, GFD of 4 classes
    applied_cluster = cluster("fleet", add=objects, context="fleet")
    result = gpupolicy("cluster", "verify", "-p", MIXED_FLEET, "--kubeconfig", applied_cluster.kubeconfig, "-O", "json")
    assert agent_findings(result.out) == []

    empty = cluster("fleet", context="fleet")
    result = gpupolicy("cluster", "verify", "-p", MIXED_FLEET, "--kubeconfig", empty.kubeconfig, "-O", "json")
    missing = agent_findings(result.out)
    assert sorted(subject for code, _, subject in missing if code == "daemonset-missing") == agents
    assert ("deployment-missing", "", "deployment/gpupolicy-system/gpupolicy-node-labels") in missing


def test_drift_of_the_mig_manager_gfd_and_reconciler_is_reported_like_the_plugins(cluster, gpupolicy):
    live = mixed_fleet_objects()
    manager = by_name(live["daemonsets"], "nvidia-mig-manager-h100-mig")
    manager["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.5.2"
    clients = next(v for v in manager["spec"]["template"]["spec"]["volumes"] if v["name"] == "gpu-clients")
    clients["configMap"]["name"] = "default-gpu-clients"
    gfd = by_name(live["daemonsets"], "gpu-feature-discovery-h100-mig")
    gfd["metadata"]["generation"] = 2
    gfd["status"].update(desiredNumberScheduled=2, updatedNumberScheduled=1, numberAvailable=1)
    reconciler = by_name(live["deployments"], "gpupolicy-node-labels")
    reconciler["status"].update(readyReplicas=0, availableReplicas=0)
    reconciler["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/gpupolicy/gpupolicy-webhook:0.0.9"
    plan = next(c for c in live["configmaps"] if c["metadata"]["name"].startswith("gpupolicy-node-labels-"))
    plan["data"]["plan.json"] = "{}"
    served = cluster("fleet", add=live, context="fleet")
    result = gpupolicy("cluster", "verify", "-p", MIXED_FLEET, "--kubeconfig", served.kubeconfig, "-O", "json")
    assert result.code == 1
    assert agent_findings(result.out) == [
        ("daemonset-rollout-incomplete", "h100-mig", "daemonset/nvidia-device-plugin/gpu-feature-discovery-h100-mig"),
        ("daemonset-config-mismatch", "h100-mig", "daemonset/nvidia-device-plugin/nvidia-mig-manager-h100-mig"),
        ("daemonset-image-mismatch", "h100-mig", "daemonset/nvidia-device-plugin/nvidia-mig-manager-h100-mig"),
        ("deployment-image-mismatch", "", "deployment/gpupolicy-system/gpupolicy-node-labels"),
        ("deployment-not-ready", "", "deployment/gpupolicy-system/gpupolicy-node-labels"),
    ]
    report = {f["code"]: f for f in json.loads(result.out)["findings"]}
    assert report["daemonset-image-mismatch"]["hint"].endswith("set devicePlugin.migManager.image to what runs")
    assert report["deployment-not-ready"]["message"] == (
        "Deployment gpupolicy-system/gpupolicy-node-labels is not available: 0 of 1 replica(s) available, 1 updated")
    assert [f["subject"] for f in json.loads(result.out)["findings"] if f["code"] == "configmap-modified"] == [
        f"configmap/gpupolicy-system/{plan['metadata']['name']}"]
