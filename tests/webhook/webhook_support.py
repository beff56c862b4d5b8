"""Webhook test helpers: reviews from the wild, review builders, a scripted engine, kubelet-style mounts."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policy.load import load_policy_or_raise
from policy.resolved.offers import AdmissionPolicy, build_admission_policy

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "admission-reviews"
EXAMPLES = ROOT / "examples" / "clusters"
V1, V1BETA1 = "admission.k8s.io/v1", "admission.k8s.io/v1beta1"

#: Every kind the webhook judges, with its (group, version, resource).
WORKLOAD_KINDS: dict[str, tuple[str, str, str]] = {
    "Pod": ("", "v1", "pods"),
    "Deployment": ("apps", "v1", "deployments"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
}


# --- reviews from the wild -------------------------------------------------------------------------------


def fixture_names() -> list[str]:
    return sorted(p.name for p in FIXTURES.glob("*.json"))


def read_fixture(name: str) -> dict[str, Any]:
    """A shared fixture as the API server would send it: the `// source:` line stripped, and a bare
    request (`*-request-only.json`) wrapped in an admission.k8s.io/v1 envelope."""
    text = (FIXTURES / name).read_text()
    if text.startswith("//"):
        text = text.split("\n", 1)[1]
    document: dict[str, Any] = json.loads(text)
    if "request" not in document:
        document = {"apiVersion": V1, "kind": "AdmissionReview", "request": document}
    return document


# --- policies ----------------------------------------------------------------------------------------------


def spec_text(example: str, edit: Callable[[str], str] = lambda text: text) -> str:
    return edit((EXAMPLES / example / "cluster.yaml").read_text())


def compiled_policy(example: str, edit: Callable[[str], str] = lambda text: text) -> AdmissionPolicy:
    """The admission policy the compiler would write for examples/clusters/<example>."""
    return build_admission_policy(load_policy_or_raise(spec_text(example, edit), filename=f"{example}.yaml"))


# --- building reviews ------------------------------------------------------------------------------------


def container(name: str = "main", *, gpus: int | str | None = 1, resource: str = "nvidia.com/gpu",
              env: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
    limits = {} if gpus is None else {resource: gpus}
    out: dict[str, Any] = {"name": name, "image": "registry.example/infer:1.0", "resources": {"limits": limits}}
    if env:
        out["env"] = list(env)
    return out


def pod_spec(*containers: dict[str, Any], node_selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers) or [container()]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return spec


def workload(kind: str, *containers: dict[str, Any], name: str = "trainer", namespace: str = "ml",
             labels: Mapping[str, str] | None = None,
             node_selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Pod or pod controller whose pod spec holds containers (one 1-GPU container by default)."""
    group, version, _ = WORKLOAD_KINDS[kind]
    metadata = {"name": name, "namespace": namespace, "labels": dict(labels or {"app": name})}
    spec = pod_spec(*containers, node_selector=node_selector)
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    api_version = f"{group}/{version}" if group else version
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": metadata}
    if kind == "Pod":
        obj["spec"] = spec
    elif kind == "CronJob":
        obj["spec"] = {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "ReplicationController":
        obj["spec"] = {"replicas": 1, "selector": {"app": name}, "template": template}
    else:
        obj["spec"] = {"selector": {"matchLabels": {"app": name}}, "template": template}
        if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
            obj["spec"]["replicas"] = 1
    return obj


def admission_review(obj: Mapping[str, Any] | None, *, operation: str = "CREATE",
                     old: Mapping[str, Any] | None = None, uid: str = "3f0c1a52-0000-4000-8000-000000000001",
                     dry_run: bool = False, api_version: str = V1, sub_resource: str | None = None,
                     kind: str | None = None) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver sends it for obj (or old, on DELETE)."""
    subject = obj or old or {}
    kind = kind or subject.get("kind", "Pod")
    group, version, resource = WORKLOAD_KINDS.get(kind, ("example.com", "v1", kind.lower() + "s"))
    metadata = subject.get("metadata", {})
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": metadata.get("name", ""),
        "namespace": metadata.get("namespace", "ml"),
        "operation": operation,
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    if sub_resource:
        request["subResource"] = request["requestSubResource"] = sub_resource
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": request}


# --- a scripted stand-in for policy.admission.engine.Engine ---------------------------------------------------------


@dataclass(frozen=True)
class FakeDiagnostic:
    code: str
    severity: str = "error"
    message: str = ""
    path: tuple[str | int, ...] = ()
    fix: Any = None


@dataclass(frozen=True)
class FakeDecision:
    allowed: bool = True
    diagnostics: tuple[FakeDiagnostic, ...] = ()
    message: str = ""
    warnings: tuple[str, ...] = ()
    audit_annotations: dict[str, str] = field(default_factory=dict)


@dataclass
class ScriptedEngine:
    """Answers every evaluate() with `decision` (or raises `error`) and records the calls."""

    decision: FakeDecision = field(default_factory=FakeDecision)
    error: Exception | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def evaluate(self, obj: Mapping[str, Any], *, tenants: Sequence[str] = (), operation: str = "CREATE",
                 old_obj: Mapping[str, Any] | None = None, expired: Callable[[], bool] = lambda: False) -> FakeDecision:
        self.calls.append({"obj": obj, "tenants": tuple(tenants), "operation": operation, "old_obj": old_obj,
                           "expired": expired})
        if self.error is not None:
            raise self.error
        return self.decision


# --- mounted ConfigMaps and Secrets ----------------------------------------------------------------------


class KubeletVolume:
    """A directory updated the way the kubelet updates ConfigMap and Secret volumes (AtomicWriter).

    Files are written into a fresh `..<timestamp>` directory, then the `..data` symlink is swapped to it
    in one rename; each visible name is a symlink through `..data`. A reader therefore sees the old set
    or the new set, never a mix, and the watched paths themselves never change: no file event fires.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        return self.root / name

    def write(self, files: Mapping[str, bytes | str]) -> None:
        # A fresh directory each time, made as the kubelet makes it (kubernetes pkg/volume/util/atomic_writer.go
        # newTimestampDir: os.MkdirTemp(dir, "..2006_01_02_15_04_05.") in UTC, then mode 0755), so two writers of
        # one volume in the same second never collide.
        payload = Path(tempfile.mkdtemp(prefix=f"..{time.strftime('%Y_%m_%d_%H_%M_%S', time.gmtime())}.",
                                        dir=self.root))
        payload.chmod(0o755)
        stamp = payload.name
        for name, content in files.items():
            (payload / name).write_bytes(content.encode() if isinstance(content, str) else content)
        staging = self.root / "..data_tmp"
        staging.unlink(missing_ok=True)
        staging.symlink_to(stamp)
        os.replace(staging, self.root / "..data")
        for name in files:
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(Path("..data") / name)
