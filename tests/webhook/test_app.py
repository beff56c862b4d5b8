"""The HTTP layer in-process (Flask test client): routes, errors, readiness, reloads, metrics and logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, jsonify
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from webhook_support import (
    V1BETA1,
    FakeDecision,
    FakeDiagnostic,
    ScriptedEngine,
    admission_review,
    compiled_policy,
    container,
    read_fixture,
    spec_text,
    workload,
)

from webhook import create_app
from webhook.app import EXTENSION, Webhook
from webhook.settings import Settings, SettingsError
from webhook.store import PolicyStore

TKE_POLICY = compiled_policy("tke-l20-t4").to_json()
WARN_POLICY = compiled_policy("tke-l20-t4", lambda t: t.replace("enforcement: enforce", "enforcement: warn"))
JSON = "application/json"
DENIAL = FakeDecision(
    allowed=False, diagnostics=(FakeDiagnostic("shared-gpu-request-above-one"),),
    message='Deployment ml/trainer: container "main" asks for 2 shared nvidia.com/gpu (rule '
            "shared-gpu-request-above-one); request 1",
)


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "admission-policy.json"
    path.write_text(TKE_POLICY)
    return path


@pytest.fixture
def app(policy_file: Path, engine: ScriptedEngine) -> Flask:
    store = PolicyStore(policy_file, interval_seconds=0, engine_factory=lambda policy: engine)
    return create_app(Settings(max_content_length=64 * 1024), store=store)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def webhook_of(app: Flask) -> Webhook:
    state: Webhook = app.extensions[EXTENSION]
    return state


def post(client: FlaskClient, document: Any, path: str = "/validate?timeout=3s") -> Any:
    return client.post(path, data=json.dumps(document), content_type=JSON)


def samples(app: Flask) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body = app.test_client().get("/metrics").get_data(as_text=True)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body) for s in family.samples
    }


# --- admission -------------------------------------------------------------------------------------------


def test_an_allowed_review_is_answered_200_with_its_uid_echoed(client: FlaskClient) -> None:
    response = post(client, admission_review(workload("Pod"), uid="b2f5a9d4-1"))
    assert response.status_code == 200
    assert response.json == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                             "response": {"uid": "b2f5a9d4-1", "allowed": True}}


def test_a_denied_review_is_answered_200_with_allowed_false_and_a_403_status(
    client: FlaskClient, engine: ScriptedEngine
) -> None:
    engine.decision = DENIAL
    response = post(client, admission_review(workload("Deployment", container(gpus=2)), uid="u-2"))
    assert response.status_code == 200
    assert response.json["response"] == {
        "uid": "u-2", "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": DENIAL.message,
                   "details": {"kind": "Deployment", "name": "trainer", "causes": [
                       {"reason": "shared-gpu-request-above-one", "message": "", "field": ""}]}},
    }


def test_the_default_entry_evaluates_with_no_tenant_and_a_tenant_entry_with_its_name(
    client: FlaskClient, engine: ScriptedEngine
) -> None:
    post(client, admission_review(workload("Pod")))
    post(client, admission_review(workload("Pod")), path="/validate/tenant/research?timeout=3s")
    assert [call["tenants"] for call in engine.calls] == [(), ("research",)]


def test_a_tenant_path_that_is_not_a_dns_label_is_not_found(client: FlaskClient) -> None:
    response = post(client, admission_review(workload("Pod")), path="/validate/tenant/Research_1")
    assert (response.status_code, response.json["reason"]) == (404, "NotFound")


def test_a_v1beta1_review_is_answered_in_v1beta1(client: FlaskClient, engine: ScriptedEngine) -> None:
    document = admission_review(workload("Pod"), api_version=V1BETA1)
    assert post(client, document).json["apiVersion"] == V1BETA1


def test_the_scale_subresource_is_allowed_without_evaluation(client: FlaskClient, engine: ScriptedEngine) -> None:
    engine.decision = DENIAL
    response = post(client, read_fixture("k8s-docs-v1beta1-deployment-scale-update.json"))
    assert response.json["response"] == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    assert engine.calls == []


def test_warnings_and_audit_annotations_reach_the_response(client: FlaskClient, engine: ScriptedEngine) -> None:
    engine.decision = FakeDecision(
        allowed=True, diagnostics=(FakeDiagnostic("shared-gpu-request-above-one", "warning"),),
        warnings=("Warning: " + "x" * 200,), audit_annotations={"shared-gpu-request-above-one": "2 > 1"},
    )
    body = post(client, admission_review(workload("Pod"))).json["response"]
    assert body["auditAnnotations"] == {"shared-gpu-request-above-one": "2 > 1"}
    assert [len(w) for w in body["warnings"]] == [120]
    assert not body["warnings"][0].lower().startswith("warning")


def test_with_the_real_engine_each_tenant_entry_applies_that_tenants_rules(tmp_path: Path) -> None:
    path = tmp_path / "admission-policy.json"
    path.write_text(compiled_policy("mixed-fleet").to_json())
    client = create_app(Settings(policy_file=path)).test_client()
    mig_pod = admission_review(workload("Pod", container(gpus=1, resource="nvidia.com/mig-1g.10gb")))
    verdicts = {path: post(client, mig_pod, path=path).json["response"]["allowed"]
                for path in ("/validate", "/validate/tenant/prod", "/validate/tenant/dev")}
    assert verdicts == {"/validate": False, "/validate/tenant/prod": True, "/validate/tenant/dev": False}


# --- malformed calls -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body", "status", "reason"),
    [
        ("text/plain", json.dumps(admission_review(workload("Pod"))), 415, "UnsupportedMediaType"),
        (None, json.dumps(admission_review(workload("Pod"))), 415, "UnsupportedMediaType"),
        (JSON, "", 400, "BadRequest"),
        (JSON, "{not json", 400, "BadRequest"),
        (JSON, "[]", 422, "Invalid"),
        (JSON, json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "request": {"uid": 7}}), 422, "Invalid"),
    ],
    ids=["text-plain", "no-content-type", "empty", "not-json", "not-a-review", "wrong-types"],
)
def test_a_malformed_call_is_a_4xx_with_a_json_status_never_a_500(
    client: FlaskClient, content_type: str | None, body: str, status: int, reason: str
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post("/validate", data=body, headers=headers)
    assert response.status_code == status
    assert response.is_json
    assert (response.json["kind"], response.json["code"], response.json["reason"]) == ("Status", status, reason)


def test_an_invalid_review_lists_every_cause(client: FlaskClient) -> None:
    document = admission_review(workload("Pod"))
    document["request"].pop("uid")
    document["request"]["operation"] = "PATCH"
    response = post(client, document)
    assert response.json["details"]["causes"] == [
        {"field": "request.uid", "message": "expected a non-empty string, got null"},
        {"field": "request.operation", "message": "expected one of CREATE, UPDATE, DELETE, CONNECT, got 'PATCH'"},
    ]


class _UnreadableStream:
    def read(self, *args: object) -> bytes:
        raise AssertionError("the body must not be read")

    readline = read


def test_a_body_over_the_limit_is_refused_with_413_before_it_is_read(client: FlaskClient) -> None:
    response = client.post(
        "/validate", content_type=JSON,
        environ_overrides={"CONTENT_LENGTH": str(64 * 1024 + 1), "wsgi.input": _UnreadableStream()},
    )
    assert (response.status_code, response.json["reason"]) == (413, "RequestEntityTooLarge")
    assert response.json["message"] == "the request body is larger than the 65536 bytes accepted"


def test_the_default_body_limit_is_the_api_servers_3_mib(policy_file: Path, engine: ScriptedEngine) -> None:
    app = create_app(Settings(), store=PolicyStore(policy_file, engine_factory=lambda policy: engine))
    assert app.config["MAX_CONTENT_LENGTH"] == 3 * 1024 * 1024


def test_get_on_validate_is_a_405_json_status_with_an_allow_header(client: FlaskClient) -> None:
    response = client.get("/validate")
    assert (response.status_code, response.json["reason"]) == (405, "MethodNotAllowed")
    assert "POST" in response.headers["Allow"]


def test_an_unknown_path_is_a_404_json_status(client: FlaskClient) -> None:
    assert client.post("/mutate").json["code"] == 404


# --- health and readiness --------------------------------------------------------------------------------


def test_readyz_reports_the_policy_in_force(client: FlaskClient, policy_file: Path) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert (response.json["cluster"], response.json["generation"]) == ("tke-prod", 1)


def test_without_a_valid_policy_readyz_and_validate_are_503_but_healthz_is_200(
    tmp_path: Path, engine: ScriptedEngine
) -> None:
    path = tmp_path / "admission-policy.json"
    path.write_text('{"version": "gpupolicy.dev/admission/v1"}')
    app = create_app(Settings(), store=PolicyStore(path, interval_seconds=0, engine_factory=lambda p: engine))
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert "is not a valid admission-policy" in ready.json["message"]
    assert post(client, admission_review(workload("Pod"))).status_code == 503
    path.write_text(TKE_POLICY)
    assert client.get("/readyz").status_code == 200


def test_once_draining_readyz_is_503_while_reviews_are_still_answered(app: Flask, client: FlaskClient) -> None:
    webhook_of(app).drain.begin()
    assert client.get("/readyz").status_code == 503
    assert client.get("/healthz").status_code == 200
    assert post(client, admission_review(workload("Pod"))).json["response"]["allowed"] is True


# --- policy reloads --------------------------------------------------------------------------------------


def test_a_changed_policy_file_is_loaded_and_an_invalid_one_keeps_the_last_good(
    app: Flask, client: FlaskClient, policy_file: Path
) -> None:
    policy_file.write_text(WARN_POLICY.to_json())
    assert client.get("/readyz").json["generation"] == 2
    assert webhook_of(app).store.current.policy == WARN_POLICY  # type: ignore[union-attr]
    policy_file.write_text("{")
    ready = client.get("/readyz")
    assert (ready.status_code, ready.json["generation"]) == (200, 2)
    assert samples(app)[("gpupolicy_policy_reload_failures_total", ())] == 1


def test_policy_info_follows_the_digest_of_the_policy_in_force(app: Flask, policy_file: Path) -> None:
    first = webhook_of(app).store.current.digest  # type: ignore[union-attr]
    policy_file.write_text(WARN_POLICY.to_json())
    found = samples(app)
    second = webhook_of(app).store.current.digest  # type: ignore[union-attr]
    info = {labels: value for (name, labels), value in found.items() if name == "gpupolicy_policy_info"}
    assert info == {(("cluster", "tke-prod"), ("digest", second)): 1.0}
    assert first != second
    assert found[("gpupolicy_policy_generation", ())] == 2


def test_a_spec_yaml_is_compiled_into_the_admission_policy(tmp_path: Path, engine: ScriptedEngine) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(spec_text("tke-l20-t4"))
    seen = []
    store = PolicyStore(spec, fmt="spec", engine_factory=lambda policy: seen.append(policy) or engine)
    create_app(Settings(), store=store)
    assert seen == [compiled_policy("tke-l20-t4")]


def test_an_app_needs_a_policy_file_or_a_spec() -> None:
    with pytest.raises(SettingsError, match="--policy"):
        create_app(Settings())


# --- metrics ---------------------------------------------------------------------------------------------


def test_decisions_are_counted_by_rule_outcome_kind_and_operation(
    app: Flask, client: FlaskClient, engine: ScriptedEngine
) -> None:
    post(client, admission_review(workload("Pod")))
    engine.decision = DENIAL
    post(client, admission_review(workload("Deployment")))
    post(client, admission_review(None, old=workload("Pod"), operation="DELETE"))
    found = samples(app)
    decisions = {labels: value for (name, labels), value in found.items()
                 if name == "gpupolicy_admission_decisions_total"}
    assert decisions == {
        (("kind", "Pod"), ("operation", "CREATE"), ("outcome", "allow"), ("rule", "none")): 1.0,
        (("kind", "Deployment"), ("operation", "CREATE"), ("outcome", "deny"),
         ("rule", "shared-gpu-request-above-one")): 1.0,
        (("kind", "Pod"), ("operation", "DELETE"), ("outcome", "skip"), ("rule", "none")): 1.0,
    }
    assert found[("gpupolicy_admission_duration_seconds_count", ())] == 3
    assert (("gpupolicy_admission_duration_seconds_bucket", (("le", "0.0005"),))) in found


def test_the_policy_generation_and_reload_failures_start_at_one_and_zero(app: Flask) -> None:
    found = samples(app)
    assert (found[("gpupolicy_policy_generation", ())],
            found[("gpupolicy_policy_reload_failures_total", ())]) == (1, 0)


def test_a_scrape_while_a_worker_creates_its_metrics_file_merges_the_written_files_and_skips_the_new_one(
    tmp_path: Path,
) -> None:
    import struct

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.mmap_dict import MmapedDict, mmap_key
    from prometheus_client.multiprocess import MultiProcessCollector

    from webhook.metrics import WorkerFiles

    written = MmapedDict(str(tmp_path / "counter_101.db"))
    written.write_value(mmap_key("gpupolicy_demo", "gpupolicy_demo_total", [], [], "demo"), 3.0, 0.0)
    written.close()
    (tmp_path / "counter_102.db").touch()  # a new worker's file, opened but not yet sized (MmapedDict.__init__)
    with pytest.raises(struct.error):  # what prometheus_client's own collector does with it
        MultiProcessCollector.merge([str(p) for p in sorted(tmp_path.glob("*.db"))])
    registry = CollectorRegistry()
    registry.register(WorkerFiles(tmp_path))
    assert "gpupolicy_demo_total 3.0" in generate_latest(registry).decode()


def test_two_apps_in_one_process_share_no_metrics_and_never_use_the_global_registry(
    app: Flask, client: FlaskClient, policy_file: Path, engine: ScriptedEngine
) -> None:
    other = create_app(Settings(), store=PolicyStore(policy_file, engine_factory=lambda policy: engine))
    post(client, admission_review(workload("Pod")))
    assert samples(app)[("gpupolicy_admission_duration_seconds_count", ())] == 1
    assert samples(other)[("gpupolicy_admission_duration_seconds_count", ())] == 0
    assert not [name for name in REGISTRY._names_to_collectors if name.startswith("gpupolicy")]


# --- the last-resort handler -----------------------------------------------------------------------------


def test_an_engine_crash_fails_closed_with_a_500_status_inside_a_200_answer(
    app: Flask, client: FlaskClient, engine: ScriptedEngine, caplog: pytest.LogCaptureFixture
) -> None:
    engine.error = KeyError("spec")
    response = post(client, admission_review(workload("Job"), uid="u-crash"))
    assert response.status_code == 200
    answer = response.json["response"]
    assert (answer["uid"], answer["allowed"], answer["status"]["code"], answer["status"]["reason"]) == (
        "u-crash", False, 500, "InternalError")
    found = samples(app)
    assert found[("gpupolicy_webhook_internal_errors_total", ())] == 1
    assert found[("gpupolicy_admission_decisions_total", (
        ("kind", "Job"), ("operation", "CREATE"), ("outcome", "error"), ("rule", "internal-error")))] == 1
    crash = next(r for r in caplog.records if r.levelno == logging.ERROR)
    assert "uid=u-crash" in crash.getMessage() and crash.exc_info is not None


def test_a_crash_before_the_review_is_parsed_still_denies_and_echoes_the_uid(
    app: Flask, client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> None:
        raise RuntimeError("store bug")

    monkeypatch.setattr(webhook_of(app).store, "maybe_refresh", broken)
    response = post(client, admission_review(workload("Pod"), uid="u-early"))
    assert response.status_code == 200
    assert response.json["response"]["uid"] == "u-early"
    assert response.json["response"]["allowed"] is False


def test_a_crash_outside_admission_is_a_json_500_status(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("metrics bug")

    monkeypatch.setattr(webhook_of(app).metrics, "render", broken)
    response = app.test_client().get("/metrics")
    assert (response.status_code, response.json["reason"]) == (500, "InternalError")


# --- logs ------------------------------------------------------------------------------------------------


@pytest.fixture
def info_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG, logger="gpupolicy"):
        yield caplog


def test_each_review_is_logged_with_uid_object_verdict_and_rules_but_never_its_contents(
    client: FlaskClient, engine: ScriptedEngine, info_logs: pytest.LogCaptureFixture
) -> None:
    engine.decision = DENIAL
    secret = {"name": "HF_TOKEN", "value": "hf_SECRETSECRET"}
    post(client, admission_review(workload("Deployment", container(gpus=2, env=[secret])), uid="u-log",
                                  dry_run=True))
    (line,) = [r.getMessage() for r in info_logs.records if r.getMessage().startswith("admission ")]
    assert line.startswith("admission uid=u-log kind=Deployment object=ml/trainer operation=CREATE dryRun=true "
                           "tenant=- verdict=deny code=403 rules=shared-gpu-request-above-one generation=1 "
                           "latency_ms=")
    assert "hf_SECRETSECRET" not in info_logs.text


def test_a_review_admitted_with_nothing_to_say_is_logged_at_debug_level_and_one_a_rule_fired_on_at_info(
    client: FlaskClient, engine: ScriptedEngine, info_logs: pytest.LogCaptureFixture
) -> None:
    audited = FakeDecision(allowed=True, diagnostics=(FakeDiagnostic("tenant-sharing-mode-denied", "info"),))
    warned = FakeDecision(allowed=True, diagnostics=(FakeDiagnostic("shared-gpu-request-above-one", "warning"),))
    for uid, decision in (("u-plain", FakeDecision()), ("u-audit", audited), ("u-warn", warned), ("u-deny", DENIAL)):
        engine.decision = decision
        post(client, admission_review(workload("Pod", container(gpus=1)), uid=uid))
    post(client, admission_review(workload("Pod", container(gpus=1)), uid="u-delete", operation="DELETE"))
    levels = {r.getMessage().split()[1]: r.levelname for r in info_logs.records
              if r.getMessage().startswith("admission uid=")}
    assert levels == {"uid=u-plain": "DEBUG", "uid=u-audit": "INFO", "uid=u-warn": "INFO", "uid=u-deny": "INFO",
                      "uid=u-delete": "DEBUG"}


def test_answers_are_written_as_flask_writes_them_and_what_orjson_cannot_write_still_is(client: FlaskClient) -> None:
    with client.application.app_context():
        assert jsonify({"b": 1, "a": ["é", None]}).get_data() == b'{"b":1,"a":["\xc3\xa9",null]}\n'
        assert json.loads(jsonify({"n": 2**70, 1: "x"}).get_data()) == {"n": 2**70, "1": "x"}


# --- settings --------------------------------------------------------------------------------------------


def test_settings_come_from_gpupolicy_variables_and_flags_win(tmp_path: Path) -> None:
    env = {"GPUPOLICY_POLICY": "/etc/gpupolicy/admission-policy.json", "GPUPOLICY_PORT": "9443",
           "GPUPOLICY_CERT_DIR": "/tls", "GPUPOLICY_DRAIN_SECONDS": "1.5", "GPUPOLICY_LOG_OBJECTS": "false",
           "PROMETHEUS_MULTIPROC_DIR": "/tmp/metrics"}
    settings = Settings.from_env(env, port=10443, workers=None)
    assert settings == Settings(
        policy_file=Path("/etc/gpupolicy/admission-policy.json"), cert_file=Path("/tls/tls.crt"),
        key_file=Path("/tls/tls.key"), port=10443, drain_seconds=1.5, metrics_dir=Path("/tmp/metrics"),
    )


@pytest.mark.parametrize(
    ("env", "flags", "message"),
    [
        ({"GPUPOLICY_PORT": "https"}, {}, "GPUPOLICY_PORT='https'"),
        ({}, {"port": 70000}, "port 70000"),
        ({}, {"policy_file": "a.json", "spec_file": "b.yaml"}, "not both"),
        ({}, {"cert_file": "tls.crt"}, "go together"),
        ({}, {"cert_dir": "/tls", "key_file": "k"}, "--cert-dir"),
        ({"GPUPOLICY_LOG_OBJECTS": "maybe"}, {}, "expected true or false"),
    ],
)
def test_unusable_settings_are_refused_with_the_setting_named(
    env: dict[str, str], flags: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env, **flags)
