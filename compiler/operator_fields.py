"""The GPU Operator's ClusterPolicy fields gpupolicy owns, rendered once: the tree writes them (Helm values or the
partial ClusterPolicy), and REPORT.md and docs/ci-and-gitops.md name them from the same value."""

from __future__ import annotations

from compiler.objects import Obj
from compiler.targets import gpu_operator, mig_parted, monitoring
from policy.resolved.resolve import ResolvedPolicy


def pointers(resolved: ResolvedPolicy) -> tuple[str | None, str | None, Obj | None]:
    """What the operator is pointed at: the tree's device-plugin configs (none when every class is vgpu: HAMi's
    plugin runs on every class's nodes), its MIG configs, and dcgm-exporter's fields (content-named ConfigMaps)."""
    configs = (gpu_operator.render_operator_configs(resolved)["metadata"]["name"]
               if resolved.plugin_classes else None)
    mig = mig_parted.render_config_map(resolved)["metadata"]["name"] if resolved.has_mig else None
    dcgm = monitoring.render_dcgm_metrics(resolved)
    return configs, mig, None if dcgm is None else monitoring.dcgm_exporter_fields(resolved, dcgm["metadata"]["name"])


def render(resolved: ResolvedPolicy) -> Obj:
    """The spec fields as the Helm values and the partial ClusterPolicy carry them."""
    return gpu_operator.cluster_policy_fields(resolved, *pointers(resolved))


def owned_paths(fields: Obj) -> tuple[str, ...]:
    """Dotted paths of the owned fields, two levels deep (``devicePlugin.config``, ``mig.strategy``,
    ``dcgmExporter.serviceMonitor``): the units another writer of the ClusterPolicy must leave alone."""
    return tuple(sorted(f"{top}.{key}" if isinstance(value, dict) else top
                        for top, value in fields.items() for key in (value if isinstance(value, dict) else [None])))
