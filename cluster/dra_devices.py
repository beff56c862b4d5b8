"""A DRA class's nodes against what NVIDIA's DRA driver publishes for them in ResourceSlices.

The driver's GPU kubelet plugin publishes one pool per node, named after it, under the driver ``gpu.nvidia.com``
(kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 cmd/gpu-kubelet-plugin/driver.go publishResources): a device
``gpu-<minor>`` of ``type`` gpu per GPU with MIG off, and one device of ``type`` mig per MIG device a GPU with MIG
on holds (nvlib.go GetPerGpuAllocatableDevices; the parent GPU is then not published). Per node of a DRA class this
module holds those devices against the class: how many of each kind (whole GPUs, each MIG profile) one node
promises (the class's offers), the product and memory of each, and which of them each DeviceClass the tree
compiled selects, its CEL evaluated as the scheduler evaluates it (cluster.device_cel). A DeviceClass that
selects fewer devices than the node holds leaves claims pending; one that selects another class's devices hands
them to the wrong tenants.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from cluster import device_cel
from cluster.expected import ExpectedDeviceClass
from cluster.findings import Finding
from cluster.resources import Node, ResourceSlice, SliceDevice, Snapshot
from policy.hardware import dra
from policy.kube.quantity import parse_quantity
from policy.resolved.resolve import Offer, ResolvedClass

_TYPE = f"{dra.DRIVER}/type"
_PRODUCT = f"{dra.DRIVER}/productName"
_PROFILE = f"{dra.DRIVER}/profile"
_PARENT = f"{dra.DRIVER}/parentUUID"
_UUID = f"{dra.DRIVER}/uuid"
_MEMORY = f"{dra.DRIVER}/memory"
_MIB = 1024 * 1024


@dataclass(frozen=True)
class Published:
    """One device of a node, with the slice it came in."""

    slice: ResourceSlice
    """The slice that publishes it (named in findings: a node can have several)."""
    device: SliceDevice

    @property
    def kind(self) -> str:
        """``gpu``, or ``mig <profile>``: what a class's offer counts."""
        kind = str(self.device.attributes.get(_TYPE, "?"))
        return f"mig {self.device.attributes.get(_PROFILE, '?')}" if kind == "mig" else kind

    @property
    def product(self) -> str:
        """productName with its spaces as dashes: GPU Feature Discovery's spelling, which the class names."""
        return str(self.device.attributes.get(_PRODUCT, "")).replace(" ", "-")

    @property
    def memory_mib(self) -> int | None:
        amount = parse_quantity(self.device.capacity.get(_MEMORY))
        return None if amount is None else int(amount // _MIB)

    @property
    def gpu(self) -> str:
        """The physical GPU: its own uuid, or a MIG device's parent's."""
        return str(self.device.attributes.get(_PARENT) or self.device.attributes.get(_UUID) or self.device.name)


def published(snapshot: Snapshot, node: Node) -> tuple[tuple[Published, ...], tuple[str, ...]]:
    """The node's devices of NVIDIA's GPU driver, and the other drivers that publish slices for it."""
    slices = [s for s in snapshot.resource_slices if s.node_name == node.name]
    ours = tuple(Published(s, d) for s in slices if s.driver == dra.DRIVER for d in s.devices)
    return ours, tuple(sorted({s.driver for s in slices if s.driver != dra.DRIVER}))


def kind_of(offer: Offer) -> str:
    """The kind of device an offer counts (Published.kind): one MIG profile's devices, else whole GPUs."""
    return f"mig {offer.mig_profile}" if offer.mig_profile else "gpu"


def device_class_of(resolved: ResolvedClass, offer: Offer) -> str:
    """The DeviceClass the tree compiles for one of a DRA class's offers."""
    return dra.device_class_name(resolved.name, offer.mode_name, offer.mig_profile)


def published_slots(snapshot: Snapshot, nodes: Sequence[Node], offer: Offer) -> int:
    """The slots an offer's devices give on the nodes, as published: its kind's devices times pods per device."""
    devices = sum(1 for n in nodes for d in published(snapshot, n)[0] if d.kind == kind_of(offer))
    return devices * (offer.per_node // offer.devices_per_node if offer.devices_per_node else 1)


@dataclass(frozen=True)
class Inventory:
    """What NVIDIA's DRA driver publishes for one node, as a draft class needs it."""

    product: str
    """productName with dashes (GPU Feature Discovery's spelling, which gpu.model takes)."""
    gpus: int
    """Physical GPUs: whole GPUs and the parents of MIG devices."""
    memory_mib: int | None
    """A whole GPU's memory (the smallest published); None when every GPU is in MIG mode."""
    layout: tuple[tuple[str, int], ...]
    """MIG devices per GPU by profile (the first partitioned GPU's); empty without MIG devices."""
    layouts_differ: bool = False
    """The GPUs do not all hold the same MIG devices (or some are whole)."""


def inventory(snapshot: Snapshot, node: Node) -> Inventory | None:
    """The node's GPUs as the driver publishes them, or None when it publishes none (or they are unknown)."""
    if snapshot.slices_unread is not None:
        return None
    devices = [d for d in published(snapshot, node)[0] if d.kind == "gpu" or d.kind.startswith("mig ")]
    if not devices:
        return None
    per_gpu: dict[str, Counter[str]] = {}
    for d in devices:
        per_gpu.setdefault(d.gpu, Counter())[d.kind] += 1
    shapes = {tuple(sorted(c.items())) for c in per_gpu.values()}
    partitioned = sorted((c for c in per_gpu.values() if "gpu" not in c), key=lambda c: sorted(c.items()))
    layout = tuple((k.removeprefix("mig "), n) for k, n in sorted(partitioned[0].items())) if partitioned else ()
    memory = [m for d in devices if d.kind == "gpu" and (m := d.memory_mib) is not None]
    products = sorted({d.product for d in devices})
    return Inventory(products[0], len(per_gpu), min(memory) if memory else None, layout,
                     len(shapes) > 1 or len(products) > 1)


def _expected_kinds(resolved: ResolvedClass) -> Counter[str]:
    """Devices of each kind one node of the class publishes: per offer, whole GPUs or one MIG profile's devices."""
    found: Counter[str] = Counter()
    for offer in resolved.offers:
        found[kind_of(offer)] += offer.devices_per_node
    return found


def class_findings(snapshot: Snapshot, resolved: ResolvedClass, nodes: Sequence[Node],
                   device_classes: Sequence[ExpectedDeviceClass], dra_classes: Mapping[str, ResolvedClass],
                   plugin_namespace: str) -> Iterator[Finding]:
    """Every difference between a DRA class's nodes' published devices and the class, per node and device."""
    if not nodes:
        return
    if snapshot.slices_unread is not None:
        yield Finding("dra-devices-not-verified",
                      f"class {resolved.name} is served by NVIDIA's DRA driver, whose devices are published in "
                      f"ResourceSlices, and those could not be read: {snapshot.slices_unread}; its GPUs were not "
                      "compared with the class",
                      "grant list on resourceslices.resource.k8s.io (or save them with kubectl get resourceslices "
                      "-o yaml for --from-file) and verify again", "warning", node_class=resolved.name)
        return
    own = [dc for dc in device_classes if dc.node_class == resolved.name]
    others = [dc for dc in device_classes if dc.node_class != resolved.name and dc.node_class in dra_classes]
    for node in nodes:
        yield from _node(snapshot, resolved, node, own, others, dra_classes, plugin_namespace)


def _node(snapshot: Snapshot, resolved: ResolvedClass, node: Node, own: Sequence[ExpectedDeviceClass],
          others: Sequence[ExpectedDeviceClass], dra_classes: Mapping[str, ResolvedClass],
          plugin_namespace: str) -> Iterator[Finding]:
    at = {"node_class": resolved.name, "subject": f"node/{node.name}"}
    devices, other_drivers = published(snapshot, node)
    if not devices:
        seen = f"; it has slices of {', '.join(other_drivers)} only" if other_drivers else ""
        yield Finding("dra-devices-missing",
                      f"node {node.name} of class {resolved.name} has no device in a ResourceSlice of driver "
                      f"{dra.DRIVER}{seen}: claims on the class's DeviceClasses cannot be allocated there",
                      "check that the driver's GPU kubelet plugin runs on the node (kubectl -n "
                      f"{plugin_namespace} get pods -o wide --field-selector spec.nodeName={node.name}) and its "
                      "log; the tree's dra-values.yaml limits it to the DRA classes' nodes", **at)
        return
    yield from _kinds(resolved, node, devices, at)
    yield from _attributes(resolved, node, devices, at)
    yield from _selected(resolved, node, devices, own, others, dra_classes, at)


def _kinds(resolved: ResolvedClass, node: Node, devices: Sequence[Published], at: Mapping[str, str]
           ) -> Iterator[Finding]:
    want, have = _expected_kinds(resolved), Counter(d.kind for d in devices)
    # MIG on the class or on the node: the layout differs (a GPU left whole there is one outside the layout)
    mig = any(k.startswith("mig ") for k in (*want, *have))
    for kind in sorted(want.keys() | have.keys()):
        if want[kind] == have[kind]:
            continue
        names = [d.device.name for d in devices if d.kind == kind]
        shown = f" ({_names(names)})" if names else ""
        what = "whole GPUs" if kind == "gpu" else f"MIG {kind.removeprefix('mig ')} devices" \
            if kind.startswith("mig ") else f"devices of type {kind}"  # vfio: PassthroughSupport
        if mig:
            per_gpu = Counter(d.gpu for d in devices if d.kind == kind)
            details = tuple(f"GPU {gpu}: {n} {what}" for gpu, n in sorted(per_gpu.items()))
            yield Finding("dra-mig-layout-mismatch",
                          f"node {node.name} publishes {have[kind]} {what}{shown}, class {resolved.name}'s MIG "
                          f"layout makes {want[kind]}",
                          "the layout on the GPUs is not the class's: check nvidia.com/mig.config.state and the MIG "
                          "manager's log, then restart the DRA kubelet plugin on the node (it reads the MIG devices "
                          "only when it starts)", details=details, **at)
        else:
            yield Finding("dra-device-count-mismatch",
                          f"node {node.name} publishes {have[kind]} {what}{shown}, class {resolved.name} has "
                          f"{want[kind]} (gpu.count {resolved.spec.gpu.count})",
                          "a GPU the driver cannot see (nvidia-smi on the node, the kubelet plugin's log), MIG "
                          "turned on, or gpu.count wrong in the spec", **at)


def _attributes(resolved: ResolvedClass, node: Node, devices: Sequence[Published], at: Mapping[str, str]
                ) -> Iterator[Finding]:
    for d in devices:
        if d.product != resolved.product:
            yield Finding("dra-device-mismatch",
                          f"device {d.device.name} of node {node.name} (slice {d.slice.name}) has productName "
                          f"{d.device.attributes.get(_PRODUCT, '(none)')!r}, class {resolved.name} is "
                          f"{resolved.product}",
                          "the node is not of the class's hardware: narrow the class's nodeSelector, or set gpu.model "
                          "to the product the driver reports", **at)
        elif d.kind == "gpu" and resolved.memory_mib and (memory := d.memory_mib) is not None \
                and memory < resolved.memory_mib:
            yield Finding("dra-device-mismatch",
                          f"device {d.device.name} of node {node.name} has memory {memory} MiB, below the "
                          f"{resolved.memory_mib} MiB class {resolved.name} sizes its slots with",
                          f"set gpu.memory: {memory}Mi on the class (ECC, or a driver that reserves more)",
                          "warning", **at)


def _selected(resolved: ResolvedClass, node: Node, devices: Sequence[Published],
              own: Sequence[ExpectedDeviceClass], others: Sequence[ExpectedDeviceClass],
              dra_classes: Mapping[str, ResolvedClass], at: Mapping[str, str]) -> Iterator[Finding]:
    """Each of the class's DeviceClasses must select exactly the node's devices of its kind, no other class's
    DeviceClass any of them."""
    kinds = {dc.name: kind for dc, kind in _class_kinds(resolved, own)}
    for dc in own:
        kind = kinds.get(dc.name)
        chosen, errors = _select(dc, devices)
        meant = [d for d in devices if d.kind == kind]
        missed = [d for d in meant if d not in chosen]
        extra = [d for d in chosen if d not in meant]
        if not missed and not extra and not errors:
            continue
        parts = []
        if missed:
            parts.append(f"does not select {_names(d.device.name for d in missed)}")
        if extra:
            parts.append(f"selects {_names(d.device.name for d in extra)}, which are not of its kind")
        if errors:
            parts.append(f"fails on {len(errors)} device(s)")
        yield Finding("dra-device-class-mismatch",
                      f"DeviceClass {dc.name} (class {resolved.name}) on node {node.name}: " + "; ".join(parts),
                      "the tree's DeviceClass does not match what the driver publishes: apply dra/ of the tree "
                      "(kubectl get deviceclass " + dc.name + " -o yaml), and check the devices' attributes",
                      details=tuple(errors), **at)
    for dc in others:
        chosen, _ = _select(dc, devices)
        if chosen:
            owner = dra_classes[dc.node_class]
            yield Finding("dra-device-class-mismatch",
                          f"DeviceClass {dc.name} of class {owner.name} selects "
                          f"{_names(d.device.name for d in chosen)} of node {node.name}, which is class "
                          f"{resolved.name}'s: claims of that class's tenants can be allocated here",
                          "give the classes GPUs the DeviceClasses tell apart (product, MIG profile), or the nodes "
                          "of one class to the other", **at)


def _class_kinds(resolved: ResolvedClass, own: Sequence[ExpectedDeviceClass]
                 ) -> Iterator[tuple[ExpectedDeviceClass, str]]:
    """The kind of device each DeviceClass of the class is for (its offer: a MIG profile, else whole GPUs)."""
    kinds = {device_class_of(resolved, o): kind_of(o) for o in resolved.offers}
    for dc in own:
        yield dc, kinds.get(dc.name, "gpu")


def _select(dc: ExpectedDeviceClass, devices: Iterable[Published]) -> tuple[list[Published], list[str]]:
    """The devices all of the DeviceClass's selectors select (they are ANDed), and the evaluation errors."""
    chosen, errors = [], []
    for d in devices:
        results = [device_cel.matches(e, d.slice.driver, d.device) for e in dc.selectors]
        errors += [f"{d.device.name}: {r.error}" for r in results if r.error]
        if all(r.matches for r in results):
            chosen.append(d)
    return chosen, errors


def unexpected(snapshot: Snapshot, node: Node, node_class: str) -> Iterator[Finding]:
    """A node of a device-plugin class whose GPUs NVIDIA's DRA driver publishes: both would hand them out."""
    if snapshot.slices_unread is not None:
        return
    devices, _ = published(snapshot, node)
    if devices:
        yield Finding("dra-devices-unexpected",
                      f"node {node.name} of device-plugin class {node_class} has {len(devices)} device(s) in "
                      f"ResourceSlices of driver {dra.DRIVER} ({_names(d.device.name for d in devices)}): the DRA "
                      "kubelet plugin runs beside the device plugin, and both hand out the same GPUs",
                      "keep the DRA kubelet plugin to the DRA classes' nodes (the tree's dra-values.yaml "
                      "kubeletPlugin.affinity)", node_class=node_class, subject=f"node/{node.name}")


def _names(names: Iterable[str], shown: int = 4) -> str:
    names = list(names)
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
