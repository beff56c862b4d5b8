"""gpupolicy plan end to end: the seeds' numbers, every output, pictures, drafts and bad input."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

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
    markdown = capsys.readouterr().out
    assert markdown.startswith("# GPU sharing plan")
    # Nested reasons are list items under the recommendation, not items under empty items.
    assert "\n  - hosts 4 process(es)" in markdown and "-   -" not in markdown


def _fragments_in_text(text: str) -> list[object]:
    """The YAML under each 'spec fragment for ...:' line of the text output (indented 4 columns)."""
    out, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("spec fragment for"):
            block = []
            for following in lines[i + 1:]:
                if not following.startswith("    "):
                    break
                block.append(following[4:])
            out.append(yaml.safe_load("\n".join(block)))
    return out


def test_text_and_markdown_print_the_spec_fragment_of_each_class(capsys) -> None:
    """The fragment a reader copies is in every output, and it is the JSON document's recommendation."""
    assert main(["plan", "-p", TKE, TKE_INVENTORY, "-O", "json"]) == 0
    expected = [{"sharing": c["recommendation"]["sharing"]} for c in json.loads(capsys.readouterr().out)["classes"]]
    assert main(["plan", "-p", TKE, TKE_INVENTORY]) == 0
    assert _fragments_in_text(capsys.readouterr().out) == expected
    assert main(["plan", "-p", TKE, TKE_INVENTORY, "-O", "markdown"]) == 0
    blocks = re.findall(r"```yaml\n(.*?)```", capsys.readouterr().out, flags=re.S)
    assert [yaml.safe_load(b) for b in blocks] == expected
    # A named GPU model has no spec: the fragment is what a reader has to go on.
    assert main(["plan", "--gpu", "L20", TKE_INVENTORY]) == 0
    assert _fragments_in_text(capsys.readouterr().out) == [
        {"sharing": {"timeSlicing": {"sizing": {"memoryPerReplica": "4621Mi", "reserve": "10%"}}}}]


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


def _without_sharing(text: str) -> str:
    """The text with every node class's ``sharing:`` block cut out (the key line and the lines indented under
    it); comments between blocks stay."""
    out, cut = [], None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if cut is not None and line.strip() and not line.lstrip().startswith("#") and indent > cut:
            continue
        cut = None
        if line.lstrip().startswith("sharing:"):
            cut = indent
            continue
        out.append(line)
    return "\n".join(out)


EXAMPLE_SPECS = sorted((ROOT / "examples/clusters").glob("*/cluster.yaml"))


@pytest.mark.parametrize("spec", EXAMPLE_SPECS, ids=[p.parent.name for p in EXAMPLE_SPECS])
def test_a_draft_changes_only_the_sharing_blocks_and_validates(spec: Path, capsys) -> None:
    """Comments, key order, quoting and quantities such as 46068Mi outside the sharing blocks come out as written;
    the sharing blocks are the recommendation; the draft validates."""
    from policy.load import load_policy

    inventory = ROOT / "tests/fixtures/plan-small-services.yaml"
    code = main(["plan", "-p", str(spec), str(inventory), "--draft"])
    draft = capsys.readouterr().out
    original = spec.read_text(encoding="utf-8")
    assert code == 0, draft
    assert _without_sharing(draft) == _without_sharing(original)
    assert draft != original
    assert load_policy(draft, filename="draft.yaml").ok
    assert main(["plan", "-p", str(spec), str(inventory), "-O", "json"]) == 0
    planned = {c["name"]: c["recommendation"]["sharing"] for c in json.loads(capsys.readouterr().out)["classes"]
               if c["recommendation"]}
    drafted = {c["name"]: c["sharing"] for c in yaml.safe_load(draft)["spec"]["nodeClasses"]}
    assert planned and all(drafted[name] == sharing for name, sharing in planned.items())


def test_a_draft_of_a_spec_on_stdin_edits_that_text(monkeypatch, capsys) -> None:
    original = Path(TKE).read_text(encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO(original))
    assert main(["plan", "-p", "-", TKE_INVENTORY, "--draft"]) == 0
    # The recommendation is what the example already says: nothing changes, not even a comment.
    assert capsys.readouterr().out == original


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
