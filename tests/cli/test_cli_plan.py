"""gpupolicy plan end to end: the seeds' numbers, every output, pictures, drafts and bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
TKE = str(ROOT / "examples/clusters/tke-l20-t4/cluster.yaml")
TKE_INVENTORY = str(ROOT / "examples/plan/tke-l20-t4/inventory.yaml")


def test_seed_003_plan_recommends_8_and_3_time_slicing_replicas(capsys) -> None:
    assert main(["plan", "-p", TKE, TKE_INVENTORY, "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    recommended = {c["name"]: c["recommendation"] for c in document["classes"]}
    assert recommended["l20"]["candidate"] == "time-slicing x8"
    assert recommended["t4"]["candidate"] == "time-slicing x3"
    assert recommended["t4"]["sharing"] == {"timeSlicing": {"sizing": {"memoryPerReplica": "4401Mi",
                                                                        "reserve": "10%"}}}


def test_text_and_markdown_name_the_reasons(capsys) -> None:
    assert main(["plan", "-p", TKE, TKE_INVENTORY]) == 0
    text = capsys.readouterr().out
    assert "recommended: time-slicing x8" in text and "why not mps: not evaluated" in text
    assert main(["plan", "-p", TKE, TKE_INVENTORY, "-O", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("# GPU sharing plan")


def test_pictures_are_well_formed_svg_and_deterministic(tmp_path: Path, capsys) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        assert main(["plan", "--gpu", "32Gi", "--random-tasks", "24", "--seed", "42", "--pictures", str(out)]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in first.iterdir())
    assert names == ["seed-001-card-recommended.svg", "seed-001-card-scores.svg", "seed-001-card-simulation.svg"]
    for name in names:
        data = (first / name).read_bytes()
        assert data == (second / name).read_bytes()
        root = ET.fromstring(data)
        svg = "{http://www.w3.org/2000/svg}"
        assert root.tag == f"{svg}svg" and root.find(f"{svg}title") is not None


def test_draft_from_a_spec_validates(capsys) -> None:
    assert main(["plan", "-p", TKE, TKE_INVENTORY, "--draft"]) == 0
    from policy.load import load_policy

    assert load_policy(capsys.readouterr().out, filename="draft.yaml").ok


def test_manifests_and_prometheus_exports_make_an_inventory(tmp_path: Path, capsys) -> None:
    fixtures = ROOT / "tests/fixtures/prometheus"
    assert main(["plan", "-p", TKE, "--manifests", str(ROOT / "examples/ci/apps/tke-l20-t4"),
                 "--prometheus-memory", str(fixtures / "fb-used.json"), "--prometheus-sm",
                 str(fixtures / "sm-active.json")]) == 2
    assert "batch/eval" in capsys.readouterr().err  # its SM activity was NaN: the inventory must give it
    extra = tmp_path / "extra.csv"
    extra.write_text("name,namespace,smActivity,runtime\neval,batch,0.5,20m\n")
    code = main(["plan", "-p", TKE, str(extra), "--manifests", str(ROOT / "examples/ci/apps/tke-l20-t4"),
                 "--prometheus-memory", str(fixtures / "fb-used.json"),
                 "--prometheus-sm", str(fixtures / "sm-active.json"), "-O", "json"])
    captured = capsys.readouterr()
    # The T4 alone cannot host all three workloads that may run on it: a finding (1), not bad input.
    assert code == 1, captured.err
    document = json.loads(captured.out)
    t4 = next(c for c in document["classes"] if c["name"] == "t4")
    # pii-detector is pinned to the T4 by its nodeSelector; nlp-inference may run on either class.
    assert {w["name"] for w in t4["workloads"]} == {"nlp/pii-detector", "nlp/nlp-inference", "batch/eval"}
    assert t4["recommendation"] is None
    l20 = next(c for c in document["classes"] if c["name"] == "l20")
    assert "nlp/pii-detector" not in {w["name"] for w in l20["workloads"]}


def test_bad_input_exits_2_with_a_located_message(tmp_path: Path, capsys) -> None:
    broken = tmp_path / "inv.yaml"
    broken.write_text("workloads:\n  - name: svc\n    memory: lots\n    smActivity: 0.1\n")
    assert main(["plan", "-p", TKE, str(broken)]) == 2
    assert f"{broken}:3:" in capsys.readouterr().err
    assert main(["plan", "--gpu", "A100X", TKE_INVENTORY]) == 2
    assert "did you mean" in capsys.readouterr().err
    assert main(["plan", TKE_INVENTORY]) == 2
    assert main(["plan", "-p", TKE, TKE_INVENTORY, "--weights", "speed=1"]) == 2
