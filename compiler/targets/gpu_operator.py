"""The GPU Operator: named device-plugin configs for its config-manager, and what points the operator at them:
Helm values for the operator's Helm release (installer helm), or a partial ClusterPolicy patch (installer olm)."""

from __future__ import annotations

from collections.abc import Mapping

from compiler import objects
from compiler.objects import Obj
from compiler.targets.device_plugin import render_config_text
from policy.hardware.labels import MIG_ALL_DISABLED
from policy.resolved.resolve import ResolvedPolicy
from policy.spec.model import Toleration

OPERATOR_CONFIGS = "gpupolicy-device-plugin-configs"
#: The chart's own daemonsets.tolerations, the same in every release v23.3.0 - v26.7.0
#: (NVIDIA/gpu-operator@v25.3.0:deployments/gpu-operator/values.yaml:39-42). Helm replaces a list given in values
#: rather than merging it, so the classes' taints are added to these, never instead of them; the chart copies the
#: list into ClusterPolicy spec.daemonsets.tolerations (templates/clusterpolicy.yaml:52-53), which every operand
#: DaemonSet (device plugin, GFD, MIG manager, dcgm-exporter...) carries.
CHART_TOLERATIONS = (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)
#: Helm values for the operator's release (installer helm), at the top of the tree: not a Kubernetes object.
VALUES_FILE = "gpu-operator-values.yaml"
# The DaemonSets the operator runs from these configs, in its namespace (gpu-operator v26.7.0
# assets/state-device-plugin, state-mps-control-daemon, gpu-feature-discovery and state-mig-manager).
PLUGIN_DAEMONSET = "nvidia-device-plugin-daemonset"
MPS_DAEMONSET = "nvidia-device-plugin-mps-control-daemon"
GFD_DAEMONSET = "gpu-feature-discovery"
MIG_MANAGER_DAEMONSET = "nvidia-mig-manager"


def render_operator_configs(resolved: ResolvedPolicy) -> Obj:
    """One content-named ConfigMap in the operator's namespace; key = class name = the value of the node
    label nvidia.com/device-plugin.config that makes the operator's config-manager pick it (§4, §7)."""
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    data = {nc.name: render_config_text(plugin, nc) for nc in resolved.plugin_classes}
    return objects.config_map(
        OPERATOR_CONFIGS,
        dict(sorted(data.items())),
        namespace=plugin.operator.namespace,
        labels=objects.labels(policy, "device-plugin"),
    )


def cluster_policy_fields(resolved: ResolvedPolicy, configs: str | None, mig_configs: str | None,
                          dcgm_exporter: Mapping[str, object] | None = None) -> Obj:
    """The ClusterPolicy spec fields gpupolicy decides, and nothing else (every value valid in every operator
    release v23.3 - v26.7, as policy/hardware/operator.py CRD_FIELDS states the CRDs; the dcgmExporter fields of
    monitoring in the releases its checks allow).

    devicePlugin.config.default is always written: a default the operator's installer set that is not a key of
    our ConfigMap would crash-loop every unlabelled node's config-manager ("specified config ... does not
    exist"); ours is the only class or empty (FALLBACK_STRATEGIES=empty: whole GPUs).
    migManager.config.default all-disabled: the operator then labels unlabelled MIG-capable nodes with it, so
    non-MIG classes need no label; the tree's mig-parted config defines all-disabled (mig.md §5).
    """
    spec: Obj = {"mig": {"strategy": resolved.spec.operator_mig_strategy}}
    if configs is not None:  # None: every class is vgpu, and HAMi's plugin replaces the operator's everywhere
        spec["devicePlugin"] = {"config": {"default": resolved.default_config, "name": configs}}
    if mig_configs is not None:
        spec["migManager"] = {"config": {"default": MIG_ALL_DISABLED, "name": mig_configs}}
    if dcgm_exporter is not None:
        spec["dcgmExporter"] = dict(dcgm_exporter)
    return spec


def render_cluster_policy(resolved: ResolvedPolicy, configs: str | None, mig_configs: str | None,
                          dcgm_exporter: Mapping[str, object] | None = None) -> Obj:
    """installer olm: the fields above as a partial ClusterPolicy for server-side apply.

    No labels: the object belongs to whoever created it, and a partial object carries only fields gpupolicy
    owns (the root kustomization adds none either). The names are written literally, so the pointer changes
    in the same compile as the content. Not a Kustomize nameReference: kustomize v5.5 takes an unknown kind
    for namespaced and then never matches a cluster-scoped ClusterPolicy to a ConfigMap in the operator's
    namespace (tried with kubectl 1.32).
    """
    operator = resolved.spec.device_plugin.operator
    return objects.cluster_policy_patch(operator.effective_cluster_policy_name,
                                        cluster_policy_fields(resolved, configs, mig_configs, dcgm_exporter))


def render_helm_values(resolved: ResolvedPolicy, configs: str | None, mig_configs: str | None,
                       dcgm_exporter: Mapping[str, object] | None = None) -> Obj:
    """installer helm: the same fields as values of the operator's chart, so its release renders them into the
    ClusterPolicy it owns and no second writer exists (templates/clusterpolicy.yaml maps devicePlugin.config,
    mig.strategy and migManager.config one to one, v23.3 - v26.7, and dcgmExporter's env, config.name,
    serviceMonitor and, from v25.10, hostPID), plus daemonsets.tolerations for the classes' taints, without which
    no operand runs on a tainted class's nodes."""
    values = cluster_policy_fields(resolved, configs, mig_configs, dcgm_exporter)
    taints = [taint for rc in resolved.classes for taint in rc.taints]
    if taints:
        values["daemonsets"] = {"tolerations": objects.tolerating(CHART_TOLERATIONS, taints)}
    return values
