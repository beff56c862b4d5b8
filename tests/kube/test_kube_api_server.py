"""The API server the real-API tests run against (tests/kube_api.py): the pinned release, authentication by the
static tokens only (the admin's, and the other identities', whom RBAC grants nothing), and the API groups the
compiled trees need, reachable from kubectl and the Python client."""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request

import kube_binaries
import pytest
from kube_api import IDENTITIES, KubeAPI

pytestmark = pytest.mark.kube_api


def test_the_server_is_the_pinned_release(kube_api: KubeAPI) -> None:
    answer = kube_api.request("GET", "/version")
    assert answer.status == 200
    version = answer.body
    release = os.environ.get("GPUPOLICY_KUBE_RELEASE", kube_binaries.DEFAULT_RELEASE)
    assert version["gitVersion"] == kube_binaries.pinned(release).kubernetes == kube_api.version
    assert (version["major"], version["minor"]) == tuple(kube_api.version.removeprefix("v").split(".")[:2])


def test_only_the_admin_token_gets_in(kube_api: KubeAPI) -> None:
    context = ssl.create_default_context(cafile=str(kube_api.ca_path))
    for headers in ({}, {"Authorization": "Bearer not-the-token"}):
        request = urllib.request.Request(f"{kube_api.url}/api/v1/namespaces", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, context=context, timeout=30)
        assert refused.value.code == 401, headers
    answer = kube_api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert answer.status == 201
    review = answer.body
    assert review["status"]["userInfo"]["username"] == "admin"
    assert "system:masters" in review["status"]["userInfo"]["groups"]


@pytest.mark.parametrize("name", sorted(IDENTITIES))
def test_each_other_identity_is_itself_and_granted_nothing(kube_api: KubeAPI, name: str) -> None:
    answer = kube_api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                              {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, identity=name)
    assert answer.status == 201, answer.body
    user = answer.body["status"]["userInfo"]
    assert user["username"] == IDENTITIES[name].username
    assert set(user["groups"]) == {*IDENTITIES[name].groups, "system:authenticated"}
    refused = kube_api.request("GET", "/api/v1/namespaces", identity=name)
    assert refused.status == 403 and refused.body["reason"] == "Forbidden"
    assert f'User "{IDENTITIES[name].username}" cannot list resource "namespaces"' in refused.message


def test_kubectl_reaches_it_through_the_kubeconfig(kube_api: KubeAPI) -> None:
    answer = json.loads(kube_api.kubectl("version", "-o", "json").stdout)
    assert answer["serverVersion"]["gitVersion"] == kube_api.version
    names = kube_api.kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert {"namespace/default", "namespace/kube-system"} <= set(names)


def test_the_python_client_reaches_it(kube_api: KubeAPI) -> None:
    from kubernetes import client

    with kube_api.client() as api:
        names = {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}
    assert {"default", "kube-system", "kube-public"} <= names


@pytest.mark.parametrize("group_version", ["admissionregistration.k8s.io/v1", "resource.k8s.io/v1", "apps/v1",
                                           "batch/v1", "policy/v1", "networking.k8s.io/v1",
                                           "apiextensions.k8s.io/v1"])
def test_the_groups_the_compiled_trees_use_are_served(kube_api: KubeAPI, group_version: str) -> None:
    answer = kube_api.request("GET", f"/apis/{group_version}")
    assert answer.status == 200, answer.body
    assert answer.body["groupVersion"] == group_version
