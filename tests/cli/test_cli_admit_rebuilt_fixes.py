"""`gpupolicy admit` fixes for custom-resource templates built from fields outside a pod spec (issue 28): KServe's
predictor.model, NIM's spec, Argo's container and podSpecPatch templates, Dynamo's GPU key. Where the field the fix
edits is the object's own (an Argo template's nodeSelector, a Dynamo component's extraPodSpec), the fix is a JSON
Patch of the object; applied to the file, it admits the object in the same namespace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import workload_fixtures
import yaml
from json_patch import apply_patch

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"
DENY = ROOT / "tests" / "fixtures" / "workloads" / "deny"
DEV = ["--namespace-labels", "lab=gpu-tier=dev", "-n", "lab"]

REBUILT = [
    # (fixture, a path the JSON Patch writes: the template's own field)
    ("argo-workflowtemplate-fv3net-training-gpu-podspecpatch-dev-on-mixed-fleet.yaml",
     "/spec/templates/1/nodeSelector"),
    ("argo-workflow-hera-fine-tune-llama-dev-on-mixed-fleet.yaml", "/spec/templates/5/nodeSelector/node-pool"),
    ("kserve-inferenceservice-hf-llama2-dev-on-mixed-fleet.yaml", "/spec/predictor/nodeSelector"),
    ("nim-operator-nimservice-llm-dev-on-mixed-fleet.yaml", "/spec/nodeSelector"),
    ("dynamo-vllm-agg-dev-on-mixed-fleet.yaml", "/spec/services/worker/extraPodSpec/nodeSelector"),
]


def admit(manifest: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["admit", "-p", str(MIXED), str(manifest), "-O", "json", *DEV])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("name", "written"), REBUILT, ids=[n for n, _ in REBUILT])
def test_a_fix_for_a_rebuilt_template_is_a_json_patch_of_its_own_fields_that_admits_the_object(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, written: str) -> None:
    (obj,) = [o for o in workload_fixtures.documents(DENY / name) if o.get("kind") != "ConfigMap"]
    manifest = tmp_path / "workload.yaml"
    manifest.write_text(yaml.safe_dump(obj), encoding="utf-8")
    code, report = admit(manifest, capsys)
    assert code == 1
    findings = [d for d in report["diagnostics"] if d["severity"] == "error"]
    assert findings and all(d["fix"] for d in findings), findings
    fix = findings[0]["fix"]
    assert set(fix) <= {"edits", "jsonPatch"}  # edits of the object itself: no namespace to move to
    assert any(op["path"].startswith(written) for op in fix["jsonPatch"]), fix["jsonPatch"]
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(yaml.safe_dump(apply_patch(obj, fix["jsonPatch"])), encoding="utf-8")
    code, report = admit(fixed, capsys)
    assert code == 0 and report["diagnostics"] == [], report  # same namespace, same tenant


def test_a_trainjob_whose_trainer_has_no_placement_of_its_own_keeps_its_fix_in_words(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Kubeflow Trainer's Trainer has no nodeSelector (placement is the runtime's, or podTemplateOverrides'): no
    # JSON Patch of the TrainJob writes the pin, so the hint says it and the JSON has no fix
    manifest = DENY / "kubeflow-trainer-trainjob-lammps-gpus-dev-on-mixed-fleet.yaml"
    code, report = admit(manifest, capsys)
    assert code == 1
    (finding,) = report["diagnostics"]
    assert finding["fix"] is None
    assert finding["hint"] == "pin the pod to class t4-dev with nodeSelector {node-pool: t4-dev}"
