"""Webhook settings: one frozen dataclass, from GPUPOLICY_* environment variables overridden by flags."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from webhook.certs import CERT_FILE, KEY_FILE

ENV_PREFIX = "GPUPOLICY_"
MIB = 1024 * 1024


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the flag or variable."""


@dataclass(frozen=True)
class Settings:
    """Everything the webhook process is configured with.

    Worker model: gunicorn's master with 2 worker processes by default, sized for the 2-CPU pod the
    compiler emits, each serving all its connections from one asyncio event loop (worker.py). Evaluation
    is pure Python and holds the GIL, so one process can use only one CPU; two processes use both during a
    burst (a rollout creating many pods), and keep serving if one dies. What waits rather than computes
    (TLS handshakes, headers and bodies on their way, idle keep-alive connections) is a small object on the
    loop with a deadline, never a thread. Several processes mean Prometheus multiprocess mode
    (`metrics_dir`, see metrics.py).
    """

    policy_file: Path | None = None
    """The compiled admission-policy.json (a ConfigMap mount in production)."""
    spec_file: Path | None = None
    """A ClusterGPUPolicy YAML instead, compiled in memory (local use)."""
    cert_file: Path | None = None
    key_file: Path | None = None
    bind: str = "0.0.0.0"
    port: int = 8443
    metrics_port: int = 0
    """A second port, plain HTTP, serving only /metrics, /healthz and /readyz (0: none). It lets Prometheus
    scrape where the NetworkPolicy admits only the API server to the serving port; the compiled Deployment
    uses 9090. /metrics stays on the serving port too."""
    workers: int = 2
    threads: int = 2
    """Review threads per worker: the event loop reads, handshakes and answers probes while up to this many reviews
    are evaluated beside it (worker.py). They share the process's GIL, so more threads buy no CPU: two keep one
    costly review from holding up a cheap one, and the loop responsive, for one thread hand-off per review."""
    review_budget_seconds: float = 1.0
    """How long one review may take from its arrival (its last byte) to its verdict, queueing for a thread
    included; past it the review is denied, never allowed, and counted (rule review-budget-exceeded). The
    compiled Deployment sets a third of the webhook's timeoutSeconds (1 s of the default 3 s), so a denial
    reaches the API server well before it gives up and applies the failurePolicy."""
    max_connections: int = 500
    """Open connections per worker, TLS handshakes included; beyond this a new one is closed at once. Each idle
    TLS connection holds about 40 KiB, so the pod's memory limit is sized for 2 x 500 (docs/reliability.md)."""
    max_content_length: int = 3 * MIB
    """Request bodies above this get 413 before they are read; the API server caps a request at 3 MiB."""
    reload_interval_seconds: float = 2.0
    """How often the policy file is re-hashed (it is checked on requests and readiness probes)."""
    drain_seconds: float = 5.0
    """After SIGTERM: how long /readyz answers 503 while requests are still served, so endpoints drop us."""
    graceful_timeout_seconds: float = 10.0
    """Then: how long in-flight requests may take to finish before workers are killed. The compiled
    Deployment's preStop sleep (10 s) + drain + this must stay under terminationGracePeriodSeconds (30 s)."""
    keepalive_seconds: float = 75.0
    """Idle keep-alive lifetime; the API server reuses connections (webhook.md §1.10)."""
    header_timeout_seconds: float = 5.0
    """How long a new connection may take for its TLS handshake and its first request's headers, and a
    kept-alive one for a request's headers from its first byte (Go's ReadHeaderTimeout); never more than
    request_timeout_seconds. Slower clients are disconnected (connection.py)."""
    request_timeout_seconds: float = 10.0
    """How long one request may take from its first byte (from the accept, for a new connection) to its last
    body byte; a client that trickles its body slower gets 408 and is disconnected. The API server itself
    gives up after the webhook's timeoutSeconds (3 s compiled, 30 s at most)."""
    log_level: str = "info"
    log_objects: bool = False
    """Log admitted objects' contents at debug level (off: logs carry names, never specs or secrets)."""
    metrics_dir: Path | None = None
    """prometheus_client multiprocess directory (PROMETHEUS_MULTIPROC_DIR); serve.py fills it in."""
    node_cache: bool = False
    """Keep the labels of every Node (the keys the classes select by) from a list and watch, so a pod naming its
    node (spec.nodeName) is judged on exactly that node's classes (docs/admission.md §5). Off: such a pod is judged
    on every class it may reach. The compiled Deployment turns it on, with get/list/watch on nodes and nothing
    else; off by default here, so a local `webhook serve` reaches for no cluster."""
    kubeconfig: Path | None = None
    """Where the node cache finds the API server and its credentials; none: the pod's ServiceAccount."""
    node_fetch_timeout_seconds: float = 0.25
    """The longest GET of one node a synced cache lacks (created a moment ago); never more than half the review's
    remaining budget."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **flags: Any) -> Settings:
        """Settings from GPUPOLICY_* variables, then flags (None means "not given"); raises SettingsError."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name = ENV_PREFIX + f.name.upper()
            if f.name == "metrics_dir":
                name = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own variable
            elif f.name in ("policy_file", "spec_file", "cert_file", "key_file"):
                name = ENV_PREFIX + f.name.removesuffix("_file").upper()
            if env.get(name, "") != "":
                values[f.name] = _convert(f.name, name, env[name])
        cert_dir = flags.pop("cert_dir", None) or env.get(ENV_PREFIX + "CERT_DIR") or None
        given = {k: v for k, v in flags.items() if v is not None}
        for key, value in given.items():
            values[key] = _convert(key, "--" + key.replace("_", "-"), value)
        if cert_dir is not None:
            if "cert_file" in given or "key_file" in given:
                raise SettingsError("give either --cert-dir or --cert and --key, not both")
            values["cert_file"] = Path(cert_dir) / CERT_FILE
            values["key_file"] = Path(cert_dir) / KEY_FILE
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        """Raise SettingsError for contradictory or out-of-range values."""
        if self.policy_file and self.spec_file:
            raise SettingsError("give either a policy file (--policy) or a spec (--spec), not both")
        if (self.cert_file is None) != (self.key_file is None):
            raise SettingsError("the certificate and its key go together (--cert and --key, or --cert-dir)")
        if not 0 < self.port < 65536:
            raise SettingsError(f"port {self.port} is not between 1 and 65535")
        if not 0 <= self.metrics_port < 65536 or self.metrics_port == self.port:
            raise SettingsError(f"metrics port {self.metrics_port} must be 0 (none) or a port from 1 to 65535 "
                                f"other than the serving port {self.port}")
        if self.workers < 1 or self.threads < 1:
            raise SettingsError("workers and threads must be at least 1")
        if not 0 < self.review_budget_seconds <= 30:  # the API server waits 30 s at most; refuses nan too
            raise SettingsError("the review budget must be more than 0 and at most 30 seconds")
        if self.max_connections < 1:
            raise SettingsError("max connections must be at least 1")
        if self.max_content_length < 1024:
            raise SettingsError("max content length below 1 KiB would refuse every AdmissionReview")
        for name in ("reload_interval_seconds", "drain_seconds", "graceful_timeout_seconds", "keepalive_seconds"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name.replace('_', ' ')} must not be negative")
        if not 0 < self.node_fetch_timeout_seconds <= self.review_budget_seconds:
            raise SettingsError("the node fetch timeout must be more than 0 and at most the review budget")
        for name in ("header_timeout_seconds", "request_timeout_seconds"):
            if not 0 < getattr(self, name) <= 300:  # also refuses nan and inf
                raise SettingsError(f"{name.replace('_', ' ')} must be more than 0 and at most 300")

    @property
    def effective_header_timeout(self) -> float:
        """The header deadline actually applied: it cannot outlast the whole request's."""
        return min(self.header_timeout_seconds, self.request_timeout_seconds)

    @property
    def policy_path(self) -> Path | None:
        return self.policy_file or self.spec_file

    @property
    def policy_format(self) -> Literal["admission-policy", "spec"]:
        """How to read policy_path: a compiled admission-policy.json, or a spec compiled in memory."""
        return "spec" if self.spec_file else "admission-policy"


def _to_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "port": int, "metrics_port": int, "workers": int, "threads": int, "max_content_length": int, "max_connections": int,
    "reload_interval_seconds": float, "drain_seconds": float, "graceful_timeout_seconds": float,
    "keepalive_seconds": float, "header_timeout_seconds": float, "request_timeout_seconds": float,
    "review_budget_seconds": float, "log_objects": _to_bool, "node_cache": _to_bool, "kubeconfig": Path,
    "node_fetch_timeout_seconds": float,
    "log_level": str.lower, "bind": str, "policy_file": Path, "spec_file": Path, "cert_file": Path,
    "key_file": Path, "metrics_dir": Path,
}


def _convert(field_name: str, source: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return _CONVERTERS[field_name](value)
    except (ValueError, KeyError) as err:
        raise SettingsError(f"{source}={value!r}: {err}") from None
