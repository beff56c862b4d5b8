"""The spec checks a GPU expert would make on a structurally valid policy, one module per concern.

``CHECKS`` lists them in the order their findings are reported; ``run`` runs every one on a policy resolved once.
``NOTES`` are no findings but facts a reviewer of the spec reads (infos `validate` prints and no other command does,
since they hold for every spec of their kind); ``notes`` runs them.
"""

from __future__ import annotations

from policy.checks.classes import (
    check_gpu_models,
    check_mutable_selector_labels,
    check_overlapping_classes,
    check_reserved_names,
    check_unique_names,
)
from policy.checks.common import Check
from policy.checks.dra import DRA_CHECKS
from policy.checks.sharing import check_mig, check_mps, check_replicas
from policy.checks.tenancy import check_tenancy, tenant_label_keys
from policy.checks.tenants import check_tenants
from policy.checks.versions import (
    check_driver,
    check_mig_plugin_release,
    check_monitoring,
    check_mps_flags,
    check_operator_release,
    check_operator_settings,
    check_plugin_version,
    check_standalone_components,
)
from policy.checks.vgpu import HAMI_CHECKS
from policy.resolved.resolve import ResolvedPolicy, resolve
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import ClusterGPUPolicy

#: Codes whose span is the offending key rather than its value.
KEY_LOCATED = frozenset({"unknown-mig-profile", "mig-time-slicing-unknown-profile", "shared-product-selector",
                         "mig-profile-needs-plugin-release", "mig-profiles-share-resource", "mig-resource-renamed",
                         "tenant-label-unguarded", "tenant-label-keys", "tenancy-gitops-unnamed"})


CHECKS: tuple[Check, ...] = (
    check_operator_release,
    check_monitoring,
    check_driver,
    check_reserved_names,
    check_operator_settings,
    check_mps_flags,
    check_unique_names,
    check_gpu_models,
    check_overlapping_classes,
    check_mutable_selector_labels,
    check_replicas,
    check_mig,
    check_mps,
    check_plugin_version,
    check_standalone_components,
    check_mig_plugin_release,
    check_tenants,
    check_tenancy,
    *HAMI_CHECKS,
    *DRA_CHECKS,
)

NOTES: tuple[Check, ...] = (tenant_label_keys,)


def run(policy: ClusterGPUPolicy | ResolvedPolicy) -> tuple[Diagnostic, ...]:
    """Every finding of every check (checks never stop at the first), on a policy resolved once."""
    resolved = policy if isinstance(policy, ResolvedPolicy) else resolve(policy)
    return tuple(d for check in CHECKS for d in check(resolved))


def notes(policy: ClusterGPUPolicy | ResolvedPolicy) -> tuple[Diagnostic, ...]:
    """Every note on a policy (infos, never findings: they change no exit code and no report)."""
    resolved = policy if isinstance(policy, ResolvedPolicy) else resolve(policy)
    return tuple(d for note in NOTES for d in note(resolved))
