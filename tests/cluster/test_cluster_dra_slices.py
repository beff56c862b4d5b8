"""`cluster verify` and `cluster discover` on the ResourceSlices NVIDIA's DRA driver publishes (tests/fixtures/
dra-slices, recorded from the driver's v0.4.1 source): the example's DRA classes agree with them, and each edit a
real cluster can show (another product, a GPU gone, another MIG layout, a slice of another driver) is named per
node, device and attribute."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_support import ROOT

from cluster import discover, expected, records, verify
from cluster.findings import Finding
from compiler import compile_policy
from policy.kube.lists import list_items
from policy.load import load_policy

SLICES = ROOT / "tests" / "fixtures" / "dra-slices"
SPEC = ROOT / "examples" / "clusters" / "dra-mixed" / "cluster.yaml"
DRA_CODES = ("dra-device-class-mismatch", "dra-device-count-mismatch", "dra-device-mismatch", "dra-devices-missing",
             "dra-devices-not-verified", "dra-devices-unexpected", "dra-mig-layout-mismatch")
Obj = dict[str, Any]


def recorded() -> list[Obj]:
    """Every object of the fixtures, Lists unwrapped (a kind List and a typed ResourceSliceList)."""
    docs = [d for name in ("nodes.yaml", "whole-gpus.yaml", "mig-devices.yaml")
            for d in yaml.safe_load_all((SLICES / name).read_text(encoding="utf-8"))]
    return list(list_items(docs))


def policy():
    result = load_policy(SPEC.read_text(encoding="utf-8"), filename=str(SPEC))
    assert result.ok and result.policy is not None
    return result.policy


def findings(objects: list[Obj], spec=None) -> list[Finding]:
    chosen = spec or policy()
    snapshot, _ = records.snapshot_from(objects, source="fixtures")
    result = verify.verify(snapshot, chosen, expected.from_tree(compile_policy(chosen)))
    return [f for f in result.findings if f.code in DRA_CODES]


def edited(node: str, change: Callable[[Obj], None]) -> list[Obj]:
    objects = copy.deepcopy(recorded())
    target = next(o for o in objects if o["kind"] == "ResourceSlice" and o["spec"]["nodeName"] == node)
    change(target)
    return objects


def device(obj: Obj, name: str) -> Obj:
    return next(d for d in obj["spec"]["devices"] if d["name"] == name)


def test_the_fixtures_hold_every_dra_node_of_the_example_and_its_slice_once():
    objects = recorded()
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    assert sorted(s["spec"]["nodeName"] for s in slices) == sorted(
        o["metadata"]["name"] for o in objects if o["kind"] == "Node")
    assert all(s["spec"]["pool"]["name"] == s["spec"]["nodeName"] for s in slices)
    assert {len(s["spec"]["devices"]) for s in slices} == {8, 28, 2}


def test_the_recorded_slices_agree_with_the_classes_and_the_compiled_device_classes():
    assert findings(recorded()) == []


def test_the_class_status_counts_the_published_devices_as_slots():
    chosen = policy()
    snapshot, _ = records.snapshot_from(recorded(), source="fixtures")
    result = verify.verify(snapshot, chosen, expected.from_tree(compile_policy(chosen)))
    advertised = {s.name: dict(s.advertised) for s in result.classes}
    # per DeviceClass: what claims name (no pod can ask for an extended resource on Kubernetes 1.34 without the gate)
    assert advertised["h100-train"] == {"h100-train.exclusive.gpupolicy.dev": 16}
    assert advertised["a100-mig"] == {"a100-mig.1g.10gb.gpupolicy.dev": 56}
    # two L40S per node, four MPS clients each
    assert advertised["l40s-mps"] == {"l40s-mps.mps.gpupolicy.dev": 16}


def test_a_gpu_of_another_product_is_named_with_its_attribute_and_the_device_class_that_misses_it():
    def swap(obj: Obj) -> None:
        device(obj, "gpu-3")["attributes"]["productName"] = {"string": "NVIDIA H100 PCIe"}

    found = findings(edited("h100-train-1", swap))
    assert [(f.code, f.subject) for f in found] == [("dra-device-mismatch", "node/h100-train-1"),
                                                    ("dra-device-class-mismatch", "node/h100-train-1")]
    assert found[0].message == ("device gpu-3 of node h100-train-1 (slice h100-train-1-gpu.nvidia.com-b7fab) has "
                                "productName 'NVIDIA H100 PCIe', class h100-train is NVIDIA-H100-80GB-HBM3")
    assert found[1].message == ("DeviceClass h100-train.exclusive.gpupolicy.dev (class h100-train) on node "
                                "h100-train-1: does not select gpu-3")


def test_a_missing_gpu_is_counted_on_its_node():
    def drop(obj: Obj) -> None:
        obj["spec"]["devices"] = [d for d in obj["spec"]["devices"] if d["name"] != "gpu-7"]

    found = findings(edited("h100-train-2", drop))
    assert [(f.code, f.node_class, f.subject) for f in found] == [
        ("dra-device-count-mismatch", "h100-train", "node/h100-train-2")]
    assert found[0].message.startswith("node h100-train-2 publishes 7 whole GPUs (gpu-0, gpu-1, gpu-2, gpu-3 and 3 "
                                       "more), class h100-train has 8 (gpu.count 8)")


def test_a_mig_layout_that_differs_is_named_per_profile_and_gpu():
    def repartition(obj: Obj) -> None:
        # GPU 2 of the node split into two 3g.40gb devices instead of seven 1g.10gb ones
        kept = [d for d in obj["spec"]["devices"] if not d["name"].startswith("gpu-2-")]
        template = device(obj, "gpu-2-mig-1g10gb-19-0")
        bigger = []
        for start in (0, 4):
            made = copy.deepcopy(template)
            made["name"] = f"gpu-2-mig-3g40gb-9-{start}"
            made["attributes"]["profile"] = {"string": "3g.40gb"}
            made["capacity"]["memory"] = {"value": "40192Mi"}
            bigger.append(made)
        obj["spec"]["devices"] = kept + bigger

    found = findings(edited("a100-mig-2", repartition))
    assert [(f.code, f.subject) for f in found] == [("dra-mig-layout-mismatch", "node/a100-mig-2")] * 2
    assert found[0].message.startswith("node a100-mig-2 publishes 21 MIG 1g.10gb devices")
    assert found[0].message.endswith("class a100-mig's MIG layout makes 28")
    assert len(found[0].details) == 3  # the three GPUs that still hold 1g.10gb devices
    assert found[1].message == ("node a100-mig-2 publishes 2 MIG 3g.40gb devices (gpu-2-mig-3g40gb-9-0, "
                                "gpu-2-mig-3g40gb-9-4), class a100-mig's MIG layout makes 0")


def test_a_slice_of_another_driver_leaves_the_node_without_the_classes_devices():
    def other(obj: Obj) -> None:
        obj["spec"]["driver"] = "compute-domain.nvidia.com"

    found = findings(edited("l40s-mps-1", other))
    assert [(f.code, f.subject) for f in found] == [("dra-devices-missing", "node/l40s-mps-1")]
    assert found[0].message == ("node l40s-mps-1 of class l40s-mps has no device in a ResourceSlice of driver "
                                "gpu.nvidia.com; it has slices of compute-domain.nvidia.com only: claims on the "
                                "class's DeviceClasses cannot be allocated there")


def test_a_device_another_class_selects_is_named_with_that_class():
    def h100(obj: Obj) -> None:
        device(obj, "gpu-1")["attributes"]["productName"] = {"string": "NVIDIA H100 80GB HBM3"}

    found = findings(edited("l40s-mps-2", h100))
    assert [f.code for f in found] == ["dra-device-mismatch", "dra-device-class-mismatch", "dra-device-class-mismatch"]
    assert found[2].message == ("DeviceClass h100-train.exclusive.gpupolicy.dev of class h100-train selects gpu-1 of "
                                "node l40s-mps-2, which is class l40s-mps's: claims of that class's tenants can be "
                                "allocated here")


def test_without_slices_each_dra_class_says_its_devices_were_not_compared():
    objects = [o for o in recorded() if o["kind"] != "ResourceSlice"]
    found = findings(objects)
    assert [(f.code, f.node_class, f.severity) for f in found] == [
        ("dra-devices-not-verified", c, "warning") for c in ("h100-train", "a100-mig", "l40s-mps")]
    assert "holds no ResourceSlice" in found[0].message


def test_a_device_plugin_node_with_the_drivers_devices_is_named():
    # the L40S nodes handed to the device-plugin class: the DRA kubelet plugin still publishes their GPUs
    text = SPEC.read_text(encoding="utf-8").replace("node-pool: l4-dev", "node-pool: l40s-mps", 1)
    text = text.replace("node-pool: l40s-mps\n      nodes: 2", "node-pool: l40s-gone\n      nodes: 2")
    result = load_policy(text, filename="edited.yaml")
    assert result.policy is not None, result.diagnostics
    found = findings(recorded(), result.policy)
    assert [(f.code, f.subject) for f in found] == [("dra-devices-unexpected", "node/l40s-mps-1"),
                                                    ("dra-devices-unexpected", "node/l40s-mps-2")]


def test_discover_drafts_the_dra_classes_from_the_slices_and_the_draft_validates(tmp_path: Path):
    snapshot, _ = records.snapshot_from(recorded(), source="fixtures")
    text = discover.render_draft(discover.discover(snapshot, name="dra-fleet"))
    data = yaml.safe_load(text)
    classes = {c["name"]: c for c in data["spec"]["nodeClasses"]}
    assert {n: (c["allocation"], c["gpu"], c["sharing"], c["nodes"]) for n, c in classes.items()} == {
        "a100-80gb": ("dra", {"model": "NVIDIA-A100-SXM4-80GB", "count": 4},
                      {"mig": {"strategy": "mixed", "layout": {"1g.10gb": 7}}}, 2),
        "h100": ("dra", {"model": "NVIDIA-H100-80GB-HBM3", "count": 8}, "exclusive", 2),
        "l40s": ("dra", {"model": "NVIDIA-L40S", "count": 2}, "exclusive", 2),
    }
    result = load_policy(text, filename="draft.yaml")
    assert result.ok, result.diagnostics
    # and it compiles to DeviceClasses that select exactly the devices it was drafted from
    assert result.policy is not None
    tree = compile_policy(result.policy)
    assert sorted(p for p in tree if p.startswith("dra/deviceclass-")) == [
        "dra/deviceclass-a100-80gb.1g.10gb.gpupolicy.dev.yaml", "dra/deviceclass-h100.exclusive.gpupolicy.dev.yaml",
        "dra/deviceclass-l40s.exclusive.gpupolicy.dev.yaml"]
    assert findings(recorded(), result.policy) == []


@pytest.mark.parametrize("kept", ["nodes.yaml"])
def test_discover_without_slices_drafts_nothing_from_nodes_without_gfd_labels(kept: str):
    docs = list(yaml.safe_load_all((SLICES / kept).read_text(encoding="utf-8")))
    snapshot, _ = records.snapshot_from(docs, source=kept)
    with pytest.raises(discover.DiscoverError):
        discover.discover(snapshot, name="x")


# --- live: the slices listed from an API server (recorded responses), or refused -----------------------------------


def served(objects: list[Obj]) -> dict[str, list[Obj]]:
    return {"nodes": [o for o in objects if o["kind"] == "Node"],
            "resourceslices": [o for o in objects if o["kind"] == "ResourceSlice"]}


def dra_lines(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if "[dra-" in line]


def test_live_verify_lists_the_slices_and_finds_what_the_files_show(cluster, gpupolicy):
    def drop(obj: Obj) -> None:
        obj["spec"]["devices"] = [d for d in obj["spec"]["devices"] if d["name"] != "gpu-7"]

    seen = cluster(replace=served(edited("h100-train-2", drop)))
    result = gpupolicy("cluster", "verify", "-p", SPEC, "--kubeconfig", seen.kubeconfig)
    assert result.code == 1
    assert [line.split(":")[0] for line in dra_lines(result.out)] == ["error[dra-device-count-mismatch]"]
    assert any(p.startswith("/apis/resource.k8s.io/v1/resourceslices") for _, p in seen.server.requests)


def test_live_verify_refused_the_slices_says_so_per_dra_class_and_reads_the_rest(cluster, gpupolicy):
    from recorded_responses import Fault

    seen = cluster(replace=served(recorded()), faults={"resourceslices": Fault(status=403)})
    result = gpupolicy("cluster", "verify", "-p", SPEC, "--kubeconfig", seen.kubeconfig)
    lines = dra_lines(result.out)
    assert [line.split(":")[0] for line in lines] == ["warning[dra-devices-not-verified]"] * 3
    assert ("could not be read: the API server refused to list resourceslices (403 Forbidden: resourceslices is "
            'forbidden: User "system:serviceaccount:ci:gpupolicy" cannot list resource "resourceslices" in API group '
            '"resource.k8s.io" at the cluster scope); its GPUs were not compared with the class') in lines[0]
    # the nodes were read all the same: their labels were checked
    assert "class h100-train: 2 nodes" in result.out


def test_live_discover_drafts_the_dra_classes_from_the_listed_slices(cluster, gpupolicy):
    seen = cluster(replace=served(recorded()))
    result = gpupolicy("cluster", "discover", "--kubeconfig", seen.kubeconfig, "-o", "-")
    assert result.code == 0, result.err
    data = yaml.safe_load(result.out)
    assert [(c["name"], c["allocation"]) for c in data["spec"]["nodeClasses"]] == [
        ("a100-80gb", "dra"), ("h100", "dra"), ("l40s", "dra")]


def test_selectors_see_the_device_as_the_scheduler_builds_it():
    from cluster import device_cel
    from cluster.resources import resource_slice_from

    piece = resource_slice_from(next(o for o in recorded() if o["kind"] == "ResourceSlice"
                                     and o["spec"]["nodeName"] == "a100-mig-1"))
    mig = piece.devices[0]
    attrs = "device.attributes['gpu.nvidia.com']"
    # bare attribute names are the driver's domain; the standard ones keep theirs
    assert device_cel.matches(f"{attrs}.profile == '1g.10gb'", piece.driver, mig).matches
    assert device_cel.matches("device.attributes['resource.kubernetes.io'].pciBusID.startsWith('0000:')",
                              piece.driver, mig).matches
    assert device_cel.matches(f"cel.bind(a, {attrs}, a.type == 'mig' && a.productName.lowerAscii().contains('a100'))",
                              piece.driver, mig).matches
    # reading an attribute the device lacks is an error, which aborts the allocation: said, never a match
    missing = device_cel.matches(f"{attrs}.index == 0", piece.driver, mig)
    assert not missing.matches and missing.error is not None and "index" in missing.error
    broken = device_cel.matches("device.driver ==", piece.driver, mig)
    assert not broken.matches and broken.error is not None and broken.error.startswith("does not compile")
