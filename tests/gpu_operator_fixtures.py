"""The GPU Operator ClusterPolicies of tests/fixtures/gpu-operator (see its README for what each is and its
sources), and the chart's object as a Helm upgrade with gpupolicy's values renders it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu-operator"
Obj = dict[str, Any]


def cluster_policy(name: str) -> Obj:
    found: Obj = yaml.safe_load((FIXTURES / name).read_text(encoding="utf-8"))
    return found


def helm_rendered(values: Obj) -> Obj:
    """The chart's ClusterPolicy with gpupolicy's values last: templates/clusterpolicy.yaml copies
    devicePlugin.config, mig.strategy and migManager.config into the same paths under spec (v25.3.0: 131-134,
    454-458, 570-574)."""
    obj = cluster_policy("helm-v25.3.0.yaml")
    obj["spec"]["devicePlugin"]["config"] = dict(values["devicePlugin"]["config"])
    obj["spec"]["mig"] = dict(values["mig"])
    obj["spec"]["migManager"]["config"] = dict(values["migManager"]["config"])
    return obj
