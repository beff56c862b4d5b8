"""The tenancy guard: only the tenancy managers may add, change or remove the namespace labels tenants select by.

Its CEL is evaluated the way the API server runs a ValidatingAdmissionPolicy (tests/cel_vap.py): matchConditions
first (a false one skips the policy), then the variables and the validation with its message."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cel_cost
import cel_vap
import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import compile_policy
from compiler.targets import tenancy_guard
from compiler.targets.admission_policy_cost import PER_CALL_LIMIT, POLICY_BUDGET, PolicyCost
from policy.admission.engine import Engine
from policy.load import load_policy
from policy.resolved.offers import build_admission_policy
from policy.resolved.resolve import resolve
from policy.resolved.tenancy import tenancy
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
Obj = dict[str, Any]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
ARGO = {"username": "system:serviceaccount:argocd:argocd-application-controller",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:argocd", "system:authenticated"]}
ADMIN = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}
SANDBOX_USER = {"username": "dana@example.com", "groups": ["sandbox-devs", "system:authenticated"]}
# A tenant's service account that may update namespaces (a self-service platform's role, or a careless binding).
TENANT_SA = {"username": "system:serviceaccount:team-a:builder",
             "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"]}
NOT_MATCHED = ["not matched"]

SPEC = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {{name: guard}}
spec:
  kubernetesVersion: "{version}"
  nodeClasses:
    - {{name: t4, nodeSelector: {{pool: t4}}, gpu: {{model: T4, count: 1}}, sharing: {{timeSlicing: {{replicas: 4}}}}}}
  tenants:
{tenants}
  admission:
    tenancy: {tenancy}
"""


def spec_of(tenants: str, *, version: str = "1.30", tenancy_: str = "{gitOps: flux}") -> ClusterGPUPolicy:
    result = load_policy(SPEC.format(version=version, tenants=tenants, tenancy=tenancy_), filename="guard.yaml")
    assert result.policy is not None and not [d for d in result.diagnostics if d.severity == "error"], \
        result.diagnostics
    return result.policy


@functools.cache
def example_guard(name: str = "mixed-fleet") -> Obj:
    result = load_policy((EXAMPLES / name / "cluster.yaml").read_text(encoding="utf-8"), filename=name)
    assert result.policy is not None
    found: Obj = yaml.safe_load(compile_policy(result.policy)[tenancy_guard.GUARD_FILE])
    return found


def namespace(labels: dict[str, str] | None, name: str = "team-a") -> Obj:
    """A Namespace as the API server shows it to admission: kubernetes.io/metadata.name is defaulted on decode."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**(labels or {}), "kubernetes.io/metadata.name": name}}}


def judged(guard: Obj, old: Obj | None, new: Obj, user: Obj) -> list[str]:
    """The messages of a CREATE (old None) or UPDATE the guard denies; [] when it admits, NOT_MATCHED when its
    matchConditions keep it off the request."""
    result = cel_vap.evaluate_policy(guard, object=new, old_object=old, operation="CREATE" if old is None else
                                     "UPDATE", user_info=user)
    if not result.matched:
        return NOT_MATCHED
    assert all(d.error is None for d in result.decisions), result.decisions
    return [d.message for d in result.decisions]


# ---------------------------------------------------------------- the acceptance cases (mixed-fleet: gpu-tier)

MANAGERS = "group system:masters; service account argocd/argocd-application-controller"


@pytest.mark.parametrize("user", [SANDBOX_USER, TENANT_SA], ids=["person", "service-account"])
def test_a_non_manager_adding_gpu_tier_prod_to_a_namespace_is_denied_naming_key_tenant_and_managers(user: Obj) -> None:
    (message,) = judged(example_guard(), namespace({"team": "a"}), namespace({"team": "a", "gpu-tier": "prod"}), user)
    assert message == ("[tenant-label-guarded] Namespace team-a: adding gpu-tier=prod would move it from no tenant "
                       "(admission.defaultAllow applies) to tenant prod; only the tenancy managers may add, change "
                       f"or remove gpu-tier ({MANAGERS}; admission.tenancy in the cluster spec)")


def test_a_non_manager_changing_research_to_prod_is_denied() -> None:
    (message,) = judged(example_guard(), namespace({"gpu-tier": "research"}), namespace({"gpu-tier": "prod"}),
                        SANDBOX_USER)
    assert message.startswith("[tenant-label-guarded] Namespace team-a: changing gpu-tier from research to prod "
                              "would move it from tenant research to tenant prod; ")


def test_a_non_manager_removing_the_label_to_fall_to_the_default_modes_is_denied() -> None:
    (message,) = judged(example_guard(), namespace({"gpu-tier": "research"}), namespace({}), SANDBOX_USER)
    assert message.startswith("[tenant-label-guarded] Namespace team-a: removing gpu-tier (it was research) would "
                              "move it from tenant research to no tenant (admission.defaultAllow applies); ")


def test_a_non_manager_creating_a_namespace_with_the_label_is_denied() -> None:
    (message,) = judged(example_guard(), None, namespace({"gpu-tier": "prod"}, name="prod-2"), SANDBOX_USER)
    assert message.startswith("[tenant-label-guarded] Namespace prod-2: adding gpu-tier=prod would put it in "
                              "tenant prod; ")


def test_a_value_change_within_one_tenant_is_denied_too_and_says_the_tenant_stays() -> None:
    # dev and sandbox are both tenant dev today; the next spec may part them, so the value is the platform's.
    (message,) = judged(example_guard(), namespace({"gpu-tier": "dev"}), namespace({"gpu-tier": "sandbox"}),
                        SANDBOX_USER)
    assert "changing gpu-tier from dev to sandbox would keep it in tenant dev;" in message


@pytest.mark.parametrize("user", [ARGO, ADMIN], ids=["gitops-service-account", "system-masters"])
@pytest.mark.parametrize(("old", "new"), [
    ({"team": "a"}, {"team": "a", "gpu-tier": "prod"}),
    ({"gpu-tier": "research"}, {"gpu-tier": "prod"}),
    ({"gpu-tier": "research"}, {}),
    (None, {"gpu-tier": "prod"}),
], ids=["add", "change", "remove", "create"])
def test_a_manager_may_add_change_remove_and_create(user: Obj, old: dict[str, str] | None,
                                                    new: dict[str, str]) -> None:
    guard = example_guard()
    assert judged(guard, None if old is None else namespace(old), namespace(new), user) == NOT_MATCHED
    # The validation holds on its own too: without its matchConditions the policy still admits a manager.
    bare = {**guard, "spec": {**guard["spec"], "matchConditions": []}}
    assert judged(bare, None if old is None else namespace(old), namespace(new), user) == []


@pytest.mark.parametrize(("old", "new"), [
    ({"gpu-tier": "research", "team": "a"}, {"gpu-tier": "research", "team": "b"}),
    ({"gpu-tier": "research"}, {"gpu-tier": "research", "owner": "dana"}),
    ({"gpu-tier": "research", "owner": "dana"}, {"gpu-tier": "research"}),
    (None, {"team": "a"}),
    ({"gpu-tier": "prod"}, {"gpu-tier": "prod"}),
], ids=["change-other", "add-other", "remove-other", "create-without", "no-label-change"])
def test_a_non_manager_changing_only_other_labels_is_never_judged(old: dict[str, str] | None,
                                                                  new: dict[str, str]) -> None:
    assert judged(example_guard(), None if old is None else namespace(old), namespace(new), SANDBOX_USER) == \
        NOT_MATCHED


def test_a_request_without_groups_or_username_is_judged_not_refused_with_an_error() -> None:
    # The API server leaves an empty field out of the request CEL sees: an anonymous-looking user has neither.
    assert judged(example_guard(), namespace({}), namespace({"gpu-tier": "prod"}), {})[0].startswith(
        "[tenant-label-guarded] Namespace team-a: adding gpu-tier=prod")
    assert judged(example_guard(), namespace({}), namespace({"gpu-tier": "prod"}), {"username": "x"}) != []


def test_a_namespace_without_labels_at_all_is_read_as_empty() -> None:
    old = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bare"}}
    new = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bare", "labels": {"gpu-tier": "prod"}}}
    assert judged(example_guard(), old, new, SANDBOX_USER)[0].startswith("[tenant-label-guarded] Namespace bare: ")
    assert judged(example_guard(), new, old, ARGO) == NOT_MATCHED


def test_labels_changed_through_the_status_and_finalize_subresources_are_judged_too() -> None:
    # Their registry strategies reset spec or status, never metadata (pkg/registry/core/namespace/strategy.go).
    (rule,) = example_guard()["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["namespaces", "namespaces/finalize", "namespaces/status"]
    assert rule["operations"] == ["CREATE", "UPDATE"] and rule["apiGroups"] == [""]
    assert example_guard()["spec"]["failurePolicy"] == "Fail"


def test_flux_and_a_listed_group_are_managers_and_argo_is_not_where_flux_applies() -> None:
    guard = example_guard("vgpu-platform")  # gitOps: flux, managers.groups: [platform-admins]
    flux = {"username": "system:serviceaccount:flux-system:kustomize-controller"}
    relabel = (namespace({"gpu-tier": "dev"}), namespace({"gpu-tier": "prod"}))
    assert judged(guard, *relabel, flux) == NOT_MATCHED
    assert judged(guard, *relabel, {"username": "lee", "groups": ["platform-admins"]}) == NOT_MATCHED
    assert judged(guard, *relabel, ARGO) != NOT_MATCHED


# ---------------------------------------------------------------- which specs compile a guard, and how


def test_a_spec_whose_tenants_select_only_by_namespace_name_compiles_no_guard() -> None:
    policy = spec_of("    - {name: a, namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, "
                     "operator: In, values: [team-a, team-b]}]}, allow: [time-slicing]}\n"
                     "    - {name: b, namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: team-c}}, "
                     "allow: [time-slicing]}")
    tree = compile_policy(policy)
    assert tenancy_guard.render_tenancy_guard(resolve(policy)) == []
    assert tenancy_guard.GUARD_FILE not in tree
    assert not [p for p in tree if "tenant-labels" in p]
    report = " ".join(tree["REPORT.md"].decode().split())
    assert "Tenants a, b select namespaces by kubernetes.io/metadata.name, which the API server sets" in report


def test_a_spec_reading_a_mutable_key_beside_the_name_guards_that_key_alone() -> None:
    policy = spec_of("    - {name: a, namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: team-a}}, "
                     "allow: [time-slicing]}\n"
                     "    - {name: b, namespaceSelector: {matchExpressions: [{key: tier, operator: NotIn, "
                     "values: [x]}]}, allow: [time-slicing]}")
    guard, binding = tenancy_guard.render_tenancy_guard(resolve(policy))
    assert guard["spec"]["variables"][2]["expression"].startswith('["tier"].filter(')
    assert binding["spec"] == {"policyName": tenancy_guard.GUARD_NAME, "validationActions": ["Deny"]}
    # NotIn selects a namespace without the key: adding one moves it out of tenant b.
    (message,) = judged(guard, namespace({}, name="team-z"), namespace({"tier": "x"}, name="team-z"), SANDBOX_USER)
    assert "adding tier=x would move it from tenant b to no tenant (admission.defaultAllow applies)" in message
    # team-a is tenant a by name whatever its labels: the guard names both tenants it is in together.
    (message,) = judged(guard, namespace({}), namespace({"tier": "x"}), SANDBOX_USER)
    assert "would move it from tenants a, b together to tenant a;" in message


def test_every_guarded_key_a_request_changes_is_named() -> None:
    policy = spec_of("    - {name: a, namespaceSelector: {matchLabels: {tier: gold}}, allow: [time-slicing]}\n"
                     "    - {name: b, namespaceSelector: {matchLabels: {region: eu}}, allow: [time-slicing]}")
    guard, _ = tenancy_guard.render_tenancy_guard(resolve(policy))
    (message,) = judged(guard, namespace({"tier": "silver", "region": "eu"}),
                        namespace({"tier": "gold", "region": "eu", "x": "y"}), SANDBOX_USER)
    assert "changing tier from silver to gold would move it from tenant b to tenants a, b together;" in message
    (message,) = judged(guard, None, namespace({"tier": "gold", "region": "us"}), SANDBOX_USER)
    assert "adding tier=gold, adding region=us would put it in tenant a;" in message
    assert "may add, change or remove tier, region (" in message


def test_below_1_30_no_guard_is_compiled_and_the_report_says_who_may_move_namespaces() -> None:
    policy = spec_of("    - {name: a, namespaceSelector: {matchLabels: {tier: gold}}, allow: [time-slicing]}",
                     version="1.29")
    assert tenancy_guard.render_tenancy_guard(resolve(policy)) == []
    report = " ".join(compile_policy(policy)["REPORT.md"].decode().split())
    assert ("Tenancy: tenants select namespaces by tier, and nothing in the tree guards it: whoever may update a "
            "namespace (RBAC update or patch on namespaces or namespaces/status) or create one may choose its "
            "tenant. The guard is a ValidatingAdmissionPolicy, which needs Kubernetes 1.30") in report


def test_with_admission_off_no_tenant_is_enforced_and_no_guard_compiled(example_policy: Load) -> None:
    policy = example_policy("mixed-fleet", ("  admission:\n    enforcement: enforce",
                                            "  admission:\n    enabled: false\n    enforcement: enforce"))
    assert tenancy_guard.render_tenancy_guard(resolve(policy)) == []
    assert "Tenancy:" not in compile_policy(policy)["REPORT.md"].decode()


@pytest.mark.parametrize(("mode", "action"), [("enforce", "Deny"), ("warn", "Warn"), ("audit", "Audit")])
def test_the_binding_follows_admission_enforcement_so_a_rollout_can_start_with_warn(example_policy: Load, mode: str,
                                                                                    action: str) -> None:
    policy = example_policy("mixed-fleet", ("    enforcement: enforce", f"    enforcement: {mode}"))
    _, binding = tenancy_guard.render_tenancy_guard(resolve(policy))
    assert binding["spec"]["validationActions"] == [action]


def test_the_report_names_who_may_move_a_namespace_between_tenants(example_policy: Load) -> None:
    report = " ".join(compile_policy(example_policy("mixed-fleet"))["REPORT.md"].decode().split())
    assert ("Tenancy: tenants select namespaces by gpu-tier. Only these identities may add, change or remove it, "
            f"and so move a namespace between tenants: {MANAGERS} ({tenancy_guard.GUARD_FILE}, on every Namespace "
            "CREATE and UPDATE, its status and finalize subresources included). So may whoever can impersonate "
            "them, or delete that policy or its binding (docs/security.md).") in report


@pytest.mark.parametrize("version", ["1.30", "1.31", "1.34"])
def test_the_guard_and_binding_pass_strict_kubernetes_validation_at_each_version(version: str) -> None:
    policy = spec_of("    - {name: a, namespaceSelector: {matchLabels: {tier: gold}}, allow: [time-slicing]}",
                     version=version)
    for obj in tenancy_guard.render_tenancy_guard(resolve(policy)):
        kubernetes_validate.validate(obj, version, strict=True)


# ---------------------------------------------------------------- the guard reads tenants as the engine does

LABEL_VALUES = st.sampled_from(["prod", "research", "dev", "sandbox", "other"])


@settings(max_examples=60)
@given(old=st.dictionaries(st.sampled_from(["gpu-tier", "team"]), LABEL_VALUES, max_size=2),
       new=st.dictionaries(st.sampled_from(["gpu-tier", "team"]), LABEL_VALUES, max_size=2))
def test_the_tenants_the_guard_names_are_the_ones_the_engine_selects(old: dict[str, str],
                                                                     new: dict[str, str]) -> None:
    guard = example_guard()
    policy = load_policy((EXAMPLES / "mixed-fleet" / "cluster.yaml").read_text(encoding="utf-8"), filename="mf")
    assert policy.policy is not None
    engine = Engine(build_admission_policy(policy.policy))
    facts = tenancy(policy.policy.spec)
    result = cel_vap.evaluate_policy({**guard, "spec": {**guard["spec"], "matchConditions": []}},
                                     object=namespace(new), old_object=namespace(old), operation="UPDATE",
                                     user_info=SANDBOX_USER)
    assert result.variables is not None
    for labels, variable in ((new, "tenantsAfter"), (old, "tenantsBefore")):
        shown = namespace(labels)["metadata"]["labels"]
        expected = list(engine.tenants_for(shown, namespace="team-a"))
        assert result.variables[variable] == expected == list(facts.selected_by(shown))
    assert bool(result.decisions) == (old.get("gpu-tier") != new.get("gpu-tier"))


# ---------------------------------------------------------------- cost


def largest_request(keys: list[str]) -> tuple[Obj, Obj, Obj]:
    """A namespace with the envelope's labels at the longest the API allows, every guarded key changed, and a user
    in the envelope's groups, none of them a manager's: every expression runs to its end."""
    envelope = tenancy_guard.ENVELOPE
    filler = {f"example.com/{'k' * 40}-{i:03d}".ljust(63 + 12, "x"): "v" * 63 for i in range(envelope.labels)}
    old_labels = dict(list(filler.items())[:envelope.labels - len(keys)])
    old_labels.update({key: "a" * 63 for key in keys})
    new_labels = {**old_labels, **{key: "b" * 63 for key in keys}}
    user = {"username": "u" * envelope.name, "groups": [f"{i:03d}".ljust(envelope.name, "g")
                                                        for i in range(envelope.groups)]}
    return (namespace(old_labels, name="n" * 63), namespace(new_labels, name="n" * 63), user)


@pytest.mark.parametrize("name", ["mixed-fleet", "vgpu-platform", "h20-mig"])
def test_the_estimate_stays_within_the_limits_and_bounds_what_the_largest_request_costs(name: str) -> None:
    guard = example_guard(name)
    estimate = tenancy_guard.estimate_guard(guard)
    assert estimate.largest[1] <= PER_CALL_LIMIT and estimate.total <= POLICY_BUDGET
    keys = guard["spec"]["variables"][2]["expression"]
    guarded = yaml.safe_load(keys[:keys.index("]") + 1])
    old, new, user = largest_request(guarded)
    assert len(new["metadata"]["labels"]) <= tenancy_guard.ENVELOPE.labels + 1  # + kubernetes.io/metadata.name
    result = cel_vap.evaluate_policy(guard, object=new, old_object=old, operation="UPDATE", user_info=user)
    assert result.matched and len(result.decisions) == 1
    base = cel_vap.activation(object=new, old_object=old, operation="UPDATE", user_info=user)
    costs: dict[str, int] = {}
    for variable in guard["spec"]["variables"]:
        found = cel_cost.cost_of(variable["expression"], base)
        assert not found.error and found.value == result.variables[variable["name"]], variable["name"]
        base["variables"][variable["name"]] = found.value
        costs[variable["name"]] = found.cost

    def each(expressions: list[str]) -> tuple[int, ...]:
        return tuple(cel_cost.cost_of(e, base).cost for e in expressions)

    spec = guard["spec"]
    run = PolicyCost(costs, each([v["expression"] for v in spec["validations"]]),
                     each([v["messageExpression"] for v in spec["validations"]]),
                     each([c["expression"] for c in spec["matchConditions"]]))
    for variable, cost in run.variables.items():
        assert cost <= estimate.variables[variable], (variable, cost, estimate.variables[variable])
    for kind in ("validations", "messages", "match_conditions"):
        for found, bound in zip(getattr(run, kind), getattr(estimate, kind), strict=True):
            assert 0 < found <= bound, (kind, found, bound)
    assert run.total <= estimate.total
