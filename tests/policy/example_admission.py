"""The admission-policy documents of the bundled example clusters, built once per test run."""

from __future__ import annotations

import functools
from pathlib import Path

from policy.load import load_policy
from policy.resolved.offers import AdmissionPolicy, build_admission_policy

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def admission_policy(cluster: str) -> AdmissionPolicy:
    path = ROOT / "examples" / "clusters" / cluster / "cluster.yaml"
    result = load_policy(path.read_text(encoding="utf-8"), filename=str(path))
    assert result.policy is not None, result.diagnostics
    return build_admission_policy(result.policy)
