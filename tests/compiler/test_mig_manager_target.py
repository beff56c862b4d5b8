"""The standalone MIG manager and the pause protocol, checked on compiled trees against what mig-parted does.

The facts below are restated from mig-parted, not imported from the compiler, so a change on either side fails:
- reconfigure-mig.sh (v0.12.x) sets nvidia.com/gpu.deploy.{device-plugin,gpu-feature-discovery,...} to
  paused-for-mig-change, then waits (``kubectl wait --for=delete pod -n $DEFAULT_GPU_CLIENTS_NAMESPACE
  --field-selector spec.nodeName=<node> -l app=<label>``) for these app labels (mig-parted@v0.12.1:
  deployments/container/reconfigure-mig.sh:494-532); v0.13.0 on polls the same with List
  (pkg/mig/reconfigure/reconfigure.go:388-410, 613-624 at v0.15.0).
- Its API calls: node informer (list/watch), node get and label patch (``kubectl label``), the waits; the only
  deletes are of GPU Operator validator pods a standalone tree never runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler import compile_policy
from compiler.tree import Tree
from policy.load import load_policy
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
PAUSED = "paused-for-mig-change"
#: gpu.deploy component the MIG manager pauses -> the pod label it then waits for (reconfigure-mig.sh:496-518).
WAITED_FOR = {"device-plugin": "nvidia-device-plugin-daemonset", "gpu-feature-discovery": "gpu-feature-discovery"}
#: Pod verbs the clients' namespace needs per MIG manager line: kubectl wait --for=delete (get, list, watch) up to
#: v0.12, List polling from the Go port of v0.13.0 on.
#: v0.4.2 and v0.5.0 (shipped beside plugins v0.12.2 to v0.13.0) run the same script from
#: deployments/gpu-operator/: kubectl wait --for=delete on the clients' pods, kubectl get nodes and kubectl label on
#: the node, a node informer (main.go ContinuouslySyncMigConfigChanges, NewListWatchFromClient).
POD_VERBS = {"v0.4.2-ubuntu20.04": ["get", "list", "watch"], "v0.5.0-ubuntu20.04": ["get", "list", "watch"],
             "v0.12.1-ubuntu20.04": ["get", "list", "watch"], "v0.13.1": ["list"], "v0.15.0": ["list"]}
NODE_VERBS = {"v0.4.2-ubuntu20.04": ["get", "list", "patch", "watch"],
              "v0.5.0-ubuntu20.04": ["get", "list", "patch", "watch"],
              "v0.12.1-ubuntu20.04": ["get", "list", "patch", "watch"], "v0.13.1": ["get", "list", "patch", "watch"],
              "v0.15.0": ["get", "list", "patch", "watch"]}
REPOSITORY = "nvcr.io/nvidia/cloud-native/k8s-mig-manager"

# The vgpu example with its HAMi class moved to H100s (MIG-capable) next to its MIG class: the tree then runs a
# MIG manager on the vgpu nodes too (all-disabled), which HAMi's plugin must step aside for.
VGPU_ON_H100 = (("gpu: {model: L40S, count: 4}", "gpu: {model: NVIDIA-H100-80GB-HBM3, count: 8}"),
                ("    namespace: kube-system\n    corePolicy", "    namespace: nvidia-device-plugin\n    corePolicy"))
MIG_MANAGER_IMAGE = ("    gpuFeatureDiscovery: true\n", "    gpuFeatureDiscovery: true\n    migManager: {image: %s}\n")
#: A tree for a plugin from before MIG manager v0.12 (it runs the one the GPU Operator shipped beside it).
OLD_PLUGIN = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {{name: old-plugin}}
spec:
  devicePlugin: {{version: {version}, gpuFeatureDiscovery: true}}
  nodeClasses:
  - name: a100
    nodeSelector: {{pool: a100}}
    gpu: {{model: NVIDIA-A100-SXM4-40GB, count: 1}}
    sharing: {{mig: {{strategy: mixed, layout: {{1g.5gb: 7}}}}}}
"""


def load(name: str, *edits: tuple[str, str]) -> ClusterGPUPolicy:
    text = (EXAMPLES / name / "cluster.yaml").read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    result = load_policy(text, filename=f"{name}.yaml")
    assert result.ok and result.policy is not None, [d.message for d in result.diagnostics]
    return result.policy


def docs(tree: Tree, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for path in sorted(tree):
        if path.startswith(prefix) and path.endswith(".yaml") and path != "hami-values.yaml":
            obj = yaml.safe_load(tree[path])
            if isinstance(obj, dict) and "kind" in obj:
                yield path, obj


def env(daemonset: Any) -> dict[str, str]:
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def version(tag: str) -> tuple[int, ...]:
    """``v0.5.0-ubuntu20.04`` -> (0, 5, 0), compared as numbers (as text v0.5 sorts after v0.15)."""
    return tuple(int(part) for part in tag.lstrip("v").split("-")[0].split("."))


def trees() -> Iterator[tuple[str, Tree]]:
    for spec in sorted(EXAMPLES.glob("*/cluster.yaml")):
        yield spec.parent.name, compile_policy(load(spec.parent.name))
    yield "vgpu-on-h100", compile_policy(load("vgpu-platform", *VGPU_ON_H100))
    for tag in ("v0.13.1", "v0.15.0"):
        edit = (MIG_MANAGER_IMAGE[0], MIG_MANAGER_IMAGE[1] % f"{REPOSITORY}:{tag}")
        yield f"mixed-fleet-{tag}", compile_policy(load("mixed-fleet", edit))
    for plugin in ("v0.12.2", "v0.13.0"):  # MIG manager v0.4.2 and v0.5.0 (GO v1.11.0 and v22.9.1 values.yaml)
        result = load_policy(OLD_PLUGIN.format(version=plugin), filename=f"plugin-{plugin}.yaml")
        assert result.ok and result.resolved is not None, [d.message for d in result.diagnostics]
        yield f"plugin-{plugin}", compile_policy(result.resolved)


TREES = dict(trees())


def mig_managers(tree: Tree) -> list[Any]:
    return [obj for _, obj in docs(tree, "mig-manager/") if obj["kind"] == "DaemonSet"]


def clients_on(tree: Tree, node_selector: dict[str, str]) -> list[tuple[str, Any]]:
    """Every other DaemonSet of the tree whose pods can land on the nodes of that selector."""
    return [(path, obj) for path, obj in docs(tree) if obj["kind"] == "DaemonSet" and not path.startswith(
        "mig-manager/") and node_selector.items() <= obj["spec"]["template"]["spec"]["nodeSelector"].items()]


def test_the_generated_trees_exercise_every_kind_of_client() -> None:
    clients = {path.split("/")[0] + ("/mps" if "mps-control-daemon" in path else "")
               for tree in TREES.values() for ds in mig_managers(tree)
               for path, _ in clients_on(tree, ds["spec"]["template"]["spec"]["nodeSelector"])}
    assert clients == {"device-plugin", "device-plugin/mps", "feature-discovery", "hami"}


@pytest.mark.parametrize("name", sorted(TREES))
def test_every_gpu_client_on_a_mig_managed_class_steps_aside_and_is_waited_for(name: str) -> None:
    tree = TREES[name]
    for manager in mig_managers(tree):
        selector = manager["spec"]["template"]["spec"]["nodeSelector"]
        namespace = env(manager)["DEFAULT_GPU_CLIENTS_NAMESPACE"]
        for path, client in clients_on(tree, selector):
            terms = client["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            assert len(terms) == 1, path
            expressions = {e["key"]: e for e in terms[0]["matchExpressions"]}
            assert expressions["nvidia.com/mig.config.state"] == {
                "key": "nvidia.com/mig.config.state", "operator": "In", "values": ["success", "failed"]}, path
            paused = [k.removeprefix("nvidia.com/gpu.deploy.") for k, e in expressions.items()
                      if k.startswith("nvidia.com/gpu.deploy.") and e["operator"] == "NotIn"
                      and sorted(e["values"]) == ["false", PAUSED]]
            assert len(paused) == 1 and paused[0] in WAITED_FOR, path
            labels = client["spec"]["template"]["metadata"]["labels"]
            assert labels.get("app") == WAITED_FOR[paused[0]], path
            assert client["metadata"]["namespace"] == namespace, path


@pytest.mark.parametrize("name", sorted(TREES))
def test_the_mig_managers_rbac_is_exactly_what_it_calls(name: str) -> None:
    tree = TREES[name]
    managers = mig_managers(tree)
    if not managers:
        assert not any(p.startswith("mig-manager/") for p in tree)
        return
    tag = managers[0]["spec"]["template"]["spec"]["containers"][0]["image"].rsplit(":", 1)[1]
    found = dict(docs(tree, "mig-manager/"))
    cluster_rules = found["mig-manager/clusterrole.yaml"]["rules"]
    wanted = [{"apiGroups": [""], "resources": ["nodes"], "verbs": NODE_VERBS[tag]}]
    if version(tag) >= (0, 15, 0):  # DaemonSet clients keyed on gpu.deploy.client, in every namespace
        wanted.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]})
    assert cluster_rules == wanted
    roles = {obj["metadata"]["namespace"]: obj["rules"] for obj in found.values() if obj["kind"] == "Role"}
    bound = {obj["metadata"]["namespace"] for obj in found.values() if obj["kind"] == "RoleBinding"}
    namespaces = {env(ds)["DEFAULT_GPU_CLIENTS_NAMESPACE"] for ds in managers}
    assert set(roles) == bound == namespaces
    assert all(rules == [{"apiGroups": [""], "resources": ["pods"], "verbs": POD_VERBS[tag]}]
               for rules in roles.values())


@pytest.mark.parametrize("name", sorted(TREES))
def test_the_mig_manager_mounts_the_trees_config_and_clients_files(name: str) -> None:
    tree = TREES[name]
    configmaps = {obj["metadata"]["name"]: obj for _, obj in docs(tree) if obj["kind"] == "ConfigMap"}
    for manager in mig_managers(tree):
        pod = manager["spec"]["template"]["spec"]
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        sources = {v["name"]: v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v}
        values = env(manager)
        config_dir, _, config_key = values["CONFIG_FILE"].rpartition("/")
        clients_dir, _, clients_key = values["GPU_CLIENTS_FILE"].rpartition("/")
        by_dir = {path: name for name, path in mounts.items()}
        config = configmaps[sources[by_dir[config_dir]]]
        clients = configmaps[sources[by_dir[clients_dir]]]
        assert config["metadata"]["namespace"] == clients["metadata"]["namespace"] == manager["metadata"]["namespace"]
        layouts = yaml.safe_load(config["data"][config_key])["mig-configs"]
        assert yaml.safe_load(clients["data"][clients_key])["version"] == "v1"
        assert "all-disabled" in layouts
        node_class = manager["spec"]["selector"]["matchLabels"]["gpupolicy.dev/node-class"]
        plan = json.loads(dict(docs(tree, "node-labels/"))["node-labels/configmap.yaml"]["data"]["plan.json"])
        wanted = next(c for c in plan["classes"] if c["name"] == node_class)["labels"]["nvidia.com/mig.config"]
        assert wanted in layouts, (name, node_class)


def test_a_vgpu_class_split_from_its_feature_discovery_by_namespace_is_refused() -> None:
    text = (EXAMPLES / "vgpu-platform" / "cluster.yaml").read_text(encoding="utf-8")
    text = text.replace(*VGPU_ON_H100[0])
    result = load_policy(text, filename="split.yaml")
    assert [d.code for d in result.diagnostics if d.severity == "error"] == ["mig-clients-namespace-split"]
    assert not any(d.code == "mig-clients-namespace-split"
                   for d in load_policy(text.replace("gpuFeatureDiscovery: true", "gpuFeatureDiscovery: false"),
                                        filename="no-gfd.yaml").diagnostics)


@pytest.mark.parametrize("name", sorted(TREES))
def test_the_documented_retry_command_selects_exactly_the_nodes_mig_manager_pods(name: str) -> None:
    # docs/operations.md (and the runbook) retry a failed run by deleting the node's MIG manager pod by label.
    text = (Path(__file__).parents[2] / "docs" / "operations.md").read_text(encoding="utf-8")
    command = text[text.index("kubectl delete pod -n <plugin namespace>"):].split("`")[0]
    key, _, value = command.split(" -l ")[1].split()[0].partition("=")
    assert "--field-selector spec.nodeName=<node>" in " ".join(command.split())
    for path, obj in docs(TREES[name]):
        if obj.get("kind") != "DaemonSet":
            continue
        labels = obj["spec"]["template"]["metadata"]["labels"]
        is_manager = obj in mig_managers(TREES[name])
        assert (labels.get(key) == value) == is_manager, path
