"""Advice: where a valid spec contradicts the sharing-mode decision matrix (warnings and infos, never errors)."""

# The decision matrix (docs/sharing-modes.md) comes from the seed articles: MIG for isolated multi-tenant
# inference, MPS plus time-slicing for light inference, time-slicing for development, whole GPUs for
# training. Time-slicing has no memory or fault isolation and costs ~10-15% in context switches; MIG costs
# ~2-3% and isolates memory, compute and faults in hardware (seed 003). Advice never blocks a compile: it
# is what `gpupolicy explain` prints under each class, and every code is documented in
# docs/sharing-modes.md ("Advice codes").

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Literal

from policy.hardware import catalog
from policy.resolved.resolve import GPU, ResolvedClass, ResolvedPolicy, resolve
from policy.spec.diagnostics import Diagnostic, Severity
from policy.spec.model import ClusterGPUPolicy, NodeClass, ReplicatedSharing, Tenant

__all__ = ["CODES", "MIN_UNSIZED_SHARE_MIB", "AdviceCode", "advise"]

AdviceCode = Literal[
    "production-tenant-without-memory-isolation",
    "mig-capable-gpu-time-sliced",
    "time-slicing-without-sizing",
    "fail-requests-greater-than-one-disabled",
    "rename-by-default-breaks-requests",
    "mps-on-pre-volta",
    "training-on-shared-gpus",
    "single-replica-webhook",
    "failure-policy-ignore",
]

#: Every advice code with its severity and a one-line explanation (rendered into the docs).
CODES: dict[AdviceCode, tuple[Severity, str]] = {
    "production-tenant-without-memory-isolation": (
        "warning",
        "a tenant marked production: true may land on time-sliced or MPS GPUs, which share memory and faults",
    ),
    "mig-capable-gpu-time-sliced": (
        "info",
        "a MIG-capable GPU is time-sliced or MPS-shared for a production tenant; MIG would isolate it",
    ),
    "time-slicing-without-sizing": (
        "warning",
        "replicas are given without a memory basis and leave each replica less than 4 GiB",
    ),
    "fail-requests-greater-than-one-disabled": (
        "info",
        "failRequestsGreaterThanOne: false lets a container take several replicas that buy no extra compute",
    ),
    "rename-by-default-breaks-requests": (
        "info",
        "renameByDefault advertises nvidia.com/gpu.shared, so pods asking for nvidia.com/gpu no longer fit",
    ),
    "mps-on-pre-volta": (
        "warning",
        "MPS on a pre-Volta GPU: clients share one address space, so one faulting client takes down all",
    ),
    "training-on-shared-gpus": (
        "info",
        "a class or tenant named for training shares its GPUs; training wants whole GPUs",
    ),
    "single-replica-webhook": (
        "info",
        "one webhook replica: a drain or rollout of that pod blocks (or, with Ignore, skips) GPU admission",
    ),
    "failure-policy-ignore": (
        "info",
        "failurePolicy: Ignore admits GPU workloads unchecked whenever the webhook is unreachable",
    ),
}

#: Below this share of GPU memory per replica, a replica count given without sizing is suspect: the
#: inference processes seed 003 measured needed 4401 MiB (T4) and 4621 MiB (L20) each.
MIN_UNSIZED_SHARE_MIB = 4096

_SHARED_ISOLATION = frozenset({"none", "mps-memory-limit", "hami-core"})
# Pascal, Maxwell and Kepler product labels (Tesla-P100-PCIE-16GB, Tesla-P4, Quadro-P4000, Tesla-M60,
# Tesla-K80): MPS before Volta has no per-client address space (CUDA MPS guide, "Volta MPS").
_PRE_VOLTA_PRODUCT = re.compile(r"^(?:NVIDIA-)?(?:Tesla-|Quadro-|GRID-)?[KMP]\d{1,4}(?:[A-Za-z]*)(?:-|$)", re.I)
_TRAINING_WORD = re.compile(r"(?:^|[^a-z])train(?:ing)?(?:[^a-z]|$)", re.I)

Path = tuple[str | int, ...]


def _d(code: AdviceCode, message: str, path: Path, hint: str) -> Diagnostic:
    return Diagnostic(code, message, path, hint, severity=CODES[code][0])


def _shared_name(nc: NodeClass) -> tuple[str, ReplicatedSharing] | None:
    """The spec key and settings of a time-sliced or MPS class."""
    if nc.sharing.time_slicing is not None:
        return "timeSlicing", nc.sharing.time_slicing
    if nc.sharing.mps is not None:
        return "mps", nc.sharing.mps
    return None


def _reachable_offers(resolved: ResolvedPolicy, tenant: Tenant) -> Iterator[tuple[int, ResolvedClass, str, str]]:
    """(class index, class, offer's modes, isolation) for every offer the tenant's pods may land on."""
    for i, rc, offer in resolved.reachable(tenant):
        yield i, rc, "+".join(offer.modes), offer.isolation


def advise_production_tenants(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for t, tenant in enumerate(policy.spec.tenants):
        if not tenant.production:
            continue
        shared = sorted({f"{nc.name} ({modes})" for _, nc, modes, iso in _reachable_offers(resolved, tenant)
                         if iso in _SHARED_ISOLATION or "time-slicing" in modes})
        if shared and all(s.endswith("(vgpu)") for s in shared):
            # HAMi-core limits each container's memory in software (seed 001: vGPU isolation is software-level).
            yield _d("production-tenant-without-memory-isolation",
                     f"production tenant {tenant.name!r} may land on GPUs shared without hardware isolation: "
                     f"{', '.join(shared)}; HAMi-core limits each pod's memory and SMs in software, but one pod's "
                     "GPU fault, or a process that bypasses HAMi-core (static CUDA), reaches its neighbours",
                     ("spec", "tenants", t, "allow"),
                     "allow only mig and exclusive for this tenant, or pin it to isolated classes with classes:")
        elif shared:
            yield _d("production-tenant-without-memory-isolation",
                     f"production tenant {tenant.name!r} may land on GPUs shared without memory isolation: "
                     f"{', '.join(shared)}; one pod's OOM or fault reaches its neighbours",
                     ("spec", "tenants", t, "allow"),
                     "allow only mig and exclusive for this tenant, or pin it to isolated classes with classes:")


def advise_mig_capable_time_sliced(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    production = [t for t in policy.spec.tenants if t.production]
    for i, nc in enumerate(policy.spec.node_classes):
        shared = _shared_name(nc)
        model = catalog.lookup(nc.gpu.model)
        if shared is None or model is None or not model.mig_capable:
            continue
        mode = nc.sharing.mode
        tenants = sorted(t.name for t in production
                         if (not t.classes or nc.name in t.classes) and mode in t.allow)
        if tenants:
            yield _d("mig-capable-gpu-time-sliced",
                     f"class {nc.name!r} shares {model.product} with {mode} for production tenant(s) "
                     f"{', '.join(tenants)}, but this GPU supports MIG (hardware memory and fault isolation, "
                     "~2-3% overhead against ~10-15% for time-slicing)",
                     ("spec", "nodeClasses", i, "sharing", shared[0]),
                     "give these tenants a MIG class (sharing: {mig: ...}); see gpupolicy explain for its slots")


def advise_unsized_replicas(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """Replicas without a memory basis: what one slot can count on is the offer's ``slot_memory_mib``, the figure
    admission and the report use too."""
    policy = resolved.policy
    for i, nc in enumerate(policy.spec.node_classes):
        base: Path = ("spec", "nodeClasses", i, "sharing")
        rc = resolved.classes[i]
        ts = nc.sharing.time_slicing
        if ts is not None and ts.replicas is not None and ts.replicas >= 2 and rc.memory_mib is not None:
            for offer in rc.offers:
                if offer.slot_memory_mib < MIN_UNSIZED_SHARE_MIB:
                    yield _unsized(nc.name, f"{rc.memory_mib} MiB / {ts.replicas} replicas", offer.slot_memory_mib,
                                   (*base, "timeSlicing", "replicas"))
        mig = nc.sharing.mig
        if mig is None:
            continue
        by_resource = {offer.resource: offer for offer in rc.offers}
        for advertised in rc.advertised:
            replicas = mig.time_slicing.get(advertised.profile, 1)
            offer = by_resource.get(advertised.resource or "")
            if offer is None or replicas < 2:
                continue  # the checks report unknown profiles, profiles the plugin cannot start and replicas below 2
            if offer.slot_memory_mib < MIN_UNSIZED_SHARE_MIB:
                yield _unsized(nc.name, f"{advertised.profile} ({offer.memory_mib} MiB) / {offer.replicas} replicas",
                               offer.slot_memory_mib, (*base, "mig", "timeSlicing", advertised.profile))


def _unsized(name: str, arithmetic: str, share: int, path: Path) -> Diagnostic:
    return _d("time-slicing-without-sizing",
              f"class {name!r} time-slices {arithmetic} = {share} MiB per replica with no memory basis; "
              "time-sliced replicas share memory unchecked, so a process larger than its share can OOM its "
              "neighbours",
              path, "measure one process and write sizing: {memoryPerReplica: <measured>, reserve: 10%}, "
              "or lower replicas")


def advise_fail_requests(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in enumerate(policy.spec.node_classes):
        shared = _shared_name(nc)
        if shared is not None and not shared[1].fail_requests_greater_than_one:
            yield _d("fail-requests-greater-than-one-disabled",
                     f"class {nc.name!r} lets a container request several {shared[0]} replicas; they may be "
                     "replicas of the same GPU and add no compute, which NVIDIA advises against",
                     ("spec", "nodeClasses", i, "sharing", shared[0], "failRequestsGreaterThanOne"),
                     "remove failRequestsGreaterThanOne (it defaults to true)")
        mig = nc.sharing.mig
        if mig is not None and mig.time_slicing and not mig.fail_requests_greater_than_one:
            yield _d("fail-requests-greater-than-one-disabled",
                     f"class {nc.name!r} lets a container request several time-sliced MIG replicas; they may "
                     "be replicas of the same MIG device and add no compute",
                     ("spec", "nodeClasses", i, "sharing", "mig", "failRequestsGreaterThanOne"),
                     "remove failRequestsGreaterThanOne (it defaults to true)")


def advise_rename_by_default(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in enumerate(policy.spec.node_classes):
        shared = _shared_name(nc)
        if shared is None or not shared[1].rename_by_default:
            continue
        offer = resolved.classes[i].offers[0]
        if offer.resource == GPU:
            continue  # not actually renamed (a single replica keeps nvidia.com/gpu)
        yield _d("rename-by-default-breaks-requests",
                 f"class {nc.name!r} advertises {offer.resource} instead of {GPU}: existing pods and charts that "
                 f"request {GPU} no longer fit its nodes and pend (autoscalers are confused too)",
                 ("spec", "nodeClasses", i, "sharing", shared[0], "renameByDefault"),
                 f"keep renameByDefault: false unless every workload for this class requests {offer.resource}")


def advise_mps_pre_volta(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in enumerate(policy.spec.node_classes):
        if nc.sharing.mps is None:
            continue
        model = catalog.lookup(nc.gpu.model)
        if model is not None:
            pre_volta = float(model.compute_capability) < 7.0
        else:
            pre_volta = bool(_PRE_VOLTA_PRODUCT.match(nc.gpu.model))
        if pre_volta:
            yield _d("mps-on-pre-volta",
                     f"class {nc.name!r} uses MPS on {nc.gpu.model}, a pre-Volta GPU: its MPS clients share one "
                     "GPU address space with no memory protection and at most 16 clients",
                     ("spec", "nodeClasses", i, "sharing", "mps"),
                     "use time-slicing on this GPU, or move MPS workloads to Volta or newer")


def advise_training(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in enumerate(policy.spec.node_classes):
        if nc.sharing.mode == "exclusive":
            continue
        if _TRAINING_WORD.search(nc.name) or _TRAINING_WORD.search(nc.description):
            yield _d("training-on-shared-gpus",
                     f"class {nc.name!r} looks like a training pool (by its name or description) but shares its "
                     f"GPUs with {nc.sharing.mode}; training needs a GPU's full memory and bandwidth",
                     ("spec", "nodeClasses", i, "sharing"),
                     "use sharing: exclusive for training classes")
    for t, tenant in enumerate(policy.spec.tenants):
        if _TRAINING_WORD.search(tenant.name) and "exclusive" not in tenant.allow:
            yield _d("training-on-shared-gpus",
                     f"tenant {tenant.name!r} looks like a training tenant but may not use whole GPUs "
                     f"(allow: {', '.join(tenant.allow)})",
                     ("spec", "tenants", t, "allow"), "add exclusive to allow, and an exclusive class")


def advise_admission(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    admission = policy.spec.admission
    if not policy.spec.runs_webhook:  # replicas and failurePolicy below are the webhook's
        return
    if admission.replicas < 2:
        effect = ("every new GPU workload is refused" if admission.failure_policy == "Fail"
                  else "GPU workloads are admitted unchecked")
        yield _d("single-replica-webhook",
                 f"the webhook runs 1 replica: while that pod is drained, rescheduled or rolled out, {effect}",
                 ("spec", "admission", "replicas"), "run at least 2 replicas (3 is the default)")
    if admission.failure_policy == "Ignore":
        yield _d("failure-policy-ignore",
                 "failurePolicy Ignore admits GPU workloads unchecked when the webhook is down or slow: "
                 "unsatisfiable requests then pend, and shared requests above 1 fail on the kubelet "
                 "(UnexpectedAdmissionError)",
                 ("spec", "admission", "failurePolicy"),
                 "keep Fail (only GPU workloads are routed to the webhook), and alert on the webhook instead")


ADVICE: tuple[Callable[[ResolvedPolicy], Iterator[Diagnostic]], ...] = (
    advise_production_tenants,
    advise_mig_capable_time_sliced,
    advise_unsized_replicas,
    advise_fail_requests,
    advise_rename_by_default,
    advise_mps_pre_volta,
    advise_training,
    advise_admission,
)


def advise(policy: ClusterGPUPolicy | ResolvedPolicy) -> tuple[Diagnostic, ...]:
    """Advice for a policy that passed its checks: warnings and infos only, in spec order.

    Diagnostics carry a code from `CODES`, a path spelled like the user's keys and no span (the caller
    locates them as it locates check findings). Never raises for a checked policy; never returns errors.
    """
    resolved = policy if isinstance(policy, ResolvedPolicy) else resolve(policy)
    found = [d for rule in ADVICE for d in rule(resolved)]
    return tuple(sorted(found, key=_order))


_SECTIONS = {"nodeClasses": 0, "tenants": 1, "admission": 2}


def _order(d: Diagnostic) -> tuple[int, int, str, str]:
    # Spec order: node classes, then tenants, then admission; by index within a list; then path and code.
    section = d.path[1] if len(d.path) > 1 else ""
    index = d.path[2] if len(d.path) > 2 and isinstance(d.path[2], int) else -1
    rest = ".".join(str(p) for p in d.path[3:])
    return _SECTIONS.get(str(section), 3), index, rest, d.code
