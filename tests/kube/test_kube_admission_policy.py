"""The compiled ValidatingAdmissionPolicies inside a real kube-apiserver: it compiles them (type-checking their CEL
against its own libraries and estimating each expression's cost, refusing any over its limit), and its own
admission plugin judges every case of every example's admission suite.

Its verdicts are compared with the CEL emulation the fast tests use (tests/cel_vap.py through
tests/compiler/test_admission_policy.py's `cel_verdict`, itself checked against the rule engine there) and with
the suite's expectations (the engine's verdict, which `gpupolicy test` checks): the real server is the referee.

Two passes per example, each on its own API server (the policies of the four examples share names): the
committed bindings (Deny), where the API server returns the message of the first failing validation only; then
the same bindings switched to Warn, where it returns every failing validation's message as a warning.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import cel_vap
import pytest
import yaml
from kube_api import Environments, KubeAPI, running_api_server
from kube_cases import CLUSTERS, EXAMPLES, Case, Obj, cases, documents, poll, prepare, send

pytestmark = [pytest.mark.kube_api, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path) -> ModuleType:
    # the emulation's parity helpers live in a test module (a plain file, not a package): load it by path
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


emulation = _load("kube_vap_emulation", ROOT / "tests" / "compiler" / "test_admission_policy.py")

VAP_DENIED = re.compile(r"ValidatingAdmissionPolicy '(?P<policy>[^']+)' with binding '(?P<binding>[^']+)' "
                        r"denied request: (?P<message>.*)$", re.DOTALL)
VAP_WARNED = re.compile(r"Validation failed for ValidatingAdmissionPolicy '(?P<policy>[^']+)' with binding "
                        r"'(?P<binding>[^']+)': (?P<message>.*)$", re.DOTALL)
RULE = re.compile(r"^\[(?P<rule>[a-z-]+)\] ")
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"


def compiled_policies(cluster: str) -> list[Obj]:
    return documents(sorted((EXAMPLES / cluster / "out" / "admission").glob("validatingadmissionpolic*.yaml")))


_PROBE_POD = {"containers": [{"name": "main", "image": "registry.example/app:1",
                               "resources": {"limits": {"nvidia.com/gpu": "1000"}}}]}


def probe(api: KubeAPI) -> Any:
    """A Pod no class of any example can run (1000 whole GPUs), in a namespace of its own."""
    return send(api, Case("probe", 0, "probe", "CREATE", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "gpupolicy-probe"},
        "spec": _PROBE_POD}, None, "gpupolicy-probe", {}, {}))


def probe_templates(api: KubeAPI) -> Any:
    """The same pod as a Deployment's template: the policy judging pod templates is another policy, whose new
    binding takes effect on its own moment, so a switch is seen done only once both are."""
    return send(api, Case("probe", 0, "probe-templates", "CREATE", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "probe", "namespace": "gpupolicy-probe"},
        "spec": {"selector": {"matchLabels": {"app": "probe"}},
                 "template": {"metadata": {"labels": {"app": "probe"}}, "spec": _PROBE_POD}}},
        None, "gpupolicy-probe", {}, {}))


@contextlib.contextmanager
def cluster_api(cluster: str, directory: Path) -> Iterator[KubeAPI]:
    """An API server holding one example's namespaces, stored objects and compiled policies (Deny)."""
    with running_api_server(directory) as api:
        prepare(api, cluster, cases(cluster))
        api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": "gpupolicy-probe"}})
        # kubectl's server-side apply, as Argo CD and Flux apply the tree: the server validates each policy
        # (compiling every expression; no cost is bounded before a policy runs) and refuses it whole on any error
        applied = api.kubectl("apply", "--server-side", "--field-manager=gpupolicy-test", "-f", "-",
                              input="---\n".join(_yaml(o) for o in compiled_policies(cluster)))
        assert applied.stdout.count("serverside-applied") == len(compiled_policies(cluster)), applied.stdout
        poll(lambda: (probe(api).status == 403 and probe_templates(api).status == 403) or None,
             what=f"{cluster}'s policies to take effect")
        yield api


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environments[KubeAPI]]:
    pool = Environments(lambda cluster: cluster_api(cluster, tmp_path_factory.mktemp(f"vap-{cluster}")))
    yield pool
    pool.close()


def _yaml(obj: Obj) -> str:
    return yaml.safe_dump(obj, sort_keys=True)


def switch_bindings(api: KubeAPI, action: str) -> None:
    for binding in api.request("GET", BINDINGS).body["items"]:
        if binding["metadata"]["name"].startswith("gpupolicy-") and binding["spec"]["validationActions"] != [action]:
            binding["spec"]["validationActions"] = [action]
            answer = api.request("PUT", f"{BINDINGS}/{binding['metadata']['name']}", binding)
            assert answer.status == 200, answer.body
    expected = 403 if action == "Deny" else 201

    def in_effect() -> bool | None:
        answers = (probe(api), probe_templates(api))
        return True if all(a.status == expected and (action == "Deny" or a.warnings) for a in answers) else None

    poll(in_effect, what=f"the bindings to {action}")


WORKLOADS = {"pods", "replicationcontrollers", "deployments", "replicasets", "statefulsets", "daemonsets", "jobs",
             "cronjobs"}


def judges_workloads(policy: Obj) -> bool:
    return any(WORKLOADS & set(rule["resources"]) for rule in policy["spec"]["matchConstraints"]["resourceRules"])


def emulated(case: Case) -> Any:
    # the emulation evaluates the very objects the server got, the committed tree's policies and bindings, less
    # those that judge no workload (the guard of the tenant labels on Namespaces): it models the workload ones
    policies = [o for o in compiled_policies(case.cluster) if o["kind"] == "ValidatingAdmissionPolicy"]
    names = {p["metadata"]["name"] for p in policies if judges_workloads(p)}
    objects = tuple(o for o in compiled_policies(case.cluster)
                    if (o["metadata"]["name"] if o["kind"] == "ValidatingAdmissionPolicy" else o["spec"]["policyName"])
                    in names)
    return emulation.cel_verdict(objects, case.obj, namespace=case.namespace, labels=case.labels,
                                 operation=case.operation, old=case.old)


def params() -> list[Any]:
    return [pytest.param(case, id=case.id) for cluster in CLUSTERS for case in cases(cluster)]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_api_server_accepted_every_policy_with_its_bindings(servers: Environments[KubeAPI], cluster: str) -> None:
    api = servers.get(cluster)
    stored = {p["metadata"]["name"]: p for p in api.request("GET", POLICIES).body["items"]}
    expected = {o["metadata"]["name"]: o for o in compiled_policies(cluster) if o["kind"] ==
                "ValidatingAdmissionPolicy"}
    assert sorted(stored) == sorted(expected)
    for name, policy in expected.items():
        # nothing dropped or rewritten: every validation, variable and matchCondition came back as sent
        for key in ("validations", "variables", "matchConditions", "failurePolicy"):
            assert stored[name]["spec"].get(key) == policy["spec"].get(key), (name, key)


@pytest.mark.parametrize("case", params())
def test_the_api_servers_deny_verdict_is_the_emulations(servers: Environments[KubeAPI], case: Case) -> None:
    api = servers.get(case.cluster)
    switch_bindings(api, "Deny")
    answer = send(api, case)
    try:
        verdict = emulated(case)
    except cel_vap.Undecodable:
        # the emulation knows the API server cannot decode this object: it must refuse it before admission
        assert answer.status in (400, 422), answer.body
        return
    if answer.status == 422:
        # refused by the API server's own validation before any admission step (an amount like 1500m): the
        # engine denies it as invalid too, so such an object never runs either way
        assert not case.expect["allowed"] and "gpu-request-invalid" in case.expect["rules"], answer.message
        assert verdict.findings == {}, verdict.findings
        return
    denials = [m for m, (rule, severity) in zip(verdict.messages, _rules(verdict), strict=True)
               if severity == "error"]
    if denials:
        assert answer.status == 403, (answer.status, answer.body)
        denied = VAP_DENIED.search(answer.message)
        assert denied is not None, answer.message
        # the API server stops at the first failing validation of a policy: the emulation's first denial
        assert denied["message"] == denials[0]
        assert RULE.match(denied["message"])["rule"] in case.expect["rules"]  # type: ignore[index]
        assert not case.expect["allowed"]
    else:
        assert answer.status in (200, 201), (answer.status, answer.body)


@pytest.mark.parametrize("case", params())
def test_with_warn_bindings_every_failing_validation_is_the_emulations(servers: Environments[KubeAPI],
                                                                        case: Case) -> None:
    api = servers.get(case.cluster)
    switch_bindings(api, "Warn")
    answer = send(api, case)
    try:
        verdict = emulated(case)
    except cel_vap.Undecodable:
        assert answer.status in (400, 422), answer.body
        return
    if answer.status == 422:
        assert "gpu-request-invalid" in case.expect["rules"], answer.message
        return
    assert answer.status in (200, 201), (answer.status, answer.body)
    warned = [w["message"] for w in (VAP_WARNED.search(text) for text in answer.warnings) if w]
    # the API server drops a warning repeated word for word (k8s.io/apiserver pkg/warning): compare as sets
    assert sorted(set(warned)) == sorted(set(verdict.messages))
    rules = {RULE.match(m)["rule"] for m in warned}  # type: ignore[index]
    if verdict.undecided is False:
        # where CEL decides, the policies find what the engine finds (the suite's rules), rule for rule
        assert rules == set(case.expect["rules"]) - _webhook_only(), (rules, case.expect["rules"])
    else:
        assert rules <= set(case.expect["rules"])


def _rules(verdict: Any) -> list[tuple[str, str]]:
    found = [RULE.match(m)["rule"] for m in verdict.messages]  # type: ignore[index]
    return [(rule, verdict.findings[rule]) for rule in found]


def _webhook_only() -> set[str]:
    # rule ids the engine reports that have no CEL: what the webhook alone says (compiler/targets/admission_policy)
    return {r.id for r in emulation.RULES} - set(emulation.admission_policy.cel_rules())


#: The resource each example's largest workload asks for: one every class of the example knows the name of.
LARGEST_RESOURCE = {"h20-mig": "nvidia.com/mig-1g.12gb"}


def largest(kind: str, resource: str) -> Obj:
    """The costliest workload the compiler's cost envelope declares for CEL (compiler/targets/
    admission_policy_cost.py, as tests/compiler/test_admission_policy_cost.py builds it): 300 containers with
    63-character names, each asking for the resource (50 sidecars, then 50 plain init containers, then 200
    regular ones), with a nodeSelector, a required node-affinity term and tolerations to evaluate."""
    def container(name: str, **extra: Any) -> Obj:
        amounts = {resource: "1", "cpu": "100m"}
        return {"name": f"{name}-".ljust(63, "x"), "image": "app:1", **extra,
                "resources": {"limits": dict(amounts), "requests": dict(amounts)}}

    spec: Obj = {
        "initContainers": [container(f"init-{i}", **({"restartPolicy": "Always"} if i < 50 else {}))
                           for i in range(100)],
        "containers": [container(f"app-{i}") for i in range(200)],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["0"]}]}]}}}}
    metadata = {"name": f"largest-{kind.lower()}", "namespace": "gpupolicy-probe"}
    template = {"metadata": {"labels": {"app": "largest"}}, "spec": spec}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": kind, "metadata": metadata, "spec": spec}
    if kind == "Deployment":
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata,
                "spec": {"selector": {"matchLabels": {"app": "largest"}}, "template": template}}
    spec["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": kind, "metadata": metadata,
            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}}


@pytest.mark.parametrize("kind", ["Pod", "Deployment", "CronJob"])
@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_costliest_workload_is_decided_within_the_api_servers_runtime_cost_budget(
        servers: Environments[KubeAPI], cluster: str, kind: str) -> None:
    # The API server charges every expression as it runs and stops one over its budget with an error, which the
    # compiled failurePolicy then turns into an admission (Ignore) or a refusal that names no rule (Fail).  A
    # denial naming the rule that 300 GPUs on one node breaks shows every expression ran to its end.
    api = servers.get(cluster)
    switch_bindings(api, "Deny")
    obj = largest(kind, LARGEST_RESOURCE.get(cluster, "nvidia.com/gpu"))
    answer = send(api, Case(cluster, 0, obj["metadata"]["name"], "CREATE", obj, None, "gpupolicy-probe", {}, {}))
    assert answer.status == 403, (answer.status, answer.message[:2000])
    denied = VAP_DENIED.search(answer.message)
    assert denied is not None, answer.message[:2000]
    assert RULE.match(denied["message"]), denied["message"][:2000]
