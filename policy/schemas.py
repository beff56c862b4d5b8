"""JSON Schemas generated from the models, for editors, CI and the admission-policy document."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from policy.admission.engine import AdmissionTestSuite
from policy.plan.inventory import InventoryFile
from policy.resolved.offers import AdmissionPolicy
from policy.spec.model import ClusterGPUPolicy

SCHEMA_BASE = "https://gpupolicy.dev/schemas/"
GENERATED: dict[str, tuple[type[BaseModel], str]] = {
    "cluster-policy.schema.json": (ClusterGPUPolicy, "A cluster's GPU-sharing policy (gpupolicy.dev/v1alpha1)."),
    "admission-policy.schema.json": (AdmissionPolicy, "The admission policy compiled from a ClusterGPUPolicy."),
    "admission-test-suite.schema.json": (AdmissionTestSuite, "Table-driven admission tests (gpupolicy test)."),
    "workload-inventory.schema.json": (InventoryFile, "Workloads to plan GPU sharing for (gpupolicy plan)."),
}


def schema_for(model: type[BaseModel], name: str, description: str) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_BASE + name,
        **schema,
        "description": description,
    }


def render_schemas() -> dict[str, str]:
    """File name -> schema text (sorted keys, LF, final newline): the committed schemas/ files."""
    return {
        name: json.dumps(schema_for(model, name, description), indent=2, sort_keys=True) + "\n"
        for name, (model, description) in GENERATED.items()
    }
