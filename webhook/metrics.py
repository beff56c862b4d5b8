"""Prometheus metrics on an explicit registry: decisions by rule, latency, policy generation, cert expiry."""

# Under gunicorn with several worker processes every worker counts in its own memory, so a scrape that
# lands on one worker would see a fraction of the traffic. With `multiprocess_dir` set, prometheus_client
# writes each sample to a per-process mmap file there and /metrics merges all workers' files
# (MultiProcessCollector). Gauges say how to merge: `livemax`/`livemin` over live workers, whose files
# serve.py discards when a worker exits (`mark_process_dead`). The directory must be in
# PROMETHEUS_MULTIPROC_DIR before prometheus_client is first imported, which serve.py guarantees.

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as prometheus_values
from prometheus_client.metrics_core import Metric

from webhook import nodes as webhook_nodes
from webhook import review, store

#: Admission handling is pure and in memory: the interesting range is 0.5 ms to a few ms (webhook.md §6),
#: with the API server's 3 s timeout the far end.
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: Decision counters kept bound to their labels: `labels()` converts, checks and looks up under a lock on every
#: call, a few µs per review (docs/performance.md). A review's kind is the client's to choose, so the cache is
#: bounded; past it, labels() is called as before.
_BOUND_DECISIONS = 1024


class Metrics:
    """Every metric the webhook exports, registered on `registry` (never prometheus_client's global one)."""

    def __init__(self, registry: CollectorRegistry, *, multiprocess_dir: Path | None = None) -> None:
        if multiprocess_dir is not None and prometheus_values.ValueClass is prometheus_values.MutexValue:
            raise RuntimeError(
                "prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR was set, so its samples "
                "cannot be shared between worker processes; start the server with `gpupolicy webhook serve`"
            )
        self.registry = registry
        self.multiprocess_dir = multiprocess_dir
        self.decisions = Counter(
            "gpupolicy_admission_decisions", "Admission reviews answered, one sample per rule that fired "
            "(rule=none when none did); outcome is allow, deny, warn, audit, skip or error.",
            ["rule", "outcome", "kind", "operation"], registry=registry,
        )
        self.duration = Histogram(
            "gpupolicy_admission_duration_seconds", "Time to parse, evaluate and answer one review.",
            buckets=DURATION_BUCKETS, registry=registry,
        )
        self.certificate_expiry = Gauge(
            "gpupolicy_certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate in use, as a Unix timestamp (the soonest across workers).",
            registry=registry, multiprocess_mode="livemin",
        )
        self.certificate_reloads = Counter(
            "gpupolicy_certificate_reloads", "Serving certificate changes picked up without a restart, by outcome.",
            ["outcome"], registry=registry,
        )
        self.policy_generation = Gauge(
            "gpupolicy_policy_generation",
            "How many times this worker loaded a new policy (1 after start); the highest across workers.",
            registry=registry, multiprocess_mode="livemax",
        )
        self.policy_reload_failures = Counter(
            "gpupolicy_policy_reload_failures",
            "Policy files that could not be read or loaded; the last good policy stayed in force.",
            registry=registry,
        )
        self.policy_info = Gauge(
            "gpupolicy_policy_info", "1 for the policy in force (cluster name, sha256 of the policy file).",
            ["cluster", "digest"], registry=registry, multiprocess_mode="livemax",
        )
        self.internal_errors = Counter(
            "gpupolicy_webhook_internal_errors",
            "Unexpected exceptions caught by the last-resort handler (each one is a bug).",
            registry=registry,
        )
        self.dropped_connections = Counter(
            "gpupolicy_webhook_dropped_connections",
            "Clients refused or disconnected before their request reached the webhook, by reason: timeout (a "
            "phase's deadline passed), malformed (broken HTTP), too-large, connection-limit (refused: every connection "
            "busy), evicted (idle longest, closed for a new one at the limit).",
            ["reason"], registry=registry,
        )
        self.node_cache_synced = Gauge(
            "gpupolicy_node_cache_synced",
            "1 while the node cache is synced (a list succeeded and its watch holds); 0 while pinned pods are judged "
            "on every class they may reach. The lowest across workers.",
            registry=registry, multiprocess_mode="livemin",
        )
        self.node_cache_nodes = Gauge(
            "gpupolicy_node_cache_nodes", "Nodes in the node cache (the highest across workers).",
            registry=registry, multiprocess_mode="livemax",
        )
        self.node_cache_last_event = Gauge(
            "gpupolicy_node_cache_last_event_timestamp_seconds",
            "Unix time of the node cache's last list, watch event or bookmark (the oldest across workers): "
            "time() minus this is its age.",
            registry=registry, multiprocess_mode="livemin",
        )
        self.node_lookups = Counter(
            "gpupolicy_node_lookups",
            "Pinned pods' nodes looked up, by result: cached, fetched (a GET found a node the cache lacked), absent "
            "(no such node), unknown (cache not synced, or the GET failed: judged on every class).",
            ["result"], registry=registry,
        )
        self._policy_labels: tuple[str, str] | None = None
        self._decision_children: dict[tuple[str, str, str, str], Counter] = {}

    # --- store.StoreObserver ----------------------------------------------------------------------------

    def policy_loaded(self, snapshot: store.Snapshot) -> None:
        labels = (snapshot.policy.cluster, snapshot.digest)
        if self._policy_labels and self._policy_labels != labels:
            if self.multiprocess_dir is None:
                self.policy_info.remove(*self._policy_labels)
            else:  # a sample already written to this worker's file cannot be removed, only zeroed
                self.policy_info.labels(*self._policy_labels).set(0)
        self._policy_labels = labels
        self.policy_info.labels(*labels).set(1)
        self.policy_generation.set(snapshot.generation)

    def policy_reload_failed(self) -> None:
        self.policy_reload_failures.inc()

    # --- tls.CertificateObserver ------------------------------------------------------------------------

    def certificate_loaded(self, not_after: datetime, *, reloaded: bool) -> None:
        self.certificate_expiry.set(not_after.timestamp())
        if reloaded:
            self.certificate_reloads.labels("success").inc()

    def certificate_reload_failed(self) -> None:
        self.certificate_reloads.labels("failure").inc()

    # --- cluster.nodes.CacheObserver -----------------------------------------------------------------------

    def state_changed(self, state: webhook_nodes.CacheState) -> None:
        self.node_cache_synced.set(1 if state.synced else 0)
        self.node_cache_nodes.set(state.nodes)

    def event_seen(self, when: float) -> None:
        self.node_cache_last_event.set(when)

    def node_lookup(self, outcome: str) -> None:
        self.node_lookups.labels(outcome).inc()

    # --- requests ---------------------------------------------------------------------------------------

    def connection_dropped(self, reason: str) -> None:
        self.dropped_connections.labels(reason).inc()

    def observe(self, rv: review.Review, verdict: review.Verdict, seconds: float) -> None:
        kind, operation = rv.kind["kind"], rv.operation
        children = self._decision_children
        for rule, outcome in verdict.rules:
            key = (rule, outcome, kind, operation)
            child = children.get(key)
            if child is None:
                child = self.decisions.labels(*key)
                if len(children) < _BOUND_DECISIONS:
                    children[key] = child
            child.inc()
        self.duration.observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The text exposition and its content type, merged across workers in multiprocess mode."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        merged = CollectorRegistry()
        merged.register(WorkerFiles(self.multiprocess_dir))
        return generate_latest(merged), CONTENT_TYPE_LATEST


class WorkerFiles:
    """prometheus_client's MultiProcessCollector, over the worker files whose header is written.

    A worker creates its file for a metric type on first use (a new worker after a crash or a restart): prometheus
    client opens it, which creates it empty, and only then sizes it and writes its header
    (prometheus_client/mmap_dict.py MmapedDict.__init__, 0.26.0). MultiProcessCollector reads every *.db file it
    finds, and a scrape that lands in that moment failed with struct.error ("unpack_from requires a buffer of at
    least 4 bytes") and a 500. An empty file holds no sample yet, so leaving it out loses nothing.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def collect(self) -> Iterable[Metric]:
        from prometheus_client import multiprocess

        files = sorted(str(path) for path in self.directory.glob("*.db") if _written(path))
        return multiprocess.MultiProcessCollector.merge(files, accumulate=True)


def _written(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:  # a dead worker's live gauges, removed by mark_process_dead meanwhile
        return False
