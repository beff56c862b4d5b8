"""The current admission policy and its engine: reloaded when the file's digest changes, last good kept."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import yaml

from policy.resolved import offers
from policy.spec.diagnostics import PolicyError
from webhook import review

log = logging.getLogger("gpupolicy.webhook.store")

#: `admission-policy`: the compiled admission-policy.json (production); `spec`: a ClusterGPUPolicy YAML.
PolicyFormat = Literal["admission-policy", "spec"]
EngineFactory = Callable[[offers.AdmissionPolicy], review.Evaluator]


@dataclass(frozen=True)
class Snapshot:
    """One loaded policy: the document, its engine, the process-local generation and the file's sha256."""

    policy: offers.AdmissionPolicy
    engine: review.Evaluator
    generation: int
    digest: str

    @property
    def short_digest(self) -> str:
        return self.digest[:12]


class StoreObserver(Protocol):
    def policy_loaded(self, snapshot: Snapshot) -> None: ...
    def policy_reload_failed(self) -> None: ...


def default_engine_factory(policy: offers.AdmissionPolicy) -> review.Evaluator:
    from policy.admission import engine  # imported on first load, so the store's own tests need no engine

    return engine.Engine(policy)


def parse_policy(data: bytes, *, fmt: PolicyFormat, filename: str) -> offers.AdmissionPolicy:
    """Build the admission policy from file bytes.

    Raises ValueError (pydantic's ValidationError and UnicodeDecodeError are ValueErrors), PolicyError
    for a spec that does not pass its checks, or yaml.YAMLError.
    """
    if fmt == "admission-policy":
        return offers.AdmissionPolicy.from_json(data)
    from policy import load

    spec = load.load_policy_or_raise(data.decode("utf-8"), filename=filename)
    return offers.build_admission_policy(spec)


class PolicyStore:
    """Holds the current Snapshot; `refresh` reloads when the file's bytes change.

    The file is usually a ConfigMap mount, which the kubelet updates by swapping a `..data` symlink: no
    inotify event reaches the file's own path and mtimes are unreliable, so the store re-reads and hashes
    the bytes (a few KiB) at most once per `interval_seconds`. A new file that fails to parse or build an
    engine leaves the last good snapshot in place; the failure is logged and counted, and retried only
    when the bytes change again. Thread-safe: readers take `current` without locking.
    """

    def __init__(
        self,
        path: Path,
        *,
        fmt: PolicyFormat = "admission-policy",
        interval_seconds: float = 2.0,
        engine_factory: EngineFactory = default_engine_factory,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.fmt = fmt
        self.interval_seconds = interval_seconds
        self._engine_factory = engine_factory
        self._clock = clock
        self._lock = threading.Lock()
        self._observers: list[StoreObserver] = []
        self._current: Snapshot | None = None
        self._seen_digest: str | None = None  # last bytes tried, good or bad: a bad file is not re-parsed
        self._last_error = "not loaded yet"
        self._next_check = float("-inf")

    @property
    def current(self) -> Snapshot | None:
        return self._current

    @property
    def last_error(self) -> str:
        """Why the latest attempt failed ("" after a success), for /readyz and logs."""
        return self._last_error

    def subscribe(self, observer: StoreObserver) -> None:
        """Tell observer about every load and failure from now on, starting with the current snapshot."""
        self._observers.append(observer)
        if self._current is not None:
            observer.policy_loaded(self._current)

    def maybe_refresh(self) -> None:
        """Refresh if the interval has passed; never blocks on another thread already refreshing."""
        if self._clock() < self._next_check or not self._lock.acquire(blocking=False):
            return
        try:
            self._refresh_locked()
        finally:
            self._lock.release()

    def refresh(self) -> bool:
        """Re-read the file now; True when a new snapshot was installed."""
        with self._lock:
            return self._refresh_locked()

    def _refresh_locked(self) -> bool:
        self._next_check = self._clock() + self.interval_seconds
        try:
            data = self.path.read_bytes()
        except OSError as err:
            return self._failed(f"cannot read {self.path}: {err.strerror or err}", digest=None)
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._seen_digest:
            if self._current is not None and digest == self._current.digest:
                self._last_error = ""  # the good file is back after a read error
            return False
        self._seen_digest = digest
        try:
            policy = parse_policy(data, fmt=self.fmt, filename=str(self.path))
            engine = self._engine_factory(policy)
        except PolicyError as err:
            return self._failed(f"{self.path} is not a valid spec: {err}", digest)
        except (ValueError, yaml.YAMLError) as err:
            first = str(err).strip().splitlines()
            return self._failed(f"{self.path} is not a valid {self.fmt}: {' '.join(first[:3])}", digest)
        previous = self._current
        snapshot = Snapshot(policy, engine, (previous.generation if previous else 0) + 1, digest)
        self._current = snapshot
        self._last_error = ""
        log.info("policy loaded: cluster=%s generation=%d digest=%s file=%s",
                 policy.cluster, snapshot.generation, snapshot.short_digest, self.path)
        for observer in self._observers:
            observer.policy_loaded(snapshot)
        return True

    def _failed(self, reason: str, digest: str | None) -> bool:
        if digest is None and self._last_error == reason:
            return False  # a missing file is reported once, not every interval
        self._last_error = reason
        kept = (f"keeping generation {self._current.generation} ({self._current.short_digest})"
                if self._current else "no policy loaded yet: not ready")
        log.error("policy reload failed: %s; %s", reason, kept)
        for observer in self._observers:
            observer.policy_reload_failed()
        return False
