"""Recorded cluster objects (`kubectl get -A -o yaml` or `-o json` output) read fast, for `cluster audit` and
`diff --workloads`: a whole cluster's dump is one List of millions of YAML nodes, past what the located spec reader
(policy.spec.source, which keeps every position) is meant for, and nothing here needs a position.

libyaml's loader builds the objects; YAML anchors and aliases are refused (kubectl never writes them, and a few
aliases can make a small file expand into an exponential walk), found as an object met twice while the objects are
unwrapped. JSON is read by the standard library.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: A dump of 5,000 real pods with their status is some 30 MiB of YAML; this leaves room for a large cluster.
MAX_RECORDED_BYTES = 1024 * 1024 * 1024


class _Unreadable(Exception):
    def __init__(self, where: str, why: str, hint: str) -> None:
        super().__init__(why)
        self.where, self.why, self.hint = where, why, hint


def read_objects(paths: list[str]) -> list[dict[str, Any]] | None:
    """Every object of the files (List kinds unwrapped, in order), or None after printing on standard error why a
    file cannot be read (every file is tried first)."""
    found: list[dict[str, Any]] = []
    failed = False
    for path in paths:
        try:
            for document in _documents(path):
                found.extend(_unwrap(document, set(), path))
        except _Unreadable as err:
            print(f"{err.where}: error: {err.why}\n  hint: {err.hint}", file=sys.stderr)
            failed = True
    return None if failed else found


def _documents(path: str) -> list[Any]:
    import yaml

    from policy.spec import plain_data

    try:
        return plain_data.documents(_read(path))
    except json.JSONDecodeError as err:
        raise _Unreadable(f"{path}:{err.lineno}:{err.colno}", f"not valid JSON: {err.msg}",
                          "save the output of kubectl get -o json (or -o yaml) unchanged") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise _Unreadable(where, f"not valid YAML: {err.problem or err}",
                          "save the output of kubectl get -o yaml (or -o json) unchanged") from None
    except yaml.YAMLError as err:
        raise _Unreadable(path, f"not valid YAML: {err}", "save it as UTF-8 text") from None


def _read(path: str) -> str:
    if path == "-":
        text = sys.stdin.read(MAX_RECORDED_BYTES + 1)
        if len(text) > MAX_RECORDED_BYTES:
            raise _Unreadable("-", f"standard input is larger than {MAX_RECORDED_BYTES >> 20} MiB", "split it")
        return text
    try:
        with Path(path).open("rb") as stream:
            data = stream.read(MAX_RECORDED_BYTES + 1)
    except FileNotFoundError:
        raise _Unreadable(path, "does not exist", "check the path (it is relative to the current directory)") from None
    except IsADirectoryError:
        raise _Unreadable(path, "is a directory", "name the file kubectl get -A -o yaml wrote") from None
    except OSError as err:
        raise _Unreadable(path, f"cannot be read ({err.strerror or err})", "check the path and its permissions") \
            from None
    if len(data) > MAX_RECORDED_BYTES:
        raise _Unreadable(path, f"is larger than {MAX_RECORDED_BYTES >> 20} MiB", "split it, e.g. per namespace")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise _Unreadable(path, f"is not UTF-8 text ({err.reason} at byte {err.start})", "save it as UTF-8") \
            from None


def _unwrap(data: Any, seen: set[int], path: str) -> Iterator[dict[str, Any]]:
    """The objects of one document, Lists unwrapped (policy/kube/lists.py); refuses any mapping or list met twice,
    in this document or an earlier one (a YAML alias)."""
    from policy.kube.lists import list_items
    from policy.spec.plain_data import shared

    if shared(data, seen):
        raise _Unreadable(path, "holds a YAML anchor and alias (one object used twice)",
                          "kubectl never writes aliases: save its output unchanged")
    yield from list_items((data,))
