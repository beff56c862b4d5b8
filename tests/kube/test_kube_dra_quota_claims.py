"""What the API server itself enforces of examples/clusters/dra-mixed's DRA pool, beyond the templates
(test_kube_dra_claims.py): the resourceclaims ValidatingAdmissionPolicy on real ResourceClaims, the compiled
ResourceQuotas refusing a claim of a DeviceClass the namespace's tenant may not use, and the webhook's claim entries'
matchConditions (CLAIM_CONDITIONS) deciding which objects are sent. All requests are dry runs.

Two servers: one with the whole dra/ directory (policies, quotas, DeviceClasses), and one without the claims'
policies, so that what refuses a claim there is the quota alone (validating admission runs the policies and
webhooks before the ResourceQuota plugin, which is among kube-apiserver's default admission plugins and on in the
test server: only ServiceAccount is disabled, tests/kube_api.py)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kube_api import KubeAPI, running_api_server
from kube_cases import EXAMPLES, documents, ensure_namespace, poll

pytestmark = [pytest.mark.kube_api, pytest.mark.slow]

DRA = EXAMPLES / "dra-mixed" / "out" / "dra"
H100 = "h100-train.exclusive.gpupolicy.dev"
MIG = "a100-mig.1g.10gb.gpupolicy.dev"
NAMESPACES = ("inference", "research", "sandbox", "training")
#: The API server refuses adminAccess outside namespaces with this label (k8s.io/api resource/v1 types.go
#: DRAAdminNamespaceLabelKey) before any admission plugin sees the claim: training carries it so the policy decides.
ADMIN_LABEL = {"resource.kubernetes.io/admin-access": "true"}


def claim(device_class: str, namespace: str, **exactly: Any) -> dict[str, Any]:
    """A ResourceClaim of one request on the class (types.go ExactDeviceRequest), as a user writes it."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class,
                                                                          **exactly}}]}}}


def send(api: KubeAPI, obj: dict[str, Any]) -> Any:
    kind = {"ResourceClaim": "resourceclaims", "Pod": "pods"}[obj["kind"]]
    group = "/apis/resource.k8s.io/v1" if kind == "resourceclaims" else "/api/v1"
    return api.request("POST", f"{group}/namespaces/{obj['metadata']['namespace']}/{kind}?dryRun=All", obj)


def dra_objects(*, policies: bool) -> list[dict[str, Any]]:
    found = [o for o in documents(sorted(DRA.glob("*.yaml"))) if o["kind"] != "Kustomization"]
    return [o for o in found if policies or not o["kind"].startswith("ValidatingAdmissionPolicy")]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    with running_api_server(tmp_path_factory.mktemp("dra-claims-vap")) as running:
        for namespace in NAMESPACES:
            ensure_namespace(running, namespace, ADMIN_LABEL if namespace == "training" else {})
        running.kubectl("apply", "--server-side", "--field-manager=gpupolicy", "-f", "-",
                        input=yaml.safe_dump_all(dra_objects(policies=True), sort_keys=True))
        poll(lambda: True if send(running, claim("gpu.nvidia.com", "research")).status == 403 else None,
             what="the claims' policies to take effect")
        yield running


# --- the resourceclaims policy on ResourceClaims ----------------------------------------------------------------


def test_a_claim_of_a_class_the_tenant_may_use_is_admitted(api: KubeAPI) -> None:
    answer = send(api, claim(H100, "research"))
    assert answer.status == 201, answer.body
    answer = send(api, claim(MIG, "inference", count=7))
    assert answer.status == 201, answer.body


@pytest.mark.parametrize(("namespace", "device_class", "exactly"), [
    ("sandbox", H100, {}),  # dev may use l4-dev's time-slicing only
    ("research", MIG, {}),  # research may not use MIG
    ("research", "gpu.nvidia.com", {}),  # NVIDIA's own class: every GPU of the driver, no sharing config
    ("training", H100, {"adminAccess": True}),
    ("research", H100, {"allocationMode": "All"}),
    ("research", H100, {"count": 9}),  # one node holds 8 H100s
], ids=["forbidden-class", "forbidden-mig", "nvidia-class", "admin-access", "allocation-all", "count-above-node"])
def test_a_claim_the_rules_forbid_is_denied_by_the_policy(api: KubeAPI, namespace: str, device_class: str,
                                                          exactly: dict[str, Any]) -> None:
    answer = send(api, claim(device_class, namespace, **exactly))
    assert answer.status == 403, answer.body
    message = answer.body["message"]
    assert "resourceclaims.gpupolicy-claims.gpupolicy.dev" in message and "[dra-class-denied] ResourceClaim probe" \
        in message, message


def test_a_first_available_subrequest_of_a_forbidden_class_is_denied(api: KubeAPI) -> None:
    obj = claim(H100, "research")
    obj["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "h100", "deviceClassName": H100}, {"name": "mig", "deviceClassName": MIG}]}]
    answer = send(api, obj)
    assert answer.status == 403 and "[dra-class-denied]" in answer.body["message"], answer.body


# --- the quota alone ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    """The DeviceClasses and quotas of the tree, no claims' policies, and each quota's status as the resource quota
    controller writes it (none runs here; without status.hard the ResourceQuota plugin enforces nothing)."""
    with running_api_server(tmp_path_factory.mktemp("dra-quota")) as running:
        for namespace in NAMESPACES:
            ensure_namespace(running, namespace, {})
        objects = dra_objects(policies=False)
        running.kubectl("apply", "--server-side", "--field-manager=gpupolicy", "-f", "-",
                        input=yaml.safe_dump_all(objects, sort_keys=True))
        for quota in (o for o in objects if o["kind"] == "ResourceQuota"):
            name, namespace = quota["metadata"]["name"], quota["metadata"]["namespace"]
            path = f"/api/v1/namespaces/{namespace}/resourcequotas/{name}"
            stored = running.request("GET", path).body
            stored["status"] = {"hard": stored["spec"]["hard"], "used": {k: "0" for k in stored["spec"]["hard"]}}
            answer = running.request("PUT", f"{path}/status", stored)
            assert answer.status == 200, answer.body
        # the quota plugin reads quotas through an informer: wait until the forbidden class is refused
        poll(lambda: True if send(running, claim(H100, "sandbox")).status == 403 else None,
             what="the quotas to take effect")
        yield running


def test_the_quota_refuses_a_claim_of_a_class_the_tenant_may_not_use(bare: KubeAPI) -> None:
    answer = send(bare, claim(H100, "sandbox"))
    assert answer.status == 403, answer.body
    message = answer.body["message"]
    assert "exceeded quota: gpupolicy-dra" in message, message
    assert f"{H100}.deviceclass.resource.k8s.io/devices=0" in message, message


def test_the_quota_admits_a_claim_of_an_allowed_class_within_the_pool(bare: KubeAPI) -> None:
    assert send(bare, claim(H100, "research")).status == 201
    # 16 H100s in the pool: one claim of 16 fits the quota (the policy, absent here, would refuse more than 8)
    assert send(bare, claim(H100, "research", count=16)).status == 201
    answer = send(bare, claim(H100, "research", count=17))
    assert answer.status == 403 and "exceeded quota" in answer.body["message"], answer.body


# --- the webhook's claim entries: which objects the API server sends ----------------------------------------------


def test_the_claim_entries_send_claims_and_pods_naming_claims_and_nothing_else(bare: KubeAPI) -> None:
    """The compiled claims.* entries pointed at a port nothing listens on, failurePolicy Fail: what the API server
    sends is refused ("failed calling webhook"), what their rules and CLAIM_CONDITIONS leave out is admitted."""
    [config] = [o for o in documents(sorted((EXAMPLES / "dra-mixed" / "out" / "admission").glob("*.yaml")))
                if o["kind"] == "ValidatingWebhookConfiguration"]
    entries = [copy.deepcopy(w) for w in config["webhooks"] if w["name"].startswith("claims.")]
    for entry in entries:
        entry["clientConfig"] = {"url": "https://127.0.0.1:9/validate"}  # the discard port: refused at once
        entry["failurePolicy"], entry["timeoutSeconds"] = "Fail", 2
    probe = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
             "metadata": {"name": "gpupolicy-claims-probe"}, "webhooks": entries}
    path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    assert bare.request("POST", path, probe).status == 201
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "research"},
             "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    naming = copy.deepcopy(plain)
    naming["metadata"]["name"] = "naming"
    naming["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "h100-train"}]
    naming["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    try:
        poll(lambda: True if send(bare, claim(H100, "research")).status != 201 else None,
             what="the probe webhook configuration to take effect")
        refused = send(bare, claim(H100, "research"))
        calling = 'failed calling webhook "claims.research.tenants.gpupolicy.dev"'
        assert refused.status >= 400 and calling in refused.body["message"], refused.body
        sent = send(bare, naming)
        assert sent.status >= 400 and calling in sent.body["message"], sent.body
        # a pod naming no claim is not the claim entries' (CLAIM_CONDITIONS): it is admitted without a call
        admitted = send(bare, plain)
        assert admitted.status == 201, admitted.body
    finally:
        assert bare.request("DELETE", f"{path}/gpupolicy-claims-probe").status == 200


# --- the recorded ResourceSlices stored by the API server, and verify reading them live ---------------------------

SLICES = EXAMPLES.parent.parent / "tests" / "fixtures" / "dra-slices"


def test_the_recorded_slices_are_stored_as_written_and_verify_reads_them_live(
        bare: KubeAPI, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from cli.main import main
    from policy.kube.lists import list_items

    docs = [d for name in ("nodes.yaml", "whole-gpus.yaml", "mig-devices.yaml")
            for d in yaml.safe_load_all((SLICES / name).read_text(encoding="utf-8"))]
    objects = list(list_items(docs))
    nodes = [o for o in objects if o["kind"] == "Node"]
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    for node in nodes:
        meta = {k: v for k, v in node["metadata"].items() if k != "creationTimestamp"}
        answer = bare.request("POST", "/api/v1/nodes", {**node, "metadata": meta})
        assert answer.status == 201, answer.body
    for piece in slices:
        # the server names and owns what it stores: the recorded uid and resourceVersion are the recording's
        meta = {k: v for k, v in piece["metadata"].items()
                if k not in ("uid", "resourceVersion", "creationTimestamp", "ownerReferences")}
        answer = bare.request("POST", "/apis/resource.k8s.io/v1/resourceslices?fieldValidation=Strict",
                              {**piece, "metadata": meta})
        assert answer.status == 201, answer.body
        assert answer.body["spec"] == piece["spec"], "the API server changed or dropped a field of the recording"
    code = main(["cluster", "verify", "-p", str(EXAMPLES / "dra-mixed" / "cluster.yaml"), "--kubeconfig",
                 str(bare.kubeconfig), "-O", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1  # the device-plugin pool and the tree's DaemonSets are not there
    assert [f for f in report["findings"] if f["code"].startswith("dra-")] == []
    advertised = {c["name"]: c["advertised"] for c in report["classes"]}
    assert advertised["a100-mig"] == {MIG: 56} and advertised["h100-train"] == {H100: 16}
