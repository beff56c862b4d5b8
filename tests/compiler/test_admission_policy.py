"""The ValidatingAdmissionPolicy target: the same verdicts and rule ids as the engine wherever CEL decides, allow where
it cannot; valid Kubernetes at the spec's version; homogeneous literals; only CEL the version offers."""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any

# cel_vap and cel_k8s live in tests/ (test helpers, not product code).
import cel_vap
import kubernetes_validate
import pytest
import yaml
from cel_k8s import CelError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.targets import admission_policy
from compiler.targets.admission_policy import render_admission_policies
from policy.engine import Engine
from policy.load import load_policy
from policy.model import ClusterGPUPolicy
from policy.offers import build_admission_policy
from policy.resolve import resolve
from policy.rules import RULES

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "examples" / "clusters"
FIXTURES = ROOT / "tests" / "fixtures" / "workloads"
SEVERITY = {"Deny": "error", "Warn": "warning", "Audit": "info"}
RESOURCES = {"Pod": "pods", "ReplicationController": "replicationcontrollers", "Deployment": "deployments",
             "ReplicaSet": "replicasets", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets", "Job": "jobs",
             "CronJob": "cronjobs"}


@functools.cache
def example(name: str, engine: str = "both", **modes: str) -> ClusterGPUPolicy:
    path = CLUSTERS / name / "cluster.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["spec"].setdefault("admission", {})["engine"] = engine
    if modes:
        data["spec"]["admission"]["rules"] = {k.replace("_", "-"): m for k, m in modes.items()}
    result = load_policy(yaml.safe_dump(data), filename=str(path))
    assert result.ok and result.policy is not None, result.diagnostics
    return result.policy


@functools.cache
def compiled(name: str, **modes: str) -> tuple[Engine, tuple[Obj, ...]]:
    policy = example(name, **modes)
    return Engine(build_admission_policy(policy)), tuple(render_admission_policies(resolve(policy)))


def namespace_object(name: str, labels: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {**labels, "kubernetes.io/metadata.name": name}}}


def matches(policy: Obj, obj: Obj, operation: str, namespace: str) -> bool:
    constraints = policy["spec"]["matchConstraints"]
    group = obj["apiVersion"].rpartition("/")[0]
    resource = RESOURCES.get(obj.get("kind", ""))
    excluded = constraints["namespaceSelector"]["matchExpressions"][0]["values"]
    return namespace not in excluded and any(
        group in rule["apiGroups"] and resource in rule["resources"] and operation in rule["operations"]
        for rule in constraints["resourceRules"])


def cel_findings(objects: tuple[Obj, ...], obj: Obj, *, namespace: str, labels: dict[str, str],
                 operation: str = "CREATE", old: Obj | None = None) -> dict[str, str]:
    """Rule id -> severity of every failing validation of every policy the API server would run."""
    bindings = {o["spec"]["policyName"]: o["spec"]["validationActions"] for o in objects
                if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    found: dict[str, str] = {}
    for policy in objects:
        if policy["kind"] != "ValidatingAdmissionPolicy" or not matches(policy, obj, operation, namespace):
            continue
        result = cel_vap.evaluate_policy(policy, object=obj, old_object=old, operation=operation,
                                         namespace=namespace_object(namespace, labels))
        for decision in result.decisions:
            assert decision.error is None, decision.error
            validation = policy["spec"]["validations"][decision.index]
            rule = re.match(r"\[([a-z-]+)\]", validation["message"])[1]  # type: ignore[index]
            assert decision.message.startswith(f"[{rule}] "), decision.message
            assert "Fix: " in decision.message, decision.message
            (action,) = bindings[policy["metadata"]["name"]]
            found[rule] = SEVERITY[action]
    return found


def engine_findings(engine: Engine, obj: Obj, *, namespace: str, labels: dict[str, str], operation: str = "CREATE",
                    old: Obj | None = None) -> dict[str, str]:
    decision = engine.evaluate(obj, tenants=engine.tenants_for(labels, namespace=namespace), operation=operation,
                               old_obj=old)
    return {d.code: d.severity for d in decision.diagnostics}


def assert_same(cluster: str, obj: Obj, *, namespace: str = "default", labels: dict[str, str] | None = None,
                operation: str = "CREATE", old: Obj | None = None, **modes: str) -> dict[str, str]:
    engine, objects = compiled(cluster, **modes)
    labels = labels or {}
    mine = engine_findings(engine, obj, namespace=namespace, labels=labels, operation=operation, old=old)
    theirs = cel_findings(objects, obj, namespace=namespace, labels=labels, operation=operation, old=old)
    kind_checked = obj.get("kind") in RESOURCES and not (obj.get("kind") == "Pod" and operation == "UPDATE")
    if kind_checked:
        assert theirs == mine, f"engine {mine} but CEL {theirs}"
    else:  # not registered (as with the webhook): CEL allows, the engine decides offline only
        assert theirs == {}
    return mine


# ---------------------------------------------------------------- every admission case of every example


def suite_cases() -> list[tuple[str, Any, Obj]]:
    out = []
    for suite_path in sorted(CLUSTERS.glob("*/admission-tests.yaml")):
        suite = yaml.safe_load(suite_path.read_text(encoding="utf-8"))
        for case in suite["cases"]:
            if "object" in case:
                obj = case["object"]
            else:
                docs = [d for d in yaml.safe_load_all((suite_path.parent / case["file"]).read_text()) if d]
                obj = docs[case.get("index", 0)]
            out.append((suite_path.parent.name, suite, {**case, "object": obj}))
    return out


CASES = suite_cases()


@pytest.mark.parametrize(("cluster", "suite", "case"), CASES, ids=[f"{c}: {k['name']}" for c, _, k in CASES])
def test_every_example_admission_case_gets_the_engines_verdict_and_rule_ids(cluster: str, suite: Obj,
                                                                             case: Obj) -> None:
    obj = case["object"]
    namespace = case.get("namespace") or obj.get("metadata", {}).get("namespace") or "default"
    labels = {**suite.get("namespaces", {}).get(namespace, {}), **case.get("namespaceLabels", {})}
    found = assert_same(cluster, obj, namespace=namespace, labels=labels, operation=case.get("operation", "CREATE"),
                        old=case.get("oldObject"))
    assert sorted(found) == sorted(case["expect"].get("rules", found))


def test_the_cases_cover_every_rule_and_both_verdicts() -> None:
    fired = {rule for _, _, case in CASES for rule in case["expect"].get("rules", [])}
    assert fired == {rule.id for rule in RULES}
    assert {case["expect"]["allowed"] for _, _, case in CASES} == {True, False}


# ---------------------------------------------------------------- real-world manifests

FIXTURE_FILES = sorted(FIXTURES.glob("*/*.yaml"))


def fixture_header(path: Path) -> dict[str, str]:
    header = {}
    for line in path.read_text(encoding="utf-8").splitlines()[:4]:
        key, _, value = line.removeprefix("# ").partition(": ")
        header[key] = value.strip()
    return header


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_real_world_manifest_gets_the_engines_verdict(path: Path) -> None:
    header = fixture_header(path)
    labels = dict(pair.split("=", 1) for pair in header.get("namespace-labels", "").split(",") if pair)
    namespace = labels.get("kubernetes.io/metadata.name", "apps")
    for obj in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if obj:
            assert_same(header["cluster"], obj, namespace=namespace, labels=labels)


# ---------------------------------------------------------------- modes, ratchet, placement corners


def deployment(limits: Obj, *, init: list[Obj] | None = None, **spec: Any) -> Obj:
    pod: Obj = {"containers": [{"name": "main", "image": "app:1", "resources": {"limits": limits}}], **spec}
    if init is not None:
        pod["initContainers"] = init
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod}}}


@pytest.mark.parametrize("mode", ["warn", "audit"])
def test_a_rule_in_warn_or_audit_mode_lands_in_a_binding_with_that_action(mode: str) -> None:
    found = assert_same("tke-l20-t4", deployment({"nvidia.com/gpu": 2}), shared_gpu_request_above_one=mode)
    assert found == {"shared-gpu-request-above-one": {"warn": "warning", "audit": "info"}[mode]}
    _, objects = compiled("tke-l20-t4", shared_gpu_request_above_one=mode)
    actions = {o["metadata"]["name"]: o["spec"]["validationActions"] for o in objects
               if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert actions["gpupolicy-templates-deny.gpupolicy.dev"] == ["Deny"]
    assert actions[f"gpupolicy-templates-{mode}.gpupolicy.dev"] == [{"warn": "Warn", "audit": "Audit"}[mode]]


def test_audit_mode_writes_one_annotation_per_rule_id_like_the_webhook() -> None:
    _, objects = compiled("tke-l20-t4", shared_gpu_request_above_one="audit")
    (policy,) = [o for o in objects if o["metadata"]["name"] == "gpupolicy-templates-audit.gpupolicy.dev"
                 and o["kind"] == "ValidatingAdmissionPolicy"]
    assert [a["key"] for a in policy["spec"]["auditAnnotations"]] == ["shared-gpu-request-above-one"]


def test_an_update_keeping_gpus_and_placement_is_allowed_and_one_raising_them_is_denied() -> None:
    old = deployment({"nvidia.com/gpu": 2})
    relabelled = copy.deepcopy(old)
    relabelled["spec"]["template"]["spec"]["containers"][0]["image"] = "app:2"
    relabelled["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "2"
    assert assert_same("tke-l20-t4", relabelled, operation="UPDATE", old=old) == {}
    one = deployment({"nvidia.com/gpu": 1})
    assert assert_same("tke-l20-t4", old, operation="UPDATE", old=one) == {"shared-gpu-request-above-one": "error"}


def test_a_sidecar_started_before_an_init_container_adds_to_its_peak() -> None:
    sidecar = {"name": "side", "image": "s", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": 4}}}
    init = {"name": "init", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 5}}}
    pin = {"nodeSelector": {"node-pool": "h100-train"}}
    research = {"namespace": "lab", "labels": {"gpu-tier": "research"}}
    assert assert_same("mixed-fleet", deployment({"nvidia.com/gpu": 1}, init=[sidecar, init], **pin),
                       **research) == {"gpu-request-unsatisfiable": "error"}  # 4 + 5 > 8
    assert assert_same("mixed-fleet", deployment({"nvidia.com/gpu": 1}, init=[init, sidecar], **pin),
                       **research) == {}  # max(5, 4 + 1) fits 8


def test_quantities_arrive_canonical_and_1000_gpus_are_1k() -> None:
    found = assert_same("mixed-fleet", deployment({"nvidia.com/gpu": 1000}, nodeSelector={"node-pool": "h100-train"}),
                        namespace="lab", labels={"gpu-tier": "research"})
    assert found == {"gpu-request-unsatisfiable": "error"}


def test_excluded_namespaces_are_not_matched() -> None:
    _, objects = compiled("tke-l20-t4")
    assert cel_findings(objects, deployment({"nvidia.com/gpu": 2}), namespace="kube-system", labels={}) == {}


# ---------------------------------------------------------------- generated corpus (hypothesis)

CLUSTER_NAMES = ("tke-l20-t4", "mixed-fleet", "h20-mig")


@functools.cache
def vocabulary(cluster: str) -> dict[str, Any]:
    engine, _ = compiled(cluster)
    labels = sorted({(k, v) for c in engine.classes for k, vals in c.labels.items() for v in vals})
    resources = sorted({r for c in engine.classes for r in c.offers})
    tenants = engine.policy.tenants
    tenant_labels = [dict(t.match_labels) or {e.key: e.values[0] for e in t.match_expressions if e.values}
                     for t in tenants]
    return {"labels": labels, "resources": resources, "tenant_labels": tenant_labels}


@st.composite
def workloads(draw: st.DrawFn, cluster: str) -> tuple[Obj, str, dict[str, str]]:
    vocab = vocabulary(cluster)
    names = iter(f"c{i}" for i in range(100))
    resource = st.sampled_from([*vocab["resources"], "nvidia.com/gpu", "nvidia.com/mig-1g.5gb",
                                "nvidia.com/gpu.shared", "nvidia.com/gpumem"])
    amounts = st.dictionaries(resource, st.sampled_from([0, 1, 1, 2, 3, 8, 9, 1000]), max_size=2)

    def container(init: bool) -> Obj:
        limits = draw(amounts)
        out: Obj = {"name": next(names), "image": "x", "resources": {"limits": dict(limits)}}
        if limits and draw(st.booleans()):
            out["resources"]["requests"] = dict(limits)  # the API server requires requests == limits
        if init and draw(st.booleans()):
            out["restartPolicy"] = "Always"
        return out

    spec: Obj = {"containers": [container(False) for _ in range(draw(st.integers(1, 3)))]}
    if draw(st.booleans()):
        spec["initContainers"] = [container(True) for _ in range(draw(st.integers(1, 2)))]
    label = st.sampled_from([*vocab["labels"], ("node-pool", "elsewhere"), ("kubernetes.io/hostname", "n1"),
                             ("nvidia.com/gpu.count", "4"), ("nvidia.com/gpu.product", "Tesla-T4-SHARED")])
    if draw(st.booleans()):
        spec["nodeSelector"] = dict(draw(st.lists(label, max_size=2)))
    if draw(st.booleans()):
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [draw(term(label)) for _ in range(draw(st.integers(1, 2)))]}}}
    kind = draw(st.sampled_from(["Pod", "Deployment", "Job", "CronJob", "StatefulSet", "ReplicationController"]))
    namespace_labels = draw(st.sampled_from([{}, *vocab["tenant_labels"]]))
    return wrap(kind, spec), "apps", namespace_labels


def term(label: st.SearchStrategy[tuple[str, str]]) -> st.SearchStrategy[Obj]:
    def expression(pair: tuple[str, str], operator: str, bound: int) -> Obj:
        key, value = pair
        if operator in ("Exists", "DoesNotExist"):
            return {"key": key, "operator": operator}
        if operator in ("Gt", "Lt"):
            return {"key": key, "operator": operator, "values": [str(bound)]}
        return {"key": key, "operator": operator, "values": [value]}

    one = st.builds(expression, label, st.sampled_from(["In", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
                    st.integers(0, 9))
    return st.builds(lambda exprs: {"matchExpressions": exprs}, st.lists(one, min_size=1, max_size=2))


def wrap(kind: str, spec: Obj) -> Obj:
    meta = {"name": "gen", "namespace": "apps"}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    template = {"metadata": {"labels": {"app": "gen"}}, "spec": spec}
    if kind == "CronJob":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta,
                "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}}
    group = {"Job": "batch/v1", "ReplicationController": "v1"}.get(kind, "apps/v1")
    return {"apiVersion": group, "kind": kind, "metadata": meta, "spec": {"template": template}}


@pytest.mark.parametrize("cluster", CLUSTER_NAMES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_workloads_get_the_engines_verdict_and_rule_ids(cluster: str, data: st.DataObject) -> None:
    obj, namespace, labels = data.draw(workloads(cluster))
    assert_same(cluster, obj, namespace=namespace, labels=labels)


# ---------------------------------------------------------------- valid objects, literals, version gates


@pytest.mark.parametrize("cluster", CLUSTER_NAMES)
def test_every_object_passes_strict_schema_validation_at_the_specs_kubernetes_version(cluster: str) -> None:
    policy = example(cluster)
    objects = render_admission_policies(resolve(policy))
    assert {o["kind"] for o in objects} == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for obj in objects:
        kubernetes_validate.validate(obj, policy.spec.kubernetes_version, strict=True)


@pytest.mark.parametrize("cluster", CLUSTER_NAMES)
def test_every_data_literal_is_homogeneous(cluster: str) -> None:
    for variable in admission_policy.variables_of(build_admission_policy(example(cluster)), admission_policy.PATHS[0]):
        expression = variable[1]
        if expression[:1] in "[{" and "variables." not in expression:
            inferred = cel_vap.compile_in(expression, 30).return_type().name()
            # cel-cpp infers DYN for a mixed literal (cel-monitoring.md §1.7) but also for an empty one, which
            # unifies with its siblings: DYN is accepted only where the data's own types agree.
            assert "DYN" not in inferred or shape(json.loads(expression)) is not None, (variable[0], inferred)


def shape(value: Any) -> str | None:
    """The literal's element types, unified ("?" for an empty collection); None when two elements disagree."""
    if isinstance(value, list | dict):
        items = list(value.values() if isinstance(value, dict) else value)
        found = "?"
        for item in items:
            mine = shape(item)
            if mine is None:
                return None
            unified = unify(found, mine)
            if unified is None:
                return None
            found = unified
        return f"{'map' if isinstance(value, dict) else 'list'}<{found}>"
    return type(value).__name__


def unify(a: str, b: str) -> str | None:
    if a == "?" or a == b:
        return b
    if b == "?":
        return a
    if a[:4] == b[:4] and a[:4] in ("map<", "list"):
        head = a.index("<") + 1
        inner = unify(a[head:-1], b[head:-1])
        return None if inner is None else f"{a[:head]}{inner}>"
    return None


def test_the_homogeneity_check_refuses_a_mixed_literal() -> None:
    assert shape({"name": "l20", "perNode": 8}) is None
    assert shape({"a": [], "b": ["x"]}) == "map<list<str>>"
    assert "DYN" in cel_vap.compile_in('{"name": "l20", "perNode": 8}', 30).return_type().name()


def test_every_expression_compiles_at_1_30_and_not_before_the_libraries_it_uses() -> None:
    _, objects = compiled("mixed-fleet")
    expressions = [e for o in objects if o["kind"] == "ValidatingAdmissionPolicy" for e in expressions_of(o)]
    for expression in expressions:
        cel_vap.compile_in(expression, 30)
    with pytest.raises(CelError):  # join() (strings v2) and the quantity library are not in the 1.28 environment
        for expression in expressions:
            cel_vap.compile_in(expression, 28)


def expressions_of(policy: Obj) -> list[str]:
    spec = policy["spec"]
    return ([c["expression"] for c in spec["matchConditions"]] + [v["expression"] for v in spec["variables"]]
            + [x[k] for x in spec["validations"] for k in ("expression", "messageExpression")]
            + [a["valueExpression"] for a in spec.get("auditAnnotations", [])])


def test_every_engine_rule_has_its_cel() -> None:
    assert list(admission_policy.cel_rules()) == [rule.id for rule in RULES]
