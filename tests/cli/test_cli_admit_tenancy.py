"""`gpupolicy admit` over Namespaces: tenant labels someone other than a tenancy manager set, from managedFields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
MIXED = str(ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml")  # gitOps: argocd, tenants by gpu-tier
TKE = str(ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml")  # no tenants

# What `kubectl get namespaces -o yaml --show-managed-fields` prints, trimmed: team-a's tier was set by hand.
NAMESPACES = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata:
    name: team-a
    labels:
      gpu-tier: prod
      kubernetes.io/metadata.name: team-a
    managedFields:
    - manager: argocd-controller
      operation: Apply
      apiVersion: v1
      fieldsType: FieldsV1
      fieldsV1: {f:metadata: {f:labels: {f:team: {}}}}
    - manager: kubectl-label
      operation: Update
      apiVersion: v1
      fieldsType: FieldsV1
      fieldsV1: {f:metadata: {f:labels: {f:gpu-tier: {}}}}
- apiVersion: v1
  kind: Namespace
  metadata:
    name: team-b
    labels: {gpu-tier: research}
    managedFields:
    - manager: argocd-controller
      operation: Apply
      fieldsV1: {f:metadata: {f:labels: {f:gpu-tier: {}}}}
- apiVersion: v1
  kind: Namespace
  metadata:
    name: team-c
    labels: {gpu-tier: dev}
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "namespaces.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_namespace_whose_tenant_label_kubectl_set_is_a_located_warning(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path, NAMESPACES)
    assert main(["admit", "-p", MIXED, manifest, "-O", "json"]) == 0  # a warning: it never fails a build
    out = capsys.readouterr()
    (finding,) = json.loads(out.out)["diagnostics"]
    assert {k: finding[k] for k in ("code", "severity", "file", "line", "column", "path")} == {
        "code": "tenant-label-set-by-non-manager", "severity": "warning", "file": manifest, "line": 9, "column": 7,
        "path": "items[0].metadata.labels.gpu-tier"}
    assert finding["message"].startswith("Namespace team-a: its label gpu-tier=prod, which puts it in tenant prod, "
                                         "was set by field manager kubectl-label")
    assert out.err.rstrip().endswith("; 1 namespace(s) with tenant labels set by someone other than a manager")


def test_the_namespace_still_routes_the_workloads_beside_it_to_its_tenant(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # The warning says who chose the tenant; the pod is judged as that tenant's all the same (prod: no sharing).
    pod = ("---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team-a}\nspec:\n  containers:\n"
           "  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}\n")
    assert main(["admit", "-p", MIXED, write(tmp_path, NAMESPACES + pod)]) == 1
    out = capsys.readouterr().out
    assert out.count("warning[tenant-label-set-by-non-manager]") == 1
    assert "error[tenant-sharing-mode-denied]: Pod p (namespace team-a): tenant prod may not use" in out
    assert out.endswith("1 file(s) checked: 1 error(s), 1 warning(s)\n")


def test_a_spec_without_tenants_reads_no_managed_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admit", "-p", TKE, write(tmp_path, NAMESPACES)]) == 0
    assert capsys.readouterr().out == "1 file(s) checked: 0 error(s), 0 warning(s)\n"
