"""DRA claims and templates through the real server over HTTPS, on the tenant paths of examples/clusters/dra-mixed.

Objects are NVIDIA's demo specs (tests/fixtures/dra/README.md), reviewed as the API server sends them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_https import Server, start_server, stop_server
from webhook_support import admission_review, compiled_policy

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dra"
H100 = "h100-train.exclusive.gpupolicy.dev"


def template(device_class: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((FIXTURES / "gpu-test1.yaml").read_text(encoding="utf-8"))
    found = copy.deepcopy(next(d for d in docs if d and d["kind"] == "ResourceClaimTemplate"))
    found["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = device_class
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("dra-webhook"), compiled_policy("dra-mixed"))
    yield running
    assert stop_server(running) == 0, running.log_tail()


def review(server: Server, obj: dict[str, Any], tenant: str) -> dict[str, Any]:
    kind = {"group": "resource.k8s.io", "version": "v1", "kind": obj["kind"]}
    body = admission_review(obj, kind=obj["kind"])
    body["request"]["kind"] = kind
    body["request"]["resource"] = {**kind, "resource": obj["kind"].lower() + "s"}
    del body["request"]["resource"]["kind"]
    return server.review(body, f"/validate/tenant/{tenant}")


def test_a_template_of_a_class_the_tenant_may_use_is_admitted_over_https(server: Server) -> None:
    assert review(server, template(H100), "research")["allowed"] is True


def test_a_template_of_a_class_the_tenant_may_not_use_is_denied_over_https(server: Server) -> None:
    answer = review(server, template(H100), "dev")
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    assert "[dra-class-denied]" in answer["status"]["message"] and H100 in answer["status"]["message"]


def test_nvidias_own_class_is_denied_over_https(server: Server) -> None:
    answer = review(server, template("gpu.nvidia.com"), "research")
    assert answer["allowed"] is False and "[dra-class-not-compiled]" in answer["status"]["message"]
