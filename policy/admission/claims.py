"""Claim admission: ResourceClaims, ResourceClaimTemplates and the claims a Pod names, held to the DRA pool.

Where each check lives (docs/dra.md, "Claim admission"), so that no path is left open:
- A ResourceClaimTemplate is checked when it is created (its spec is immutable): classes, counts, allocation mode,
  admin access, opaque config.
- Every ResourceClaim is checked when it is created, including those the resource-claim controller makes from a
  template (annotation resource.kubernetes.io/pod-claim-name) and those the scheduler makes for extended resources:
  a template written before the policy changed yields claims the policy of today judges.
- A claim's status update that adds a consumer (``status.reservedFor``, written by the scheduler for each pod that
  starts to use it) is judged again: a claim created before the policy changed, or shared between pods, gets no new
  pod once its classes are no longer the namespace's; removing consumers is never denied.
- At the Pod, only what the review shows: a ``resourceClaimTemplateName`` that is one of the tree's templates names
  its DeviceClass, which the tenant must be allowed. Any other name is a claim or template the review cannot see;
  the pod passes here because the object it names is judged by the two rules above on its own path, never because
  it is assumed fine.

Field names: k8s.io/api resource/v1/types.go at v0.34.10 (DeviceClaim L719, DeviceRequest L768, ExactDeviceRequest
L814: deviceClassName, allocationMode, count, adminAccess; DeviceSubRequest; DeviceClaimConfiguration) and
core/v1 PodResourceClaim (resourceClaimName, resourceClaimTemplateName). v1beta1's flat requests are read too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from policy.hardware import dra as facts
from policy.kube import quantity
from policy.resolved.offers import AdmissionPolicy, DraClassDoc
from policy.spec.diagnostics import Diagnostic, Path

ClaimRule = Literal["dra-class-denied", "dra-class-not-compiled", "dra-allocation-all", "dra-admin-access",
                    "dra-count-above-node", "dra-claim-config-override", "dra-mps-out-of-range",
                    "dra-capacity-request-invalid", "dra-request-unknown", "dra-constraint-attribute-unknown"]
#: The claim rules are always enforced: they guard the tenant boundary the ResourceQuota also holds (docs/dra.md).
CLAIM_RULES: tuple[ClaimRule, ...] = get_args(ClaimRule)
CLAIM_KINDS = frozenset({"ResourceClaim", "ResourceClaimTemplate"})
GROUP = "resource.k8s.io"
NVIDIA_SUFFIX = ".nvidia.com"
"""NVIDIA's DeviceClasses (gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com, ...) all end so."""
MIN_PINNED_MIB = 1  # the driver refuses a pinned-memory limit below 1Mi (api/.../v1beta1/sharing.go)


@dataclass(frozen=True)
class ClaimPolicy:
    """The DRA part of an admission policy, indexed once per engine."""

    classes: dict[str, DraClassDoc]
    tenants: dict[str, frozenset[str]]
    default: frozenset[str]
    templates: dict[str, str]
    """Compiled template name -> its DeviceClass."""

    @classmethod
    def build(cls, policy: AdmissionPolicy) -> ClaimPolicy:
        doc = policy.dra
        if doc is None:
            return cls({}, {}, frozenset(), {})
        return cls({c.name: c for c in doc.classes}, {t: frozenset(n) for t, n in doc.tenants.items()},
                   frozenset(doc.default), {c.template: c.name for c in doc.classes})

    def allowed(self, tenants: Sequence[str]) -> frozenset[str]:
        """The DeviceClasses every one of the namespace's tenants may use (none given: the default)."""
        if not tenants:
            return self.default
        found = [self.tenants.get(t, frozenset()) for t in tenants]
        return frozenset.intersection(*found)


def is_claim(obj: Any) -> bool:
    """A ResourceClaim or ResourceClaimTemplate of resource.k8s.io (any version); anything else, however malformed,
    is not."""
    if not isinstance(obj, Mapping):
        return False
    kind, api = obj.get("kind"), obj.get("apiVersion")
    return isinstance(kind, str) and kind in CLAIM_KINDS and isinstance(api, str) and api.startswith(GROUP + "/")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def devices_of(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], Path]:
    """The DeviceClaim of a claim (spec.devices) or a template (spec.spec.devices), and its path."""
    spec = _mapping(obj.get("spec"))
    if obj.get("kind") == "ResourceClaimTemplate":
        return _mapping(_mapping(spec.get("spec")).get("devices")), ("spec", "spec", "devices")
    return _mapping(spec.get("devices")), ("spec", "devices")


def _requests(devices: Mapping[str, Any], base: Path) -> Iterator[tuple[str, Mapping[str, Any], Path]]:
    """(request name, exact request, path) for every exact request and every firstAvailable subrequest."""
    for i, request in enumerate(_items(devices.get("requests"))):
        request = _mapping(request)
        name = request.get("name") if isinstance(request.get("name"), str) else ""
        path = (*base, "requests", i)
        if "exactly" in request:
            yield name, _mapping(request["exactly"]), (*path, "exactly")
        elif "firstAvailable" in request:
            for j, sub in enumerate(_items(request["firstAvailable"])):
                yield name, _mapping(sub), (*path, "firstAvailable", j)
        else:
            yield name, request, path  # v1beta1: the request is the exact request


def review(policy: ClaimPolicy, obj: Mapping[str, Any], tenants: Sequence[str],
           who: str) -> tuple[Diagnostic, ...]:
    """Every finding on a claim or template for a namespace of the given tenants (``who`` names them)."""
    devices, base = devices_of(obj)
    allowed = policy.allowed(tenants)
    found: list[Diagnostic] = []
    classes: dict[str, str] = {}
    for name, request, path in _requests(devices, base):
        class_name = request.get("deviceClassName")
        if not isinstance(class_name, str):
            continue
        classes.setdefault(name, class_name)
        found += _request_findings(policy, allowed, who, class_name, request, path)
    found += _config_findings(policy, devices, base, classes)
    found += _reference_findings(devices, base)
    return tuple(found)


def asks_gpu(policy: ClaimPolicy, obj: Mapping[str, Any]) -> bool:
    """Whether a claim or template asks for a GPU this policy judges: a request naming one of its DeviceClasses or
    one of NVIDIA's (another vendor's device or a NIC is not its business)."""
    devices, base = devices_of(obj)
    return any(isinstance(c := request.get("deviceClassName"), str) and (c in policy.classes
                                                                          or c.endswith(NVIDIA_SUFFIX))
               for _, request, _ in _requests(devices, base))


def _request_findings(policy: ClaimPolicy, allowed: frozenset[str], who: str, class_name: str,
                      request: Mapping[str, Any], path: Path) -> Iterator[Diagnostic]:
    dc = policy.classes.get(class_name)
    where = (*path, "deviceClassName")
    if dc is None and class_name.endswith(NVIDIA_SUFFIX):  # the driver's own gpu.nvidia.com too
        fix = _use(allowed) if policy.classes else (
            "this cluster's policy compiles no DRA class, so no claim for NVIDIA's driver is ever allocated: ask for "
            "the GPU with resources.limits (nvidia.com/gpu and the like, which the device plugin serves), or ask the "
            "platform team for a class with allocation: dra")
        yield Diagnostic("dra-class-not-compiled", f"the request asks for DeviceClass {class_name}, which this "
                         "policy does not compile: NVIDIA's own classes select every GPU of the driver, with no "
                         "sharing config and no tenant rule", where, fix)
        return
    if dc is None:
        return  # not a GPU class (a NIC, another vendor's device): not this policy's business
    if class_name not in allowed:
        yield Diagnostic("dra-class-denied", f"{who} may not use DeviceClass {class_name} ({dc.mode} on class "
                         f"{dc.node_class})", where, _use(allowed))
    if request.get("allocationMode") == "All":
        yield Diagnostic("dra-allocation-all", "allocationMode All takes every matching device of a node and fails "
                         "while any is in use", (*path, "allocationMode"), "ask for a count (allocationMode "
                         "ExactCount)")
    if request.get("adminAccess") is True:
        yield Diagnostic("dra-admin-access", "adminAccess gives access to devices in use by others; tenants may "
                         "not use it", (*path, "adminAccess"), "remove adminAccess")
    count = request.get("count", 1)
    if isinstance(count, int) and not isinstance(count, bool) and count > dc.devices_per_node:
        yield Diagnostic("dra-count-above-node", f"the request asks for {count} devices of {class_name}, but one "
                         f"node of class {dc.node_class} holds {dc.devices_per_node}, and a request's devices all "
                         "come from the pod's node: it would never be allocated", (*path, "count"),
                         f"ask for at most {dc.devices_per_node}, or split the work over pods")
    yield from _capacity_findings(dc, request, path)


def _capacity_findings(dc: DraClassDoc, request: Mapping[str, Any], path: Path) -> Iterator[Diagnostic]:
    """capacity.requests (KEP-5075) against what the class's devices publish: memory (at most one device's), and
    shares (1 to N) only where the driver's consumable shares give the devices N of them; anything else no device
    has, and the request would pend forever."""
    for key, amount in _mapping(_mapping(request.get("capacity")).get("requests")).items():
        name = str(key).removeprefix(f"{facts.DRIVER}/")
        where = (*path, "capacity", "requests", key)
        if name not in facts.CONSUMABLE_CAPACITIES:
            yield Diagnostic("dra-capacity-request-invalid", f"the request asks for capacity {key}, which NVIDIA's "
                             f"driver does not publish (only {' and '.join(facts.CONSUMABLE_CAPACITIES)}): no device "
                             "would ever match", where, "ask for memory or shares, or for no capacity")
        elif name == "shares" and not dc.consumable_shares:
            yield Diagnostic("dra-capacity-request-invalid", f"the request asks for shares of DeviceClass {dc.name} "
                             f"({dc.mode}), whose devices publish none (consumable shares are the time-sliced "
                             "classes'): no device would ever match", where, "remove capacity.requests.shares")
        elif name == "shares":
            count = quantity.parse_count(amount)
            if count is None or not 1 <= count <= dc.consumable_shares:
                yield Diagnostic("dra-capacity-request-invalid", f"shares {amount!r}: a device of {dc.name} has "
                                 f"{dc.consumable_shares} shares, and a claim takes 1 to {dc.consumable_shares} of "
                                 "them", where, f"ask for 1 to {dc.consumable_shares} shares")
        else:
            mib = _mib(amount)
            if mib is None or mib < 0 or (dc.memory_mib and mib > dc.memory_mib):
                bound = f" of at most the device's {dc.memory_mib}Mi" if dc.memory_mib else ""
                yield Diagnostic("dra-capacity-request-invalid", f"memory {amount!r} must be a quantity{bound}: "
                                 f"no device of {dc.name} would ever match", where, "ask for the memory one device has "
                                 "at most, e.g. 10Gi")


def _reference_findings(devices: Mapping[str, Any], base: Path) -> Iterator[Diagnostic]:
    """constraints[].requests and config[].requests name the claim's requests (``request`` or
    ``request/subrequest``), and a constraint's attribute of NVIDIA's domain is one the driver publishes. The API
    server refuses an unknown name itself (resource validation validateRequestNameRef); saying it here tells
    `gpupolicy admit` in CI, where no API server looks."""
    names: set[str] = set()
    for request in _items(devices.get("requests")):
        name = _mapping(request).get("name")
        if isinstance(name, str):
            names.add(name)
            names.update(f"{name}/{sub.get('name')}" for sub in map(_mapping, _items(
                _mapping(request).get("firstAvailable"))) if isinstance(sub.get("name"), str))
    plain = sorted(n for n in names if "/" not in n)
    for section in ("constraints", "config"):
        for i, entry in enumerate(_items(devices.get(section))):
            entry = _mapping(entry)
            for j, ref in enumerate(_items(entry.get("requests"))):
                if isinstance(ref, str) and ref not in names:
                    yield Diagnostic("dra-request-unknown", f"{section}[{i}] names request {ref!r}, which the claim "
                                     f"does not have (its requests: {', '.join(plain) or 'none'})",
                                     (*base, section, i, "requests", j), "name one of its requests, or "
                                     "request/subrequest for a firstAvailable entry")
            if section != "constraints":
                continue
            for field in ("matchAttribute", "distinctAttribute"):
                attribute = entry.get(field)
                domain, _, ident = attribute.rpartition("/") if isinstance(attribute, str) else ("", "", "")
                if domain == facts.DRIVER and ident not in facts.DEVICE_ATTRIBUTES:
                    yield Diagnostic("dra-constraint-attribute-unknown", f"{field} {attribute} is no attribute "
                                     "NVIDIA's driver publishes: no device has it, so the constraint is never met",
                                     (*base, section, i, field), f"use one it publishes, e.g. {facts.DRIVER}/"
                                     f"parentUUID (MIG devices of one GPU) or {facts.DRIVER}/productName")


def _use(allowed: frozenset[str]) -> str:
    if not allowed:
        return "this namespace may claim no GPU DeviceClass; ask the platform team to allow one for its tenant"
    return f"use one of the DeviceClasses it may use: {', '.join(sorted(allowed))}"


def _config_findings(policy: ClaimPolicy, devices: Mapping[str, Any], base: Path,
                     classes: Mapping[str, str]) -> Iterator[Diagnostic]:
    """Claim-level opaque config for NVIDIA's driver: later entries win over the class's (the driver's
    GetOpaqueDeviceConfigs), so it is refused where the class carries sharing config, and sharing it introduces is
    refused everywhere (the tenant's modes are the classes'); MPS figures are held to the driver's ranges."""
    every: tuple[list[str], int] | None = None  # an entry naming no request applies to all: worked out once
    for i, entry in enumerate(_items(devices.get("config"))):
        entry = _mapping(entry)
        opaque = _mapping(entry.get("opaque"))
        if opaque.get("driver") != facts.DRIVER:
            continue
        path = (*base, "config", i, "opaque")
        named = _items(entry.get("requests"))
        if named:
            configured, largest = _targets(policy, classes, [str(r).split("/")[0] for r in named])
        else:
            every = every or _targets(policy, classes, list(classes))
            configured, largest = every
        parameters = _mapping(opaque.get("parameters"))
        sharing = _mapping(parameters.get("sharing"))
        if configured or sharing:
            why = (f"DeviceClass {', '.join(configured)} carries the sharing config the policy compiled, and a "
                   "claim's config overrides it" if configured else
                   "sharing comes from the DeviceClass, whose mode the tenant rule checks")
            yield Diagnostic("dra-claim-config-override", f"the claim sets the driver's opaque config: {why}", path,
                             "remove the config entry; pick the DeviceClass whose sharing you need")
        yield from _mps_findings(sharing, path, largest)


def _targets(policy: ClaimPolicy, classes: Mapping[str, str], requests: list[str]) -> tuple[list[str], int]:
    """Of the named requests' compiled DeviceClasses: those carrying sharing config (sorted), and the largest
    device memory in MiB (0: none known)."""
    known = [policy.classes[classes[t]] for t in requests if t in classes and classes[t] in policy.classes]
    return sorted({dc.name for dc in known if dc.configured}), max((dc.memory_mib for dc in known), default=0)


def _mps_findings(sharing: Mapping[str, Any], path: Path, largest: int) -> Iterator[Diagnostic]:
    mps = _mapping(sharing.get("mpsConfig"))
    percent = mps.get("defaultActiveThreadPercentage")
    if percent is not None and (not isinstance(percent, int) or isinstance(percent, bool) or not 0 <= percent <= 100):
        yield Diagnostic("dra-mps-out-of-range", f"defaultActiveThreadPercentage {percent!r} is not a whole "
                         "percentage from 0 to 100", (*path, "parameters", "sharing", "mpsConfig",
                                                      "defaultActiveThreadPercentage"), "write e.g. 25")
    limit = mps.get("defaultPinnedDeviceMemoryLimit")
    if limit is None:
        return
    mib = _mib(limit)
    where = (*path, "parameters", "sharing", "mpsConfig", "defaultPinnedDeviceMemoryLimit")
    if mib is None or mib < MIN_PINNED_MIB or (largest and mib > largest):
        bound = f" and at most the device's {largest}Mi" if largest else ""
        yield Diagnostic("dra-mps-out-of-range", f"defaultPinnedDeviceMemoryLimit {limit!r} must be a quantity of "
                         f"at least 1Mi{bound}", where, "write e.g. 10Gi")


def _mib(value: Any) -> float | None:
    parsed = quantity.parse_quantity(value)
    return None if parsed is None else float(parsed) / (1024 * 1024)


def pod_findings(policy: ClaimPolicy, pod_spec: Mapping[str, Any], spec_path: Path, tenants: Sequence[str],
                 who: str) -> tuple[Diagnostic, ...]:
    """At the Pod: every spec.resourceClaims[] naming one of the tree's templates whose DeviceClass the tenant may
    not use (the template is not in this namespace then, and the pod would pend forever)."""
    allowed = policy.allowed(tenants)
    found = []
    for i, ref in enumerate(_items(pod_spec.get("resourceClaims"))):
        template = _mapping(ref).get("resourceClaimTemplateName")
        class_name = policy.templates.get(template) if isinstance(template, str) else None
        if class_name is not None and class_name not in allowed:
            dc = policy.classes[class_name]
            found.append(Diagnostic("dra-class-denied", f"{who} may not use DeviceClass {class_name} ({dc.mode} on "
                                    f"class {dc.node_class}), which template {template} claims",
                                    (*spec_path, "resourceClaims", i, "resourceClaimTemplateName"), _use(allowed)))
    return tuple(found)


def _consumers(obj: Mapping[str, Any] | None) -> int:
    return len(_items(_mapping(_mapping(obj).get("status")).get("reservedFor"))) if obj is not None else 0


def claim_findings(policy: ClaimPolicy, obj: Mapping[str, Any], tenants: Sequence[str], who: str, operation: str,
                   old_obj: Mapping[str, Any] | None) -> tuple[Diagnostic, ...]:
    """A claim or template review: CREATE is judged whole; an UPDATE only when it adds a consumer to a claim
    (the scheduler reserving it for another pod), so releasing, relabelling or deallocating never fails."""
    if operation == "UPDATE" and not (obj.get("kind") == "ResourceClaim" and _consumers(obj) > _consumers(old_obj)):
        return ()
    return review(policy, obj, tenants, who)
