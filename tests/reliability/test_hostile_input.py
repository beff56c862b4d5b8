"""Hostile input: fuzzed and pathological bodies, broken HTTP and slow clients never get a 5xx, a crash or a hang."""

from __future__ import annotations

import copy
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from harness import REQUEST_TIMEOUT_SECONDS, Figures, helpers, https, paths_in, soak, stall
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from webhook import create_app, review
from webhook.settings import Settings, SettingsError

JSON = "application/json"
#: What a hostile call may get: a verdict, or a clear refusal. Never 5xx.
ACCEPTABLE = {200, 400, 404, 405, 413, 415, 422}
MAX_BODY = 3 * 1024 * 1024
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)

#: Slower than this, a request was blocked: it waited for (most of) a slow client's deadline.
BLOCKED = 0.9 * REQUEST_TIMEOUT_SECONDS


# --- what a sane answer looks like ------------------------------------------------------------------------


def check_answer(status: int, body: bytes, sent: Any = None, *, path: str = "/validate") -> None:
    """Every answer is JSON: a metav1.Status for a refusal, an AdmissionReview echoing the uid otherwise."""
    assert status in ACCEPTABLE, (status, body[:300])
    document = json.loads(body)
    if status != 200:
        assert (document["kind"], document["code"]) == ("Status", status), document
        return
    if not path.startswith("/validate"):
        return
    answer = document["response"]
    assert isinstance(answer["allowed"], bool)
    assert answer.get("status", {}).get("code") != 500, answer  # the last-resort handler caught a bug
    if isinstance(sent, dict):
        assert document["apiVersion"] == sent["apiVersion"]
        assert answer["uid"] == sent["request"]["uid"]


def metric(text: str, name: str) -> float:
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == name)


# --- strategies ------------------------------------------------------------------------------------------

json_leaves = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
               | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_values = st.recursive(
    json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
KINDS = list(helpers.WORKLOAD_KINDS)
RESOURCES = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared", "cpu"]


def base_reviews() -> list[dict[str, Any]]:
    """Well-formed reviews of every kind and operation the webhook sees, and a few it merely allows."""
    out = []
    for kind in KINDS:
        for gpus in (1, 2):
            new = helpers.workload(kind, helpers.container(gpus=gpus, resource=RESOURCES[gpus % 2]))
            old = helpers.workload(kind, helpers.container(gpus=1))
            out.append(helpers.admission_review(new, uid=f"create-{kind}-{gpus}"))
            out.append(helpers.admission_review(new, old=old, operation="UPDATE", uid=f"update-{kind}-{gpus}"))
    out.append(helpers.admission_review(None, old=helpers.workload("Pod"), operation="DELETE", uid="delete"))
    out.append(helpers.admission_review(helpers.workload("Pod"), api_version=helpers.V1BETA1, uid="beta"))
    out += [helpers.read_fixture(name) for name in helpers.fixture_names()]
    return out


BASES = base_reviews()


@st.composite
def mutated_reviews(draw: st.DrawFn) -> dict[str, Any]:
    """A real review with one to four values replaced, deleted or added at random paths."""
    document = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        candidates = [p for p in paths_in(document) if p]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent: Any = document
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(json_values)
        else:
            parent.append(draw(json_values))
    return document


def encode(document: Any) -> bytes:
    # allow_nan: Python's json writes NaN and Infinity, which the parser on the other side must survive.
    return json.dumps(document, allow_nan=True).encode()


raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.builds(lambda doc, cut: encode(doc)[:cut], st.sampled_from(BASES), st.integers(0, 400)),
    st.builds(lambda doc, at, byte: (lambda b: b[:at] + bytes([byte]) + b[at + 1:])(encode(doc)),
              st.sampled_from(BASES), st.integers(0, 400), st.integers(0, 255)),
    json_values.map(encode),
)
content_types = st.sampled_from([
    JSON, JSON, JSON, "application/json; charset=utf-8", "APPLICATION/JSON", "application/merge-patch+json",
    "text/plain", "application/yaml", "", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
])
validate_paths = st.sampled_from(["/validate", "/validate?timeout=3s", "/validate/tenant/prod",
                                  "/validate/tenant/dev", "/validate/tenant/Nope_1", "/validate/tenant/" + "a" * 70])


# --- in-process: the Flask app with the real engine -------------------------------------------------------


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    policy = tmp_path_factory.mktemp("policy") / "admission-policy.json"
    policy.write_text(helpers.compiled_policy("mixed-fleet").to_json())  # tenants: /validate/tenant/* routes
    return create_app(Settings(policy_file=policy))


@pytest.fixture(scope="module")
def client(app: Flask) -> Iterator[FlaskClient]:
    client = app.test_client()
    yield client
    # Whatever the fuzzing sent, the last-resort handler (a bug, by definition) never ran.
    assert metric(client.get("/metrics").get_data(as_text=True), "gpupolicy_webhook_internal_errors_total") == 0


@pytest.fixture(scope="module")
def counted(figures: Figures) -> Iterator[Callable[[str], None]]:
    counts: dict[str, int] = {}

    def count(strategy: str) -> None:
        counts[strategy] = counts.get(strategy, 0) + 1

    yield count
    figures.record("fuzz, in-process", **counts, total=sum(counts.values()))


@FUZZ
@given(document=mutated_reviews(), path=validate_paths)
def test_a_review_with_random_values_replaced_gets_a_verdict_or_a_4xx_never_a_500(
    client: FlaskClient, counted: Callable[[str], None], document: dict[str, Any], path: str
) -> None:
    counted("mutated reviews")
    response = client.post(path, data=encode(document), content_type=JSON)
    check_answer(response.status_code, response.get_data(), document, path=path)


@FUZZ
@given(body=raw_bodies, content_type=content_types, path=validate_paths)
def test_random_bytes_truncated_or_corrupted_reviews_and_any_content_type_get_a_4xx_or_a_verdict(
    client: FlaskClient, counted: Callable[[str], None], body: bytes, content_type: str, path: str
) -> None:
    counted("raw bodies")
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post(path, data=body, headers=headers)
    check_answer(response.status_code, response.get_data(), path=path)


@settings(FUZZ, max_examples=150)
@given(method=st.sampled_from(["GET", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]),
       path=st.sampled_from(["/validate", "/healthz", "/readyz", "/metrics", "/", "/validate/tenant/prod"])
       # (not "//...": the test client would read that as a network-path reference to a host)
       | st.text(alphabet="/abcdefgh%.-_?=&", max_size=30).map(lambda p: "/" + p.lstrip("/")))
def test_any_method_on_any_path_is_answered_without_a_5xx(
    client: FlaskClient, counted: Callable[[str], None], method: str, path: str
) -> None:
    counted("methods and paths")
    response = client.open(path, method=method)
    assert response.status_code < 500, (method, path, response.status_code)


def nested(depth: int, opener: str, closer: str) -> bytes:
    return (opener * depth + closer * depth).encode()


def review_with(**request_fields: Any) -> dict[str, Any]:
    document = helpers.admission_review(helpers.workload("Pod"), uid="hostile")
    document["request"].update(request_fields)
    return document


DEEP = json.loads(nested(900, "[", "]"))  # deep, yet within what the parser accepts
PATHOLOGICAL: dict[str, tuple[bytes, str, int]] = {
    "100k nested arrays": (nested(100_000, "[", "]"), JSON, 400),
    "100k nested objects": (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, JSON, 400),
    "an integer of 5000 digits": (b'{"apiVersion": "admission.k8s.io/v1", "request": {"uid": ' + b"7" * 5000 + b"}}",
                                  JSON, 400),
    "a list 900 deep as the operation": (encode(review_with(operation=DEEP)), JSON, 422),
    "a list 900 deep inside the object": (encode(review_with(object={**helpers.workload("Pod"), "x": DEEP})),
                                          JSON, 200),
    "a 1 MiB uid": (encode(review_with(uid="u" * 2**20)), JSON, 200),
    "a 1 MiB operation": (encode(review_with(operation="C" * 2**20)), JSON, 422),
    "NaN and Infinity": (encode(review_with(dryRun=float("nan"), object={"kind": float("inf")})), JSON, 422),
    "invalid UTF-8": (b'{"apiVersion": "\xff\xfe\xfd"}', JSON, 400),
    "a lone surrogate in the uid": (encode(review_with(uid="\ud800")), JSON, 200),
    "UTF-16 with a byte order mark": (json.dumps(review_with()).encode("utf-16"), JSON, 200),
    "duplicate keys": (b'{"apiVersion": "admission.k8s.io/v1", "apiVersion": "x", "kind": "AdmissionReview"}',
                       JSON, 422),
    "an empty body": (b"", JSON, 400),
    "only whitespace": (b" \n\t ", JSON, 400),
    "null": (b"null", JSON, 422),
    "a bare string": (b'"AdmissionReview"', JSON, 422),
    "request is a list": (encode({"apiVersion": helpers.V1, "kind": "AdmissionReview", "request": []}), JSON, 422),
    "no uid": (encode(review_with(uid=None)), JSON, 422),
    "a lowercase operation": (encode(review_with(operation="create")), JSON, 422),
    "an unknown kind": (encode(helpers.admission_review({"apiVersion": "example.com/v1", "kind": "Widget",
                                                         "metadata": {"name": "w"}, "spec": {"gpus": 9}})), JSON, 200),
    "a Pod review whose object is a Deployment": (
        encode(helpers.admission_review(helpers.workload("Deployment", helpers.container(gpus=2)), kind="Pod")),
        JSON, 200),
    "YAML instead of JSON": (b"apiVersion: admission.k8s.io/v1\nkind: AdmissionReview\n", "application/yaml", 415),
    "no content type": (encode(review_with()), "", 415),
    "form encoded": (b"apiVersion=admission.k8s.io%2Fv1", "application/x-www-form-urlencoded", 415),
    "a body one byte over 3 MiB": (b" " * (MAX_BODY + 1), JSON, 413),
}


@pytest.mark.parametrize("case", PATHOLOGICAL)
def test_a_pathological_body_gets_its_precise_status(client: FlaskClient, case: str) -> None:
    body, content_type, status = PATHOLOGICAL[case]
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post("/validate", data=body, headers=headers)
    assert response.status_code == status, response.get_data()[:300]
    check_answer(response.status_code, response.get_data())


def test_request_fields_are_logged_as_bounded_escaped_tokens_so_a_client_cannot_forge_log_lines(
    client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    forged = "u1\nadmission uid=forged verdict=allow rules=none"
    with caplog.at_level("DEBUG", logger="gpupolicy"):
        for document in (review_with(uid=forged, name="pod verdict=allow"), review_with(uid="u" * 2**20)):
            assert client.post("/validate", data=encode(document), content_type=JSON).status_code == 200
    messages = [record.getMessage() for record in caplog.records]
    assert all("\n" not in message and len(message) < 1024 for message in messages)
    assert "uid='u1\\nadmission uid=forged verdict=allow rules=none'" in messages[0]
    assert "object='ml/pod verdict=allow'" in messages[0]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "301", "soon"])
def test_a_request_timeout_that_is_not_between_0_and_300_seconds_is_refused(value: str) -> None:
    with pytest.raises(SettingsError, match=r"GPUPOLICY_REQUEST_TIMEOUT_SECONDS|request timeout"):
        Settings.from_env({"GPUPOLICY_REQUEST_TIMEOUT_SECONDS": value})


# --- the real server --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(server: https.Server) -> Iterator[https.Server]:
    offset = len(server.log.read_text())
    yield server
    window = server.log.read_text()[offset:]
    assert "Traceback" not in window, window[-3000:]
    assert "internal error" not in window


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(document=mutated_reviews(), body=raw_bodies, content_type=content_types)
def test_over_tls_fuzzed_reviews_and_bodies_never_get_a_5xx_and_the_server_keeps_serving(
    served: https.Server, counted: Callable[[str], None], document: dict[str, Any], body: bytes,
    content_type: str,
) -> None:
    counted("over TLS (two requests each)")
    reply = served.request("POST", "/validate", encode(document), {"Content-Type": JSON})
    check_answer(reply.status, json.dumps(reply.body).encode(), document)
    headers = {"Content-Type": content_type} if content_type else {}
    reply = served.request("POST", "/validate", body, headers)
    check_answer(reply.status, json.dumps(reply.body).encode())


def tls_socket(server: https.Server) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return server.context().wrap_socket(raw, server_hostname=https.SERVICE_HOST)


def exchange(server: https.Server, data: bytes, *, chunks: int = 1) -> bytes:
    """Send raw bytes on a fresh TLS connection and read until the server closes or answers."""
    with tls_socket(server) as sock:
        step = max(1, len(data) // chunks)
        try:
            for start in range(0, len(data), step):
                sock.sendall(data[start:start + step])
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the server answered (413) and closed before reading it all
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and _complete(answer):
                    break
        except (ConnectionResetError, ssl.SSLError, TimeoutError):
            pass
        return answer


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length: *(\d+)", head)
    return length is None or len(body) >= int(length[1])


def status_of(answer: bytes) -> int:
    match = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
    assert match, answer[:200]
    return int(match[1])


def chunked(body: bytes, size: int = 65536) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"


REVIEW = encode(helpers.admission_review(helpers.workload("Pod"), uid="raw"))
RAW_CASES: dict[str, tuple[bytes, set[int]]] = {
    "a garbage request line": (b"\x16\x03garbage\r\n\r\n", {400}),
    "an HTTP/1.0 review": (b"POST /validate HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(REVIEW), REVIEW), {200}),
    "a header line of 20 KiB": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n",
                                {400, 431}),
    "200 headers": (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200))
                    + b"\r\n", {400, 431}),
    "a URL of 10 KiB": (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", {400, 414}),
    "a chunked review": (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n" + chunked(REVIEW, 50), {200}),
    "a chunked body over 3 MiB": (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n" + chunked(b" " * (MAX_BODY + 70_000)), {413}),
    "a Content-Length over 3 MiB, body sent anyway": (
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (MAX_BODY + 1) + b" " * (MAX_BODY + 1), {413}),
    "both Content-Length and chunked (request smuggling)": (
        b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + chunked(REVIEW), {400}),
    "a negative Content-Length": (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", {400}),
    **{f"chunked framing: {name}": (stall.CHUNKED_HEAD + framing, {400, 413, 431})
       for name, framing in stall.MALFORMED_FRAMING.items()},
    "Expect: 100-continue": (b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n%s" % (len(REVIEW), REVIEW),
                             {100, 200}),
}


@pytest.mark.parametrize("case", RAW_CASES)
def test_broken_http_is_refused_with_a_4xx_and_the_server_keeps_serving(served: https.Server, case: str) -> None:
    data, statuses = RAW_CASES[case]
    answer = exchange(served, data, chunks=8)
    assert status_of(answer) in statuses, answer[:300]
    if status_of(answer) >= 400:  # every refusal is a metav1.Status, like the app's own
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["kind"] == "Status", answer[:300]
    assert served.request("GET", "/healthz").status == 200


def test_malformed_chunked_framing_never_reaches_the_app_so_no_traceback_and_no_internal_error(
    served: https.Server, figures: Figures
) -> None:
    # Before the event-loop worker, gthread handed a chunked body to the app unread, and a bad chunk size
    # escaped request.get_data() as a gunicorn parser error: HTTP 500, a traceback, and the internal-error
    # counter (and its alert) up by one.
    key = ("gpupolicy_webhook_internal_errors_total", ())
    offset = len(served.log.read_text())
    before = served.metrics().get(key, 0.0)
    malformed_before = served.metrics().get(
        ("gpupolicy_webhook_dropped_connections_total", (("reason", "malformed"),)), 0.0)
    framing = {case: RAW_CASES[case][0] for case in RAW_CASES if case.startswith("chunked framing: ")}
    statuses = {case: status_of(exchange(served, data)) for case, data in framing.items()}
    window = served.log.read_text()[offset:]
    assert all(400 <= status < 500 for status in statuses.values()), statuses
    assert served.metrics().get(key, 0.0) == before
    assert "Traceback" not in window
    refused = [line for line in window.splitlines() if "malformed HTTP request" in line or " 431 " in line]
    # one line each (the 413 is not "malformed"), unless a worker's log burst was spent by the module's earlier
    # floods (webhook/worker.py LOG_BURST): then the counter of malformed drops says the same
    malformed = served.metrics().get(("gpupolicy_webhook_dropped_connections_total", (("reason", "malformed"),)), 0.0)
    assert len(refused) >= len(framing) - 1 or malformed - malformed_before >= len(framing) - 1, window[-2000:]
    figures.record("malformed chunked framing", statuses=statuses)


# --- slow and silent clients ------------------------------------------------------------------------------


class StalledClient:
    """A client that starts a request and stalls; `dropped_after` says when the server hung up on it."""

    def __init__(self, server: https.Server, kind: str) -> None:
        self.kind = kind
        self.dropped_after: float | None = None
        self.started = time.monotonic()
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if kind == "handshake":  # the first bytes of a ClientHello, then nothing
            raw.sendall(b"\x16\x03\x01\x02\x00\x01")
            self.sock: socket.socket = raw
        else:
            self.sock = server.context().wrap_socket(raw, server_hostname=https.SERVICE_HOST)
        if kind == "body":  # the headers, 10 of 1000 body bytes, then nothing
            self.sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 1000\r\n\r\n{\"apiVersio")
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        header = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Padding: " + b"p" * 500
        try:
            if self.kind == "headers":  # a byte every 50 ms: each read is quick, the request never ends
                for byte in header:
                    self.sock.sendall(bytes([byte]))
                    time.sleep(0.05)
            while self.sock.recv(4096):  # a 400 answer to the stalled body, then the close
                pass
        except (OSError, ssl.SSLError):
            pass
        self.dropped_after = time.monotonic() - self.started

    def close(self) -> None:
        self.sock.close()


def linger_after_close(server: https.Server, count: int) -> list[socket.socket]:
    """Clients that ask for `Connection: close`, read the answer, and then never close their end."""
    sockets = []
    for _ in range(count):
        sock = tls_socket(server)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):  # until the server's FIN (its shutdown), then keep our end open
            answer += chunk
        assert status_of(answer) == 200
        sockets.append(sock)
    return sockets


def timed_healthz(server: https.Server) -> float:
    started = time.monotonic()
    connection = server.connect()
    connection.request("GET", "/healthz")
    assert connection.getresponse().status == 200
    connection.close()
    return time.monotonic() - started


def test_slow_loris_and_silent_clients_are_dropped_after_the_request_timeout_while_others_are_served(
    served: https.Server, figures: Figures
) -> None:
    # Stalled and silent clients hold no thread (webhook/worker.py): each is an object on the event loop
    # with a deadline. Under gthread, 8 stalled or silent clients stopped the server: a review waited
    # 9.7 s behind 8 silent ones and timed out behind 8 stalled ones.
    offset = len(served.log.read_text())
    timeouts = ("gpupolicy_webhook_dropped_connections_total", (("reason", "timeout"),))
    timeouts_before = served.metrics().get(timeouts, 0.0)
    silent = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(40)]
    stalled = [StalledClient(served, kind) for kind in ("handshake", "headers", "body")]
    try:
        latencies = [timed_healthz(served) for _ in range(20)]
        for client in stalled:
            client.thread.join(timeout=REQUEST_TIMEOUT_SECONDS + 5)
        dropped = {client.kind: client.dropped_after for client in stalled}
    finally:
        for sock in silent:
            sock.close()
        for client in stalled:
            client.close()
    # A review stuck behind a slow client would wait for its whole deadline; anything clearly below it is
    # "not blocked", however slow the machine.
    assert max(latencies) < BLOCKED, latencies
    assert all(after is not None and REQUEST_TIMEOUT_SECONDS - 0.2 < after < REQUEST_TIMEOUT_SECONDS + 2
               for after in dropped.values()), dropped
    # The server writes its log line after it drops the connection, so the client may see the drop first: wait
    # for the lines (a bound, not a timing: they come within milliseconds of the drop).
    # A worker logs at most LOG_BURST drops per window and sums up the rest later (webhook/worker.py), so after
    # the module's earlier floods a line may be held back: the timeout counter then says the same.
    deadline = time.monotonic() + 10
    while True:
        window = served.log.read_text()[offset:]
        logged = window.count(f"within {REQUEST_TIMEOUT_SECONDS:g}s; disconnected")
        counted = served.metrics().get(timeouts, 0.0) - timeouts_before
        if logged >= 2 or counted >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert logged >= 2 or counted >= 2, (counted, window[-2000:])
    assert "Traceback" not in window and "Socket error" not in window
    figures.record("slow clients", silent_connections=len(silent), stalled=len(stalled),
                   healthz_max_ms=round(max(latencies) * 1000, 1),
                   dropped_after_s={k: round(v or 0, 2) for k, v in dropped.items()})


def test_sixty_stalled_clients_of_every_kind_delay_no_one_and_are_all_dropped_at_their_deadline(
    served: https.Server, figures: Figures
) -> None:
    # Under gthread (2 workers x 4 threads) 16 stalled handshakes held every thread for one timeout and
    # then the next 8 for another: a review waited 3.8 s. Here they hold no thread: others are not delayed.
    stalled = [StalledClient(served, kind) for kind in ("handshake", "headers", "body") for _ in range(20)]
    try:
        time.sleep(0.3)  # let them all reach the server
        delayed = max(timed_healthz(served) for _ in range(5))
        for client in stalled:
            client.thread.join(timeout=4 * REQUEST_TIMEOUT_SECONDS)
        assert all(client.dropped_after is not None for client in stalled)
    finally:
        for client in stalled:
            client.close()
    assert delayed < BLOCKED, delayed
    recovered = [timed_healthz(served) for _ in range(10)]
    assert max(recovered) < BLOCKED, recovered
    figures.record("slow clients", overload_stalled=len(stalled), overload_healthz_max_s=round(delayed, 2),
                   overload_last_dropped_s=round(max(c.dropped_after or 0 for c in stalled), 2),
                   after_overload_healthz_max_ms=round(max(recovered) * 1000, 1))


def test_clients_that_never_close_after_connection_close_do_not_freeze_the_workers(
    served: https.Server, figures: Figures
) -> None:
    # gthread lingered up to 2 s for such a client's FIN on the worker's main loop, which accepted nothing
    # meanwhile: serving 16 of them one after the other took 18 s. The event loop waits for no one.
    started = time.monotonic()
    lingering = linger_after_close(served, 16)
    elapsed = time.monotonic() - started
    try:
        latencies = [timed_healthz(served) for _ in range(5)]
    finally:
        for sock in lingering:
            sock.close()
    assert elapsed < 16 * 2 / 4 and max(latencies) < BLOCKED, (elapsed, latencies)  # 16 x 2 s lingers, / 4 threads
    figures.record("slow clients", lingering_after_close=len(lingering), lingering_served_in_s=round(elapsed, 2),
                   lingering_healthz_max_ms=round(max(latencies) * 1000, 1))


# --- memory -----------------------------------------------------------------------------------------------


@pytest.fixture
def roomy(tmp_path: Path) -> Iterator[https.Server]:
    """A fresh server (a clean memory baseline) with the default 10 s request timeout."""
    running = https.start_server(tmp_path)
    yield running
    assert https.stop_server(running) == 0


def inflating_bodies() -> dict[str, tuple[bytes, int]]:
    """3 MiB of `{},` (a million dicts, refused before parsing) and the costliest body under the value cap."""
    count = (MAX_BODY - 100) // 3
    most = (review.MAX_JSON_VALUES - 2) // 2  # `{"a":1}` is two values (the object and its member)
    return {"3 MiB of empty objects": (b"[" + b"{}," * (count - 1) + b"{}]", 413),
            "one-key objects up to the value cap": (b"[" + b'{"a":1},' * (most - 1) + b'{"a":1}]', 422)}


def test_eight_concurrent_bodies_that_inflate_when_parsed_are_answered_in_bounded_memory(
    roomy: https.Server, figures: Figures
) -> None:
    # 3 MiB of `{},` is a million dicts, 75 MiB once parsed. Eight at once took the pod (master + 2 gthread
    # workers) from 160 to 467 MiB RSS, far past its memory limit. Now such a body is refused from a count
    # of its values before json.loads runs (review.MAX_JSON_VALUES), and the costliest body under the cap
    # (~20 MiB parsed) is parsed one at a time per worker: the event loop runs one request at a time.
    served = roomy
    before = soak.memory_mib(served.process.pid)
    peak = dict(before)
    statuses: dict[str, list[int]] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            now = soak.memory_mib(served.process.pid)
            peak.update({k: max(peak[k], now[k]) for k in ("rss_mib", "pss_mib")})
            time.sleep(0.01)

    def send(name: str, body: bytes) -> None:
        client = https.Server(served.process, served.port, served.log, served.cas, served.cert_dir,
                              served.policy_dir)
        statuses.setdefault(name, []).append(client.request("POST", "/validate", body, {"Content-Type": JSON}).status)
        client.close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    bodies = inflating_bodies()
    senders = [threading.Thread(target=send, args=(name, body)) for name, (body, _) in bodies.items() for _ in range(8)]
    for thread in senders:
        thread.start()
    for thread in senders:
        thread.join()
    stop.set()
    sampler.join()
    assert statuses == {name: [status] * 8 for name, (_, status) in bodies.items()}
    growth = peak["pss_mib"] - before["pss_mib"]
    figures.record("memory under inflating bodies", requests=16, rss_before_mib=before["rss_mib"],
                   pss_before_mib=before["pss_mib"], rss_peak_mib=peak["rss_mib"], pss_peak_mib=peak["pss_mib"],
                   rss_after_mib=soak.memory_mib(served.process.pid)["rss_mib"])
    # Per worker: a body budget of 12 MiB in flight and one parse of at most ~25 MiB at a time.
    assert growth < 100, (before, peak)
