"""An RFC 6902 JSON Patch applier for the operations gpupolicy's fixes use (add, remove), written here so that
the tests apply a fix as a client would, independently of the code that wrote it."""

from __future__ import annotations

import copy
from typing import Any


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """A copy of ``doc`` with the operations applied, strictly: a missing parent or member is an error."""
    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent = doc
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]  # KeyError: the patch removes what is not there
        else:
            raise AssertionError(f"unexpected operation {op}")
    return doc
