"""Tenancy: the label keys tenants select by, who may set them, the checks that say where no one holds them, and what
a namespace's managedFields say about who did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from policy.kube.managed_fields import label_owners
from policy.load import load_policy
from policy.resolved.tenancy import GITOPS, namespace_label_findings, tenancy
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import ClusterGPUPolicy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"

SPEC = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {{name: t}}
spec:
  kubernetesVersion: "{version}"
  nodeClasses:
    - {{name: t4, nodeSelector: {{pool: t4}}, gpu: {{model: T4, count: 1}}, sharing: {{timeSlicing: {{replicas: 4}}}}}}
  tenants:
    - name: prod
      namespaceSelector: {{matchLabels: {{gpu-tier: prod}}}}
      allow: [time-slicing]
    - name: named
      namespaceSelector:
        matchExpressions: [{{key: kubernetes.io/metadata.name, operator: In, values: [ml]}}]
      allow: [time-slicing]
  admission:
    enabled: {enabled}
    tenancy:
{tenancy}
"""


def load(tenancy_: str = "      gitOps: argocd", *, version: str = "1.30", enabled: str = "true") -> Any:
    return load_policy(SPEC.format(version=version, tenancy=tenancy_, enabled=enabled), filename="t.yaml")


TENANCY_CODES = ("tenant-label-keys", "tenant-label-unguarded", "tenancy-gitops-unnamed", "tenancy-manager-too-broad")


def tenancy_findings(result: Any) -> list[Diagnostic]:
    """The findings these checks make (the two tenants may overlap, which tenant-overlap says on its own)."""
    return [d for d in result.diagnostics if d.code in TENANCY_CODES]


def policy_of(result: Any) -> ClusterGPUPolicy:
    assert result.policy is not None, result.diagnostics
    policy: ClusterGPUPolicy = result.policy
    return policy


# ---------------------------------------------------------------- the facts


def test_every_key_a_selector_reads_is_listed_and_all_but_the_namespace_name_are_guarded() -> None:
    facts = tenancy(policy_of(load()).spec)
    assert [(label.key, label.tenants, label.immutable) for label in facts.labels] == [
        ("gpu-tier", ("prod",), False), ("kubernetes.io/metadata.name", ("named",), True)]
    assert facts.guarded == ("gpu-tier",) and facts.guard
    assert facts.labels[0].reads[0].path == ("spec", "tenants", 0, "namespaceSelector", "matchLabels", "gpu-tier")
    assert facts.labels[1].reads[0].path == ("spec", "tenants", 1, "namespaceSelector", "matchExpressions", 0, "key")


@pytest.mark.parametrize(("tool", "username", "field_managers"), [
    ("argocd", "system:serviceaccount:argocd:argocd-application-controller",
     ("argocd-application-controller", "argocd-controller")),
    ("flux", "system:serviceaccount:flux-system:kustomize-controller", ("kustomize-controller",)),
])
def test_the_gitops_tool_named_is_a_manager_beside_system_masters(tool: str, username: str,
                                                                  field_managers: tuple[str, ...]) -> None:
    facts = tenancy(policy_of(load(f"      gitOps: {tool}")).spec)
    assert facts.groups == ("system:masters",) and facts.users == (username,)
    assert facts.field_managers == field_managers == GITOPS[tool].field_managers  # type: ignore[index]


def test_listed_managers_join_them_once_each_in_the_order_written() -> None:
    facts = tenancy(policy_of(load(
        "      gitOps: none\n      managers:\n        users: [alice@example.com]\n"
        "        groups: [platform-admins, system:masters]\n"
        "        serviceAccounts:\n"
        "        - {namespace: openshift-gitops, name: openshift-gitops-argocd-application-controller}\n"
        "        fieldManagers: [kubectl-label]")).spec)
    assert facts.users == ("system:serviceaccount:openshift-gitops:openshift-gitops-argocd-application-controller",
                           "alice@example.com")
    assert facts.groups == ("system:masters", "platform-admins")
    assert facts.field_managers == ("kubectl-label",)
    assert facts.describe_managers() == ("groups system:masters, platform-admins; service account "
                                         "openshift-gitops/openshift-gitops-argocd-application-controller; user "
                                         "alice@example.com")


def test_a_service_account_outside_the_api_servers_names_is_refused_where_it_is_written() -> None:
    result = load("      managers:\n        serviceAccounts: [{namespace: Argo_CD, name: x}]")
    (error,) = [d for d in result.diagnostics if d.severity == "error"]
    assert error.code == "invalid-value"
    assert error.path == ("spec", "admission", "tenancy", "managers", "serviceAccounts", 0, "namespace")
    assert error.span is not None and error.span.line == 20


def test_the_example_clusters_name_their_gitops_tool() -> None:
    tools = {}
    for name in ("mixed-fleet", "vgpu-platform", "h20-mig"):
        result = load_policy((EXAMPLES / name / "cluster.yaml").read_text(encoding="utf-8"), filename=name)
        facts = tenancy(policy_of(result).spec)
        assert facts.guard and facts.guarded == ("gpu-tier",)
        tools[name] = facts.git_ops
    assert tools == {"mixed-fleet": "argocd", "vgpu-platform": "flux", "h20-mig": "flux"}


# ---------------------------------------------------------------- the checks


def test_below_1_30_each_read_of_a_mutable_key_warns_at_the_key_and_the_name_does_not() -> None:
    result = load(version="1.29")
    (warning,) = tenancy_findings(result)
    assert warning.severity == "warning"
    assert warning.path == ("spec", "tenants", 0, "namespaceSelector", "matchLabels", "gpu-tier")
    assert warning.span is not None and (warning.span.line, warning.span.column) == (10, 41)
    assert "needs Kubernetes 1.30 (kubernetesVersion is 1.29)" in warning.message
    assert "kubernetes.io/metadata.name" in warning.hint and "1.30" in warning.hint
    assert [d.code for d in result.notes] == ["tenant-label-keys"]
    assert "nothing stops whoever may update a namespace from setting gpu-tier" in result.notes[0].message


def test_from_1_30_the_guard_holds_the_key_and_nothing_warns() -> None:
    result = load()
    assert result.ok and tenancy_findings(result) == []


def test_a_guard_with_no_gitops_tool_and_no_manager_warns_that_gitops_would_be_denied() -> None:
    result = load("      managers: {}")
    (warning,) = tenancy_findings(result)
    assert (warning.code, warning.severity, warning.path) == ("tenancy-gitops-unnamed", "warning",
                                                              ("spec", "admission", "tenancy"))
    assert "only group system:masters may add, change or remove a guarded label" in warning.message
    assert "gitOps: argocd or flux" in warning.hint and "gitOps: none" in warning.hint
    for settled in ("      gitOps: none", "      managers: {groups: [platform-admins]}"):
        assert tenancy_findings(load(settled)) == [], settled


@pytest.mark.parametrize(("field", "value", "index"), [
    ("groups", "[admins, system:authenticated]", 1),
    ("groups", "[system:serviceaccounts]", 0),
    ("groups", "[system:unauthenticated]", 0),
    ("users", "[system:anonymous]", 0),
])
def test_a_manager_naming_everyone_of_a_kind_is_an_error_at_the_entry(field: str, value: str, index: int) -> None:
    result = load(f"      gitOps: flux\n      managers:\n        {field}: {value}")
    (error,) = [d for d in result.diagnostics if d.severity == "error"]
    assert error.code == "tenancy-manager-too-broad"
    assert error.path == ("spec", "admission", "tenancy", "managers", field, index)
    assert error.span is not None and error.span.line == 21
    assert error.hint


def test_a_namespaced_service_account_group_is_a_legitimate_manager() -> None:
    assert tenancy_findings(load("      managers: {groups: ['system:serviceaccounts:platform']}")) == []


def test_with_admission_off_nothing_is_guarded_or_warned() -> None:
    result = load(version="1.29", enabled="false")
    assert tenancy_findings(result) == []
    assert "admission is off" in result.notes[0].message


def test_the_note_lists_the_keys_their_tenants_and_the_managers() -> None:
    (note,) = load().notes
    assert (note.code, note.severity, note.path) == ("tenant-label-keys", "info", ("spec", "tenants"))
    assert note.message == (
        "tenants select namespaces by gpu-tier (tenant prod), kubernetes.io/metadata.name (tenant named); the API "
        "server sets kubernetes.io/metadata.name to each namespace's name, so it needs no guard, but whoever may "
        "create namespaces may create one of a name a tenant lists; the ValidatingAdmissionPolicy "
        "gpupolicy-tenant-labels.gpupolicy.dev lets only these managers add, change or remove gpu-tier: group "
        "system:masters; service account argocd/argocd-application-controller")
    assert note.span is not None and note.span.line == 8


def test_a_spec_without_tenants_has_no_note() -> None:
    text = (EXAMPLES / "tke-l20-t4" / "cluster.yaml").read_text(encoding="utf-8")
    assert load_policy(text, filename="tke").notes == ()


# ---------------------------------------------------------------- managedFields


def entry(manager: str, *keys: str, operation: str = "Update") -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "apiVersion": "v1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in keys}}}}


def namespace(labels: dict[str, str], *entries: dict[str, Any] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "team-a", "labels": labels}
    if entries != (None,):
        meta["managedFields"] = list(entries)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def test_label_owners_reads_fields_v1_and_tells_none_recorded_from_nothing_known() -> None:
    meta = namespace({}, entry("argocd-controller", "team", "gpu-tier", operation="Apply"),
                     entry("kubectl-label", "gpu-tier"), {"manager": "x"}, "junk")["metadata"]  # type: ignore[arg-type]
    assert label_owners(meta) == {"team": ("argocd-controller",), "gpu-tier": ("argocd-controller", "kubectl-label")}
    assert label_owners({"name": "n"}) is None
    assert label_owners({"managedFields": []}) == {}


def findings(obj: dict[str, Any], tenancy_: str = "      gitOps: argocd") -> list[Diagnostic]:
    return list(namespace_label_findings(tenancy(policy_of(load(tenancy_)).spec), obj))


def test_a_tenant_label_set_by_kubectl_is_reported_at_the_label_with_its_tenant() -> None:
    (found,) = findings(namespace({"gpu-tier": "prod", "team": "a"}, entry("argocd-controller", "team"),
                                  entry("kubectl-label", "gpu-tier")))
    assert (found.code, found.severity, found.path) == ("tenant-label-set-by-non-manager", "warning",
                                                        ("metadata", "labels", "gpu-tier"))
    assert found.message.startswith("Namespace team-a: its label gpu-tier=prod, which puts it in tenant prod, was set "
                                    "by field manager kubectl-label (metadata.managedFields)")
    assert "admission.tenancy.managers.fieldManagers" in found.hint


def test_labels_the_gitops_tool_or_a_listed_field_manager_set_and_unguarded_keys_are_not_reported() -> None:
    assert findings(namespace({"gpu-tier": "prod"}, entry("argocd-controller", "gpu-tier"))) == []
    assert findings(namespace({"gpu-tier": "prod", "team": "a"}, entry("kubectl-label", "team"))) == []
    assert findings(namespace({"gpu-tier": "prod"}, entry("kubectl-label", "gpu-tier")),
                    "      gitOps: argocd\n      managers: {fieldManagers: [kubectl-label]}") == []
    # kubectl get without --show-managed-fields: nothing is known, so nothing is said.
    assert findings(namespace({"gpu-tier": "prod"}, None)) == []


def test_a_label_shared_by_the_tool_and_someone_else_is_reported_for_the_other() -> None:
    (found,) = findings(namespace({"gpu-tier": "staging"}, entry("argocd-controller", "gpu-tier", operation="Apply"),
                                  entry("kubectl-edit", "gpu-tier")))
    assert "field manager kubectl-edit" in found.message
    assert "gpu-tier=staging, which puts it in no tenant (admission.defaultAllow)" in found.message
