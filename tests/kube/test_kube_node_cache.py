"""The webhook's node cache against a real API server: Nodes created, relabelled and deleted by the tests (kube_nodes),
read by cluster/nodes.py as the compiled webhook's ServiceAccount (a static token of that identity, bound the compiled
ClusterRole), and a real `gpupolicy webhook serve --node-cache` behind the API server deciding pinned pods
(spec.nodeName) on their node's classes.

A server of the module's own: the tests register a ValidatingWebhookConfiguration and bind a ClusterRole, which
would be in the way of the session server's other tests."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_api import KubeAPI, free_port, running_api_server
from kube_cases import EXAMPLES, Webhook, configuration, ensure_namespace, register, webhook_serving
from kube_nodes import Nodes
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from polling import poll

from cluster.nodes import CacheObserver, CacheState, NodeCache, Relist, client_from
from policy.admission.engine import Engine
from policy.load import load_policy_or_raise
from policy.resolved.offers import build_admission_policy
from policy.resolved.resolve import resolve

pytestmark = [pytest.mark.kube_api, pytest.mark.slow]

FLEET = EXAMPLES / "mixed-fleet"
ADMISSION = FLEET / "out" / "admission"
IDENTITY = "gpupolicy-webhook"
Obj = dict[str, Any]


def selector_keys() -> tuple[str, ...]:
    policy = load_policy_or_raise((FLEET / "cluster.yaml").read_text(), filename="cluster.yaml")
    return Engine(build_admission_policy(resolve(policy))).selector_keys


def node(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  **labels}}}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    """A server with the compiled webhook's ClusterRole and binding applied (its identity's only grants)."""
    with running_api_server(tmp_path_factory.mktemp("node-cache") / "api") as server:
        for kind in ("clusterrole", "clusterrolebinding"):
            server.kubectl("apply", "--server-side", "-f", str(ADMISSION / f"{kind}-gpupolicy-webhook-nodes.yaml"))
        yield server


@pytest.fixture
def nodes(api: KubeAPI) -> Iterator[Nodes]:
    written = Nodes(api)
    written.clear()
    yield written
    written.clear()


def webhook_cache(api: KubeAPI, keys: tuple[str, ...], **options: Any) -> NodeCache:
    """A cache reading as the webhook's ServiceAccount, through the kubeconfig the webhook would be given."""
    return NodeCache(client_from(str(api.kubeconfig_of(IDENTITY))), keys, **options)


@contextlib.contextmanager
def running(cache: NodeCache) -> Iterator[NodeCache]:
    thread = cache.start()
    try:
        yield cache
    finally:
        cache.close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the watch thread outlived close()"


def far() -> float:
    return time.monotonic() + 5


# --- the cache ------------------------------------------------------------------------------------------------------


def test_a_list_keeps_of_every_node_only_the_label_keys_the_classes_select_by(api: KubeAPI, nodes: Nodes) -> None:
    nodes.add(node("t4-dev-1", **{"node-pool": "t4-dev", "nvidia.com/gpu.product": "Tesla-T4-SHARED"}))
    nodes.add(node("cpu-1", **{"node-role": "cpu"}))
    keys = selector_keys()
    assert "node-pool" in keys and "kubernetes.io/os" not in keys
    cache = webhook_cache(api, keys, page_size=1)  # one node a page: the continue token is followed
    cache.relist()
    assert (cache.state.synced, cache.state.nodes) == (True, 2)
    outcome, labels = cache.lookup("t4-dev-1", deadline=far())
    assert outcome == "cached"
    assert labels == {k: v for k, v in nodes.labels("t4-dev-1").items() if k in keys}
    assert labels is not None and labels["node-pool"] == "t4-dev" and "kubernetes.io/os" not in labels
    assert cache.lookup("cpu-1", deadline=far()) == ("cached", {})  # none of the keys: no class selects it


def test_watch_events_add_relabel_and_delete_nodes(api: KubeAPI, nodes: Nodes) -> None:
    with running(webhook_cache(api, ("node-pool",))) as cache:
        poll(lambda: cache.state.synced or None, what="the cache to sync")
        nodes.add(node("h100-train-1", **{"node-pool": "h100-train"}))
        poll(lambda: cache.state.nodes == 1 or None, what="the ADDED event")
        assert cache.lookup("h100-train-1", deadline=far()) == ("cached", {"node-pool": "h100-train"})
        nodes.change("h100-train-1", {"node-pool": "t4-dev"})
        poll(lambda: cache.lookup("h100-train-1", deadline=far()) == ("cached", {"node-pool": "t4-dev"}) or None,
             what="the MODIFIED event")
        nodes.change("h100-train-1", {"node-pool": None})
        poll(lambda: cache.lookup("h100-train-1", deadline=far()) == ("cached", {}) or None, what="the label removed")
        assert api.request("DELETE", "/api/v1/nodes/h100-train-1").status == 200
        poll(lambda: cache.state.nodes == 0 or None, what="the DELETED event")
        # Gone from a synced cache: one GET says it does not exist.
        assert cache.lookup("h100-train-1", deadline=far()) == ("absent", None)


def test_a_node_created_before_its_event_arrived_is_fetched_and_a_slow_lookup_never_passes_its_deadline(
        api: KubeAPI, nodes: Nodes) -> None:
    cache = webhook_cache(api, ("node-pool",))
    cache.relist()  # synced, and no watch running: the node below reaches the cache by no event
    nodes.add(node("t4-dev-2", **{"node-pool": "t4-dev"}))
    assert cache.lookup("t4-dev-2", deadline=far()) == ("fetched", {"node-pool": "t4-dev"})
    assert cache.lookup("never-created", deadline=far()) == ("absent", None)
    # No time left in the review: no GET, and no verdict from it either way.
    assert cache.lookup("t4-dev-2", deadline=time.monotonic()) == ("unknown", None)


class GoneFirst(CoreV1Api):
    """The webhook identity's client, failing its first watch with 410 Gone as the API server answers a watch from a
    compacted version (a fresh test server keeps every version in its watch cache, so it cannot be asked for one:
    the one stand-in here, as the reconciler's tests wrap their client for API errors)."""

    def __init__(self, api: KubeAPI) -> None:
        super().__init__(client_from(str(api.kubeconfig_of(IDENTITY))).api_client)
        self.calls: list[str] = []

    def list_node(self, **kwargs: Any) -> Any:
        self.calls.append("watch" if kwargs.get("watch") else "list")
        if self.calls.count("watch") == 1 and kwargs.get("watch"):
            raise ApiException(status=410, reason="Gone")
        return super().list_node(**kwargs)


#: The event the API server ends a watch with when its version was compacted away (kube-apiserver 1.34.12, read off
#: a watch from resourceVersion 1 after compacting its etcd through etcd's /v3/kv/compaction).
EXPIRED = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                       "message": "too old resource version: 1 (200)", "reason": "Expired",
                                       "code": 410}}


class States(CacheObserver):
    def __init__(self) -> None:
        self.synced: list[bool] = []

    def state_changed(self, state: CacheState) -> None:
        self.synced.append(state.synced)


def test_a_watch_the_api_server_ends_with_410_gone_lists_again_and_stays_synced(api: KubeAPI, nodes: Nodes) -> None:
    nodes.add(node("t4-dev-1", **{"node-pool": "t4-dev"}))
    client, states = GoneFirst(api), States()
    # Gone a moment after its list, the cache waits its backoff before listing again (a server ending every watch at
    # once gets no list in a loop); after a watch that held, at once.
    with running(NodeCache(client, ("node-pool",), observer=states, backoff_seconds=0.2)) as cache:
        poll(lambda: client.calls.count("watch") >= 2 or None, what="the second watch")
        assert client.calls[:4] == ["list", "watch", "list", "watch"]
        assert cache.state.synced and cache.state.nodes == 1
        assert states.synced and all(states.synced)  # the old labels served meanwhile: never unsynced
        nodes.add(node("t4-dev-2", **{"node-pool": "t4-dev"}))
        poll(lambda: cache.state.nodes == 2 or None, what="the watch after the second list")
    with pytest.raises(Relist):  # the same, when 410 comes as the watch's ERROR event
        cache.apply(EXPIRED)


def test_new_label_keys_list_again_and_until_then_the_cache_cannot_say(api: KubeAPI, nodes: Nodes) -> None:
    nodes.add(node("h20-1", **{"gpu-pool": "h20", "node-pool": "t4-dev"}))
    with running(webhook_cache(api, ("node-pool",), watch_timeout_seconds=2)) as cache:
        poll(lambda: cache.state.synced or None, what="the cache to sync")
        cache.use_keys(("gpu-pool", "node-pool"))  # a new policy selects by gpu-pool too
        assert cache.lookup("h20-1", deadline=far()) == ("unknown", None)
        poll(lambda: cache.lookup("h20-1", deadline=far()) == ("cached", {"gpu-pool": "h20", "node-pool": "t4-dev"})
             or None, what="the list with the new keys")


def test_a_cache_that_cannot_reach_the_api_server_is_unsynced_says_so_once_and_answers_unknown(
        api: KubeAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    closed = tmp_path / "kubeconfig"
    text = api.kubeconfig_of(IDENTITY).read_text()
    closed.write_text(re.sub(r"https://127\.0\.0\.1:\d+", f"https://127.0.0.1:{free_port()}", text))
    caplog.set_level(logging.INFO, logger="gpupolicy.webhook.nodes")
    cache = NodeCache(client_from(str(closed)), ("node-pool",), backoff_seconds=0.05, max_backoff_seconds=0.1,
                      request_timeout_seconds=1)
    with running(cache):
        poll(lambda: "failed" in cache.state.reason or None, what="the failed list")
        time.sleep(0.5)  # several retries
        assert not cache.state.synced
        assert cache.lookup("t4-dev-1", deadline=far()) == ("unknown", None)
    lines = [r.getMessage() for r in caplog.records if "not synced" in r.getMessage()]
    assert len(lines) == 1, lines  # one line per change of state, not per retry
    assert "listing or watching nodes failed" in lines[0]


def test_the_webhook_identity_may_read_nodes_and_nothing_else(api: KubeAPI, nodes: Nodes) -> None:
    nodes.add(node("t4-dev-1", **{"node-pool": "t4-dev"}))
    for path in ("/api/v1/nodes", "/api/v1/nodes/t4-dev-1", "/api/v1/nodes?watch=true&timeoutSeconds=1"):
        assert api.request("GET", path, identity=IDENTITY).status == 200, path
    for method, path in (("GET", "/api/v1/pods"), ("GET", "/api/v1/secrets"),
                         ("GET", "/api/v1/namespaces/gpupolicy-system/secrets"), ("GET", "/api/v1/configmaps"),
                         ("PATCH", "/api/v1/nodes/t4-dev-1"), ("DELETE", "/api/v1/nodes/t4-dev-1"),
                         ("PATCH", "/api/v1/nodes/t4-dev-1/status")):
        body = {"metadata": {"labels": {"x": "y"}}} if method == "PATCH" else None
        answer = api.request(method, path, body, content_type="application/merge-patch+json", identity=IDENTITY)
        assert answer.status == 403, (method, path, answer.body)


# --- the webhook behind the API server ------------------------------------------------------------------------------


@contextlib.contextmanager
def registered_webhook(api: KubeAPI, directory: Path, *flags: str) -> Iterator[Webhook]:
    """`gpupolicy webhook serve` of mixed-fleet on loopback, registered with the compiled configuration."""
    with webhook_serving(api, FLEET.name, directory, *flags) as webhook:
        register(api, configuration(FLEET.name, webhook.url, api.ca.pem))
        poll(lambda: "denied the request" in create(api, pod("probe", "gpu-node-x", gpus=1000), dry=True).message
             or None, what="the webhook configuration to take effect")
        yield webhook


SANDBOX = "sandbox"  # gpu-tier=sandbox: tenant dev, time-slicing on t4-dev only


def pod(name: str, node_name: str, gpus: int = 1) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": SANDBOX},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "lab", "image": "registry.example/lab:1",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def create(api: KubeAPI, obj: Obj, *, dry: bool = False) -> Any:
    suffix = "?dryRun=All" if dry else ""
    return api.request("POST", f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods{suffix}", obj)


def unpinned(name: str, pool: str) -> Obj:
    obj = pod(name, "")
    del obj["spec"]["nodeName"]
    obj["spec"]["nodeSelector"] = {"node-pool": pool}
    return obj


@pytest.fixture(scope="module")
def fleet(api: KubeAPI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """The webhook with its node cache as the compiled ServiceAccount, beside the compiled ValidatingAdmissionPolicies
    (mixed-fleet's engine is both, its failurePolicy Fail: the API server runs them first)."""
    ensure_namespace(api, SANDBOX, {"gpu-tier": "sandbox"})
    Nodes(api).clear()
    for path in sorted(ADMISSION.glob("validatingadmissionpolicy*.yaml")):
        api.kubectl("apply", "--server-side", "-f", str(path))
    # In effect once an unpinned pod on a class dev may not use is denied by the policies themselves.
    poll(lambda: "ValidatingAdmissionPolicy" in create(api, unpinned("vap-probe", "h100-train"), dry=True).message
         or None, timeout=60, what="the compiled policies to take effect")
    with registered_webhook(api, tmp_path_factory.mktemp("webhook-node-cache"), "--node-cache",
                            "--kubeconfig", str(api.kubeconfig_of(IDENTITY))) as webhook:
        yield webhook
    Nodes(api).clear()


def test_a_pinned_pod_is_judged_on_its_nodes_class(api: KubeAPI, fleet: Webhook) -> None:
    nodes = Nodes(api)
    nodes.add(node("t4-dev-1", **{"node-pool": "t4-dev"}))
    nodes.add(node("h100-train-1", **{"node-pool": "h100-train"}))
    poll(lambda: "gpupolicy_node_cache_nodes 2.0" in fleet.metrics() or None, what="the nodes in the cache")
    assert "gpupolicy_node_cache_synced 1.0" in fleet.metrics()
    # On a node of t4-dev, the one class tenant dev may use: admitted (judged on every class, it was denied), by
    # the policies, which leave it to the webhook, and by the webhook.
    admitted = create(api, pod("on-t4", "t4-dev-1"))
    assert admitted.status == 201, admitted.body
    assert create(api, unpinned("off-t4", "h100-train"), dry=True).status == 403  # the policies still hold
    # On a node of h100-train, which dev may not use: denied, naming the node and its class.
    denied = create(api, pod("on-h100", "h100-train-1"))
    assert denied.status == 403, denied.body
    assert "tenant-sharing-mode-denied" in denied.message and "h100-train" in denied.message, denied.message
    assert "h100-train-1" in denied.message, denied.message


def test_a_pod_pinned_to_a_node_created_a_moment_before_is_judged_on_that_nodes_class(
        api: KubeAPI, fleet: Webhook) -> None:
    for index in range(5):  # no wait between the node and the pod: the watch or the fresh GET decides
        Nodes(api).add(node(f"t4-new-{index}", **{"node-pool": "t4-dev"}))
        answer = create(api, pod(f"fresh-{index}", f"t4-new-{index}"), dry=True)
        assert answer.status == 201, answer.body
    assert re.search(r'gpupolicy_node_lookups_total\{result="(cached|fetched)"\}', fleet.metrics())


def test_a_pod_pinned_to_a_node_that_does_not_exist_is_denied_naming_it(api: KubeAPI, fleet: Webhook) -> None:
    denied = create(api, pod("ghost", "ghost-1"), dry=True)
    assert denied.status == 403, denied.body
    assert "nodeName ghost-1 (no such Node)" in denied.message, denied.message
    assert 'gpupolicy_node_lookups_total{result="absent"}' in fleet.metrics()


def test_without_the_cache_a_pinned_pod_is_judged_on_every_class_it_may_reach(
        api: KubeAPI, fleet: Webhook, tmp_path: Path) -> None:
    Nodes(api).add(node("t4-dev-9", **{"node-pool": "t4-dev"}))
    assert create(api, pod("cached", "t4-dev-9"), dry=True).status == 201
    fleet.stop()  # the module's webhook gives way to one without a cache, on another port
    with registered_webhook(api, tmp_path):
        denied = create(api, pod("uncached", "t4-dev-9"), dry=True)
        assert denied.status == 403, denied.body
        assert "may be of class" in denied.message, denied.message
