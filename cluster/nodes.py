"""The webhook's node cache: the labels of every Node (only the keys the policy's classes select by), kept by a
list and watch of Nodes, so that a pod naming its node (spec.nodeName) is judged on exactly that node's classes.

Live I/O, hence here and not in webhook/ (which sees it only through webhook.nodes.NodeSource; the command line
joins the two). One cache per webhook worker process, each with its own watch thread and API client, made after
the fork (a client's connection pool must not be shared across it): with 2 workers and 3 replicas that is 6 watches
on Nodes, against one per kubelet a cluster already carries, and each list is paged and metadata-only.

What the API server is asked, and why:

- list and watch as ``PartialObjectMetadata`` (the Accept header of apimachinery's meta.k8s.io/v1 table-free
  metadata form): a Node's status (images, conditions, addresses) is most of its bytes; only labels are read;
- the list in pages of ``page_size`` (limit/continue), so no single response nor JSON parse (which holds the GIL
  and so the worker's event loop) grows with the cluster: measured on the 2-core machine under load, a page of 500
  nodes with 32 labels each and three managers' managedFields is 3.0 MB and 71 ms to parse, so pages are of 100
  (about 14 ms and 0.6 MB a page);
- the watch from the list's resourceVersion, with bookmarks, for at most ``watch_timeout_seconds``; an ERROR event
  (410 Gone: the version was compacted away) re-lists at once (after the backoff when the last list is under
  RELIST_SPACING_SECONDS old, so a server ending every watch at once gets no list in a loop), keeping the old
  labels meanwhile; any other failure marks the cache unsynced (lookups answer "unknown" and the webhook keeps its
  conservative stance) and retries after a backoff doubling to ``max_backoff_seconds``;
- a node missing from a synced cache may have been created a moment ago, before its ADDED event arrived: one GET
  of that node, within the review's deadline and at most ``fetch_timeout_seconds``, ``max_fetches`` at once,
  decides between "fetched" (its labels) and "absent" (404); anything else is "unknown".

Memory: per node its name and a tuple of the selected keys' values (interned: a pool's nodes share them), about
250 bytes; 5,000 nodes with 3 selected keys took 1.2 MB (tracemalloc, the nodes above).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api

LOG = logging.getLogger("gpupolicy.webhook.nodes")

#: apimachinery's metadata-only forms (k8s.io/apimachinery pkg/apis/meta/v1 PartialObjectMetadata[List]); the
#: plain JSON after the comma is what a server without them would send instead (read the same way).
LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
WATCH_ACCEPT = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json"

Outcome = Literal["cached", "fetched", "absent", "unknown"]
#: A list again within this of the last one waits its backoff first (the watch ended at once).
RELIST_SPACING_SECONDS = 10.0


@dataclass(frozen=True)
class CacheState:
    """What the cache can say: synced (a list succeeded and the watch since has not failed), how many nodes it
    holds, the Unix time of the last list or watch event (None before the first), and why it is not synced."""

    synced: bool
    nodes: int
    last_event: float | None
    reason: str = ""


class CacheObserver:
    """Told of every state change and every event (the webhook's metrics); does nothing by default."""

    def state_changed(self, state: CacheState) -> None: ...

    def event_seen(self, when: float) -> None: ...


class Relist(Exception):
    """The watch's resourceVersion is gone (410), or the keys changed: list again, at once."""


@dataclass(frozen=True)
class _Table:
    keys: tuple[str, ...]
    values: dict[str, tuple[str | None, ...]]


class NodeCache:
    """Node name -> the values of ``keys`` among its labels; ``run`` fills it until ``stop``."""

    def __init__(self, api: CoreV1Api, keys: Iterable[str] = (), *, observer: CacheObserver | None = None,
                 page_size: int = 100, watch_timeout_seconds: int = 60, request_timeout_seconds: float = 10.0,
                 backoff_seconds: float = 1.0, max_backoff_seconds: float = 30.0, fetch_timeout_seconds: float = 0.25,
                 max_fetches: int = 1, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.observer = observer or CacheObserver()
        self.page_size = page_size
        self.watch_timeout_seconds = watch_timeout_seconds
        self.request_timeout_seconds = request_timeout_seconds
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.fetch_timeout_seconds = fetch_timeout_seconds
        self.clock = clock
        self.stop = threading.Event()
        self._fetches = threading.BoundedSemaphore(max_fetches)
        self._table = _Table(tuple(sorted(set(keys))), {})
        self._wanted = self._table.keys
        self._state = CacheState(False, 0, None, "not listed yet")
        self._thread: threading.Thread | None = None
        self._watching: Any = None  # the open watch response, for close()

    # --- what the webhook asks -------------------------------------------------------------------------------

    @property
    def state(self) -> CacheState:
        return self._state

    def use_keys(self, keys: Iterable[str]) -> None:
        """The label keys to keep (a new policy's classes may select by others): a change re-lists, and until that
        list is done lookups answer "unknown", as the labels of the new keys are not known yet."""
        wanted = tuple(sorted(set(keys)))
        if wanted != self._wanted:
            self._wanted = wanted

    def lookup(self, name: str, *, deadline: float) -> tuple[Outcome, Mapping[str, str] | None]:
        """The node's selected labels: ("cached", labels) from the cache; for a node a synced cache lacks, one GET
        by ``deadline`` (time.monotonic), ("fetched", labels) or ("absent", None) on 404; ("unknown", None) when the
        cache is not synced, its keys are not the policy's, or the GET failed, timed out or had no time or slot."""
        table = self._table
        if not self._state.synced or table.keys != self._wanted:
            return "unknown", None
        values = table.values.get(name)
        if values is not None:
            return "cached", _labels(table.keys, values)
        remaining = deadline - time.monotonic()
        timeout = min(self.fetch_timeout_seconds, remaining)
        if timeout < 0.01 or not self._fetches.acquire(blocking=False):
            return "unknown", None
        try:
            return self._fetch(name, table.keys, timeout)
        finally:
            self._fetches.release()

    def _fetch(self, name: str, keys: tuple[str, ...], timeout: float) -> tuple[Outcome, Mapping[str, str] | None]:
        try:
            response = self.api.read_node(name, _preload_content=False, _request_timeout=timeout,
                                          _headers={"Accept": WATCH_ACCEPT})
            document = json.loads(response.data)
        except Exception as err:  # the client's ApiException, urllib3's errors, a body that is not JSON
            if getattr(err, "status", None) == 404:
                return "absent", None
            LOG.debug("GET of node %s failed: %s", name, _reason(err))
            return "unknown", None
        return "fetched", _labels(keys, _values(keys, document))

    # --- the watch loop --------------------------------------------------------------------------------------

    def start(self) -> threading.Thread:
        """Run in a daemon thread (the process's exit ends it), once."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name="gpupolicy-node-cache", daemon=True)
            self._thread.start()
        return self._thread

    def close(self) -> None:
        """Stop: the loop ends now rather than at the open watch's next event or its end (its socket is shut)."""
        self.stop.set()
        response = self._watching
        if response is not None:
            with contextlib.suppress(AttributeError, OSError):
                response.shutdown()  # urllib3 >= 2.3: unblocks the read in the watch thread

    def run(self) -> None:
        delay = self.backoff_seconds
        listed_at = -RELIST_SPACING_SECONDS
        while not self.stop.is_set():
            try:
                listed_at = time.monotonic()
                version = self.relist()
                while not self.stop.is_set():
                    version = self.watch(version)
            except Relist:
                pass
            except Exception as err:
                if self.stop.is_set():
                    return
                if getattr(err, "status", None) != 410:  # Gone as the watch's (or a page's) answer lists again
                    # The API unreachable, refused (401, 403), a 5xx, a broken stream: unsynced, back off (from the
                    # start again if the watch had held a while).
                    if time.monotonic() - listed_at >= RELIST_SPACING_SECONDS:
                        delay = self.backoff_seconds
                    self._set_state(False, f"listing or watching nodes failed ({_reason(err)})")
                    self.stop.wait(delay)
                    delay = min(delay * 2, self.max_backoff_seconds)
                    continue
            # A relist (410 Gone, new keys) at once, unless the last list was a moment ago: a server that ends every
            # watch at once must not get a full list in a loop, so those back off too.
            if time.monotonic() - listed_at < RELIST_SPACING_SECONDS:
                self.stop.wait(delay)
                delay = min(delay * 2, self.max_backoff_seconds)
            else:
                delay = self.backoff_seconds

    def relist(self) -> str:
        """List every node, page by page, into a new table (swapped in whole); returns the list's resourceVersion."""
        keys = self._wanted
        values: dict[str, tuple[str | None, ...]] = {}
        token, version = None, ""
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size}
            if token:
                kwargs["_continue"] = token
            response = self.api.list_node(_preload_content=False, _request_timeout=self.request_timeout_seconds,
                                          _headers={"Accept": LIST_ACCEPT}, **kwargs)
            document = json.loads(response.data)
            for item in document.get("items") or ():
                name = (item.get("metadata") or {}).get("name")
                if isinstance(name, str):
                    values[sys.intern(name)] = _values(keys, item)
            meta = document.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            token = meta.get("continue")
            if not token:
                break
            time.sleep(0)  # let the event loop's thread take the GIL between pages
        self._table = _Table(keys, values)
        self.observer.event_seen(self.clock())
        self._set_state(True, "", last_event=self.clock())
        return version

    def watch(self, version: str) -> str:
        """One watch from ``version`` until the server ends it; returns the last resourceVersion seen. Raises
        Relist on an ERROR event (410 Gone) or once the keys to keep changed. The raw stream is read, as the
        node-label reconciler reads it (cluster/reconciler.py says why)."""
        from kubernetes.watch.watch import iter_resp_lines

        response = self.api.list_node(watch=True, resource_version=version, allow_watch_bookmarks=True,
                                      timeout_seconds=self.watch_timeout_seconds, _preload_content=False,
                                      _headers={"Accept": WATCH_ACCEPT},
                                      _request_timeout=(self.request_timeout_seconds,
                                                        self.watch_timeout_seconds + self.request_timeout_seconds))
        self._watching = response
        try:
            for line in iter_resp_lines(response):
                if self.stop.is_set():
                    return version
                if self._table.keys != self._wanted:
                    raise Relist()
                event = json.loads(line) if line else {}
                version = self.apply(event) or version
        finally:
            self._watching = None
            response.close()
            response.release_conn()
        if self._table.keys != self._wanted:
            raise Relist()
        return version

    def apply(self, event: Mapping[str, Any]) -> str | None:
        """One watch event into the table; returns its object's resourceVersion. Raises Relist on ERROR."""
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, Mapping):
            obj = {}
        if kind == "ERROR":  # 410 Gone ("too old resource version") or another Status: only a list recovers
            LOG.info("node watch ended by the API server (%s); listing again", obj.get("message") or obj.get("code"))
            raise Relist()
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        table = self._table
        if kind in ("ADDED", "MODIFIED") and isinstance(name, str):
            table.values[sys.intern(name)] = _values(table.keys, obj)
        elif kind == "DELETED" and isinstance(name, str):
            table.values.pop(name, None)
        now = self.clock()
        self.observer.event_seen(now)
        if kind != "BOOKMARK" and self._state.nodes != len(table.values):
            self._state = CacheState(self._state.synced, len(table.values), now, self._state.reason)
            self.observer.state_changed(self._state)
        version = meta.get("resourceVersion")
        return str(version) if version else None

    def _set_state(self, synced: bool, reason: str, *, last_event: float | None = None) -> None:
        before = self._state
        self._state = CacheState(synced, len(self._table.values), last_event or before.last_event, reason)
        if before.synced != synced or before.reason != reason:
            # One line per change of state, not per retry of the same failure.
            if synced:
                LOG.info("node cache synced: %d nodes, label keys %s", self._state.nodes,
                         ", ".join(self._table.keys) or "none")
            else:
                LOG.warning("node cache not synced: %s; pinned pods are judged on every class they may reach",
                            reason)
        self.observer.state_changed(self._state)


def _values(keys: Sequence[str], obj: Mapping[str, Any]) -> tuple[str | None, ...]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, Mapping):
        labels = {}
    return tuple(sys.intern(v) if isinstance(v := labels.get(key), str) else None for key in keys)


def _labels(keys: Sequence[str], values: Sequence[str | None]) -> dict[str, str]:
    return {key: value for key, value in zip(keys, values, strict=True) if value is not None}


def _reason(err: Exception) -> str:
    status = getattr(err, "status", None)
    return f"{status} {getattr(err, 'reason', '')}".strip() if status else type(err).__name__


def client_from(kubeconfig: str | None) -> CoreV1Api:
    """A CoreV1Api of its own: from ``kubeconfig`` when given, else the pod's ServiceAccount (in-cluster config,
    whose token the client re-reads as the kubelet rotates it)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    return client.CoreV1Api(client.ApiClient(configuration))


def cache_factory(kubeconfig: str | None, **options: Any) -> Callable[[CacheObserver], NodeCache]:
    """What each webhook worker calls after the fork: a cache with its own client, not started (the webhook gives
    it the policy's label keys first, then starts it). The configuration is read once here, before any worker
    starts, so a missing kubeconfig or ServiceAccount token is one error at start (ClusterError), not a worker
    that dies at every boot."""
    from kubernetes.config.config_exception import ConfigException

    from cluster import ClusterError

    try:
        client_from(kubeconfig)  # reads files only: no connection is made
    except (ConfigException, OSError) as err:
        where = f"the kubeconfig {kubeconfig}" if kubeconfig else "the pod's ServiceAccount (in-cluster config)"
        raise ClusterError(f"the node cache cannot read {where}: {err}",
                           "give --kubeconfig, run in a pod with a ServiceAccount token, or pass --no-node-cache") \
            from None

    def make(observer: CacheObserver) -> NodeCache:
        return NodeCache(client_from(kubeconfig), observer=observer, **options)

    return make
