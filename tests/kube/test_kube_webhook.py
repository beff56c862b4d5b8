"""The webhook end to end: a real kube-apiserver calls `gpupolicy webhook serve` through the compiled
ValidatingWebhookConfiguration, and its verdicts on every case of the examples' admission suites are
`gpupolicy admit`'s (CREATE) or the suite's, which `gpupolicy test` checks against the engine (UPDATE, DELETE).

The configuration is the committed one with one change: each webhook's clientConfig names the loopback URL of
the test's webhook process (with the test CA as caBundle) instead of the in-cluster Service, which nothing
routes to here.  Rules, matchConditions, namespaceSelectors (one webhook per tenant), failurePolicy and
timeoutSeconds are the compiled ones, and are what the API server applies before and around each call.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_api import LOOPBACK, Answer, Environments, KubeAPI, free_port, running_api_server
from kube_cases import (
    EXAMPLES,
    GPUPOLICY,
    Case,
    Obj,
    Webhook,
    cases,
    configuration,
    poll,
    prepare,
    register,
    send,
    webhook_serving,
)

pytestmark = [pytest.mark.kube_api, pytest.mark.slow]

#: examples whose tree runs the webhook and that carry an admission test suite to send through it
WEBHOOK_CLUSTERS = sorted(p.parents[2].name
                          for p in EXAMPLES.glob("*/out/admission/validatingwebhookconfiguration-*.yaml")
                          if (p.parents[2] / "admission-tests.yaml").is_file())
#: status.details.causes entries that carry a finding's fix, not a finding (webhook/review.py FIX_CAUSE)
FIX_CAUSE = "gpupolicy.dev/fix"


@dataclass
class Fleet:
    cluster: str
    api: KubeAPI
    webhook: Webhook
    directory: Path


def gpu_pod(namespace: str, name: str, gpus: int | str = 1000) -> Case:
    """A Pod asking for more whole GPUs than any class offers: every example's engine denies it."""
    return Case("probe", 0, name, "CREATE", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}},
        None, namespace, {}, {})


def plain_pod(namespace: str, name: str) -> Case:
    return Case("probe", 0, name, "CREATE", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]}}, None, namespace, {}, {})


@contextlib.contextmanager
def fleet_of(cluster: str, directory: Path) -> Iterator[Fleet]:
    """An API server with the example's namespaces and stored objects, its webhook process, and the compiled
    configuration registered and in effect."""
    with running_api_server(directory / "api") as api:
        prepare(api, cluster, cases(cluster))
        api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": "gpupolicy-probe"}})
        with webhook_serving(api, cluster, directory) as webhook:
            register(api, configuration(cluster, webhook.url, api.ca.pem))
            poll(lambda: "denied the request" in send(api, gpu_pod("gpupolicy-probe", "probe")).message or None,
                 what="the webhook configuration to take effect")
            yield Fleet(cluster, api, webhook, directory)


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environments[Fleet]]:
    pool = Environments(lambda cluster: fleet_of(cluster, tmp_path_factory.mktemp(f"webhook-{cluster}")))
    yield pool
    pool.close()


def admit(case: Case, directory: Path) -> dict[str, Any]:
    """`gpupolicy admit` of the case's object, with its namespace's labels: the offline verdict."""
    manifest = directory / f"case-{case.cluster}-{case.index}.yaml"
    manifest.write_text(yaml.safe_dump(case.obj, sort_keys=True))
    labels = ",".join(f"{k}={v}" for k, v in sorted(case.labels.items()))
    command = [GPUPOLICY, "admit", "-p", str(EXAMPLES / case.cluster / "cluster.yaml"), "--output", "json",
               str(manifest)]
    if labels:
        command[2:2] = ["--namespace-labels", f"{case.namespace}={labels}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 1), result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def as_sent(api: KubeAPI, case: Case) -> Obj:
    """The case's object as the API server sends it to a webhook: a dry run in kube-system, which the compiled
    configuration excludes, answers with it defaulted and canonical; only the namespace is put back."""
    obj = copy.deepcopy(case.obj)
    obj["metadata"]["namespace"] = "kube-system"
    answer = send(api, dataclasses.replace(case, obj=obj, namespace="kube-system"))
    assert answer.status == 201, answer.body
    sent: Obj = answer.body
    metadata = sent["metadata"]
    for server_field in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        metadata.pop(server_field, None)
    metadata["namespace"] = case.namespace
    sent.pop("status", None)
    return sent


def causes(answer: Answer) -> list[tuple[str, str]]:
    details = answer.body.get("details") or {} if isinstance(answer.body, dict) else {}
    return [(c["reason"], c["message"]) for c in details.get("causes", []) if c.get("reason") != FIX_CAUSE]


def params() -> list[Any]:
    return [pytest.param(case, id=case.id) for cluster in WEBHOOK_CLUSTERS for case in cases(cluster)]


@pytest.mark.parametrize("case", params())
def test_the_api_servers_verdict_through_the_webhook_is_gpupolicy_admits(fleets: Environments[Fleet],
                                                                         case: Case) -> None:
    fleet = fleets.get(case.cluster)
    answer = send(fleet.api, case)
    if answer.status == 422:
        # refused by the API server's own validation (an amount like 1500m) before any webhook is called
        assert not case.expect["allowed"] and "gpu-request-invalid" in case.expect["rules"], answer.message
        return
    if case.operation != "CREATE":
        # UPDATE and DELETE: the suite's verdict (what `gpupolicy test` checks against the engine)
        assert (answer.status in (200, 201)) == case.expect["allowed"], (answer.status, answer.body)
        if not case.expect["allowed"]:
            assert {code for code, _ in causes(answer)} <= set(case.expect["rules"])
        return
    # admit judges the object as the webhook receives it (defaulted, quantities canonical: 60000 arrives as
    # 60k and a message quotes it so), and the object as written gets the same rules
    report = admit(dataclasses.replace(case, obj=as_sent(fleet.api, case)), fleet.directory)
    errors = [(d["code"], d["message"]) for d in report["diagnostics"] if d["severity"] == "error"]
    written = admit(case, fleet.directory)
    assert sorted(d["code"] for d in written["diagnostics"]) == sorted(d["code"] for d in report["diagnostics"])
    if errors:
        assert answer.status == 403, (answer.status, answer.body)
        assert answer.message.startswith('admission webhook "'), answer.message
        assert "denied the request: " in answer.message
        # the webhook's causes, passed through by the API server: one per denying finding, worded as admit words
        # it (admit, reading many files, first names the object)
        where = f"{case.kind} {case.obj['metadata']['name']} (namespace {case.namespace}): "
        assert sorted((code, where + message) for code, message in causes(answer)) == sorted(errors)
    else:
        assert answer.status in (200, 201), (answer.status, answer.body)
        warned = [d["code"] for d in report["diagnostics"] if d["severity"] == "warning"]
        for code in warned:  # a warn-mode finding reaches the client as a Warning header naming its rule
            assert any(code in text for text in answer.warnings), (code, answer.warnings)
    assert {code for code, _ in errors} <= set(case.expect["rules"])


@pytest.mark.parametrize("cluster", WEBHOOK_CLUSTERS)
def test_excluded_namespaces_are_never_sent(fleets: Environments[Fleet], cluster: str) -> None:
    fleet = fleets.get(cluster)
    # namespaceSelector: kube-system (and the webhook's own namespace) are left out, so a pod the engine would
    # deny is admitted there
    answer = send(fleet.api, gpu_pod("kube-system", "excluded"))
    assert answer.status == 201, answer.body


class Silent:
    """A TLS-less listener that accepts connections and never answers: a webhook that hangs."""

    def __init__(self) -> None:
        self.socket = socket.create_server((LOOPBACK, 0))
        self.port = int(self.socket.getsockname()[1])
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.held.append(connection)

    def close(self) -> None:
        self.socket.close()
        for connection in self.held:
            connection.close()


# The failure handling is the API server's, the same for every example: the first one shows it.
@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_an_unreachable_webhook_fails_closed_or_open_as_the_failure_policy_says(fleets: Environments[Fleet],
                                                                                policy: str) -> None:
    fleet = fleets.get(WEBHOOK_CLUSTERS[0])
    api, closed = fleet.api, free_port()  # nothing listens there
    try:
        register(api, configuration(fleet.cluster, f"https://{LOOPBACK}:{closed}", api.ca.pem, failurePolicy=policy))
        if policy == "Fail":
            answer = poll(lambda: ((a := send(api, gpu_pod("gpupolicy-probe", "fail", gpus=1))).status == 500 and a)
                          or None, what="the configuration pointing nowhere to take effect")
            assert "failed calling webhook" in answer.message, answer.message
            assert "connection refused" in answer.message, answer.message
        else:
            poll(lambda: send(api, gpu_pod("gpupolicy-probe", "open")).status == 201 or None,
                 what="failurePolicy Ignore to admit")
    finally:
        register(api, configuration(fleet.cluster, fleet.webhook.url, api.ca.pem))
        poll(lambda: "denied the request" in send(api, gpu_pod("gpupolicy-probe", "back")).message or None,
             what="the webhook to be back in the configuration")


def test_a_hanging_webhook_is_given_up_after_the_compiled_timeout_and_never_asked_about_plain_pods(
        fleets: Environments[Fleet]) -> None:
    fleet = fleets.get(WEBHOOK_CLUSTERS[0])
    api, silent = fleet.api, Silent()
    compiled = configuration(fleet.cluster, "https://unused", api.ca.pem)
    timeout = compiled["webhooks"][0]["timeoutSeconds"]
    try:
        register(api, configuration(fleet.cluster, f"https://{LOOPBACK}:{silent.port}", api.ca.pem))
        poll(lambda: send(api, gpu_pod("gpupolicy-probe", "hang", gpus=1)).status == 500 or None,
             what="the configuration pointing at the silent listener to take effect")
        started = time.monotonic()
        answer = send(api, gpu_pod("gpupolicy-probe", "hang", gpus=1))
        waited = time.monotonic() - started
        assert answer.status == 500 and "failed calling webhook" in answer.message, answer.message
        assert "context deadline exceeded" in answer.message or "timeout" in answer.message.lower(), answer.message
        assert timeout - 0.5 <= waited <= timeout + 5, (waited, timeout)
        # matchConditions keep pods without nvidia.com/ resources away from it: admitted without waiting
        started = time.monotonic()
        plain = send(api, plain_pod("gpupolicy-probe", "plain"))
        assert plain.status == 201, plain.body
        assert time.monotonic() - started < timeout / 2, "the API server waited for a webhook it must not call"
    finally:
        register(api, configuration(fleet.cluster, fleet.webhook.url, api.ca.pem))
        poll(lambda: "denied the request" in send(api, gpu_pod("gpupolicy-probe", "back")).message or None,
             what="the webhook to be back in the configuration")
        silent.close()
