"""The only code that touches the output directory: an atomic tree swap, and the `--check` comparison."""

from __future__ import annotations

import ctypes
import difflib
import errno
import functools
import itertools
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from compiler.tree import MARKER, recorded_paths  # the ownership file every compiled tree carries

# A file of a compiled tree is a few KiB; one far larger was put there by hand, and is compared unread.
MAX_READ_BYTES = 16 * 1024 * 1024

_STAGING, _RETIRED = "new", "old"


class WriteError(Exception):
    """The output directory cannot be written or read as asked; the message says why, for a person."""


@dataclass(frozen=True)
class Drift:
    """How a directory differs from the tree that should be there (paths relative, sorted)."""

    missing: tuple[str, ...]
    changed: tuple[str, ...]
    extra: tuple[str, ...]
    """Files gpupolicy wrote and no longer produces: a write deletes them."""
    foreign: tuple[str, ...] = ()
    """Files gpupolicy did not write (added by hand): kept, and not drift, unless pruned."""
    on_disk: Mapping[str, bytes] = field(default_factory=dict, repr=False, compare=False)
    wanted: Mapping[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def diff(self) -> str:
        """A unified diff from what is on disk (a/) to what the compiler produces (b/).

        Worked out when asked (`compile --check`): a plain compile of a new 1,000-class tree would
        otherwise diff 2,269 files against nothing, only to write them.
        """
        return "".join(_unified(path, self.on_disk.get(path), self.wanted.get(path))
                       for path in sorted({*self.missing, *self.extra, *self.changed}))

    @property
    def clean(self) -> bool:
        return not (self.missing or self.changed or self.extra)

    def summary(self) -> str:
        return f"{len(self.changed)} changed, {len(self.missing)} missing, {len(self.extra)} extra file(s)"


# ----------------------------------------------------------------------- what is there


@dataclass(frozen=True)
class _Inventory:
    """An output directory as found: its regular files, its empty directories, and what its marker records."""

    exists: bool
    files: tuple[str, ...] = ()
    empty_dirs: tuple[str, ...] = ()
    recorded: frozenset[str] | None = None
    """The files the marker says gpupolicy wrote; None without a marker or with one that lists none."""

    def foreign(self, tree: Mapping[str, bytes]) -> tuple[str, ...]:
        """Files gpupolicy did not write: neither recorded in the marker nor produced now."""
        ours = self.recorded or frozenset()
        return tuple(p for p in self.files if p != MARKER and p not in ours and p not in tree)


def _inventory(out_dir: Path) -> _Inventory:
    """What is at out_dir, refusing (WriteError) anything gpupolicy must not read or replace.

    Ownership is decided from the marker alone, before anything else is read: a foreign directory (a home,
    a repository, /) is refused at once. Inside an output, nothing is followed or opened but regular files
    and directories: a symlink, FIFO, socket or device there was put by hand and is refused, never read.
    """
    try:
        info = os.lstat(out_dir)
    except (FileNotFoundError, NotADirectoryError):  # nothing there yet (an ancestor may be a file: see the write)
        return _Inventory(False)
    if stat.S_ISLNK(info.st_mode):
        raise WriteError(f"{out_dir} is a symlink; gpupolicy replaces its output directory as a whole, so "
                         f"point -o at the real directory ({os.path.realpath(out_dir)})")
    if not stat.S_ISDIR(info.st_mode):
        raise WriteError(f"{out_dir} exists and is not a directory; remove it or choose another -o")
    marker = _marker(out_dir)
    if marker is None:
        with os.scandir(out_dir) as entries:
            if next(entries, None) is not None:
                raise WriteError(f"{out_dir} is not empty and has no {MARKER} file, so it is not a gpupolicy "
                                 "output; refusing to read or replace it (choose a new or empty directory)")
        return _Inventory(True)
    files: list[str] = []
    empty: list[str] = []
    pending = [out_dir]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as scan:
            entries = sorted(scan, key=lambda e: e.name)
        if not entries and directory != out_dir:
            empty.append(Path(directory).relative_to(out_dir).as_posix())
        for entry in entries:
            path = Path(entry.path)
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                pending.append(path)
            elif stat.S_ISREG(mode):
                files.append(path.relative_to(out_dir).as_posix())
            else:
                raise WriteError(f"{path} is {_kind(mode)}, which gpupolicy never writes: the output was changed "
                                 "by hand; move it away and compile again")
    return _Inventory(True, tuple(sorted(files)), tuple(sorted(empty)), recorded_paths(marker))


def _marker(out_dir: Path) -> str | None:
    """The marker's text, or None when out_dir has no marker that is a regular file."""
    path = out_dir / MARKER
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
    except FileNotFoundError:
        return None
    return _read_bounded(path).decode("utf-8", errors="replace")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device file" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


def _read_bounded(path: Path) -> bytes:
    # O_NOFOLLOW | O_NONBLOCK: should the file have been swapped for a symlink or a FIFO since it was listed,
    # opening it fails or returns at once instead of following the link or waiting for a writer.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            raise WriteError(f"{path} is not a regular file, which gpupolicy never writes; move it away")
        data = stream.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        return f"(larger than {MAX_READ_BYTES // 1024 // 1024} MiB: not read, and never a file gpupolicy wrote)\n"\
            .encode()
    return data


# ----------------------------------------------------------------------- check


def check_tree(tree: Mapping[str, bytes], out_dir: Path) -> Drift:
    """Compare `tree` with `out_dir` without writing anything; a missing directory means every file is missing.

    Files gpupolicy did not write (not recorded in the marker, not produced now) are listed as `foreign` and
    never read. Raises WriteError when `out_dir` is not a gpupolicy output or cannot be read.
    """
    try:
        found = _inventory(out_dir)
        foreign = found.foreign(tree)
        skip = set(foreign)
        on_disk = {path: _read_bounded(out_dir / path) for path in found.files if path not in skip}
    except OSError as err:
        raise WriteError(f"cannot read {out_dir}: {err.strerror or err}") from err
    missing = tuple(sorted(set(tree) - set(on_disk)))
    extra = tuple(sorted(set(on_disk) - set(tree)))
    changed = tuple(sorted(p for p in set(tree) & set(on_disk) if tree[p] != on_disk[p]))
    return Drift(missing, changed, extra, foreign, on_disk, tree)


def _unified(path: str, old: bytes | None, new: bytes | None) -> str:
    before = _lines(old)
    after = _lines(new)
    lines = difflib.unified_diff(before, after, "/dev/null" if old is None else f"a/{path}",
                                 "/dev/null" if new is None else f"b/{path}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _lines(data: bytes | None) -> list[str]:
    return [] if data is None else data.decode("utf-8", errors="replace").splitlines(keepends=True)


# ----------------------------------------------------------------------- write


def write_tree(tree: Mapping[str, bytes], out_dir: Path, *, prune_unknown: bool = False) -> tuple[str, ...]:
    """Replace `out_dir` with `tree`, atomically; return the files gpupolicy did not write that it kept (or,
    with `prune_unknown`, deleted).

    The new tree is built completely in a sibling directory, then swapped in by rename; until the swap the
    old tree is untouched, and a failure or interrupt at any point leaves either the old or the new tree,
    never a mix. Files and empty directories added to the old tree by hand (not listed in its marker) are
    carried into the new one, unless `prune_unknown`. Refuses (WriteError) a path that is a symlink, a file,
    or a non-empty directory that is not a previous gpupolicy output (no marker file), so a typo in -o never
    deletes anyone's files.
    """
    if MARKER not in tree:
        raise ValueError(f"a tree without its {MARKER} file could never be replaced again")
    out_dir = Path(os.path.abspath(out_dir))
    parent = out_dir.parent
    try:
        found = _inventory(out_dir)
        foreign = found.foreign(tree)
        _ensure_parent(parent)
        _recover(parent, out_dir.name)
        _check_tree_writable(out_dir, found)
        staging = _new_sibling(parent, out_dir.name, _STAGING)
        try:
            _fill(staging, tree)
            if not prune_unknown:
                _carry(out_dir, staging, foreign, found.empty_dirs, tree)
            retired = _swap(staging, out_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)  # the half-built tree never becomes the output
            raise
        if retired is not None:
            shutil.rmtree(retired)
        return foreign
    except PermissionError as err:
        raise WriteError(f"cannot write {out_dir}: permission denied ({err.filename or parent}); "
                         "check the directory's permissions or choose another -o") from err
    except OSError as err:
        if err.errno == errno.EROFS:
            raise WriteError(f"cannot write {out_dir}: the file system is read-only "
                             f"({err.filename or parent}); choose another -o") from err
        raise WriteError(f"cannot write {out_dir}: {err.strerror or err} ({err.filename or out_dir})") from err


def _ensure_parent(parent: Path) -> None:
    for ancestor in (parent, *parent.parents):
        if ancestor.exists() or ancestor.is_symlink():
            if not ancestor.is_dir():
                raise WriteError(f"cannot create the output directory: {ancestor} is a file, not a directory")
            break
    parent.mkdir(parents=True, exist_ok=True)
    _check_writable(parent)


def _check_tree_writable(out_dir: Path, found: _Inventory) -> None:
    """Every directory of the old tree must be writable, or its retired copy could not be deleted."""
    if not found.exists:
        return
    directories = {out_dir, *(out_dir / p for p in found.empty_dirs)}
    directories.update(out_dir / parent for p in found.files for parent in PurePosixPath(p).parents)
    for directory in sorted(directories):
        _check_writable(directory)


def _carry(old: Path, new: Path, foreign: tuple[str, ...], empty_dirs: tuple[str, ...],
           tree: Mapping[str, bytes]) -> None:
    """Put the old tree's hand-added files and empty directories into the new tree: hard links where the file
    system allows them (same file system, so no copy), copies otherwise. The old tree is left as it is."""
    produced_dirs = {parent.as_posix() for path in tree for parent in PurePosixPath(path).parents}
    for relative in (*foreign, *empty_dirs):
        in_the_way = relative in tree or (relative in produced_dirs and relative not in empty_dirs)
        if in_the_way or any(parent.as_posix() in tree for parent in PurePosixPath(relative).parents):
            raise WriteError(f"{old / relative} was added by hand where gpupolicy now writes; move it away, or "
                             "pass --prune-unknown to delete it")
    for relative in empty_dirs:
        (new / relative).mkdir(parents=True, exist_ok=True)  # an empty directory gpupolicy now fills stays
    for relative in foreign:
        target = new / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(old / relative, target, follow_symlinks=False)
        except OSError:
            shutil.copy2(old / relative, target, follow_symlinks=False)


def _check_writable(directory: Path) -> None:
    """Raise EROFS for a read-only file system (access(2) reports it as a plain refusal) or EACCES."""
    if os.access(directory, os.W_OK | os.X_OK):
        return
    if os.statvfs(directory).f_flag & os.ST_RDONLY:
        raise OSError(errno.EROFS, "read-only file system", str(directory))
    raise PermissionError(errno.EACCES, "permission denied", str(directory))


def _new_sibling(parent: Path, name: str, kind: str) -> Path:
    """A fresh hidden directory next to the output (same file system, so rename is atomic)."""
    for n in itertools.count():
        candidate = parent / f".{name}.gpupolicy-{kind}-{os.getpid()}-{n}"
        try:
            candidate.mkdir()  # honours the umask, unlike mkdtemp's 0700
            return candidate
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def _fill(root: Path, tree: Mapping[str, bytes]) -> None:
    # Each directory made once, parents first, and each file written through its own descriptor: Path.mkdir
    # per file and open() (which stats, seeks and asks whether the file is a terminal) cost a 1,000-class
    # compile a third of a second in system calls (docs/performance.md).
    directories = {parent for relative in tree for parent in PurePosixPath(relative).parents}
    for directory in sorted(directories - {PurePosixPath(".")}, key=lambda d: len(d.parts)):
        os.mkdir(root / directory)
    written = []
    for relative, data in tree.items():
        path = root / relative
        _write_file(path, data)
        written.append(path)
    _make_durable(root, written)


_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def _write_file(path: Path, data: bytes) -> None:
    fd = os.open(path, _CREATE_FLAGS, 0o666)  # the umask applies, as with open(path, "xb")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _make_durable(root: Path, paths: list[Path]) -> None:
    """Flush every written file to disk before the swap makes the tree the output.

    One syncfs(2) on the staging directory's file system where Linux offers it: one journal commit
    instead of one fsync per file, 0.1 s instead of 0.7 s for a 1,000-class tree of 2,269 files
    (docs/performance.md). Elsewhere, or if it fails, each file is fsynced as before.
    """
    syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if syncfs is not None:
        fd = os.open(root, os.O_RDONLY)
        try:
            if syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _swap(staging: Path, out_dir: Path) -> Path | None:
    """Put staging at out_dir; return where the old tree now is (to delete), or None if there was none."""
    if not out_dir.exists():
        os.rename(staging, out_dir)
        return None
    if _exchange(staging, out_dir):
        return staging
    # No atomic exchange here: two renames, undone if the second fails.  A kill between them leaves the
    # old tree in a retired sibling, which the next run's _recover puts back.
    retired = _new_sibling(out_dir.parent, out_dir.name, _RETIRED)
    os.rmdir(retired)
    os.rename(out_dir, retired)
    try:
        os.rename(staging, out_dir)
    except BaseException:
        os.rename(retired, out_dir)
        raise
    return retired


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with Linux renameat2(RENAME_EXCHANGE); False where it is not available."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2  # <fcntl.h>, <linux/fs.h>
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):  # kernel or file system without exchange
        return False
    raise OSError(code, os.strerror(code), str(b))


def _recover(parent: Path, name: str) -> None:
    """Clean up after a run that was killed: drop half-built trees, and put back an old tree that a kill
    between the two fallback renames left retired."""
    out_dir = parent / name
    for leftover in sorted(parent.glob(f".{name}.gpupolicy-{_STAGING}-*")):
        shutil.rmtree(leftover)
    retired = sorted(parent.glob(f".{name}.gpupolicy-{_RETIRED}-*"))
    if retired and not out_dir.exists():
        os.rename(retired.pop(), out_dir)
    for leftover in retired:
        shutil.rmtree(leftover)
