"""The emitted objects are valid for Kubernetes, the plugin and mig-parted, and every tree builds with kustomize."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from external_tools import require_tool
from jsonschema import Draft202012Validator

from compiler import compile_policy
from compiler.targets import device_plugin, dra, gpu_operator, hami, monitoring
from compiler.tree import Tree
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples" / "clusters").glob("*/cluster.yaml"))
# Custom resources kubernetes-validate has no schema for; every other kind must validate strictly.
CUSTOM_KINDS = {
    ("nvidia.com/v1", "ClusterPolicy"),
    ("cert-manager.io/v1", "Certificate"),
    ("cert-manager.io/v1", "Issuer"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),  # tests/compiler/test_monitoring_objects.py
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("helm.toolkit.fluxcd.io/v2", "HelmRelease"),  # tests/compiler/test_flux_target.py
    ("source.toolkit.fluxcd.io/v1", "HelmRepository"),
}


def objects(tree: Tree) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, data in tree.items():
        if path.endswith(".yaml") and not path.endswith("kustomization.yaml") and \
                path not in (gpu_operator.VALUES_FILE, hami.VALUES_PATH, dra.VALUES_PATH):
            yield path, yaml.safe_load(data)


def schema(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((ROOT / "schemas" / name).read_text(encoding="utf-8")))


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_object_passes_strict_kubernetes_validation(example_policy: Load, name: str) -> None:
    policy = example_policy(name)
    checked = 0
    for _, obj in objects(compile_policy(policy)):
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            continue
        kubernetes_validate.validate(obj, policy.spec.kubernetes_version, strict=True)
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_device_plugin_and_mig_parted_config_matches_its_schema(example_policy: Load, name: str) -> None:
    plugin, mig_parted = schema("device-plugin-config.schema.json"), schema("mig-parted-config.schema.json")
    configs = 0
    for path, obj in objects(compile_policy(example_policy(name))):
        if obj["kind"] != "ConfigMap" or not path.startswith(("device-plugin/", "mig/")):
            continue
        for key, text in obj["data"].items():
            validator = mig_parted if path.startswith("mig/") else plugin
            errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(yaml.safe_load(text))]
            assert errors == [], f"{path} {key}"
            configs += 1
    assert configs >= 2


# ----------------------------------------------------------------------- device plugin specifics


def test_mig_plugins_get_sys_admin_and_mig_monitoring_and_others_drop_all(example_policy: Load) -> None:
    tree = compile_policy(example_policy("mixed-fleet"))
    for node_class in ("a100-mps", "h100-mig", "h100-train", "t4-dev"):
        container = yaml.safe_load(tree[f"device-plugin/daemonset-{node_class}.yaml"])["spec"]["template"]["spec"][
            "containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        if node_class == "h100-mig":
            assert container["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}
            assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
        else:
            assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                                    "capabilities": {"drop": ["ALL"]}}
            assert "NVIDIA_MIG_MONITOR_DEVICES" not in env
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_mps_classes_get_the_control_daemon_mps_root_and_a_config_that_names_it(example_policy: Load) -> None:
    tree = compile_policy(example_policy("mixed-fleet"))
    daemon = yaml.safe_load(tree["device-plugin/daemonset-mps-control-daemon-a100-mps.yaml"])
    pod = daemon["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["nodeSelector"] == {"node-pool": "a100-mps", "nvidia.com/mps.capable": "true"}
    assert pod["initContainers"][0]["command"] == ["mps-control-daemon", "mount-shm"]
    assert pod["initContainers"][0]["securityContext"] == {"privileged": True}
    assert pod["containers"][0]["args"] == ["--config-file=/etc/nvidia/device-plugin/a100-mps.yaml"]
    assert {"name": "mps-root", "hostPath": {"path": "/run/nvidia/mps", "type": "DirectoryOrCreate"}} in pod["volumes"]
    plugin = yaml.safe_load(tree["device-plugin/daemonset-a100-mps.yaml"])["spec"]["template"]["spec"]
    assert {"name": "MPS_ROOT", "value": "/run/nvidia/mps"} in plugin["containers"][0]["env"]
    assert {v["name"] for v in plugin["volumes"]} >= {"mps-root", "mps-shm"}
    config = yaml.safe_load(yaml.safe_load(tree["device-plugin/configmap-a100-mps.yaml"])["data"]["a100-mps"])
    assert config["sharing"]["mps"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert config["flags"]["mpsRoot"] == "/run/nvidia/mps"
    assert not [p for p in tree if "mps-control-daemon" in p and "a100-mps" not in p]


@pytest.mark.parametrize(("name", "pool"), [("mixed-fleet", "a100-mps"), ("vgpu-platform", "platform-vgpu"),
                                          ("vgpu-platform", "prod-mig")])
def test_every_agent_on_a_tainted_class_tolerates_its_taints_and_no_other_does(example_policy: Load, name: str,
                                                                               pool: str) -> None:
    # A DaemonSet pod that does not tolerate its nodes' taints never runs there: device plugin, MPS daemon, GFD,
    # MIG manager and HAMi's plugin alike.
    tainted = f"node-pool: {pool}\n      taints: [{{key: pool, value: {pool}, effect: NoSchedule}}]"
    tree = compile_policy(example_policy(name, (f"node-pool: {pool}\n", tainted + "\n")))
    sets = {path: obj for path, obj in objects(tree) if obj.get("kind") == "DaemonSet"}
    toleration = {"key": "pool", "operator": "Equal", "value": pool, "effect": "NoSchedule"}
    on_pool = {p for p, obj in sets.items() if obj["spec"]["template"]["spec"]["nodeSelector"].get("node-pool") == pool}
    assert len(on_pool) >= 2, sorted(sets)
    for path, obj in sets.items():
        assert (toleration in obj["spec"]["template"]["spec"]["tolerations"]) is (path in on_pool), path


def test_v0_14_0_gets_device_list_strategy_as_the_list_it_requires(example_policy: Load) -> None:
    policy = example_policy("tke-l20-t4", ("version: v0.14.5", "version: v0.14.0"))
    config = device_plugin.render_config(policy.spec.device_plugin, resolve(policy).classes[0])
    assert config["flags"]["plugin"]["deviceListStrategy"] == ["envvar"]


# ----------------------------------------------------------------------- MIG and the GPU Operator


def test_h20_mig_with_time_slicing_uses_mixed_names_and_a_named_mig_parted_layout(example_policy: Load) -> None:
    tree = compile_policy(example_policy("h20-mig"))
    configs = yaml.safe_load(tree["device-plugin/configmap.yaml"])
    assert configs["metadata"]["namespace"] == "gpu-operator"
    config = yaml.safe_load(configs["data"]["h20"])
    assert config["flags"] == {"migStrategy": "mixed"}
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-1g.12gb", "replicas": 2}]
    mig = yaml.safe_load(yaml.safe_load(tree["mig/configmap.yaml"])["data"]["config.yaml"])
    assert mig == {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "h20": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.12gb": 7}}],
        },
    }


def test_mig_groups_become_per_gpu_entries_without_a_device_filter(example_policy: Load) -> None:
    # A class's nodes hold one model, so a PCI-id filter adds nothing but the risk of naming the wrong board
    # (SXM vs PCIe), which mig-parted answers by silently skipping every GPU.
    tree = compile_policy(example_policy("mixed-fleet"))
    mig = yaml.safe_load(yaml.safe_load(tree["mig/configmap.yaml"])["data"]["config.yaml"])
    assert mig["mig-configs"]["h100-mig"] == [
        {"devices": [0, 1, 2, 3], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [4, 5, 6, 7], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
    ]


def test_operator_values_point_at_the_configmaps_of_the_same_tree(example_policy: Load) -> None:
    tree = compile_policy(example_policy("h20-mig"))
    values = yaml.safe_load(tree[gpu_operator.VALUES_FILE])
    paths = ("device-plugin/configmap.yaml", "mig/configmap.yaml")
    names = {yaml.safe_load(tree[p])["metadata"]["name"] for p in paths}
    assert {values["devicePlugin"]["config"]["name"], values["migManager"]["config"]["name"]} == names
    assert values["mig"] == {"strategy": "mixed"}
    assert not any(p.startswith("gpu-operator/") for p in tree), "installer helm: the tree writes no ClusterPolicy"
    changed = compile_policy(example_policy("h20-mig", ("1g.12gb: 2", "1g.12gb: 3")))
    moved = yaml.safe_load(changed[gpu_operator.VALUES_FILE])["devicePlugin"]["config"]["name"]
    assert moved == yaml.safe_load(changed["device-plugin/configmap.yaml"])["metadata"]["name"] != \
        values["devicePlugin"]["config"]["name"]


def test_olm_gets_an_unlabelled_partial_cluster_policy_with_the_same_fields(example_policy: Load) -> None:
    tree = compile_policy(example_policy("h20-mig", ("installer: helm ", "installer: olm ")))
    patch = yaml.safe_load(tree["gpu-operator/clusterpolicy.yaml"])
    assert patch["metadata"]["name"] == "gpu-cluster-policy"
    assert "labels" not in patch["metadata"], "a partial object carries only fields gpupolicy owns"
    assert "ServerSideApply=true" in patch["metadata"]["annotations"]["argocd.argoproj.io/sync-options"]
    resolved = resolve(example_policy("h20-mig"))
    config, mig, dcgm = (yaml.safe_load(tree[f"{d}/configmap.yaml"])["metadata"]["name"]
                         for d in ("device-plugin", "mig", "dcgm-exporter"))
    assert patch["spec"] == gpu_operator.cluster_policy_fields(resolved, config, mig,
                                                               monitoring.dcgm_exporter_fields(resolved, dcgm))
    assert gpu_operator.VALUES_FILE not in tree


def test_the_default_config_is_a_key_of_the_configmap_or_empty(example_policy: Load) -> None:
    # An operator default that names no key crash-loops every unlabelled node's config-manager.
    for edit in ((), ("  tenants:\n", MPS_CLASS.replace("mps: {replicas: 4}", "timeSlicing: {replicas: 4}")),):
        tree = compile_policy(example_policy("h20-mig", *([edit] if edit else [])))
        default = yaml.safe_load(tree[gpu_operator.VALUES_FILE])["devicePlugin"]["config"]["default"]
        keys = set(yaml.safe_load(tree["device-plugin/configmap.yaml"])["data"])
        assert default in keys | {""}
        assert default == ("h20" if not edit else "")


def test_operator_report_says_which_labels_go_on_which_nodes_and_who_sets_them(example_policy: Load) -> None:
    report = compile_policy(example_policy("h20-mig"))["REPORT.md"].decode()
    assert "- **h20** (nodes matching `gpu-pool=h20`):\n  - `nvidia.com/mig.config=h20`: gpupolicy's label " \
           "reconciler (node-labels/)" in report
    assert "kubectl label" not in report and "nvidia.com/device-plugin.config=h20" not in report


# ----------------------------------------------------------------------- kubectl kustomize


@functools.cache
def kustomize_build(directory: str) -> subprocess.CompletedProcess[str]:
    """One `kubectl kustomize` per tree; skipped without kubectl unless CI demands it."""
    kubectl = require_tool("kubectl")
    return subprocess.run([kubectl, "kustomize", directory], capture_output=True, text=True, check=False,
                          timeout=120)


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_committed_tree_builds_with_kubectl_kustomize_without_a_warning(name: str) -> None:
    built = kustomize_build(str(ROOT / "examples" / "clusters" / name / "out"))
    assert built.returncode == 0, built.stderr
    assert built.stderr == ""
    kinds = [doc["kind"] for doc in yaml.safe_load_all(built.stdout)]
    assert "ConfigMap" in kinds


def test_the_built_operator_tree_holds_every_configmap_its_helm_values_name() -> None:
    out = ROOT / "examples" / "clusters" / "h20-mig" / "out"
    documents = list(yaml.safe_load_all(kustomize_build(str(out)).stdout))
    config_maps = {d["metadata"]["name"] for d in documents if d["kind"] == "ConfigMap"}
    assert "ClusterPolicy" not in {d["kind"] for d in documents}
    values = yaml.safe_load((out / gpu_operator.VALUES_FILE).read_text())
    assert values["devicePlugin"]["config"]["name"] in config_maps
    assert values["migManager"]["config"]["name"] in config_maps


def test_the_built_standalone_tree_mounts_configmaps_it_contains() -> None:
    built = kustomize_build(str(ROOT / "examples" / "clusters" / "mixed-fleet" / "out"))
    documents = list(yaml.safe_load_all(built.stdout))
    config_maps = {d["metadata"]["name"] for d in documents if d["kind"] == "ConfigMap"}
    daemon_sets = [d for d in documents if d["kind"] == "DaemonSet"]
    assert len(daemon_sets) == 5 + 4 + 3  # plugins and the MPS daemon, GFD per class, MIG managers
    for daemon_set in daemon_sets:
        mounted = [v["configMap"]["name"] for v in daemon_set["spec"]["template"]["spec"]["volumes"]
                   if "configMap" in v]
        assert mounted and set(mounted) <= config_maps


def test_a_missing_tool_fails_when_ci_requires_it_and_is_skipped_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("GPUPOLICY_REQUIRE_TOOLS", "promtool,kubectl")
    with pytest.raises(pytest.fail.Exception, match="GPUPOLICY_REQUIRE_TOOLS names it"):
        kustomize_build.__wrapped__("unused")
    monkeypatch.setenv("GPUPOLICY_REQUIRE_TOOLS", "promtool")
    with pytest.raises(pytest.skip.Exception):
        kustomize_build.__wrapped__("unused")


MPS_CLASS = """    - name: a100-mps
      nodeSelector:
        gpu-pool: a100
      gpu: {model: A100-SXM4-80GB, count: 4}
      sharing:
        mps: {replicas: 4}
  tenants:
"""


def test_operator_mode_follows_the_mig_classes_strategy_cluster_wide(example_policy: Load) -> None:
    # The ClusterPolicy's mig.strategy reaches every plugin as MIG_STRATEGY env, which beats the file
    # (device-plugin.md §7); a class that needs another strategy is a validation error (policy/checks/).
    policy = example_policy("h20-mig")
    tree = compile_policy(policy)
    assert yaml.safe_load(tree[gpu_operator.VALUES_FILE])["mig"] == {"strategy": "mixed"}
    assert policy.spec.operator_mig_strategy == "mixed"


def test_an_mps_class_beside_mixed_mig_under_the_operator_is_refused_before_compiling() -> None:
    from policy.load import load_policy

    spec = ROOT / "examples" / "clusters" / "h20-mig" / "cluster.yaml"
    result = load_policy(spec.read_text().replace("  tenants:\n", MPS_CLASS), filename=str(spec))
    assert [d.code for d in result.diagnostics if d.severity == "error"] == ["operator-mig-strategy-conflict"]
