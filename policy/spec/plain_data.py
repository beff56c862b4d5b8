"""YAML or JSON text read into plain values, fast and without positions: recorded cluster dumps (`cluster audit`,
`diff --workloads`) and the pod-spec patches workload custom resources carry as strings (Argo's podSpecPatch).

The located reader (source.py) keeps every node's position for messages and caps the nodes a spec may hold; these
inputs need no position and may be far larger. JSON is tried first (what `kubectl get -o json` and most patches
are), then libyaml's safe loader where PyYAML has it. YAML anchors and aliases build one object reachable from
several places: walking such a value can cost exponentially more than its text, so callers either refuse shared
values (``shared``) or copy them out within a budget of nodes (``unshared``).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class TooLarge(ValueError):
    """Copying the shared values out would pass the node budget (an alias bomb, or simply too much)."""


def documents(text: str) -> list[Any]:
    """Every document of the text, JSON or YAML (empty documents left out). Raises json.JSONDecodeError for text
    that starts as a JSON object but is not one, and yaml.YAMLError for text that is not YAML."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError:
            if stripped.startswith("{"):
                raise
    return [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]


def shared(value: Any, seen: set[int] | None = None) -> bool:
    """Whether some mapping or list is reachable twice from ``value`` (or from what ``seen`` already holds): a
    YAML alias. Linear in the distinct values."""
    seen = set() if seen is None else seen
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict | list):
            if id(item) in seen:
                return True
            seen.add(id(item))
            stack.extend(item.values() if isinstance(item, dict) else item)
    return False


def unshared(value: Any, max_nodes: int) -> Any:
    """``value`` as a tree: every mapping and list reachable twice copied out, as the YAML meant it; raises
    TooLarge once the copy would hold more than ``max_nodes`` mappings, lists and scalars (Go's YAML parser, which
    Argo and the API server use, refuses excessive aliasing the same way)."""
    if not shared(value):
        return value
    budget = [max_nodes]

    def copy(item: Any) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise TooLarge(f"more than {max_nodes} nodes once its aliases are expanded")
        if isinstance(item, dict):
            return {k: copy(v) for k, v in item.items()}
        if isinstance(item, list):
            return [copy(v) for v in item]
        return item

    try:
        return copy(value)
    except RecursionError:  # nested deeper than the interpreter walks: no pod spec is
        raise TooLarge("nested too deeply") from None
