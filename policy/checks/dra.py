"""Spec checks of the DRA pool: Kubernetes and driver releases, the gates its sharing needs, what DRA can express.

Every alpha feature is named with its gate and the release that has it (policy/hardware/dra.py cites them).
"""

from __future__ import annotations

from collections.abc import Iterator

from policy.checks.common import class_path
from policy.hardware import dra
from policy.resolved import dra as pool
from policy.resolved.resolve import ResolvedPolicy, kubernetes_gate_on
from policy.spec.diagnostics import Diagnostic

_DRA = ("spec", "dra")


def _dra_indices(resolved: ResolvedPolicy) -> list[int]:
    return [i for i, nc in enumerate(resolved.spec.node_classes) if nc.allocation == "dra"]


def check_dra_versions(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """resource.k8s.io/v1 needs Kubernetes 1.34; the driver release must be one whose gates gpupolicy knows."""
    indices = _dra_indices(resolved)
    if not indices:
        return
    spec = resolved.spec
    first = spec.node_classes[indices[0]].name
    if spec.kubernetes_minor < dra.MIN_KUBERNETES_MINOR:
        yield Diagnostic("dra-kubernetes-too-old", f"class {first!r} uses allocation: dra, but Kubernetes "
                         f"{spec.kubernetes_version} has no resource.k8s.io/v1: DRA is GA (v1, on by default) from "
                         f"Kubernetes 1.{dra.MIN_KUBERNETES_MINOR}", ("spec", "kubernetesVersion"),
                         f"target Kubernetes 1.{dra.MIN_KUBERNETES_MINOR} or newer, or serve the class with the "
                         "device plugin (allocation: device-plugin)")
    if spec.dra.version not in dra.RELEASES:
        yield Diagnostic("dra-unknown-driver-version", f"NVIDIA DRA driver {spec.dra.version} is not a release "
                         f"gpupolicy knows ({', '.join(dra.RELEASES)}): its feature gates decide what the classes "
                         "can share", (*_DRA, "version"), f"use one of {', '.join(dra.RELEASES)}")


def check_dra_gates(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """Each needed driver gate exists in the release; each Kubernetes gate it needs is on; no exclusive pair."""
    if not _dra_indices(resolved):
        return
    spec = resolved.spec
    release = spec.dra.version
    needs = pool.driver_gates(resolved)
    for need in needs:
        if spec.dra.feature_gates.get(need.gate) is False:
            # the values would write the gate off while the DeviceClass still carries the config needing it: the
            # driver then fails every claim of the class when it prepares it
            yield Diagnostic("dra-gate-turned-off", f"{need.reason}, which needs the driver gate {need.gate}, but "
                             f"spec.dra.featureGates turns {need.gate} off", ("spec", "dra", "featureGates", need.gate),
                             f"remove {need.gate}: false from spec.dra.featureGates, or change the class's sharing")
        if not dra.has_gate(release, need.gate):
            yield Diagnostic("dra-gate-needs-release", f"{need.reason}, which needs the driver's alpha gate "
                             f"{need.gate}: NVIDIA DRA driver {release} has no such gate; "
                             f"{dra.first_release_with(need.gate)} is the first release with it", need.path,
                             f"set spec.dra.version: {dra.first_release_with(need.gate)} (or newer), or choose "
                             "another sharing mode for the class")
    for gate, need in pool.kubernetes_gates(resolved):
        if kubernetes_gate_on(spec, gate):
            continue
        facts = dra.KUBERNETES_GATES[gate]
        yield Diagnostic("dra-kubernetes-gate-off", f"{need.reason}; the driver's {need.gate} needs the Kubernetes "
                         f"feature gate {gate} ({facts.feature}), alpha and off in Kubernetes "
                         f"{spec.kubernetes_version}, on by default from 1.{facts.default_on}", need.path,
                         f"run kube-apiserver, kube-scheduler and the kubelets with --feature-gates={gate}=true and "
                         f"list it in spec.dra.kubernetesFeatureGates, or target Kubernetes 1.{facts.default_on}")
    enabled = pool.enabled_gates(resolved)
    for a, b, why in dra.EXCLUSIVE_GATES:
        if enabled.get(a) and enabled.get(b):
            reasons = {n.gate: n.reason for n in needs}
            path = next(n.path for n in needs if n.gate == b)
            yield Diagnostic("dra-gates-exclusive", f"the DRA pool needs the driver gates {a} ({reasons[a]}) and "
                             f"{b} ({reasons[b]}), which exclude each other: {why}", path,
                             "keep one of the two: move one class to the device plugin (allocation: device-plugin) "
                             "or give it another sharing mode")


def check_dra_classes(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """What a DRA class can share: vgpu is HAMi's, time-sliced MIG is a no-op in the driver, consumable shares are
    driver-wide; and classes a DeviceClass cannot tell apart are reported."""
    spec = resolved.spec
    sliced: dict[int, list[str]] = {}
    unshared: list[str] = []
    seen: dict[str, str] = {}
    for i in _dra_indices(resolved):
        nc, rc = spec.node_classes[i], resolved.classes[i]
        if nc.sharing.vgpu is not None:
            yield Diagnostic("dra-unsupported-sharing", f"class {nc.name!r} uses vgpu, which HAMi serves, with "
                             "allocation: dra", class_path(i, "allocation"),
                             "use allocation: device-plugin for vgpu classes")
        mig = nc.sharing.mig
        if mig is not None and mig.time_slicing:
            yield Diagnostic("dra-unsupported-sharing", f"class {nc.name!r} time-slices MIG devices, which NVIDIA's "
                             "DRA driver accepts in a MigDeviceConfig and ignores (its time-slice setter runs for "
                             "whole GPUs only)", class_path(i, "sharing", "mig", "timeSlicing"),
                             "remove mig.timeSlicing (pods sharing a MIG device share one ResourceClaim), or serve "
                             "the class with the device plugin")
        if nc.sharing.time_slicing is not None:
            sliced.setdefault(rc.replicas, []).append(nc.name)
        else:
            unshared.append(nc.name)
        if rc.product in seen:
            yield Diagnostic("dra-classes-indistinguishable", f"classes {seen[rc.product]!r} and {nc.name!r} both "
                             f"have {rc.product} GPUs: a DeviceClass sees device attributes only, never the node, "
                             "so each one's DeviceClasses also allocate the other's GPUs", class_path(i, "gpu"),
                             "merge the two classes, or have their pods add node affinity to the class's node "
                             "labels", severity="warning")
        seen.setdefault(rc.product, nc.name)
    yield from _consumable_shares(sliced, unshared)


def _consumable_shares(sliced: dict[int, list[str]], unshared: list[str]) -> Iterator[Diagnostic]:
    """The driver's consumable shares are one flag for every node its kubelet plugin runs on (per-node settings are
    the open issues kubernetes-sigs/dra-driver-nvidia-gpu#1067 and #1284)."""
    if not sliced:
        return
    if len(sliced) > 1:
        got = "; ".join(f"{n} for {', '.join(names)}" for n, names in sorted(sliced.items()))
        yield Diagnostic("dra-consumable-shares-driver-wide", f"time-sliced DRA classes ask for different replicas "
                         f"({got}), but the driver's consumable shares are one number for all its nodes",
                         (*_DRA,), "give every time-sliced DRA class the same replicas")
    if unshared:
        users = ", ".join(sliced[min(sliced)])
        yield Diagnostic("dra-consumable-shares-driver-wide", f"consumable shares (for {users}) "
                         f"make every GPU of the driver shareable, so class {unshared[0]}'s devices would be shared "
                         "too", (*_DRA,), f"serve {unshared[0]} with the device plugin (allocation: device-plugin), "
                         "or time-slice the DRA classes only")


def check_dra_tenants(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """A tenant that may claim DRA devices gets its templates and quota in the namespaces its selector names."""
    classes = pool.device_classes(resolved)
    if not classes:
        return
    for i, found in enumerate(pool.tenants(resolved, classes)):
        if found.classes and not found.namespaces:
            yield Diagnostic("dra-tenant-namespaces-unnamed", f"tenant {found.tenant!r} may use DeviceClasses "
                             f"{', '.join(found.classes)}, but its namespaceSelector names no namespace, so the tree "
                             "holds no ResourceClaimTemplate or quota for it (admission still checks its claims)",
                             ("spec", "tenants", i, "namespaceSelector"), "add kubernetes.io/metadata.name In "
                             "[<namespaces>] to the selector", severity="warning")


DRA_CHECKS = (check_dra_versions, check_dra_gates, check_dra_classes, check_dra_tenants)
