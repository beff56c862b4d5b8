"""The tenancy guard (compiler/targets/tenancy_guard.py) on the real API server, sent by identities of their own
(tests/kube_api.py IDENTITIES: static tokens, so request.userInfo is the API server's): mixed-fleet's guard and
binding as compiled, a role that lets tenants and the GitOps controllers create and relabel namespaces (what a
self-service platform grants), and then the acceptance cases of issue 35 as real requests.  Each verdict is also
the CEL emulation's (tests/cel_vap.py, which tests/compiler/test_tenancy_guard.py runs over many more cases)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import cel_vap
import pytest
from kube_api import IDENTITIES, KubeAPI
from kube_cases import EXAMPLES, Obj, documents, poll

pytestmark = pytest.mark.kube_api

GUARD = "gpupolicy-tenant-labels.gpupolicy.dev"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
ROLE = "gpupolicy-test-namespace-editor"
#: mixed-fleet's managers (admission.tenancy: gitOps argocd), as the guard's message names them
MANAGERS = "group system:masters; service account argocd/argocd-application-controller"
NON_MANAGERS = ("tenant-person", "tenant-service-account", "flux")  # flux applies nothing in an Argo CD tree
_names = itertools.count()


def compiled_guard() -> list[Obj]:
    admission = EXAMPLES / "mixed-fleet" / "out" / "admission"
    return documents([admission / f"validatingadmissionpolicy-{GUARD}.yaml",
                      admission / f"validatingadmissionpolicybinding-{GUARD}.yaml"])


def subject(name: str) -> Obj:
    username = IDENTITIES[name].username
    if username.startswith("system:serviceaccount:"):
        namespace, account = username.removeprefix("system:serviceaccount:").split(":")
        return {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": username}


def create_or_replace(api: KubeAPI, collection: str, obj: Obj) -> None:
    answer = api.request("POST", collection, obj)
    if answer.status == 409:
        current = api.request("GET", f"{collection}/{obj['metadata']['name']}").body
        answer = api.request("PUT", f"{collection}/{obj['metadata']['name']}",
                             {**obj, "metadata": {**obj["metadata"], "resourceVersion":
                                                  current["metadata"]["resourceVersion"]}})
    assert answer.status in (200, 201), answer.body


@pytest.fixture(scope="module")
def guarded(kube_api: KubeAPI) -> Iterator[KubeAPI]:
    create_or_replace(kube_api, f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"],
                   "verbs": ["get", "list", "create", "update", "patch"]}]})
    create_or_replace(kube_api, f"{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        "subjects": [subject(name) for name in sorted(IDENTITIES)]})
    policy, binding = compiled_guard()
    create_or_replace(kube_api, f"{ADMISSION}/validatingadmissionpolicies", policy)
    create_or_replace(kube_api, f"{ADMISSION}/validatingadmissionpolicybindings", binding)
    # the guard takes effect through the API server's informers: wait until a non-manager's relabel is refused
    # (a new value each time: a relabel that went through before would leave the next one no change to judge)
    probe, values = namespace_with(kube_api, {}), itertools.count()
    poll(lambda: relabel(kube_api, probe, {"gpu-tier": f"probe-{next(values)}"}, "tenant-person").status == 403
         or None, what="the tenancy guard to take effect")
    yield kube_api
    for path in (f"{ADMISSION}/validatingadmissionpolicybindings/{GUARD}",
                 f"{ADMISSION}/validatingadmissionpolicies/{GUARD}",
                 f"{RBAC}/clusterrolebindings/{ROLE}", f"{RBAC}/clusterroles/{ROLE}"):
        assert kube_api.request("DELETE", path).status == 200


def namespace(name: str, labels: dict[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def namespace_with(api: KubeAPI, labels: dict[str, str]) -> str:
    """A namespace of its own, made by the admin (a manager) with these labels."""
    name = f"guard-{next(_names)}"
    answer = api.request("POST", "/api/v1/namespaces", namespace(name, labels))
    assert answer.status == 201, answer.body
    return name


def relabel(api: KubeAPI, name: str, labels: dict[str, str | None], identity: str) -> Any:
    """A merge patch of the namespace's labels (a value None removes the label), as `identity`."""
    return api.request("PATCH", f"/api/v1/namespaces/{name}", {"metadata": {"labels": labels}},
                       content_type="application/merge-patch+json", identity=identity)


def denial(answer: Any, name: str) -> str:
    """The guard's own message out of the API server's denial of a request on namespace `name`."""
    assert answer.status == 403 and answer.body["reason"] == "Forbidden", answer.body
    prefix = f'namespaces "{name}" is forbidden: ValidatingAdmissionPolicy \'{GUARD}\' with binding \'{GUARD}\' ' \
        "denied request: "
    assert answer.message.startswith(prefix), answer.message
    return str(answer.message).removeprefix(prefix)


def emulated(old: Obj | None, new: Obj, identity: str) -> list[str]:
    """What the CEL emulation says of the same request: the messages of the failing validations."""
    user = {"username": IDENTITIES[identity].username,
            "groups": [*IDENTITIES[identity].groups, "system:authenticated"]}
    result = cel_vap.evaluate_policy(compiled_guard()[0], object=new, old_object=old,
                                     operation="CREATE" if old is None else "UPDATE", user_info=user)
    return [d.message for d in result.decisions] if result.matched else []


def stored(api: KubeAPI, name: str) -> Obj:
    found: Obj = api.request("GET", f"/api/v1/namespaces/{name}").body
    return found


def update_case(api: KubeAPI, before: dict[str, str], change: dict[str, str | None],
                identity: str) -> tuple[str, Any, list[str]]:
    """An UPDATE as `identity` of a new namespace: its name, the answer, and what the emulation says of the same
    old and new objects."""
    name = namespace_with(api, before)
    old = stored(api, name)
    answer = relabel(api, name, change, identity)
    labels = {**old["metadata"]["labels"], **change}
    new = {**old, "metadata": {**old["metadata"], "labels": {k: v for k, v in labels.items() if v is not None}}}
    return name, answer, emulated(old, new, identity)


@pytest.mark.parametrize("identity", NON_MANAGERS)
def test_a_non_manager_adding_gpu_tier_prod_is_denied_naming_key_tenant_and_managers(guarded: KubeAPI,
                                                                                      identity: str) -> None:
    name, answer, emulation = update_case(guarded, {"team": "a"}, {"gpu-tier": "prod"}, identity)
    message = denial(answer, name)
    assert message == (f"[tenant-label-guarded] Namespace {name}: adding gpu-tier=prod would move it from no tenant "
                       "(admission.defaultAllow applies) to tenant prod; only the tenancy managers may add, change or "
                       f"remove gpu-tier ({MANAGERS}; admission.tenancy in the cluster spec)")
    assert [message] == emulation


@pytest.mark.parametrize(("before", "change", "says"), [
    ({"gpu-tier": "research"}, {"gpu-tier": "prod"},
     "changing gpu-tier from research to prod would move it from tenant research to tenant prod; "),
    ({"gpu-tier": "research"}, {"gpu-tier": None},
     "removing gpu-tier (it was research) would move it from tenant research to no tenant "
     "(admission.defaultAllow applies); "),
], ids=["change", "remove"])
def test_a_non_manager_changing_or_removing_the_label_is_denied(guarded: KubeAPI, before: dict[str, str],
                                                                change: dict[str, str | None], says: str) -> None:
    name, answer, emulation = update_case(guarded, before, change, "tenant-person")
    message = denial(answer, name)
    assert says in message and message.endswith(f"({MANAGERS}; admission.tenancy in the cluster spec)")
    assert [message] == emulation
    assert stored(guarded, name)["metadata"]["labels"]["gpu-tier"] == "research"


def test_a_non_manager_creating_a_namespace_with_the_label_is_denied(guarded: KubeAPI) -> None:
    name = f"guard-{next(_names)}"
    answer = guarded.request("POST", "/api/v1/namespaces", namespace(name, {"gpu-tier": "prod"}),
                             identity="tenant-service-account")
    message = denial(answer, name)
    assert message.startswith(f"[tenant-label-guarded] Namespace {name}: adding gpu-tier=prod would put it in "
                              "tenant prod; ")
    # the emulation sees the namespace as admission does: with the name label the API server defaults on decode
    new = namespace(name, {"gpu-tier": "prod", "kubernetes.io/metadata.name": name})
    assert [message] == emulated(None, new, "tenant-service-account")
    assert guarded.request("GET", f"/api/v1/namespaces/{name}").status == 404


@pytest.mark.parametrize("change", [{"gpu-tier": "prod"}, {"gpu-tier": None}], ids=["change", "remove"])
def test_the_gitops_controller_may_relabel(guarded: KubeAPI, change: dict[str, str | None]) -> None:
    _, answer, emulation = update_case(guarded, {"gpu-tier": "research"}, change, "argocd")
    assert answer.status == 200, answer.body
    assert answer.body["metadata"]["labels"].get("gpu-tier") == change["gpu-tier"]
    assert emulation == []


def test_the_gitops_controller_may_create_a_tenant_namespace(guarded: KubeAPI) -> None:
    answer = guarded.request("POST", "/api/v1/namespaces", namespace(f"guard-{next(_names)}", {"gpu-tier": "prod"}),
                             identity="argocd")
    assert answer.status == 201, answer.body


@pytest.mark.parametrize(("before", "change"), [
    ({"gpu-tier": "research", "team": "a"}, {"team": "b"}),
    ({"gpu-tier": "research"}, {"owner": "dana"}),
    ({"gpu-tier": "research", "owner": "dana"}, {"owner": None}),
    ({"gpu-tier": "prod"}, {"gpu-tier": "prod"}),
], ids=["change-other", "add-other", "remove-other", "same-value"])
def test_a_non_manager_changing_other_labels_passes(guarded: KubeAPI, before: dict[str, str],
                                                    change: dict[str, str | None]) -> None:
    _, answer, emulation = update_case(guarded, before, change, "tenant-person")
    assert answer.status == 200, answer.body
    assert emulation == []


def test_a_non_manager_creating_a_namespace_without_the_label_passes(guarded: KubeAPI) -> None:
    answer = guarded.request("POST", "/api/v1/namespaces", namespace(f"guard-{next(_names)}", {"team": "a"}),
                             identity="tenant-person")
    assert answer.status == 201, answer.body
