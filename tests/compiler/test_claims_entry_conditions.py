"""Which entry of the compiled webhook configuration a pod reaches on dra-mixed: every pod at most once.

Each tenant's (and the default) resource entry has a claims entry beside it (compiler/targets/dra.py
claim_webhooks), with the same namespaces and path. A pod that names claims and also asks for nvidia.com/* is
judged whole (its claims too) by the resource entry, so the claims entry must not send it again: one review per
pod, not two (the API server calls every matching webhook). The rules and matchConditions are the committed
ones, evaluated by a CEL engine (tests/cel_k8s.py) as the API server does for a CREATE.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cel_k8s
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIGURATION = ROOT / "examples/clusters/dra-mixed/out/admission/validatingwebhookconfiguration-gpupolicy.yaml"
Obj = dict[str, Any]


def entries() -> list[Obj]:
    return yaml.safe_load(CONFIGURATION.read_text())["webhooks"]


def pairs() -> list[tuple[Obj, Obj]]:
    by_name = {entry["name"]: entry for entry in entries()}
    return [(by_name[name.removeprefix("claims.")], entry) for name, entry in by_name.items()
            if name.startswith("claims.")]


def sends(entry: Obj, obj: Obj, resource: str, group: str = "") -> bool:
    """Whether the API server calls this entry for a CREATE of obj (rules first, then every matchCondition)."""
    ruled = any(group in rule["apiGroups"] and resource in rule["resources"] and "CREATE" in rule["operations"]
                for rule in entry["rules"])
    request = {"operation": "CREATE", "resource": {"group": group, "version": "v1", "resource": resource}}
    return ruled and all(cel_k8s.evaluate(c["expression"], object=obj, request=request)
                         for c in entry["matchConditions"])


def pod(*, gpus: int = 0, claims: bool = False) -> Obj:
    container: Obj = {"name": "main", "image": "cuda"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    spec: Obj = {"containers": [container]}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "h100-exclusive"}]
        container["resources"] = {**container.get("resources", {}), "claims": [{"name": "gpu"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "research"}, "spec": spec}


def test_every_resource_entry_has_its_claims_entry() -> None:
    assert len(pairs()) == len(entries()) // 2 >= 2


@pytest.mark.parametrize(("case", "obj", "expected"), [
    ("asks for nvidia.com/gpu only", pod(gpus=1), (True, False)),
    ("names claims only", pod(claims=True), (False, True)),
    ("names claims and asks for nvidia.com/gpu", pod(gpus=1, claims=True), (True, False)),
    ("asks for nothing", pod(), (False, False)),
])
def test_a_pod_reaches_one_entry_of_each_pair_at_most(case: str, obj: Obj, expected: tuple[bool, bool]) -> None:
    for resource_entry, claims_entry in pairs():
        assert (sends(resource_entry, obj, "pods"), sends(claims_entry, obj, "pods")) == expected, \
            (case, resource_entry["name"])


def test_claims_and_templates_reach_the_claims_entry_only() -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": "research"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "h100-exclusive"}}]}}}}
    for resource_entry, claims_entry in pairs():
        assert not sends(resource_entry, template, "resourceclaimtemplates", "resource.k8s.io")
        assert sends(claims_entry, template, "resourceclaimtemplates", "resource.k8s.io")
