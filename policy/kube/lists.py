"""The objects of `kubectl get` output: a List (``kind: List``, or a typed list such as ``PodList``, whose items may
omit their kind, as ``kubectl get --raw /api/v1/pods`` writes them) unwrapped into its items, each with its kind."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def list_items(documents: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Every object of the documents, in order: a List's items (a typed list's kind given to those without one),
    any other mapping as it is; whatever is not a mapping is left out."""
    for document in documents:
        if not isinstance(document, dict):
            continue
        kind, items = document.get("kind"), document.get("items")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            item_kind = kind.removesuffix("List") or None
            for item in items:
                if isinstance(item, dict):
                    yield item if "kind" in item or item_kind is None else {**item, "kind": item_kind}
        else:
            yield document
