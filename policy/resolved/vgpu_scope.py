"""Which namespaces HAMi's webhook must reach, so vGPU pods get HAMi and every other GPU pod keeps NVIDIA's plugin.

HAMi's mutating webhook sends every pod asking for its count resource to hami-scheduler, which places pods only on
nodes HAMi's device plugin registered (pkg/device/nvidia/device.go mutateContainerResource; pkg/scheduler/
webhook.go:104-108; scheduler.go:744-755). With HAMi's default count name, nvidia.com/gpu, that is also what the
NVIDIA device plugin advertises. In a fleet that mixes vgpu classes with NVIDIA-plugin classes offering the same
name, a pod's namespace therefore decides which of the two it can use:

* HAMi's webhook must match every namespace whose pods may use vgpu classes (otherwise their pods stay with
  default-scheduler, which may bind them to a HAMi node where Allocate fails, or leaves gpumem pods Pending);
* it must match no namespace whose pods may use an NVIDIA-plugin class for the same resource (their pods would be
  rerouted to hami-scheduler and stay Pending);
* a tenant that may use both is a contradiction: rename HAMi's count resource, or split the tenant.

The webhook takes one namespaceSelector (charts/hami templates/scheduler/webhook.yaml), a conjunction of
requirements, so the vGPU namespaces must be expressible as one: the negation of every tenant that may not use
vgpu when the default rules allow vgpu, otherwise the union of the tenants that may (one requirement per
tenant on one shared key). When no NVIDIA-plugin class offers HAMi's count resource there is nothing to keep
apart and HAMi's webhook keeps its own default: every namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

from policy.kube import selectors
from policy.resolved.resolve import ResolvedPolicy
from policy.spec.model import SharingMode, Tenant

#: Matches no namespace: every namespace carries its name label (Kubernetes 1.21+).
NO_NAMESPACE = selectors.Requirement(selectors.NAMESPACE_NAME_LABEL, "DoesNotExist")


@dataclass(frozen=True)
class Collision:
    """A tenant (or the default rules) that may use vgpu classes and NVIDIA-plugin classes for one resource."""

    tenant: int | None
    """Index in spec.tenants; None for namespaces outside every tenant."""
    who: str
    resource: str
    vgpu_classes: tuple[str, ...]
    plugin_classes: tuple[tuple[str, str], ...]
    """(class, mode) of the NVIDIA-plugin classes offering the same resource."""


@dataclass(frozen=True)
class Scope:
    """Where HAMi's webhook must act, worked out once per policy."""

    scoped: bool
    """False: every namespace (HAMi's default), because no NVIDIA-plugin class offers HAMi's count resource."""
    requirements: tuple[selectors.Requirement, ...] = ()
    """The namespaceSelector when scoped (matchExpressions, ANDed)."""
    excluded_namespaces: tuple[str, ...] = ()
    """Namespaces HAMi's webhook must never match (its chart's whitelistNamespaces)."""
    collisions: tuple[Collision, ...] = ()
    inexpressible: tuple[str, ...] = ()
    """Why no single namespaceSelector selects exactly the vGPU namespaces (empty when one does)."""

    def covers(self, modes: frozenset[str] | set[str]) -> bool:
        """Whether HAMi's webhook reaches a namespace whose pods may use these modes (as gpupolicy routes it)."""
        return not self.scoped or "vgpu" in modes


def hami_scope(resolved: ResolvedPolicy) -> Scope:
    """The namespaces HAMi's webhook must match, and what in the policy contradicts them."""
    spec = resolved.spec
    excluded = (spec.device_plugin.operator.namespace,) if spec.device_plugin.deploy == "gpu-operator" else ()
    count = spec.hami.resource_names.count
    if not resolved.vgpu_classes or not any(c.offer(count) for c in resolved.plugin_classes):
        return Scope(False, excluded_namespaces=excluded)
    audiences: list[tuple[int | None, str, tuple[SharingMode, ...], tuple[str, ...]]] = [
        (t, f"tenant {tenant.name}", tenant.allow, tenant.classes) for t, tenant in enumerate(spec.tenants)]
    audiences.append((None, "namespaces outside every tenant", spec.admission.default_allow, ()))
    collisions, vgpu_users = [], set()
    for index, who, allow, classes in audiences:
        vgpu, plugin = _reach(resolved, allow, classes, count)
        if vgpu:
            vgpu_users.add(index)
        if vgpu and plugin:
            collisions.append(Collision(index, who, count, vgpu, plugin))
    requirements, inexpressible = _selector(spec.tenants, vgpu_users)
    return Scope(True, requirements, excluded, tuple(collisions), inexpressible)


def _reach(resolved: ResolvedPolicy, allow: tuple[SharingMode, ...], classes: tuple[str, ...],
           resource: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The vgpu classes and the NVIDIA-plugin (class, mode) pairs offering ``resource`` that an audience reaches."""
    vgpu: dict[str, None] = {}
    plugin: dict[tuple[str, str], None] = {}
    for _, rc, offer in resolved.reachable_with(allow, classes):
        if offer.resource != resource:
            continue
        if rc.vgpu is not None:
            vgpu[rc.name] = None
        else:
            plugin[(rc.name, "+".join(offer.modes))] = None
    return tuple(vgpu), tuple(plugin)


def _selector(tenants: tuple[Tenant, ...],
              vgpu_users: set[int | None]) -> tuple[tuple[selectors.Requirement, ...], tuple[str, ...]]:
    if None in vgpu_users:
        # The default rules allow vgpu: every namespace but those of the tenants that may not use it.
        others = [t for i, t in enumerate(tenants) if i not in vgpu_users]
        negated = [(t, selectors.negate(t.namespace_selector.requirements())) for t in others]
        bad = tuple(f"tenant {t.name} may not use vgpu and selects namespaces by several requirements, which "
                    "have no one-requirement negation" for t, n in negated if n is None)
        return tuple(n for _, n in negated if n is not None), bad
    users = [t for i, t in enumerate(tenants) if i in vgpu_users]
    if not users:
        return (NO_NAMESPACE,), ()
    if len(users) == 1:
        return users[0].namespace_selector.requirements(), ()
    merged = _union([t.namespace_selector.requirements() for t in users])
    if merged is None:
        names = ", ".join(t.name for t in users[:-1]) + f" and {users[-1].name}"
        return (), (f"tenants {names} may use vgpu, and their selectors do not share one label key with In "
                    "values, so no single namespaceSelector selects all their namespaces",)
    return (merged,), ()


def _union(selections: list[tuple[selectors.Requirement, ...]]) -> selectors.Requirement | None:
    """``key In [a, b]`` for selectors that are each one ``key In [...]`` on the same key; None otherwise."""
    if not all(len(s) == 1 and s[0].operator == "In" for s in selections):
        return None
    keys = {s[0].key for s in selections}
    if len(keys) != 1:
        return None
    return selectors.Requirement(keys.pop(), "In", frozenset().union(*(s[0].values for s in selections)))
