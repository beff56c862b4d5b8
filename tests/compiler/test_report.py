"""The capacity report: totals, unknown node counts, isolation and overhead wording, warnings, label plans."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from compiler import report
from policy.load import load_policy_or_raise
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]


def build_report(policy: ClusterGPUPolicy) -> report.CapacityReport:
    return report.build_report(resolve(policy))


def test_classes_without_a_node_count_are_shown_per_node_and_left_out_of_totals(example_policy: Load) -> None:
    capacity = build_report(example_policy("mixed-fleet", ("      nodes: 6\n", "")))
    t4 = next(c for c in capacity.classes if c.name == "t4-dev")
    assert (t4.nodes, t4.physical_gpus, t4.after[0].per_node, t4.after[0].total) == (None, None, 4, None)
    assert capacity.totals()["classesWithoutNodeCount"] == ["t4-dev"]
    assert capacity.totals()["slotsAfter"] == 176 - 24
    assert "Totals leave out classes without a node count: t4-dev." in report.render_markdown(capacity)


def test_each_mode_states_its_isolation_and_overhead_from_the_seeds(example_policy: Load) -> None:
    capacity = build_report(example_policy("mixed-fleet"))
    by_name = {c.name: c for c in capacity.classes}
    assert by_name["t4-dev"].overhead.startswith("~10-15%")
    assert by_name["h100-mig"].overhead.startswith("~2-3%")
    assert by_name["h100-train"].overhead.startswith("0%")
    assert "no fault isolation" in by_name["a100-mps"].overhead
    assert by_name["a100-mps"].after[0].memory_enforced  # MPS pins a memory limit per client
    assert not by_name["t4-dev"].after[0].memory_enforced
    assert by_name["h100-mig"].after[0].isolation == "MIG hardware (memory, cache, faults)"


def test_time_sliced_mig_instances_split_the_instance_memory_without_a_limit(example_policy: Load) -> None:
    slots = build_report(example_policy("h20-mig")).classes[0].after[0]
    # H20 1g.12gb: 11243 MiB (estimated from H100 NVL ratios, catalog.yaml), split by 2 replicas, no limit
    assert (slots.device_memory_mib, slots.replicas, slots.memory_mib, slots.memory_enforced) == (11243, 2, 5621, False)
    assert slots.memory_estimated


def test_warnings_of_the_spec_appear_in_the_report(example_policy: Load) -> None:
    policy = example_policy("h20-mig", ("deploy: gpu-operator\n",
                                        "deploy: gpu-operator\n    image: nvcr.io/nvidia/k8s-device-plugin:v0.17.1\n"))
    capacity = build_report(policy)
    assert ("warning", "operator-image-set", "spec.devicePlugin.image") in [
        (f.severity, f.code, f.path) for f in capacity.findings]
    assert "- warning `operator-image-set` at `spec.devicePlugin.image`:" in report.render_markdown(capacity)


def test_advice_on_the_sharing_mode_appears_in_the_report() -> None:
    # mixed-fleet sizes its T4s from memory; with bare replicas and no memory basis explain advises against it
    spec = Path(__file__).parents[2] / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"
    text = spec.read_text().replace("sizing: {memoryPerReplica: 3Gi, reserve: 10%}", "replicas: 4")
    capacity = build_report(load_policy_or_raise(text, filename=str(spec)))
    assert ("warning", "time-slicing-without-sizing") in [(f.severity, f.code) for f in capacity.findings]
    assert "warning[time-slicing-without-sizing]" in report.render_text(capacity)


def test_standalone_classes_on_nodes_they_already_select_need_no_labels(example_policy: Load) -> None:
    capacity = build_report(example_policy("tke-l20-t4"))
    assert all(c.node_labels == {} == c.labels_set_by for c in capacity.classes)
    assert "None: every workload selects its nodes" in report.render_markdown(capacity)


def test_standalone_mps_and_mig_capable_classes_get_their_labels(example_policy: Load) -> None:
    labels = {c.name: c.node_labels for c in build_report(example_policy("mixed-fleet")).classes}
    assert labels == {
        "a100-mps": {"nvidia.com/mig.config": "all-disabled", "nvidia.com/mps.capable": "true"},
        "h100-mig": {"nvidia.com/mig.config": "h100-mig"},
        "h100-train": {"nvidia.com/mig.config": "all-disabled"},
        "t4-dev": {},
    }
