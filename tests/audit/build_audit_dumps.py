"""Builds the recorded cluster dumps of tests/audit/dumps/*.yaml (python tests/audit/build_audit_dumps.py).

Each dump is what `kubectl get namespaces,deployments,replicasets,jobs,pods -A -o yaml` prints for a cluster
running an example's workloads: a `v1 List` whose items carry apiVersion, kind, uid and the ownerReferences the
controllers write (the Deployment controller names its ReplicaSet <deployment>-<pod-template-hash> and its Pods
<replicaset>-<5 characters>; the Job controller labels its Pods batch.kubernetes.io/job-name; kubernetes
pkg/controller/deployment/sync.go and pkg/controller/job/job_controller.go). The pod templates are the real
manifests of tests/fixtures/workloads (each names its source), with a nodeSelector for the example's class added;
see README.md. Nothing was captured from a live cluster. A test rebuilds the dumps and fails if they drift.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
DUMPS = HERE / "dumps"
WORKLOADS = HERE.parent / "fixtures" / "workloads" / "allow"
CREATED = "2025-06-12T08:00:00Z"
Obj = dict[str, Any]


def manifest(name: str) -> Obj:
    return yaml.safe_load((WORKLOADS / name).read_text(encoding="utf-8"))


def uid(namespace: str, kind: str, name: str) -> str:
    """A stable, UUID-shaped uid per object (the API server's are random v4 UUIDs)."""
    import hashlib

    h = hashlib.sha256(f"{namespace}/{kind}/{name}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def meta(kind: str, name: str, namespace: str | None, **extra: Any) -> Obj:
    out: Obj = {"name": name, "uid": uid(namespace or "", kind, name), "resourceVersion": "1001",
                "creationTimestamp": CREATED}
    if namespace:
        out["namespace"] = namespace
    out.update(extra)
    return out


def owner(obj: Obj) -> Obj:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def namespace(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": meta("Namespace", name, None, labels={"kubernetes.io/metadata.name": name, **labels})}


def pod(name: str, ns: str, template: Obj, owned_by: Obj | None, **labels: str) -> Obj:
    spec = copy.deepcopy(template["spec"])
    metadata = meta("Pod", name, ns, labels={**(template.get("metadata") or {}).get("labels", {}), **labels})
    if owned_by is not None:
        metadata["ownerReferences"] = [owner(owned_by)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec,
            "status": {"phase": "Running"}}


def deployment(source: Obj, ns: str, selector: dict[str, str], *, replicas: int, template_hash: str,
               old_hash: str | None = None) -> list[Obj]:
    """A Deployment, its current ReplicaSet and Pods, and (with ``old_hash``) an old revision scaled to 0."""
    dep = copy.deepcopy(source)
    name = dep["metadata"]["name"]
    dep["metadata"] = meta("Deployment", name, ns, labels=dep["metadata"].get("labels", {}), generation=2)
    dep["spec"]["replicas"] = replicas
    dep["spec"]["template"]["spec"]["nodeSelector"] = dict(selector)
    out = [dep]
    for hash_, count in ((template_hash, replicas), *(((old_hash, 0),) if old_hash else ())):
        rs_name = f"{name}-{hash_}"
        template = copy.deepcopy(dep["spec"]["template"])
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = hash_
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": meta("ReplicaSet", rs_name, ns, labels=template["metadata"]["labels"],
                               ownerReferences=[owner(dep)]),
              "spec": {"replicas": count, "selector": {"matchLabels": template["metadata"]["labels"]},
                       "template": template}}
        out.append(rs)
        out.extend(pod(f"{rs_name}-{suffix}", ns, template, rs) for suffix in ("7x2kq", "b9wzl", "m4rtc")[:count])
    return out


def job(source: Obj, ns: str, selector: dict[str, str]) -> list[Obj]:
    found = copy.deepcopy(source)
    name = found["metadata"]["name"]
    found["metadata"] = meta("Job", name, ns, labels=found["metadata"].get("labels", {}))
    found["spec"]["template"]["spec"]["nodeSelector"] = dict(selector)
    return [found, pod(f"{name}-q8d5n", ns, found["spec"]["template"], found,
                       **{"batch.kubernetes.io/job-name": name})]


def mixed_fleet() -> list[Obj]:
    """The mixed-fleet example (examples/clusters/mixed-fleet): a research namespace with MPS workloads on
    a100-mps, a dev namespace time-slicing on t4-dev, a prod namespace on h100-mig; and two pods whose
    ownerReference is forged: one names the ReplicaSet's uid under another name, one a uid that is not there."""
    deploy = manifest("nvidia-docs-time-slicing-verification-deployment.yaml")
    research = deployment(deploy, "research-nlp", {"node-pool": "a100-mps"}, replicas=3, template_hash="6d4f9c7b8",
                          old_hash="5c8b7d6f4")
    replicaset = research[1]
    dev = copy.deepcopy(deploy)
    dev["metadata"]["name"] = "notebook"
    objects = [
        namespace("research-nlp", **{"gpu-tier": "research"}),
        namespace("dev-alice", **{"gpu-tier": "dev"}),
        namespace("prod-search", **{"gpu-tier": "prod"}),
        *research,
        *job(manifest("nvidia-device-plugin-testdata-job.yaml"), "research-nlp", {"node-pool": "a100-mps"}),
        *deployment(dev, "dev-alice", {"node-pool": "t4-dev"}, replicas=2, template_hash="77f5d9c4b"),
        *deployment(_mig_deployment(), "prod-search", {"node-pool": "h100-mig"}, replicas=1, template_hash="59b8c6d7f"),
    ]
    forged_name = copy.deepcopy(research[3])  # the ReplicaSet's uid, another name: resolves to nothing
    forged_name["metadata"].update(name="mps-borrower", uid=uid("research-nlp", "Pod", "mps-borrower"))
    forged_name["metadata"]["ownerReferences"] = [{**owner(replicaset), "name": "time-slicing-verification-x"}]
    forged_uid = copy.deepcopy(research[3])  # a uid no object has
    forged_uid["metadata"].update(name="mps-stowaway", uid=uid("research-nlp", "Pod", "mps-stowaway"))
    forged_uid["metadata"]["ownerReferences"] = [{**owner(replicaset),
                                                  "uid": "00000000-0000-4000-8000-000000000000"}]
    return [*objects, forged_name, forged_uid]


def _mig_deployment() -> Obj:
    """tests/fixtures/workloads/allow/h20-inference-mig-1g12gb.yaml with the H100's 1g.10gb profile."""
    found = manifest("h20-inference-mig-1g12gb.yaml")
    found["spec"]["replicas"] = 1
    found["spec"]["selector"] = {"matchLabels": {"app": "qwen-7b"}}
    found["spec"]["template"]["metadata"] = {"labels": {"app": "qwen-7b"}}
    found["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": 1}
    return found


def h20_mig() -> list[Obj]:
    """The h20-mig example: the inference tenant's MIG Deployment on h20, two Pods (GPU pods a re-partition
    must drain first), and a CPU-only Deployment that asks for no GPU."""
    cpu = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gateway"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "gateway"}},
                    "template": {"metadata": {"labels": {"app": "gateway"}},
                                 "spec": {"containers": [{"name": "envoy", "image": "envoyproxy/envoy:v1.31.0"}]}}}}
    source = manifest("h20-inference-mig-1g12gb.yaml")
    source["spec"]["selector"] = {"matchLabels": {"app": "qwen-7b"}}
    source["spec"]["template"]["metadata"] = {"labels": {"app": "qwen-7b"}}
    return [namespace("inference", **{"gpu-tier": "inference"}),
            *deployment(source, "inference", {"gpu-pool": "h20"}, replicas=2, template_hash="8c7d5b9f6"),
            *deployment(cpu, "inference", {"gpu-pool": "h20"}, replicas=1, template_hash="6b5f8d7c9")]


SCENARIOS = {"mixed-fleet": mixed_fleet, "h20-mig": h20_mig}


class _Dumper(yaml.SafeDumper):
    """No anchors or aliases: kubectl never writes them (and the audit refuses them)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(name: str) -> str:
    header = (f"# {name}: built by tests/audit/build_audit_dumps.py from tests/fixtures/workloads (see "
              "tests/audit/README.md); do not edit\n")
    return header + yaml.dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                               "items": SCENARIOS[name]()}, Dumper=_Dumper, sort_keys=True)


def build() -> dict[Path, str]:
    return {DUMPS / f"{name}.yaml": render(name) for name in SCENARIOS}


if __name__ == "__main__":
    DUMPS.mkdir(exist_ok=True)
    for path, text in build().items():
        path.write_text(text, encoding="utf-8")
        print(path)
