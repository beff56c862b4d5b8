"""The DRA pool of examples/clusters/dra-mixed inside a real kube-apiserver (v1.34: resource.k8s.io/v1 GA): its
DeviceClasses stored, and the claims' ValidatingAdmissionPolicies, compiled by the server, denying a template of a
DeviceClass the namespace's tenant may not use and NVIDIA's own class, and admitting an allowed one.

The template is NVIDIA's demo (tests/fixtures/dra/README.md) pointed at the tree's classes; requests are dry runs."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_api import KubeAPI, running_api_server
from kube_cases import EXAMPLES, documents, ensure_namespace, poll

pytestmark = [pytest.mark.kube_api, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dra"
H100 = "h100-train.exclusive.gpupolicy.dev"


def template(device_class: str, namespace: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((FIXTURES / "gpu-test1.yaml").read_text(encoding="utf-8"))
    found = copy.deepcopy(next(d for d in docs if d and d["kind"] == "ResourceClaimTemplate"))
    found["metadata"] = {"name": "probe", "namespace": namespace}
    found["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = device_class
    return found


def send(api: KubeAPI, obj: dict[str, Any]) -> Any:
    path = f"/apis/resource.k8s.io/v1/namespaces/{obj['metadata']['namespace']}/resourceclaimtemplates?dryRun=All"
    return api.request("POST", path, obj)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    with running_api_server(tmp_path_factory.mktemp("dra-claims")) as running:
        for namespace in ("inference", "research", "sandbox", "training"):
            ensure_namespace(running, namespace, {})
        objects = [o for o in documents(sorted((EXAMPLES / "dra-mixed" / "out" / "dra").glob("*.yaml")))
                   if o["kind"] != "Kustomization"]
        running.kubectl("apply", "--server-side", "--field-manager=gpupolicy", "-f", "-",
                        input=yaml.safe_dump_all(objects, sort_keys=True))
        # Admission configuration takes effect through informers: wait until NVIDIA's class is refused.
        poll(lambda: True if send(running, template("gpu.nvidia.com", "research")).status == 403 else None,
             what="the claims' policies to take effect")
        yield running


def test_the_device_classes_are_stored_as_compiled(api: KubeAPI) -> None:
    stored = api.request("GET", f"/apis/resource.k8s.io/v1/deviceclasses/{H100}").body
    assert stored["spec"]["selectors"][0]["cel"]["expression"].startswith("device.driver == 'gpu.nvidia.com'")


def test_a_template_of_a_class_the_tenant_may_use_is_admitted(api: KubeAPI) -> None:
    answer = send(api, template(H100, "research"))
    assert answer.status == 201, answer.body


def test_a_template_of_a_class_the_tenant_may_not_use_is_denied_naming_what_it_may_use(api: KubeAPI) -> None:
    answer = send(api, template(H100, "sandbox"))
    assert answer.status == 403, answer.body
    assert "[dra-class-denied]" in answer.body["message"] and "outside none" in answer.body["message"]


def test_nvidias_own_class_is_denied(api: KubeAPI) -> None:
    answer = send(api, template("gpu.nvidia.com", "research"))
    assert answer.status == 403 and H100 in answer.body["message"], answer.body
