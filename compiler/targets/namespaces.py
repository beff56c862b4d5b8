"""The Namespaces the tree's objects live in, so applying the tree needs no namespace made by hand.

Every namespace a rendered object names gets a Namespace, except those every cluster has (kube-system, default, ...)
and, under deploy: gpu-operator, the operator's own, which its install creates and labels. Its Pod Security level is
the strictest its pods meet (Kubernetes "Pod Security Standards"; the levels are enforced by the namespace labels
``pod-security.kubernetes.io/<mode>``): privileged where the tree's node agents run, which mount host paths (device
plugin, MPS daemon, GPU Feature Discovery, MIG manager, HAMi's plugin); restricted for the webhook, the label
reconciler and the audit, which run as non-root with nothing from the host.

Deleting a Namespace deletes everything in it, so GitOps tools must never prune or delete one: Argo CD's
``Prune=false,Delete=false`` sync options (argo-cd docs/user-guide/sync-options.md, "No Prune Resources" and "No
Resource Deletion") and Flux's ``kustomize.toolkit.fluxcd.io/prune: disabled`` (kustomize-controller docs,
garbage collection). Sync wave -2: before the content-named ConfigMaps (-1) and everything else.
"""

from __future__ import annotations

from collections.abc import Mapping

from compiler import objects
from compiler.objects import Obj
from policy.resolved import node_labels
from policy.resolved.resolve import ResolvedPolicy

#: Namespaces every cluster has: never written, never owned.
BUILT_IN = frozenset({"default", "kube-node-lease", "kube-public", "kube-system"})
PRIVILEGED, RESTRICTED = "privileged", "restricted"
_MODES = ("audit", "enforce", "warn")
ANNOTATIONS = {
    "argocd.argoproj.io/sync-options": "Prune=false,Delete=false",
    objects.SYNC_WAVE: objects.SYNC_WAVE_NAMESPACE,
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}


def needed(resolved: ResolvedPolicy) -> dict[str, str]:
    """Namespace -> the Pod Security level its pods need, for every namespace the tree must provide: where the
    renderers put objects (tests/compiler/test_namespaces.py holds every rendered tree to this)."""
    spec = resolved.spec
    plugin = spec.device_plugin
    found: dict[str, str] = {}
    # The webhook, the label reconciler, and monitoring's rules and dashboard unless monitoring.namespace says
    # where (the policies of admission.engine vap are cluster-scoped: they need no namespace).
    monitoring_here = spec.monitoring.enabled and spec.monitoring.namespace is None
    if spec.runs_webhook or node_labels.build_plan(resolved).classes or monitoring_here:
        found[spec.admission.namespace] = RESTRICTED
    if spec.audit.enabled:
        found[spec.audit_namespace] = RESTRICTED  # the audit CronJob's pods run as the webhook's do
    standalone = plugin.deploy == "standalone"
    if standalone and (resolved.plugin_classes or plugin.labels_nodes):
        found[plugin.namespace] = PRIVILEGED  # device plugins, MPS daemons, GFD, MIG managers
    if resolved.vgpu_classes:
        found[spec.hami.namespace] = PRIVILEGED  # HAMi's device plugins
    foreign = BUILT_IN | ({plugin.operator.namespace} if not standalone else set())
    return {name: level for name, level in sorted(found.items()) if name not in foreign}


def render_namespaces(resolved: ResolvedPolicy) -> dict[str, Obj]:
    """File stem -> Namespace; empty when spec.createNamespaces is false."""
    if not resolved.spec.create_namespaces:
        return {}
    labels = objects.labels(resolved.policy, "namespace")
    return {f"namespace-{name}": _namespace(name, level, labels) for name, level in needed(resolved).items()}


def _namespace(name: str, level: str, labels: Mapping[str, str]) -> Obj:
    security = {f"pod-security.kubernetes.io/{mode}": level for mode in _MODES}
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": objects.metadata(name, labels={**labels, **security}, annotations=ANNOTATIONS)}
