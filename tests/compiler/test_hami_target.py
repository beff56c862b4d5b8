"""The HAMi target: per-class device plugins without node names, the chart's values, and HAMi's config formats."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from cli.main import main as gpupolicy
from compiler import compile_policy
from compiler.targets import gpu_operator, hami
from compiler.tree import Tree
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
ROOT = Path(__file__).resolve().parents[2]
DEVICE_CONFIG = Draft202012Validator(json.loads((ROOT / "schemas" / "hami-device-config.schema.json").read_text()))
NODE_CONFIG = Draft202012Validator(json.loads((ROOT / "schemas" / "hami-node-config.schema.json").read_text()))
VALUES = Draft202012Validator(json.loads((ROOT / "schemas" / "hami-chart-values.schema.json").read_text()))
SCHEDULER_KEYS = ("resourceCountName", "resourceMemoryName", "resourceMemoryPercentageName", "resourceCoreName",
                  "resourcePriorityName", "defaultMemory", "defaultCores", "defaultGPUNum", "memoryFactor",
                  "gpuCorePolicy", "overwriteEnv")
SECOND_CLASS = """    - name: platform-a100
      nodeSelector:
        node-pool: platform-a100
      gpu: {model: A100-SXM4-80GB, count: 8}
      sharing:
        vgpu: {splitCount: 10, coreScaling: 2.0, corePolicy: disable}
    - name: dev-ts
"""


def doc(tree: Tree, path: str) -> Any:
    return yaml.safe_load(tree[path])


def errors(validator: Draft202012Validator, document: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(document)]


def two_vgpu_classes(example_policy: Load, *edits: tuple[str, str]) -> Tree:
    # A100s are MIG-capable: the tree's MIG manager keeps them at all-disabled and waits for their HAMi plugin and
    # GFD in one namespace (mig-clients-namespace-split).
    one_namespace = ("    namespace: kube-system\n    corePolicy",
                     "    namespace: nvidia-device-plugin\n    corePolicy")
    return compile_policy(example_policy("vgpu-platform", ("    - name: dev-ts\n", SECOND_CLASS), one_namespace,
                                         *edits))


def class_config(tree: Tree, name: str) -> dict[str, Any]:
    return yaml.safe_load(doc(tree, f"hami/configmap-{name}.yaml")["data"][hami.DEVICE_CONFIG_KEY])


# ---- every emitted HAMi file matches HAMi's format ---------------------------------------------------------------


def test_every_hami_config_of_the_example_matches_the_schemas(example_policy: Load) -> None:
    tree = compile_policy(example_policy("vgpu-platform"))
    values = doc(tree, hami.VALUES_PATH)
    assert errors(VALUES, values) == []
    assert errors(DEVICE_CONFIG, yaml.safe_load(values["device-config"]["content"])) == []
    config_maps = [p for p in tree if p.startswith("hami/configmap-")]
    assert config_maps == ["hami/configmap-platform-vgpu.yaml"]
    for path in config_maps:
        data = doc(tree, path)["data"]
        assert errors(DEVICE_CONFIG, yaml.safe_load(data[hami.DEVICE_CONFIG_KEY])) == []
        assert errors(NODE_CONFIG, json.loads(data[hami.NODE_CONFIG_KEY])) == []


def test_the_schemas_accept_hamis_own_configs_as_its_chart_renders_them() -> None:
    # charts/hami templates/scheduler/device-configmap.yaml with the chart's values (v2.10.0), the vendor
    # sections shortened; and values.yaml's nodeConfiguration example without its ignored migstrategy.
    chart = yaml.safe_load("""
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  preConfiguredDeviceMemory: 0
  memoryFactor: 1
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  enableNumaTopology: false
  gpuCorePolicy: default
  libCudaLogLevel: 1
  runtimeClassName: ""
  migProfileAllowlist:
  - models: [ "A30" ]
    profiles: [ "1g.6gb", "2g.12gb", "4g.24gb" ]
cambricon: {resourceCountName: cambricon.com/vmlu}
iluvatars: [{chipName: MR-V100}]
vnpus: {}
""")
    node = {"nodeconfig": [{"name": "your-node-name", "operatingmode": "hami-core", "devicememoryscaling": 1,
                            "devicesplitcount": 10, "preconfigureddevicememory": 1, "enablenumatopology": False,
                            "filterdevices": {"uuid": [], "index": []}, "enablegetpreferredallocation": False}]}
    assert errors(DEVICE_CONFIG, chart) == [] and errors(NODE_CONFIG, node) == []


@pytest.mark.parametrize(("edit", "where"), [
    ({"nvidia": {"knownMigGeometries": []}}, "knownMigGeometries"),
    ({"nvidia": {"disablecorelimit": True}}, "disablecorelimit"),
    ({"nvidia": {"libCudaLogLevel": "2"}}, "libCudaLogLevel"),
    ({"nvidia": {"gpuCorePolicy": "always"}}, "gpuCorePolicy"),
    ({"nvidia": {"deviceSplitCount": -1}}, "deviceSplitCount"),
    ({"nvidia": {"deviceMemoryScaling": 0}}, "deviceMemoryScaling"),
    ({"nvidia": {"resourceCountName": "gpu"}}, "resourceCountName"),
    ({"nvidia": {"migProfileAllowlist": [{"models": ["A30"], "profiles": ["g.6gb"]}]}}, "migProfileAllowlist"),
    ({"Version": "v1"}, "$"),
    ({"sharing": {}}, "$"),
], ids=lambda value: str(value)[:40])
def test_the_device_config_schema_refuses_what_hami_ignores_or_dies_on(edit: dict[str, Any], where: str) -> None:
    base = {"nvidia": {"resourceCountName": "nvidia.com/gpu", "resourceMemoryName": "nvidia.com/gpumem",
                       "resourceMemoryPercentageName": "nvidia.com/gpumem-percentage",
                       "resourceCoreName": "nvidia.com/gpucores", "resourcePriorityName": "nvidia.com/priority",
                       "deviceSplitCount": 4, "deviceMemoryScaling": 1.0, "deviceCoreScaling": 1.0,
                       "libCudaLogLevel": "1"}}
    assert errors(DEVICE_CONFIG, base) == []
    broken = {**base, **{k: v for k, v in edit.items() if k != "nvidia"}}
    broken["nvidia"] = {**base["nvidia"], **edit.get("nvidia", {})}
    found = errors(DEVICE_CONFIG, broken)
    assert found and all(where in e for e in found), found


def test_the_device_config_schema_requires_the_keys_the_plugin_dereferences() -> None:
    found = errors(DEVICE_CONFIG, {"nvidia": {"resourceCountName": "nvidia.com/gpu"}})
    for key in ("deviceSplitCount", "deviceMemoryScaling", "deviceCoreScaling", "libCudaLogLevel"):
        assert any(f"'{key}' is a required property" in e for e in found), key


@pytest.mark.parametrize("entry", [
    {"name": "node-*", "operatingmode": "hami-core"}, {"name": "n1", "operatingmode": "mps"},
    {"name": "n1", "migstrategy": "mixed"}, {"name": "n1", "devicesplitcount": 0}, {"name": "n1", "split": 2},
    {"operatingmode": "mig"}, {"name": "n1", "filterdevices": {"uuid": ["0"]}},
], ids=["wildcard", "mps", "migstrategy", "split 0", "unknown key", "no name", "not a uuid"])
def test_the_node_config_schema_refuses_what_hami_ignores_or_misreads(entry: dict[str, Any]) -> None:
    assert errors(NODE_CONFIG, {"nodeconfig": [entry]})


def test_the_values_schema_refuses_a_misspelt_chart_key() -> None:
    assert errors(VALUES, {"resourceMemory": "nvidia.com/gpumem"})
    assert errors(VALUES, {"devicePlugin": {"enable": False}})


# ---- one class's settings reach only that class's nodes, with no node names --------------------------------------


def test_each_vgpu_class_gets_its_own_daemonset_on_its_own_labels_with_its_own_config(example_policy: Load) -> None:
    tree = two_vgpu_classes(example_policy)
    selectors = {}
    for name, split, scaling, disabled in (("platform-vgpu", 5, 1.0, False), ("platform-a100", 10, 2.0, True)):
        daemon_set = doc(tree, f"hami/daemonset-{name}.yaml")
        pod = daemon_set["spec"]["template"]
        config_map = doc(tree, f"hami/configmap-{name}.yaml")
        assert pod["spec"]["nodeSelector"] == {"node-pool": name}
        assert pod["metadata"]["labels"]["hami.io/webhook"] == "ignore"
        assert pod["spec"]["volumes"][-1]["configMap"]["name"] == config_map["metadata"]["name"]
        plugin = pod["spec"]["containers"][0]
        assert plugin["command"] == ["nvidia-device-plugin", "--config-file=/config/device-config.yaml",
                                     "--mig-strategy=none"]
        config = class_config(tree, name)["nvidia"]
        assert (config["deviceSplitCount"], config["deviceCoreScaling"], config["disableCoreLimit"]) == (
            split, scaling, disabled)
        selectors[name] = daemon_set["spec"]["selector"]["matchLabels"]
        # No node is named anywhere: an empty nodeconfig (every node hami-core), and no pinned pod.
        assert json.loads(config_map["data"][hami.NODE_CONFIG_KEY]) == {"nodeconfig": []}
        assert "nodeName" not in pod["spec"]
    assert selectors["platform-vgpu"] != selectors["platform-a100"]


def test_every_copy_of_the_device_config_agrees_on_what_the_scheduler_reads(example_policy: Load) -> None:
    tree = two_vgpu_classes(example_policy, ("corePolicy: default", "corePolicy: default\n    defaultCores: 20"))
    scheduler = yaml.safe_load(doc(tree, hami.VALUES_PATH)["device-config"]["content"])["nvidia"]
    for name in ("platform-vgpu", "platform-a100"):
        config = class_config(tree, name)["nvidia"]
        assert {k: config[k] for k in SCHEDULER_KEYS} == {k: scheduler[k] for k in SCHEDULER_KEYS}
    assert scheduler["defaultCores"] == 20


def test_changing_one_vgpu_class_leaves_the_others_objects_byte_identical(example_policy: Load) -> None:
    before = two_vgpu_classes(example_policy)
    after = two_vgpu_classes(example_policy, ("vgpu: {splitCount: 10,", "vgpu: {splitCount: 12,"))
    assert before["hami/daemonset-platform-vgpu.yaml"] == after["hami/daemonset-platform-vgpu.yaml"]
    assert before["hami/daemonset-platform-a100.yaml"] != after["hami/daemonset-platform-a100.yaml"]


def test_vgpu_classes_get_no_nvidia_device_plugin_and_hamis_chart_plugin_is_off(example_policy: Load) -> None:
    tree = compile_policy(example_policy("vgpu-platform"))
    assert not [p for p in tree if p.startswith("device-plugin/daemonset") and "platform" in p]
    # GFD still labels the vgpu nodes, with a config that shares nothing: HAMi's sharing is not GFD's business.
    gfd_config = yaml.safe_load(doc(tree, "device-plugin/configmap-platform-vgpu.yaml")["data"]["platform-vgpu"])
    assert "sharing" not in gfd_config and gfd_config["flags"]["migStrategy"] == "none"
    assert "feature-discovery/daemonset-platform-vgpu.yaml" in tree
    assert doc(tree, hami.VALUES_PATH)["devicePlugin"] == {"enabled": False}
    assert "hami" in doc(tree, "kustomization.yaml")["resources"]
    assert hami.VALUES_PATH not in [f"hami/{r}" for r in doc(tree, "hami/kustomization.yaml")["resources"]]


def test_without_gfd_a_vgpu_class_gets_no_nvidia_config_at_all(example_policy: Load) -> None:
    tree = compile_policy(example_policy("vgpu-platform", ("gpuFeatureDiscovery: true", "gpuFeatureDiscovery: false")))
    assert not [p for p in tree if p.startswith("device-plugin/") and "platform" in p]


def test_under_the_operator_vgpu_classes_get_no_operator_config(example_policy: Load) -> None:
    tree = compile_policy(example_policy("vgpu-platform", ("deploy: standalone", "deploy: gpu-operator")))
    config = doc(tree, "device-plugin/configmap.yaml")["data"]
    assert sorted(config) == ["dev-ts", "prod-mig"]  # the operator's plugin serves these; HAMi the platform


def test_an_all_vgpu_cluster_under_the_operator_points_the_operator_at_no_plugin_config() -> None:
    text = """
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {name: only-vgpu}
spec:
  devicePlugin: {deploy: gpu-operator}
  nodeClasses:
    - name: platform
      nodeSelector: {pool: platform}
      gpu: {model: L40S, count: 4}
      sharing: {vgpu: {splitCount: 4}}
"""
    from policy.load import load_policy_or_raise

    tree = compile_policy(load_policy_or_raise(text, filename="only.yaml"))
    assert not [p for p in tree if p.startswith("device-plugin/")]
    assert "devicePlugin" not in doc(tree, gpu_operator.VALUES_FILE)  # the operator's chart values (installer helm)
    olm = compile_policy(load_policy_or_raise(text.replace("deploy: gpu-operator}", "deploy: gpu-operator, "
                                                                                     "operator: {installer: olm}}"),
                                              filename="olm.yaml"))
    assert "devicePlugin" not in doc(olm, "gpu-operator/clusterpolicy.yaml")["spec"]


# ---- the chart's values ------------------------------------------------------------------------------------------


def test_the_values_name_hamis_resources_as_every_device_config_does(example_policy: Load) -> None:
    tree = compile_policy(example_policy("vgpu-platform", ("    corePolicy: default\n",
                                                           "    corePolicy: default\n    resourceNames:\n"
                                                           "      count: nvidia.com/vgpu\n      memory: "
                                                           "nvidia.com/vgpu-memory\n")))
    values = doc(tree, hami.VALUES_PATH)
    config = class_config(tree, "platform-vgpu")["nvidia"]
    assert (values["resourceName"], values["resourceMem"]) == ("nvidia.com/vgpu", "nvidia.com/vgpu-memory")
    assert (config["resourceCountName"], config["resourceMemoryName"]) == (values["resourceName"],
                                                                            values["resourceMem"])
    assert "scheduler" not in values  # renamed: nothing to keep apart, HAMi's webhook keeps every namespace


def test_in_the_mixed_example_hamis_webhook_reaches_the_vgpu_tenants_only(example_policy: Load) -> None:
    values = doc(compile_policy(example_policy("vgpu-platform")), hami.VALUES_PATH)
    assert values["scheduler"]["admissionWebhook"] == {
        "namespaceSelector": {"matchExpressions": [{"key": "gpu-tier", "operator": "In",
                                                    "values": ["batch", "platform"]}]}}


def test_the_values_say_how_to_install_them(example_policy: Load) -> None:
    text = compile_policy(example_policy("vgpu-platform"))[hami.VALUES_PATH].decode()
    assert text.startswith("# Generated by `gpupolicy compile`")
    assert ("helm upgrade --install hami hami-charts/hami --version 2.10.0 --namespace kube-system "
            "-f hami-values.yaml") in text


def test_compile_check_catches_a_hand_edited_values_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text((ROOT / "examples" / "clusters" / "vgpu-platform" / "cluster.yaml").read_text())
    assert gpupolicy(["compile", str(spec)]) == 0
    values = tmp_path / "out" / hami.VALUES_PATH
    values.write_text(values.read_text().replace("enabled: false", "enabled: true"))
    capsys.readouterr()
    assert gpupolicy(["compile", str(spec), "--check"]) == 1
    assert "hami-values.yaml" in capsys.readouterr().out
