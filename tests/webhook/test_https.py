"""The real server: `gpupolicy webhook serve` under gunicorn, spoken to over TLS the way kube-apiserver does."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from polling import poll
from prometheus_client.parser import text_string_to_metric_families
from webhook_support import (
    V1,
    V1BETA1,
    WORKLOAD_KINDS,
    KubeletVolume,
    admission_review,
    compiled_policy,
    container,
    fixture_names,
    read_fixture,
    workload,
)

from cli.main import main as gpupolicy
from policy.resolved.offers import AdmissionPolicy
from webhook import tls

pytestmark = pytest.mark.slow

GPUPOLICY = str(Path(sys.executable).parent / "gpupolicy")
#: What the API server dials (webhook.md §1.10): the certificate must be valid for <svc>.<ns>.svc.
SERVICE_HOST = "gpupolicy-webhook.gpupolicy-system.svc"
TKE = compiled_policy("tke-l20-t4")
TKE_WARN = compiled_policy("tke-l20-t4", lambda t: t.replace("enforcement: enforce", "enforcement: warn"))


# --- a client that behaves like kube-apiserver -----------------------------------------------------------


class _ServiceConnection(http.client.HTTPSConnection):
    """Dials 127.0.0.1 but verifies the certificate for the Service's name, as the API server does."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        super().__init__(SERVICE_HOST, port, context=context, timeout=10)

    def connect(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=SERVICE_HOST)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    cas: list[Path]
    cert_dir: Path
    policy_dir: Path
    metrics_port: int = 0
    _connection: _ServiceConnection | None = field(default=None, repr=False)

    def context(self, **versions: ssl.TLSVersion) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        for ca in self.cas:  # every CA written so far: the overlapping bundle of a CA rotation
            context.load_verify_locations(cafile=str(ca))
        for name, version in versions.items():
            setattr(context, name, version)
        return context

    def connect(self, context: ssl.SSLContext | None = None) -> _ServiceConnection:
        return _ServiceConnection(self.port, context or self.context())

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        """One call on a kept-alive connection (the API server reuses connections), reconnecting if closed."""
        for attempt in (1, 2):
            if self._connection is None:
                self._connection = self.connect()
            try:
                self._connection.request(method, path, body=body, headers=headers or {})
                response = self._connection.getresponse()
                data = response.read()
                break
            # A kept-alive connection the server closed while it was idle (its keep-alive ran out, or it was the
            # idlest at the connection cap): redial once, as Go's transport does for the API server.
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ssl.SSLEOFError):
                self._connection.close()
                self._connection = None
                if attempt == 2:
                    raise
        text = data.decode()
        return Reply(response.status, json.loads(text) if response.getheader("Content-Type", "").startswith(
            "application/json") else text)

    def review(self, document: dict[str, Any], path: str = "/validate") -> dict[str, Any]:
        reply = self.request("POST", f"{path}?timeout=3s", json.dumps(document).encode(),
                             {"Content-Type": "application/json"})
        assert reply.status == 200, (reply, self.log_tail())
        assert reply.body["apiVersion"] == document["apiVersion"]
        assert reply.body["response"]["uid"] == document["request"]["uid"]
        response: dict[str, Any] = reply.body["response"]
        return response

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        reply = self.request("GET", "/metrics")
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(reply.body) for s in family.samples}

    def log_tail(self) -> str:
        return self.log.read_text()[-4000:] if self.log.exists() else ""

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_certs(directory: Path) -> dict[str, bytes]:
    assert gpupolicy(["webhook", "certs", "--out", str(directory)]) == 0
    return {name: (directory / name).read_bytes() for name in ("ca.crt", "tls.crt", "tls.key")}


def serial_of(pem: bytes) -> int:
    return x509.load_pem_x509_certificate(pem).serial_number


def start_server(root: Path, policy: AdmissionPolicy = TKE, **env: str) -> Server:
    cert_dir, policy_dir = KubeletVolume(root / "tls"), KubeletVolume(root / "policy")
    bundle = make_certs(root / "issued-0")
    cert_dir.write({"tls.crt": bundle["tls.crt"], "tls.key": bundle["tls.key"]})
    policy_dir.write({"admission-policy.json": policy.to_json()})
    port, metrics_port = free_port(), free_port()
    log = root / "server.log"
    environment = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    environment.update({"GPUPOLICY_RELOAD_INTERVAL_SECONDS": "0.1", "GPUPOLICY_GRACEFUL_TIMEOUT_SECONDS": "10",
                        "GPUPOLICY_DRAIN_SECONDS": "0.2", "GPUPOLICY_METRICS_PORT": str(metrics_port), **env})
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [GPUPOLICY, "webhook", "serve", "--policy", str(policy_dir.path("admission-policy.json")),
             "--cert-dir", str(cert_dir.root), "--bind", "127.0.0.1", "--port", str(port)],
            stdout=sink, stderr=subprocess.STDOUT, env=environment,
        )
    server = Server(process, port, log, [root / "issued-0" / "ca.crt"], cert_dir.root, policy_dir.root,
                    metrics_port)

    def ready() -> bool | None:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}:\n{server.log_tail()}")
        try:
            return True if server.request("GET", "/readyz").status == 200 else None
        except OSError:
            server.close()
            return None

    poll(ready, timeout=30, what="the server to become ready")
    return server


def stop_server(server: Server) -> int:
    server.close()
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
    try:
        return server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        raise


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("webhook"))
    yield running
    assert stop_server(running) == 0, running.log_tail()


# --- certificates ----------------------------------------------------------------------------------------


def test_webhook_certs_refuses_to_write_keys_into_a_compiled_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    assert gpupolicy(["webhook", "certs", "--out", str(tmp_path / "secrets")]) == 2
    assert "refusing to write private keys" in capsys.readouterr().err
    assert not (tmp_path / "secrets").exists()


def test_webhook_certs_replaces_an_existing_bundle_only_with_force(tmp_path: Path) -> None:
    first = make_certs(tmp_path)
    assert gpupolicy(["webhook", "certs", "--out", str(tmp_path)]) == 2
    assert (tmp_path / "tls.crt").read_bytes() == first["tls.crt"]
    assert gpupolicy(["webhook", "certs", "--out", str(tmp_path), "--force", "--days", "30"]) == 0
    assert (tmp_path / "tls.crt").read_bytes() != first["tls.crt"]


def test_serve_refuses_to_start_without_a_certificate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "admission-policy.json").write_text(TKE.to_json())
    assert gpupolicy(["webhook", "serve", "--policy", str(tmp_path / "admission-policy.json")]) == 2
    assert "TLS only" in capsys.readouterr().err


@dataclass
class _CertificateEvents:
    events: list[str] = field(default_factory=list)

    def certificate_loaded(self, not_after: datetime, *, reloaded: bool) -> None:
        self.events.append(f"{'reloaded' if reloaded else 'in use'} until {not_after:%Y-%m-%d}")

    def certificate_reload_failed(self) -> None:
        self.events.append("failed")


def test_the_reloader_keeps_the_old_pair_until_the_new_certificate_and_key_match(tmp_path: Path) -> None:
    old, new = make_certs(tmp_path / "old"), make_certs(tmp_path / "new")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(old["tls.crt"])
    key.write_bytes(old["tls.key"])
    reloader, events = tls.CertificateReloader(cert, key), _CertificateEvents()
    first = reloader.context()
    reloader.observe(events)
    cert.write_bytes(new["tls.crt"])  # a rotation caught halfway: the key is still the old one
    assert reloader.context() is first
    assert reloader.context() is first  # the bad pair is reported once, not at every handshake
    key.write_bytes(new["tls.key"])
    assert reloader.context() is not first
    old_until, new_until = (x509.load_pem_x509_certificate(pair["tls.crt"]).not_valid_after_utc
                            for pair in (old, new))
    assert events.events == [f"in use until {old_until:%Y-%m-%d}", "failed",
                             f"reloaded until {new_until:%Y-%m-%d}"]


def test_the_reloader_fails_loudly_when_no_pair_ever_loaded(tmp_path: Path) -> None:
    make_certs(tmp_path)
    (tmp_path / "tls.key").write_bytes(make_certs(tmp_path / "other")["tls.key"])  # not this certificate's key
    with pytest.raises(ssl.SSLError):
        tls.CertificateReloader(tmp_path / "tls.crt", tmp_path / "tls.key").context()


def test_the_server_presents_a_certificate_for_the_service_that_chains_to_the_ca(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as raw, \
            server.context().wrap_socket(raw, server_hostname=SERVICE_HOST) as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_the_server_refuses_tls_1_1(server: Server) -> None:
    old = server.context(minimum_version=ssl.TLSVersion.TLSv1, maximum_version=ssl.TLSVersion.TLSv1_1)
    with socket.create_connection(("127.0.0.1", server.port)) as raw, pytest.raises(ssl.SSLError):
        old.wrap_socket(raw, server_hostname=SERVICE_HOST)


def test_the_server_speaks_tls_1_2_when_the_client_offers_no_more(server: Server) -> None:
    tls12 = server.context(maximum_version=ssl.TLSVersion.TLSv1_2)
    with socket.create_connection(("127.0.0.1", server.port)) as raw, \
            tls12.wrap_socket(raw, server_hostname=SERVICE_HOST) as tls:
        assert (tls.version(), tls.cipher()[0].startswith("ECDHE")) == ("TLSv1.2", True)


# --- verdicts --------------------------------------------------------------------------------------------


def test_a_deployment_asking_for_two_shared_gpus_is_denied_with_a_precise_403(server: Server) -> None:
    answer = server.review(admission_review(workload("Deployment", container("vllm", gpus=2))))
    assert (answer["allowed"], answer["status"]["code"], answer["status"]["reason"]) == (False, 403, "Forbidden")
    message = answer["status"]["message"]
    for part in ("Deployment trainer", "[shared-gpu-request-above-one]", 'container "vllm"', "nvidia.com/gpu",
                 "Fix: request nvidia.com/gpu: 1"):
        assert part in message


@pytest.mark.parametrize("kind", WORKLOAD_KINDS)
def test_every_pod_controller_kind_is_judged_by_its_pod_template(server: Server, kind: str) -> None:
    denied = server.review(admission_review(workload(kind, container(gpus=2)), uid=f"deny-{kind}"))
    allowed = server.review(admission_review(workload(kind, container(gpus=1)), uid=f"allow-{kind}"))
    assert (denied["allowed"], allowed["allowed"]) == (False, True)


def test_an_update_that_leaves_the_gpu_request_alone_is_allowed_even_on_a_violating_object(server: Server) -> None:
    old = workload("Deployment", container(gpus=2))
    scaled = json.loads(json.dumps(old))
    scaled["spec"]["replicas"] = 5
    assert server.review(admission_review(scaled, old=old, operation="UPDATE"))["allowed"] is True
    fine = workload("Deployment", container(gpus=1))
    assert server.review(admission_review(old, old=fine, operation="UPDATE"))["allowed"] is False


def test_a_dry_run_gets_the_same_verdict_as_the_real_request(server: Server) -> None:
    obj = workload("StatefulSet", container(gpus=2))
    real, dry = (server.review(admission_review(obj, dry_run=flag)) for flag in (False, True))
    assert dry == real


def test_a_v1beta1_review_of_the_scale_subresource_is_allowed_in_v1beta1(server: Server) -> None:
    document = read_fixture("k8s-docs-v1beta1-deployment-scale-update.json")
    assert document["apiVersion"] == V1BETA1
    assert server.review(document) == {"uid": document["request"]["uid"], "allowed": True}


@pytest.mark.parametrize("name", fixture_names())
def test_reviews_from_the_wild_without_gpus_are_allowed(server: Server, name: str) -> None:
    assert server.review(read_fixture(name))["allowed"] is True


def test_delete_is_allowed_even_for_a_violating_object(server: Server) -> None:
    document = admission_review(None, old=workload("Pod", container(gpus=2)), operation="DELETE")
    assert server.review(document)["allowed"] is True


# --- malformed calls -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"{not json", "application/json", 400),
        (json.dumps(admission_review(workload("Pod"))).encode(), "text/plain", 415),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', "application/json", 422),
        (json.dumps({"apiVersion": V1, "kind": "AdmissionReview", "request": {"uid": ["x"]}}).encode(),
         "application/json", 422),
    ],
    ids=["not-json", "wrong-content-type", "no-uid", "wrong-types"],
)
def test_a_malformed_call_gets_a_json_4xx_and_the_server_keeps_serving(
    server: Server, body: bytes, content_type: str, status: int
) -> None:
    reply = server.request("POST", "/validate?timeout=3s", body, {"Content-Type": content_type})
    assert (reply.status, reply.body["kind"], reply.body["code"]) == (status, "Status", status)
    assert server.request("GET", "/healthz").status == 200


def test_a_body_over_3_mib_is_refused_with_413_from_its_length_alone(server: Server) -> None:
    # Only the headers are sent: the answer must come before the server reads a byte of the body. (A client
    # that streams all of it anyway may see the connection close: gunicorn drains at most 64 KiB of an
    # unread body before it gives up on keep-alive.)
    connection = server.connect()
    connection.putrequest("POST", "/validate?timeout=3s")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(3 * 1024 * 1024 + 1))
    connection.endheaders()
    response = connection.getresponse()
    assert (response.status, json.loads(response.read())["reason"]) == (413, "RequestEntityTooLarge")
    connection.close()
    assert server.request("GET", "/healthz").status == 200


# --- health, readiness and metrics -----------------------------------------------------------------------


def test_readyz_names_the_policy_in_force_by_its_digest(server: Server) -> None:
    reply = server.request("GET", "/readyz")
    expected = hashlib.sha256((server.policy_dir / "admission-policy.json").read_bytes()).hexdigest()
    assert (reply.status, reply.body["cluster"], reply.body["digest"]) == (200, "tke-prod", expected)


def test_metrics_count_every_review_exactly_once_across_worker_processes(server: Server) -> None:
    key = ("gpupolicy_admission_decisions_total",
           (("kind", "Job"), ("operation", "CREATE"), ("outcome", "deny"), ("rule", "shared-gpu-request-above-one")))
    before = server.metrics().get(key, 0.0)
    for i in range(12):  # fresh connections, so both workers take some
        server.close()
        server.review(admission_review(workload("Job", container(gpus=2)), uid=f"count-{i}"))
    found = server.metrics()
    assert found[key] - before == 12
    assert ("gpupolicy_admission_duration_seconds_bucket", (("le", "0.0005"),)) in found
    not_after = x509.load_pem_x509_certificate((server.cert_dir / "tls.crt").read_bytes()).not_valid_after_utc
    assert found[("gpupolicy_certificate_expiry_timestamp_seconds", ())] == not_after.timestamp()


def _worker_holding(server: Server, client: socket.socket) -> int:
    """The pid of the worker process holding the server's end of a client's connection (from /proc)."""
    client_port = client.getsockname()[1]
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            parts = line.split()
            if (int(parts[1].rsplit(":", 1)[1], 16), int(parts[2].rsplit(":", 1)[1], 16)) == (server.port, client_port):
                inodes.add(f"socket:[{parts[9]}]")
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
    holders = [int(pid) for pid in children for fd in Path(f"/proc/{pid}/fd").iterdir()
               if os.readlink(fd) in inodes]
    assert len(holders) == 1, (holders, inodes)
    return holders[0]


def test_a_few_keep_alive_connections_are_spread_over_both_workers(server: Server) -> None:
    # The API server keeps a few connections and sends every review over them: if one worker took them all, one
    # CPU would review for the pod (webhook/balance.py). Each connection answers a review, then is located.
    server.close()  # the fixture's own kept-alive connection: it would count on one side
    connections = [server.connect() for _ in range(4)]
    try:
        holders = []
        for i, conn in enumerate(connections):
            conn.request("POST", "/validate?timeout=3s", json.dumps(admission_review(
                workload("Pod", container(gpus=1)), uid=f"spread-{i}")).encode(), {"Content-Type": "application/json"})
            response = conn.getresponse()
            assert response.status == 200 and json.loads(response.read())["response"]["uid"] == f"spread-{i}"
            holders.append(_worker_holding(server, conn.sock))
        assert len(set(holders)) == 2, holders
    finally:
        for conn in connections:
            conn.close()


def plain_http(port: int, method: str, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=b"{}" if method == "POST" else None,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_metrics_port_serves_metrics_and_probes_over_plain_http_and_nothing_else(server: Server) -> None:
    # Prometheus scrapes this port where the NetworkPolicy admits only the API server to the serving one.
    server.review(admission_review(workload("Pod", container(gpus=1)), uid="scraped"))
    status, body = plain_http(server.metrics_port, "GET", "/metrics")
    assert status == 200 and b"gpupolicy_admission_decisions_total{" in body
    assert plain_http(server.metrics_port, "GET", "/healthz")[0] == 200
    assert plain_http(server.metrics_port, "GET", "/readyz")[0] == 200
    for method, path in (("POST", "/validate"), ("GET", "/validate"), ("POST", "/metrics"), ("GET", "/")):
        status, body = plain_http(server.metrics_port, method, path)
        assert (status, json.loads(body)["kind"]) == (404, "Status"), (method, path, body)
    with pytest.raises(ssl.SSLError), socket.create_connection(("127.0.0.1", server.metrics_port)) as raw:
        server.context().wrap_socket(raw, server_hostname=SERVICE_HOST)  # no TLS there: not a second way in


# --- hot reloads (these change the running server: keep them after the tests above) ---------------------


def test_a_policy_changed_while_running_gives_new_verdicts_and_an_invalid_one_keeps_the_last_good(
    server: Server,
) -> None:
    volume = KubeletVolume(server.policy_dir)
    asks_two = admission_review(workload("Deployment", container(gpus=2)))
    failures = ("gpupolicy_policy_reload_failures_total", ())
    failed_before = server.metrics()[failures]

    def allowed() -> dict[str, Any] | None:
        answer = server.review(asks_two)
        return answer if answer["allowed"] else None

    volume.write({"admission-policy.json": TKE_WARN.to_json()})
    warned = poll(allowed, what="the warn policy")
    assert warned["warnings"][0].startswith("shared-gpu-request-above-one: ")

    volume.write({"admission-policy.json": '{"version": "gpupolicy.dev/admission/v1", "cluster": 3}'})
    poll(lambda: server.metrics()[failures] > failed_before or None, what="a reload failure in /metrics")
    assert server.review(asks_two) == warned  # the last good policy is still in force
    assert server.request("GET", "/readyz").status == 200

    volume.write({"admission-policy.json": TKE.to_json()})
    poll(lambda: server.review(asks_two)["allowed"] is False or None, what="the enforcing policy again")


def test_a_certificate_rotated_while_running_reaches_new_handshakes_without_one_failing(
    server: Server, tmp_path: Path
) -> None:
    issued = make_certs(tmp_path / "issued-1")
    server.cas.append(tmp_path / "issued-1" / "ca.crt")  # the caBundle holds old and new CA during the overlap
    context = server.context()

    def handshake() -> int:
        with socket.create_connection(("127.0.0.1", server.port)) as raw, \
                context.wrap_socket(raw, server_hostname=SERVICE_HOST) as tls:
            der = tls.getpeercert(binary_form=True)
            assert der is not None
            return x509.load_der_x509_certificate(der).serial_number

    old_serial = handshake()
    assert old_serial == serial_of((server.cert_dir / "tls.crt").read_bytes())
    KubeletVolume(server.cert_dir).write({"tls.crt": issued["tls.crt"], "tls.key": issued["tls.key"]})
    # Every handshake must succeed (an SSLError fails the test); each one sees the old or the new serial.
    serials = [handshake() for _ in range(20)]
    assert set(serials) <= {old_serial, serial_of(issued["tls.crt"])}
    poll(lambda: handshake() == serial_of(issued["tls.crt"]) or None, what="the new certificate")
    assert server.review(admission_review(workload("Pod")))["allowed"] is True
    reloads = ("gpupolicy_certificate_reloads_total", (("outcome", "success"),))
    assert server.metrics()[reloads] >= 1


# --- shutdown --------------------------------------------------------------------------------------------


def test_sigterm_drops_readiness_first_finishes_in_flight_requests_and_exits_zero(tmp_path: Path) -> None:
    # A drain long enough that the readiness and liveness probes below land inside it on a loaded machine.
    server = start_server(tmp_path, GPUPOLICY_DRAIN_SECONDS="3.0")
    try:
        body = json.dumps(admission_review(workload("Pod", container(gpus=2)), uid="in-flight")).encode()
        in_flight = server.connect()
        in_flight.putrequest("POST", "/validate?timeout=3s")
        in_flight.putheader("Content-Type", "application/json")
        in_flight.putheader("Content-Length", str(len(body)))
        in_flight.endheaders(body[:10])  # the request has started; the rest of its body is still coming

        server.process.send_signal(signal.SIGTERM)
        assert poll(lambda: server.request("GET", "/readyz").status == 503 or None, what="readiness to drop")
        assert server.request("GET", "/healthz").status == 200  # still alive and serving while draining

        # After the drain the workers stop accepting (a new connection would wait in the backlog unserved)
        # and get SIGTERM; the idle one exits at once, the busy one waits for its request.
        poll(lambda: "Worker exiting" in server.log_tail() or None, what="the graceful stop after the drain")
        in_flight.send(body[10:])
        response = in_flight.getresponse()
        answer = json.loads(response.read())["response"]
        in_flight.close()  # an idle kept-alive connection would hold the worker for gunicorn's 2 s linger
        server.close()
        assert (response.status, answer["uid"], answer["allowed"]) == (200, "in-flight", False)
        assert server.process.wait(timeout=15) == 0
    finally:
        stop_server(server)
    (line,) = [line for line in server.log_tail().splitlines() if "metrics of all workers are merged" in line]
    assert not Path(line.rsplit(" ", 1)[1]).exists(), "the server removes its metrics directory on exit"
