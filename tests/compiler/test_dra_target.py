"""The DRA target of examples/clusters/dra-mixed: driver values, DeviceClasses, templates, quotas, claim webhooks."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import yaml

from compiler import compile_policy
from compiler.targets import dra
from policy.kube import selectors
from policy.resolved import dra as pool
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]


def tree_objects(policy: ClusterGPUPolicy, prefix: str) -> dict[str, Any]:
    tree = compile_policy(policy)
    return {p: yaml.safe_load(tree[p]) for p in tree if p.startswith(prefix) and not p.endswith("kustomization.yaml")}


def test_the_kubelet_plugin_runs_on_the_dra_classes_nodes_only(example_policy: Load) -> None:
    values = dra.render_values(resolve(example_policy("dra-mixed")))
    terms = values["kubeletPlugin"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    pools = [t["matchExpressions"][0]["values"] for t in terms["nodeSelectorTerms"]]
    assert pools == [["a100-mig"], ["h100-train"], ["l40s-mps"]]  # never l4-dev, the device plugin's
    assert values["featureGates"] == {"MPSSupport": True} and values["gpuResourcesEnabledOverride"] is True
    assert "consumableShares" not in values


def _runs_on(values: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the chart's kubelet-plugin DaemonSet, with these values' affinity, has a pod on a node (terms ORed,
    expressions ANDed, as the DaemonSet controller reads requiredDuringScheduling...)."""
    terms = values["kubeletPlugin"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(selectors.matches([selectors.Requirement(e["key"], e["operator"], frozenset(e.get("values", ())))
                                  for e in term["matchExpressions"]], labels)
               for term in terms["nodeSelectorTerms"])


def test_the_kubelet_plugin_leaves_a_mig_node_while_it_is_partitioned_and_comes_back_after(example_policy: Load) \
        -> None:
    # It lists MIG devices only when it starts: away from the first partition and from every re-partition
    # (state pending), back at success or failed, so the devices it publishes are the ones the node has.
    values = dra.render_values(resolve(example_policy("dra-mixed")))
    state = "nvidia.com/mig.config.state"
    assert not _runs_on(values, {"node-pool": "a100-mig"})  # the MIG manager has not run yet
    assert not _runs_on(values, {"node-pool": "a100-mig", state: "pending"})
    assert _runs_on(values, {"node-pool": "a100-mig", state: "success"})
    assert _runs_on(values, {"node-pool": "a100-mig", state: "failed"})  # as NVIDIA's clients come back
    assert _runs_on(values, {"node-pool": "l40s-mps"})  # no MIG manager on L40S nodes: nothing to wait for
    assert not _runs_on(values, {"node-pool": "l4-dev", state: "success"})  # the device plugin's class


def test_one_device_class_per_class_and_variant_with_the_sharing_in_its_config(example_policy: Load) -> None:
    found = tree_objects(example_policy("dra-mixed"), "dra/deviceclass-")
    by_name = {o["metadata"]["name"]: o["spec"] for o in found.values()}
    assert sorted(by_name) == ["a100-mig.1g.10gb.gpupolicy.dev", "h100-train.exclusive.gpupolicy.dev",
                               "l40s-mps.mps.gpupolicy.dev"]
    mig = by_name["a100-mig.1g.10gb.gpupolicy.dev"]["selectors"][0]["cel"]["expression"]
    assert ".type == 'mig'" in mig and ".profile == '1g.10gb'" in mig and "'NVIDIA-A100-SXM4-80GB'" in mig
    mps = by_name["l40s-mps.mps.gpupolicy.dev"]["config"][0]["opaque"]
    assert mps["driver"] == "gpu.nvidia.com"
    assert mps["parameters"] == pool.opaque_parameters("mps", 4, 46068)
    assert mps["parameters"]["sharing"]["mpsConfig"]["defaultActiveThreadPercentage"] == 25
    assert "config" not in by_name["h100-train.exclusive.gpupolicy.dev"]
    assert all("extendedResourceName" not in spec for spec in by_name.values())  # 1.34 without DRAExtendedResource


def test_templates_only_where_the_tenant_may_claim_and_quotas_of_zero_elsewhere(example_policy: Load) -> None:
    found = tree_objects(example_policy("dra-mixed"), "dra/resource")
    templates = sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in found.values()
                       if o["kind"] == "ResourceClaimTemplate")
    assert templates == [("inference", "a100-mig-1g.10gb"), ("inference", "h100-train"), ("research", "h100-train"),
                         ("research", "l40s-mps"), ("training", "h100-train"), ("training", "l40s-mps")]
    quotas = {o["metadata"]["namespace"]: o["spec"]["hard"] for o in found.values() if o["kind"] == "ResourceQuota"}
    assert quotas["sandbox"] == {f"{c}.deviceclass.resource.k8s.io/devices": "0" for c in (
        "a100-mig.1g.10gb.gpupolicy.dev", "h100-train.exclusive.gpupolicy.dev", "l40s-mps.mps.gpupolicy.dev")}
    assert quotas["inference"]["h100-train.exclusive.gpupolicy.dev.deviceclass.resource.k8s.io/devices"] == "16"
    assert quotas["inference"]["l40s-mps.mps.gpupolicy.dev.deviceclass.resource.k8s.io/devices"] == "0"


def test_extended_resource_names_where_the_version_has_them_and_the_name_is_free(example_policy: Load) -> None:
    policy = example_policy("dra-mixed", ('kubernetesVersion: "1.34"', 'kubernetesVersion: "1.36"'))
    names = {c.name: c.extended_resource_name for c in pool.device_classes(resolve(policy))}
    # l4-dev's device plugin offers nvidia.com/gpu, so the H100s keep the implicit name; MPS is never bridged.
    assert names == {"a100-mig.1g.10gb.gpupolicy.dev": "nvidia.com/mig-1g.10gb",
                     "h100-train.exclusive.gpupolicy.dev": None, "l40s-mps.mps.gpupolicy.dev": None}
    h100 = resolve(policy).by_name()["h100-train"]
    assert [o.resource for o in h100.offers] == [
        "deviceclass.resource.kubernetes.io/h100-train.exclusive.gpupolicy.dev"]


def test_claim_webhook_entries_sit_beside_every_entry_only_with_a_dra_pool(example_policy: Load) -> None:
    found = tree_objects(example_policy("dra-mixed"), "admission/validatingwebhookconfiguration")
    (config,) = found.values()
    names = [w["name"] for w in config["webhooks"]]
    claims = [w for w in config["webhooks"] if w["name"].startswith("claims.")]
    assert len(claims) * 2 == len(names)
    assert {r for w in claims for rule in w["rules"] for r in rule["resources"]} == {
        "resourceclaimtemplates", "resourceclaims", "resourceclaims/status", "pods"}
    plain = tree_objects(example_policy("mixed-fleet"), "admission/validatingwebhookconfiguration")
    assert not any(w["name"].startswith("claims.") for c in plain.values() for w in c["webhooks"])


def test_a_namespace_two_tenants_name_gets_the_templates_and_quota_of_what_both_allow(example_policy: Load) -> None:
    # research also names inference: admission allows there only what prod and research both may use (exclusive
    # H100s), so the tree holds that template alone and a quota of 0 for the rest, whatever the tenants' order
    policy = example_policy("dra-mixed", ("values: [research, training]", "values: [research, training, inference]"))
    found = tree_objects(policy, "dra/resource")
    templates = sorted(o["metadata"]["name"] for o in found.values()
                       if o["kind"] == "ResourceClaimTemplate" and o["metadata"]["namespace"] == "inference")
    assert templates == ["h100-train"]
    [hard] = [o["spec"]["hard"] for o in found.values()
              if o["kind"] == "ResourceQuota" and o["metadata"]["namespace"] == "inference"]
    assert hard["h100-train.exclusive.gpupolicy.dev.deviceclass.resource.k8s.io/devices"] == "16"
    assert hard["a100-mig.1g.10gb.gpupolicy.dev.deviceclass.resource.k8s.io/devices"] == "0"
    assert hard["l40s-mps.mps.gpupolicy.dev.deviceclass.resource.k8s.io/devices"] == "0"


def test_the_report_gives_each_deviceclass_and_tenant_the_slots_the_spec_makes(example_policy: Load) -> None:
    # worked out from examples/clusters/dra-mixed/cluster.yaml by hand: a100-mig is 2 nodes x 4 A100 80GB x 7
    # 1g.10gb devices; h100-train 2 nodes x 8 whole GPUs; l40s-mps 2 nodes x 2 L40S x 4 MPS clients
    tree = compile_policy(example_policy("dra-mixed"))
    report = json.loads(tree["report.json"])["dra"]
    totals = {c["nodeClass"]: (c["devicesPerNode"], c["sharesPerDevice"], c["totalSlots"])
              for c in report["deviceClasses"]}
    assert totals == {"a100-mig": (28, 1, 56), "h100-train": (8, 1, 16), "l40s-mps": (2, 4, 16)}
    slots = {t["name"]: t["slots"] for t in report["tenants"]}
    assert slots == {"prod": 56 + 16, "research": 16 + 16, "dev": 0, "(no tenant)": 0}
    text = tree["REPORT.md"].decode() if isinstance(tree["REPORT.md"], bytes) else tree["REPORT.md"]
    assert "| `l40s-mps.mps.gpupolicy.dev` | l40s-mps | mps | 2 | 4 | 16 | none |" in text
    assert "| prod | `a100-mig.1g.10gb.gpupolicy.dev`, `h100-train.exclusive.gpupolicy.dev` | 72 | inference |" in text


# --- the implicit extended resources: offered to pods only where Kubernetes maps them to claims -------------------

H100_IMPLICIT = "deviceclass.resource.kubernetes.io/h100-train.exclusive.gpupolicy.dev"


def _mig_pod() -> dict[str, Any]:
    """A pod of the device plugin's world asking for a MIG device of the DRA class, in prod's namespace."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer", "namespace": "inference"},
            "spec": {"nodeSelector": {"node-pool": "a100-mig"},
                     "containers": [{"name": "c", "image": "i",
                                     "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]}}


def _offered(policy: ClusterGPUPolicy) -> dict[str, list[str]]:
    from policy.resolved.offers import build_admission_policy

    return {c.name: [o.resource for o in c.offers] for c in build_admission_policy(policy).classes}


def test_without_the_bridge_no_pod_is_offered_a_dra_class_and_the_report_names_its_device_classes(
        example_policy: Load) -> None:
    from policy.admission.engine import Engine
    from policy.resolved.offers import build_admission_policy

    policy = example_policy("dra-mixed")  # Kubernetes 1.34, DRAExtendedResource not listed
    assert _offered(policy) == {"l4-dev": ["nvidia.com/gpu"], "h100-train": [], "a100-mig": [], "l40s-mps": []}
    decision = Engine(build_admission_policy(policy)).evaluate(_mig_pod(), tenants=("prod",))
    assert not decision.allowed
    [finding] = decision.diagnostics
    assert finding.code == "gpu-request-unsatisfiable"
    assert ("a100-mig: offers no resource a pod can ask for (its GPUs are claimed through DRA), not "
            "nvidia.com/mig-1g.10gb") in finding.message
    tree = compile_policy(policy)
    text = tree["REPORT.md"].decode()
    assert "deviceclass.resource.kubernetes.io/" not in text
    assert "| DeviceClass `h100-train.exclusive.gpupolicy.dev` (claims) | 0 | 16 |" in text
    totals = json.loads(tree["report.json"])["totals"]
    assert totals["slotsAfter"] == 104 and totals["slotsAfterByResource"] == {"nvidia.com/gpu": 16}
    assert totals["claimSlotsByDeviceClass"]["l40s-mps.mps.gpupolicy.dev"] == 16
    vap = tree["admission/validatingadmissionpolicy-gpupolicy-pods-deny.gpupolicy.dev.yaml"].decode()
    assert "deviceclass.resource.kubernetes.io/" not in vap and "nvidia.com/mig-1g.10gb" not in vap


def test_with_the_bridge_pods_are_offered_the_resources_kubernetes_maps_to_claims(example_policy: Load) -> None:
    from policy.admission.engine import Engine
    from policy.resolved.offers import build_admission_policy

    for old, new in (('kubernetesVersion: "1.34"', 'kubernetesVersion: "1.36"'),
                     ("  dra:\n    version: v0.4.1", "  dra:\n    version: v0.4.1\n    kubernetesFeatureGates: "
                                                     "[DRAExtendedResource]")):
        policy = example_policy("dra-mixed", (old, new))
        offered = _offered(policy)
        assert (offered["h100-train"], offered["a100-mig"]) == ([H100_IMPLICIT], ["nvidia.com/mig-1g.10gb"])
        decision = Engine(build_admission_policy(policy)).evaluate(_mig_pod(), tenants=("prod",))
        assert decision.allowed, decision.message
        tree = compile_policy(policy)
        text = tree["REPORT.md"].decode()
        assert f"| `{H100_IMPLICIT}` | 0 | 16 |" in text and "(claims)" not in text
        vap = tree["admission/validatingadmissionpolicy-gpupolicy-pods-deny.gpupolicy.dev.yaml"].decode()
        assert "nvidia.com/mig-1g.10gb" in vap
