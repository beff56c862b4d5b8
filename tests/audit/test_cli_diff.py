"""`gpupolicy diff`: capacity per class and tenant before and after, disruption on nodes, running workloads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import build_audit_dumps
import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "clusters"
NAMES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "cluster.yaml").is_file())
H20_LAYOUT = ("          layout:\n            1g.12gb: 7\n          timeSlicing:\n            1g.12gb: 2\n",
              "          layout:\n            3g.48gb: 2\n          timeSlicing:\n            3g.48gb: 2\n")
#: One realistic edit per example, and the class whose slots it changes: (old text, new text, class, slots before,
#: slots after) for that class's first resource.
EDITS = {
    "tke-l20-t4": ("memoryPerReplica: 4621Mi", "memoryPerReplica: 9242Mi", "l20", 8, 4),
    "mixed-fleet": ("mps: {replicas: 4}", "mps: {replicas: 2}", "a100-mps", 32, 16),
    "h20-mig": (*H20_LAYOUT, "h20", 448, 128),
    "vgpu-platform": ("nodes: 6", "nodes: 3", "dev-ts", 24, 12),
    # the device-plugin pool beside the DRA pools: 4 nodes x 1 L4 x 4 replicas, halved to 2 nodes
    "dra-mixed": ("nodes: 4", "nodes: 2", "l4-dev", 16, 8),
}


def edited(tmp_path: Path, name: str, old: str, new: str) -> str:
    text = (EXAMPLES / name / "cluster.yaml").read_text(encoding="utf-8")
    assert text.count(old) == 1, (name, old)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return str(path)


def diff_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["diff", *args, "-O", "json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", NAMES)
def test_a_spec_against_itself_prints_no_change(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(EXAMPLES / name / "cluster.yaml")
    assert main(["diff", spec, spec]) == 0
    assert "No change: BASE and HEAD compile to the same tree and the same capacity." in capsys.readouterr().out
    code, document = diff_json(capsys, spec, spec)
    assert code == 0 and document["changed"] is False and document["tree"] == [] and document["disruptions"] == []


@pytest.mark.parametrize("name", NAMES)
def test_two_versions_of_each_example_name_the_slots_per_class_and_tenant(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert set(EDITS) == set(NAMES)
    old, new, node_class, before, after = EDITS[name]
    head = edited(tmp_path, name, old, new)
    code, document = diff_json(capsys, str(EXAMPLES / name / "cluster.yaml"), head)
    assert code == 0 and document["changed"] is True
    changed = next(c for c in document["classes"] if c["name"] == node_class)
    assert changed["change"] == "changed"
    assert (changed["capacity"][0][0]["slots"], changed["capacity"][1][0]["slots"]) == (before, after)
    reaching = [t for t in document["tenants"] if any(c["node_class"] == node_class for c in t["reach"][0])]
    assert reaching and all(t["change"] == "changed" and t["slots"][0] - t["slots"][1] == before - after
                            for t in reaching)
    assert main(["diff", str(EXAMPLES / name / "cluster.yaml"), head]) == 0
    markdown = capsys.readouterr().out
    assert f"| `{node_class}` | changed |" in markdown
    assert f"{before:,} × `" in markdown and f"{after:,} × `" in markdown


def test_a_mig_layout_change_on_h20_reports_nodes_gpus_and_the_pods_to_drain(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = edited(tmp_path, "h20-mig", *H20_LAYOUT)
    dump = str(build_audit_dumps.DUMPS / "h20-mig.yaml")
    code, document = diff_json(capsys, str(EXAMPLES / "h20-mig" / "cluster.yaml"), head, "--workloads", dump)
    assert code == 1  # the running qwen-7b asks for nvidia.com/mig-1g.12gb, which HEAD no longer offers
    [repartition] = [d for d in document["disruptions"] if d["kind"] == "mig-repartition"]
    assert (repartition["node_class"], repartition["nodes"], repartition["gpus"]) == ("h20", 4, 32)
    assert [p["name"] for p in repartition["drain"]] == ["qwen-7b-8c7d5b9f6-7x2kq", "qwen-7b-8c7d5b9f6-b9wzl"]
    assert {d["kind"] for d in document["disruptions"]} == {"mig-repartition", "device-plugin-restart",
                                                            "node-label-change"}
    [violation] = document["workloads"]["newViolations"]
    assert (violation["kind"], violation["name"], violation["folded"]) == ("Deployment", "qwen-7b", 3)
    assert "mig/configmap.yaml" in {t["path"] for t in document["tree"]}


def test_a_mixed_layout_change_in_one_group_repartitions_only_that_groups_gpus(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = edited(tmp_path, "mixed-fleet", "layout: {3g.40gb: 1, 2g.20gb: 1, 1g.10gb: 2}", "layout: {3g.40gb: 2}")
    code, document = diff_json(capsys, str(EXAMPLES / "mixed-fleet" / "cluster.yaml"), head)
    assert code == 0
    [repartition] = [d for d in document["disruptions"] if d["kind"] == "mig-repartition"]
    assert (repartition["nodes"], repartition["gpus"]) == (2, 8)  # 2 nodes x GPUs 4-7
    assert "GPU index 4-7" in repartition["detail"]


def test_removing_research_mps_lists_exactly_its_workloads_as_new_violations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = edited(tmp_path, "mixed-fleet", "allow: [exclusive, mps, time-slicing]", "allow: [exclusive, time-slicing]")
    dump = str(build_audit_dumps.DUMPS / "mixed-fleet.yaml")
    code, document = diff_json(capsys, str(EXAMPLES / "mixed-fleet" / "cluster.yaml"), head, "--workloads", dump)
    assert code == 1
    assert [(v["kind"], v["name"], v["folded"]) for v in document["workloads"]["newViolations"]] == [
        ("Deployment", "time-slicing-verification", 5), ("Job", "j-e2e-1", 1), ("Pod", "mps-borrower", 0),
        ("Pod", "mps-stowaway", 0)]
    assert document["disruptions"] == []  # an admission change restarts no plugin and moves no node
    # and back: the same workloads are the violations the reverse change resolves
    code, back = diff_json(capsys, head, str(EXAMPLES / "mixed-fleet" / "cluster.yaml"), "--workloads", dump)
    assert code == 0 and len(back["workloads"]["resolvedViolations"]) == 4 and not back["workloads"]["newViolations"]


def test_a_rule_going_from_warn_to_enforce_makes_its_warned_workloads_new_violations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the same rule fires under both specs, but HEAD denies what BASE only warned of: those workloads would be
    # refused when re-created, so they are new violations; the reverse is no new violation (warned is better)
    no_mps = ("allow: [exclusive, mps, time-slicing]", "allow: [exclusive, time-slicing]")
    text = (EXAMPLES / "mixed-fleet" / "cluster.yaml").read_text(encoding="utf-8").replace(*no_mps)
    warned, enforced = tmp_path / "warned.yaml", tmp_path / "enforced.yaml"
    warned.write_text(text.replace("tenant-sharing-mode-denied: enforce", "tenant-sharing-mode-denied: warn"))
    enforced.write_text(text)
    dump = str(build_audit_dumps.DUMPS / "mixed-fleet.yaml")
    code, document = diff_json(capsys, str(warned), str(enforced), "--workloads", dump)
    assert code == 1 and len(document["workloads"]["newViolations"]) == 4
    code, back = diff_json(capsys, str(enforced), str(warned), "--workloads", dump)
    assert not back["workloads"]["newViolations"]


def test_running_pods_beyond_the_new_slots_no_longer_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = str(build_audit_dumps.DUMPS / "mixed-fleet.yaml")
    base = str(EXAMPLES / "mixed-fleet" / "cluster.yaml")
    head = edited(tmp_path, "mixed-fleet", "nodes: 6", "nodes: 1")  # t4-dev: 24 -> 4 slots
    code, document = diff_json(capsys, base, head, "--workloads", dump)
    assert document["workloads"]["overcommitted"] == [] and code == 0  # its 2 notebook pods still fit
    head = edited(tmp_path, "mixed-fleet", "nodes: 2\n      gpu: {model: A100-SXM4-80GB, count: 4}",
                  "nodes: 1\n      gpu: {model: A100-SXM4-80GB, count: 1}")  # a100-mps: 32 -> 4 slots
    code, document = diff_json(capsys, base, head, "--workloads", dump)
    assert code == 1  # 6 pods on a100-mps: 3 of the Deployment, the Job's, the two forged ones
    assert document["workloads"]["overcommitted"] == [
        {"node_class": "a100-mps", "resource": "nvidia.com/gpu", "requested": 6, "slots": [32, 4]}]


def test_base_ref_reads_the_committed_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text((EXAMPLES / "tke-l20-t4" / "cluster.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "cluster.yaml"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    spec.write_text(spec.read_text(encoding="utf-8").replace(*EDITS["tke-l20-t4"][:2]), encoding="utf-8")
    code, document = diff_json(capsys, "--base-ref", "HEAD", str(spec))
    assert code == 0 and document["base"] == f"HEAD:{spec}"
    l20 = next(c for c in document["classes"] if c["name"] == "l20")
    assert (l20["capacity"][0][0]["slots"], l20["capacity"][1][0]["slots"]) == (8, 4)
    assert main(["diff", "--base-ref", "no-such-ref", str(spec)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_github_output_appends_the_markdown_to_the_step_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    head = edited(tmp_path, "tke-l20-t4", *EDITS["tke-l20-t4"][:2])
    assert main(["diff", str(EXAMPLES / "tke-l20-t4" / "cluster.yaml"), head, "-O", "github"]) == 0
    written = capsys.readouterr().out
    assert summary.read_text(encoding="utf-8") == "earlier step\n" + written
    assert "### Disruption on nodes" in written and "device-plugin-restart" in written


def test_bad_input_exits_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = str(EXAMPLES / "tke-l20-t4" / "cluster.yaml")
    assert main(["diff", spec]) == 2
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: ClusterGPUPolicy\n", encoding="utf-8")
    assert main(["diff", spec, str(broken)]) == 2
    assert main(["diff", spec, spec, "--workloads", str(tmp_path / "missing.yaml")]) == 2
    assert "does not validate" in capsys.readouterr().err


def test_a_node_selector_change_names_the_running_pods_that_select_the_old_label(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = edited(tmp_path, "mixed-fleet", "node-pool: t4-dev", "node-pool: t4-notebooks")
    dump = str(build_audit_dumps.DUMPS / "mixed-fleet.yaml")
    code, document = diff_json(capsys, str(EXAMPLES / "mixed-fleet" / "cluster.yaml"), head, "--workloads", dump)
    assert code == 1  # the notebooks' nodeSelector now matches no class: HEAD would deny them
    assert [(v["name"], v["rules"]) for v in document["workloads"]["newViolations"]] == [
        ("notebook", ["gpu-request-unsatisfiable"])]
    [moved] = [d for d in document["disruptions"] if d["kind"] == "node-label-change"]
    assert (moved["node_class"], moved["nodes"], moved["gpus"]) == ("t4-dev", 6, 6)
    assert "nodeSelector node-pool: t4-dev -> t4-notebooks" in moved["detail"] and "node-pool" in moved["labels"]
    assert [p["name"] for p in moved["drain"]] == ["notebook-77f5d9c4b-7x2kq", "notebook-77f5d9c4b-b9wzl"]
    assert main(["diff", str(EXAMPLES / "mixed-fleet" / "cluster.yaml"), head, "--workloads", dump]) == 1
    assert "Running pods that select `t4-dev`'s nodes by a changed label (2)" in capsys.readouterr().out
