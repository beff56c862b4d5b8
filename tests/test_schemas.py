"""Committed JSON Schemas are current, valid, and accept the bundled examples."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from policy.schemas import render_schemas

ROOT = Path(__file__).parents[1]
EXAMPLES = sorted((ROOT / "examples" / "clusters").glob("*/cluster.yaml"))


@pytest.mark.parametrize("name", sorted(render_schemas()))
def test_committed_schema_matches_the_models(name: str) -> None:
    committed = (ROOT / "schemas" / name).read_text()
    assert committed == render_schemas()[name], f"schemas/{name} is stale: run `gpupolicy schema --write schemas`"


@pytest.mark.parametrize("path", sorted((ROOT / "schemas").glob("*.schema.json")), ids=lambda p: p.name)
def test_every_schema_is_a_valid_draft_2020_12_schema(path: Path) -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


@pytest.mark.parametrize("spec", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_examples_validate_against_the_schema_editors_use(spec: Path) -> None:
    schema = json.loads((ROOT / "schemas" / "cluster-policy.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(spec.read_text()))
    first = spec.read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=../../../schemas/cluster-policy.schema.json"
    assert (spec.parent / first.split("=", 1)[1]).resolve() == ROOT / "schemas" / "cluster-policy.schema.json"
