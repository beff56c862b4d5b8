"""`gpupolicy admit` fixes stay inside the tenant (issue 28): on mixed-fleet with MPS taken from tenant research, a
research Deployment pinned to the MPS pool is told to re-pin to a class research may use, and the JSON Patch of
`admit --output json`, applied to the file, admits it in the same namespace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from json_patch import apply_patch

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"
PINNED_TO_MPS = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: embedder, namespace: lab}
spec:
  replicas: 2
  selector: {matchLabels: {app: embedder}}
  template:
    metadata: {labels: {app: embedder}}
    spec:
      nodeSelector: {node-pool: a100-mps}
      containers:
        - name: embed
          image: embed:1
          resources:
            limits: {nvidia.com/gpu: 1}
"""
RESEARCH = ["--namespace-labels", "lab=gpu-tier=research"]


def research_without_mps(tmp_path: Path) -> str:
    text = MIXED.read_text(encoding="utf-8")
    edited = text.replace("      allow: [exclusive, mps, time-slicing]", "      allow: [exclusive, time-slicing]")
    assert edited != text
    path = tmp_path / "cluster.yaml"
    path.write_text(edited, encoding="utf-8")
    return str(path)


def test_a_research_deployment_pinned_to_mps_it_may_no_longer_use_is_re_pinned_inside_its_tenant(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = research_without_mps(tmp_path)
    manifest = tmp_path / "embedder.yaml"
    manifest.write_text(PINNED_TO_MPS, encoding="utf-8")
    assert main(["admit", "-p", spec, str(manifest), "-O", "json", *RESEARCH]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert finding["code"] == "tenant-sharing-mode-denied"
    assert finding["hint"] == "pin the pod to class t4-dev with nodeSelector {node-pool: t4-dev}"
    fix = finding["fix"]
    assert set(fix) == {"edits", "jsonPatch"}  # no namespace to move to
    assert fix["edits"] == [{"kind": "set-node-selector", "path": "/spec/template/spec/nodeSelector/node-pool",
                             "value": "t4-dev"}]
    fixed = apply_patch(yaml.safe_load(PINNED_TO_MPS), fix["jsonPatch"])
    assert fixed["spec"]["template"]["spec"]["nodeSelector"] == {"node-pool": "t4-dev"}
    assert fixed["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    again = tmp_path / "fixed.yaml"
    again.write_text(yaml.safe_dump(fixed), encoding="utf-8")
    assert main(["admit", "-p", spec, str(again), "-O", "json", *RESEARCH]) == 0  # same namespace, same tenant
    assert json.loads(capsys.readouterr().out)["diagnostics"] == []


def test_the_same_deployment_on_the_bundled_policy_is_allowed(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "embedder.yaml"
    manifest.write_text(PINNED_TO_MPS, encoding="utf-8")
    assert main(["admit", "-p", str(MIXED), str(manifest), *RESEARCH]) == 0  # research may use MPS there
    capsys.readouterr()
