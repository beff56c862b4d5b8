"""The admission-policy document: what each node class offers the scheduler, as the rule engine loads it."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from policy.resolved import dra
from policy.resolved.resolve import GPU, Isolation, ResolvedClass, ResolvedPolicy, resolve
from policy.resolved.vgpu_scope import hami_scope
from policy.spec import workload_kinds
from policy.spec.model import SHARING_MODES, ClusterGPUPolicy, RuleId, RuleMode, SharingMode, WorkloadKind

__all__ = ["ADMISSION_POLICY_VERSION", "ALL_RULES", "ALWAYS_ENFORCED", "GPU", "AdmissionPolicy", "ClassDoc",
           "DraClassDoc", "DraDoc", "HamiDoc", "OfferDoc", "TaintDoc", "TenantDoc", "VgpuClassDoc",
           "build_admission_policy"]

ADMISSION_POLICY_VERSION = "gpupolicy.dev/admission/v1"


# --- the admission-policy document (JSON, loaded by the webhook and `gpupolicy admit`) ---------------


class _Doc(BaseModel):
    # defer_build: commands that never validate these documents still import this module, so their
    # validators are built on first use instead of at import (docs/performance.md).
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


class TaintDoc(_Doc):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


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
    taints: tuple[TaintDoc, ...] = ()
    """Taints of the class's nodes: pods that do not tolerate its NoSchedule and NoExecute ones never land there."""


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


class VgpuClassDoc(_Doc):
    """What HAMi's scheduler knows of one vgpu class's GPUs (from the annotation its device plugin writes)."""

    name: str
    gpus: int = Field(ge=0)
    """GPUs per node: the most vGPUs one container can get (each on another GPU)."""
    split_count: int = Field(ge=1)
    card_memory_mib: int = Field(ge=0)
    """Registered MiB per GPU (physical x memoryScaling); 0 when unknown."""
    cores: int = Field(ge=0)
    """Registered SM percent per GPU (100 x coreScaling)."""
    gpu_type: str
    """The device type HAMi registers, matched by nvidia.com/use-gputype."""


class HamiDoc(_Doc):
    """The HAMi install vgpu classes run on, as its webhook and scheduler see pods."""

    scheduler_name: str
    count: str
    memory: str
    memory_percentage: str
    cores: str
    priority: str
    memory_factor: int = Field(ge=1)
    default_gpu_num: int = Field(ge=0)
    scoped: bool
    """True: HAMi's webhook reaches only namespaces whose pods may use vgpu (its count resource is also an
    NVIDIA-plugin resource); False: every namespace."""
    classes: tuple[VgpuClassDoc, ...]


class DraClassDoc(_Doc):
    """One compiled DeviceClass, as claim admission judges requests for it (policy/resolved/dra.py)."""

    name: str
    node_class: str
    mode: str
    devices_per_node: int = Field(ge=0)
    """The most devices of the class one request can get: they all come from the pod's one node."""
    memory_mib: int = Field(ge=0)
    configured: bool
    """The class carries the driver's sharing config, which a claim's own config would override."""
    template: str
    """The ResourceClaimTemplate each namespace that may use the class holds."""
    consumable_shares: int = Field(default=0, ge=0)
    """Claims one device takes (the driver's consumable shares: a time-sliced class's replicas); 0 where its devices
    publish no shares capacity."""


class DraDoc(_Doc):
    """The DRA pool: its DeviceClasses and, per tenant, the ones it may claim (from the spec, compiled once)."""

    classes: tuple[DraClassDoc, ...]
    tenants: dict[str, tuple[str, ...]]
    """Tenant name -> the DeviceClasses it may use."""
    default: tuple[str, ...]
    """The DeviceClasses a namespace no tenant selects may use (admission.defaultAllow)."""


class AdmissionPolicy(_Doc):
    """The compiled admission policy: all the rule engine needs, nothing it must derive."""

    version: Literal["gpupolicy.dev/admission/v1"] = ADMISSION_POLICY_VERSION
    cluster: str
    classes: tuple[ClassDoc, ...]
    tenants: tuple[TenantDoc, ...] = ()
    default_allow: tuple[SharingMode, ...] = SHARING_MODES
    rules: dict[RuleId, RuleMode]
    """Effective mode of every rule."""
    hami: HamiDoc | None = None
    """The HAMi install, when a class uses vgpu."""
    dra: DraDoc | None = None
    """The DRA pool, when a class uses allocation: dra (left out of the JSON otherwise)."""
    workload_kinds: tuple[WorkloadKind, ...] = ()
    """Custom resources whose pod templates are checked (policy/spec/workload_kinds.py and the spec's own)."""

    def to_json(self) -> str:
        """Deterministic JSON: sorted keys, two-space indent, final newline."""
        import json

        data = self.model_dump(mode="json")
        if data.get("dra") is None:
            data.pop("dra", None)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> AdmissionPolicy:
        return cls.model_validate_json(text)


ALL_RULES: tuple[RuleId, ...] = get_args(RuleId)
#: Rules no mode lowers: the API server refuses such objects whatever the webhook says, so `gpupolicy admit` in
#: CI must refuse them too, and an amount the engine cannot read never passes.
ALWAYS_ENFORCED: frozenset[RuleId] = frozenset({"gpu-request-invalid"})


def build_admission_policy(policy: ClusterGPUPolicy | ResolvedPolicy) -> AdmissionPolicy:
    """Compile a checked policy (resolved, or resolved here) into the document the rule engine evaluates
    pods against."""
    resolved = policy if isinstance(policy, ResolvedPolicy) else resolve(policy)
    return resolved.derived(_admission_policy)


def _admission_policy(resolved: ResolvedPolicy) -> AdmissionPolicy:
    spec = resolved.spec
    classes = tuple(_class_doc(c) for c in resolved.classes)
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
    rules = {rule: "enforce" if rule in ALWAYS_ENFORCED else spec.admission.rules.get(rule, spec.admission.enforcement)
             for rule in ALL_RULES}
    return AdmissionPolicy(
        cluster=resolved.name,
        classes=classes,
        tenants=tenants,
        default_allow=spec.admission.default_allow,
        rules=rules,
        hami=_hami_doc(resolved),
        dra=_dra_doc(resolved),
        workload_kinds=workload_kinds.merged(spec.admission.workload_kinds),
    )


def _dra_doc(resolved: ResolvedPolicy) -> DraDoc | None:
    classes = dra.device_classes(resolved)
    if not classes:
        return None
    docs = tuple(DraClassDoc(name=c.name, node_class=c.node_class, mode=c.mode, devices_per_node=c.devices_per_node,
                             memory_mib=c.memory_mib, configured=c.parameters is not None, template=c.template_name,
                             consumable_shares=c.shares if c.mode == "time-slicing" else 0)
                 for c in classes)
    return DraDoc(classes=docs, tenants={t.tenant: t.classes for t in dra.tenants(resolved, classes)},
                  default=dra.default_classes(resolved.spec, classes))


def _hami_doc(resolved: ResolvedPolicy) -> HamiDoc | None:
    if not resolved.vgpu_classes:
        return None
    settings = resolved.spec.hami
    names = settings.resource_names
    classes = tuple(VgpuClassDoc(name=c.name, gpus=c.gpu_count, split_count=c.vgpu.split_count,
                                 card_memory_mib=c.vgpu.card_memory_mib, cores=c.vgpu.cores,
                                 gpu_type=c.vgpu.gpu_type)
                    for c in resolved.vgpu_classes if c.vgpu is not None)
    return HamiDoc(scheduler_name=settings.scheduler_name, count=names.count, memory=names.memory,
                   memory_percentage=names.memory_percentage, cores=names.cores, priority=names.priority,
                   memory_factor=settings.memory_factor, default_gpu_num=settings.default_gpu_num,
                   scoped=hami_scope(resolved).scoped, classes=classes)


def _class_doc(resolved: ResolvedClass) -> ClassDoc:
    # The documents carry the resolved values field for field (properties such as per_node included).
    # A claim-only offer (a DRA class without the extended-resource bridge) is no resource any pod can ask for.
    offer_docs = tuple(OfferDoc(**{name: getattr(o, name) for name in OfferDoc.model_fields})
                       for o in resolved.offers if not o.claim_only)
    fields = {name: getattr(resolved, name) for name in ClassDoc.model_fields if name not in ("offers", "taints")}
    taints = tuple(TaintDoc(**t.model_dump()) for t in resolved.taints)
    return ClassDoc(**fields, offers=offer_docs, taints=taints)
