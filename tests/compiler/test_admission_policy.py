"""The ValidatingAdmissionPolicy target: the same verdicts and rule ids as the engine wherever CEL decides, allow where
it cannot; valid Kubernetes at the spec's version; homogeneous literals; only CEL the version offers."""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# cel_vap and cel_k8s live in tests/ (test helpers, not product code).
import cel_cost
import cel_vap
import kubernetes_validate
import pytest
import workload_fixtures
import yaml
from cel_k8s import CelError, canonical_quantity
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cel_vap import DOCUMENTED

from compiler import compile_policy
from compiler.targets import admission_policy, tenancy_guard
from compiler.targets.admission_policy import render_admission_policies
from compiler.targets.admission_policy_cost import PER_CALL_LIMIT, POLICY_BUDGET, estimate_policy
from policy.admission import fractions
from policy.admission.engine import NOT_CHECKED, Engine
from policy.admission.rules import RULES
from policy.admission.vgpu import HamiAdmission
from policy.admission.workloads import Workload, find_workload, read_gpu_request, read_placement
from policy.load import load_policy
from policy.resolved.offers import build_admission_policy
from policy.resolved.resolve import resolve
from policy.spec.model import VAP_MINOR, ClusterGPUPolicy

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "examples" / "clusters"
DENIED = ROOT / "tests" / "fixtures" / "workloads" / "deny"
SEVERITY = {"Deny": "error", "Warn": "warning", "Audit": "info"}
RESOURCES = {"Pod": "pods", "ReplicationController": "replicationcontrollers", "Deployment": "deployments",
             "ReplicaSet": "replicasets", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets", "Job": "jobs",
             "CronJob": "cronjobs"}
#: Workload custom resources the policies read (a plain pod spec at spec.template.spec), by group and kind.
CUSTOM = {("serving.knative.dev", "Service"): "services", ("serving.knative.dev", "Configuration"): "configurations"}


def resource_of(obj: Obj) -> str | None:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return CUSTOM.get((group, obj.get("kind", ""))) or (RESOURCES.get(obj.get("kind", ""))
                                                        if group in ("", "apps", "batch") else None)


def pod_spec_of(obj: Obj) -> Obj | None:
    """The pod spec the policies read: a Pod's or controller's, or a custom resource's one plain template."""
    workload = find_workload(obj)
    if workload is None and (obj.get("apiVersion", "").rpartition("/")[0], obj.get("kind")) in CUSTOM:
        workload = find_workload({"kind": "Pod", "spec": obj.get("spec", {}).get("template", {}).get("spec")})
    return workload


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
    resource = resource_of(obj)
    excluded = constraints["namespaceSelector"]["matchExpressions"][0]["values"]
    return namespace not in excluded and any(
        group in rule["apiGroups"] and resource in rule["resources"] and operation in rule["operations"]
        for rule in constraints["resourceRules"])


@dataclass(frozen=True)
class CelVerdict:
    """What the API server's policies answer: rule id -> severity of every failing validation, whether the CEL
    said it cannot decide (its ``undecided`` variable), and the denial messages."""

    findings: dict[str, str]
    undecided: bool | None
    """None where no policy got as far as its variables (not matched, or skipped by a matchCondition)."""
    messages: tuple[str, ...] = ()
    ratcheted: bool = False
    """The policies' ratchet (their ``unchanged`` variable) kept an UPDATE."""


def cel_verdict(objects: tuple[Obj, ...], obj: Obj, *, namespace: str, labels: dict[str, str],
                operation: str = "CREATE", old: Obj | None = None) -> CelVerdict:
    """Every policy the API server would run on the request, evaluated like its admission plugin."""
    bindings = {o["spec"]["policyName"]: o["spec"]["validationActions"] for o in objects
                if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    found: dict[str, str] = {}
    messages: list[str] = []
    undecided: set[bool] = set()
    ratcheted = False
    for policy in objects:
        if policy["kind"] != "ValidatingAdmissionPolicy" or not matches(policy, obj, operation, namespace):
            continue
        result = cel_vap.evaluate_policy(policy, object=obj, old_object=old, operation=operation,
                                         namespace=namespace_object(namespace, labels))
        if result.variables is not None and "undecided" in result.variables:
            undecided.add(result.variables["undecided"])
            ratcheted = ratcheted or result.variables.get("unchanged") is True
        for decision in result.decisions:
            assert decision.error is None, decision.error
            validation = policy["spec"]["validations"][decision.index]
            rule = re.match(r"\[([a-z-]+)\]", validation["message"])[1]  # type: ignore[index]
            assert decision.message.startswith(f"[{rule}] "), decision.message
            assert "Fix: " in decision.message, decision.message
            (action,) = bindings[policy["metadata"]["name"]]
            found[rule] = SEVERITY[action]
            messages.append(decision.message)
    assert len(undecided) <= 1, "the policies of one request disagree on whether CEL decides"
    return CelVerdict(found, next(iter(undecided), None), tuple(messages), ratcheted)


def engine_findings(engine: Engine, obj: Obj, *, namespace: str, labels: dict[str, str], operation: str = "CREATE",
                    old: Obj | None = None) -> dict[str, str]:
    decision = engine.evaluate(obj, tenants=engine.tenants_for(labels, namespace=namespace), operation=operation,
                               old_obj=old)
    return {d.code: d.severity for d in decision.diagnostics}


def left_to_the_webhook(engine: Engine, obj: Obj, *, namespace: str, labels: dict[str, str],
                        pinned_left: bool = False) -> str | None:
    """Why CEL cannot decide the object (admission_policy.NOT_DECIDED), worked out from the engine's side;
    ``pinned_left``: the policies leave pods naming their node to the webhook (admission_policy.leaves_pinned_pods)."""
    workload = pod_spec_of(obj)
    if workload is None:
        return None
    if fractions.read(obj if find_workload(obj) is not None else {}, workload) is not None:
        return "KAI fractional GPUs"
    request = read_gpu_request(workload)
    if request.problems or any(a.count >= 2**63 for c in request.containers for a in c.amounts) or any(
            canonical_quantity(value) != canonical_quantity(container["resources"]["limits"][key])
            for container in gpu_containers(workload) for key, value in container["resources"]["requests"].items()
            if key.startswith("nvidia.com/")):
        return "amounts CEL does not read"
    init = [c.sidecar for c in request.containers if c.section == "initContainers"]
    sidecars = [i for i, sidecar in enumerate(init) if sidecar]
    plain = [i for i, sidecar in enumerate(init) if not sidecar]
    if sidecars and plain and not (max(sidecars) < min(plain) or min(sidecars) > max(plain)):
        return "GPU sidecars interleaved with GPU init containers"
    hami = HamiAdmission.build(engine.policy)
    tenants = engine.tenants_for(labels, namespace=namespace)
    if hami is not None and hami.takes(workload, engine.access(tenants).modes):
        return "HAMi vGPU pods"
    if any(t.operator in ("Lt", "Gt") for t in read_placement(workload).tolerations):
        return "Lt and Gt tolerations"
    if pinned_left and read_placement(workload).node_name is not None:
        return "pods naming their node"
    return None


def gpu_containers(workload: Workload) -> list[Obj]:
    """The containers with an nvidia.com/ amount in their requests (their limits are read beside them)."""
    return [c for section in ("initContainers", "containers") for c in workload.pod_spec.get(section) or []
            if any(k.startswith("nvidia.com/") for k in c.get("resources", {}).get("requests") or {})]


def assert_same(cluster: str, obj: Obj, *, namespace: str = "default", labels: dict[str, str] | None = None,
                operation: str = "CREATE", old: Obj | None = None, **modes: str) -> dict[str, str]:
    """The engine's findings and the policies' agree wherever CEL decides; where it cannot, the policies allow;
    a pin a denial names, merged into the object, leaves the engine no finding of a compiled rule."""
    engine, objects = compiled(cluster, **modes)
    labels = labels or {}
    mine = engine_findings(engine, obj, namespace=namespace, labels=labels, operation=operation, old=old)
    try:
        theirs = cel_verdict(objects, obj, namespace=namespace, labels=labels, operation=operation, old=old)
    except cel_vap.Undecodable:
        # The API server cannot decode the object: no admission step ever sees it.
        assert "gpu-request-invalid" in mine
        return mine
    kind_checked = resource_of(obj) is not None and not (obj.get("kind") == "Pod" and operation == "UPDATE")
    pinned_left = admission_policy.leaves_pinned_pods(example(cluster, **modes).spec)
    reason = left_to_the_webhook(engine, obj, namespace=namespace, labels=labels,
                                 pinned_left=pinned_left) if kind_checked else None
    assert reason is None or reason in dict(admission_policy.NOT_DECIDED)
    undecided = reason is not None
    if operation == "UPDATE" and kind_checked:
        fresh = engine_findings(engine, obj, namespace=namespace, labels=labels)
        if fresh and not mine:  # the engine's ratchet kept it: the policies must too
            assert theirs.findings == {}, "the policies' ratchet is stricter than the engine's"
        if theirs.ratcheted and mine:
            reason = reason or "UPDATEs only the policies' ratchet keeps"
    if not kind_checked or reason is not None:
        # not registered (as with the webhook), or left to it: CEL allows, the engine decides
        assert theirs.findings == {}, f"{reason}: CEL {theirs.findings}"
    else:
        assert theirs.findings == mine, f"engine {mine} but CEL {theirs.findings}"
    if theirs.undecided is not None:
        assert theirs.undecided == undecided, reason
    for message in theirs.messages:
        if (pinned := pin_fix(engine, obj, message)) is not None:
            after = engine_findings(engine, pinned, namespace=namespace, labels=labels, operation=operation, old=old)
            assert not set(after) & set(admission_policy.cel_rules()), (message, after)
    return mine


PIN = re.compile(r"Fix: pin the pod to class (?P<name>\S+) with nodeSelector \{[^}]*\}"
                 r"(?:, removing nodeSelector (?P<keys>[^ ,]+(?:, [^ ,]+)*))?"
                 r"(?P<affinity>, removing its required node affinity)?(?P<taints>, tolerating its taints .+)?$")


def pin_fix(engine: Engine, obj: Obj, message: str) -> Obj | None:
    """The object with the pin a denial's fix names applied as it reads: the class's nodeSelector merged into the
    pod's, the nodeSelector entries and required node affinity it names removed, the taints it names tolerated;
    None for a fix of another kind."""
    if "Fix: pin" not in message:
        return None
    found = PIN.search(message)
    assert found is not None, message
    view = next(c for c in engine.classes if c.name == found["name"])
    fixed = copy.deepcopy(obj)
    spec = pod_spec_of(fixed).pod_spec  # type: ignore[union-attr]
    selector = spec.setdefault("nodeSelector", {})
    for key in (found["keys"] or "").split(", "):
        selector.pop(key, None) if key else None
    selector.update(dict(view.node_selector))
    if found["affinity"]:
        del spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    if found["taints"]:
        spec.setdefault("tolerations", []).extend(
            {"key": t.key, "operator": "Equal" if t.value else "Exists", **({"value": t.value} if t.value else {}),
             "effect": t.effect} for t in view.taints)
    return fixed


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
    assert fired - {NOT_CHECKED} == {rule.id for rule in RULES}
    assert {case["expect"]["allowed"] for _, _, case in CASES} == {True, False}


# ---------------------------------------------------------------- real-world manifests

@pytest.mark.parametrize("path", workload_fixtures.FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_real_world_manifest_gets_the_engines_verdict(path: Path) -> None:
    header = workload_fixtures.header(path)
    labels = workload_fixtures.namespace_labels(header)
    namespace = labels.get("kubernetes.io/metadata.name", "apps")
    for obj in workload_fixtures.documents(path):
        assert_same(header["cluster"], obj, namespace=namespace, labels=labels)


# ---------------------------------------------------------------- modes, ratchet, placement corners


#: What mixed-fleet's h100-train nodes need tolerated (their taint dedicated=training:NoSchedule).
TRAINING = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}


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
    pin = {"nodeSelector": {"node-pool": "h100-train"}, "tolerations": [TRAINING]}
    research = {"namespace": "lab", "labels": {"gpu-tier": "research"}}
    assert assert_same("mixed-fleet", deployment({"nvidia.com/gpu": 1}, init=[sidecar, init], **pin),
                       **research) == {"gpu-request-unsatisfiable": "error"}  # 4 + 5 > 8
    assert assert_same("mixed-fleet", deployment({"nvidia.com/gpu": 1}, init=[init, sidecar], **pin),
                       **research) == {}  # max(5, 4 + 1) fits 8


def test_gpu_sidecars_interleaved_with_gpu_init_containers_are_left_to_the_webhook() -> None:
    def init(name: str, count: int, sidecar: bool = False) -> Obj:
        return {"name": name, "image": "i", "resources": {"limits": {"nvidia.com/gpu": count}},
                **({"restartPolicy": "Always"} if sidecar else {})}

    pin = {"nodeSelector": {"node-pool": "h100-train"}, "tolerations": [TRAINING]}
    obj = deployment({"nvidia.com/gpu": 1}, init=[init("a", 4, True), init("b", 5), init("c", 2, True)], **pin)
    engine, objects = compiled("mixed-fleet")
    labels = {"gpu-tier": "research"}
    assert engine_findings(engine, obj, namespace="lab", labels=labels) == {"gpu-request-unsatisfiable": "error"}
    verdict = cel_verdict(objects, obj, namespace="lab", labels=labels)
    assert verdict.findings == {} and verdict.undecided is True


def test_quantities_arrive_canonical_and_1000_gpus_are_1k() -> None:
    found = assert_same("mixed-fleet", deployment({"nvidia.com/gpu": 1000}, nodeSelector={"node-pool": "h100-train"},
                                                  tolerations=[TRAINING]),
                        namespace="lab", labels={"gpu-tier": "research"})
    assert found == {"gpu-request-unsatisfiable": "error"}


def test_excluded_namespaces_are_not_matched() -> None:
    _, objects = compiled("tke-l20-t4")
    verdict = cel_verdict(objects, deployment({"nvidia.com/gpu": 2}), namespace="kube-system", labels={})
    assert verdict.findings == {} and verdict.undecided is None


# ---------------------------------------------------------------- generated corpus (hypothesis)

CLUSTER_NAMES = ("tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform")


@functools.cache
def vocabulary(cluster: str) -> dict[str, Any]:
    engine, _ = compiled(cluster)
    labels = sorted({(k, v) for c in engine.classes for k, vals in c.labels.items() for v in vals})
    resources = sorted({r for c in engine.classes for r in c.offers})
    tenants = engine.policy.tenants
    tenant_labels = [dict(t.match_labels) or {e.key: e.values[0] for e in t.match_expressions if e.values}
                     for t in tenants]
    taints = sorted({t for c in engine.classes for t in c.taints}, key=lambda t: (t.key, t.value, t.effect))
    return {"labels": labels, "resources": resources, "tenant_labels": tenant_labels, "taints": taints}


def tolerations(taints: list[Any]) -> st.SearchStrategy[Obj]:
    """Tolerations that do and do not tolerate the classes' taints, in the ways the API allows."""
    near = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in taints] + [
        {"key": t.key, "operator": "Exists"} for t in taints] + [
        {"key": t.key, "operator": "Equal", "value": "other", "effect": t.effect} for t in taints] + [
        {"key": t.key, "operator": "Exists", "effect": "NoExecute"} for t in taints]
    return st.sampled_from([*near, {"operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists",
                                                            "effect": "NoSchedule"},
                            {"key": "dedicated", "operator": "Lt", "value": "5", "effect": "NoSchedule"},
                            {"key": "other", "operator": "Equal", "value": "x", "effect": "NoSchedule"}])


#: Amounts the API server refuses (gpu-request-invalid), drawn now and then: they must leave CEL undecided.
REFUSED = ("1500m", -1, "2Ki")


@st.composite
def workloads(draw: st.DrawFn, cluster: str) -> tuple[Obj, str, dict[str, str]]:
    vocab = vocabulary(cluster)
    names = iter(f"c{i}" for i in range(100))
    resource = st.sampled_from([*vocab["resources"], "nvidia.com/gpu", "nvidia.com/mig-1g.5gb",
                                "nvidia.com/gpu.shared", "nvidia.com/gpumem", "nvidia.com/gpucores"])
    count = st.sampled_from([0, 1, 1, 1, 2, 3, 8, 9, 1000])
    amounts = st.dictionaries(resource, count, max_size=2)

    def container(init: bool) -> Obj:
        limits = draw(amounts)
        out: Obj = {"name": next(names), "image": "x", "resources": {"limits": dict(limits)}}
        if limits and draw(st.booleans()):
            out["resources"]["requests"] = dict(limits)  # the API server requires requests == limits
        if limits and draw(st.integers(0, 19)) == 0:
            key = next(iter(limits))
            field = draw(st.sampled_from(["limits", "requests"]))
            out["resources"].setdefault(field, {})[key] = draw(st.sampled_from(REFUSED))
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
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.lists(tolerations(vocab["taints"]), min_size=1, max_size=2))
    if draw(st.integers(0, 5)) == 0:
        spec["nodeName"] = "node-1"
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
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_workloads_get_the_engines_verdict_and_rule_ids(cluster: str, data: st.DataObject) -> None:
    obj, namespace, labels = data.draw(workloads(cluster))
    assert_same(cluster, obj, namespace=namespace, labels=labels)
    if obj["kind"] != "Pod" and data.draw(st.booleans()):
        # an UPDATE from another generated object, or from itself with one container's image changed
        old = data.draw(st.one_of(workloads(cluster).map(lambda found: found[0]), st.just(changed_image(obj))))
        old["kind"], old["apiVersion"], old["spec"] = obj["kind"], obj["apiVersion"], {**old["spec"]}
        if old["spec"].keys() == obj["spec"].keys():
            assert_same(cluster, obj, namespace=namespace, labels=labels, operation="UPDATE", old=old)


def changed_image(obj: Obj) -> Obj:
    old = copy.deepcopy(obj)
    find_workload(old).pod_spec["containers"][0]["image"] = "y"  # type: ignore[union-attr]
    return old


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
    return ([c["expression"] for c in spec.get("matchConditions", [])]
            + [v["expression"] for v in spec.get("variables", [])]
            + [x[k] for x in spec["validations"] for k in ("expression", "messageExpression") if k in x]
            + [a["valueExpression"] for a in spec.get("auditAnnotations", [])])


def test_every_engine_rule_has_its_cel_or_a_reason_to_have_none() -> None:
    compiled_rules = list(admission_policy.cel_rules())
    assert compiled_rules == [rule.id for rule in RULES if rule.id not in admission_policy.NOT_COMPILED]
    assert set(admission_policy.NOT_COMPILED) <= {rule.id for rule in RULES}
    assert {rule.id for rule in RULES} - set(admission_policy.NOT_COMPILED) == set(compiled_rules)


# ---------------------------------------------------------------- taints, nodeName, and what CEL leaves undecided


def test_a_class_whose_taints_the_pod_does_not_tolerate_is_out_of_reach_unless_the_pod_names_its_node() -> None:
    train = {"nodeSelector": {"node-pool": "h100-train"}}
    research = {"namespace": "lab", "labels": {"gpu-tier": "research"}}
    assert assert_same("mixed-fleet", deployment({"nvidia.com/gpu": 8}, **train),
                       **research) == {"gpu-request-unsatisfiable": "error"}
    assert assert_same("mixed-fleet", deployment({"nvidia.com/gpu": 8}, tolerations=[TRAINING], **train),
                       **research) == {}
    # The kubelet of a named node reads only NoExecute taints; the class's taint is NoSchedule.
    assert assert_same("mixed-fleet", deployment({"nvidia.com/gpu": 8}, nodeName="h100-node-1", **train),
                       **research) == {}


def test_the_pin_a_denial_names_tolerates_the_taints_of_its_class() -> None:
    engine, objects = compiled("mixed-fleet")
    obj = deployment({"nvidia.com/gpu": 8})
    verdict = cel_verdict(objects, obj, namespace="lab", labels={"gpu-tier": "research"})
    (message,) = verdict.messages
    assert "Fix: pin the pod to class h100-train" in message and "tolerating its taints dedicated=training" in message
    fixed = pin_fix(engine, obj, message)
    assert engine_findings(engine, fixed, namespace="lab", labels={"gpu-tier": "research"}) == {}  # type: ignore[arg-type]


def test_hami_pods_are_left_to_the_webhook() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", "namespace": "inference"},
           "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "app", "image": "x", "resources": {
               "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 60000}}}]}}
    engine, objects = compiled("vgpu-platform")
    labels = {"gpu-tier": "platform"}
    assert engine_findings(engine, pod, namespace="inference", labels=labels) == {"vgpu-memory-unsatisfiable": "error"}
    verdict = cel_verdict(objects, pod, namespace="inference", labels=labels)
    assert verdict.findings == {} and verdict.undecided is True
    # Outside HAMi's reach a pod asking for nvidia.com/gpu is the NVIDIA plugin's, and CEL decides it.
    assert assert_same("vgpu-platform", deployment({"nvidia.com/gpu": 2}, nodeSelector={"node-pool": "dev-ts"}),
                       namespace="notebooks",
                       labels={"gpu-tier": "dev"}) == {"shared-gpu-request-above-one": "error"}


def test_pods_naming_their_node_are_left_to_a_fail_closed_webhook_and_judged_on_every_class_otherwise() -> None:
    # Tenant dev may use t4-dev only: judged on every class, a pod pinned to a node (of t4-dev, say) is denied.
    pinned = deployment({"nvidia.com/gpu": 1}, nodeName="t4-dev-1")
    dev = {"namespace": "sandbox", "labels": {"gpu-tier": "dev"}}
    engine, objects = compiled("mixed-fleet")
    assert admission_policy.leaves_pinned_pods(example("mixed-fleet").spec)
    assert engine_findings(engine, pinned, **dev) == {"tenant-sharing-mode-denied": "error"}
    verdict = cel_verdict(objects, pinned, **dev)
    assert verdict.findings == {} and verdict.undecided is True  # the webhook knows the node's labels
    # Alone (no webhook to ask), the policies judge it as the engine does without the node's labels.
    alone = example("mixed-fleet", engine="vap")
    assert not admission_policy.leaves_pinned_pods(alone.spec)
    verdict = cel_verdict(tuple(render_admission_policies(resolve(alone))), pinned, **dev)
    assert verdict.findings == {"tenant-sharing-mode-denied": "error"}
    # Beside a webhook without its node cache, which judges the pod so too.
    text = (CLUSTERS / "mixed-fleet" / "cluster.yaml").read_text()
    text = text.replace("  admission:\n", "  admission:\n    nodeCache: false\n")
    uncached = load_policy(text, filename="cluster.yaml").policy
    assert uncached is not None and not uncached.spec.admission.node_cache
    assert not admission_policy.leaves_pinned_pods(uncached.spec)
    verdict = cel_verdict(tuple(render_admission_policies(resolve(uncached))), pinned, **dev)
    assert verdict.findings == {"tenant-sharing-mode-denied": "error"}


@pytest.mark.parametrize("resources", [{"limits": {"nvidia.com/gpu": "1500m"}}, {"limits": {"nvidia.com/gpu": -1}},
                                       {"requests": {"nvidia.com/gpu": 1}},
                                       {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 2}}])
def test_amounts_the_api_server_refuses_are_left_to_it(resources: Obj) -> None:
    obj = deployment({})
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    engine, objects = compiled("tke-l20-t4")
    assert "gpu-request-invalid" in engine_findings(engine, obj, namespace="nlp", labels={})
    verdict = cel_verdict(objects, obj, namespace="nlp", labels={})
    assert verdict.findings == {} and verdict.undecided is True


# ---------------------------------------------------------------- which engine, and the version gates


def tree_objects(policy: ClusterGPUPolicy) -> list[Obj]:
    return [doc for path, data in compile_policy(policy).items() if path.endswith(".yaml")
            for doc in yaml.safe_load_all(data) if isinstance(doc, dict) and "metadata" in doc]


def labelled(objects: list[Obj], kind: str, component: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind
            and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component]


def rule_policies(objects: list[Obj]) -> list[Obj]:
    """The policies that hold the admission rules (the tenancy guard, applied with them, holds namespace labels)."""
    return [o for o in labelled(objects, "ValidatingAdmissionPolicy", admission_policy.COMPONENT)
            if o["metadata"]["name"] != tenancy_guard.GUARD_NAME]


@pytest.mark.parametrize(("version", "engine"), [("1.29", "webhook"), ("1.30", "both"), ("1.31", "both")])
def test_the_default_engine_is_both_where_the_api_server_has_vap_and_the_webhook_below(
        example_policy: Any, version: str, engine: str) -> None:
    policy = example_policy("mixed-fleet", ('kubernetesVersion: "1.31"', f'kubernetesVersion: "{version}"'))
    assert policy.spec.admission.engine is None and policy.spec.admission_engine == engine
    found = tree_objects(policy)
    assert len(labelled(found, "ValidatingWebhookConfiguration", "webhook")) == 1
    policies = rule_policies(found)
    assert len(policies) == (len(admission_policy.PATHS) if engine == "both" else 0)
    # beside the webhook, an evaluation error leaves the object to it
    assert {p["spec"]["failurePolicy"] for p in policies} <= {"Ignore"}
    # the node-label reconciler's policy follows the same gate
    assert bool(labelled(found, "ValidatingAdmissionPolicy", "node-labels")) == (version != "1.29")


@pytest.mark.parametrize("failure", ["Fail", "Ignore"])
def test_engine_vap_compiles_the_policies_alone_with_the_specs_failure_policy(example_policy: Any,
                                                                            failure: str) -> None:
    policy = example_policy("h20-mig", ("engine: vap", f"engine: vap\n    failurePolicy: {failure}"))
    found = tree_objects(policy)
    kinds = {o["kind"] for o in found}
    assert not kinds & {"ValidatingWebhookConfiguration", "Certificate", "Issuer", "Service", "NetworkPolicy",
                        "PodDisruptionBudget"}
    assert not [o for o in found if o["metadata"]["name"] == "gpupolicy-webhook"]
    policies = rule_policies(found)
    assert len(policies) == len(admission_policy.PATHS)
    assert {p["spec"]["failurePolicy"] for p in policies} == {failure}


@pytest.mark.parametrize("engine", ["vap", "both"])
def test_vap_or_both_below_1_30_is_an_error_at_the_engine_with_a_fix(engine: str) -> None:
    path = CLUSTERS / "tke-l20-t4" / "cluster.yaml"
    text = path.read_text(encoding="utf-8").replace('kubernetesVersion: "1.30"', 'kubernetesVersion: "1.29"')
    text = text.replace("    timeoutSeconds: 3\n", f"    timeoutSeconds: 3\n    engine: {engine}\n")
    line = text.splitlines().index(f"    engine: {engine}") + 1
    result = load_policy(text, filename=str(path))
    (error,) = [d for d in result.diagnostics if d.severity == "error"]
    assert (error.code, error.path) == ("version-unsupported-feature", ("spec", "admission", "engine"))
    assert error.span is not None and error.span.line == line
    assert "1.30" in error.message and "1.29" in error.message
    assert error.hint == "set admission.engine: webhook, or target kubernetesVersion 1.30 or newer"
    fixed = load_policy(text.replace(f"engine: {engine}", "engine: webhook"), filename=str(path))
    assert fixed.ok


def every_vap_expression(objects: list[Obj]) -> list[str]:
    return [e for o in objects if o["kind"] == "ValidatingAdmissionPolicy" for e in expressions_of(o)]


@pytest.mark.parametrize("cluster", CLUSTER_NAMES)
def test_every_policy_in_the_tree_uses_only_cel_its_kubernetes_version_accepts(example_policy: Any,
                                                                               cluster: str) -> None:
    # gpupolicy's policies and the node-label reconciler's: compiled as the API server at the spec's version, and
    # at the first version that has ValidatingAdmissionPolicy, would accept a new expression.
    policy = example_policy(cluster)
    expressions = every_vap_expression(tree_objects(policy))
    assert expressions
    for minor in sorted({policy.spec.kubernetes_minor, VAP_MINOR}):
        for expression in expressions:
            cel_vap.compile_in(expression, minor)


def literal_type(node: cel_cost.Node) -> str | None:
    """The type of a literal built of constants ("?" inside an empty collection); None for anything computed,
    whose type the API server's checker works out (dyn for whatever reads the object)."""
    if node.kind == "const":
        return type(node.value).__name__
    if node.kind == "list":
        return _joined("list", [literal_type(a) for a in node.args])
    if node.kind == "map":
        keys = _joined("", [literal_type(k) for k, _, _ in node.entries])
        return _joined(f"map<{keys}>", [literal_type(v) for _, v, _ in node.entries])
    return None


def _joined(kind: str, types: list[str | None]) -> str:
    known = [t for t in types if t is not None]
    found = "?"
    for each in known:
        unified = unify(found, each)
        assert unified is not None, f"a {kind} literal mixes {sorted(set(known))}"
        found = unified
    return f"{kind}<{found}>" if kind else found


def children(node: cel_cost.Node) -> list[cel_cost.Node]:
    return [*([node.target] if node.target else []), *node.args,
            *(part for k, v, _ in node.entries for part in (k, v)),
            *(v for v in node.comprehension.values() if isinstance(v, cel_cost.Node))]


def literals(node: cel_cost.Node) -> list[cel_cost.Node]:
    return [*([node] if node.kind in ("list", "map") else []), *(n for c in children(node) for n in literals(c))]


@pytest.mark.parametrize("cluster", CLUSTER_NAMES)
def test_every_list_and_map_literal_of_every_policy_is_homogeneous(example_policy: Any, cluster: str) -> None:
    # HomogeneousAggregateLiterals is always on in the API server's CEL (cel-monitoring.md §1.3): every element of
    # a literal, at any depth and in any expression, has one type.
    policy = example(cluster)  # engine both: every policy gpupolicy writes, the node-label reconciler's included
    found = 0
    for expression in every_vap_expression(tree_objects(policy)):
        for node in literals(cel_cost.parse(expression)):
            literal_type(node)
            found += 1
    assert found > 0


def test_the_literal_check_refuses_mixed_elements_at_any_depth() -> None:
    for mixed in ('["a", 1]', '{"a": {"b": 1, "c": "d"}}', '[[1], ["x"]]', '{1: "a", "b": "c"}'):
        with pytest.raises(AssertionError, match="mixes"):
            for node in literals(cel_cost.parse(f"{mixed} == {mixed}")):
                literal_type(node)
    for fine in ('{"a": [], "b": ["x"]}', '[object.a, 1]', '[[1], []]'):
        for node in literals(cel_cost.parse(f"{fine} == {fine}")):
            literal_type(node)


# ---------------------------------------------------------------- what only the webhook decides, said where users read


def report(policy: ClusterGPUPolicy) -> str:
    return " ".join(compile_policy(policy)["REPORT.md"].decode().split())


def test_with_vap_alone_the_report_names_every_check_not_enforced_and_the_estimated_cost(example_policy: Any) -> None:
    policy = example_policy("h20-mig")
    assert policy.spec.admission_engine == "vap"
    text = report(policy)
    (line,) = [part for part in text.split("- ") if part.startswith("Not enforced without the webhook")]
    for rule in admission_policy.NOT_COMPILED:
        assert rule in line, rule
    for case, _ in admission_policy.NOT_DECIDED:
        assert case in line, case
    for what in admission_policy.WEBHOOK_ONLY:
        assert what in line, what
    estimates = [estimate_policy(o, next(p.path for p in admission_policy.PATHS if f"-{p.name}-" in o["metadata"]
                                         ["name"]))
                 for o in render_admission_policies(resolve(policy)) if o["kind"] == "ValidatingAdmissionPolicy"]
    largest = max(e.largest[1] for e in estimates)
    assert f"{largest:,} of the {PER_CALL_LIMIT:,}" in text
    assert f"at most {max(e.total for e in estimates):,} of its {POLICY_BUDGET:,}" in text


def test_beside_the_webhook_the_report_says_what_only_the_webhook_decides(example_policy: Any) -> None:
    text = report(example_policy("mixed-fleet"))
    assert "Not enforced without the webhook" not in text
    (line,) = [part for part in text.split("- ") if part.startswith("Only the webhook decides the rules")]
    assert all(rule in line for rule in admission_policy.NOT_COMPILED)
    assert all(case in line for case, _ in admission_policy.NOT_DECIDED)
    below = report(example_policy("mixed-fleet", ('kubernetesVersion: "1.31"', 'kubernetesVersion: "1.29"')))
    assert "the webhook enforces every rule (admission.engine: webhook)" in below
    assert "Estimated CEL cost" not in below


def test_the_documentation_gives_each_rule_and_case_left_to_the_webhook_its_row() -> None:
    doc = (ROOT / "docs" / "validating-admission-policy.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip() for line in doc.splitlines() if line.startswith("| ")}
    for rule in admission_policy.NOT_COMPILED:
        assert any(f"`{rule}`" in row for row in rows), rule
    for case, _ in admission_policy.NOT_DECIDED:
        assert case in rows, case


def calls(node: cel_cost.Node) -> set[str]:
    return ({node.name} if node.kind == "call" else set()) | {name for c in children(node) for name in calls(c)}


def test_every_kubernetes_library_function_the_policies_call_is_checked_against_its_documentation() -> None:
    used = {name for cluster in CLUSTER_NAMES for expression in every_vap_expression(tree_objects(example(cluster)))
            for name in calls(cel_cost.parse(expression))}
    library = used & set(cel_vap.LIBRARY)
    assert library >= {"quantity", "isQuantity", "asInteger", "sum", "max", "indexOf", "join"}
    documented = " ".join(expression for _, expression, _ in DOCUMENTED)
    for name in library:
        assert f"{name}(" in documented, f"{name}() has no example of its documentation in tests/test_cel_vap.py"


def test_a_fleet_whose_estimate_is_over_the_api_servers_limit_is_told_what_failure_policy_then_does() -> None:
    # 60 more time-sliced classes like mixed-fleet's t4-dev: every class widens the literals each expression walks.
    text = (CLUSTERS / "mixed-fleet" / "cluster.yaml").read_text(encoding="utf-8")
    wide = text.replace("  nodeClasses:\n", "  nodeClasses:\n" + "".join(
        f"    - name: t4-{i}\n      nodeSelector: {{node-pool: t4-{i}}}\n      nodes: 1\n"
        f"      gpu: {{model: T4, count: 1}}\n      sharing:\n        timeSlicing: {{replicas: 4}}\n"
        for i in range(60)), 1)
    for engine, failure, outcome in (("both", "Ignore", "admits it unchecked by the policies (the webhook still "
                                      "decides)"), ("vap", "Fail", "refuses it")):
        edited = wide.replace("  admission:\n", f"  admission:\n    engine: {engine}\n    failurePolicy: {failure}\n")
        result = load_policy(edited, filename="wide.yaml")
        assert result.ok and result.policy is not None, [d.message for d in result.diagnostics]
        assert f"That is over the API server's limit: a large pod may run out of budget, and failurePolicy " \
               f"{failure} then {outcome}." in report(result.policy)
    assert "over the API server's limit" not in report(example("mixed-fleet"))


# ---------------------------------------------------------------- workload custom resources


def test_a_knative_service_is_matched_by_the_template_policies_and_denied_like_the_engine_denies_it() -> None:
    path = DENIED / "knative-service-coreweave-vllm-gpu-class-dev-on-mixed-fleet.yaml"
    (service,) = workload_fixtures.documents(path)
    labels = workload_fixtures.namespace_labels(workload_fixtures.header(path))
    assert assert_same("mixed-fleet", service, namespace="apps", labels=labels) == {
        "tenant-sharing-mode-denied": "error"}
    _, objects = compiled("mixed-fleet")
    assert cel_verdict(objects, service, namespace="apps", labels=labels).findings == {
        "tenant-sharing-mode-denied": "error"}


def test_templates_behind_a_wildcard_or_outside_a_plain_pod_spec_are_left_to_the_webhook() -> None:
    path = DENIED / "lws-vllm-gpu-leader-worker-dev-on-mixed-fleet.yaml"
    (lws,) = workload_fixtures.documents(path)
    _, objects = compiled("mixed-fleet")
    assert not any(matches(p, lws, "CREATE", "apps") for p in objects if p["kind"] == "ValidatingAdmissionPolicy")


# ---------------------------------------------------------------- a DRA pool without the extended-resource bridge


@pytest.mark.parametrize(("namespace", "pinned", "rule"), [
    ("inference", {}, "gpu-request-unsatisfiable"),  # the time-sliced L4s offer nvidia.com/gpu, not MIG devices
    ("inference", {"node-pool": "a100-mig"}, "gpu-request-unsatisfiable"),
    ("sandbox", {}, "gpu-request-unsatisfiable"),
])
def test_a_mig_request_where_the_mig_class_is_claimed_through_dra_is_unsatisfiable_not_a_strategy_mismatch(
        namespace: str, pinned: dict[str, str], rule: str) -> None:
    # dra-mixed's a100-mig runs MIG mixed, but on Kubernetes 1.34 without DRAExtendedResource only claims reach its
    # devices: the engine and the policies both say the request cannot be met, not that the strategy is wrong
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer"},
           "spec": {**({"nodeSelector": pinned} if pinned else {}), "containers": [
               {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}}}]}}
    found = assert_same("dra-mixed", pod, namespace=namespace, labels={"kubernetes.io/metadata.name": namespace})
    assert sorted(found) == [rule]
