"""Each class's sharing against its hardware: replicas and sizing, MIG layouts and placement, MPS."""

from __future__ import annotations

from collections.abc import Iterator

from policy.checks.common import class_path, classes_of
from policy.hardware import catalog, mig
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy
from policy.spec.diagnostics import Diagnostic, Path, did_you_mean
from policy.spec.model import NodeClass, ReplicatedSharing, Sizing


def check_replicas(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in classes_of(policy):
        for name, shared in (("timeSlicing", nc.sharing.time_slicing), ("mps", nc.sharing.mps)):
            if shared is not None:
                yield from _replicated(i, resolved.classes[i], name, shared)
        if nc.sharing.vgpu is not None and nc.sharing.vgpu.sizing is not None:
            yield from _sized(resolved.classes[i], class_path(i, "sharing", "vgpu"), nc.sharing.vgpu.sizing)
        if nc.sharing.mig is not None:
            for profile, replicas in sorted(nc.sharing.mig.time_slicing.items()):
                if replicas < 2:
                    yield Diagnostic("replicas-too-low", f"time-slicing {profile} with {replicas} replica does "
                                     "nothing, and the device plugin refuses replicas below 2",
                                     class_path(i, "sharing", "mig", "timeSlicing", profile),
                                     f"remove {profile} from timeSlicing, or use 2 or more")


def _replicated(i: int, rc: ResolvedClass, name: str, shared: ReplicatedSharing) -> Iterator[Diagnostic]:
    path = class_path(i, "sharing", name)
    if shared.replicas is not None and shared.replicas < 2:
        yield Diagnostic("replicas-too-low", f"{name} with replicas {shared.replicas} shares nothing; the device "
                         "plugin refuses replicas below 2 ('number of replicas must be >= 2')",
                         (*path, "replicas"), "use replicas: 2 or more, or sharing: exclusive")
        return
    if shared.sizing is not None:
        yield from _sized(rc, path, shared.sizing)


def _sized(rc: ResolvedClass, path: tuple[str | int, ...], given: Sizing) -> Iterator[Diagnostic]:
    """Findings about the replicas (or vGPUs) sizing yields for a class."""
    computed = rc.sizing
    if computed is None:
        if rc.memory_mib is not None:  # known memory, yet no arithmetic: the reserve does not fit the GPU
            yield Diagnostic("sizing-exceeds-memory", f"reserve {given.reserve} exceeds the GPU's "
                             f"{rc.memory_mib} MiB", (*path, "sizing", "reserve"),
                             "use a percentage reserve such as 10%, or a smaller quantity")
        return  # otherwise the model is unknown: check_gpu_models already said so
    if computed.replicas == 0:
        yield Diagnostic("sizing-exceeds-memory", f"memoryPerReplica {computed.per_replica_mib} MiB does not fit "
                         f"in {computed.usable_mib} MiB usable ({computed.explain()})",
                         (*path, "sizing", "memoryPerReplica"), "lower the reserve or use sharing: exclusive")
    elif computed.replicas == 1:
        yield Diagnostic("sizing-below-two-replicas", f"sizing yields 1 replica ({computed.explain()}): the GPU "
                         "cannot be shared at this memory per replica", (*path, "sizing", "memoryPerReplica"),
                         "use sharing: exclusive, or lower memoryPerReplica / the reserve")


def check_mig(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in classes_of(policy):
        if nc.sharing.mig is None:
            continue
        path = class_path(i, "sharing", "mig")
        model = catalog.lookup(nc.gpu.model)
        if model is None and nc.gpu.memory is None:
            continue  # unknown-gpu-model already says what to fix
        if model is None or model.mig is None:
            yield _mig_unsupported(nc.gpu.model, model, path)
            continue
        yield from _mig_groups(i, nc)
        yield from _mig_layouts(i, nc, model.mig)


def _mig_unsupported(given: str, model: catalog.GpuModel | None, path: Path) -> Diagnostic:
    capable = ", ".join(catalog.families(capable_of_mig=True))
    if model is not None:
        return Diagnostic("mig-unsupported-gpu", f"{model.product} does not support MIG", path,
                          f"use time-slicing or MPS on it; the catalog's MIG-capable families: {capable}")
    # A model the catalog does not know may well have MIG: only its profile table (names, placements) is missing.
    return Diagnostic("mig-unsupported-gpu", f"gpupolicy's catalog has no MIG profile table for {given}, so "
                      "it can neither check nor compile a MIG layout for it", path,
                      f"if it is a GPU of the catalog's MIG-capable families ({capable}) under another name, write "
                      "the catalog's name as gpu.model; if it is a MIG GPU the catalog lacks, its profile table "
                      "must be added to gpupolicy's catalog (policy/hardware/catalog.yaml) first; until then use "
                      "time-slicing or MPS on it")


def _mig_groups(i: int, nc: NodeClass) -> Iterator[Diagnostic]:
    mig_spec = nc.sharing.mig
    assert mig_spec is not None
    if mig_spec.groups is None:
        return
    owner: dict[int, int] = {}
    for g, group in enumerate(mig_spec.groups):
        gpus = range(nc.gpu.count) if group.gpus == "all" else group.gpus
        for gpu in gpus:
            gpath = class_path(i, "sharing", "mig", "groups", g, "gpus")
            if gpu >= nc.gpu.count:
                yield Diagnostic("mig-group-gpu-out-of-range", f"GPU index {gpu} is out of range: the class has "
                                 f"{nc.gpu.count} GPUs (0-{nc.gpu.count - 1})", gpath, "use indices below gpu.count")
            elif gpu in owner:
                yield Diagnostic("mig-group-gpu-overlap", f"GPU {gpu} is in groups {owner[gpu]} and {g}; "
                                 "mig-parted would apply both and the last one wins", gpath,
                                 "list every GPU in exactly one group")
            owner.setdefault(gpu, g)
    missing = sorted(set(range(nc.gpu.count)) - owner.keys())
    if missing and mig_spec.strategy == "single":
        # GFD's single-strategy labeler needs every GPU of the node in MIG mode with one profile; otherwise
        # it labels the node <model>-MIG-INVALID with count 0 (k8s-device-plugin internal/lm/mig-strategy.go).
        yield Diagnostic("mig-groups-incomplete", f"GPUs {missing} are in no group, but strategy single needs every "
                         "GPU of the node partitioned alike (GPU Feature Discovery labels the node MIG-INVALID)",
                         class_path(i, "sharing", "mig", "groups"), "add a group for them, or use strategy: mixed")
    elif missing:
        # mig-parted's assert requires every GPU of the node to match some entry (mig.md §4): the compiled config
        # gives these GPUs an entry with MIG off, and mixed advertises them whole.
        yield Diagnostic("mig-groups-incomplete", f"GPUs {missing} are in no group: the compiled mig-parted config "
                         "turns MIG off on them, and the mixed strategy advertises them as whole nvidia.com/gpu",
                         class_path(i, "sharing", "mig", "groups"),
                         "add a group for them if they should be partitioned too", severity="info")


def _mig_layouts(i: int, nc: NodeClass, geometry: catalog.MigGeometry) -> Iterator[Diagnostic]:
    mig_spec = nc.sharing.mig
    assert mig_spec is not None
    names = [p.name for p in geometry.profiles]
    seen_profiles: set[str] = set()
    for g, (gpus, layout) in enumerate(mig_spec.layouts(nc.gpu.count)):
        base = ("layout",) if mig_spec.layout is not None else ("groups", g, "layout")
        lpath = class_path(i, "sharing", "mig", *base)
        unknown = [p for p in layout if geometry.profile(p) is None]
        for p in unknown:
            near = catalog.nearest_profile(p, names) or next(iter(did_you_mean(p, names)), None)
            yield Diagnostic("unknown-mig-profile", f"{nc.gpu.model} has no MIG profile {p!r}", (*lpath, p),
                             (f"did you mean {near!r}? " if near else "") + f"its profiles: {', '.join(names)}")
        seen_profiles.update(layout)
        if unknown or not gpus:
            continue
        result = mig.place(geometry, layout)
        if not result.fits:
            fits = f"; what would fit instead: {', '.join(result.would_fit)}" if result.would_fit else ""
            yield Diagnostic("mig-layout-does-not-fit", f"MIG layout {_fmt_layout(layout)} does not fit one "
                             f"{nc.gpu.model}: {result.reason}", lpath,
                             f"remove {result.unplaceable or 'a profile'}{fits}")
    if mig_spec.strategy == "single" and len(seen_profiles) > 1:
        yield Diagnostic("mig-single-needs-one-profile", f"strategy single advertises every MIG device as "
                         f"nvidia.com/gpu, so all must be one profile (got {', '.join(sorted(seen_profiles))})",
                         class_path(i, "sharing", "mig", "strategy"), "use strategy: mixed, or one profile")
    for profile in sorted(mig_spec.time_slicing):
        tpath = class_path(i, "sharing", "mig", "timeSlicing", profile)
        if profile not in seen_profiles:
            yield Diagnostic("mig-time-slicing-unknown-profile", f"timeSlicing names {profile!r}, which the "
                             "layout does not create", tpath,
                             f"time-slice one of {', '.join(sorted(seen_profiles))}")


def _fmt_layout(layout: dict[str, int]) -> str:
    return "{" + ", ".join(f"{p}: {n}" for p, n in sorted(layout.items())) + "}"


def check_mps(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    for i, nc in classes_of(policy):
        if nc.sharing.mps is None:
            continue
        path = class_path(i, "sharing", "mps")
        if resolved.plugin_release.mps == "absent":
            yield Diagnostic("mps-unsupported-version", f"MPS sharing needs device plugin v0.15.0 or newer "
                             f"(spec uses {plugin.version}, which silently ignores sharing.mps)", path,
                             "set spec.devicePlugin.version to v0.15.0 or newer, or use timeSlicing")
        model = catalog.lookup(nc.gpu.model)
        replicas = resolved.classes[i].replicas
        where = (*path, "replicas") if nc.sharing.mps.replicas is not None else (*path, "sizing")
        if model is not None and replicas > model.mps_max_clients:
            yield Diagnostic("mps-replicas-above-client-cap", f"MPS allows at most {model.mps_max_clients} clients "
                             f"per {model.product} (compute capability {model.compute_capability}); "
                             f"replicas is {replicas}", where, f"use at most {model.mps_max_clients} replicas")
