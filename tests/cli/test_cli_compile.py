"""gpupolicy compile from the outside: golden trees, --check, exit codes and messages."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent for p in (ROOT / "examples" / "clusters").glob("*/cluster.yaml"))
TKE = ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_committed_example_trees_are_what_the_compiler_produces(
    example: Path, update_golden: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    spec, out = str(example / "cluster.yaml"), str(example / "out")
    if update_golden:
        assert run(capsys, "compile", spec, "-o", out)[0] == 0
    code, diff, err = run(capsys, "compile", spec, "-o", out, "--check")
    assert code == 0, f"{err}\n{diff}\nreview the diff, then regenerate with: pytest --update-golden"


def test_check_exits_1_with_a_diff_for_a_changed_a_missing_and_an_extra_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run(capsys, "compile", str(TKE), "-o", str(out))[0] == 0
    (out / "REPORT.md").write_text("edited by hand\n")
    (out / "device-plugin" / "daemonset-t4.yaml").unlink()
    # A file an earlier compile wrote (so its marker lists it) that this spec no longer produces.
    (out / "device-plugin" / "old.yaml").write_text("extra: true\n")
    with (out / ".gpupolicy").open("a") as marker:
        marker.write("device-plugin/old.yaml\n")
    (out / "device-plugin" / "notes.yaml").write_text("mine\n")  # added by hand: not drift, never read
    before = sorted(p.name for p in out.rglob("*"))
    code, diff, err = run(capsys, "compile", str(TKE), "-o", str(out), "--check")
    assert code == 1
    assert "--- a/REPORT.md\n+++ b/REPORT.md\n" in diff
    assert "--- /dev/null\n+++ b/device-plugin/daemonset-t4.yaml\n" in diff
    assert "--- a/device-plugin/old.yaml\n+++ /dev/null\n" in diff
    assert "notes.yaml" not in diff
    assert ("stale (2 changed, 1 missing, 1 extra file(s)); kept 1 file(s) gpupolicy did not write: "
            "device-plugin/notes.yaml (--prune-unknown deletes them)") in err
    assert sorted(p.name for p in out.rglob("*")) == before  # --check wrote nothing


def test_check_of_an_output_that_does_not_exist_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, diff, _ = run(capsys, "compile", str(TKE), "-o", str(tmp_path / "out"), "--check")
    assert code == 1 and "+++ b/kustomization.yaml" in diff
    assert not (tmp_path / "out").exists()


def test_compiling_an_up_to_date_tree_rewrites_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    run(capsys, "compile", str(TKE), "-o", str(out))
    inode = out.stat().st_ino
    code, _, err = run(capsys, "compile", str(TKE), "-o", str(out))
    assert code == 0 and "up to date" in err
    assert out.stat().st_ino == inode


def test_a_spec_with_errors_prints_diagnostics_exits_1_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(TKE.read_text().replace("model: Tesla-T4", "model: Tesla-T5"))
    code, out, err = run(capsys, "compile", str(spec), "-o", str(tmp_path / "out"))
    assert code == 1 and out == ""
    assert f"{spec}:" in err and "error[unknown-gpu-model]" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", [None, "spec: [unclosed\n"], ids=["missing", "yaml-syntax"])
def test_an_unreadable_or_unparseable_spec_exits_2(
    tmp_path: Path, content: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "cluster.yaml"
    if content is not None:
        spec.write_text(content)
    code, _, err = run(capsys, "compile", str(spec), "-o", str(tmp_path / "out"))
    assert code == 2 and "error[" in err


def test_a_foreign_output_directory_exits_2_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    code, _, err = run(capsys, "compile", str(TKE), "-o", str(tmp_path))
    assert code == 2
    assert "is not empty and has no .gpupolicy file" in err
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_without_an_output_directory_the_tree_goes_to_out_beside_the_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "tke-prod" / "cluster.yaml"
    spec.parent.mkdir()
    shutil.copy(TKE, spec)
    assert run(capsys, "compile", str(spec))[0] == 0
    assert (spec.parent / "out" / "device-plugin" / "daemonset-l20.yaml").is_file()


def test_check_over_several_specs_defaults_each_output_to_out_beside_it(capsys: pytest.CaptureFixture[str]) -> None:
    specs = sorted(str(p) for p in (Path(__file__).parents[2] / "examples" / "clusters").glob("*/cluster.yaml"))
    assert main(["compile", "--check", *specs]) == 0
    err = capsys.readouterr().err
    assert all(f"{Path(s).parent / 'out'}: up to date" in err for s in specs)


def test_one_stale_tree_among_several_fails_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).parents[2] / "examples" / "clusters" / "tke-l20-t4"
    stale = tmp_path / "tke"
    shutil.copytree(example, stale)
    (stale / "out" / "REPORT.md").write_text("edited by hand\n")
    fresh = str(Path(__file__).parents[2] / "examples" / "clusters" / "h20-mig" / "cluster.yaml")
    assert main(["compile", "--check", fresh, str(stale / "cluster.yaml")]) == 1
    assert "REPORT.md" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["-o", "x", "a.yaml", "b.yaml"], ["-"]])
def test_one_output_for_several_specs_or_stdin_without_an_output_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compile", *argv]) == 2
    assert "gpupolicy compile:" in capsys.readouterr().err


# --- what gpupolicy did not write ---------------------------------------------------------------------------


def test_files_added_by_hand_inside_a_compiled_tree_are_kept_and_named_until_pruned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run(capsys, "compile", str(TKE), "-o", str(out))[0] == 0
    (out / "my-notes.txt").write_text("why we run 8 replicas\n")
    (out / "mine").mkdir()
    (out / "mine" / "overlay.yaml").write_text("kind: Kustomization\n")
    (out / "empty").mkdir()
    (out / "REPORT.md").write_text("edited by hand\n")  # a file gpupolicy wrote: restored
    code, _, err = run(capsys, "compile", str(TKE), "-o", str(out))
    assert code == 0
    assert "1 changed, 0 removed); kept 2 file(s) gpupolicy did not write: mine/overlay.yaml, my-notes.txt" in err
    assert (out / "my-notes.txt").read_text() == "why we run 8 replicas\n"
    assert (out / "mine" / "overlay.yaml").read_text() == "kind: Kustomization\n"
    assert (out / "empty").is_dir()
    assert "edited by hand" not in (out / "REPORT.md").read_text()
    assert "my-notes.txt" not in (out / ".gpupolicy").read_text()  # still not ours
    assert run(capsys, "compile", str(TKE), "-o", str(out), "--check")[0] == 0  # foreign files are not drift

    code, _, err = run(capsys, "compile", str(TKE), "-o", str(out), "--prune-unknown")
    assert code == 0 and "deleted 2 file(s) gpupolicy did not write: mine/overlay.yaml, my-notes.txt" in err
    assert not (out / "my-notes.txt").exists() and not (out / "mine").exists() and not (out / "empty").exists()


def test_a_file_added_by_hand_where_gpupolicy_now_writes_is_refused_not_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run(capsys, "compile", str(TKE), "-o", str(out))[0] == 0
    spec = tmp_path / "cluster.yaml"
    spec.write_text(TKE.read_text())
    (out / "admission").rename(tmp_path / "admission")  # as if an older spec had no webhook...
    (out / "admission").write_text("a file of mine\n")  # ...and someone put a file where it now goes
    code, _, err = run(capsys, "compile", str(spec), "-o", str(out))
    assert code == 2 and "was added by hand where gpupolicy now writes" in err
    assert (out / "admission").read_text() == "a file of mine\n"


def test_an_empty_output_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(TKE), "-o", ""]) == 2
    assert "-o needs a directory name" in capsys.readouterr().err
