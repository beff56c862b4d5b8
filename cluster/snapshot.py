"""Reading the cluster: the only module that talks to the Kubernetes API, and only with get and list."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from cluster import ClusterError, facts
from cluster.resources import (
    DaemonSet,
    Json,
    Pod,
    ResourceSlice,
    Snapshot,
    configmap_from,
    daemonset_from,
    deployment_from,
    event_from,
    items,
    node_from,
    pod_from,
    replicaset_from,
    resource_slice_from,
)

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, Configuration

    from policy.audit.scan import WatchedKind

DEFAULT_TIMEOUT_SECONDS = 10.0
PAGE_SIZE = 500  # chunked lists keep one response small on clusters with thousands of pods
Scope = Literal["verify", "discover"]
RBAC_RESOURCES = "nodes,pods,events,configmaps,daemonsets.apps,replicasets.apps,deployments.apps"
RBAC_FIX = (
    "grant get and list on nodes, pods, events, configmaps (core) and daemonsets, replicasets, deployments (apps), "
    f"e.g. kubectl create clusterrole gpupolicy-reader --verb=get,list --resource={RBAC_RESOURCES} && "
    "kubectl create clusterrolebinding gpupolicy-reader --clusterrole=gpupolicy-reader --user=<you>"
)


class ClusterAccessError(ClusterError):
    """The cluster could not be read (or written)."""

    def __init__(self, message: str, hint: str, status: int = 0) -> None:
        super().__init__(message, hint)
        self.status = status
        """The HTTP status the API server answered, 0 when it gave none."""


@dataclass(frozen=True)
class Access:
    """How to reach the cluster (kubectl's own flags and defaults)."""

    kubeconfig: str | None = None
    """A kubeconfig file; default: $KUBECONFIG, else ~/.kube/config, else the in-cluster service account."""
    context: str | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    """Per request; an API server slower than this is reported, not waited for."""


def read_snapshot(access: Access, *, scope: Scope = "verify", configmap_namespaces: tuple[str, ...] = (),
                  resource_slices: bool = False) -> Snapshot:
    """One read of the cluster.

    discover reads nodes and DaemonSets; with ``resource_slices``, the ResourceSlices too (resource.k8s.io/v1), whose
    failure (not served before Kubernetes 1.34, or refused) is kept as the reason they are unknown instead of
    failing the read; verify also reads Pending pods, the pods of device-plugin DaemonSets, the
    FailedScheduling events, ReplicaSets and Deployments of the namespaces with Pending GPU pods, and the ConfigMaps
    and Deployments of ``configmap_namespaces`` (the tree's). Raises ClusterAccessError for every failure to reach
    or read the API.
    """
    reader = _Reader(*_connect(access), timeout=access.timeout_seconds)
    with reader:
        seen = reader.snapshot(scope, configmap_namespaces)
        if not resource_slices:
            return seen
        found, unread = reader.resource_slices()
        return dataclasses.replace(seen, resource_slices=found, slices_unread=unread)


# --- connecting --------------------------------------------------------------------------------------------------


def core_api(access: Access) -> Any:
    """A CoreV1Api for the cluster ``access`` names (the reconciler writes through it; this module only reads)."""
    from kubernetes.client import CoreV1Api

    client, _, _ = _connect(access)
    return CoreV1Api(client)


def _connect(access: Access) -> tuple[ApiClient, str, str]:
    from kubernetes.client import ApiClient

    configuration, context = _configuration(access)
    # No read retries: a timed-out list is reported at once instead of after three more timeouts; a refused
    # connection is tried twice more, which costs nothing. An answer with Retry-After (429 from API Priority and
    # Fairness, or "storage is (re)initializing" while a CRD just created comes up; 503) was not acted on, so it
    # is retried after the wait it names, up to three times and for every method (a write too); no other status is.
    import urllib3

    configuration.retries = urllib3.Retry(total=5, connect=2, read=0, status=3, redirect=0, backoff_factor=0.1,
                                          status_forcelist=(), allowed_methods=None)
    return ApiClient(configuration), context, str(configuration.host)


def _configuration(access: Access) -> tuple[Configuration, str]:
    from kubernetes import config
    from kubernetes.client import Configuration

    configuration = Configuration()
    path = access.kubeconfig or os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    exists = any(Path(p).expanduser().is_file() for p in path.split(os.pathsep) if p)
    if not exists and access.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
        return configuration, "in-cluster"
    if not exists:
        raise ClusterAccessError(f"no kubeconfig found at {path}, so there is no cluster to read",
                                 "pass --kubeconfig FILE or set KUBECONFIG (kubectl config view shows what you use)")
    context = _context(config, path, access.context)
    try:
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration,
                                persist_config=False)
    except (config.ConfigException, OSError, ValueError) as err:
        raise ClusterAccessError(f"cannot use context {context} of {path}: {err}",
                                 "check it with kubectl --context " + context + " cluster-info") from None
    return configuration, context


def _context(config: Any, path: str, wanted: str | None) -> str:
    import yaml

    try:
        contexts, current = config.list_kube_config_contexts(config_file=path)
    except (config.ConfigException, OSError, yaml.YAMLError) as err:
        raise ClusterAccessError(f"cannot read kubeconfig {path}: {err}",
                                 "check the file with kubectl config view --kubeconfig " + path) from None
    names = [c["name"] for c in contexts or ()]
    chosen = wanted or (current or {}).get("name")
    if chosen not in names:
        listed = ", ".join(names) or "none"
        raise ClusterAccessError(f"kubeconfig {path} has no context {chosen or '(current-context is unset)'}",
                                 f"pass --context with one of: {listed}")
    return str(chosen)


# --- reading -----------------------------------------------------------------------------------------------------


class _Reader:
    """Lists objects page by page through the typed client, keeping the raw JSON (no model round trip)."""

    def __init__(self, client: ApiClient, context: str, server: str, *, timeout: float) -> None:
        from kubernetes.client import AppsV1Api, CoreV1Api

        self.client, self.context, self.server, self.timeout = client, context, server, timeout
        self.rbac_fix = RBAC_FIX
        self.core, self.apps = CoreV1Api(client), AppsV1Api(client)
        self.server_time: datetime | None = None

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def snapshot(self, scope: Scope, configmap_namespaces: tuple[str, ...]) -> Snapshot:
        nodes = tuple(node_from(o) for o in self.list("list", "nodes", self.core.list_node))
        daemonsets = tuple(daemonset_from(o) for o in self.list(
            "list", "daemonsets", self.apps.list_daemon_set_for_all_namespaces))
        base = Snapshot(self.context, self.server, self.server_time or datetime.now(UTC), nodes, daemonsets)
        if scope == "discover":
            return base
        pending = tuple(pod_from(o) for o in self.list(
            "list", "pods", self.core.list_pod_for_all_namespaces, field_selector="status.phase=Pending"))
        plugin_pods = tuple(p for ds in daemonsets if facts.is_device_plugin(ds) for p in self.pods_of(ds))
        namespaces = sorted({p.namespace for p in pending if facts.requests_gpu(p)})
        return Snapshot(
            base.context, base.server, base.taken_at, nodes, daemonsets,
            # A crash-looping plugin pod can be Pending too: keep each pod once.
            pods=tuple({p.uid or p.key: p for p in (*pending, *plugin_pods)}.values()),
            events=tuple(event_from(o) for ns in namespaces for o in self.list(
                "list", "events", self.core.list_namespaced_event, namespace=ns,
                field_selector="reason=FailedScheduling")),
            replicasets=tuple(replicaset_from(o) for ns in namespaces for o in self.list(
                "list", "replicasets", self.apps.list_namespaced_replica_set, namespace=ns)),
            # Where GPU pods wait (their rollouts) and where the tree's own controllers run.
            deployments=tuple(deployment_from(o) for ns in [*namespaces, *(n for n in configmap_namespaces
                                                                           if n not in namespaces)]
                              for o in self.list("list", "deployments", self.apps.list_namespaced_deployment,
                                                 namespace=ns)),
            configmaps=tuple(configmap_from(o) for ns in configmap_namespaces for o in self.list(
                "list", "configmaps", self.core.list_namespaced_config_map, namespace=ns)),
        )

    def resource_slices(self) -> tuple[tuple[ResourceSlice, ...], str | None]:
        """Every ResourceSlice (resource.k8s.io/v1), or none and why they could not be read."""
        from kubernetes.client import ResourceV1Api

        try:
            return tuple(resource_slice_from(o) for o in self.list(
                "list", "resourceslices", ResourceV1Api(self.client).list_resource_slice)), None
        except ClusterAccessError as err:
            return (), err.message

    def get_path(self, *, path: str, limit: int, _continue: str | None = None, _request_timeout: float,
                 field_selector: str | None = None, label_selector: str | None = None, **_: Any) -> Any:
        """GET a list at a REST path (the typed client has no method for custom resources), answered as the typed
        calls answer with _preload_content=False: the raw response."""
        query: list[tuple[str, Any]] = [("limit", limit)] + ([("continue", _continue)] if _continue else [])
        query += [(name, value) for name, value in (("fieldSelector", field_selector),
                                                    ("labelSelector", label_selector)) if value]
        return self.call("GET", path, query=query, timeout=_request_timeout)

    def call(self, method: str, path: str, *, query: list[tuple[str, Any]] | None = None, body: Any = None,
             content_type: str | None = None, timeout: float) -> Any:
        """One request at a REST path, answered as the typed calls answer with _preload_content=False: the raw
        response; an answer outside 2xx raises ApiException (``request`` turns it into a ClusterAccessError)."""
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json", **({"Content-Type": content_type} if content_type else {})}
        request = self.client.param_serialize(method, path, query_params=query or [], header_params=headers,
                                              body=body, auth_settings=["BearerToken"])
        answer = self.client.call_api(*request, _request_timeout=timeout)
        if not 200 <= answer.status <= 299:
            answer.read()
            raise ApiException.from_response(http_resp=answer, body=None, data=None)
        return answer.response

    def discover(self, groups: set[str]) -> dict[tuple[str, str], tuple[str, str]]:
        """(group, kind) -> (list path over all namespaces, apiVersion) for the kinds the server serves in the
        core group and ``groups``, at each group's preferred version (GET /apis, then /apis/<group>/<version>)."""
        versions = {"": "v1"}
        wanted = groups - {""}
        if wanted:
            for group in self.request("get", "API groups", self.get_path, path="/apis").get("groups") or ():
                preferred = (group.get("preferredVersion") or {}).get("version") if isinstance(group, dict) else None
                if group.get("name") in wanted and isinstance(preferred, str):
                    versions[group["name"]] = preferred
        out: dict[tuple[str, str], tuple[str, str]] = {}
        for group, version in sorted(versions.items()):
            base = f"/apis/{group}/{version}" if group else "/api/v1"
            listing = self.request("get", f"the resources of {base}", self.get_path, path=base)
            for resource in listing.get("resources") or ():
                name, kind = resource.get("name"), resource.get("kind")
                if not isinstance(name, str) or "/" in name or "list" not in (resource.get("verbs") or ()):
                    continue  # subresources (pods/status) and unlistable resources
                out.setdefault((group, kind), (f"{base}/{name}", f"{group}/{version}" if group else version))
        return out

    def pods_of(self, ds: DaemonSet) -> tuple[Pod, ...]:
        if not ds.selector:
            return ()
        selector = ",".join(f"{k}={v}" for k, v in sorted(ds.selector.items()))
        return tuple(pod_from(o) for o in self.list("list", "pods", self.core.list_namespaced_pod,
                                                     namespace=ds.namespace, label_selector=selector))

    def list(self, verb: str, resource: str, call: Callable[..., Any], **kwargs: Any) -> Iterator[Json]:
        token = None
        while True:
            page = self.request(verb, resource, call, _continue=token, **kwargs)
            yield from items(page)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def request(self, verb: str, resource: str, call: Callable[..., Any], **kwargs: Any) -> Json:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        namespace = kwargs.get("namespace")
        where = f"{resource} in namespace {namespace}" if namespace else resource
        try:
            response = call(limit=PAGE_SIZE, _preload_content=False, _request_timeout=self.timeout, **kwargs)
            body = response.data
        except ApiException as err:
            raise self.refused(err, verb, where) from None
        except urllib3.exceptions.HTTPError as err:
            raise self.unreachable(err, verb, where) from None
        self.note_time(response.headers.get("Date"))
        try:
            document = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ClusterAccessError(f"the API server at {self.server} answered {verb} {where} with something "
                                     "that is not JSON", "check that the kubeconfig's server is the API server, "
                                     "not a proxy's login page") from None
        if not isinstance(document, dict):
            raise ClusterAccessError(f"the API server at {self.server} answered {verb} {where} with a "
                                     f"{type(document).__name__}, not a list", "check the kubeconfig's server")
        return document

    def note_time(self, date: str | None) -> None:
        """Ages are measured on the API server's clock (its Date header), so a skewed laptop clock cannot lie."""
        if self.server_time is None and date:
            with contextlib.suppress(TypeError, ValueError):
                self.server_time = parsedate_to_datetime(date).astimezone(UTC)

    def refused(self, err: Any, verb: str, where: str) -> ClusterAccessError:
        status, reason = int(err.status or 0), _status_message(err)
        if status == 403:
            found = ClusterAccessError(f"the API server refused to {verb} {where} (403 Forbidden: {reason})",
                                       self.rbac_fix)
        elif status == 401:
            found = ClusterAccessError(f"the API server at {self.server} rejected the credentials of context "
                                       f"{self.context} (401 Unauthorized)", "refresh them (e.g. your cloud CLI's "
                                       "get-credentials) or pick another --context")
        elif status == 0:
            found = ClusterAccessError(f"cannot talk to the API server at {self.server}: {reason}",
                                       "check the kubeconfig's certificate-authority and server address")
        else:
            found = ClusterAccessError(f"the API server failed to {verb} {where} ({status} {reason})", "retry; if it "
                                       "persists, check the API server's health (kubectl get --raw /readyz)")
        found.status = status
        return found

    def unreachable(self, err: Exception, verb: str, where: str) -> ClusterAccessError:
        import urllib3

        cause = getattr(err, "reason", None) or err
        if isinstance(cause, urllib3.exceptions.ReadTimeoutError | TimeoutError):
            return ClusterAccessError(f"the API server at {self.server} did not answer {verb} {where} within "
                                      f"{self.timeout:g} s", "retry, or raise --request-timeout if the API server "
                                      "is known to be slow")
        if isinstance(cause, urllib3.exceptions.NewConnectionError):
            return ClusterAccessError(f"cannot connect to the API server at {self.server} (connection refused or "
                                      "unreachable)", "check that the cluster is up and the kubeconfig's server "
                                      "address is right (kubectl cluster-info)")
        if isinstance(cause, urllib3.exceptions.ConnectTimeoutError):
            return ClusterAccessError(f"connecting to the API server at {self.server} timed out after "
                                      f"{self.timeout:g} s", "check the network path (VPN, firewall) to the server")
        return ClusterAccessError(f"lost the connection to the API server at {self.server} during {verb} {where} "
                                  f"({type(cause).__name__})", "retry; check the network path to the server")


def _status_message(err: Any) -> str:
    """The API's Status message (``nodes is forbidden: User "x" cannot list ...``), else the HTTP reason."""
    try:
        status = json.loads(err.body or b"")
    except (json.JSONDecodeError, TypeError, UnicodeDecodeError):
        status = None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message or err.reason or "no reason given")


# --- every object of some kinds (cluster audit) -----------------------------------------------------------------


def read_objects(access: Access, kinds: Sequence[WatchedKind]) -> tuple[list[Json], tuple[str, ...]]:
    """Every object of the given kinds in all namespaces (policy.audit.scan.watched_kinds: Namespaces among them,
    whose labels pick the tenants), as raw JSON with apiVersion and kind set, each list narrowed by its kind's field
    selector; and the kinds the server does not serve (a CRD not installed), as ``group/Kind``. Each kind is found
    through API discovery (its preferred version and plural), so nothing here names a version. Raises
    ClusterAccessError as ``read_snapshot`` does; a refused list's hint names the permission missing."""
    reader = _Reader(*_connect(access), timeout=access.timeout_seconds)
    with reader:
        served = reader.discover({k.group for k in kinds})
        resources = sorted({_resource_name(served[k.group, k.kind][0]) for k in kinds if (k.group, k.kind) in served})
        found: list[Json] = []
        missing: list[str] = []
        for watched in kinds:
            where = served.get((watched.group, watched.kind))
            if where is None:
                missing.append(f"{watched.group or 'core'}/{watched.kind}")
                continue
            path, api_version = where
            reader.rbac_fix = (f"grant list on {_resource_name(path)}: the audit lists {', '.join(resources)}, e.g. "
                               "kubectl create clusterrole gpupolicy-auditor --verb=list "
                               f"--resource={','.join(resources)} && kubectl create clusterrolebinding "
                               "gpupolicy-auditor --clusterrole=gpupolicy-auditor --user=<you> (the compiled "
                               "audit/ ClusterRole grants exactly these)")
            selector = {"field_selector": watched.field_selector} if watched.field_selector else {}
            for obj in reader.list("list", path.rpartition("/")[2], reader.get_path, path=path, **selector):
                found.append({**obj, "apiVersion": api_version, "kind": watched.kind})  # list items carry neither
        return found, tuple(missing)


def _resource_name(path: str) -> str:
    """``/apis/apps/v1/deployments`` -> ``deployments.apps``; ``/api/v1/pods`` -> ``pods`` (kubectl's spelling)."""
    parts = path.strip("/").split("/")
    return parts[-1] if parts[0] == "api" else f"{parts[-1]}.{parts[1]}"
