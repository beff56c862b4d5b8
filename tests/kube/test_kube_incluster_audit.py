"""The in-cluster audit against a real kube-apiserver: mixed-fleet's compiled audit/ (ServiceAccount, ClusterRole,
binding, spec ConfigMap, CronJob) applied with strict validation, then the CronJob's command run with that
ServiceAccount's own token (minted by the API server's TokenRequest, as the kubelet mounts it in the pod) over the
mixed-fleet dump stored there: it writes the PolicyReports by server-side apply, a second run under a changed policy
replaces them and deletes the one of a namespace left without GPU workloads, and the token is refused everything
else. Also the live audit's reads: a 403 names the permission missing, finished pods are left out at the list.

No controller manager runs, so the CronJob never starts a Job: the test runs its container's arguments itself.
The server is this module's own: a live audit lists every namespace.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_api import KubeAPI, running_api_server, write_kubeconfig
from kube_cases import create

from cli.main import main

pytestmark = [pytest.mark.kube_api, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "audit"))
from test_audit_scan import NO_MPS  # noqa: E402
from test_kube_audit_reports import audited_server  # noqa: E402

TREE = ROOT / "examples" / "clusters" / "mixed-fleet" / "out"
NAMESPACE, ACCOUNT = "gpupolicy-system", "gpupolicy-audit"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
POLR = "/apis/wgpolicyk8s.io/v1alpha2"
MANAGER = "gpupolicy-audit"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    with audited_server(tmp_path_factory.mktemp("incluster-audit")) as server:
        yield server


@contextlib.contextmanager
def granted(api: KubeAPI, name: str, rules: list[dict[str, Any]]) -> Iterator[Path]:
    """A kubeconfig of tenant-person (dana@example.com) bound to a ClusterRole of ``rules`` while it lasts."""
    objects = [({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
                 "rules": rules}, f"{RBAC}/clusterroles"),
               ({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": name},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                 "subjects": [{"kind": "User", "name": "dana@example.com"}]}, f"{RBAC}/clusterrolebindings")]
    for obj, path in objects:
        assert api.request("POST", path, obj).status == 201
    try:
        yield api.kubeconfig_of("tenant-person")
    finally:
        for _, path in reversed(objects):
            assert api.request("DELETE", f"{path}/{name}").status == 200


@pytest.fixture(scope="module")
def applied(api: KubeAPI) -> list[dict[str, Any]]:
    """The tree's namespaces/ and audit/, built by kustomize and applied as Argo CD applies them (strict)."""
    built: list[dict[str, Any]] = []
    for part in ("namespaces", "audit"):
        text = api.kubectl("kustomize", str(TREE / part)).stdout
        api.kubectl("apply", "--server-side", "--field-manager=argocd-controller", "--validate=strict", "-f", "-",
                    input=text)
        built += [d for d in yaml.safe_load_all(text) if d]
    return built


@pytest.fixture(scope="module")
def audit_identity(api: KubeAPI, applied: list[dict[str, Any]]) -> Path:
    """A kubeconfig holding the audit ServiceAccount's own token (TokenRequest), as its pod would have."""
    token = api.kubectl("create", "token", ACCOUNT, "-n", NAMESPACE, "--duration=1h").stdout.strip()
    api.tokens["audit"] = token
    path = api.directory / "kubeconfig-audit"
    write_kubeconfig(path, api.url, api.ca.pem, token)
    return path


def mounted_spec(api: KubeAPI, applied: list[dict[str, Any]]) -> str:
    """The spec the CronJob mounts: the ConfigMap its volume names, as stored."""
    cron = next(o for o in applied if o["kind"] == "CronJob")
    name = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    stored = api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name}").body
    return str(stored["data"]["cluster.yaml"])


def cron_args(applied: list[dict[str, Any]], spec: Path) -> list[str]:
    """The CronJob container's arguments, with the spec at a local path instead of the mount."""
    cron = next(o for o in applied if o["kind"] == "CronJob")
    args = list(cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"])
    return [str(spec) if a == "/etc/gpupolicy/audit/cluster.yaml" else a for a in args]


def reports(api: KubeAPI) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, namespace) -> every wg-policy report stored, of any tool."""
    found = {}
    for kind, path in (("PolicyReport", f"{POLR}/policyreports"), ("ClusterPolicyReport",
                                                                   f"{POLR}/clusterpolicyreports")):
        for item in api.request("GET", path).body["items"]:
            if item["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") == "gpupolicy":
                found[kind, item["metadata"].get("namespace", "")] = item
    return found


def test_the_compiled_audit_applies_cleanly_and_stays_as_written(api: KubeAPI, applied: list[dict[str, Any]]) -> None:
    kinds = sorted(o["kind"] for o in applied if o["kind"] != "Namespace")
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "CronJob", "ServiceAccount"]
    cron = next(o for o in applied if o["kind"] == "CronJob")
    stored = api.request("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/cronjobs/{ACCOUNT}").body
    assert stored["spec"]["schedule"] == cron["spec"]["schedule"]
    assert stored["spec"]["jobTemplate"]["spec"]["template"]["spec"]["securityContext"] == (
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["securityContext"])
    # the namespace enforces Pod Security restricted, and the CronJob was admitted there without a warning
    namespace = api.request("GET", f"/api/v1/namespaces/{NAMESPACE}").body
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    again = api.kubectl("apply", "--server-side", "--field-manager=argocd-controller", "--validate=strict",
                        "--dry-run=server", "-f", str(TREE / "audit" / "cronjob.yaml"))
    assert "Warning" not in again.stderr


def test_the_cronjobs_run_writes_the_reports_as_its_service_account(
        api: KubeAPI, applied: list[dict[str, Any]], audit_identity: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(mounted_spec(api, applied), encoding="utf-8")
    assert main([*cron_args(applied, spec), "--kubeconfig", str(audit_identity)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "applied PolicyReport dev-alice/gpupolicy-mixed-fleet: 0 fail, 0 warn, 1 pass",
        "applied PolicyReport prod-search/gpupolicy-mixed-fleet: 0 fail, 0 warn, 1 pass",
        "applied PolicyReport research-nlp/gpupolicy-mixed-fleet: 0 fail, 0 warn, 4 pass",
        "applied ClusterPolicyReport gpupolicy-mixed-fleet: 0 fail, 0 warn, 0 pass",
    ]
    written = reports(api)
    assert sorted(written) == [("ClusterPolicyReport", ""), ("PolicyReport", "dev-alice"),
                               ("PolicyReport", "prod-search"), ("PolicyReport", "research-nlp")]
    for report in written.values():
        assert [m["manager"] for m in report["metadata"]["managedFields"]] == [MANAGER]
        assert report["metadata"]["labels"]["gpupolicy.dev/cluster"] == "mixed-fleet"


def test_a_second_run_under_a_changed_policy_replaces_the_reports_and_deletes_the_stale_one(
        api: KubeAPI, applied: list[dict[str, Any]], audit_identity: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    before = reports(api)
    assert ("PolicyReport", "dev-alice") in before, "runs after the first write"
    # dev-alice's GPU workloads go away (no garbage collector runs: each object is deleted), and research loses MPS
    api.kubectl("delete", "deployments,replicasets,pods", "--all", "-n", "dev-alice", "--wait=false")
    changed = mounted_spec(api, applied)
    policy = yaml.safe_load(changed)
    research = next(t for t in policy["spec"]["tenants"] if t["name"] == "research")
    research["allow"] = [m for m in research["allow"] if m != "mps"]
    assert NO_MPS  # the same change as the audit tests' head policy
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(policy), encoding="utf-8")
    # exit 0 although workloads fail now: the findings are in the reports (a failed Job means a run that broke)
    assert main([*cron_args(applied, spec), "--kubeconfig", str(audit_identity)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "replaced (the policy changed) PolicyReport prod-search/gpupolicy-mixed-fleet: 0 fail, 0 warn, 1 pass",
        "replaced (the policy changed) PolicyReport research-nlp/gpupolicy-mixed-fleet: 4 fail, 0 warn, 0 pass",
        "replaced (the policy changed) ClusterPolicyReport gpupolicy-mixed-fleet: 0 fail, 0 warn, 0 pass",
        "deleted PolicyReport dev-alice/gpupolicy-mixed-fleet: stale (no result there any more)",
    ]
    after = reports(api)
    assert sorted(after) == [("ClusterPolicyReport", ""), ("PolicyReport", "prod-search"),
                             ("PolicyReport", "research-nlp")]
    hashes = {r["metadata"]["labels"]["gpupolicy.dev/policy-hash"] for r in after.values()}
    assert len(hashes) == 1 and hashes.isdisjoint(
        r["metadata"]["labels"]["gpupolicy.dev/policy-hash"] for r in before.values())
    assert after["PolicyReport", "research-nlp"]["summary"]["fail"] == 4


def test_a_report_another_tool_wrote_is_never_touched(
        api: KubeAPI, applied: list[dict[str, Any]], audit_identity: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    theirs = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
              "metadata": {"name": "kyverno-pod-security", "namespace": "dev-alice",
                           "labels": {"app.kubernetes.io/managed-by": "kyverno"}},
              "summary": {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0}}
    assert api.request("POST", f"{POLR}/namespaces/dev-alice/policyreports", theirs).status == 201
    spec = tmp_path / "cluster.yaml"
    spec.write_text(mounted_spec(api, applied), encoding="utf-8")
    assert main([*cron_args(applied, spec), "--kubeconfig", str(audit_identity)]) == 0
    capsys.readouterr()
    kept = api.request("GET", f"{POLR}/namespaces/dev-alice/policyreports/kyverno-pod-security")
    assert kept.status == 200


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/api/v1/namespaces/research-nlp/configmaps",
     {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
    ("DELETE", "/apis/apps/v1/namespaces/research-nlp/deployments/time-slicing-verification", None),
    ("GET", "/api/v1/namespaces/research-nlp/pods", None),  # allowed: list (shown by the write test)
    ("GET", "/api/v1/namespaces/gpupolicy-system/secrets", None),
    ("POST", "/apis/openreports.io/v1alpha1/namespaces/research-nlp/reports",
     {"apiVersion": "openreports.io/v1alpha1", "kind": "Report", "metadata": {"name": "x"}}),
    ("PATCH", f"{RBAC}/clusterroles/gpupolicy-audit", {"rules": []}),
])
def test_the_audit_identity_is_refused_everything_but_its_reads_and_its_reports(
        api: KubeAPI, audit_identity: Path, method: str, path: str, body: Any) -> None:
    answer = api.request(method, path, body, "application/merge-patch+json" if method == "PATCH"
                         else "application/json", identity="audit")
    if path.endswith("/pods"):
        assert answer.status == 200  # list is what it may do
        pod = answer.body["items"][0]["metadata"]["name"]
        answer = api.request("GET", f"/api/v1/namespaces/research-nlp/pods/{pod}", identity="audit")
    assert answer.status == 403, answer.body
    assert 'User "system:serviceaccount:gpupolicy-system:gpupolicy-audit" cannot' in answer.message


# --- the live audit's reads -------------------------------------------------------------------------------------


@pytest.fixture
def without_pods(api: KubeAPI, applied: list[dict[str, Any]]) -> Iterator[Path]:
    """tenant-person granted list on everything the audit reads except pods."""
    role = next(o for o in applied if o["kind"] == "ClusterRole")
    rules = [{**r, "resources": [x for x in r["resources"] if x != "pods"]} for r in role["rules"]
             if "patch" not in r["verbs"]]
    with granted(api, "gpupolicy-test-no-pods", rules) as kubeconfig:
        yield kubeconfig


def test_a_refused_pod_list_names_the_missing_permission(
        without_pods: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text((ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml").read_text(encoding="utf-8"))
    assert main(["cluster", "audit", "-p", str(spec), "--kubeconfig", str(without_pods)]) == 2
    err = capsys.readouterr().err
    assert ('gpupolicy cluster audit: error: the API server refused to list pods (403 Forbidden: pods is forbidden: '
            'User "dana@example.com" cannot list resource "pods" in API group "" at the cluster scope)\n'
            "  hint: grant list on pods: the audit lists ") in err
    assert "--verb=list --resource=" in err and "pods," in err


def test_finished_pods_are_left_out_at_the_list(
        api: KubeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text((ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml").read_text(encoding="utf-8"))

    def objects_read() -> int:
        main(["cluster", "audit", "-p", str(spec), "--kubeconfig", str(api.kubeconfig), "-O", "json"])
        return int(json.loads(capsys.readouterr().out)["objects"])

    before = objects_read()
    for name, phase in (("finished-ok", "Succeeded"), ("finished-bad", "Failed"), ("still-running", None)):
        create(api, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "research-nlp"},
                     "spec": {"containers": [{"name": "main", "image": "busybox",
                                              "resources": {"limits": {"nvidia.com/gpu": 1}}}]}})
        if phase:
            api.kubectl("patch", "pod", name, "-n", "research-nlp", "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": {"phase": phase}}))
    try:
        stored = json.loads(api.kubectl("get", "pods", "-n", "research-nlp", "-o", "json").stdout)["items"]
        assert {p["metadata"]["name"]: p["status"].get("phase") for p in stored}.items() >= {
            ("finished-ok", "Succeeded"), ("finished-bad", "Failed"), ("still-running", "Pending")}
        assert objects_read() == before + 1  # only the pod still to run was listed
    finally:
        api.kubectl("delete", "pod", "finished-ok", "finished-bad", "still-running", "-n", "research-nlp")


def test_server_side_apply_of_a_new_report_needs_create_not_only_patch(
        api: KubeAPI, applied: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Why the ClusterRole grants create: an apply that creates the object is authorized as create."""
    role = next(o for o in applied if o["kind"] == "ClusterRole")
    rules = [{**r, "verbs": [v for v in r["verbs"] if v != "create"]} for r in role["rules"]]
    api.kubectl("create", "namespace", "fresh-team")
    create(api, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "first", "namespace": "fresh-team"},
                 "spec": {"containers": [{"name": "main", "image": "busybox",
                                          "resources": {"limits": {"nvidia.com/gpu": 1}}}]}})
    spec = tmp_path / "cluster.yaml"
    spec.write_text(mounted_spec(api, applied), encoding="utf-8")
    try:
        with granted(api, "gpupolicy-test-no-create", rules) as kubeconfig:
            assert main([*cron_args(applied, spec), "--kubeconfig", str(kubeconfig)]) == 2
        err = capsys.readouterr().err
        assert ('refused to apply policyreports/gpupolicy-mixed-fleet in namespace fresh-team (403 Forbidden: '
                'policyreports.wgpolicyk8s.io "gpupolicy-mixed-fleet" is forbidden: User "dana@example.com" cannot '
                'create resource "policyreports"') in err
        assert "hint: grant list, create, patch and delete on policyreports.wgpolicyk8s.io," in err
    finally:
        api.kubectl("delete", "pod", "first", "-n", "fresh-team")


def test_a_cluster_without_the_report_crds_is_told_to_install_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text((ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml").read_text(encoding="utf-8"))
    with running_api_server(tmp_path / "bare") as bare:
        assert main(["cluster", "audit", "-p", str(spec), "--write-reports", "--kubeconfig", str(bare.kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "gpupolicy cluster audit: error: the API server does not serve policyreports, clusterpolicyreports "
        "(wgpolicyk8s.io): the report CRDs are not installed\n"
        "  hint: install them (Policy Reporter's and Kyverno's charts install the wg-policy ones; "
        "tests/fixtures/policy-reports pins both kinds), or write the reports the cluster has (-O openreports, "
        "spec.audit.format)\n")
