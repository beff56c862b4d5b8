"""gpupolicy explain prints the capacity report: a table for people, report.json for programs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "examples" / "clusters"


def test_the_table_shows_each_class_and_the_2_to_11_slots_of_the_seed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(CLUSTERS / "tke-l20-t4" / "cluster.yaml")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["CLASS", "GPU", "MODE", "NODES", "GPUS", "BEFORE", "AFTER", "RESOURCE", "MEM/SLOT",
                                "ISOLATION"]
    assert lines[1].split()[:9] == ["l20", "NVIDIA-L20", "time-slicing", "1", "1", "1", "8", "nvidia.com/gpu",
                                    "4621"]
    assert lines[2].split()[:9] == ["t4", "Tesla-T4", "time-slicing", "1", "1", "1", "3", "nvidia.com/gpu", "4401"]
    assert "tke-prod: 2 node(s), 2 GPU(s), 2 -> 11 schedulable GPU slots" in out
    assert "l20: sizing floor((46068 - 4606 reserve) / 4621) = 8 replicas, 4494 MiB headroom" in out


@pytest.mark.parametrize("name", ["tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform"])
def test_json_output_is_the_committed_report_json(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--output", "json", str(CLUSTERS / name / "cluster.yaml")]) == 0
    printed = capsys.readouterr().out
    assert printed == (CLUSTERS / name / "out" / "report.json").read_text(encoding="utf-8")
    assert json.loads(printed)["version"] == 2


def test_the_table_says_who_sets_each_label_of_the_operator_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(CLUSTERS / "h20-mig" / "cluster.yaml")]) == 0
    out = capsys.readouterr().out
    assert "h20: label nvidia.com/mig.config=h20 set by gpupolicy's label reconciler (node-labels/)" in out
    assert "4 node(s), 32 GPU(s), 32 -> 448 schedulable GPU slots" in out


@pytest.mark.parametrize("name", ["tke-l20-t4", "mixed-fleet", "h20-mig", "vgpu-platform"])
def test_no_example_leaves_a_manual_command(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(CLUSTERS / name / "cluster.yaml")]) == 0
    out = capsys.readouterr().out
    for manual in ("kubectl label", "nvidia-mig-parted apply", "label the nodes yourself", "run nvidia-mig-manager",
                   "kubectl create namespace", "creates no Namespace", "must exist", "nvidia-smi compute-policy",
                   "helm upgrade", "helm install", "kubectl apply"):
        assert manual not in out
    report = (CLUSTERS / name / "out" / "REPORT.md").read_text(encoding="utf-8")
    assert "helm upgrade" not in report and "helm install" not in report


@pytest.mark.parametrize("name", ["h20-mig", "vgpu-platform"])
def test_helm_values_are_pointed_at_the_gitops_objects_that_apply_them(name: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(CLUSTERS / name / "cluster.yaml")]) == 0
    out = capsys.readouterr().out
    assert "the tree's flux/" in out and "multi-source" in out
    for path in re.findall(r"examples/gitops/\S+\.yaml", out):
        assert (CLUSTERS.parent.parent / path).is_file(), path


def test_a_spec_with_errors_exits_1_with_its_diagnostics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text((CLUSTERS / "tke-l20-t4" / "cluster.yaml").read_text().replace("count: 1", "count: 0", 1))
    assert main(["explain", str(spec)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "error[" in err


def test_the_vgpu_floor_shows_its_capacity_isolation_and_overhead_beside_the_other_modes(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(CLUSTERS / "vgpu-platform" / "cluster.yaml")]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[1:4]}
    assert rows["platform-vgpu"].split()[:9] == ["platform-vgpu", "NVIDIA-L40S", "vgpu", "4", "16", "16", "80",
                                                 "nvidia.com/gpu", "8192"]
    assert rows["platform-vgpu"].endswith("HAMi-core software limits on memory and SMs per container "
                                          "(no fault isolation)")
    assert rows["prod-mig"].split()[2] == "mig" and rows["dev-ts"].split()[2] == "time-slicing"
    assert "platform-vgpu: overhead ~5-10% (HAMi-core intercepts every CUDA call" in out
    assert "prod-mig: overhead ~2-3%" in out and "dev-ts: overhead ~10-15%" in out
    assert "platform-vgpu: vGPUs: up to 5 per GPU." in out
    assert "hami-values.yaml the values for HAMi's chart 2.10.0" in out and "as release hami in kube-system" in out


def test_time_sliced_mig_has_one_name_in_explain_the_report_and_denials(capsys: pytest.CaptureFixture[str],
                                                                       tmp_path: Path) -> None:
    spec = CLUSTERS / "h20-mig" / "cluster.yaml"
    assert main(["explain", str(spec)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["h20", "NVIDIA-H20", "mig+time-slicing"]
    report = json.loads((CLUSTERS / "h20-mig" / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["classes"][0]["mode"] == "mig+time-slicing"
    assert "| h20 | NVIDIA-H20 | mig+time-slicing |" in (CLUSTERS / "h20-mig" / "out" / "REPORT.md").read_text()
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
                   "    - {name: c, resources: {limits: {nvidia.com/mig-1g.12gb: 1}}}\n", encoding="utf-8")
    assert main(["admit", "-p", str(spec), str(pod)]) == 1
    assert "may not use mig+time-slicing GPUs" in capsys.readouterr().out
