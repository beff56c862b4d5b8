"""Compiler robustness: mutated and random specs, kills mid-write, unreadable and read-only paths, symlinks."""

from __future__ import annotations

import copy
import errno
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import ROOT, Figures, paths_in
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.main import main as gpupolicy
from compiler import writer
from compiler.tree import MARKER

EXAMPLES = sorted((ROOT / "examples" / "clusters").glob("*/cluster.yaml"))
GPUPOLICY = str(Path(sys.executable).parent / "gpupolicy")
FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
#: `file:line:column: severity[code]: message`, as every reporter's text form writes a finding.
LOCATED = r"^{file}:\d+:\d+: (error|warning|info)\[[a-z0-9-]+\]: \S"


def snapshot(root: Path) -> dict[str, bytes] | None:
    """Every file under root by relative path, or None when root does not exist."""
    if not root.exists():
        return None
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = gpupolicy(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- mutated and random specs -----------------------------------------------------------------------------

yaml_scalars = (st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True)
                | st.text(max_size=12)
                | st.sampled_from(["on", "off", "yes", "~", "null", "0x1F", "1e3", "-1", "9" * 30, "4621Mi", "10%",
                                   "110%", "0", "NVIDIA-L20", "mig-1g.10gb", "1g.10gb", "nvidia.com/gpu", "", " "]))
yaml_values = st.recursive(yaml_scalars, lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.text(max_size=10), children, max_size=3), max_leaves=8)
EXAMPLE_DATA = [yaml.safe_load(path.read_text()) for path in EXAMPLES]


@st.composite
def mutated_specs(draw: st.DrawFn) -> str:
    """An example spec with values replaced, keys deleted, misspelt or added at random YAML paths."""
    data = copy.deepcopy(draw(st.sampled_from(EXAMPLE_DATA)))
    for _ in range(draw(st.integers(1, 3))):
        candidates = [p for p in paths_in(data) if p]
        path = draw(st.sampled_from(candidates))
        parent: Any = data
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = draw(st.sampled_from(["replace", "replace", "delete", "misspell", "add"]))
        if action == "replace":
            parent[key] = draw(yaml_values)
        elif action == "delete":
            del parent[key]
        elif action == "misspell" and isinstance(key, str) and key:
            at = draw(st.integers(0, len(key) - 1))
            parent[key[:at] + key[at + 1:] or "x"] = parent.pop(key)
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(yaml_values)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


@st.composite
def edited_texts(draw: st.DrawFn) -> str:
    """An example's text with lines deleted, duplicated, re-indented, tabbed or cut: YAML-level damage."""
    lines = draw(st.sampled_from(EXAMPLES)).read_text().splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        edit = draw(st.sampled_from(["delete", "duplicate", "indent", "dedent", "tab", "truncate", "garble"]))
        if edit == "delete":
            del lines[at]
        elif edit == "duplicate":
            lines.insert(at, lines[at])
        elif edit == "indent":
            lines[at] = "   " + lines[at]
        elif edit == "dedent":
            lines[at] = lines[at].lstrip()
        elif edit == "tab":
            lines[at] = "\t" + lines[at]
        elif edit == "truncate":
            lines[at] = lines[at][: draw(st.integers(0, len(lines[at])))]
        else:
            lines[at] = draw(st.text(max_size=20)) + "\n"
        if not lines:
            break
    return "".join(lines)


random_yaml = st.one_of(
    yaml_values.map(lambda value: yaml.safe_dump(value, allow_unicode=True)),
    st.text(max_size=300),
    st.builds(lambda a, b: f"apiVersion: gpupolicy.dev/v1alpha1\nkind: ClusterGPUPolicy\nmetadata: {a}\nspec: {b}\n",
              yaml_values.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip()),
              yaml_values.map(lambda v: yaml.safe_dump(v, default_flow_style=True).strip())),
)


@pytest.fixture(scope="module")
def counted(figures: Figures) -> Iterator[Callable[[str, int], None]]:
    counts: dict[str, int] = {}

    def count(strategy: str, code: int) -> None:
        counts[f"{strategy}, exit {code}"] = counts.get(f"{strategy}, exit {code}", 0) + 1

    yield count
    figures.record("compiler fuzz, in-process", **counts, total=sum(counts.values()))


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzzed-specs")


def check_spec(capsys: pytest.CaptureFixture[str], spec_dir: Path, text: str) -> int:
    """validate, then compile --check: exit 0, 1 or 2, every finding located, never a traceback."""
    spec = spec_dir / "cluster.yaml"
    spec.write_text(text, encoding="utf-8", errors="surrogatepass")
    code, out, err = run(capsys, "validate", str(spec))
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in out + err
    if code:  # validate reports on stdout (its product), like every reporter
        assert re.search(LOCATED.format(file=re.escape(str(spec))), out, re.MULTILINE), out + err
        return code
    compiled, out, err = run(capsys, "compile", str(spec), "-o", str(spec_dir / "never-written"), "--check")
    assert compiled in (1, 2) and "Traceback" not in out + err, (compiled, err)  # 1: all missing; 2: refused
    assert not (spec_dir / "never-written").exists()
    return code


@FUZZ
@given(text=mutated_specs())
def test_an_example_with_values_keys_and_types_mutated_ends_in_0_1_or_2_with_located_findings(
    capsys: pytest.CaptureFixture[str], spec_dir: Path, counted: Callable[[str, int], None], text: str
) -> None:
    counted("mutated values", check_spec(capsys, spec_dir, text))


@FUZZ
@given(text=edited_texts())
def test_an_example_with_lines_deleted_duplicated_or_garbled_ends_in_0_1_or_2_with_located_findings(
    capsys: pytest.CaptureFixture[str], spec_dir: Path, counted: Callable[[str, int], None], text: str
) -> None:
    counted("edited text", check_spec(capsys, spec_dir, text))


@FUZZ
@given(text=random_yaml)
def test_random_yaml_and_random_text_end_in_1_or_2_with_located_findings(
    capsys: pytest.CaptureFixture[str], spec_dir: Path, counted: Callable[[str, int], None], text: str
) -> None:
    code = check_spec(capsys, spec_dir, text)
    assert code in (1, 2)
    counted("random YAML", code)


SUBPROCESS_INPUTS: dict[str, bytes] = {
    "invalid UTF-8": b"apiVersion: \xff\xfe\n",
    "an empty file": b"",
    "a YAML bomb (billion laughs)": b"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                                    b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                                    b"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                                    b"g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nspec: [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n",
    "10 000 nested lists": b"spec: " + b"[" * 10_000 + b"]" * 10_000 + b"\n",
    "an alias bomb inside a complex key": (b"? [&a [lol, lol, lol, lol, lol, lol, lol, lol, lol], "
                                           + b", ".join(b"&%c [" % (97 + i) + b", ".join([b"*%c" % (96 + i)] * 9)
                                                        + b"]" for i in range(1, 6)) + b"]\n: x\n"),
    "a Python object tag": b"!!python/object/apply:os.system ['echo pwned']\n",
    "two clusters in one file, to compile": EXAMPLES[0].read_bytes() + b"\n---\n" + EXAMPLES[1].read_bytes(),
}


@pytest.mark.parametrize("case", SUBPROCESS_INPUTS)
def test_hostile_files_through_the_real_cli_exit_1_or_2_without_a_traceback_or_a_hang(
    tmp_path: Path, case: str
) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_bytes(SUBPROCESS_INPUTS[case])
    argv = ["compile", str(spec), "-o", str(tmp_path / "out")] if "compile" in case else ["validate", str(spec)]
    result = subprocess.run([GPUPOLICY, *argv], capture_output=True, text=True, timeout=60)
    assert result.returncode in (1, 2), result
    assert "Traceback" not in result.stderr and "pwned" not in result.stdout
    located = LOCATED.format(file=re.escape(str(spec)))
    assert re.search(located, result.stdout + result.stderr, re.MULTILINE), result
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_spec_that_never_ends_is_refused_at_16_mib_instead_of_filling_memory(
    capsys: pytest.CaptureFixture[str], device: str
) -> None:
    code, out, _ = run(capsys, "validate", device)
    assert code == 2 and f"{device}:1:1: error[unreadable-file]: {device} is larger than 16 MiB" in out


# --- killed at random points ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, bytes]]]:
    """Two known-good trees from two specs that share no file contents: spec path and expected snapshot.

    The specs are copies, so an example edited meanwhile in the working tree cannot change the new tree.
    """
    trees = {}
    for example in (EXAMPLES[0], EXAMPLES[-1]):
        spec = tmp_path_factory.mktemp("specs") / example.name
        spec.write_bytes(example.read_bytes())
        out = tmp_path_factory.mktemp("known-good") / "out"
        assert gpupolicy(["compile", str(spec), "-o", str(out)]) == 0
        tree = snapshot(out)
        assert tree is not None
        trees[example.parent.name] = (spec, tree)
    (first, second) = trees.values()
    assert first[1] != second[1] and MARKER in first[1] and MARKER in second[1]
    return trees


def compile_in_child(spec: Path, out: Path) -> int:
    """Fork: the child compiles (the parent's imports are already warm) and exits with its status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 70
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            code = gpupolicy(["compile", str(spec), "-o", str(out)])
        finally:
            os._exit(code)
    return pid


def test_a_compile_killed_at_random_points_leaves_the_complete_old_or_the_complete_new_tree(
    tmp_path: Path, two_trees: dict[str, tuple[Path, dict[str, bytes]]], figures: Figures
) -> None:
    (spec_a, tree_a), (spec_b, tree_b) = two_trees.values()
    out = tmp_path / "out"
    assert gpupolicy(["compile", str(spec_a), "-o", str(out)]) == 0
    current, other = (spec_a, tree_a), (spec_b, tree_b)
    # How long one compile takes here, so the kills spread over all of it (parse, render, write, swap).
    started = time.monotonic()
    pid = compile_in_child(other[0], out)
    assert os.waitpid(pid, 0)[1] == 0
    duration = time.monotonic() - started
    current, other = other, current
    rng = random.Random(20261129)
    outcomes = {"old tree kept": 0, "new tree complete": 0}
    iterations = 0
    # A count, not a time window: a loaded machine makes the run longer, never the verdict different. Past 25
    # kills it goes on only until both sides of the swap were hit (each kill lands in the swap's window with a
    # probability of a few tens of percent, so 200 is never reached on a working writer).
    while iterations < 25 or (min(outcomes.values()) == 0 and iterations < 200):
        iterations += 1
        pid = compile_in_child(other[0], out)
        time.sleep(rng.uniform(0, 1.3 * duration))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        found = snapshot(out)
        assert found in (current[1], other[1]), f"a mixed or missing tree after {iterations} kills"
        if found == other[1]:
            outcomes["new tree complete"] += 1
            current, other = other, current
        else:
            outcomes["old tree kept"] += 1
    assert iterations >= 25 and min(outcomes.values()) > 0, outcomes  # both sides of the swap were hit
    assert gpupolicy(["compile", str(other[0]), "-o", str(out)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the next run removed every half-built tree
    figures.record("compile killed at random points", kills=iterations, compile_ms=round(duration * 1000),
                   mixed_or_missing=0, **outcomes)


def test_a_real_gpupolicy_process_killed_while_compiling_leaves_a_complete_tree(
    tmp_path: Path, two_trees: dict[str, tuple[Path, dict[str, bytes]]]
) -> None:
    (spec_a, tree_a), (spec_b, tree_b) = two_trees.values()
    out = tmp_path / "out"
    assert gpupolicy(["compile", str(spec_a), "-o", str(out)]) == 0
    rng = random.Random(7)
    for spec in (spec_b, spec_a, spec_b, spec_a):
        process = subprocess.Popen([GPUPOLICY, "compile", str(spec), "-o", str(out)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 0.9))  # interpreter start, imports, then the compile itself
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert snapshot(out) in (tree_a, tree_b)


# --- unreadable files, read-only outputs, symlinks --------------------------------------------------------


def without_root_override() -> list[str]:
    """A prefix that runs a command without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so that file modes
    apply even to root (setpriv drops them from the bounding set, and exec then from the process)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv(1): file modes cannot be made to apply")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"]


def test_an_unreadable_spec_is_a_located_exit_2_for_real_file_permissions(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_bytes(EXAMPLES[0].read_bytes())
    spec.chmod(0)
    result = subprocess.run([*without_root_override(), GPUPOLICY, "validate", str(spec)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"{spec}:1:1: error[unreadable-file]: {spec} cannot be read (permission denied)" in result.stdout


def test_a_read_only_parent_directory_is_an_exit_2_naming_it_for_real_file_permissions(tmp_path: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    result = subprocess.run([*without_root_override(), GPUPOLICY, "compile", str(EXAMPLES[0]), "-o",
                             str(parent / "out")], capture_output=True, text=True, timeout=60)
    parent.chmod(0o755)
    assert result.returncode == 2
    assert f"cannot write {parent / 'out'}: permission denied ({parent})" in result.stderr
    assert list(parent.iterdir()) == []


@pytest.fixture
def read_only_mount(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs mounted read-only: the kernel's own EROFS (needs CAP_SYS_ADMIN, so root)."""
    mountpoint = tmp_path / "ro-fs"
    mountpoint.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mountpoint)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)


def test_a_read_only_file_system_is_reported_as_such_not_as_permission_denied(
    read_only_mount: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "compile", str(EXAMPLES[0]), "-o", str(read_only_mount / "out"))
    assert code == 2
    assert f"cannot write {read_only_mount / 'out'}: the file system is read-only ({read_only_mount})" in err


@pytest.mark.parametrize(
    ("failing", "code", "expected"),
    [
        ("mkdir", errno.EACCES, "permission denied"),
        ("mkdir", errno.EROFS, "the file system is read-only"),
        ("rename", errno.EROFS, "the file system is read-only"),
        ("rename", errno.EACCES, "permission denied"),
        ("write", errno.ENOSPC, "No space left on device"),
        ("write", errno.EDQUOT, "Disk quota exceeded"),
        ("write", errno.EIO, "Input/output error"),
        ("open", errno.EMFILE, "Too many open files"),
        ("open", errno.EIO, "Input/output error"),
    ],
)
def test_an_os_error_at_any_step_of_the_write_is_a_clear_exit_2_and_the_old_tree_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    two_trees: dict[str, tuple[Path, dict[str, bytes]]], failing: str, code: int, expected: str,
) -> None:
    (spec_a, tree_a), (spec_b, _) = two_trees.values()
    out = tmp_path / "out"
    assert gpupolicy(["compile", str(spec_a), "-o", str(out)]) == 0

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OSError(code, os.strerror(code), str(args[0]) if args else None)

    if failing == "mkdir":
        monkeypatch.setattr(writer.Path, "mkdir", fail)
        monkeypatch.setattr(writer.os, "mkdir", fail)  # the staging tree's directories
    elif failing == "open":  # creating a file of the staging tree (reading the old tree's marker still works)
        real_open = os.open

        def create_fails(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & os.O_CREAT:
                fail(path)
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(writer.os, "open", create_fails)
    else:  # os.write: each file of the staging tree is written through its own descriptor
        monkeypatch.setattr(writer.os, failing, fail)
        if failing == "rename":
            monkeypatch.setattr(writer, "_exchange", lambda a, b: False)  # the two-rename path
    result, _, err = run(capsys, "compile", str(spec_b), "-o", str(out))
    monkeypatch.undo()
    assert result == 2 and err.startswith(f"gpupolicy compile: error: cannot write {out}: ") and expected in err, err
    assert snapshot(out) == tree_a
    assert "Traceback" not in err


SYMLINK_CASES: dict[str, tuple[Callable[[Path], list[str]], int, str]] = {
    "-o is a symlink to a directory": (
        lambda d: (d.joinpath("real").mkdir(), d.joinpath("out").symlink_to(d / "real"),
                   ["compile", str(EXAMPLES[0]), "-o", str(d / "out")])[-1],
        2, "is a symlink; gpupolicy replaces its output directory as a whole"),
    "the spec is a dangling symlink": (
        lambda d: (d.joinpath("cluster.yaml").symlink_to(d / "gone.yaml"), ["validate", str(d / "cluster.yaml")])[-1],
        2, "cluster.yaml does not exist"),
    "the spec is a symlink loop": (
        lambda d: (d.joinpath("a.yaml").symlink_to(d / "b.yaml"), d.joinpath("b.yaml").symlink_to(d / "a.yaml"),
                   ["validate", str(d / "a.yaml")])[-1],
        2, "Too many levels of symbolic links"),
    "the spec is a directory": (lambda d: ["validate", str(d)], 2, "is a directory"),
    "-o is a regular file": (
        lambda d: (d.joinpath("out").write_text("x"), ["compile", str(EXAMPLES[0]), "-o", str(d / "out")])[-1],
        2, "exists and is not a directory"),
    "a symlink planted inside a previous output": (
        lambda d: (gpupolicy(["compile", str(EXAMPLES[0]), "-o", str(d / "out")]),
                   d.joinpath("out", "planted.yaml").symlink_to("/etc/passwd"),
                   ["compile", str(EXAMPLES[-1]), "-o", str(d / "out")])[-1],
        2, "is a symlink, which gpupolicy never writes"),
    "-o inside a symlinked parent directory": (
        lambda d: (d.joinpath("real").mkdir(), d.joinpath("link").symlink_to(d / "real"),
                   ["compile", str(EXAMPLES[0]), "-o", str(d / "link" / "out")])[-1],
        0, "wrote"),
    "a symlinked spec": (
        lambda d: (d.joinpath("cluster.yaml").symlink_to(EXAMPLES[0]), ["validate", str(d / "cluster.yaml")])[-1],
        0, "0 error(s)"),
}


@pytest.mark.parametrize("case", SYMLINK_CASES)
def test_symlinked_and_misplaced_paths_get_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    prepare, expected_code, expected = SYMLINK_CASES[case]
    argv = prepare(tmp_path)
    code, out, err = run(capsys, *argv)
    assert (code, "Traceback" in err) == (expected_code, False), err
    assert expected in out + err
    if case == "a symlink planted inside a previous output":
        assert Path("/etc/passwd").read_text() and (tmp_path / "out" / "planted.yaml").is_symlink()


# --- output directories that are not ours ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["/", "home", "fifo"])
@pytest.mark.parametrize("check", [False, True], ids=["write", "check"])
def test_a_foreign_output_directory_is_refused_at_once_through_the_real_cli(
    tmp_path: Path, where: str, check: bool
) -> None:
    if where == "/":
        out = Path("/")
    else:
        out = tmp_path / "dir"
        (out / ".cache" / "deep").mkdir(parents=True)
        (out / ".cache" / "deep" / "blob").write_bytes(os.urandom(1 << 20))
        if where == "fifo":
            os.mkfifo(out / "pipe")  # reading it would block for ever
    result = subprocess.run([GPUPOLICY, "compile", str(EXAMPLES[0]), "-o", str(out), *(["--check"] if check else [])],
                            capture_output=True, text=True, timeout=60)  # a walk of / or a FIFO read would not end
    assert result.returncode == 2, result
    assert "is not empty and has no .gpupolicy file, so it is not a gpupolicy output" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    if where != "/":
        assert sorted(p.name for p in out.iterdir()) == ([".cache", "pipe"] if where == "fifo" else [".cache"])


def test_a_fifo_planted_inside_a_previous_output_is_refused_not_waited_on(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert gpupolicy(["compile", str(EXAMPLES[0]), "-o", str(out)]) == 0
    os.mkfifo(out / "device-plugin" / "pipe")
    for extra in ([], ["--check"]):
        result = subprocess.run([GPUPOLICY, "compile", str(EXAMPLES[0]), "-o", str(out), *extra],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result
        assert "pipe is a FIFO, which gpupolicy never writes" in result.stderr


# --- alias bombs inside complex keys, through every command that reads YAML ---------------------------------

BOMB_KEY = SUBPROCESS_INPUTS["an alias bomb inside a complex key"]
#: Runs a command as the only child of a fresh interpreter and prints the child's peak RSS in KiB.
PEAK_RSS = ("import resource, subprocess, sys\n"
            "done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=60)\n"
            "sys.stdout.write(done.stdout + done.stderr)\n"
            "print(f'\\nexit={done.returncode} peak_kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}')\n")


def bomb_case(tmp_path: Path, command: str) -> tuple[list[str], Path]:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_bytes(BOMB_KEY)
    if command == "validate":
        return ["validate", str(bomb)], bomb
    if command == "admit":
        return ["admit", "-p", str(EXAMPLES[0]), str(bomb)], bomb
    suite = tmp_path / "suite.yaml"
    if command == "test (suite)":
        suite.write_bytes(BOMB_KEY)
        return ["test", str(suite)], suite
    shutil.copy(EXAMPLES[0], tmp_path / "cluster.yaml")
    suite.write_text("apiVersion: gpupolicy.dev/v1alpha1\nkind: AdmissionTestSuite\npolicy: cluster.yaml\n"
                     "cases:\n- name: bomb\n  file: bomb.yaml\n  expect: {allowed: true}\n")
    return ["test", str(suite)], bomb


@pytest.mark.parametrize("command", ["validate", "admit", "test (suite)", "test (case file)"])
def test_an_alias_bomb_in_a_complex_key_is_a_located_error_in_bounded_time_and_memory(
    tmp_path: Path, command: str, figures: Figures
) -> None:
    argv, where = bomb_case(tmp_path, command)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", PEAK_RSS, GPUPOLICY, *argv], capture_output=True, text=True,
                            timeout=120)
    seconds = time.monotonic() - started
    output, _, tail = result.stdout.rstrip("\n").rpartition("\n")
    exit_code, peak = (int(part.split("=")[1]) for part in tail.split())
    assert exit_code in (1, 2), result.stdout
    assert "Traceback" not in output and len(output) < 4000  # the 225-byte file once printed 72 MB
    assert re.search(rf"{re.escape(str(where))}:1:3: error\[yaml-syntax\]: a mapping key is a list or a mapping",
                     output), output
    assert peak < 300 * 1024, f"{peak} KiB"  # it once took 1.7 GB
    figures.record(f"complex-key alias bomb, {command}", seconds=round(seconds, 2), peak_mib=peak // 1024)
