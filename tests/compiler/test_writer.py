"""The writer swaps whole trees atomically, never touches foreign files, and reports drift as a diff."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compiler import writer
from compiler.tree import MARKER, Tree, marker_text

ROOT = Path(__file__).resolve().parents[2]


def compiled(files: dict[str, bytes]) -> Tree:
    """A tree as the compiler builds it: its marker records every file it holds."""
    return Tree.from_files({**files, MARKER: marker_text(files).encode()})


OLD = compiled({"a.yaml": b"old a\n", "gone.yaml": b"gone\n", "d/b.yaml": b"old b\n"})
NEW = compiled({"a.yaml": b"new a\n", "d/b.yaml": b"old b\n", "d/e/c.yaml": b"c\n"})


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


# ----------------------------------------------------------------------- writing


def test_writing_creates_the_directory_and_its_parents_and_then_checks_clean(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "out"
    writer.write_tree(NEW, out)
    assert snapshot(out) == dict(NEW)
    assert writer.check_tree(NEW, out).clean


def test_rewriting_replaces_the_tree_and_removes_files_no_longer_produced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer.write_tree(OLD, out)
    (tmp_path / "neighbour.txt").write_text("keep me")
    writer.write_tree(NEW, out)
    assert snapshot(out) == dict(NEW)
    assert siblings(out) == ["neighbour.txt"]  # no staging or retired directories left behind


def test_writing_into_an_existing_empty_directory_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    writer.write_tree(NEW, tmp_path / "out")
    assert snapshot(tmp_path / "out") == dict(NEW)


def test_a_non_empty_directory_without_the_marker_is_refused_and_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "src"
    out.mkdir()
    (out / "main.py").write_text("print('mine')\n")
    with pytest.raises(writer.WriteError, match="not a gpupolicy output"):
        writer.write_tree(NEW, out)
    assert snapshot(out) == {"main.py": b"print('mine')\n"}
    assert siblings(out) == []


def test_a_symlinked_output_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    writer.write_tree(OLD, real)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(writer.WriteError, match="is a symlink"):
        writer.write_tree(NEW, tmp_path / "link")
    assert snapshot(real) == dict(OLD)


def test_a_symlink_inside_a_previous_output_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer.write_tree(OLD, out)
    (out / "sneaky").symlink_to(tmp_path)
    with pytest.raises(writer.WriteError, match="symlink"):
        writer.write_tree(NEW, out)


def test_a_file_where_the_directory_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("a file")
    with pytest.raises(writer.WriteError, match="not a directory"):
        writer.write_tree(NEW, tmp_path / "out")
    with pytest.raises(writer.WriteError, match="is a file"):
        writer.write_tree(NEW, tmp_path / "out" / "sub")
    assert (tmp_path / "out").read_text() == "a file"


def test_a_read_only_output_directory_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    writer.write_tree(OLD, out)
    # Root ignores permission bits, so ask the writer's own permission probe to say no.
    monkeypatch.setattr(writer.os, "access", lambda path, mode: Path(path) != out)
    with pytest.raises(writer.WriteError, match="permission denied"):
        writer.write_tree(NEW, out)
    assert snapshot(out) == dict(OLD)


def test_a_tree_without_its_marker_is_never_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        writer.write_tree(Tree.from_files({"a.yaml": b""}), tmp_path / "out")


# ----------------------------------------------------------------------- failures keep the old tree


def test_an_interrupt_mid_write_leaves_the_previous_tree_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    writer.write_tree(OLD, out)
    written: list[Path] = []
    real_write = writer._write_file

    def interrupted(path: Path, data: bytes) -> None:
        if len(written) == 2:
            raise KeyboardInterrupt
        real_write(path, data)
        written.append(path)

    monkeypatch.setattr(writer, "_write_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        writer.write_tree(NEW, out)
    assert snapshot(out) == dict(OLD)
    assert siblings(out) == []


def test_a_full_disk_mid_write_is_a_clear_error_and_keeps_the_previous_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    writer.write_tree(OLD, out)

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(writer, "_write_file", full)
    with pytest.raises(writer.WriteError, match="No space left"):
        writer.write_tree(NEW, out)
    assert snapshot(out) == dict(OLD)
    assert siblings(out) == []


def test_without_an_atomic_exchange_two_renames_are_used_and_undone_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    writer.write_tree(OLD, out)
    monkeypatch.setattr(writer, "_exchange", lambda a, b: False)
    real_rename = os.rename

    def failing_second_rename(src: str | Path, dst: str | Path) -> None:
        if Path(src).name.startswith(".out.gpupolicy-new-"):
            raise KeyboardInterrupt
        real_rename(src, dst)

    monkeypatch.setattr(writer.os, "rename", failing_second_rename)
    with pytest.raises(KeyboardInterrupt):
        writer.write_tree(NEW, out)
    assert snapshot(out) == dict(OLD)
    assert siblings(out) == []
    monkeypatch.setattr(writer.os, "rename", real_rename)
    writer.write_tree(NEW, out)
    assert snapshot(out) == dict(NEW)
    assert siblings(out) == []


def test_a_tree_retired_by_a_kill_between_the_two_renames_is_put_back(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer.write_tree(OLD, out)
    os.rename(out, tmp_path / ".out.gpupolicy-old-1-0")
    (tmp_path / ".out.gpupolicy-new-1-0").mkdir()
    writer._recover(tmp_path, "out")
    assert snapshot(out) == dict(OLD)
    assert siblings(out) == []


def test_killing_a_compile_midway_leaves_the_previous_tree_and_the_next_run_cleans_up(tmp_path: Path) -> None:
    spec = ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml"
    changed = tmp_path / "cluster.yaml"
    changed.write_text(spec.read_text().replace("memoryPerReplica: 4401Mi", "memoryPerReplica: 3000Mi"))
    out = tmp_path / "out"
    from cli.main import main

    assert main(["compile", str(spec), "-o", str(out)]) == 0
    before = snapshot(out)
    slow_compile = (
        "import sys, time\n"
        "from cli import main as cli\nfrom compiler import writer\n"
        "real = writer._write_file\n"
        "def slow(path, data):\n"
        "    real(path, data)\n"
        "    time.sleep(0.2)\n"
        "writer._write_file = slow\n"
        f"sys.exit(cli.main(['compile', {str(changed)!r}, '-o', {str(out)!r}]))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", slow_compile], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not any(len(list(p.rglob("*.yaml"))) >= 3 for p in tmp_path.glob(".out.gpupolicy-new-*")):
            assert process.poll() is None, "the compile finished before it could be killed"
            assert time.monotonic() < deadline, "the compile never started writing"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    assert snapshot(out) == before
    assert main(["compile", str(changed), "-o", str(out)]) == 0
    assert snapshot(out) != before
    assert siblings(out) == ["cluster.yaml"]


# ----------------------------------------------------------------------- check


def test_check_reports_a_changed_a_missing_and_an_extra_file_as_a_unified_diff(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer.write_tree(OLD, out)
    drift = writer.check_tree(NEW, out)
    assert (drift.changed, drift.missing, drift.extra) == ((MARKER, "a.yaml"), ("d/e/c.yaml",), ("gone.yaml",))
    assert drift.diff == (
        f"--- a/{MARKER}\n+++ b/{MARKER}\n@@ -4,4 +4,4 @@\n"
        " # added here by hand are kept (`gpupolicy compile --prune-unknown` deletes them).\n"
        " a.yaml\n d/b.yaml\n-gone.yaml\n+d/e/c.yaml\n"
        "--- a/a.yaml\n+++ b/a.yaml\n@@ -1 +1 @@\n-old a\n+new a\n"
        "--- /dev/null\n+++ b/d/e/c.yaml\n@@ -0,0 +1 @@\n+c\n"
        "--- a/gone.yaml\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n"
    )
    assert snapshot(out) == dict(OLD)  # checking writes nothing


def test_check_of_a_missing_directory_reports_every_file_missing(tmp_path: Path) -> None:
    drift = writer.check_tree(NEW, tmp_path / "nowhere")
    assert drift.missing == tuple(NEW) and not drift.clean
    assert not (tmp_path / "nowhere").exists()


def test_check_notices_a_file_without_its_final_newline(tmp_path: Path) -> None:
    out = tmp_path / "out"
    writer.write_tree(NEW, out)
    (out / "a.yaml").write_bytes(b"new a")
    drift = writer.check_tree(NEW, out)
    assert drift.changed == ("a.yaml",)
    assert "\\ No newline at end of file\n" in drift.diff


def test_check_of_a_file_instead_of_a_directory_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("x")
    with pytest.raises(writer.WriteError, match="not a directory"):
        writer.check_tree(NEW, tmp_path / "out")


# ----------------------------------------------------------------------- what gpupolicy did not write


def test_a_foreign_directory_is_refused_from_its_top_level_alone_before_anything_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "deep" / "er").mkdir(parents=True)
    (home / "deep" / "er" / "big.bin").write_bytes(b"x" * 1024)
    os.mkfifo(home / "pipe")  # opening it would block forever
    scanned: list[str] = []
    real_scandir = os.scandir

    def scandir(path: str | Path) -> object:
        scanned.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(writer.os, "scandir", scandir)
    monkeypatch.setattr(writer, "_read_bounded", lambda path: pytest.fail(f"read {path}"))
    for attempt in (lambda: writer.check_tree(NEW, home), lambda: writer.write_tree(NEW, home)):
        with pytest.raises(writer.WriteError, match=r"is not empty and has no \.gpupolicy file"):
            attempt()
    assert scanned == [str(home), str(home)]  # one look at its top level per attempt, nothing below
    assert sorted(p.name for p in home.iterdir()) == ["deep", "pipe"]


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_fifo_or_socket_inside_an_output_is_refused_without_being_opened(tmp_path: Path, kind: str) -> None:
    import socket

    out = tmp_path / "out"
    writer.write_tree(OLD, out)
    special = out / "d" / "special"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(special))
        server.close()
    expected = "a FIFO" if kind == "fifo" else "a socket"
    with pytest.raises(writer.WriteError, match=f"is {expected}, which gpupolicy never writes"):
        writer.check_tree(NEW, out)
    with pytest.raises(writer.WriteError, match=f"is {expected}, which gpupolicy never writes"):
        writer.write_tree(NEW, out)
    assert snapshot(out) == dict(OLD)


def test_the_marker_records_every_file_the_tree_holds_sorted() -> None:
    recorded = NEW[MARKER].decode().splitlines()
    assert [line for line in recorded if not line.startswith("#")] == ["a.yaml", "d/b.yaml", "d/e/c.yaml"]


def test_a_marker_that_lists_no_files_keeps_every_file_the_compiler_does_not_produce_now(tmp_path: Path) -> None:
    # A tree written before markers listed their files: what is not produced now may be the user's.
    out = tmp_path / "out"
    legacy = Tree.from_files({**dict(OLD), MARKER: b"# Generated by `gpupolicy compile`\n"})
    writer.write_tree(legacy, out)
    assert writer.check_tree(NEW, out).foreign == ("gone.yaml",)
    assert writer.write_tree(NEW, out) == ("gone.yaml",)
    assert snapshot(out) == {**dict(NEW), "gone.yaml": b"gone\n"}
    assert writer.write_tree(NEW, out, prune_unknown=True) == ("gone.yaml",)
    assert snapshot(out) == dict(NEW)


def test_hand_added_files_survive_an_interrupted_write_and_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    writer.write_tree(OLD, out)
    (out / "d" / "mine.txt").write_text("mine")
    monkeypatch.setattr(writer, "_swap", lambda staging, out_dir: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        writer.write_tree(NEW, out)
    assert snapshot(out) == {**dict(OLD), "d/mine.txt": b"mine"}
    monkeypatch.undo()
    assert writer.write_tree(NEW, out) == ("d/mine.txt",)
    assert snapshot(out) == {**dict(NEW), "d/mine.txt": b"mine"}
    assert siblings(out) == []
