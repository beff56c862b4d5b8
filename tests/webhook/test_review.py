"""The Flask-free admission core: parsing reviews, deciding what to evaluate, and building responses."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from webhook_support import (
    V1,
    V1BETA1,
    FakeDecision,
    FakeDiagnostic,
    ScriptedEngine,
    admission_review,
    container,
    fixture_names,
    read_fixture,
    workload,
)

from policy.admission import budget
from webhook import review


def parse(document: dict[str, Any]) -> review.Review:
    return review.parse_review(json.dumps(document).encode())


DENIAL = FakeDecision(
    allowed=False,
    diagnostics=(FakeDiagnostic("shared-gpu-request-above-one"), FakeDiagnostic("gpu-request-unsatisfiable")),
    message='Deployment ml/trainer: container "main" asks for 2 nvidia.com/gpu; fix: request 1',
)


# --- parsing ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", fixture_names())
def test_every_review_from_the_wild_parses_with_its_uid_version_and_operation(name: str) -> None:
    document = read_fixture(name)
    parsed = parse(document)
    assert (parsed.uid, parsed.api_version, parsed.operation) == (
        document["request"]["uid"], document["apiVersion"], document["request"]["operation"])
    assert parsed.object == document["request"]["object"]


def test_a_pod_created_by_a_replicaset_controller_is_named_by_its_generate_name() -> None:
    parsed = parse(read_fixture("kubewarden-pod-create-by-replicaset-controller-request-only.json"))
    assert parsed.name == ""
    assert parsed.object_ref == "Pod kubewarden/kubewarden-controller-767df6d6b-*"
    assert parsed.username == "system:serviceaccount:kube-system:replicaset-controller"


def test_a_review_without_a_namespace_names_the_object_alone() -> None:
    parsed = parse(read_fixture("kube-review-readme-deployment-create-dryrun.json"))
    assert (parsed.namespace, parsed.object_ref, parsed.dry_run) == ("", "Deployment nginx", True)


def test_the_v1beta1_scale_review_parses_with_its_subresource() -> None:
    parsed = parse(read_fixture("k8s-docs-v1beta1-deployment-scale-update.json"))
    assert (parsed.api_version, parsed.sub_resource, parsed.kind["kind"]) == (V1BETA1, "scale", "Scale")


def test_null_dry_run_and_missing_optional_fields_take_their_defaults() -> None:
    document = admission_review(workload("Pod"))
    for key in ("name", "namespace", "userInfo", "options"):
        del document["request"][key]
    document["request"]["dryRun"] = None
    parsed = parse(document)
    assert (parsed.name, parsed.namespace, parsed.username, parsed.dry_run) == ("", "", "", False)


MALFORMED: list[tuple[str, bytes, int, list[review.Cause]]] = [
    ("not json", b"apiVersion: v1", 400,
     [{"field": "", "message": "the body is not JSON: Expecting value: line 1 column 1 (char 0)"}]),
    ("not utf-8", b'{"uid": "\xff"}', 400,
     [{"field": "", "message": "the body is not JSON: 'utf-8' codec can't decode byte 0xff in position 9: "
                               "invalid start byte"}]),
    ("too deeply nested", b"[" * 100_000 + b"]" * 100_000, 400,
     [{"field": "", "message": "the body nests too deeply"}]),
    ("an array", b"[]", 422, [{"field": "", "message": "expected an AdmissionReview object, got an array"}]),
    ("an empty object", b"{}", 422, [
        {"field": "apiVersion", "message": "expected one of admission.k8s.io/v1, admission.k8s.io/v1beta1, "
                                           "got None"},
        {"field": "kind", "message": "expected AdmissionReview, got None"},
        {"field": "request", "message": "expected an object, got null"},
    ]),
    ("a Pod, not a review", json.dumps(workload("Pod")).encode(), 422, [
        {"field": "apiVersion", "message": "expected one of admission.k8s.io/v1, admission.k8s.io/v1beta1, "
                                           "got 'v1'"},
        {"field": "kind", "message": "expected AdmissionReview, got 'Pod'"},
        {"field": "request", "message": "expected an object, got null"},
    ]),
]


def _review_with(**changes: Any) -> bytes:
    document = admission_review(workload("Pod"))
    for key, value in changes.items():
        if value is ...:
            del document["request"][key]
        else:
            document["request"][key] = value
    return json.dumps(document).encode()


MALFORMED += [
    ("no uid", _review_with(uid=...), 422,
     [{"field": "request.uid", "message": "expected a non-empty string, got null"}]),
    ("an empty uid", _review_with(uid=""), 422,
     [{"field": "request.uid", "message": "expected a non-empty string, got a string"}]),
    ("wrong types everywhere", _review_with(uid=42, kind={"group": "", "version": "v1"}, operation="PATCH",
                                            namespace=["ml"], object=[], dryRun="yes"), 422, [
        {"field": "request.uid", "message": "expected a non-empty string, got an integer"},
        {"field": "request.kind.kind", "message": "expected a non-empty string, got null"},
        {"field": "request.operation", "message": "expected one of CREATE, UPDATE, DELETE, CONNECT, got 'PATCH'"},
        {"field": "request.namespace", "message": "expected a string, got an array"},
        {"field": "request.object", "message": "expected an object or null, got an array"},
        {"field": "request.dryRun", "message": "expected a boolean, got a string"},
    ]),
    ("no resource", _review_with(resource=...), 422, [
        {"field": "request.resource", "message": "expected an object with group, version and resource, got null"},
    ]),
    ("a CREATE without its object", _review_with(object=None), 422,
     [{"field": "request.object", "message": "a CREATE review must carry the object"}]),
]


@pytest.mark.parametrize(("case", "body", "code", "causes"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_body_is_refused_with_every_cause_listed(
    case: str, body: bytes, code: int, causes: list[review.Cause]
) -> None:
    with pytest.raises(review.MalformedReview) as caught:
        review.parse_review(body)
    assert (caught.value.code, list(caught.value.causes)) == (code, causes)


def _outcome(body: bytes, parse: Any) -> tuple[str, str]:
    """What a parser makes of body: the value's repr (types, key order and float signs included) or the error."""
    try:
        return "value", repr(parse(body))
    except (ValueError, RecursionError) as err:
        return type(err).__name__, str(err)


# Where orjson and json.loads are known to part (review.py), and what json.loads reads that RFC 8259 does not.
JSON_EDGES = [
    b"NaN", b"[Infinity, -Infinity]", b"1e400", b"-1.7976931348623159e308", b"2.4703282292062328e-324",
    b"0.1000000000000000055511151231257827", b"9007199254740993", b"-9223372036854775808", b"-9223372036854775809",
    b"18446744073709551615", b"18446744073709551616", b"123456789012345678901234567890", b"-0", b"-0.0",
    b'{"a": 1, "b": 2, "a": 3}', b'"\\ud800"', b'{"\\udfff": 1}', b'"\xed\xa0\x80"', b'"\xff"', b"\xef\xbb\xbf{}",
    json.dumps({"a": [1, "\u00e9"]}).encode("utf-16"), json.dumps([1]).encode("utf-32-be"), b'"\x01"', b"01",
    b"[1,]", b"", b" ", b'"\\u00e9\\uD83D\\uDE00"', b"[" * 899 + b"]" * 899, b"[" * 1000 + b"]" * 1000,
    b"{" + b'"k": {' * 950 + b"}" * 951, b'{"uid": ' + b"7" * 5000 + b"}",
]
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(codec=None, exclude_categories=())),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)
_json_bodies = st.one_of(
    st.builds(lambda v, ascii: json.dumps(v, ensure_ascii=ascii).encode("utf-8", "surrogatepass"), _json_values,
              st.booleans()),
    st.builds(lambda v, at, byte: (lambda b: b[:at] + bytes([byte]) + b[at + 1:])(json.dumps(v).encode()),
              _json_values, st.integers(0, 60), st.integers(0, 255)),
    st.binary(max_size=40),
)


@pytest.mark.parametrize("body", JSON_EDGES, ids=range(len(JSON_EDGES)))
def test_the_json_parse_gives_what_json_loads_gives_at_its_edges(body: bytes) -> None:
    assert _outcome(body, review._loads) == _outcome(body, json.loads)


@settings(max_examples=400, deadline=None)
@given(_json_bodies)
def test_the_json_parse_gives_what_json_loads_gives_on_any_body(body: bytes) -> None:
    assert _outcome(body, review._loads) == _outcome(body, json.loads)


def test_a_review_as_the_api_server_sends_it_is_parsed_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    # The reason the parse is fast (docs/performance.md): a real review must not fall back to json.loads.
    def refused(*_: Any, **__: Any) -> Any:
        raise AssertionError("json.loads was called")

    body = json.dumps(admission_review(workload("Deployment", container(gpus=1)))).encode()
    monkeypatch.setattr(review.json, "loads", refused)
    assert review.parse_review(body).kind["kind"] == "Deployment"


def test_a_delete_review_needs_no_object() -> None:
    parsed = parse(admission_review(None, old=workload("Pod"), operation="DELETE"))
    assert (parsed.operation, parsed.object, parsed.old_object is not None) == ("DELETE", None, True)


# --- deciding --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_without_asking_the_engine(operation: str) -> None:
    engine = ScriptedEngine(DENIAL)
    verdict = review.decide(parse(admission_review(None, old=workload("Pod"), operation=operation)), engine)
    assert (verdict.allowed, verdict.rules, verdict.skipped, engine.calls) == (
        True, (("none", "skip"),), f"operation {operation}", [])


def test_a_subresource_update_is_allowed_without_asking_the_engine() -> None:
    engine = ScriptedEngine(DENIAL)
    verdict = review.decide(parse(read_fixture("k8s-docs-v1beta1-deployment-scale-update.json")), engine)
    assert (verdict.allowed, verdict.skipped, engine.calls) == (True, "subresource scale", [])


def test_the_engine_gets_the_object_old_object_operation_and_tenant() -> None:
    old, new = workload("Deployment"), workload("Deployment", container(gpus=2))
    engine = ScriptedEngine()
    deadline = {"past": False}
    review.decide(parse(admission_review(new, old=old, operation="UPDATE")), engine, tenants=["research"],
                  expired=lambda: deadline["past"])
    [call] = engine.calls
    expired = call.pop("expired")
    assert call == {"obj": new, "tenants": ("research",), "operation": "UPDATE", "old_obj": old}
    assert expired() is False
    deadline["past"] = True
    assert expired() is True  # the engine is handed the caller's budget itself, not a copy of its state


def test_a_review_out_of_time_is_denied_never_allowed() -> None:
    class OutOfTime:
        def evaluate(self, obj: Any, **_: Any) -> Any:
            raise budget.OverBudget("searching for a fix")

    verdict = review.decide(parse(admission_review(workload("Pod", container(gpus=1)))), OutOfTime())
    assert not verdict.allowed and verdict.code == 403
    assert verdict.rules == ((review.BUDGET_RULE, "deny"),)
    assert "review budget (the time ran out while searching for a fix)" in verdict.message


def test_a_dry_run_review_gets_the_same_verdict_as_a_real_one() -> None:
    obj = workload("Deployment", container(gpus=2))
    real = review.decide(parse(admission_review(obj)), ScriptedEngine(DENIAL))
    dry = review.decide(parse(admission_review(obj, dry_run=True)), ScriptedEngine(DENIAL))
    assert dry == real
    assert not dry.allowed


def test_a_denial_is_a_403_forbidden_with_the_engine_message_and_every_rule_that_fired() -> None:
    verdict = review.decide(parse(admission_review(workload("Deployment"))), ScriptedEngine(DENIAL))
    assert verdict == review.Verdict(
        allowed=False, code=403, reason="Forbidden", message=DENIAL.message,
        rules=(("shared-gpu-request-above-one", "deny"), ("gpu-request-unsatisfiable", "deny")),
        causes=({"reason": "shared-gpu-request-above-one", "message": "", "field": ""},
                {"reason": "gpu-request-unsatisfiable", "message": "", "field": ""}),
    )


def test_each_denying_finding_is_a_status_cause_followed_by_its_fix_as_json() -> None:
    @dataclass(frozen=True)
    class Remedy:
        @property
        def quoted(self) -> dict[str, Any]:
            return {"edits": [], "jsonPatch": [{"op": "add", "path": "/spec/nodeSelector", "value": {"a": "b"}}]}

    decision = FakeDecision(allowed=False, diagnostics=(
        FakeDiagnostic("tenant-sharing-mode-denied", message="tenant dev may not use mps GPUs",
                       path=("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"), fix=Remedy()),
        FakeDiagnostic("shared-gpu-request-above-one", "warning", "two shared GPUs")))
    rv = parse(admission_review(workload("Pod")))
    answer = review.build_response(rv, review.decide(rv, ScriptedEngine(decision)))
    where = 'spec.containers[0].resources.limits["nvidia.com/gpu"]'
    assert answer["response"]["status"]["details"] == {"kind": "Pod", "name": "trainer", "causes": [
        {"reason": "tenant-sharing-mode-denied", "message": "tenant dev may not use mps GPUs", "field": where},
        {"reason": review.FIX_CAUSE, "field": where,
         "message": '{"edits":[],"jsonPatch":[{"op":"add","path":"/spec/nodeSelector","value":{"a":"b"}}]}'},
    ]}


def test_a_fix_holding_what_orjson_cannot_write_is_still_answered_as_json() -> None:
    @dataclass(frozen=True)
    class Remedy:
        @property
        def quoted(self) -> dict[str, Any]:
            return {"z": 2**70, "a": "é"}

    decision = FakeDecision(allowed=False, diagnostics=(FakeDiagnostic("gpu-request-invalid", fix=Remedy()),))
    verdict = review.decide(parse(admission_review(workload("Pod"))), ScriptedEngine(decision))
    assert json.loads(verdict.causes[1]["message"]) == {"a": "é", "z": 2**70}


def test_a_denial_without_an_engine_message_still_names_the_object_and_rules() -> None:
    decision = FakeDecision(allowed=False, diagnostics=(FakeDiagnostic("gpu-request-unsatisfiable"),))
    verdict = review.decide(parse(admission_review(workload("Job"))), ScriptedEngine(decision))
    assert verdict.message == "Job ml/trainer is denied by gpupolicy rule(s) gpu-request-unsatisfiable"


def test_warn_and_audit_rules_allow_with_warnings_and_audit_annotations() -> None:
    decision = FakeDecision(
        allowed=True,
        diagnostics=(FakeDiagnostic("shared-gpu-request-above-one", "warning"),
                     FakeDiagnostic("tenant-sharing-mode-denied", "info")),
        warnings=("container main asks for 2 shared nvidia.com/gpu",),
        audit_annotations={"tenant-sharing-mode-denied": "would deny: tenant dev may not use mps"},
    )
    verdict = review.decide(parse(admission_review(workload("Pod"))), ScriptedEngine(decision))
    assert verdict == review.Verdict(
        allowed=True, warnings=("container main asks for 2 shared nvidia.com/gpu",),
        audit_annotations={"tenant-sharing-mode-denied": "would deny: tenant dev may not use mps"},
        rules=(("shared-gpu-request-above-one", "warn"), ("tenant-sharing-mode-denied", "audit")),
    )


def test_an_allowed_object_with_no_findings_counts_as_allow_with_no_rule() -> None:
    verdict = review.decide(parse(admission_review(workload("Pod"))), ScriptedEngine())
    assert verdict == review.Verdict(allowed=True, rules=(("none", "allow"),))


def test_an_internal_error_fails_closed_with_code_500_and_an_incident_id() -> None:
    verdict = review.internal_error(parse(admission_review(workload("StatefulSet"))), "c0ffee")
    assert (verdict.allowed, verdict.code, verdict.reason, verdict.rules) == (
        False, 500, "InternalError", (("internal-error", "error"),))
    assert "StatefulSet ml/trainer" in verdict.message and "c0ffee" in verdict.message


# --- warnings --------------------------------------------------------------------------------------------


def test_warnings_lose_their_prefix_and_extra_whitespace_and_duplicates() -> None:
    assert review.fit_warnings(["Warning: a  b", "warning:a b", "  ", "c\nd"]) == ("a b", "c d")


def test_a_long_warning_is_cut_to_120_characters() -> None:
    (fitted,) = review.fit_warnings(["x" * 300])
    assert (len(fitted), fitted[-1]) == (120, "…")


def test_warnings_stop_before_4096_characters_in_total() -> None:
    fitted = review.fit_warnings([f"{i:03d}" + "w" * 97 for i in range(50)])
    assert len(fitted) == 40
    assert sum(map(len, fitted)) == 4000


# --- responding ------------------------------------------------------------------------------------------


def test_a_denial_response_echoes_the_uid_and_carries_a_403_status() -> None:
    rv = parse(admission_review(workload("Deployment"), uid="705ab4f5-6393-11e8-b7cc-42010a800002"))
    verdict = review.Verdict(allowed=False, code=403, reason="Forbidden", message="no", warnings=("w",))
    assert review.build_response(rv, verdict) == {
        "apiVersion": V1,
        "kind": "AdmissionReview",
        "response": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": "no"},
            "warnings": ["w"],
        },
    }


def test_a_v1beta1_review_is_answered_in_v1beta1_without_a_status_when_allowed() -> None:
    rv = parse(read_fixture("k8s-docs-v1beta1-deployment-scale-update.json"))
    assert review.build_response(rv, review.Verdict(allowed=True, audit_annotations={"k": "v"})) == {
        "apiVersion": V1BETA1,
        "kind": "AdmissionReview",
        "response": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True,
                     "auditAnnotations": {"k": "v"}},
    }


def test_the_review_core_imports_neither_flask_nor_prometheus() -> None:
    probe = ("import sys, webhook.review\n"
             "print([m for m in ('flask', 'werkzeug', 'prometheus_client', 'gunicorn') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
