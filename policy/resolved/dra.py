"""The DRA pool of a policy, worked out once: its DeviceClasses, the driver gates they need, who may use each.

A class with ``allocation: dra`` is served by NVIDIA's DRA driver instead of a device plugin. Each of its offers
(policy.resolved.resolve: whole GPUs, each MIG profile, MPS or time-sliced GPUs) becomes one DeviceClass whose CEL
selectors pin what tells the class's hardware apart (a DeviceClass sees device attributes only, never the node:
reference dra-hami.md §0.2, A4) and whose ``spec.config[].opaque`` carries the sharing (the driver's GpuConfig), so a
tenant only names the class. The compiler (compiler/targets/dra.py), the report, the checks and claim admission read
this one model; none re-derives it.

Field names follow k8s.io/api resource/v1/types.go at v0.34.10 (DeviceClassSpec L1659, DeviceClassConfiguration
L1697) and the driver's api/nvidia.com/resource/v1beta1 at v0.4.1 (gpuconfig.go, sharing.go).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from policy.hardware import dra
from policy.kube import selectors
from policy.resolved.resolve import Offer, ResolvedClass, ResolvedPolicy, bridge_available, mode_name
from policy.spec.model import Spec, Tenant

#: The request name of every compiled ResourceClaimTemplate: containers name it in resources.claims[].request.
REQUEST = "gpu"


@dataclass(frozen=True)
class DraDeviceClass:
    """One compiled DeviceClass: a node class's devices of one kind, with the sharing config they run under."""

    name: str
    """metadata.name, e.g. h100.exclusive.gpupolicy.dev."""
    node_class: str
    mode: str
    """exclusive, mps, time-slicing or mig (the tenant's allow list is held against it)."""
    mig_profile: str | None
    product: str
    """The nvidia.com/gpu.product label of the class's GPUs (the CEL compares the driver's productName with it)."""
    devices_per_node: int
    """Devices of the class one node holds: the most one claim request can get (node-local devices)."""
    shares: int
    """Pods one device serves: MPS clients or consumable shares; 1 for whole GPUs and MIG devices."""
    memory_mib: int
    """Memory of one device (a MIG device's own; a whole GPU's)."""
    nodes: int | None
    extended_resource_name: str | None
    """The device plugin's resource name pods keep asking for (KEP-5004), where it is unique and the version has it."""
    selectors: tuple[str, ...]
    parameters: dict[str, Any] | None
    """The driver's opaque config (GpuConfig) the class carries, or None (no sharing to configure)."""

    @property
    def template_name(self) -> str:
        """The ResourceClaimTemplate every tenant namespace that may use the class gets: the node class's name
        (``h100-train``), with the profile for a MIG device (``a100-mig-1g.10gb``)."""
        return f"{self.node_class}-{dra.variant(self.mode, self.mig_profile)}" if self.mig_profile else self.node_class

    @property
    def quota_resource(self) -> str:
        """The ResourceQuota key that counts the devices claimed through this class in a namespace."""
        return f"{self.name}.deviceclass.resource.k8s.io/devices"

    @property
    def slots_per_node(self) -> int:
        return self.devices_per_node * self.shares

    @property
    def total_devices(self) -> int | None:
        return None if self.nodes is None else self.nodes * self.devices_per_node

    @property
    def total_slots(self) -> int | None:
        return None if self.nodes is None else self.nodes * self.slots_per_node


@dataclass(frozen=True)
class TenantDra:
    """What one tenant may claim: the DeviceClasses its modes and classes allow, and the namespaces it names."""

    tenant: str
    classes: tuple[str, ...]
    """DeviceClass names the tenant may use (its allow list and classes held against each DeviceClass)."""
    namespaces: tuple[str, ...]
    """Namespaces the tenant's selector names (kubernetes.io/metadata.name): where templates and quotas go."""


def opaque_parameters(mode: str, shares: int, memory_mib: int) -> dict[str, Any] | None:
    """The driver's opaque config of a DeviceClass (``spec.config[].opaque.parameters``): the one place it is
    made, so the tree and admission agree (and a harness decoding it with the driver's own code, once the Go module
    proxy serves a release of the driver, has one function to call: tests/consumers/harnesses.py says why not yet).

    - mps: GpuConfig with strategy MPS; each client gets 100/N percent of the SMs and total/N of the memory
      (sharing.go MpsConfig.DefaultActiveThreadPercentage, DefaultPinnedDeviceMemoryLimit).
    - time-slicing: GpuConfig with strategy TimeSlicing and the Default interval (sharing.go TimeSliceInterval);
      how many pods share a GPU is the driver's consumable shares, not this config.
    - exclusive and MIG: none; a MigDeviceConfig TimeSlicing entry is accepted and has no effect (dra-hami.md A3).
    """
    if mode == "mps":
        sharing: dict[str, Any] = {"strategy": "MPS", "mpsConfig": {
            "defaultActiveThreadPercentage": 100 // max(shares, 1),
            "defaultPinnedDeviceMemoryLimit": f"{memory_mib // max(shares, 1)}Mi"}}
    elif mode == "time-slicing":
        sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
    else:
        return None
    return {"apiVersion": dra.OPAQUE_API_VERSION, "kind": "GpuConfig", "sharing": sharing}


def _cel_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def device_selectors(product: str, mig_profile: str | None) -> tuple[str, ...]:
    """CEL on what a DeviceClass can see: the driver, the device type, the product and the MIG profile.

    The driver publishes NVML's productName (``NVIDIA H100 80GB HBM3``) and GPU Feature Discovery's product label
    writes its spaces as dashes, so the expression compares the attribute with its spaces replaced. Each attribute
    is tested for presence first: reading a missing one aborts the allocation (types.go CELDeviceSelector).
    """
    attrs = f"device.attributes[{_cel_string(dra.DRIVER)}]"
    kind = "mig" if mig_profile else "gpu"
    parts = [f"device.driver == {_cel_string(dra.DRIVER)}", f"{attrs}.type == {_cel_string(kind)}",
             f"'productName' in {attrs}", f"{attrs}.productName.replace(' ', '-') == {_cel_string(product)}"]
    if mig_profile:
        parts += [f"'profile' in {attrs}", f"{attrs}.profile == {_cel_string(mig_profile)}"]
    return (" && ".join(parts),)


def _device_class(rc: ResolvedClass, offer: Offer, bridged: bool) -> DraDeviceClass:
    mode = mode_name(offer.modes)
    name = dra.device_class_name(rc.name, mode, offer.mig_profile)
    memory = offer.memory_mib if offer.mig_profile else (rc.memory_mib or 0)
    shares = offer.replicas if offer.modes in (("mps",), ("time-slicing",)) else 1
    extended = offer.resource if bridged and not offer.resource.startswith(dra.IMPLICIT_PREFIX) else None
    return DraDeviceClass(
        name=name, node_class=rc.name, mode=mode, mig_profile=offer.mig_profile, product=rc.product,
        devices_per_node=offer.devices_per_node, shares=shares, memory_mib=memory, nodes=rc.nodes,
        extended_resource_name=extended, selectors=device_selectors(rc.product, offer.mig_profile),
        parameters=opaque_parameters(mode, shares, memory))


def device_classes(resolved: ResolvedPolicy) -> tuple[DraDeviceClass, ...]:
    """Every DeviceClass of the DRA pool, by name."""
    bridged = bridge_available(resolved.spec)
    found = [_device_class(rc, offer, bridged) for rc in resolved.dra_classes for offer in rc.offers]
    return tuple(sorted(found, key=lambda dc: dc.name))


def allows(tenant_allow: tuple[str, ...], tenant_classes: tuple[str, ...], dc: DraDeviceClass) -> bool:
    """Whether a tenant (its allow list and its classes, empty meaning all) may use the DeviceClass."""
    modes = dc.mode.split("+")
    return set(modes) <= set(tenant_allow) and (not tenant_classes or dc.node_class in tenant_classes)


def named_namespaces(tenant: Tenant) -> tuple[str, ...]:
    """The namespaces a tenant's selector names by kubernetes.io/metadata.name (matchLabels or In): the only ones
    GitOps can write a tenant's templates and quota into (the selector's other labels are the cluster's to set)."""
    selector = tenant.namespace_selector
    key = selectors.NAMESPACE_NAME_LABEL
    found = [selector.match_labels[key]] if key in selector.match_labels else []
    found += [v for e in selector.match_expressions if e.key == key and e.operator == "In" for v in e.values]
    return tuple(sorted(set(found)))


def tenants(resolved: ResolvedPolicy, classes: tuple[DraDeviceClass, ...]) -> tuple[TenantDra, ...]:
    """Per tenant, in spec order, the DeviceClasses it may use and the namespaces it names."""
    return tuple(TenantDra(t.name, tuple(dc.name for dc in classes if allows(t.allow, t.classes, dc)),
                           named_namespaces(t)) for t in resolved.spec.tenants)


def namespace_classes(tenants_dra: tuple[TenantDra, ...]) -> dict[str, tuple[str, ...]]:
    """Per namespace a tenant's selector names, the DeviceClasses it may use: those of every tenant naming it (as
    admission decides: several tenants mean only what all of them allow, claims.ClaimPolicy.allowed), in the
    first tenant's order."""
    found: dict[str, tuple[str, ...]] = {}
    for tenant in tenants_dra:
        for namespace in tenant.namespaces:
            before = found.get(namespace)
            found[namespace] = tenant.classes if before is None else tuple(c for c in before if c in tenant.classes)
    return found


def default_classes(spec: Spec, classes: tuple[DraDeviceClass, ...]) -> tuple[str, ...]:
    """The DeviceClasses a namespace no tenant selects may use (admission.defaultAllow)."""
    return tuple(dc.name for dc in classes if allows(spec.admission.default_allow, (), dc))


@dataclass(frozen=True)
class Need:
    """A gate the DRA pool needs, and why (the class or setting asking for it), for the checks and the values."""

    gate: str
    reason: str
    path: tuple[str | int, ...]


def driver_gates(resolved: ResolvedPolicy) -> tuple[Need, ...]:
    """Driver gates the DRA classes' sharing needs, in spec order, then those spec.dra.featureGates enables."""
    found: list[Need] = []
    for i, nc in enumerate(resolved.spec.node_classes):
        if nc.allocation != "dra":
            continue
        path = ("spec", "nodeClasses", i, "sharing")
        if nc.sharing.mps is not None:
            found.append(Need("MPSSupport", f"class {nc.name!r} shares its GPUs with MPS", (*path, "mps")))
        if nc.sharing.time_slicing is not None:
            sliced = (*path, "timeSlicing")
            found.append(Need("TimeSlicingSettings", f"class {nc.name!r} time-slices its GPUs (GpuConfig strategy "
                              "TimeSlicing)", sliced))
            found.append(Need("ConsumableShares", f"class {nc.name!r} lets several claims share one GPU "
                              "(consumable shares)", sliced))
    for gate, on in resolved.spec.dra.feature_gates.items():
        if on:
            found.append(Need(gate, f"spec.dra.featureGates enables {gate}", ("spec", "dra", "featureGates", gate)))
    return tuple(found)


def enabled_gates(resolved: ResolvedPolicy) -> dict[str, bool]:
    """The Helm value featureGates: every gate the pool needs on, and those the spec turns off, sorted."""
    gates = {need.gate: True for need in driver_gates(resolved)}
    gates.update({g: False for g, on in resolved.spec.dra.feature_gates.items() if not on})
    return dict(sorted(gates.items()))


def kubernetes_gates(resolved: ResolvedPolicy) -> Iterator[tuple[str, Need]]:
    """(Kubernetes gate, the driver gate or feature needing it) for every alpha Kubernetes gate the pool needs."""
    for need in driver_gates(resolved):
        gate = dra.DRIVER_GATES.get(need.gate)
        for name in gate.kubernetes if gate else ():
            yield name, need


def consumable_shares(resolved: ResolvedPolicy) -> int | None:
    """The driver-wide consumable shares (Helm value consumableShares): the time-sliced DRA classes' replicas."""
    found = sorted({rc.replicas for rc in resolved.dra_classes if rc.spec.sharing.time_slicing is not None})
    return found[0] if found else None
