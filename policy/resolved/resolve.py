"""A policy resolved once: per node class its GPU, sizing, offers and node labels, read by every consumer.

The checks, the advice, the compiler's renderers, the capacity report, `explain`, the admission policy and
`cluster verify` all need the same facts about a class (its catalog entry, how many replicas sizing
yields, what resources its nodes advertise, which labels its nodes carry or need). They are worked out
here, once per policy, and passed around as one frozen value, so no consumer re-derives them and no two
can disagree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from policy.hardware import catalog, dra, drivers, labels, operator, releases, sizing
from policy.hardware.releases import GPU, MIG_PREFIX, Advertised
from policy.spec.model import ClusterGPUPolicy, DevicePlugin, NodeClass, SharingMode, Spec, Taint, Tenant
from policy.vgpu import hami

Isolation = Literal["exclusive", "none", "mps-memory-limit", "mig-hardware", "hami-core"]


@dataclass(frozen=True)
class Offer:
    """One extended resource a class's nodes advertise."""

    resource: str
    devices_per_node: int
    """Physical GPUs, or MIG devices of this profile, per node."""
    replicas: int
    """Schedulable slots per device (1 unless time-sliced or MPS)."""
    memory_mib: int
    """Memory one slot can count on (a replica's share under MPS or sizing; the device's under MIG)."""
    modes: tuple[SharingMode, ...]
    isolation: Isolation
    mig_profile: str | None = None
    fail_requests_greater_than_one: bool = True
    """Whether the device plugin refuses more than one shared replica per container (only matters when shared)."""
    memory_estimated: bool = False
    """The catalog has no nvidia-smi capture of this MIG profile's memory: the figure is an estimate."""
    claim_only: bool = False
    """A DRA class's devices that only ResourceClaims reach: no Kubernetes bridge (DRAExtendedResource off) lets a
    pod ask for ``resource``, so admission offers it to no pod and the report shows the DeviceClass instead."""

    @property
    def per_node(self) -> int:
        return self.devices_per_node * self.replicas

    @property
    def shared(self) -> bool:
        return self.replicas > 1

    @property
    def memory_enforced(self) -> bool:
        """Whether something holds a slot to its memory: a whole device, the MPS daemon's or HAMi-core's limit,
        or an unshared MIG instance (time-sliced replicas share theirs unchecked)."""
        return self.isolation in ("exclusive", "mps-memory-limit", "hami-core") or (
            self.isolation == "mig-hardware" and self.replicas == 1)

    @property
    def mode_name(self) -> str:
        return mode_name(self.modes)

    @property
    def slot_memory_mib(self) -> int:
        """What one slot can count on: the offer's figure, except that the replicas of a time-sliced MIG
        instance split the instance's memory among them (with no limit)."""
        if self.isolation == "mig-hardware":
            return self.memory_mib // self.replicas
        return self.memory_mib

    def describe(self) -> str:
        """``1 GPU x 8 time-slicing replicas``: the offer per node, in words."""
        return describe_offer(self.devices_per_node, self.replicas, self.modes, self.mig_profile)


def mode_name(modes: Iterable[str]) -> str:
    """The one name of a sharing mode everywhere (explain, reports, denials, docs): ``exclusive``,
    ``time-slicing``, ``mps``, ``mig``, and ``mig+time-slicing`` for time-sliced MIG instances, which a tenant
    may use only when it allows both mig and time-slicing."""
    return "+".join(dict.fromkeys(modes))


def class_mode_name(mode: str, offer_modes: Iterable[tuple[str, ...]]) -> str:
    """A class's mode as every output names it: ``mig+time-slicing`` when some of its MIG instances are
    time-sliced, else its spec's mode (whole GPUs a MIG class leaves out of its groups do not rename it)."""
    return "mig+time-slicing" if mode == "mig" and any("time-slicing" in m for m in offer_modes) else mode


def describe_offer(devices_per_node: int, replicas: int, modes: tuple[str, ...], mig_profile: str | None) -> str:
    """``1 GPU x 8 time-slicing replicas``, ``7 1g.12gb MIG devices``: an offer per node, in words."""
    plural = "s" if devices_per_node != 1 else ""
    base = f"{devices_per_node} {mig_profile} MIG device{plural}" if mig_profile else f"{devices_per_node} GPU{plural}"
    if replicas > 1 and "vgpu" in modes:
        base += f" x {replicas} HAMi vGPUs"
    elif replicas > 1:
        base += f" x {replicas} {'MPS' if 'mps' in modes else 'time-slicing'} replicas"
    return base


@dataclass(frozen=True)
class ResolvedVgpu:
    """What HAMi makes of a vgpu class's GPUs: the figures its device plugin registers and its scheduler counts."""

    split_count: int
    """vGPUs per GPU (deviceSplitCount)."""
    memory_scaling: float
    core_scaling: float
    card_memory_mib: int
    """Registered memory per GPU (physical x memoryScaling): the most one vGPU may ask for; 0 when unknown."""
    cores: int
    """Registered SM share per GPU, in percent (100 x coreScaling)."""
    core_policy: hami.CorePolicy
    """The policy HAMi-core enforces on the class: its own, else the cluster's."""
    gpu_type: str
    """The device type HAMi registers (matched by the nvidia.com/use-gputype annotation)."""

    @property
    def disable_core_limit(self) -> bool:
        """Whether the class's device-plugin config switches the SM limit off (device-config disableCoreLimit)."""
        return self.core_policy == "disable"


@dataclass(frozen=True)
class ResolvedClass:
    """A node class resolved against the catalog and the policy's device-plugin settings."""

    spec: NodeClass
    gpu: catalog.GpuModel | None
    """The catalog entry, or None for a model the catalog lacks (then ``gpu.memory`` must be given)."""
    product: str
    """The nvidia.com/gpu.product value of the class's GPUs (the spec's text when the catalog lacks it)."""
    memory_mib: int | None
    """Memory per GPU sizing starts from: the spec's figure, else the catalog's; None when neither knows."""
    sizing: sizing.Sizing | None
    """The replica arithmetic of a sized time-sliced or MPS class (None without sizing or known memory)."""
    replicas: int
    """Time-slicing or MPS replicas per GPU (1 for other modes, or when sizing cannot decide)."""
    offers: tuple[Offer, ...]
    gfd_labels: dict[str, str]
    """The selector's labels plus every label GPU Feature Discovery writes once the class's config is live."""
    feature_discovery: bool
    """Whether GPU Feature Discovery labels the nodes in this cluster (so ``gfd_labels`` can be relied on)."""
    mps_daemon: bool
    """The class runs the MPS control daemon (MPS on a plugin release that has it, v0.15.0+)."""
    mig_config: str | None
    """The mig-parted config the class's nodes select with nvidia.com/mig.config, if any."""
    required_labels: dict[str, str]
    """Labels the compiled output needs on the class's nodes (device-plugin config, MIG config, MPS)."""
    reconciled_labels: dict[str, str] = field(default_factory=dict)
    """The part of ``required_labels`` the tree's label reconciler sets: the rest comes from the GPU Operator
    (all-disabled) or GPU Feature Discovery (mps.capable), which own those keys."""
    mig_manager: bool = False
    """The tree runs NVIDIA's MIG manager on the class's nodes (standalone, and the class selects a MIG config)."""
    vgpu: ResolvedVgpu | None = None
    """HAMi's figures for a vgpu class (None for every other mode)."""
    advertised: tuple[Advertised, ...] = ()
    """Per MIG profile of the layout (by name), what the targeted plugin release advertises its instances as, or
    why it exits at start instead; the offers are built from it (empty for classes without MIG)."""
    whole_gpus: tuple[int, ...] = ()
    """GPU indices of a MIG class that no group partitions: mig-parted turns MIG off on them."""
    driver_gates: tuple[drivers.Gate, ...] = ()
    """What the class's nodes need from the NVIDIA driver: its MIG layouts, the MPS control daemon's memory limit
    (policy/hardware/drivers.py); the checks hold gpu.driverVersion against them, `cluster verify` the nodes'
    drivers."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def node_selector(self) -> dict[str, str]:
        return dict(self.spec.node_selector)

    @property
    def node_labels(self) -> dict[str, str]:
        """Labels every node of the class surely carries: ``gfd_labels`` where GFD runs, else the selector's."""
        return self.gfd_labels if self.feature_discovery else self.node_selector

    @property
    def gpu_count(self) -> int:
        return self.spec.gpu.count

    @property
    def nodes(self) -> int | None:
        return self.spec.nodes

    @property
    def mode(self) -> SharingMode:
        return self.spec.sharing.mode

    @property
    def dra(self) -> bool:
        """NVIDIA's DRA driver serves the class (allocation: dra): its offers are its DeviceClasses' extended
        resources (policy.resolved.dra)."""
        return self.spec.allocation == "dra"

    @property
    def mode_name(self) -> str:
        """The class's mode as every output names it (class_mode_name)."""
        return class_mode_name(self.mode, (o.modes for o in self.offers))

    @property
    def taints(self) -> tuple[Taint, ...]:
        return self.spec.taints

    @property
    def mig_strategy(self) -> Literal["none", "single", "mixed"]:
        return self.spec.mig_strategy

    def offer(self, resource: str) -> Offer | None:
        return next((o for o in self.offers if o.resource == resource), None)


_T = TypeVar("_T")


@dataclass(frozen=True)
class ResolvedPolicy:
    """A policy with every class resolved, in spec order; build it with :func:`resolve`."""

    policy: ClusterGPUPolicy
    classes: tuple[ResolvedClass, ...]
    operator_release: operator.Release | None = None
    """deploy gpu-operator: the operator release (the spec's, else the newest shipping the plugin release); None
    when neither names a release the table knows (a check says so)."""
    default_config: str = ""
    """deploy gpu-operator: the ClusterPolicy's devicePlugin.config.default, a key of the tree's ConfigMap or empty
    (the operator's FALLBACK_STRATEGIES=empty then gives unlabelled nodes whole GPUs). The only class, when there
    is one: its nodes then need no nvidia.com/device-plugin.config label."""
    _derived: dict[Callable[[ResolvedPolicy], Any], Any] = field(default_factory=dict, init=False, repr=False,
                                                                compare=False)

    def derived(self, build: Callable[[ResolvedPolicy], _T]) -> _T:
        """``build(self)``, worked out once for this policy: several compiler targets derive the same document
        from it (the rule engine's admission policy, the ValidatingAdmissionPolicies), and at 1,000 classes each
        build costs a tenth of a second. For results nobody changes: every caller gets the same object."""
        if build not in self._derived:
            self._derived[build] = build(self)
        return self._derived[build]  # type: ignore[no-any-return]

    @property
    def spec(self) -> Spec:
        return self.policy.spec

    @property
    def name(self) -> str:
        return self.policy.metadata.name

    @property
    def plugin_release(self) -> releases.Release:
        """The targeted device-plugin release (for an unknown tag, which the checks refuse, the nearest below)."""
        return releases.behaviour(self.spec.device_plugin.version)

    @property
    def mig_classes(self) -> tuple[ResolvedClass, ...]:
        """The MIG classes, by name."""
        return tuple(sorted((c for c in self.classes if c.spec.sharing.mig is not None), key=lambda c: c.name))

    @property
    def has_mig(self) -> bool:
        return any(c.spec.sharing.mig is not None for c in self.classes)

    @property
    def vgpu_classes(self) -> tuple[ResolvedClass, ...]:
        """The vgpu (HAMi) classes, by name."""
        return tuple(sorted((c for c in self.classes if c.vgpu is not None), key=lambda c: c.name))

    @property
    def plugin_classes(self) -> tuple[ResolvedClass, ...]:
        """The classes NVIDIA's device plugin serves: every class but the vgpu and DRA ones, in spec order."""
        return tuple(c for c in self.classes if c.vgpu is None and not c.dra)

    @property
    def dra_classes(self) -> tuple[ResolvedClass, ...]:
        """The classes NVIDIA's DRA driver serves (allocation: dra), by name."""
        return tuple(sorted((c for c in self.classes if c.dra), key=lambda c: c.name))

    def by_name(self) -> dict[str, ResolvedClass]:
        return {c.name: c for c in self.classes}

    def reachable(self, tenant: Tenant) -> Iterator[tuple[int, ResolvedClass, Offer]]:
        """(class index, class, offer) for every offer a tenant's pods may land on: in a class the tenant may
        use (all, if it names none) and of sharing modes it allows."""
        return self.reachable_with(tenant.allow, tenant.classes)

    def reachable_with(self, allow: Iterable[SharingMode],
                       classes: Iterable[str] = ()) -> Iterator[tuple[int, ResolvedClass, Offer]]:
        """:meth:`reachable` for given modes and classes (the default rules have no Tenant of their own)."""
        allowed, named = set(allow), set(classes)
        for i, resolved in enumerate(self.classes):
            if named and resolved.name not in named:
                continue
            for offer in resolved.offers:
                if set(offer.modes) <= allowed:
                    yield i, resolved, offer


def resolve(policy: ClusterGPUPolicy) -> ResolvedPolicy:
    """Resolve every class of a structurally valid policy; never raises for a policy that fails its checks
    (an unknown GPU or unusable sizing resolves to None figures, which the checks report)."""
    spec = policy.spec
    has_mig = any(nc.sharing.mig is not None for nc in spec.node_classes)
    plugin = spec.device_plugin
    if plugin.deploy != "gpu-operator":
        return ResolvedPolicy(policy, _dra_offers(spec, tuple(_resolve_class(spec, nc, has_mig, "")
                                                            for nc in spec.node_classes)))
    wanted = plugin.operator.version
    release = operator.release(wanted) if wanted else operator.shipping(plugin.version_tuple)
    # A vgpu class gets no operator config (HAMi's plugin serves it), so it can never be the default one.
    only = spec.node_classes[0] if len(spec.node_classes) == 1 else None
    default = only.name if only is not None and only.sharing.vgpu is None else ""
    classes = _dra_offers(spec, tuple(_resolve_class(spec, nc, has_mig, default) for nc in spec.node_classes))
    return ResolvedPolicy(policy, classes, release, default)


def kubernetes_gate_on(spec: Spec, gate: str) -> bool:
    """Whether a Kubernetes feature gate of policy/hardware/dra.py is on: by default from its release, or listed in
    spec.dra.kubernetesFeatureGates (the cluster turns it on)."""
    return spec.kubernetes_minor >= dra.KUBERNETES_GATES[gate].default_on or gate in spec.dra.kubernetes_feature_gates


def bridge_available(spec: Spec) -> bool:
    """DeviceClass.spec.extendedResourceName works: DRAExtendedResource is on (alpha 1.34, on by default 1.36;
    k8s.io/api resource/v1/types.go v0.34.10 L1692 ``+featureGate=DRAExtendedResource``)."""
    return kubernetes_gate_on(spec, "DRAExtendedResource")


def _bridge_candidate(offer: Offer) -> str | None:
    """The extended resource a pod of the device plugin's world asks for this offer by: whole GPUs and unshared MIG
    devices only (a bridged claim carries no config of its own, and a shared one's count semantics differ)."""
    return offer.resource if offer.replicas == 1 and offer.modes in (("exclusive",), ("mig",)) else None


def _dra_offers(spec: Spec, classes: tuple[ResolvedClass, ...]) -> tuple[ResolvedClass, ...]:
    """DRA classes offer their DeviceClasses' extended resources (KEP-5004): the device plugin's name
    (nvidia.com/gpu, nvidia.com/mig-1g.10gb) where extendedResourceName can carry it and no other class offers it,
    else the implicit deviceclass.resource.kubernetes.io/<class> (reference dra-hami.md A5); both only where the
    bridge is on, the offers being claim-only elsewhere."""
    if not any(c.dra for c in classes):
        return classes
    taken = {o.resource for c in classes if not c.dra for o in c.offers}
    wanted = Counter(name for c in classes if c.dra for o in c.offers if (name := _bridge_candidate(o)))
    bridged = bridge_available(spec)

    def rename(offer: Offer, node_class: str) -> Offer:
        name = _bridge_candidate(offer)
        if bridged and name is not None and name not in taken and wanted[name] == 1:
            return offer
        device_class = dra.device_class_name(node_class, mode_name(offer.modes), offer.mig_profile)
        # Without the bridge the implicit name is no resource a pod can ask for (the scheduler maps it only where
        # DRAExtendedResource is on, as it does extendedResourceName): the offer stays, for claims alone.
        return replace(offer, resource=dra.implicit_resource(device_class), claim_only=not bridged)

    return tuple(replace(c, offers=tuple(rename(o, c.name) for o in c.offers)) if c.dra else c for c in classes)


def _resolve_class(spec: Spec, node_class: NodeClass, has_mig: bool, default_config: str) -> ResolvedClass:
    plugin = spec.device_plugin
    release = releases.behaviour(plugin.version)
    model = catalog.lookup(node_class.gpu.model)
    product = model.product if model else node_class.gpu.model
    memory = int(node_class.gpu.memory) if node_class.gpu.memory is not None else (model.memory_mib if model else None)
    computed = _sizing(node_class, memory)
    replicas = _replicas(node_class, computed)
    vgpu = _vgpu(spec, node_class, product, memory, replicas)
    advertised = _advertised(release, node_class, model)
    whole = _whole_gpus(node_class)
    offers = _offers(spec, release, node_class, model, memory, computed, replicas, vgpu, advertised, whole)
    # Under DRA the driver starts an MPS daemon per claim (dra-hami.md A3), not the device plugin's per node.
    mps_daemon = node_class.sharing.mps is not None and release.mps != "absent" and node_class.allocation != "dra"
    mig_config = _mig_config(plugin, node_class, model, has_mig)
    required = _required_labels(plugin, node_class, mig_config, mps_daemon, default_config)
    return ResolvedClass(
        spec=node_class,
        gpu=model,
        product=product,
        memory_mib=memory,
        sizing=computed,
        replicas=replicas,
        offers=offers,
        gfd_labels=_gfd_labels(node_class, product, offers),
        feature_discovery=plugin.labels_nodes,
        mps_daemon=mps_daemon,
        mig_config=mig_config,
        required_labels=required,
        reconciled_labels=_reconciled_labels(plugin, required),
        mig_manager=plugin.deploy == "standalone" and mig_config is not None,
        advertised=advertised,
        whole_gpus=whole,
        vgpu=vgpu,
        driver_gates=_driver_gates(node_class, product, mps_daemon),
    )


def _driver_gates(node_class: NodeClass, product: str, mps_daemon: bool) -> tuple[drivers.Gate, ...]:
    mig = node_class.sharing.mig
    layouts = [layout for _, layout in mig.layouts(node_class.gpu.count)] if mig is not None else []
    return drivers.class_gates(product, layouts, mps_memory_limit=mps_daemon)


def _vgpu(spec: Spec, node_class: NodeClass, product: str, memory: int | None,
          split: int) -> ResolvedVgpu | None:
    settings = node_class.sharing.vgpu
    if settings is None:
        return None
    return ResolvedVgpu(
        split_count=split,
        memory_scaling=settings.memory_scaling,
        core_scaling=settings.core_scaling,
        card_memory_mib=hami.registered_memory(memory, settings.memory_scaling) if memory else 0,
        cores=hami.registered_cores(settings.core_scaling),
        core_policy=settings.core_policy or spec.hami.core_policy,
        gpu_type=hami.device_type(product),
    )


def _sizing(node_class: NodeClass, total: int | None) -> sizing.Sizing | None:
    # vgpu sizing starts from the physical memory too: memoryScaling changes HAMi's accounting, not what fits.
    shared = node_class.sharing.time_slicing or node_class.sharing.mps or node_class.sharing.vgpu
    if shared is None or shared.sizing is None or total is None:
        return None
    reserve = shared.sizing.reserve
    try:
        if reserve.endswith("%"):
            return sizing.size_replicas(total, int(shared.sizing.memory_per_replica),
                                        reserve_percent=sizing.parse_percent(reserve))
        return sizing.size_replicas(total, int(shared.sizing.memory_per_replica),
                                    reserve_mib=sizing.parse_memory_mib(reserve))
    except ValueError:
        return None  # a reserve the GPU cannot hold: check_sizing says so


def _replicas(node_class: NodeClass, computed: sizing.Sizing | None) -> int:
    """Replicas per GPU: time-slicing or MPS replicas, or a vgpu class's splitCount."""
    vgpu = node_class.sharing.vgpu
    shared = node_class.sharing.time_slicing or node_class.sharing.mps
    given = vgpu.split_count if vgpu is not None else shared.replicas if shared is not None else 1
    if given is not None:
        return given
    return computed.replicas if computed else 1


def _offers(spec: Spec, release: releases.Release, node_class: NodeClass, model: catalog.GpuModel | None,
            memory: int | None, computed: sizing.Sizing | None, replicas: int, vgpu: ResolvedVgpu | None,
            advertised: tuple[Advertised, ...], whole: tuple[int, ...]) -> tuple[Offer, ...]:
    sharing = node_class.sharing
    count = node_class.gpu.count
    if sharing.mig is not None:
        offers = _mig_offers(node_class, model, advertised)
        if whole and sharing.mig.strategy == "mixed":
            # mig-parted turns MIG off on GPUs no group names; mixed advertises them whole (device-plugin.md §2.2).
            offers += (Offer(GPU, len(whole), 1, memory or 0, ("exclusive",), "exclusive"),)
        return offers
    if vgpu is not None:
        # HAMi advertises GPUs x splitCount of its count resource. A container's N vGPUs sit on N different
        # GPUs (Fit takes one device per vGPU), so asking for several is legitimate: no failRequestsGreaterThanOne.
        share = computed.per_replica_mib if computed else vgpu.card_memory_mib // max(replicas, 1)
        return (Offer(spec.hami.resource_names.count, count, replicas, share, ("vgpu",), "hami-core", None, False),)
    shared = sharing.time_slicing or sharing.mps
    if shared is None:
        return (Offer(GPU, count, 1, memory or 0, ("exclusive",), "exclusive"),)
    per_slot = computed.per_replica_mib if computed else (memory or 0) // max(replicas, 1)
    resource = f"{GPU}.shared" if shared.rename_by_default and replicas > 1 else GPU
    strict = shared.fail_requests_greater_than_one
    if sharing.mps is not None:
        # v0.15 to v0.19 force failRequestsGreaterThanOne for MPS, whatever the file says (releases.py).
        strict = strict or release.mps == "forced"
        # The MPS control daemon pins each client to total / replicas, whatever sizing asked for
        # (cmd/mps-control-daemon; device-plugin.md §3): that is what a slot can count on.
        limit = (memory or 0) // max(replicas, 1)
        return (Offer(resource, count, replicas, limit, ("mps",), "mps-memory-limit", None, strict),)
    return (Offer(resource, count, replicas, per_slot, ("time-slicing",), "none", None, strict),)


def _advertised(release: releases.Release, node_class: NodeClass,
                model: catalog.GpuModel | None) -> tuple[Advertised, ...]:
    """What the release advertises each layout profile as; profiles the catalog lacks (which the checks refuse)
    keep their own names."""
    mig = node_class.sharing.mig
    if mig is None:
        return ()
    geometry = model.mig if model else None
    found = []
    for name in sorted({p for _, layout in mig.layouts(node_class.gpu.count) for p in layout}):
        profile = geometry.profile(name) if geometry else None
        if geometry is None or profile is None:
            found.append(Advertised(name, releases.mig_resource(name, mig.strategy)))
        else:
            found.append(releases.advertise(release, geometry, profile, mig.strategy))
    return tuple(found)


def _whole_gpus(node_class: NodeClass) -> tuple[int, ...]:
    mig = node_class.sharing.mig
    if mig is None or mig.groups is None:
        return ()
    grouped = {gpu for gpus, _ in mig.layouts(node_class.gpu.count) for gpu in gpus}
    return tuple(i for i in range(node_class.gpu.count) if i not in grouped)


def _mig_offers(node_class: NodeClass, model: catalog.GpuModel | None,
                advertised: tuple[Advertised, ...]) -> tuple[Offer, ...]:
    """One offer per resource the release really advertises: profiles it folds into one resource share it, and
    profiles it cannot start with offer nothing (the checks refuse both)."""
    mig = node_class.sharing.mig
    assert mig is not None
    totals: dict[str, int] = {}
    for gpus, layout in mig.layouts(node_class.gpu.count):
        for profile, n in layout.items():
            totals[profile] = totals.get(profile, 0) + n * len(gpus)
    by_resource: dict[str, list[str]] = {}
    for outcome in advertised:
        if outcome.resource is not None:
            by_resource.setdefault(outcome.resource, []).append(outcome.profile)
    offers = []
    for resource, profiles in sorted(by_resource.items()):
        # The offer names the profile the resource is spelt after when it is there (1g.10gb beside 1g.10gb+me).
        named = sorted(profiles, key=lambda p: (releases.mig_resource(p, mig.strategy) != resource, p))[0]
        replicas = max(mig.time_slicing.get(p, 1) for p in profiles)
        found = [model.mig.profile(p) for p in profiles] if model and model.mig else []
        memory = min((f.memory_mib for f in found if f), default=0)
        modes: tuple[SharingMode, ...] = ("mig", "time-slicing") if replicas > 1 else ("mig",)
        offers.append(Offer(resource, sum(totals[p] for p in profiles), replicas, memory, modes, "mig-hardware",
                            named, mig.fail_requests_greater_than_one, any(f and f.memory_estimated for f in found)))
    return tuple(offers)


def _gfd_labels(node_class: NodeClass, product: str, offers: tuple[Offer, ...]) -> dict[str, str]:
    """The node's own selector labels plus the GPU Feature Discovery labels sharing will produce."""
    found = dict(node_class.node_selector)
    found.setdefault("nvidia.com/gpu.present", "true")
    mig = node_class.sharing.mig
    if node_class.sharing.vgpu is not None:
        # HAMi has no GFD integration: GFD (where it runs) labels these GPUs as unshared.
        found.setdefault("nvidia.com/gpu.product", product)
        found.setdefault("nvidia.com/gpu.count", str(node_class.gpu.count))
    elif mig is None:
        offer = offers[0]
        shared_product = offer.shared and offer.resource == GPU  # GFD appends -SHARED unless renamed
        found.setdefault("nvidia.com/gpu.product", f"{product}-SHARED" if shared_product else product)
        found.setdefault("nvidia.com/gpu.count", str(node_class.gpu.count))
        found.setdefault("nvidia.com/gpu.replicas", str(offer.replicas))
    else:
        found.setdefault("nvidia.com/mig.strategy", mig.strategy)
        if mig.strategy == "single" and offers:
            suffix = "-SHARED" if offers[0].shared else ""
            if "+" not in (offers[0].mig_profile or ""):  # attribute profiles' product text is unverified
                found.setdefault("nvidia.com/gpu.product", f"{product}-MIG-{offers[0].mig_profile}{suffix}")
            found.setdefault("nvidia.com/gpu.count", str(offers[0].devices_per_node))
        else:
            found.setdefault("nvidia.com/gpu.product", product)
            found.setdefault("nvidia.com/gpu.count", str(node_class.gpu.count))
            for offer in offers:
                _mixed_profile_labels(found, product, offer)
    return found


def _mixed_profile_labels(found: dict[str, str], product: str, offer: Offer) -> None:
    """GFD's per-profile labels under the mixed strategy (device-plugin.md §6), keyed by the resource name.

    GFD names MIG resources after the device's profile, not after the plugin's patterns (dp@v0.15.0:
    internal/resource/nvml-mig-device.go:96-104), so where the release advertises a profile under another name
    (releases.py) the labels cannot be predicted from the offer, and none are claimed."""
    if offer.mig_profile is None or offer.resource != MIG_PREFIX + offer.mig_profile.replace("+", "."):
        return
    key = offer.resource
    found.setdefault(f"{key}.count", str(offer.devices_per_node))
    found.setdefault(f"{key}.replicas", str(offer.replicas))
    if offer.mig_profile and "+" not in offer.mig_profile:  # attribute profiles' product text is unverified
        suffix = "-SHARED" if offer.shared else ""
        found.setdefault(f"{key}.product", f"{product}-MIG-{offer.mig_profile}{suffix}")


def _mig_config(plugin: DevicePlugin, node_class: NodeClass, model: catalog.GpuModel | None,
                has_mig: bool) -> str | None:
    """The mig-parted config a class's nodes must select with nvidia.com/mig.config, if any.

    MIG classes select their own layout.  Other classes on MIG-capable GPUs select all-disabled when a
    mig-manager reads our config (the operator always runs one): MPS fails on MIG-enabled GPUs and a
    left-over MIG mode would hide the whole GPU (device-plugin.md §3).
    """
    if node_class.sharing.mig is not None:
        return node_class.name
    managed = plugin.deploy == "gpu-operator" or has_mig
    if model is not None and model.mig_capable and managed:
        return labels.MIG_ALL_DISABLED
    return None


def _required_labels(plugin: DevicePlugin, node_class: NodeClass, mig_config: str | None,
                     mps_daemon: bool, default_config: str) -> dict[str, str]:
    """The labels the compiled output needs on the class's nodes.

    gpu-operator: the config-manager picks the config named by nvidia.com/device-plugin.config (§4), or the
    ClusterPolicy's devicePlugin.config.default on a node without it.
    MIG: mig-manager applies the layout named by nvidia.com/mig.config (mig.md §5).  Standalone MPS: the
    control daemon runs only where nvidia.com/mps.capable=true (Helm chart nodeSelector).
    """
    found: dict[str, str] = {}
    if plugin.deploy == "gpu-operator" and (node_class.sharing.vgpu is not None or node_class.allocation == "dra"):
        # HAMi's device plugin or NVIDIA's DRA kubelet plugin serves these nodes: the operator's must not run there
        # too (HAMi FAQ; the DRA chart refuses to share a node with it, dra-hami.md A1; GPU Operator per-node deploy
        # labels).
        found[labels.DEVICE_PLUGIN_DEPLOY] = "false"
    elif plugin.deploy == "gpu-operator" and node_class.name != default_config:
        found[labels.DEVICE_PLUGIN_CONFIG] = node_class.name
    if mig_config is not None:
        found[labels.MIG_CONFIG] = mig_config
    if plugin.deploy == "standalone" and mps_daemon:
        found[labels.MPS_CAPABLE] = "true"
    return dict(sorted(found.items()))


def _reconciled_labels(plugin: DevicePlugin, required: dict[str, str]) -> dict[str, str]:
    """The labels gpupolicy's reconciler owns on a class's nodes; every other required label has an owner already.

    - nvidia.com/mig.config=all-disabled under the operator: the operator itself labels MIG-capable nodes that lack
      it when migManager.config.default is all-disabled (gpu-operator controllers/state_manager.go), which the tree
      sets. A MIG layout cannot be a default (the CRD's enum is all-disabled or ""), so MIG classes need the label.
    - nvidia.com/mps.capable: GPU Feature Discovery writes it (through NFD) where it runs with the class's config,
      and would overwrite ours; only without GFD does the reconciler set it.
    """
    found = dict(required)
    operator_mode = plugin.deploy == "gpu-operator"
    if operator_mode and found.get(labels.MIG_CONFIG) == labels.MIG_ALL_DISABLED:
        del found[labels.MIG_CONFIG]
    if plugin.labels_nodes:
        found.pop(labels.MPS_CAPABLE, None)
    return found
