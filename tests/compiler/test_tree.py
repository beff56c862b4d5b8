"""compile_policy: the seed's cluster comes out as the article ended, changes stay local, bytes are stable."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from compiler import compile_policy
from compiler.targets import gpu_operator, hami
from compiler.tree import MARKER, Tree
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]


def doc(tree: Tree, path: str) -> Any:
    return yaml.safe_load(tree[path])


def plugin_config(tree: Tree, node_class: str) -> Any:
    config_map = doc(tree, f"device-plugin/configmap-{node_class}.yaml")
    return yaml.safe_load(config_map["data"][node_class])


def plugin_container(tree: Tree, node_class: str) -> Any:
    return doc(tree, f"device-plugin/daemonset-{node_class}.yaml")["spec"]["template"]["spec"]["containers"][0]


# ----------------------------------------------------------------------- seed 003, the TKE cluster


def test_tke_example_has_one_configmap_and_one_daemonset_per_class(example_policy: Load) -> None:
    tree = compile_policy(example_policy("tke-l20-t4"))
    assert sorted(p for p in tree if p.startswith("device-plugin/")) == [
        "device-plugin/configmap-l20.yaml",
        "device-plugin/configmap-t4.yaml",
        "device-plugin/daemonset-l20.yaml",
        "device-plugin/daemonset-t4.yaml",
        "device-plugin/kustomization.yaml",
    ]


def test_tke_example_ends_where_the_seed_ended_l20_8_and_t4_3_time_sliced(example_policy: Load) -> None:
    tree = compile_policy(example_policy("tke-l20-t4"))
    for node_class, replicas in (("l20", 8), ("t4", 3)):
        config = plugin_config(tree, node_class)
        assert config["version"] == "v1"
        assert config["flags"]["migStrategy"] == "none"
        assert config["sharing"] == {
            "timeSlicing": {
                "renameByDefault": False,
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}],
            }
        }
        # the TKE DaemonSet's own flags, now in the file (env would override the file)
        assert config["flags"]["failOnInitError"] is False
        assert config["flags"]["plugin"]["passDeviceSpecs"] is True


def test_tke_daemonsets_run_v0_14_5_with_their_own_config_file_never_a_directory(example_policy: Load) -> None:
    tree = compile_policy(example_policy("tke-l20-t4"))
    for node_class in ("l20", "t4"):
        daemon_set = doc(tree, f"device-plugin/daemonset-{node_class}.yaml")
        pod = daemon_set["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert daemon_set["metadata"]["name"] == f"nvidia-device-plugin-{node_class}"
        assert container["image"] == "sgccr.ccs.tencentyun.com/tkeimages/nvidia-device-plugin:v0.14.5"
        assert container["args"] == [f"--config-file=/etc/nvidia/device-plugin/{node_class}.yaml"]
        mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
        volume = next(v for v in pod["volumes"] if v["name"] == "config")
        config_map = doc(tree, f"device-plugin/configmap-{node_class}.yaml")
        # the mounted directory holds exactly one file, <class>.yaml, projected from the class's key
        assert mount["mountPath"] == "/etc/nvidia/device-plugin"
        assert volume["configMap"] == {"name": config_map["metadata"]["name"],
                                       "items": [{"key": node_class, "path": f"{node_class}.yaml"}]}
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] in ("PNV5b.8XLARGE96", "GN7.2XLARGE32")


def test_tke_report_shows_2_to_11_schedulable_gpu_slots(example_policy: Load) -> None:
    tree = compile_policy(example_policy("tke-l20-t4"))
    report = doc(tree, "report.json")
    assert report["totals"]["slotsBefore"] == 2
    assert report["totals"]["slotsAfter"] == 11
    assert [(c["name"], c["after"][0]["total"]) for c in report["classes"]] == [("l20", 8), ("t4", 3)]
    assert "**2 → 11 schedulable GPU slots.**" in tree["REPORT.md"].decode()
    assert "floor((46068 - 4606 reserve) / 4621) = 8 replicas, 4494 MiB headroom" in tree["REPORT.md"].decode()


# ----------------------------------------------------------------------- rollouts stay local


def test_changing_one_classes_replicas_rolls_only_that_classes_daemonset(example_policy: Load) -> None:
    before = compile_policy(example_policy("mixed-fleet"))
    after = compile_policy(example_policy("mixed-fleet", ("memoryPerReplica: 3Gi", "memoryPerReplica: 2Gi")))
    assert plugin_config(after, "t4-dev")["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 6
    assert before["device-plugin/configmap-t4-dev.yaml"] != after["device-plugin/configmap-t4-dev.yaml"]
    old_template = doc(before, "device-plugin/daemonset-t4-dev.yaml")["spec"]["template"]
    new_template = doc(after, "device-plugin/daemonset-t4-dev.yaml")["spec"]["template"]
    assert old_template != new_template  # the ConfigMap's new name is in the pod template: the pods roll
    others = [p for p in before if p.startswith("device-plugin/") and "t4-dev" not in p and p.endswith(".yaml")
              and "kustomization" not in p]
    assert len(others) == 7
    for path in others:
        assert before[path] == after[path], path


def test_sizing_change_in_the_tke_spec_renames_only_the_t4_configmap(example_policy: Load) -> None:
    before = compile_policy(example_policy("tke-l20-t4"))
    after = compile_policy(example_policy("tke-l20-t4", ("memoryPerReplica: 4401Mi", "memoryPerReplica: 3000Mi")))
    assert plugin_config(after, "t4")["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4
    assert doc(before, "device-plugin/configmap-t4.yaml")["metadata"]["name"] != \
        doc(after, "device-plugin/configmap-t4.yaml")["metadata"]["name"]
    assert before["device-plugin/daemonset-l20.yaml"] == after["device-plugin/daemonset-l20.yaml"]
    assert before["device-plugin/configmap-l20.yaml"] == after["device-plugin/configmap-l20.yaml"]


@pytest.mark.parametrize("name", ["tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform"])
def test_compiling_twice_gives_identical_bytes(example_policy: Load, name: str) -> None:
    assert compile_policy(example_policy(name)).files == compile_policy(example_policy(name)).files


# ----------------------------------------------------------------------- what every tree looks like


@pytest.mark.parametrize("name", ["tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform"])
def test_every_object_is_one_file_with_lf_endings_sorted_keys_and_a_marker(example_policy: Load, name: str) -> None:
    tree = compile_policy(example_policy(name))
    assert MARKER in tree
    for path, data in tree.items():
        assert data.endswith(b"\n") and not data.endswith(b"\n\n") and b"\r" not in data, path
        if path.endswith(".yaml"):
            documents = list(yaml.safe_load_all(data))
            assert len(documents) == 1, path
            assert list(documents[0]) == sorted(documents[0]), path


@pytest.mark.parametrize("name", ["tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform"])
def test_kustomizations_use_labels_never_common_labels_and_list_every_file(example_policy: Load, name: str) -> None:
    tree = compile_policy(example_policy(name))
    top = doc(tree, "kustomization.yaml")
    # No labels at the top either: each object carries its own, and a partial ClusterPolicy must carry none.
    assert "commonLabels" not in top and "namespace" not in top and "labels" not in top
    for directory in top["resources"]:
        kustomization = doc(tree, f"{directory}/kustomization.yaml")
        assert kustomization["resources"] == sorted(kustomization["resources"])
        listed = {f"{directory}/{r}" for r in kustomization["resources"]}
        assert listed == {p for p in tree if p.startswith(f"{directory}/") and not p.endswith("/kustomization.yaml")}
    # monitoring/ is its own unit, applied with the monitoring stack (tests/compiler/test_monitoring_objects.py), and
    # flux/ with Flux, wherever the tree has Helm values (tests/compiler/test_flux_target.py)
    helm_values = {"hami-values.yaml", "gpu-operator-values.yaml"} & set(tree)
    assert {p.split("/")[0] for p in tree if "/" in p} == {*top["resources"], "monitoring", "pictures",
                                                          *(["flux"] if helm_values else [])}


@pytest.mark.parametrize("name", ["tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform"])
def test_content_named_configmaps_come_first_and_are_never_pruned_mid_rollout(
    example_policy: Load, name: str
) -> None:
    tree = compile_policy(example_policy(name))
    for path in tree:
        if not path.endswith(".yaml") or path.endswith("kustomization.yaml") or \
                path in (gpu_operator.VALUES_FILE, hami.VALUES_PATH):
            continue
        obj = doc(tree, path)
        annotations = obj["metadata"].get("annotations", {})
        if obj["kind"] == "ConfigMap" and re.search(r"-[0-9a-f]{10}$", obj["metadata"]["name"]):
            assert annotations["argocd.argoproj.io/sync-wave"] == "-1", path
            assert annotations["argocd.argoproj.io/sync-options"] == "Prune=false", path
            assert annotations["kustomize.toolkit.fluxcd.io/prune"] == "disabled", path
        if obj["kind"] == "DaemonSet":
            assert annotations["argocd.argoproj.io/sync-wave"] == "0", path
        if obj["kind"] in ("ClusterPolicy", "ValidatingWebhookConfiguration"):
            assert "namespace" not in obj["metadata"], path


def test_daemonset_selectors_name_the_app_and_class_only(example_policy: Load) -> None:
    tree = compile_policy(example_policy("mixed-fleet"))
    daemon_set = doc(tree, "device-plugin/daemonset-a100-mps.yaml")
    assert daemon_set["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "nvidia-device-plugin",
                                                              "gpupolicy.dev/node-class": "a100-mps"}}
    assert daemon_set["spec"]["template"]["metadata"]["labels"] == {
        **daemon_set["spec"]["selector"]["matchLabels"], "app": "nvidia-device-plugin-daemonset"}
    assert daemon_set["spec"]["updateStrategy"]["type"] == "RollingUpdate"


def test_disabling_admission_drops_the_admission_component(example_policy: Load) -> None:
    off = ("  admission:\n", "  admission:\n    enabled: false\n")
    tree = compile_policy(example_policy("tke-l20-t4", off))
    assert not any(p.startswith("admission/") for p in tree)
    # monitoring's rules and dashboard still live in the webhook's namespace, so the tree still creates it
    assert doc(tree, "kustomization.yaml")["resources"] == ["device-plugin", "namespaces"]
    tree = compile_policy(example_policy("tke-l20-t4", off, ("monitoring:\n    enabled: true",
                                                              "monitoring:\n    enabled: false")))
    assert doc(tree, "kustomization.yaml")["resources"] == ["device-plugin"]


# ----------------------------------------------------------------------- Tree


def test_a_tree_is_a_sorted_read_only_mapping_of_relative_paths() -> None:
    tree = Tree.from_files({"b/x.yaml": b"b\n", "a.yaml": b"a\n"})
    assert list(tree) == ["a.yaml", "b/x.yaml"] and tree["a.yaml"] == b"a\n" and len(tree) == 2
    with pytest.raises(TypeError):
        tree["c"] = b""  # type: ignore[index]
    for bad in ("/etc/passwd", "../x", "a/../b", "./a", ""):
        with pytest.raises(ValueError):
            Tree.from_files({bad: b""})
