"""Spec checks of vgpu classes and the HAMi install they share: version, cluster-wide settings, names and scope."""

from __future__ import annotations

from collections.abc import Iterator

from policy.resolved.resolve import ResolvedPolicy
from policy.resolved.vgpu_scope import hami_scope
from policy.spec.diagnostics import Diagnostic
from policy.vgpu import hami

_HAMI = ("spec", "hami")


def _vgpu_path(i: int, *rest: str) -> tuple[str | int, ...]:
    return ("spec", "nodeClasses", i, "sharing", "vgpu", *rest)


def check_hami_version(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """gpupolicy writes v2.10's formats: older releases read other keys, newer ones are not verified."""
    if not resolved.vgpu_classes:
        return
    settings = resolved.spec.hami
    release = settings.version_tuple[:2]
    target = ".".join(map(str, hami.SUPPORTED_VERSION))
    if release < hami.SUPPORTED_VERSION:
        yield Diagnostic("hami-unsupported-version", f"HAMi {settings.version} is older than v{target}, whose "
                         "behaviour gpupolicy's output and admission rules mirror: the webhook's gpumem-percentage "
                         "range check came in v2.10.0, the JSON node registration in v2.8.0 and the gpucores "
                         "default for whole-memory vGPUs in v2.7.0",
                         (*_HAMI, "version"), f"upgrade HAMi to v{target}.x (helm upgrade with the chart version "
                         f"{target}.0) and set spec.hami.version to match")
    elif release > hami.SUPPORTED_VERSION:
        yield Diagnostic("hami-unsupported-version", f"HAMi {settings.version} is newer than v{target}, the "
                         "release gpupolicy's output and admission rules were checked against", (*_HAMI, "version"),
                         f"compare HAMi's changelog since v{target}.0 with docs/vgpu.md, or stay on v{target}.x",
                         severity="warning")


def check_core_policy(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """gpuCorePolicy is one value per HAMi install: its webhook injects it into every vGPU pod. Only disable can be
    set per class, through disableCoreLimit in that class's device-plugin config (pkg/device/nvidia/device.go
    MutateAdmission; plugin/server.go:845-847)."""
    cluster = resolved.spec.hami.core_policy
    for i, nc in enumerate(resolved.spec.node_classes):
        vgpu = nc.sharing.vgpu
        if vgpu is None or vgpu.core_policy in (None, cluster) or (vgpu.core_policy, cluster) == ("disable",
                                                                                                  "default"):
            continue
        yield Diagnostic("hami-setting-cluster-wide", f"class {nc.name!r} asks for corePolicy {vgpu.core_policy}, "
                         f"but spec.hami.corePolicy is {cluster}: HAMi's webhook injects one gpuCorePolicy into "
                         "every vGPU pod of the cluster, and only disable can be set per class (in that class's "
                         "device-plugin config)", _vgpu_path(i, "corePolicy"),
                         f"set spec.hami.corePolicy: {vgpu.core_policy} for every vgpu class, or remove the "
                         "class's corePolicy")


def check_scope(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """Tenants may not use vgpu and NVIDIA-plugin classes for one resource name, and the vGPU namespaces must be
    one namespaceSelector (policy.resolved.vgpu_scope)."""
    scope = hami_scope(resolved)
    for collision in scope.collisions:
        plugin = ", ".join(f"{name} ({mode})" for name, mode in collision.plugin_classes)
        if collision.tenant is not None:
            path: tuple[str | int, ...] = ("spec", "tenants", collision.tenant, "allow")
            split = "split the tenant into one that may use vgpu and one that may use the other modes"
        else:
            path = ("spec", "admission", "defaultAllow")
            split = "set spec.admission.defaultAllow to vgpu alone or to the other modes alone"
        yield Diagnostic("hami-resource-name-collision", f"{collision.who} may use vgpu class "
                         f"{', '.join(collision.vgpu_classes)} and NVIDIA-plugin class {plugin}, all asked for as "
                         f"{collision.resource}: HAMi's webhook sends every such pod of its namespaces to "
                         "hami-scheduler, which places pods only on HAMi's nodes, so the NVIDIA-plugin classes would "
                         "be out of their reach", path,
                         f"rename HAMi's count resource (spec.hami.resourceNames.count: nvidia.com/vgpu) so the two "
                         f"never meet, or {split}")
    for reason in scope.inexpressible:
        yield Diagnostic("hami-webhook-scope-inexpressible", f"HAMi's webhook must reach exactly the namespaces that "
                         f"may use vgpu classes, but {reason}", ("spec", "tenants"),
                         "select the vgpu tenants' namespaces by one label key (e.g. gpu-tier In [platform, "
                         "batch]), or rename HAMi's count resource (spec.hami.resourceNames.count: "
                         "nvidia.com/vgpu), which lets its webhook reach every namespace")


def check_vgpu_classes(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    for i, rc in enumerate(resolved.classes):
        settings, vgpu = rc.spec.sharing.vgpu, rc.vgpu
        if settings is None or vgpu is None:
            continue
        if settings.split_count == 1:
            yield Diagnostic("vgpu-split-count-one", f"class {rc.name!r} splits each GPU into 1 vGPU: one pod per "
                             "GPU, as with whole GPUs, plus HAMi's software overhead", _vgpu_path(i, "splitCount"),
                             "use splitCount: 2 or more, or sharing: exclusive", severity="warning")
        if settings.memory_scaling > 1:
            yield Diagnostic("vgpu-memory-overcommit", f"class {rc.name!r} registers {vgpu.card_memory_mib} MiB per "
                             f"GPU ({settings.memory_scaling:g} x the physical memory): HAMi then admits vGPUs whose "
                             "memory limits add up to more than the GPU has, which HAMi calls experimental; a "
                             "process allocating beyond the free physical memory still fails with out-of-memory",
                             _vgpu_path(i, "memoryScaling"),
                             "keep memoryScaling at 1 or below unless the workloads never use their limits at once",
                             severity="warning")


def check_mig_clients_namespace(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """The MIG manager of a vgpu class waits for the class's GPU clients in one namespace, HAMi's (mig-parted
    reconfigure-mig.sh: ``kubectl wait --for=delete -n <DEFAULT_GPU_CLIENTS_NAMESPACE> -l app=...``): its GPU
    Feature Discovery must run there too, or the MIG mode changes while GFD still holds the GPUs."""
    plugin = resolved.spec.device_plugin
    if resolved.spec.hami.namespace == plugin.namespace:
        return
    for rc in resolved.classes:
        if rc.vgpu is not None and rc.mig_manager and rc.feature_discovery:
            yield Diagnostic("mig-clients-namespace-split", f"class {rc.name!r} runs HAMi's device plugin in "
                             f"namespace {resolved.spec.hami.namespace!r} and GPU Feature Discovery in "
                             f"{plugin.namespace!r}, but the MIG manager that keeps its GPUs at all-disabled waits "
                             "for GPU clients in one namespace only", ("spec", "hami", "namespace"),
                             f"set spec.hami.namespace and spec.devicePlugin.namespace to one namespace (e.g. "
                             f"{plugin.namespace!r})")


HAMI_CHECKS = (check_hami_version, check_core_policy, check_scope, check_vgpu_classes, check_mig_clients_namespace)
