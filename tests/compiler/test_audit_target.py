"""compiler/targets/audit.py: the in-cluster audit's CronJob, least RBAC and spec ConfigMap, compiled when
spec.audit.enabled (mixed-fleet enables it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from test_admission_manifests import restricted_violations

from compiler import compile_policy
from compiler.targets import audit, workload_kinds
from policy.audit import scan
from policy.load import load_policy
from policy.resolved.offers import build_admission_policy
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]


def audit_files(policy: ClusterGPUPolicy) -> dict[str, Any]:
    tree = compile_policy(policy)
    return {path.removeprefix("audit/"): yaml.safe_load(data) for path, data in tree.items()
            if path.startswith("audit/")}


def test_an_example_without_an_audit_section_compiles_no_audit(example_policy: Load) -> None:
    assert audit_files(example_policy("tke-l20-t4")) == {}


def test_mixed_fleet_compiles_the_audit_as_a_kustomize_component(example_policy: Load) -> None:
    policy = example_policy("mixed-fleet")
    files = audit_files(policy)
    assert sorted(files) == ["clusterrole.yaml", "clusterrolebinding.yaml", "configmap.yaml", "cronjob.yaml",
                             "kustomization.yaml", "serviceaccount.yaml"]
    assert files["kustomization.yaml"]["resources"] == sorted(set(files) - {"kustomization.yaml"})
    root = yaml.safe_load(compile_policy(policy)["kustomization.yaml"])
    assert "audit" in root["resources"]


def test_the_cronjob_runs_the_same_audit_one_run_at_a_time_under_pod_security_restricted(
        example_policy: Load) -> None:
    cron = audit_files(example_policy("mixed-fleet"))["cronjob.yaml"]
    spec = cron["spec"]
    assert (spec["schedule"], spec["concurrencyPolicy"], spec["startingDeadlineSeconds"]) == (
        "17 * * * *", "Forbid", 300)
    assert (spec["successfulJobsHistoryLimit"], spec["failedJobsHistoryLimit"]) == (3, 3)
    job = spec["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] == 900
    pod = job["template"]["spec"]
    assert restricted_violations(pod) == []
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["image"] == "ghcr.io/gpupolicy/gpupolicy-webhook:0.1.0"  # the webhook's
    assert container["args"] == ["cluster", "audit", "-p", "/etc/gpupolicy/audit/cluster.yaml", "--write-reports",
                                 "-O", "policy-report", "--max-results", "500", "--request-timeout", "30"]
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    assert pod["serviceAccountName"] == "gpupolicy-audit" and cron["metadata"]["namespace"] == "gpupolicy-system"


def test_the_clusterrole_lists_exactly_what_the_live_audit_reads_and_writes_only_reports(
        example_policy: Load) -> None:
    policy = example_policy("mixed-fleet")
    rules = audit_files(policy)["clusterrole.yaml"]["rules"]
    *reads, writes = rules
    assert all(r["verbs"] == ["list"] for r in reads)
    granted = {(group, resource) for r in reads for group in r["apiGroups"] for resource in r["resources"]}
    # the same list the live audit reads: the built-in kinds and the policy's workload-kinds table
    watched = scan.watched_kinds(build_admission_policy(resolve(policy)).workload_kinds)
    assert granted == {(w.group, w.resource) for w in watched}
    assert ("", "pods") in granted and ("ray.io", "rayclusters") in granted and ("", "secrets") not in granted
    assert writes == {"apiGroups": ["wgpolicyk8s.io"], "resources": ["clusterpolicyreports", "policyreports"],
                      "verbs": ["create", "delete", "list", "patch"]}
    assert len(workload_kinds.kinds_of(policy)) > 0


def test_the_spec_configmap_loads_to_the_same_policy(example_policy: Load) -> None:
    policy = example_policy("mixed-fleet")
    text = audit_files(policy)["configmap.yaml"]["data"]["cluster.yaml"]
    again = load_policy(text, filename="cluster.yaml")
    assert again.ok and again.policy == policy


@pytest.mark.parametrize("name", ["dra-mixed", "h20-mig", "tke-l20-t4", "vgpu-platform"])
def test_every_examples_spec_written_back_loads_to_the_same_policy(example_policy: Load, name: str) -> None:
    policy = example_policy(name)
    assert load_policy(audit.spec_text(policy), filename="cluster.yaml").policy == policy


def test_the_spec_settings_reach_the_cronjob(example_policy: Load) -> None:
    policy = example_policy("mixed-fleet", ('    schedule: "17 * * * *"\n', (
        '    schedule: "@daily"\n    format: openreports\n    failOnly: true\n    maxResults: 50\n'
        '    namespace: gpupolicy-audit\n    image: registry.example.com/gpupolicy:1.2.3\n'
        '    resources: {requests: {cpu: 200m, memory: 1Gi}, limits: {cpu: "2", memory: 2Gi}}\n')))
    files = audit_files(policy)
    cron = files["cronjob.yaml"]
    [container] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert cron["spec"]["schedule"] == "@daily" and cron["metadata"]["namespace"] == "gpupolicy-audit"
    assert container["image"] == "registry.example.com/gpupolicy:1.2.3"
    assert container["args"][-6:] == ["openreports", "--max-results", "50", "--request-timeout", "30", "--fail-only"]
    assert container["resources"] == {"requests": {"cpu": "200m", "memory": "1Gi"},
                                      "limits": {"cpu": "2", "memory": "2Gi"}}
    assert files["clusterrole.yaml"]["rules"][-1]["resources"] == ["clusterreports", "reports"]
    assert files["clusterrolebinding.yaml"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpupolicy-audit", "namespace": "gpupolicy-audit"}]
    namespaces = {yaml.safe_load(data)["metadata"]["name"] for path, data in compile_policy(policy).items()
                  if path.startswith("namespaces/") and not path.endswith("kustomization.yaml")}
    assert "gpupolicy-audit" in namespaces
