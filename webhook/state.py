"""What one webhook app serves from: its settings, policy store, metrics and drain flag; deciding and logging."""

from __future__ import annotations

import ctypes
import logging
import re
import time
from dataclasses import dataclass
from multiprocessing import sharedctypes

from werkzeug.exceptions import ServiceUnavailable

from policy.admission.workloads import pinned_node
from webhook import metrics as webhook_metrics
from webhook import nodes as webhook_nodes
from webhook import review
from webhook import store as webhook_store
from webhook.settings import Settings

log = logging.getLogger("gpupolicy.webhook")


class DrainFlag:
    """Set once SIGTERM arrives; /readyz then answers 503.

    It lives in shared memory created before gunicorn forks, so the master's signal handler flips it for
    every worker at once.
    """

    def __init__(self) -> None:
        self._value = sharedctypes.RawValue(ctypes.c_bool, False)

    @property
    def draining(self) -> bool:
        return bool(self._value.value)

    def begin(self) -> None:
        self._value.value = True


@dataclass(frozen=True)
class Webhook:
    """The state one app serves from, kept on `app.extensions["gpupolicy"]` (context.py)."""

    settings: Settings
    store: webhook_store.PolicyStore
    metrics: webhook_metrics.Metrics
    drain: DrainFlag
    nodes: webhook_nodes.NodeSource | None = None
    """The node cache (settings.node_cache), or None: pinned pods are then judged on every class they may reach."""

    def admit(self, rv: review.Review, *, tenant: str | None,
              deadline: float) -> tuple[review.Verdict, int | None]:
        """Decide one review against the current policy by ``deadline`` (time.monotonic): the verdict and the
        policy generation that gave it. The caller records it (``record``) once its answer is built, so a review
        whose answer fails to build is counted once, as the internal error it is, on every path.

        Raises ServiceUnavailable (HTTP 503) while no valid policy has loaded: the API server then applies
        the webhook's failurePolicy, and readiness keeps the Service from sending us traffic meanwhile.
        """
        snapshot = self.store.current
        if snapshot is None:
            raise ServiceUnavailable(f"no valid admission policy is loaded: {self.store.last_error}")
        nodes = None
        if self.nodes is not None and rv.operation in ("CREATE", "UPDATE") and not rv.sub_resource:
            nodes = webhook_nodes.nodes_for(self.nodes, pinned_node(rv.object), deadline, self.metrics)
        verdict = review.decide(rv, snapshot.engine, tenants=(tenant,) if tenant else (),
                                expired=lambda: time.monotonic() >= deadline, nodes=nodes)
        return verdict, snapshot.generation

    def record(self, rv: review.Review, verdict: review.Verdict, seconds: float, *, tenant: str | None,
               generation: int | None) -> None:
        self.metrics.observe(rv, verdict, seconds)
        fired = ",".join(rule for rule, _ in verdict.rules if rule != review.NO_RULE)
        # A review that a rule denied, warned or audited is logged; one admitted with nothing to say (most of
        # them) only at debug level (Gatekeeper, too, logs denials only): the metrics count it, and a line per pod
        # created was a seventh of a review's cost (docs/performance.md).
        level = logging.INFO if fired or not verdict.allowed else logging.DEBUG
        if verdict.rules[0][0] == review.BUDGET_RULE:
            level = logging.WARNING  # the object is unusual, or the webhook is overloaded: either wants a look
        if not log.isEnabledFor(level):
            return
        outcome = "allow" if verdict.allowed else "deny"
        # Names and verdicts only: object contents (env values, args) may hold secrets.
        log.log(
            level,
            "admission uid=%s kind=%s object=%s operation=%s dryRun=%s tenant=%s verdict=%s code=%s "
            "rules=%s%s generation=%s latency_ms=%.2f",
            loggable(rv.uid), loggable(rv.kind["kind"]), loggable(rv.object_key), rv.operation,
            str(rv.dry_run).lower(), loggable(tenant) if tenant else "-", outcome, verdict.code, fired or "-",
            f" skipped={loggable(verdict.skipped)}" if verdict.skipped else "",
            generation if generation is not None else "-", seconds * 1000,
        )
        if self.settings.log_objects and log.isEnabledFor(logging.DEBUG):
            log.debug("admission uid=%s object=%r", rv.uid, rv.object)


# What a uid, a kind or a namespace/name is made of; anything else is quoted and escaped in logs.
_PLAIN_TOKEN = re.compile(r"[A-Za-z0-9._:/@*<>+-]{0,253}")


def loggable(text: str) -> str:
    """Text from a request as one unambiguous log token.

    Every field of a review is the client's to choose: a newline would forge a log line, a space a
    `verdict=allow` field, a 3 MiB uid a 3 MiB line. Plain tokens pass unchanged; anything else is
    cut to 253 characters (a DNS subdomain) and written as a Python repr, quoted and escaped.
    """
    if _PLAIN_TOKEN.fullmatch(text):
        return text
    cut = text[:253]
    return repr(cut) + ("…" if len(text) > len(cut) else "")
