"""Field paths inside a Kubernetes object (apimachinery's field.Path) and reading along them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

PathPart = str | int
Path = tuple[PathPart, ...]
"""A field path: keys and list indexes from the object's root."""


def is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    # Objects come from json.loads, so nearly every mapping is a dict: test that first, in C, before the
    # abstract-class check (a few µs per review over the ~20 checks below; docs/performance.md).
    return type(value) is dict or isinstance(value, Mapping)


def descend(obj: Any, path: Path) -> Any:
    for part in path:
        if not is_mapping(obj):
            return None
        obj = obj.get(part)
    return obj
