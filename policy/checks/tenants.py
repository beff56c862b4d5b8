"""Tenants: the classes they name, the modes they may use, and selectors the webhook registration can route."""

from __future__ import annotations

from collections.abc import Iterator

from policy.kube import selectors
from policy.resolved.resolve import ResolvedPolicy
from policy.spec.diagnostics import Diagnostic, did_you_mean
from policy.spec.model import ClusterGPUPolicy, Tenant


def check_tenants(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    names = {nc.name for nc in policy.spec.node_classes}
    for t, tenant in enumerate(policy.spec.tenants):
        for c, cls in enumerate(tenant.classes):
            if cls not in names:
                near = did_you_mean(cls, names)
                yield Diagnostic("tenant-unknown-class", f"tenant {tenant.name!r} names class {cls!r}, which does "
                                 "not exist", ("spec", "tenants", t, "classes", c),
                                 f"did you mean {near[0]!r}?" if near else f"classes: {', '.join(sorted(names))}")
        if set(tenant.classes) <= names and not _usable_classes(resolved, tenant):
            yield Diagnostic("tenant-mode-unavailable", f"tenant {tenant.name!r} may use {', '.join(tenant.allow)}, "
                             "but no node class it may use offers that", ("spec", "tenants", t, "allow"),
                             "allow a mode one of its classes offers (time-sliced MIG, mig+time-slicing, needs both "
                             "mig and time-slicing), or add such a class")
    yield from _tenant_overlaps(policy.spec.tenants)
    yield from _tenant_selectors_negatable(policy)
    yield from _default_modes(resolved)


def _default_modes(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """admission.defaultAllow that no class satisfies admits no GPU pod outside the tenants: tenant-mode-unavailable
    for namespaces no tenant selects. An empty defaultAllow says so on purpose and is left alone."""
    admission = resolved.spec.admission
    allowed = set(admission.default_allow)
    if not admission.enabled or not allowed or any(set(o.modes) <= allowed for c in resolved.classes for o in c.offers):
        return
    if any(not c.offers for c in resolved.classes):
        return  # a class that offers nothing is refused by its own finding (a layout its plugin cannot start with)
    offered = sorted({o.mode_name for c in resolved.classes for o in c.offers})
    yield Diagnostic("default-mode-unavailable", f"admission.defaultAllow is {', '.join(admission.default_allow)}, "
                     f"but no node class offers that (the classes offer {', '.join(offered)}), so namespaces outside "
                     "every tenant may use no GPU", ("spec", "admission", "defaultAllow"),
                     "allow a mode a class offers (time-sliced MIG, mig+time-slicing, needs both mig and "
                     "time-slicing), or write defaultAllow: [] to say that such namespaces get no GPU")


def tenant_requirements(tenant: Tenant) -> tuple[selectors.Requirement, ...]:
    return tenant.namespace_selector.requirements()


def _tenant_selectors_negatable(policy: ClusterGPUPolicy) -> Iterator[Diagnostic]:
    """The webhook registration routes namespaces no tenant selects to the default rules by negating each
    tenant's selector; only one-requirement selectors have a negation the API server can evaluate."""
    if not policy.spec.admission.enabled:
        return
    for t, tenant in enumerate(policy.spec.tenants):
        if selectors.negate(tenant_requirements(tenant)) is None:
            yield tenant_selector_too_complex(tenant, t)


def tenant_selector_too_complex(tenant: Tenant, index: int) -> Diagnostic:
    """The finding for a tenant whose selector the webhook registration cannot negate (checks and compiler)."""
    count = len(tenant_requirements(tenant))
    return Diagnostic("tenant-selector-too-complex", f"tenant {tenant.name!r} selects namespaces with {count} "
                      "requirements; the webhook can only route namespaces that no tenant selects when each "
                      "tenant selects by one label requirement", ("spec", "tenants", index, "namespaceSelector"),
                      "label the tenant's namespaces with one label (e.g. gpu-tenant: <name>) and select by it, "
                      "or use one matchExpressions entry (key In [a, b])")


def _usable_classes(resolved: ResolvedPolicy, tenant: Tenant) -> list[str]:
    """Classes the tenant may land on: named by it (if it names any) with an offer of allowed modes only."""
    return sorted({rc.name for _, rc, _ in resolved.reachable(tenant)})


def _tenant_overlaps(tenants: tuple[Tenant, ...]) -> Iterator[Diagnostic]:
    reqs = [tenant_requirements(t) for t in tenants]
    for j in range(len(tenants)):
        for i in range(j):
            if tenants[i].name != tenants[j].name and selectors.may_overlap(reqs[i], reqs[j]):
                yield Diagnostic("tenant-overlap", f"tenants {tenants[i].name!r} and {tenants[j].name!r} can select "
                                 f"the same namespace; pods there get only the sharing modes both allow",
                                 ("spec", "tenants", j, "namespaceSelector"),
                                 "make the selectors disjoint if that is not what you want", severity="warning")
