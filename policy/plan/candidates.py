"""The sharing configurations one GPU model allows: modes, replica counts and every maximal MIG layout.

A Target is what a plan is made for: a node class of a spec, or a GPU model a team names.  Which modes it
allows follows from the hardware (MIG needs a MIG-capable GPU, MPS a Volta or newer one) and the device plugin
release (time-slicing from v0.12.0, MPS from v0.15.0); vGPU is HAMi's, so it is evaluated where HAMi is set up
or asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from policy.hardware import catalog, mig, releases, sizing
from policy.hardware.catalog import MigGeometry, MigProfile
from policy.plan.figures import MODES, PlanMode
from policy.plan.inventory import Workload
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy

__all__ = ["Candidate", "Target", "candidates", "seed001_card", "target_for_model", "targets_for_policy"]

TIME_SLICING_SINCE = (0, 12, 0)
MPS_SINCE = (0, 15, 0)
DEFAULT_PLUGIN = (0, 17, 1)
_THINNED = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
MAX_SPLIT = 64


@dataclass(frozen=True)
class Candidate:
    """One way to share a class's GPUs."""

    mode: PlanMode
    replicas: int = 1
    """Time-slicing or MPS replicas per GPU, or vGPU tasks per GPU (HAMi deviceSplitCount)."""
    layout: mig.Layout = ()
    """MIG profile counts per GPU, in the GPU's profile order."""
    shared: tuple[tuple[str, int], ...] = ()
    """Time-slicing replicas per MIG profile (MIG + time-slicing)."""
    sized_mib: int | None = None
    """Memory per replica the replica count follows from (a sizing fragment), when it does."""

    @property
    def label(self) -> str:
        if self.mode in ("time-slicing", "mps"):
            return f"{self.mode} x{self.replicas}"
        if self.mode == "vgpu":
            return f"vgpu split {self.replicas}"
        if self.mode in ("mig", "mig+time-slicing"):
            shared = dict(self.shared)
            parts = [f"{name} x{n}" + (f" (x{shared[name]} replicas)" if shared.get(name, 1) > 1 else "")
                     for name, n in self.layout]
            return f"{self.mode} " + " + ".join(parts)
        return self.mode

    def replicas_of(self, profile: str) -> int:
        return dict(self.shared).get(profile, 1)


@dataclass(frozen=True)
class Target:
    """The GPUs a plan is made for."""

    name: str
    product: str
    memory_mib: int
    model: catalog.GpuModel | None
    mig: MigGeometry | None
    gpus_per_node: int = 1
    nodes: int | None = None
    plugin_version: tuple[int, int, int] = DEFAULT_PLUGIN
    modes: tuple[PlanMode, ...] = MODES
    excluded: tuple[tuple[str, str], ...] = ()
    """(mode, why it is not evaluated)."""
    current: Candidate | None = None
    """The class's sharing as the spec has it now, when it maps to a candidate."""
    class_index: int | None = None
    """Index of the node class in the spec (None for a named GPU model)."""
    aliases: tuple[str, ...] = field(default=())

    @property
    def total_gpus(self) -> int | None:
        return None if self.nodes is None else self.nodes * self.gpus_per_node

    def hosts(self, workload: Workload) -> bool:
        """Whether the workload may run on this target (no targets: anywhere)."""
        if not workload.targets:
            return True
        names = {self.name.lower(), self.product.lower(), *(a.lower() for a in self.aliases)}
        for wanted in workload.targets:
            found = catalog.lookup(wanted)
            if wanted.lower() in names or (found is not None and found.product.lower() in names):
                return True
        return False


# ---------------------------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------------------------


def targets_for_policy(resolved: ResolvedPolicy, *, modes: Sequence[PlanMode] = MODES,
                       vgpu: bool = False) -> tuple[Target, ...]:
    """One target per device-plugin node class of a checked policy, with the modes its GPU and plugin allow.

    Classes NVIDIA's DRA driver serves are left as written: their sharing is bound by the driver's gates and its
    one cluster-wide consumable-shares number (policy/checks/dra.py), which the plan's per-class candidates
    do not model, so a draft never proposes a DRA class a sharing the driver cannot give it."""
    plugin = resolved.spec.device_plugin.version_tuple
    return tuple(_class_target(i, rc, plugin, modes, vgpu) for i, rc in enumerate(resolved.classes) if not rc.dra)


def _class_target(index: int, rc: ResolvedClass, plugin: tuple[int, int, int], modes: Sequence[PlanMode],
                  vgpu: bool) -> Target:
    model = rc.gpu
    base = Target(
        name=rc.name, product=rc.product, memory_mib=rc.memory_mib or 0, model=model,
        mig=model.mig if model else None, gpus_per_node=rc.gpu_count, nodes=rc.nodes, plugin_version=plugin,
        class_index=index, aliases=model.aliases if model else ())
    allowed, excluded = _allowed(base, modes, vgpu)
    return replace(base, modes=allowed, excluded=excluded, current=_current(rc))


def target_for_model(name: str, *, modes: Sequence[PlanMode] = MODES, memory_mib: int | None = None,
                     plugin: tuple[int, int, int] = DEFAULT_PLUGIN) -> Target | None:
    """A target for a GPU model of the catalog (None when unknown), evaluated with every mode it allows."""
    model = catalog.lookup(catalog.strip_shared(name))
    if model is None:
        return None
    base = Target(name=_class_name(model), product=model.product, memory_mib=memory_mib or model.memory_mib,
                  model=model, mig=model.mig, plugin_version=plugin, aliases=model.aliases)
    allowed, excluded = _allowed(base, modes, vgpu=True)
    return replace(base, modes=allowed, excluded=excluded)


def seed001_card(memory_mib: int = 32768, *, modes: Sequence[PlanMode] = MODES) -> Target:
    """Seed 001's hypothetical card: ``memory_mib`` of memory cut into 4 MIG parts.

    No NVIDIA GPU of 32 GB has MIG; the article cuts its card into four equal partitions.  Four compute slices
    on four memory slices is the A30's placement table (mig.md §2.2), so that table is used with the memory
    scaled to the card: 1g.8gb x4, 2g.16gb x2, 4g.32gb on a 32 GiB card.
    """
    a30 = catalog.lookup("A30")
    assert a30 is not None and a30.mig is not None
    unit = memory_mib // a30.mig.placement_units
    profiles = tuple(_scaled(p, unit) for p in a30.mig.profiles)
    geometry = replace(a30.mig, profiles=profiles, pci_device_ids=())
    base = Target(name="seed-001-card", product=f"hypothetical {memory_mib // 1024} GiB card",
                  memory_mib=memory_mib, model=None, mig=geometry)
    allowed, excluded = _allowed(base, modes, vgpu=True, compute_capability=(8, 0))
    return replace(base, modes=allowed, excluded=excluded)


def _scaled(profile: MigProfile, unit_mib: int) -> MigProfile:
    memory = unit_mib * profile.size
    suffix = profile.name.partition("gb")[2]
    return replace(profile, name=f"{profile.compute_slices}g.{memory // 1024}gb{suffix}", memory_mib=memory)


def _class_name(model: catalog.GpuModel) -> str:
    return min((*model.aliases, model.product), key=len).lower()


def _allowed(target: Target, modes: Sequence[PlanMode], vgpu: bool,
             compute_capability: tuple[int, int] | None = None) -> tuple[tuple[PlanMode, ...],
                                                                        tuple[tuple[str, str], ...]]:
    capability = compute_capability or _capability(target.model)
    plugin = ".".join(map(str, target.plugin_version))
    why: dict[str, str] = {}
    if target.plugin_version < TIME_SLICING_SINCE:
        why["time-slicing"] = why["mig+time-slicing"] = f"device plugin v{plugin} has no time-slicing (v0.12.0+)"
    if target.plugin_version < MPS_SINCE:
        why["mps"] = f"device plugin v{plugin} has no MPS (v0.15.0+)"
    elif capability is None:
        why["mps"] = "the GPU's compute capability is unknown, so MPS isolation cannot be judged"
    elif capability < (7, 0):
        why["mps"] = "before Volta, MPS clients share one address space (mps-on-pre-volta)"
    if target.mig is None:
        why.setdefault("mig", f"{target.product} has no MIG")
        why["mig+time-slicing"] = why["mig"]
    if not vgpu:
        why["vgpu"] = "no HAMi in this cluster (the spec has no hami section); ask with --modes to compare"
    for mode in MODES:
        if mode not in modes:
            why.setdefault(mode, "not asked for (--modes)")
    allowed = tuple(m for m in MODES if m not in why)
    return allowed, tuple((m, why[m]) for m in MODES if m in why)


def _capability(model: catalog.GpuModel | None) -> tuple[int, int] | None:
    if model is None:
        return None
    major, minor = model.compute_capability.split(".")
    return int(major), int(minor)


def _current(rc: ResolvedClass) -> Candidate | None:
    sharing = rc.spec.sharing
    if sharing.mode == "exclusive":
        return Candidate("exclusive")
    if sharing.time_slicing is not None or sharing.mps is not None:
        return Candidate(rc.mode, rc.replicas)  # type: ignore[arg-type]
    if sharing.mig is not None and sharing.mig.layout is not None and rc.gpu and rc.gpu.mig:
        order = [p.name for p in rc.gpu.mig.profiles]
        layout = tuple(sorted(sharing.mig.layout.items(), key=lambda kv: order.index(kv[0])
                              if kv[0] in order else len(order)))
        shared = tuple(sorted((p, n) for p, n in sharing.mig.time_slicing.items() if n > 1))
        return Candidate("mig+time-slicing" if shared else "mig", layout=layout, shared=shared)
    return None


# ---------------------------------------------------------------------------------------------------------------
# Candidates
# ---------------------------------------------------------------------------------------------------------------


def usable_mib(target: Target, reserve_percent: float) -> int:
    return sizing.size_replicas(target.memory_mib, 1, reserve_percent=reserve_percent).usable_mib


def safe_replicas(target: Target, largest_mib: int, reserve_percent: float) -> int:
    """Replicas whose worst case, every slot holding the largest process, stays within the usable memory:
    seed 003's sizing, floor((total - reserve) / per process)."""
    return sizing.size_replicas(target.memory_mib, largest_mib, reserve_percent=reserve_percent).replicas


def candidates(target: Target, workloads: Sequence[Workload], reserve_percent: float) -> tuple[Candidate, ...]:
    """Every configuration of ``target`` worth comparing for these workloads, in mode order."""
    if not workloads or target.memory_mib <= 0:
        return (Candidate("exclusive"),) if "exclusive" in target.modes else ()
    memories = [w.memory_mib for w in workloads]
    largest, uniform = max(memories), len(set(memories)) == 1
    safe = safe_replicas(target, largest, reserve_percent)
    out: list[Candidate] = []
    for mode in target.modes:
        if mode == "exclusive":
            out.append(Candidate("exclusive"))
        elif mode == "time-slicing":
            # One count past the safe one is listed too: it shows where memory runs out.
            counts = _counts(safe) + ((max(safe, 1) + 1,) if safe + 1 >= 2 else ())
            out += [Candidate("time-slicing", r, sized_mib=largest if r == safe else None)
                    for r in sorted(set(counts))]
        elif mode == "mps" and target.model is not None:
            limit = min(safe, target.model.mps_max_clients)
            out += [Candidate("mps", r, sized_mib=largest if r == safe else None) for r in _counts(limit)]
        elif mode == "vgpu":
            split = min(MAX_SPLIT, max(2, usable_mib(target, reserve_percent) // max(min(memories), 1)))
            out.append(Candidate("vgpu", split, sized_mib=largest if uniform and split == safe else None))
        elif mode in ("mig", "mig+time-slicing") and target.mig is not None:
            out += _mig_candidates(target.mig, mode, memories, _release(target))
    return tuple(out)


def _counts(limit: int) -> tuple[int, ...]:
    """Replica counts from 2 to ``limit``: every one up to 12, then a doubling ladder and the limit itself."""
    if limit < 2:
        return ()
    if limit <= 12:
        return tuple(range(2, limit + 1))
    return tuple(sorted({*(n for n in _THINNED if n <= limit), limit}))


def mig_layouts(geometry: MigGeometry) -> tuple[mig.Layout, ...]:
    """The maximal layouts of plain profiles, except one instance spanning the whole GPU (that is exclusive).

    Attribute profiles (+me, -me, +gfx) have the size and memory of their plain twin; a workload that needs a
    media engine says so in its own spec, so they add nothing to a memory and compute plan.
    """
    whole = geometry.compute_slices
    out = []
    for layout in mig.maximal_layouts(geometry):
        names = [name for name, _ in layout]
        if any("+" in n or "-" in n.partition("gb")[2] for n in names):
            continue
        profiles = [geometry.profile(n) for n, _ in layout]
        if len(layout) == 1 and layout[0][1] == 1 and profiles[0] is not None and profiles[0].compute_slices == whole:
            continue
        out.append(layout)
    return tuple(out)


def _release(target: Target) -> releases.Release:
    return releases.behaviour("v" + ".".join(map(str, target.plugin_version)))


def _starts(geometry: MigGeometry, layout: mig.Layout, release: releases.Release) -> bool:
    """Whether the targeted device-plugin release starts with the layout under mixed, as the drafted spec writes
    it (a double-memory 1g before v0.14.0 does not; policy/hardware/releases.py)."""
    profiles = [p for name, _ in layout if (p := geometry.profile(name)) is not None]
    return all((a := releases.advertise(release, geometry, p, "mixed")).starts and a.certain for p in profiles)


def _mig_candidates(geometry: MigGeometry, mode: PlanMode, memories: Sequence[int],
                    release: releases.Release) -> list[Candidate]:
    out = []
    for layout in mig_layouts(geometry):
        if not _starts(geometry, layout, release):
            continue
        if mode == "mig":
            out.append(Candidate("mig", layout=layout))
            continue
        shared = _shared_profiles(geometry, layout, memories)
        if shared:
            out.append(Candidate("mig+time-slicing", layout=layout, shared=shared))
    return out


def _shared_profiles(geometry: MigGeometry, layout: mig.Layout, memories: Sequence[int]) -> tuple[tuple[str, int], ...]:
    """Per profile, the replicas its instances can take: floor(instance memory / largest process whose smallest
    fitting profile it is); only counts of 2 or more."""
    sizes = sorted(((p.memory_mib, p.name) for name, _ in layout if (p := geometry.profile(name)) is not None))
    largest: dict[str, int] = {}
    for memory in memories:
        home = next((name for size, name in sizes if size >= memory), None)
        if home is not None:
            largest[home] = max(memory, largest.get(home, 0))
    shared = []
    for size, name in sizes:
        if name in largest and size // largest[name] >= 2:
            shared.append((name, size // largest[name]))
    return tuple(sorted(shared))
