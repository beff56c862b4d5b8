"""What each node class offers the scheduler, and the admission-policy document built from it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from policy import catalog, sizing
from policy.model import SHARING_MODES, ClusterGPUPolicy, NodeClass, RuleId, RuleMode, SharingMode, Tenant

ADMISSION_POLICY_VERSION = "gpupolicy.dev/admission/v1"
Isolation = Literal["exclusive", "none", "mps-memory-limit", "mig-hardware"]
GPU = "nvidia.com/gpu"


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
    memory_estimated: bool = False
    """The catalog has no nvidia-smi capture of this MIG profile's memory: the figure is an estimate."""
    """Whether the device plugin refuses more than one shared replica per container (only matters when shared)."""

    @property
    def per_node(self) -> int:
        return self.devices_per_node * self.replicas

    @property
    def shared(self) -> bool:
        return self.replicas > 1


@dataclass(frozen=True)
class ClassOffers:
    """A node class resolved against the catalog: its GPUs, sizing, offers and known node labels."""

    name: str
    node_selector: dict[str, str]
    gpu: catalog.GpuModel | None
    product: str
    gpu_count: int
    memory_mib: int | None
    mode: SharingMode
    mig_strategy: Literal["none", "single", "mixed"]
    offers: tuple[Offer, ...]
    node_labels: dict[str, str]
    """Labels every node of the class carries once configured: its selector plus what GFD will write."""
    sizing: sizing.Sizing | None
    nodes: int | None
    feature_discovery: bool = True
    """Whether GPU Feature Discovery labels the nodes (so node_labels includes its labels)."""

    def offer(self, resource: str) -> Offer | None:
        return next((o for o in self.offers if o.resource == resource), None)


def describe_offer(devices_per_node: int, replicas: int, modes: tuple[str, ...], mig_profile: str | None) -> str:
    """``1 GPU x 8 time-slicing replicas``, ``7 1g.12gb MIG devices``: an offer per node, in words."""
    plural = "s" if devices_per_node != 1 else ""
    base = f"{devices_per_node} {mig_profile} MIG device{plural}" if mig_profile else f"{devices_per_node} GPU{plural}"
    if replicas > 1:
        base += f" x {replicas} {'MPS' if 'mps' in modes else 'time-slicing'} replicas"
    return base


def reachable_offers(node_classes: tuple[NodeClass, ...], tenant: Tenant) -> Iterator[tuple[int, NodeClass, Offer]]:
    """(class index, class, offer) for every offer a tenant's pods may land on: in a class the tenant may use
    (all, if it names none) and of sharing modes it allows."""
    allowed = set(tenant.allow)
    for i, nc in enumerate(node_classes):
        if tenant.classes and nc.name not in tenant.classes:
            continue
        for offer in resolve_class(nc).offers:
            if set(offer.modes) <= allowed:
                yield i, nc, offer


def gpu_memory_mib(node_class: NodeClass) -> int | None:
    """The memory sizing starts from: the class's own figure, else the catalog's."""
    if node_class.gpu.memory is not None:
        return int(node_class.gpu.memory)
    model = catalog.lookup(node_class.gpu.model)
    return model.memory_mib if model else None


def replica_sizing(node_class: NodeClass) -> sizing.Sizing | None:
    """The sizing arithmetic of a time-sliced or MPS class that asks for it, if memory is known."""
    shared = node_class.sharing.time_slicing or node_class.sharing.mps
    total = gpu_memory_mib(node_class)
    if shared is None or shared.sizing is None or total is None:
        return None
    reserve = shared.sizing.reserve
    if reserve.endswith("%"):
        return sizing.size_replicas(total, int(shared.sizing.memory_per_replica),
                                    reserve_percent=sizing.parse_percent(reserve))
    return sizing.size_replicas(total, int(shared.sizing.memory_per_replica),
                                reserve_mib=sizing.parse_memory_mib(reserve))


def replicas_per_gpu(node_class: NodeClass, computed: sizing.Sizing | None = None) -> int:
    """Replicas per GPU of a time-sliced or MPS class (1 when sizing cannot decide); pass ``computed`` when
    the class's replica_sizing is already at hand."""
    shared = node_class.sharing.time_slicing or node_class.sharing.mps
    if shared is None:
        return 1
    if shared.replicas is not None:
        return shared.replicas
    computed = computed or replica_sizing(node_class)
    return computed.replicas if computed else 1


def resolve_class(node_class: NodeClass, *, feature_discovery: bool = True) -> ClassOffers:
    """Everything a class offers; assumes the policy passed its checks.

    Without ``feature_discovery`` the nodes carry only their selector labels: no GFD label is predicted."""
    model = catalog.lookup(node_class.gpu.model)
    product = model.product if model else node_class.gpu.model
    memory = gpu_memory_mib(node_class)
    computed = replica_sizing(node_class)
    offers = _offers(node_class, model, memory, computed)
    return ClassOffers(
        name=node_class.name,
        node_selector=dict(node_class.node_selector),
        gpu=model,
        product=product,
        gpu_count=node_class.gpu.count,
        memory_mib=memory,
        mode=node_class.sharing.mode,
        mig_strategy=node_class.mig_strategy,
        offers=offers,
        node_labels=_node_labels(node_class, product, offers) if feature_discovery else dict(node_class.node_selector),
        feature_discovery=feature_discovery,
        sizing=computed,
        nodes=node_class.nodes,
    )


def _offers(node_class: NodeClass, model: catalog.GpuModel | None, memory: int | None,
            computed: sizing.Sizing | None) -> tuple[Offer, ...]:
    sharing = node_class.sharing
    count = node_class.gpu.count
    if sharing.mig is not None:
        return _mig_offers(node_class, model)
    shared = sharing.time_slicing or sharing.mps
    if shared is None:
        return (Offer(GPU, count, 1, memory or 0, ("exclusive",), "exclusive"),)
    replicas = replicas_per_gpu(node_class, computed)
    per_slot = computed.per_replica_mib if computed else (memory or 0) // max(replicas, 1)
    resource = f"{GPU}.shared" if shared.rename_by_default and replicas > 1 else GPU
    strict = shared.fail_requests_greater_than_one
    if sharing.mps is not None:
        # The MPS control daemon pins each client to total / replicas, whatever sizing asked for
        # (cmd/mps-control-daemon; device-plugin.md §3): that is what a slot can count on.
        limit = (memory or 0) // max(replicas, 1)
        return (Offer(resource, count, replicas, limit, ("mps",), "mps-memory-limit", None, strict),)
    return (Offer(resource, count, replicas, per_slot, ("time-slicing",), "none", None, strict),)


def _mig_offers(node_class: NodeClass, model: catalog.GpuModel | None) -> tuple[Offer, ...]:
    mig = node_class.sharing.mig
    assert mig is not None
    totals: dict[str, int] = {}
    for gpus, layout in mig.layouts(node_class.gpu.count):
        for profile, n in layout.items():
            totals[profile] = totals.get(profile, 0) + n * len(gpus)
    offers = []
    for profile, devices in sorted(totals.items()):
        replicas = mig.time_slicing.get(profile, 1)
        found = model.mig.profile(profile) if model and model.mig else None
        memory = found.memory_mib if found else 0
        resource = GPU if mig.strategy == "single" else f"nvidia.com/mig-{profile.replace('+', '.')}"
        modes: tuple[SharingMode, ...] = ("mig", "time-slicing") if replicas > 1 else ("mig",)
        offers.append(Offer(resource, devices, replicas, memory, modes, "mig-hardware", profile,
                            mig.fail_requests_greater_than_one, bool(found and found.memory_estimated)))
    return tuple(offers)


def _node_labels(node_class: NodeClass, product: str, offers: tuple[Offer, ...]) -> dict[str, str]:
    """The node's own selector labels plus the GPU Feature Discovery labels sharing will produce."""
    labels = dict(node_class.node_selector)
    labels.setdefault("nvidia.com/gpu.present", "true")
    mig = node_class.sharing.mig
    if mig is None:
        offer = offers[0]
        shared_product = offer.shared and offer.resource == GPU  # GFD appends -SHARED unless renamed
        labels.setdefault("nvidia.com/gpu.product", f"{product}-SHARED" if shared_product else product)
        labels.setdefault("nvidia.com/gpu.count", str(node_class.gpu.count))
        labels.setdefault("nvidia.com/gpu.replicas", str(offer.replicas))
    else:
        labels.setdefault("nvidia.com/mig.strategy", mig.strategy)
        if mig.strategy == "single" and offers:
            suffix = "-SHARED" if offers[0].shared else ""
            labels.setdefault("nvidia.com/gpu.product", f"{product}-MIG-{offers[0].mig_profile}{suffix}")
            labels.setdefault("nvidia.com/gpu.count", str(offers[0].devices_per_node))
        else:
            labels.setdefault("nvidia.com/gpu.product", product)
            labels.setdefault("nvidia.com/gpu.count", str(node_class.gpu.count))
            for offer in offers:
                _mixed_profile_labels(labels, product, offer)
    return labels


def _mixed_profile_labels(labels: dict[str, str], product: str, offer: Offer) -> None:
    """GFD's per-profile labels under the mixed strategy (device-plugin.md §6), keyed by the resource name."""
    key = offer.resource
    labels.setdefault(f"{key}.count", str(offer.devices_per_node))
    labels.setdefault(f"{key}.replicas", str(offer.replicas))
    if offer.mig_profile and "+" not in offer.mig_profile:  # attribute profiles' product text is unverified
        suffix = "-SHARED" if offer.shared else ""
        labels.setdefault(f"{key}.product", f"{product}-MIG-{offer.mig_profile}{suffix}")


# --- the admission-policy document (JSON, loaded by the webhook and `gpupolicy admit`) ---------------


class _Doc(BaseModel):
    # defer_build: `gpupolicy validate` imports this module for resolve_class but never validates these
    # documents, so their validators are built on first use instead of at import (docs/performance.md).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class OfferDoc(_Doc):
    resource: str
    per_node: int = Field(ge=0)
    devices_per_node: int = Field(ge=0)
    replicas: int = Field(ge=1)
    memory_mib: int = Field(ge=0)
    shared: bool
    modes: tuple[SharingMode, ...]
    isolation: Isolation
    mig_profile: str | None = None
    fail_requests_greater_than_one: bool = True


class ClassDoc(_Doc):
    name: str
    node_selector: dict[str, str]
    node_labels: dict[str, str]
    product: str
    gpu_count: int
    mode: SharingMode
    mig_strategy: Literal["none", "single", "mixed"]
    offers: tuple[OfferDoc, ...]
    feature_discovery: bool = True
    """False when GPU Feature Discovery does not label the nodes: nvidia.com/gpu.* labels are then absent."""


class SelectorRequirementDoc(_Doc):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


class TenantDoc(_Doc):
    name: str
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[SelectorRequirementDoc, ...] = ()
    allow: tuple[SharingMode, ...]
    classes: tuple[str, ...] = ()


class AdmissionPolicy(_Doc):
    """The compiled admission policy: all the rule engine needs, nothing it must derive."""

    version: Literal["gpupolicy.dev/admission/v1"] = ADMISSION_POLICY_VERSION
    cluster: str
    classes: tuple[ClassDoc, ...]
    tenants: tuple[TenantDoc, ...] = ()
    default_allow: tuple[SharingMode, ...] = SHARING_MODES
    rules: dict[RuleId, RuleMode]
    """Effective mode of every rule."""

    def to_json(self) -> str:
        """Deterministic JSON: sorted keys, two-space indent, final newline."""
        import json

        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> AdmissionPolicy:
        return cls.model_validate_json(text)


ALL_RULES: tuple[RuleId, ...] = get_args(RuleId)


def build_admission_policy(policy: ClusterGPUPolicy) -> AdmissionPolicy:
    """Compile a checked policy into the document the rule engine evaluates pods against."""
    spec = policy.spec
    labels_nodes = spec.device_plugin.labels_nodes
    classes = tuple(_class_doc(resolve_class(nc, feature_discovery=labels_nodes)) for nc in spec.node_classes)
    tenants = tuple(
        TenantDoc(
            name=t.name,
            match_labels=dict(t.namespace_selector.match_labels),
            match_expressions=tuple(
                SelectorRequirementDoc(key=e.key, operator=e.operator, values=e.values)
                for e in t.namespace_selector.match_expressions
            ),
            allow=t.allow,
            classes=t.classes,
        )
        for t in spec.tenants
    )
    rules = {rule: spec.admission.rules.get(rule, spec.admission.enforcement) for rule in ALL_RULES}
    return AdmissionPolicy(
        cluster=policy.metadata.name,
        classes=classes,
        tenants=tenants,
        default_allow=spec.admission.default_allow,
        rules=rules,
    )


def _class_doc(resolved: ClassOffers) -> ClassDoc:
    # The documents carry the resolved values field for field (properties such as per_node included).
    offer_docs = tuple(OfferDoc(**{name: getattr(o, name) for name in OfferDoc.model_fields}) for o in resolved.offers)
    fields = {name: getattr(resolved, name) for name in ClassDoc.model_fields if name != "offers"}
    return ClassDoc(**fields, offers=offer_docs)
