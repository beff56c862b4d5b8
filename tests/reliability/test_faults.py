"""Faults while serving: certificate rotation, policy replacement, a killed worker and SIGTERM, all under load."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from harness import REQUEST_TIMEOUT_SECONDS, Figures, helpers, https, log_problems, soak, target_of

CLIENTS = 6
FAILURES = ("gpupolicy_policy_reload_failures_total", ())
GENERATION = ("gpupolicy_policy_generation", ())
ASKS_TWO = helpers.admission_review(helpers.workload("Deployment", helpers.container(gpus=2)), uid="asks-two")


class BackgroundLoad:
    """soak.LoadGenerator on a thread; `report` is filled in when the block using it ends."""

    def __init__(self, target: soak.Target, **options: Any) -> None:
        self.generator = soak.LoadGenerator(target, **options)
        self.report: soak.LoadReport | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.report = self.generator.run(seconds=120, clients=CLIENTS)

    def start(self) -> BackgroundLoad:
        self._thread.start()
        return self

    def finish(self) -> soak.LoadReport:
        self.generator.stop()
        self._thread.join(timeout=30)
        assert self.report is not None, "the load did not stop"
        return self.report


@contextmanager
def under_load(target: soak.Target, **options: Any) -> Iterator[BackgroundLoad]:
    load = BackgroundLoad(target, **options).start()
    time.sleep(0.5)  # the load is running before the fault
    try:
        yield load
    finally:
        load.finish()


def worker_pids(server: https.Server) -> set[int]:
    return set(soak.process_tree(server.process.pid)) - {server.process.pid}


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[https.Server]:
    """A server of its own: these scenarios rotate its certificate, replace its policy and kill a worker."""
    running = https.start_server(tmp_path_factory.mktemp("faults"),
                                 GPUPOLICY_REQUEST_TIMEOUT_SECONDS=str(REQUEST_TIMEOUT_SECONDS))
    yield running
    assert https.stop_server(running) == 0, running.log_tail()
    assert log_problems(running.log.read_text()) == []


def serial_presented(server: https.Server) -> int:
    with socket.create_connection(("127.0.0.1", server.port)) as raw, \
            server.context().wrap_socket(raw, server_hostname=https.SERVICE_HOST) as tls:
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number


def test_certificates_rotated_three_times_under_load_fail_no_handshake_and_no_request(
    faulty: https.Server, tmp_path: Path, figures: Figures
) -> None:
    issued = [https.make_certs(tmp_path / f"issued-{n}") for n in (1, 2, 3)]
    # The caBundle holds every CA during the overlap, as cert-manager's injector and Kyverno keep it.
    faulty.cas.extend(tmp_path / f"issued-{n}" / "ca.crt" for n in (1, 2, 3))
    volume = helpers.KubeletVolume(faulty.cert_dir)
    serials = [https.serial_of(pair["tls.crt"]) for pair in issued]
    # A new connection, so a new handshake, every second request: rotation is only seen by handshakes.
    with under_load(target_of(faulty), reconnect_every=2) as load:
        volume.write({"tls.crt": issued[0]["tls.crt"], "tls.key": issued[0]["tls.key"]})  # the kubelet's swap
        https.poll(lambda: serial_presented(faulty) == serials[0] or None, what="the first new certificate")
        # Halfway through a rotation that is not atomic (a hostPath, an operator writing files in place):
        # the new certificate with the old key fails to load, and the old pair keeps serving.
        (faulty.cert_dir / "tls.crt").write_bytes(issued[1]["tls.crt"])
        time.sleep(0.5)
        (faulty.cert_dir / "tls.key").write_bytes(issued[1]["tls.key"])
        https.poll(lambda: serial_presented(faulty) == serials[1] or None, what="the second new certificate")
        volume.write({"tls.crt": issued[2]["tls.crt"], "tls.key": issued[2]["tls.key"]})
        https.poll(lambda: serial_presented(faulty) == serials[2] or None, what="the third new certificate")
        time.sleep(0.5)
    report = load.report
    assert report is not None and report.failures == 0, report.errors[:5]
    found = faulty.metrics()
    reloads = {dict(labels)["outcome"]: value for (name, labels), value in found.items()
               if name == "gpupolicy_certificate_reloads_total"}
    assert reloads["success"] >= 3 and reloads.get("failure", 0) >= 1, reloads
    not_after = x509.load_pem_x509_certificate(issued[2]["tls.crt"]).not_valid_after_utc
    assert found[("gpupolicy_certificate_expiry_timestamp_seconds", ())] == not_after.timestamp()
    figures.record("certificate rotation under load", rotations=3, sent=report.sent,
                   new_connections=report.connections, failures=report.failures, reloads=reloads)


def test_a_policy_replaced_under_load_gives_new_verdicts_and_an_invalid_one_keeps_the_last_good_visibly(
    faulty: https.Server, figures: Figures
) -> None:
    volume = helpers.KubeletVolume(faulty.policy_dir)
    before = faulty.metrics()
    assert faulty.review(ASKS_TWO)["allowed"] is False
    with under_load(target_of(faulty), check_verdicts=False) as load:
        volume.write({"admission-policy.json": https.TKE_WARN.to_json()})
        warned = https.poll(lambda: faulty.review(ASKS_TWO) if faulty.review(ASKS_TWO)["allowed"] else None,
                            what="the warn policy's verdict")
        https.poll(lambda: faulty.metrics()[GENERATION] > before[GENERATION] or None, what="a new generation")
        volume.write({"admission-policy.json": '{"version": "gpupolicy.dev/admission/v1", "cluster": 3}'})
        https.poll(lambda: faulty.metrics()[FAILURES] > before[FAILURES] or None, what="a reload failure")
        # Both workers notice by themselves; give the slower one its reload interval, then check both.
        time.sleep(0.5)
        kept = [faulty.review(ASKS_TWO) for _ in range(20)]
        ready = faulty.request("GET", "/readyz")
    after = faulty.metrics()
    report = load.report
    assert report is not None and report.failures == 0, report.errors[:5]
    assert warned["warnings"][0].startswith("shared-gpu-request-above-one: ")
    assert all(answer == warned for answer in kept)  # the last good policy, in every worker
    assert ready.status == 200 and ready.body["generation"] == after[GENERATION] == before[GENERATION] + 1
    assert after[FAILURES] >= before[FAILURES] + 1
    volume.write({"admission-policy.json": https.TKE.to_json()})
    https.poll(lambda: faulty.review(ASKS_TWO)["allowed"] is False or None, what="the enforcing policy again")
    figures.record("policy replaced under load", sent=report.sent, failures=report.failures,
                   generation_before=before[GENERATION], generation_after=after[GENERATION],
                   reload_failures=after[FAILURES] - before[FAILURES])


def test_a_worker_killed_with_sigkill_under_load_is_replaced_and_requests_then_all_succeed(
    faulty: https.Server, figures: Figures
) -> None:
    workers = worker_pids(faulty)
    assert len(workers) == 2
    victim = min(workers)
    with under_load(target_of(faulty)) as load:
        os.kill(victim, signal.SIGKILL)
        respawned = https.poll(lambda: (worker_pids(faulty) - workers) or None, what="gunicorn to respawn")
        https.poll(lambda: len(worker_pids(faulty)) == 2 or None, what="two workers again")
    during = load.report
    assert during is not None
    offset = len(faulty.log.read_text())
    after = soak.LoadGenerator(target_of(faulty)).run(seconds=3, clients=CLIENTS)
    served = soak.admissions_by_worker(faulty.log.read_text()[offset:])
    assert after.failures == 0, after.errors[:5]
    assert set(served) == worker_pids(faulty) and set(served) & respawned, served  # the new worker serves too
    assert faulty.request("GET", "/readyz").status == 200
    # What the killed worker was answering is lost with it, and so is the next request on each connection
    # it kept alive: at most one failure per client connection (each client reconnects after an error).
    # The API server does not retry a POST; for a GPU workload its failurePolicy decides.
    assert during.failures <= CLIENTS, during.errors
    figures.record("worker SIGKILL under load", sent_during=during.sent, failed_during=during.failures,
                   errors_during=during.errors[:4], sent_after=after.sent, failed_after=after.failures)


def test_sigterm_under_load_drops_readiness_first_serves_until_then_and_finishes_the_in_flight_request(
    tmp_path: Path, figures: Figures
) -> None:
    server = https.start_server(tmp_path, GPUPOLICY_DRAIN_SECONDS="1.5", GPUPOLICY_REQUEST_TIMEOUT_SECONDS="10")
    try:
        body = json.dumps(helpers.admission_review(helpers.workload("Pod", helpers.container(gpus=2)),
                                                   uid="in-flight")).encode()
        in_flight = server.connect()
        in_flight.putrequest("POST", "/validate?timeout=3s")
        in_flight.putheader("Content-Type", "application/json")
        in_flight.putheader("Content-Length", str(len(body)))
        in_flight.endheaders(body[:10])  # started; the rest of the body comes after the drain

        # Reviews, probes of liveness, scrapes and bad calls; /readyz is the one answer meant to change.
        mix = [call for call in soak.default_mix() if call.name != "readyz"]
        load = BackgroundLoad(target_of(server), mix=mix).start()
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        https.poll(lambda: server.request("GET", "/readyz").status == 503 or None, what="readiness to drop")
        unready_after = time.monotonic() - signalled
        # The endpoints controller takes a moment to drop an unready pod; the drain outlasts that.
        time.sleep(0.5)
        report = load.finish()
        server.close()
        https.poll(lambda: "Worker exiting" in server.log_tail() or None, what="the graceful stop")
        in_flight.send(body[10:])
        response = in_flight.getresponse()
        answer = json.loads(response.read())["response"]
        in_flight.close()
        exit_status = server.process.wait(timeout=20)
    finally:
        https.stop_server(server)
    assert report.failures == 0, report.errors[:5]
    assert log_problems(server.log.read_text()) == []
    assert unready_after < REQUEST_TIMEOUT_SECONDS  # readiness drops at once, long before the drain ends
    assert (response.status, answer["uid"], answer["allowed"]) == (200, "in-flight", False)
    assert exit_status == 0
    figures.record("SIGTERM under load", sent=report.sent, failures=report.failures,
                   readiness_dropped_after_s=round(unready_after, 2), in_flight_status=response.status,
                   exit_status=exit_status)
