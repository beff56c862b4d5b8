"""What a GPU Operator release's ClusterPolicy CRD makes of an object, for the tests: the JSON Schema
policy/hardware/operator.py renders from its table of the CRD's facts, and the fields that table does not declare."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from policy.hardware import operator


def validator(release: operator.Release | None, *, patch: bool = False) -> jsonschema.Validator:
    assert release is not None
    schema = operator.crd_schema(release)
    if patch:  # server-side apply validates the merged object: a patch alone need not carry required fields
        schema = json.loads(json.dumps(schema), object_hook=lambda d: {k: v for k, v in d.items() if k != "required"})
    return jsonschema.Draft202012Validator(schema)


def undeclared(schema: dict[str, Any], obj: Any, prefix: str = "") -> list[str]:
    """Fields the schema does not declare: the API server would prune them from a structural CRD without a word,
    and the table declares only what the release's CRD has."""
    if isinstance(obj, list) and "items" in schema:
        return [f for item in obj for f in undeclared(schema["items"], item, prefix)]
    if not isinstance(obj, dict) or "properties" not in schema:
        return []
    return [f for k, v in obj.items()
            for f in ([f"{prefix}{k}"] if k not in schema["properties"]
                      else undeclared(schema["properties"][k], v, f"{prefix}{k}."))]
