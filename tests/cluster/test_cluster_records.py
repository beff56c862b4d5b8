"""The pure pieces: parsing API JSON, reading GFD labels, ages, and verify on hand-made records."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import build_recorded
import pytest
from cluster_support import ROOT

from cluster import expected, facts, verify
from cluster.resources import (
    Container,
    DaemonSet,
    Node,
    OwnerRef,
    Snapshot,
    event_from,
    node_from,
)
from compiler import compile_policy
from policy.load import load_policy

NOW = datetime(2025, 6, 12, 8, 0, tzinfo=UTC)


def test_the_recorded_json_is_what_the_builder_writes():
    recorded = Path(__file__).parent / "recorded"
    for path, text in build_recorded.build().items():
        stale = f"{path} is stale: run python tests/cluster/build_recorded.py"
        assert (recorded / path).read_text(encoding="utf-8") == text, stale


@pytest.mark.parametrize(("seconds", "shown"), [
    (45, "45s"), (119, "119s"), (330, "5m30s"), (600, "10m"), (3 * 3600, "3h"), (5 * 3600 + 600, "5h10m"),
    (30 * 3600, "30h"), (4 * 86400 + 12 * 3600, "4d12h"), (28 * 86400 + 7200, "28d"), (800 * 86400, "2y70d"),
])
def test_ages_read_like_kubectl(seconds: int, shown: str):
    assert verify.human_duration(seconds) == shown


@pytest.mark.parametrize(("label", "model", "profile", "shared"), [
    ("NVIDIA-L20-SHARED", "NVIDIA-L20", None, True),
    ("Tesla-T4", "Tesla-T4", None, False),
    ("A100-SXM4-40GB-MIG-1g.5gb", "A100-SXM4-40GB", "1g.5gb", False),
    ("NVIDIA-H20-MIG-1g.12gb-SHARED", "NVIDIA-H20", "1g.12gb", True),
    ("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb+me", "NVIDIA-H100-80GB-HBM3", "1g.10gb+me", False),
    ("A100-SXM4-40GB-MIG-INVALID", "A100-SXM4-40GB", "INVALID", False),
])
def test_product_labels_come_apart_into_model_mig_profile_and_sharing(label, model, profile, shared):
    assert facts.parse_product(label) == facts.Product(model, profile, shared)


def test_gpu_memory_in_bytes_from_an_old_gfd_is_read_as_mib():
    assert facts.memory_mib({facts.MEMORY: "16106127360"}) == 15360
    assert facts.memory_mib({facts.MEMORY: "46068"}) == 46068
    assert facts.memory_mib({}) is None


def test_products_without_the_nvidia_prefix_are_the_same_model():
    assert verify.same_model("A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB")
    assert verify.same_model("T4", "Tesla-T4")
    assert not verify.same_model("NVIDIA-L20", "NVIDIA-L40")


@pytest.mark.parametrize(("command", "args", "image", "plugin"), [
    (("nvidia-device-plugin",), (), "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", True),
    ((), ("--mig-strategy=single",), "nvcr.io/nvidia/k8s-device-plugin:v0.14.5", True),
    (("gpu-feature-discovery",), (), "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", False),
    (("mps-control-daemon",), ("--config-file=/x",), "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", False),
    (("config-manager",), (), "nvcr.io/nvidia/k8s-device-plugin:v0.17.1", False),
    (("/bin/sh", "-c"), ("exec nvidia-device-plugin --fail-on-init-error=false",), "vendor/gpu:1", True),
    ((), (), "registry.k8s.io/kube-proxy:v1.31.4", False),
])
def test_the_device_plugin_is_told_apart_from_its_siblings_in_the_same_image(command, args, image, plugin):
    assert facts.runs_device_plugin(Container("c", image, command, args, {}, {})) is plugin


def test_events_written_through_events_k8s_io_give_their_series_count_and_times():
    event = event_from({
        "metadata": {"namespace": "ml"}, "involvedObject": {"kind": "Pod", "name": "p", "uid": "u"},
        "reason": "FailedScheduling", "message": " 0/7 nodes are available. ",
        "eventTime": "2025-06-12T03:00:00.000000Z", "firstTimestamp": None, "lastTimestamp": None,
        "series": {"count": 41, "lastObservedTime": "2025-06-12T07:53:00.000000Z"},
    })
    assert (event.count, event.message) == (41, "0/7 nodes are available.")
    assert event.first_seen == datetime(2025, 6, 12, 3, tzinfo=UTC)
    assert event.last_seen == datetime(2025, 6, 12, 7, 53, tzinfo=UTC)


def test_node_quantities_keep_only_whole_extended_resources():
    node = node_from({"metadata": {"name": "n"}, "status": {
        "capacity": {"cpu": "32", "memory": "97421144Ki", "nvidia.com/gpu": "8", "nvidia.com/gpu.shared": 16},
        "allocatable": {"nvidia.com/gpu": "7", "hugepages-2Mi": "0"}}})
    assert node.capacity == {"nvidia.com/gpu": 8, "nvidia.com/gpu.shared": 16}
    assert node.allocatable == {"nvidia.com/gpu": 7, "hugepages-2Mi": 0}
    assert node.ready  # a trimmed node without conditions is not taken for a broken one


# --- verify on hand-made records: the GPU Operator flavour --------------------------------------------------------


def _h20_node(name: str, **labels: str) -> Node:
    base = {"gpu-pool": "h20", facts.PRODUCT: "NVIDIA-H20", facts.COUNT: "8", facts.MIG_STRATEGY: "mixed",
            facts.MIG_CONFIG_STATE: "success", "nvidia.com/mig.config": "h20"}
    return Node(name, {**base, **labels}, {"nvidia.com/mig-1g.12gb": 112}, {"nvidia.com/mig-1g.12gb": 112})


def test_under_the_gpu_operator_its_plugin_is_not_unmanaged_and_nodes_need_the_mig_config_label():
    spec = ROOT / "examples" / "clusters" / "h20-mig" / "cluster.yaml"
    policy = load_policy(spec.read_text(encoding="utf-8"), filename=str(spec)).policy
    assert policy is not None
    operator_plugin = DaemonSet(
        "gpu-operator", "nvidia-device-plugin-daemonset", "uid-ds", {}, (OwnerRef("ClusterPolicy", "cluster-policy",
                                                                                  "uid-cp", True),),
        3, 3, {"app": "nvidia-device-plugin-daemonset"}, {}, (Container("nvidia-device-plugin", "nvcr.io/nvidia/"
                                                                      "k8s-device-plugin:v0.17.1", (), (), {}, {}),),
        (), 4, 4, 4, 4, 4)
    # The only class is the operator's devicePlugin.config.default: no device-plugin.config label is needed.
    nodes = (*(_h20_node(f"h20-{i}") for i in range(3)),
             _h20_node("h20-3", **{"nvidia.com/mig.config": "all-disabled"}))
    wanted = expected.from_tree(compile_policy(policy))
    result = verify.verify(Snapshot("ctx", "https://api", NOW, nodes, (operator_plugin,)), policy, wanted)
    configmaps = sorted(c.name.rsplit("-", 1)[0] for c in wanted.configmaps)
    assert configmaps == ["gpupolicy-device-plugin-configs", "gpupolicy-mig-parted-config", "gpupolicy-node-labels"]
    assert [(f.code, f.subject) for f in result.findings if f.code != "configmap-missing"] == [
        ("node-label-conflict", "node/h20-3"),
        ("deployment-missing", "deployment/gpupolicy-system/gpupolicy-node-labels")]
    assert result.findings[0].message.startswith(
        "nvidia.com/mig.config is 'all-disabled' on node h20-3, set by a writer verify cannot name (the objects carry "
        "no managedFields")
    assert "class h20's label plan wants 'h20'" in result.findings[0].message
