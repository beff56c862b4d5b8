"""gpupolicy's pure core: the spec, the GPU catalog, MIG placement, sizing, checks and the admission rules.

Nothing in this package performs I/O beyond reading its own catalog; callers pass text in and get
values (diagnostics, policies, decisions) out. Names are resolved lazily so that importing one
submodule (say ``policy.spec.diagnostics``) does not pay for pydantic models it does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policy.load import LoadResult as LoadResult
    from policy.load import load_policies as load_policies
    from policy.load import load_policy as load_policy
    from policy.load import load_policy_or_raise as load_policy_or_raise
    from policy.resolved.offers import AdmissionPolicy as AdmissionPolicy
    from policy.resolved.offers import build_admission_policy as build_admission_policy
    from policy.spec.diagnostics import Diagnostic as Diagnostic
    from policy.spec.diagnostics import PolicyError as PolicyError
    from policy.spec.diagnostics import Span as Span
    from policy.spec.model import ClusterGPUPolicy as ClusterGPUPolicy

_LAZY = {
    "Diagnostic": "policy.spec.diagnostics",
    "PolicyError": "policy.spec.diagnostics",
    "Span": "policy.spec.diagnostics",
    "LoadResult": "policy.load",
    "load_policies": "policy.load",
    "load_policy": "policy.load",
    "load_policy_or_raise": "policy.load",
    "ClusterGPUPolicy": "policy.spec.model",
    "AdmissionPolicy": "policy.resolved.offers",
    "build_admission_policy": "policy.resolved.offers",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'policy' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
