"""The fixes' JSON Patches, applied by the real API server to the objects they fix.

A denial's fix carries an RFC 6902 patch (`jsonPatch`) a client can send as is.  The fix corpus
(tests/policy/test_fix_corpus.py) applies it with tests/json_patch.py to objects that are never stored (generated
pods among them), which the API server cannot do: it patches stored objects only.  Here every example suite's denied
CREATE of a pod controller is stored (without admission: the session's server), and each of its fixes and their
alternatives is sent as `application/json-patch+json` with dryRun: the API server accepts every patch (each path
exists where the op needs it, and the patched object is still valid), the values land where the patch says, and
json_patch.py patches the stored object to the same values.  Pods and Jobs are left out: the API server refuses
any change of a stored Pod's resources or a Job's template, so their fixes apply to the manifest only."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from json_patch import apply_patch
from kube_api import KubeAPI
from kube_cases import CLUSTERS, EXAMPLES, Case, cases, collection, ensure_namespace, item

from policy.admission.engine import Engine
from policy.load import load_policy_or_raise
from policy.resolved.offers import build_admission_policy
from policy.resolved.resolve import resolve

pytestmark = pytest.mark.kube_api

Obj = dict[str, Any]


@cache
def engine(cluster: str) -> Engine:
    path = EXAMPLES / cluster / "cluster.yaml"
    return Engine(build_admission_policy(resolve(load_policy_or_raise(path.read_text(encoding="utf-8"),
                                                                      filename=str(path)))))


def patches(case: Case) -> list[list[Obj]]:
    """The jsonPatch of every fix of every finding the engine gives the case's object, alternatives included."""
    judge = engine(case.cluster)
    decision = judge.evaluate(case.obj, tenants=judge.tenants_for(case.labels, namespace=case.namespace))
    out = []
    for finding in decision.diagnostics:
        if finding.fix is not None:
            fix = finding.fix.to_dict()
            out += [f["jsonPatch"] for f in (fix, *fix.get("alternatives", ())) if f["jsonPatch"]]
    return out


#: Kinds whose pod template may change once stored.  A Pod's resources and a Job's template are immutable, so the
#: API server refuses any patch of them after creation: their fixes are for the manifest before it is created.
MUTABLE = {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "ReplicationController", "CronJob"}
#: An object the API server's own validation refuses (a GPU request without an equal limit) is never stored, so
#: nothing can be patched: such a case shows the webhook saying what the API server would
#: (tests/kube/test_kube_webhook.py).
NOT_STORABLE = {"gpu-request-invalid"}
DENIED = [case for cluster in CLUSTERS for case in cases(cluster)
          if not case.expect["allowed"] and case.operation == "CREATE" and case.kind in MUTABLE
          and not NOT_STORABLE & set(case.expect.get("rules", ())) and patches(case)]


def relocated(case: Case) -> Obj:
    """The case's object in a namespace of this test's (no admission configuration selects it)."""
    obj = json.loads(json.dumps(case.obj))
    obj["metadata"]["namespace"] = f"gpupolicy-fixes-{case.cluster}"
    return obj


def at(obj: Any, pointer: str) -> tuple[bool, Any]:
    """(found, value) at an RFC 6901 pointer."""
    for token in [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]:
        if isinstance(obj, list) and token.isdigit() and int(token) < len(obj):
            obj = obj[int(token)]
        elif isinstance(obj, dict) and token in obj:
            obj = obj[token]
        else:
            return False, None
    return True, obj


def same(mine: Any, theirs: Any) -> bool:
    """Equal, where a quantity written as a number comes back as its canonical string (1 -> "1")."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return mine.keys() <= theirs.keys() and all(same(v, theirs[k]) for k, v in mine.items())
    if isinstance(mine, list) and isinstance(theirs, list):
        return len(mine) == len(theirs) and all(same(a, b) for a, b in zip(mine, theirs, strict=True))
    return bool(mine == theirs or (isinstance(mine, int) and not isinstance(mine, bool) and theirs == str(mine)))


def test_the_corpus_holds_denials_of_every_example() -> None:
    assert len({case.cluster for case in DENIED}) >= 3 and len(DENIED) >= 8, [case.id for case in DENIED]


@pytest.mark.parametrize("case", DENIED, ids=[case.id for case in DENIED])
def test_every_fix_patch_is_applied_by_the_api_server_as_json_patch_applies_it(kube_api: KubeAPI,
                                                                               case: Case) -> None:
    obj = relocated(case)
    ensure_namespace(kube_api, obj["metadata"]["namespace"], {})
    kube_api.request("DELETE", item(obj))
    answer = kube_api.request("POST", collection(obj), obj)
    assert answer.status == 201, answer.body
    stored = answer.body
    for ops in patches(case):
        patched = kube_api.request("PATCH", f"{item(obj)}?dryRun=All", ops, content_type="application/json-patch+json")
        assert patched.status == 200, (ops, patched.message)
        ours = apply_patch(stored, ops)
        for op in ops:
            found, value = at(patched.body, op["path"])
            if op["op"] == "remove":
                assert not found or not same(at(stored, op["path"])[1], value), op
                continue
            assert found and same(op["value"], value), (op, value)
            assert same(at(ours, op["path"])[1], value), op
