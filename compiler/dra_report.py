"""The DRA pool in the capacity report: per DeviceClass its devices and slots, per tenant what it may claim."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler.targets import dra as dra_target
from policy.resolved import dra
from policy.resolved.resolve import ResolvedPolicy


@dataclass(frozen=True)
class TenantCapacity:
    tenant: str
    classes: tuple[str, ...]
    slots: int | None
    """Slots of the DeviceClasses the tenant may claim, over the pool (None when a class has no node count)."""
    namespaces: tuple[str, ...]


@dataclass(frozen=True)
class DraReport:
    driver_version: str
    values_path: str
    gates: dict[str, bool]
    consumable_shares: int | None
    classes: tuple[dra.DraDeviceClass, ...]
    tenants: tuple[TenantCapacity, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "driver": {"version": self.driver_version, "values": self.values_path, "featureGates": self.gates,
                       "consumableShares": self.consumable_shares},
            "deviceClasses": [{"name": c.name, "nodeClass": c.node_class, "mode": c.mode, "migProfile": c.mig_profile,
                               "devicesPerNode": c.devices_per_node, "sharesPerDevice": c.shares,
                               "slotsPerNode": c.slots_per_node, "totalSlots": c.total_slots,
                               "memoryMiB": c.memory_mib, "extendedResourceName": c.extended_resource_name,
                               "claimTemplate": c.template_name} for c in self.classes],
            "tenants": [{"name": t.tenant, "deviceClasses": list(t.classes), "slots": t.slots,
                         "namespaces": list(t.namespaces)} for t in self.tenants],
        }


def build(resolved: ResolvedPolicy) -> DraReport | None:
    classes = dra.device_classes(resolved)
    if not classes:
        return None
    by_name = {c.name: c for c in classes}
    tenants = [(t.tenant, t.classes, t.namespaces) for t in dra.tenants(resolved, classes)]
    tenants.append(("(no tenant)", dra.default_classes(resolved.spec, classes), ()))
    return DraReport(
        driver_version=resolved.spec.dra.version, values_path=dra_target.VALUES_PATH,
        gates=dra.enabled_gates(resolved), consumable_shares=dra.consumable_shares(resolved), classes=classes,
        tenants=tuple(TenantCapacity(name, names, _slots([by_name[n] for n in names]), namespaces)
                      for name, names, namespaces in tenants))


def _slots(classes: list[dra.DraDeviceClass]) -> int | None:
    totals = [c.total_slots for c in classes]
    return None if None in totals else sum(t or 0 for t in totals)


def markdown(report: DraReport) -> list[str]:
    gates = ", ".join(f"{g}={str(on).lower()}" for g, on in report.gates.items()) or "none"
    lines = [f"NVIDIA DRA driver {report.driver_version} ({report.values_path}; feature gates: {gates}"
             + (f"; consumable shares {report.consumable_shares}" if report.consumable_shares else "") + "). "
             "Pods claim these DeviceClasses through the ResourceClaimTemplates of their namespace (docs/dra.md).",
             "", "| DeviceClass | class | mode | devices per node | pods per device | slots | extended resource |",
             "|---|---|---|---:|---:|---:|---|"]
    for c in report.classes:
        total = "?" if c.total_slots is None else str(c.total_slots)
        lines.append(f"| `{c.name}` | {c.node_class} | {c.mode} | {c.devices_per_node} | {c.shares} | {total} | "
                     + (f"`{c.extended_resource_name}`" if c.extended_resource_name else "none") + " |")
    lines += ["", "| tenant | DeviceClasses it may claim | slots | namespaces with templates and quota |",
              "|---|---|---:|---|"]
    for t in report.tenants:
        names = ", ".join(f"`{n}`" for n in t.classes) or "none"
        lines.append(f"| {t.tenant} | {names} | {'?' if t.slots is None else t.slots} | "
                     f"{', '.join(t.namespaces) or 'none'} |")
    return lines
