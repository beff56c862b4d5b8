"""The validate fast path (webhook/routes.py ValidateFastPath) answers exactly what Flask's view answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from webhook_support import admission_review, compiled_policy, container, fixture_names, read_fixture, workload

from webhook import create_app, wsgi
from webhook.routes import ValidateFastPath
from webhook.settings import Settings

ENDPOINT = wsgi.Endpoint("127.0.0.1", 40000, "127.0.0.1", 8443)
JSON = b"application/json"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    path = tmp_path_factory.mktemp("fast-path") / "admission-policy.json"
    path.write_text(compiled_policy("mixed-fleet").to_json())
    return create_app(Settings(policy_file=path, max_content_length=64 * 1024))


def call(app: Any, target: str, body: bytes, *, method: str = "POST", content_type: bytes | None = JSON) -> wsgi.Answer:
    headers = [(b"Host", b"gpupolicy-webhook.gpupolicy-system.svc")]
    if content_type is not None:
        headers.append((b"Content-Type", content_type))
    path, _, query = target.encode().partition(b"?")
    request = wsgi.Request(method, target.encode(), "1.1", headers, body)
    return wsgi.call(app, wsgi.environ(request, path, query, ENDPOINT))


def both(app: Flask, target: str, body: bytes, **kwargs: Any) -> tuple[wsgi.Answer, wsgi.Answer]:
    fast = app.wsgi_app
    assert isinstance(fast, ValidateFastPath)
    return call(fast, target, body, **kwargs), call(fast._flask, target, body, **kwargs)


def reviews() -> list[tuple[str, bytes]]:
    out = [(f"/validate/tenant/{tenant}?timeout=3s", json.dumps(admission_review(
        workload(kind, container(gpus=gpus, resource=resource)), uid=f"u-{kind}-{gpus}")).encode())
        for tenant in ("prod", "dev", "nobody")
        for kind in ("Pod", "Deployment", "CronJob")
        for gpus, resource in ((1, "nvidia.com/gpu"), (2, "nvidia.com/gpu"), (1, "nvidia.com/mig-1g.10gb"))]
    out += [("/validate", json.dumps(read_fixture(name)).encode()) for name in fixture_names()]
    return out


@pytest.mark.parametrize(("target", "body"), reviews())
def test_a_review_gets_the_same_status_headers_and_bytes_as_from_flask(app: Flask, target: str, body: bytes,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fast_path = app.wsgi_app
    assert isinstance(fast_path, ValidateFastPath)
    reached: list[str] = []
    flask_wsgi = fast_path._flask
    monkeypatch.setattr(fast_path, "_flask",
                        lambda env, start: reached.append(env["PATH_INFO"]) or flask_wsgi(env, start))
    fast = call(fast_path, target, body)
    assert reached == []  # answered by the fast path itself, not by falling back to Flask
    flask = call(flask_wsgi, target, body)
    assert fast == flask
    assert fast[0] == "200 OK"


@pytest.mark.parametrize(
    ("target", "body", "kwargs"),
    [
        ("/validate", b"{not json", {}),
        ("/validate", b"[]", {}),
        ("/validate", b"", {}),
        ("/validate", b"{}" + b" " * 70_000, {}),  # past max_content_length: 413
        ("/validate", json.dumps(admission_review(workload("Pod"))).encode(), {"content_type": b"text/plain"}),
        ("/validate", json.dumps(admission_review(workload("Pod"))).encode(), {"content_type": None}),
        ("/validate", b"", {"method": "GET"}),
        ("/validate/tenant/Not_A_Label", json.dumps(admission_review(workload("Pod"))).encode(), {}),
        ("/validate/", json.dumps(admission_review(workload("Pod"))).encode(), {}),
        ("/healthz", b"", {"method": "GET"}),
    ],
    ids=["not-json", "not-a-review", "empty", "too-large", "text-plain", "no-type", "get", "bad-tenant",
         "trailing-slash", "healthz"],
)
def test_anything_else_is_answered_by_flask_as_before(app: Flask, target: str, body: bytes, kwargs: Any) -> None:
    fast, flask = both(app, target, body, **kwargs)
    assert fast == flask
    assert fast[0] != "200 OK" or target == "/healthz"


def test_a_well_formed_review_does_not_reach_flask_and_a_crash_there_is_flasks_to_answer(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = app.wsgi_app
    assert isinstance(fast, ValidateFastPath)
    body = json.dumps(admission_review(workload("Pod", container(gpus=1)), uid="u-fast")).encode()
    reached: list[str] = []
    flask = fast._flask
    monkeypatch.setattr(fast, "_flask", lambda env, start: reached.append(env["PATH_INFO"]) or flask(env, start))
    status, _, answer = call(fast, "/validate?timeout=3s", body)
    assert (status, reached, json.loads(answer)["response"]["uid"]) == ("200 OK", [], "u-fast")

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(app.extensions["gpupolicy"].store.current.engine, "evaluate", broken)
    status, _, answer = call(fast, "/validate?timeout=3s", body)
    response = json.loads(answer)["response"]
    assert (status, reached, response["allowed"], response["status"]["code"]) == ("200 OK", ["/validate"], False, 500)
    assert app.extensions["gpupolicy"].metrics.internal_errors._value.get() == 1  # counted once, by Flask's handler


def test_the_fast_path_reads_a_policy_file_changed_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "admission-policy.json"
    path.write_text(compiled_policy("mixed-fleet").to_json())
    app = create_app(Settings(policy_file=path, reload_interval_seconds=0))
    body = json.dumps(admission_review(workload("Pod", container(gpus=1, resource="nvidia.com/mig-1g.10gb")))).encode()
    assert json.loads(call(app, "/validate", body)[2])["response"]["allowed"] is False
    path.write_text(compiled_policy("tke-l20-t4").to_json())
    status, _, _ = call(app, "/validate", body)
    assert (status, app.extensions["gpupolicy"].store.current.generation) == ("200 OK", 2)
