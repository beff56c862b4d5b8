"""The webhook's node lookup for pinned pods (spec.nodeName): what each answer of the node cache makes of the verdict,
and that a cache that cannot say (off, not synced, the API server unreachable) leaves the conservative stance.

The cache itself, against a real API server, is tests/kube/test_kube_node_cache.py; here a real cluster.nodes cache
that cannot reach any server stands for "not synced", and a scripted source for the answers a synced one gives."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from webhook_support import admission_review, compiled_policy

from cluster.nodes import CacheState, NodeCache, client_from
from webhook import create_app
from webhook.settings import Settings, SettingsError
from webhook.store import PolicyStore

FLEET_POLICY = compiled_policy("mixed-fleet").to_json()
#: tenant dev (gpu-tier in dev, sandbox) may use time-slicing on t4-dev only; routed to its tenant entry
DEV = "/validate/tenant/dev"


def pinned(node: str, gpus: int = 1) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lab", "namespace": "sandbox"},
            "spec": {"nodeName": node, "containers": [
                {"name": "lab", "image": "lab:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


@dataclass
class Answers:
    """A synced cache's answers, scripted: node -> labels (None: no such node); others "unknown"."""

    known: Mapping[str, Mapping[str, str] | None]
    asked: list[tuple[str, float]] = field(default_factory=list)
    keys: tuple[str, ...] = ()
    started: bool = False

    @property
    def state(self) -> CacheState:
        return CacheState(True, len(self.known), time.time())

    def use_keys(self, keys: Iterable[str]) -> None:
        self.keys = tuple(keys)

    def lookup(self, name: str, *, deadline: float) -> tuple[str, Mapping[str, str] | None]:
        self.asked.append((name, deadline))
        if name not in self.known:
            return "unknown", None
        labels = self.known[name]
        return ("cached", labels) if labels is not None else ("absent", None)

    def start(self) -> None:
        self.started = True


def app_with(tmp_path: Path, source: Any, **settings: Any) -> Flask:
    path = tmp_path / "admission-policy.json"
    path.write_text(FLEET_POLICY)
    return create_app(Settings(**settings), store=PolicyStore(path, interval_seconds=0),
                      nodes=(lambda metrics: source) if source is not None else None)


def verdict(app: Flask, obj: dict[str, Any], path: str = DEV, **review: Any) -> dict[str, Any]:
    reply = app.test_client().post(path, data=json.dumps(admission_review(obj, **review)),
                                   content_type="application/json")
    assert reply.status_code == 200, reply.data
    answer: dict[str, Any] = reply.get_json()["response"]
    return answer


def metrics(app: Flask) -> str:
    return str(app.test_client().get("/metrics").data.decode())


def test_a_pinned_pod_on_a_cached_node_is_judged_on_that_nodes_class(tmp_path: Path) -> None:
    source = Answers({"t4-dev-1": {"node-pool": "t4-dev"}, "h100-train-1": {"node-pool": "h100-train"}})
    app = app_with(tmp_path, source)
    assert source.started and "node-pool" in source.keys  # the policy's label keys, then the watch
    assert verdict(app, pinned("t4-dev-1"))["allowed"] is True
    denied = verdict(app, pinned("h100-train-1"))
    assert denied["allowed"] is False and "h100-train" in denied["status"]["message"]
    assert 'gpupolicy_node_lookups_total{result="cached"} 2.0' in metrics(app)


def test_a_pinned_pod_on_a_node_that_does_not_exist_is_denied_naming_it(tmp_path: Path) -> None:
    denied = verdict(app_with(tmp_path, Answers({"ghost-1": None})), pinned("ghost-1"))
    assert denied["allowed"] is False
    assert "nodeName ghost-1 (no such Node)" in denied["status"]["message"]


def test_the_lookup_gets_at_most_half_of_the_review_budget(tmp_path: Path) -> None:
    source = Answers({"t4-dev-1": {"node-pool": "t4-dev"}})
    app = app_with(tmp_path, source, review_budget_seconds=2.0)
    before = time.monotonic()
    verdict(app, pinned("t4-dev-1"))
    ((name, deadline),) = source.asked
    assert name == "t4-dev-1" and before < deadline <= time.monotonic() + 1.0


def test_only_pinned_pods_being_created_or_updated_are_looked_up(tmp_path: Path) -> None:
    source = Answers({"t4-dev-1": {"node-pool": "t4-dev"}})
    app = app_with(tmp_path, source)
    unpinned = pinned("t4-dev-1")
    del unpinned["spec"]["nodeName"]
    verdict(app, unpinned)
    verdict(app, None, operation="DELETE", old=pinned("t4-dev-1"))
    verdict(app, pinned("t4-dev-1"), sub_resource="status", operation="UPDATE", old=pinned("t4-dev-1"))
    assert source.asked == []


def conservative(app: Flask) -> dict[str, Any]:
    """What the webhook says of a dev pod pinned to a t4-dev node without knowing the node: judged on every class
    the pod may reach, some of which dev may not use."""
    answer = verdict(app, pinned("t4-dev-1"))
    assert answer["allowed"] is False
    assert "and that node may be of class" in answer["status"]["message"]
    return answer


def test_without_a_cache_or_with_one_that_cannot_say_the_pod_is_judged_on_every_class(tmp_path: Path) -> None:
    off = conservative(app_with(tmp_path, None))
    unknown = conservative(app_with(tmp_path, Answers({})))
    assert off["status"] == unknown["status"]


def test_a_cache_that_cannot_reach_its_api_server_holds_the_conservative_stance_and_says_so(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "none", "user": {"token": "unused"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}]}))
    cache = NodeCache(client_from(str(kubeconfig)), backoff_seconds=0.05, max_backoff_seconds=0.1,
                      request_timeout_seconds=0.5)
    try:
        app = app_with(tmp_path, cache)
        deadline = time.monotonic() + 10
        while "failed" not in cache.state.reason and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not cache.state.synced and "listing or watching nodes failed" in cache.state.reason
        conservative(app)
        text = metrics(app)
        assert "gpupolicy_node_cache_synced 0.0" in text
        assert 'gpupolicy_node_lookups_total{result="unknown"} 1.0' in text
    finally:
        cache.close()


def test_the_node_fetch_timeout_stays_within_the_review_budget() -> None:
    with pytest.raises(SettingsError, match="node fetch timeout"):
        Settings.from_env({"GPUPOLICY_NODE_FETCH_TIMEOUT_SECONDS": "2", "GPUPOLICY_REVIEW_BUDGET_SECONDS": "1"})
    settings = Settings.from_env({"GPUPOLICY_NODE_CACHE": "true", "GPUPOLICY_KUBECONFIG": "/etc/kubeconfig"})
    assert settings.node_cache and settings.kubeconfig == Path("/etc/kubeconfig")
    assert not Settings().node_cache  # a local `webhook serve` reaches for no cluster unless told to
