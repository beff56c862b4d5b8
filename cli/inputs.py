"""Reading user files as text, turning OS and encoding failures into located diagnostics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from policy.spec.diagnostics import Diagnostic, Span

if TYPE_CHECKING:
    from policy.resolved.resolve import ResolvedPolicy

MAX_INPUT_BYTES = 16 * 1024 * 1024  # a spec or manifest bundle larger than this is a mistake


def read_text(path: str) -> str | Diagnostic:
    """The file's text, or an ``unreadable-file`` diagnostic saying why not (``-`` reads stdin)."""
    span = Span(path, 1, 1)
    try:
        too_large = _unreadable(span, f"is larger than {MAX_INPUT_BYTES // 1024 // 1024} MiB", "split it")
        if path == "-":
            import sys

            text = sys.stdin.read(MAX_INPUT_BYTES + 1)  # `yes | gpupolicy validate -` must not fill memory
            return too_large if len(text) > MAX_INPUT_BYTES else text
        file = Path(path)
        if file.is_dir():
            return _unreadable(span, "is a directory", "name a YAML file inside it")
        if file.stat().st_size > MAX_INPUT_BYTES:
            return too_large
        # Read at most one byte past the limit: a device or a pipe (/dev/zero, /dev/urandom) has no size
        # to check first, and reading it whole never ends.
        with file.open("rb") as stream:
            data = stream.read(MAX_INPUT_BYTES + 1)
        return too_large if len(data) > MAX_INPUT_BYTES else data.decode("utf-8-sig")
    except FileNotFoundError:
        return _unreadable(span, "does not exist", "check the path (it is relative to the current directory)")
    except PermissionError:
        return _unreadable(span, "cannot be read (permission denied)", "check the file's permissions")
    except UnicodeDecodeError as err:
        return _unreadable(span, f"is not UTF-8 text ({err.reason} at byte {err.start})", "save it as UTF-8")
    except OSError as err:
        return _unreadable(span, f"cannot be read ({err.strerror})", "check the path")


def _unreadable(span: Span, why: str, hint: str) -> Diagnostic:
    return Diagnostic("unreadable-file", f"{span.file} {why}", (), hint, span=span)


def load_spec(path: str, *, text: str | None = None) -> tuple[ResolvedPolicy | None, tuple[Diagnostic, ...]]:
    """The checked policy in a spec file, resolved (None unless it has no error), and every finding, located.

    Each command decides what the findings mean for it: the spec is the subject of validate, compile and
    explain, but an input of admit, test and cluster verify.  ``text``: the file's text when already read (stdin
    can be read only once)."""
    from policy.load import load_policy

    if text is None:
        text = read_text(path)
    if isinstance(text, Diagnostic):
        return None, (text,)
    result = load_policy(text, filename=path)
    return (result.resolved if result.ok else None), result.diagnostics
