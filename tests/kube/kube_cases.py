"""The examples' admission test suites, sent to a real API server.

Each case of examples/clusters/<cluster>/admission-tests.yaml becomes a request the API server admits or denies
on its own: a dry-run CREATE, a dry-run UPDATE of an object stored beforehand, or a dry-run DELETE.  A suite
case describes what the webhook is asked, not a whole object: a Deployment may come without a selector, a
container without an image.  `complete` adds what the API server's validation demands (selectors matching the
template's labels, images, a Job's restartPolicy) and nothing the admission rules read, so both sides judge one
object.  Every case gets a name of its own (original name + case index) so the cases never meet in the store.

Also the webhook those requests may be sent through: a `gpupolicy webhook serve` process on loopback and the
example's compiled ValidatingWebhookConfiguration pointed at it (test_kube_webhook.py, test_kube_node_cache.py).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import os
import re
import signal
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polling
import yaml
from kube_api import LOOPBACK, Answer, KubeAPI, free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "clusters"
#: probe the API server until a change is seen: admission configuration takes effect through informers, a moment
#: after it is stored, and later on a loaded machine
poll = functools.partial(polling.poll, timeout=60.0)
CLUSTERS = sorted(p.parent.name for p in EXAMPLES.glob("*/admission-tests.yaml"))
GPUPOLICY = str(Path(sys.executable).parent / "gpupolicy")
Obj = dict[str, Any]

#: kind -> (API path prefix, resource): every kind the suites use.
RESOURCES: dict[str, tuple[str, str]] = {
    "Pod": ("/api/v1", "pods"),
    "ReplicationController": ("/api/v1", "replicationcontrollers"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "ReplicaSet": ("/apis/apps/v1", "replicasets"),
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
    "DaemonSet": ("/apis/apps/v1", "daemonsets"),
    "Job": ("/apis/batch/v1", "jobs"),
    "CronJob": ("/apis/batch/v1", "cronjobs"),
    "RayCluster": ("/apis/ray.io/v1", "rayclusters"),
    "SeldonDeployment": ("/apis/machinelearning.seldon.io/v1", "seldondeployments"),
}


def _crd(group: str, kind: str, plural: str) -> Obj:
    """A custom resource declared only as far as the API server must know it to store one (no schema)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


#: The custom resources the suites hold: KubeRay's RayCluster, a kind of the workload-kinds table the webhook checks
#: template by template, and Seldon's SeldonDeployment, a kind it does not register and so never sees.
CRDS: dict[str, Obj] = {
    "RayCluster": _crd("ray.io", "RayCluster", "rayclusters"),
    "SeldonDeployment": _crd("machinelearning.seldon.io", "SeldonDeployment", "seldondeployments"),
}


@dataclass(frozen=True)
class Case:
    cluster: str
    index: int
    name: str
    operation: str
    obj: Obj
    old: Obj | None
    namespace: str
    labels: dict[str, str]
    expect: Obj

    @property
    def id(self) -> str:
        return f"{self.cluster}#{self.index}: {self.name}"

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])


def namespaces_of(cluster: str) -> dict[str, dict[str, str]]:
    suite = yaml.safe_load((EXAMPLES / cluster / "admission-tests.yaml").read_text(encoding="utf-8"))
    return {name: dict(labels or {}) for name, labels in (suite.get("namespaces") or {}).items()}


def cases(cluster: str) -> list[Case]:
    path = EXAMPLES / cluster / "admission-tests.yaml"
    suite = yaml.safe_load(path.read_text(encoding="utf-8"))
    known = namespaces_of(cluster)
    out = []
    for index, case in enumerate(suite["cases"]):
        if "object" in case:
            obj = case["object"]
        else:
            docs = [d for d in yaml.safe_load_all((path.parent / case["file"]).read_text(encoding="utf-8")) if d]
            obj = docs[case.get("index", 0)]
        namespace = case.get("namespace") or obj.get("metadata", {}).get("namespace") or "default"
        labels = {**known.get(namespace, {}), **case.get("namespaceLabels", {})}
        name = _case_name(obj.get("metadata", {}).get("name", "case"), index)
        old = case.get("oldObject")
        out.append(Case(cluster, index, case["name"], case.get("operation", "CREATE"), complete(obj, name, namespace),
                        complete(old, name, namespace) if old else None, namespace, labels, case["expect"]))
    return out


def all_cases() -> list[Case]:
    return [case for cluster in CLUSTERS for case in cases(cluster)]


def _case_name(name: str, index: int) -> str:
    # a CronJob's name leaves 11 characters for the Jobs it makes: stay under 52
    return f"{re.sub(r'[^a-z0-9-]', '-', name.lower())[:44].strip('-')}-{index}"


# --- completing a case into an object the API server stores ------------------------------------------------


def complete(obj: Obj, name: str, namespace: str) -> Obj:
    out = copy.deepcopy(obj)
    metadata = out.setdefault("metadata", {})
    metadata["name"], metadata["namespace"] = name, namespace
    kind, spec = out.get("kind"), out.setdefault("spec", {})
    labels = {"app": name}
    if kind == "Pod":
        _pod_spec(spec, restart=None)
    elif kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        selector = spec.setdefault("selector", {"matchLabels": labels})
        _template(spec, selector.get("matchLabels", {}), restart=None)
    elif kind == "ReplicationController":
        selector = spec.setdefault("selector", labels)
        _template(spec, selector, restart=None)
    elif kind == "Job":
        _template(spec, {}, restart="Never")
    elif kind == "CronJob":
        spec.setdefault("schedule", "0 * * * *")
        _template(spec.setdefault("jobTemplate", {}).setdefault("spec", {}), {}, restart="Never")
    return out


def _template(spec: Obj, labels: dict[str, str], *, restart: str | None) -> None:
    template = spec.setdefault("template", {})
    template_labels = template.setdefault("metadata", {}).setdefault("labels", {})
    template_labels.update(labels)
    _pod_spec(template.setdefault("spec", {}), restart=restart)


def _pod_spec(spec: Obj, *, restart: str | None) -> None:
    if restart and spec.get("restartPolicy") not in ("Never", "OnFailure"):
        spec["restartPolicy"] = restart  # a Job's pods may not restart Always
    for section in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(section) or []):
            container.setdefault("name", f"{section.lower()[:-1]}-{index}")
            container.setdefault("image", "registry.example/app:1")
    spec.setdefault("containers", [{"name": "main", "image": "registry.example/app:1"}])


# --- talking to the server ---------------------------------------------------------------------------------


def collection(obj: Obj) -> str:
    prefix, resource = RESOURCES[obj["kind"]]
    return f"{prefix}/namespaces/{obj['metadata']['namespace']}/{resource}"


def item(obj: Obj) -> str:
    return f"{collection(obj)}/{obj['metadata']['name']}"


def ensure_namespace(api: KubeAPI, name: str, labels: dict[str, str]) -> None:
    answer = api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                        "metadata": {"name": name, "labels": labels}})
    assert answer.status in (201, 409), answer.body
    if answer.status == 409:  # already there: its labels become exactly these (the name label is the server's)
        current = api.request("GET", f"/api/v1/namespaces/{name}").body
        current["metadata"]["labels"] = {**labels, "kubernetes.io/metadata.name": name}
        replaced = api.request("PUT", f"/api/v1/namespaces/{name}", current)
        assert replaced.status == 200, replaced.body


def create(api: KubeAPI, obj: Obj) -> Obj:
    answer = api.request("POST", collection(obj), obj)
    assert answer.status == 201, (obj["metadata"], answer.body)
    stored: Obj = answer.body
    return stored


def prepare(api: KubeAPI, cluster: str, selected: list[Case]) -> None:
    """Namespaces with the suite's labels, the CRDs the cases need, and the objects UPDATE and
    DELETE cases act on, stored before any admission configuration exists (a violating object already running
    is what those cases are about)."""
    namespaces = namespaces_of(cluster)
    for case in selected:
        namespaces.setdefault(case.namespace, case.labels)
    for name, labels in sorted(namespaces.items()):
        if name != "default":
            ensure_namespace(api, name, labels)
    for kind in sorted({case.kind for case in selected} & set(CRDS)):
        answer = api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRDS[kind])
        assert answer.status in (201, 409), answer.body
        served = RESOURCES[kind][0]
        poll(lambda served=served: api.request("GET", served).status == 200 or None, what=f"{served} to be served")
    for case in selected:
        if case.operation == "UPDATE":
            assert case.old is not None, case.id
            create(api, case.old)
        elif case.operation == "DELETE":
            create(api, case.obj)


def send(api: KubeAPI, case: Case) -> Answer:
    """The case's request, as a dry run: admission runs in full, nothing is stored."""
    if case.operation == "CREATE":
        return api.request("POST", f"{collection(case.obj)}?dryRun=All", case.obj)
    if case.operation == "UPDATE":
        stored = api.request("GET", item(case.obj)).body
        updated = copy.deepcopy(case.obj)
        updated["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        return api.request("PUT", f"{item(case.obj)}?dryRun=All", updated)
    if case.operation == "DELETE":
        return api.request("DELETE", f"{item(case.obj)}?dryRun=All")
    raise AssertionError(f"{case.id}: no request for operation {case.operation}")


def documents(paths: Iterable[Path]) -> list[Obj]:
    return [d for path in paths for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


# --- the webhook process, registered with the API server ---------------------------------------------------


@dataclass
class Webhook:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    context: ssl.SSLContext  # trusts the API server's CA, which signed the webhook's certificate

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", context=self.context, timeout=5) as reply:
            return str(reply.read().decode())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


@contextlib.contextmanager
def webhook_serving(api: KubeAPI, cluster: str, directory: Path, *flags: str) -> Iterator[Webhook]:
    """`gpupolicy webhook serve` of the example's spec (and flags), on loopback, with a certificate of the API
    server's CA: yielded once ready, stopped on leaving."""
    issued = api.ca.issue(f"webhook-{cluster}")
    port, log = free_port(), directory / f"webhook-{cluster}.log"
    environment = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    # a short drain: nothing is in flight when a test stops it (as tests/webhook/test_https.py starts it)
    environment.update({"GPUPOLICY_DRAIN_SECONDS": "0.2", "GPUPOLICY_GRACEFUL_TIMEOUT_SECONDS": "5"})
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [GPUPOLICY, "webhook", "serve", "--spec", str(EXAMPLES / cluster / "cluster.yaml"),
             "--cert", str(issued.cert), "--key", str(issued.key), "--bind", LOOPBACK, "--port", str(port),
             "--workers", "1", *flags], stdout=sink, stderr=subprocess.STDOUT, env=environment)
    webhook = Webhook(process, port, log, ssl.create_default_context(cafile=str(api.ca_path)))
    try:
        def ready() -> bool | None:
            if process.poll() is not None:
                raise AssertionError(f"the webhook exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{webhook.url}/readyz", context=webhook.context, timeout=5) as reply:
                    return True if reply.status == 200 else None
            except OSError:
                return None

        poll(ready, what="the webhook to become ready")
        yield webhook
    finally:
        webhook.stop()


def configuration(cluster: str, url: str, ca: bytes, **overrides: Any) -> Obj:
    """The example's compiled ValidatingWebhookConfiguration, its webhooks pointed at url (the path kept) with ca
    as caBundle instead of the in-cluster Service, and overrides set on each."""
    path = EXAMPLES / cluster / "out" / "admission" / "validatingwebhookconfiguration-gpupolicy.yaml"
    config: Obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    config["metadata"]["annotations"].pop("cert-manager.io/inject-ca-from")  # no cert-manager here: caBundle
    for webhook in config["webhooks"]:
        service = webhook["clientConfig"]["service"]
        webhook["clientConfig"] = {"url": f"{url}{service['path']}", "caBundle": base64.b64encode(ca).decode()}
        webhook.update(overrides)
    return config


def register(api: KubeAPI, config: Obj) -> None:
    api.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=gpupolicy-test", "-f", "-",
                input=yaml.safe_dump(config))
