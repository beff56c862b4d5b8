"""The GPU Operator: named device-plugin configs for its config-manager, and the partial ClusterPolicy that points
the operator at them."""

from __future__ import annotations

from compiler import objects
from compiler.objects import Obj
from compiler.targets.device_plugin import render_config_text
from policy.resolve import ResolvedPolicy

OPERATOR_CONFIGS = "gpupolicy-device-plugin-configs"


def render_operator_configs(resolved: ResolvedPolicy) -> Obj:
    """One content-named ConfigMap in the operator's namespace; key = class name = the value of the node
    label nvidia.com/device-plugin.config that makes the operator's config-manager pick it (§4, §7)."""
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    data = {nc.name: render_config_text(plugin, nc) for nc in resolved.classes}
    return objects.config_map(
        OPERATOR_CONFIGS,
        dict(sorted(data.items())),
        namespace=plugin.operator.namespace,
        labels=objects.labels(policy, "device-plugin"),
    )


def render_cluster_policy(resolved: ResolvedPolicy, configs: str, mig_configs: str | None) -> Obj:
    """The ClusterPolicy fields that point the operator at our content-named ConfigMaps.

    The names are written literally, so the pointer changes in the same compile as the content.  Not a
    Kustomize nameReference: kustomize v5.5 takes an unknown kind for namespaced and then never matches a
    cluster-scoped ClusterPolicy to a ConfigMap in the operator's namespace (tried with kubectl 1.32), and
    a patch cannot target an object outside the build (the operator's Helm release owns the ClusterPolicy).
    """
    policy = resolved.policy
    spec: Obj = {
        "devicePlugin": {"config": {"name": configs}},
        "mig": {"strategy": policy.spec.operator_mig_strategy},
    }
    if mig_configs is not None:
        # default all-disabled: the operator labels unlabelled MIG-capable nodes with it (mig.md §5).
        spec["migManager"] = {"config": {"default": "all-disabled", "name": mig_configs}}
    return objects.cluster_policy_patch(policy.spec.device_plugin.operator.cluster_policy_name, spec,
                                        labels=objects.labels(policy, "gpu-operator"))
