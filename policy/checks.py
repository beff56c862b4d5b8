"""Semantic checks a GPU expert would make on a structurally valid policy."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from policy import catalog, drivers, mig, operator, releases, selectors
from policy.diagnostics import Diagnostic, Path, did_you_mean
from policy.hami_checks import HAMI_CHECKS
from policy.labels import GFD_MUTABLE
from policy.model import VAP_MINOR, ClusterGPUPolicy, NodeClass, PluginFlags, ReplicatedSharing, Sizing, Tenant
from policy.resolve import ResolvedClass, ResolvedPolicy, resolve

Check = Callable[[ResolvedPolicy], Iterator[Diagnostic]]

#: Codes whose span is the offending key rather than its value.
KEY_LOCATED = frozenset({"unknown-mig-profile", "mig-time-slicing-unknown-profile", "shared-product-selector",
                         "mig-profile-needs-plugin-release", "mig-profiles-share-resource", "mig-resource-renamed"})


def _classes(policy: ClusterGPUPolicy) -> Iterator[tuple[int, NodeClass]]:
    return enumerate(policy.spec.node_classes)


def _class_path(i: int, *rest: str | int) -> tuple[str | int, ...]:
    return ("spec", "nodeClasses", i, *rest)


def check_unique_names(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for field, code, items in (
        ("nodeClasses", "duplicate-class-name", policy.spec.node_classes),
        ("tenants", "duplicate-tenant-name", policy.spec.tenants),
    ):
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            if item.name in first:
                yield Diagnostic(code, f"{field} {item.name!r} is defined twice (first at index {first[item.name]})",
                                 ("spec", field, i, "name"), "give every entry its own name")
            first.setdefault(item.name, i)


def check_gpu_models(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in _classes(policy):
        model = catalog.lookup(nc.gpu.model)
        if model is None and nc.gpu.memory is None:
            near = catalog.suggest(nc.gpu.model)
            ambiguous = nc.gpu.model.lower() in catalog.family_names() and len(near) > 1
            if ambiguous:
                hint = f"name the variant: one of {', '.join(near)}"
            else:
                hint = f"did you mean {near[0]!r}?" if near else "use the node's nvidia.com/gpu.product label"
            what = "is ambiguous" if ambiguous else "is not in the catalog"
            yield Diagnostic("unknown-gpu-model", f"GPU model {nc.gpu.model!r} {what}",
                             _class_path(i, "gpu", "model"),
                             hint + " (or state gpu.memory for a model the catalog lacks; MIG is then unavailable)")
        elif model is None and (near := catalog.misspelt(nc.gpu.model)) is not None:
            yield Diagnostic("gpu-model-typo", f"GPU model {nc.gpu.model!r} is not in the catalog, but one typo away "
                             f"from {near!r}, so gpu.memory is used and MIG is unavailable",
                             _class_path(i, "gpu", "model"),
                             f"did you mean {near!r}? If the nodes' nvidia.com/gpu.product label really is "
                             f"{nc.gpu.model!r}, ignore this", severity="warning")
        elif model is not None and nc.gpu.memory is not None and int(nc.gpu.memory) > model.memory_mib:
            yield Diagnostic("memory-override-on-known-model",
                             f"gpu.memory {int(nc.gpu.memory)} MiB is more than a {model.product} has "
                             f"({model.memory_mib} MiB)", _class_path(i, "gpu", "memory"),
                             "use the node's nvidia.com/gpu.memory label value, in MiB", severity="warning")


def check_overlapping_classes(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    classes = policy.spec.node_classes
    for j, i in _overlapping_pairs([nc.name for nc in classes], [nc.node_selector for nc in classes]):
        a, b = classes[i], classes[j]
        yield Diagnostic(
            "overlapping-node-classes",
            f"node classes {a.name!r} and {b.name!r} can select the same node: a node carrying both "
            "label sets would run two device plugins that register the same resources",
            _class_path(j, "nodeSelector"),
            f"make the selectors disjoint: give both a key with different values (e.g. "
            f"node.kubernetes.io/instance-type), as {a.name!r} has {_fmt(a.node_selector)}",
        )


def _overlapping_pairs(names: list[str], node_selectors: list[dict[str, str]]) -> Iterator[tuple[int, int]]:
    """(j, i) for every i < j whose equality selectors share no key with different values, and whose
    names differ (a duplicate name is check_unique_names' finding), ordered by j, then i.

    The same pairs as testing selectors.conflicting_key on all n(n-1)/2 pairs, without the quadratic
    Python loop: class i conflicts with class j exactly when i has some key of j's selector but not
    j's value for it, so with one bitset (an int, bit i for class i) per key and per key=value seen so
    far, j's conflicting classes are an OR over j's few labels of ``has_key & ~has_value``. A 1,000-class
    fleet takes milliseconds instead of a second (docs/performance.md).
    """
    has_key: dict[str, int] = {}
    has_value: dict[tuple[str, str], int] = {}
    has_name: dict[str, int] = {}
    for j, (name, selector) in enumerate(zip(names, node_selectors, strict=True)):
        excluded = has_name.get(name, 0)
        for key, value in selector.items():
            excluded |= has_key.get(key, 0) & ~has_value.get((key, value), 0)
        overlapping = ((1 << j) - 1) & ~excluded
        while overlapping:
            lowest = overlapping & -overlapping
            yield j, lowest.bit_length() - 1
            overlapping ^= lowest
        bit = 1 << j
        has_name[name] = has_name.get(name, 0) | bit
        for key, value in selector.items():
            has_key[key] = has_key.get(key, 0) | bit
            has_value[(key, value)] = has_value.get((key, value), 0) | bit


def _fmt(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _rewritten_labels(nc: NodeClass) -> tuple[str, ...]:
    """GFD labels this class's own config changes.  Under MIG mixed the full-GPU labels come from a labeler
    without sharing, so only replicas (to 0) and the sharing strategy move (internal/lm/mig-strategy.go)."""
    if nc.sharing.mode in ("exclusive", "vgpu"):  # HAMi's plugin does not feed GFD: its labels stay unshared
        return ()
    if nc.mig_strategy == "mixed":
        return ("nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy")
    return GFD_MUTABLE


def check_mutable_selector_labels(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in _classes(policy):
        rewritten = _rewritten_labels(nc)
        for key in sorted(nc.node_selector):
            if key in rewritten:
                yield Diagnostic(
                    "shared-product-selector",
                    f"class {nc.name!r} selects nodes by {key}, which GPU Feature Discovery rewrites once "
                    f"{nc.sharing.mode} is configured (e.g. Tesla-T4 becomes Tesla-T4-SHARED)",
                    _class_path(i, "nodeSelector", key),
                    "select by a label sharing does not change: node.kubernetes.io/instance-type or a node-pool label",
                )


def check_replicas(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in _classes(policy):
        for name, shared in (("timeSlicing", nc.sharing.time_slicing), ("mps", nc.sharing.mps)):
            if shared is not None:
                yield from _replicated(i, resolved.classes[i], name, shared)
        if nc.sharing.vgpu is not None and nc.sharing.vgpu.sizing is not None:
            yield from _sized(resolved.classes[i], _class_path(i, "sharing", "vgpu"), nc.sharing.vgpu.sizing)
        if nc.sharing.mig is not None:
            for profile, replicas in sorted(nc.sharing.mig.time_slicing.items()):
                if replicas < 2:
                    yield Diagnostic("replicas-too-low", f"time-slicing {profile} with {replicas} replica does "
                                     "nothing, and the device plugin refuses replicas below 2",
                                     _class_path(i, "sharing", "mig", "timeSlicing", profile),
                                     f"remove {profile} from timeSlicing, or use 2 or more")


def _replicated(i: int, rc: ResolvedClass, name: str, shared: ReplicatedSharing) -> Iterator[Diagnostic]:
    path = _class_path(i, "sharing", name)
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
    for i, nc in _classes(policy):
        if nc.sharing.mig is None:
            continue
        path = _class_path(i, "sharing", "mig")
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
                      "must be added to gpupolicy's catalog (policy/catalog.yaml) first; until then use "
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
            gpath = _class_path(i, "sharing", "mig", "groups", g, "gpus")
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
                         _class_path(i, "sharing", "mig", "groups"), "add a group for them, or use strategy: mixed")
    elif missing:
        # mig-parted's assert requires every GPU of the node to match some entry (mig.md §4): the compiled config
        # gives these GPUs an entry with MIG off, and mixed advertises them whole.
        yield Diagnostic("mig-groups-incomplete", f"GPUs {missing} are in no group: the compiled mig-parted config "
                         "turns MIG off on them, and the mixed strategy advertises them as whole nvidia.com/gpu",
                         _class_path(i, "sharing", "mig", "groups"),
                         "add a group for them if they should be partitioned too", severity="info")


def _mig_layouts(i: int, nc: NodeClass, geometry: catalog.MigGeometry) -> Iterator[Diagnostic]:
    mig_spec = nc.sharing.mig
    assert mig_spec is not None
    names = [p.name for p in geometry.profiles]
    seen_profiles: set[str] = set()
    for g, (gpus, layout) in enumerate(mig_spec.layouts(nc.gpu.count)):
        base = ("layout",) if mig_spec.layout is not None else ("groups", g, "layout")
        lpath = _class_path(i, "sharing", "mig", *base)
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
                         _class_path(i, "sharing", "mig", "strategy"), "use strategy: mixed, or one profile")
    for profile in sorted(mig_spec.time_slicing):
        tpath = _class_path(i, "sharing", "mig", "timeSlicing", profile)
        if profile not in seen_profiles:
            yield Diagnostic("mig-time-slicing-unknown-profile", f"timeSlicing names {profile!r}, which the "
                             "layout does not create", tpath,
                             f"time-slice one of {', '.join(sorted(seen_profiles))}")


def _fmt_layout(layout: dict[str, int]) -> str:
    return "{" + ", ".join(f"{p}: {n}" for p, n in sorted(layout.items())) + "}"


def check_mps(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    for i, nc in _classes(policy):
        if nc.sharing.mps is None:
            continue
        path = _class_path(i, "sharing", "mps")
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


def check_plugin_version(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    release = releases.find(plugin.version)
    path = ("spec", "devicePlugin", "version")
    if release is None:
        known = releases.config_releases()
        near = releases.nearest(plugin.version)
        yield Diagnostic("unknown-plugin-version", f"device plugin {plugin.version} is not a release gpupolicy knows: "
                         f"it knows {known[0].tag} to {known[-1].tag}, the releases that read a config file, and "
                         "writes each config for what its release really parses and advertises", path,
                         f"use a published release, such as {near.tag}")
    elif not release.config_file:
        yield Diagnostic("unsupported-plugin-version", f"device plugin {plugin.version} reads no config file "
                         "(config files arrived in v0.12.0)", path,
                         "upgrade the plugin to v0.12.0 or newer (v0.14.5 is the oldest commonly deployed)")
        return
    else:
        yield from _device_list_strategy(plugin.flags, release)
    if plugin.deploy == "gpu-operator" and plugin.image is not None:
        yield Diagnostic("operator-image-set", "devicePlugin.image is ignored with deploy: gpu-operator (the "
                         "ClusterPolicy chooses the plugin image)", ("spec", "devicePlugin", "image"),
                         "remove image, or set it in the ClusterPolicy's devicePlugin.version", severity="warning")
    if policy.spec.kubernetes_minor < 28 and policy.spec.admission.enabled:
        yield Diagnostic("version-unsupported-feature", "the webhook registration uses matchConditions, which need "
                         "Kubernetes 1.28 or newer", ("spec", "kubernetesVersion"),
                         "target 1.28 or newer, or set admission.enabled: false")
    engine = policy.spec.admission.engine
    if engine in ("vap", "both") and not policy.spec.vap_available and policy.spec.admission.enabled:
        yield Diagnostic("version-unsupported-feature", f"admission.engine {engine} compiles the rules to "
                         "ValidatingAdmissionPolicy, which is GA (admissionregistration.k8s.io/v1) from Kubernetes "
                         f"1.{VAP_MINOR}; the spec targets {policy.spec.kubernetes_version}",
                         ("spec", "admission", "engine"),
                         f"set admission.engine: webhook, or target kubernetesVersion 1.{VAP_MINOR} or newer")


def _device_list_strategy(flags: PluginFlags, release: releases.Release) -> Iterator[Diagnostic]:
    path = ("spec", "devicePlugin", "flags", "deviceListStrategy")
    strategies = flags.device_list_strategies
    for value in dict.fromkeys(strategies):
        if value not in release.strategies:
            since = next(r.tag for r in releases.config_releases() if value in r.strategies)
            yield Diagnostic("version-unsupported-feature", f"the {value} device list strategy needs device plugin "
                             f"{since} or newer (spec uses {release.tag})", path,
                             "upgrade the plugin or pick another value")
    if release.list_format == "string" and len(set(strategies)) > 1:
        # v0.12 and v0.13 parse deviceListStrategy as one string (dp@v0.13.0:cmd/nvidia-device-plugin/main.go).
        yield Diagnostic("version-unsupported-feature", "a list of device list strategies needs device plugin "
                         f"v0.14.0 or newer; {release.tag} reads one string", path,
                         "give one strategy, or upgrade the plugin")


def check_mig_plugin_release(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """What the targeted release really does with each MIG class's profiles (policy/releases.py): refused where
    it would exit at start or fold two profiles into one resource, a warning where it merely names one
    differently (the report, the admission policy and the config then use that name)."""
    if releases.find(resolved.spec.device_plugin.version) is None:
        return  # unknown-plugin-version already says what to fix
    release = resolved.plugin_release
    for i, rc in enumerate(resolved.classes):
        mig_spec = rc.spec.sharing.mig
        geometry = rc.gpu.mig if rc.gpu else None
        if mig_spec is None or geometry is None or not rc.advertised:
            continue
        known = tuple(p for a in rc.advertised if (p := geometry.profile(a.profile)) is not None)
        if len(known) < len(rc.advertised):
            continue  # unknown-mig-profile already says what to fix
        yield from _release_exits(i, rc, release, geometry, known)
        if mig_spec.strategy == "mixed":
            yield from _release_names(i, rc, release, geometry, known)


def _release_exits(i: int, rc: ResolvedClass, release: releases.Release, geometry: catalog.MigGeometry,
                   profiles: tuple[catalog.MigProfile, ...]) -> Iterator[Diagnostic]:
    strategy = rc.mig_strategy
    assert strategy != "none"
    failing = [a for a in rc.advertised if not (a.starts and a.certain)]
    if not failing:
        return
    needed = releases.oldest_advertising(geometry, profiles, strategy, own_names=False)
    upgrade = (f"set spec.devicePlugin.version to {needed.tag} or newer, the oldest release from which every later "
               "one starts with this layout" if needed else "no known release starts with this layout")
    said: set[str] = set()
    for outcome in failing:
        hint = upgrade if outcome.any_layout else f"{upgrade}; or remove {outcome.profile} from it"
        if outcome.reason in said:
            continue  # a walk that fails whatever the layout is said once
        said.add(outcome.reason)
        if outcome.starts:
            why = (f"what device plugin {release.tag} advertises {outcome.profile} instances as cannot be told: it "
                   "names MIG devices by their memory, which the catalog only estimates for this GPU or which sits "
                   f"on a whole GiB ({outcome.reason})")
        else:
            why = f"device plugin {release.tag} would exit at start on class {rc.name}'s nodes: {outcome.reason}"
        yield Diagnostic("mig-profile-needs-plugin-release", why, _profile_path(i, rc, outcome.profile), hint)


def _release_names(i: int, rc: ResolvedClass, release: releases.Release, geometry: catalog.MigGeometry,
                   profiles: tuple[catalog.MigProfile, ...]) -> Iterator[Diagnostic]:
    by_resource: dict[str, list[str]] = {}
    for outcome in rc.advertised:
        if outcome.starts and outcome.certain:
            by_resource.setdefault(outcome.resource or "", []).append(outcome.profile)
    needed = releases.oldest_advertising(geometry, profiles, "mixed", own_names=True)
    upgrade = f"set spec.devicePlugin.version to {needed.tag} or newer" if needed else "no known release does"
    for resource, names in sorted(by_resource.items()):
        own = releases.mig_resource(names[0], "mixed")
        if len(names) > 1:
            folded = [n for n in names if releases.mig_resource(n, "mixed") != resource] or names[1:]
            yield Diagnostic(
                "mig-profiles-share-resource",
                f"device plugin {release.tag} advertises {' and '.join(sorted(names))} instances all as {resource} "
                f"({_reason(rc, folded[0])}): pods cannot ask for one or the other, and timeSlicing cannot tell "
                "them apart", _profile_path(i, rc, folded[0]),
                f"{upgrade} (each profile then has a resource of its own), or keep only one of "
                f"{', '.join(sorted(names))}")
        elif resource != own:
            yield Diagnostic(
                "mig-resource-renamed",
                f"device plugin {release.tag} advertises {names[0]} instances as {resource}, not {own} "
                f"({_reason(rc, names[0])}); the report, the admission policy and the timeSlicing config use "
                f"{resource}", _profile_path(i, rc, names[0]),
                f"request {resource} in pods, or {upgrade} for {own}", severity="warning")


def _reason(rc: ResolvedClass, profile: str) -> str:
    return next(a.reason for a in rc.advertised if a.profile == profile)


def _profile_path(i: int, rc: ResolvedClass, profile: str) -> tuple[str | int, ...]:
    """The profile's key in the first layout that names it."""
    mig_spec = rc.spec.sharing.mig
    assert mig_spec is not None
    if mig_spec.layout is not None:
        return _class_path(i, "sharing", "mig", "layout", profile)
    assert mig_spec.groups is not None
    g = next((g for g, group in enumerate(mig_spec.groups) if profile in group.layout), 0)
    return _class_path(i, "sharing", "mig", "groups", g, "layout", profile)


def check_tenants(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    names = {nc.name for nc in policy.spec.node_classes}
    for t, tenant in enumerate(policy.spec.tenants):
        for c, cls in enumerate(tenant.classes):
            if cls not in names:
                near = did_you_mean(cls, names)
                yield Diagnostic("tenant-unknown-class", f"tenant {tenant.name!r} names class {cls!r}, which does "
                                 "not exist", ("spec", "tenants", t, "classes", c),
                                 f"did you mean {near[0]!r}?" if near else f"classes: {', '.join(sorted(names))}")
        if set(tenant.classes) <= names and not _usable_classes(resolved, tenant):
            yield Diagnostic("tenant-mode-unavailable", f"tenant {tenant.name!r} may use {', '.join(tenant.allow)}, "
                             "but no node class it may use offers that", ("spec", "tenants", t, "allow"),
                             "allow a mode one of its classes offers (time-sliced MIG, mig+time-slicing, needs both "
                             "mig and time-slicing), or add such a class")
    yield from _tenant_overlaps(policy.spec.tenants)
    yield from _tenant_selectors_negatable(policy)
    yield from _default_modes(resolved)


def _default_modes(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """admission.defaultAllow that no class satisfies admits no GPU pod outside the tenants: tenant-mode-unavailable
    for namespaces no tenant selects. An empty defaultAllow says so on purpose and is left alone."""
    admission = resolved.spec.admission
    allowed = set(admission.default_allow)
    if not admission.enabled or not allowed or any(set(o.modes) <= allowed for c in resolved.classes for o in c.offers):
        return
    if any(not c.offers for c in resolved.classes):
        return  # a class that offers nothing is refused by its own finding (a layout its plugin cannot start with)
    offered = sorted({o.mode_name for c in resolved.classes for o in c.offers})
    yield Diagnostic("default-mode-unavailable", f"admission.defaultAllow is {', '.join(admission.default_allow)}, "
                     f"but no node class offers that (the classes offer {', '.join(offered)}), so namespaces outside "
                     "every tenant may use no GPU", ("spec", "admission", "defaultAllow"),
                     "allow a mode a class offers (time-sliced MIG, mig+time-slicing, needs both mig and "
                     "time-slicing), or write defaultAllow: [] to say that such namespaces get no GPU")


def tenant_requirements(tenant: Tenant) -> tuple[selectors.Requirement, ...]:
    return tenant.namespace_selector.requirements()


def _tenant_selectors_negatable(policy: ClusterGPUPolicy) -> Iterator[Diagnostic]:
    """The webhook registration routes namespaces no tenant selects to the default rules by negating each
    tenant's selector; only one-requirement selectors have a negation the API server can evaluate."""
    if not policy.spec.admission.enabled:
        return
    for t, tenant in enumerate(policy.spec.tenants):
        if selectors.negate(tenant_requirements(tenant)) is None:
            yield tenant_selector_too_complex(tenant, t)


def tenant_selector_too_complex(tenant: Tenant, index: int) -> Diagnostic:
    """The finding for a tenant whose selector the webhook registration cannot negate (checks and compiler)."""
    count = len(tenant_requirements(tenant))
    return Diagnostic("tenant-selector-too-complex", f"tenant {tenant.name!r} selects namespaces with {count} "
                      "requirements; the webhook can only route namespaces that no tenant selects when each "
                      "tenant selects by one label requirement", ("spec", "tenants", index, "namespaceSelector"),
                      "label the tenant's namespaces with one label (e.g. gpu-tenant: <name>) and select by it, "
                      "or use one matchExpressions entry (key In [a, b])")


def _usable_classes(resolved: ResolvedPolicy, tenant: Tenant) -> list[str]:
    """Classes the tenant may land on: named by it (if it names any) with an offer of allowed modes only."""
    return sorted({rc.name for _, rc, _ in resolved.reachable(tenant)})


def _tenant_overlaps(tenants: tuple[Tenant, ...]) -> Iterator[Diagnostic]:
    reqs = [tenant_requirements(t) for t in tenants]
    for j in range(len(tenants)):
        for i in range(j):
            if tenants[i].name != tenants[j].name and selectors.may_overlap(reqs[i], reqs[j]):
                yield Diagnostic("tenant-overlap", f"tenants {tenants[i].name!r} and {tenants[j].name!r} can select "
                                 f"the same namespace; pods there get only the sharing modes both allow",
                                 ("spec", "tenants", j, "namespaceSelector"),
                                 "make the selectors disjoint if that is not what you want", severity="warning")


# mig-parted config names the compiler itself emits for every cluster.
RESERVED_CLASS_NAMES = frozenset({"all-disabled", "all-enabled"})


def check_reserved_names(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in _classes(policy):
        if nc.name in RESERVED_CLASS_NAMES:
            yield Diagnostic("reserved-class-name", f"class name {nc.name!r} is reserved: the compiled mig-parted "
                             "config already defines it for nodes whose MIG mode is off", _class_path(i, "name"),
                             "rename the class, e.g. after the node pool it selects")


def check_operator_settings(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """Under the GPU Operator one ClusterPolicy drives every plugin: per-class settings it overrides are lost."""
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    if plugin.deploy != "gpu-operator":
        return
    chosen = policy.spec.operator_mig_strategy
    for i, nc in _classes(policy):
        if nc.mig_strategy not in ("none", chosen):
            yield Diagnostic("operator-mig-strategy-conflict", f"class {nc.name!r} needs MIG strategy "
                             f"{nc.mig_strategy}, but other classes need {chosen} and the GPU Operator sets one "
                             "cluster-wide mig.strategy that overrides every class's config",
                             _class_path(i, "sharing", "mig", "strategy"),
                             f"use strategy: {chosen} in every MIG class, or run this class in another cluster")
        if nc.sharing.mps is not None and chosen == "mixed":
            yield Diagnostic("operator-mig-strategy-conflict", f"class {nc.name!r} uses MPS, but the cluster-wide "
                             "mig.strategy is mixed and the device plugin refuses MPS with it ('using "
                             "--mig-strategy=mixed is not supported with MPS')", _class_path(i, "sharing", "mps"),
                             "use strategy: single in the MIG classes, or time-slicing in this class")
    changed = sorted(plugin.flags.model_dump(by_alias=True, exclude_defaults=True))
    if changed:
        yield Diagnostic("operator-flags-ignored", f"devicePlugin.flags ({', '.join(changed)}) have no effect under "
                         "the GPU Operator: it sets them as environment variables, which beat the config file",
                         ("spec", "devicePlugin", "flags", changed[0]),
                         "set them in the ClusterPolicy's devicePlugin.env instead", severity="warning")


def check_mps_flags(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    for i, nc in _classes(policy):
        mps = nc.sharing.mps
        if mps is not None and not mps.fail_requests_greater_than_one and resolved.plugin_release.mps == "forced":
            # The plugin overwrites the field after parsing, silently (dp@v0.15.0:api/config/v1/config.go:56-62):
            # the config still loads, so this is a warning; the compiled config and the offer say true.
            yield Diagnostic("version-unsupported-feature", "MPS with failRequestsGreaterThanOne: false needs device "
                             f"plugin v0.20.0 or newer; {plugin.version} forces it to true, so a container asking "
                             "for more than one replica is still refused",
                             _class_path(i, "sharing", "mps", "failRequestsGreaterThanOne"),
                             "remove the field, or upgrade the plugin to v0.20.0", severity="warning")


def check_operator_release(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """The operator release the output is written for: a known one, shipping the plugin release the configs target."""
    plugin = resolved.spec.device_plugin
    if plugin.deploy != "gpu-operator":
        return
    wanted = plugin.operator.version
    path = ("spec", "devicePlugin", "operator", "version")
    known = ", ".join(r.version for r in operator.RELEASES[-4:])
    if wanted and resolved.operator_release is None:
        yield Diagnostic("unknown-operator-version", f"GPU Operator {wanted} is not a release gpupolicy knows, so "
                         "its ClusterPolicy CRD cannot be checked", path,
                         f"name a release from v23.3.0 to {operator.RELEASES[-1].version} (newest: {known})")
    elif not wanted and resolved.operator_release is None:
        # The same finding as a named release gpupolicy does not know (the CRD cannot be checked, the fix is to name
        # a known release), as a warning: nothing the user wrote is wrong, something is missing.
        yield Diagnostic("unknown-operator-version", f"no GPU Operator release ships device plugin {plugin.version}, "
                         "and devicePlugin.operator.version is not set, so the ClusterPolicy CRD cannot be checked",
                         ("spec", "devicePlugin", "version"),
                         "set devicePlugin.operator.version to the operator release the cluster runs",
                         severity="warning")
    elif resolved.operator_release is not None and resolved.operator_release.device_plugin_tuple != \
            plugin.version_tuple:
        release = resolved.operator_release
        yield Diagnostic("operator-plugin-version-mismatch", f"GPU Operator {release.version} deploys device plugin "
                         f"{release.device_plugin}, but the configs are written for {plugin.version}",
                         ("spec", "devicePlugin", "version"),
                         f"set devicePlugin.version: {release.device_plugin.split('-')[0]}, or override the plugin "
                         "version in the operator's values", severity="warning")


def check_monitoring(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """What the GPU Operator release can set on the dcgm-exporter it runs, for the monitoring rules: the node each
    series comes from (a ServiceMonitor relabeling) and, for per-pod series, the host's PIDs."""
    spec = resolved.spec
    release = resolved.operator_release
    dcgm = spec.monitoring.dcgm_exporter
    if spec.device_plugin.deploy != "gpu-operator" or release is None or not (spec.monitoring.enabled and dcgm.enabled):
        return
    if not release.crd_relabels_dcgm_exporter:
        needs = operator.first_with(operator.DCGM_RELABELINGS).version
        yield Diagnostic("version-unsupported-feature", f"the monitoring rules join dcgm-exporter's series on the "
                         f"node they come from, a ServiceMonitor relabeling GPU Operator {release.version} cannot set "
                         f"(dcgmExporter.serviceMonitor.relabelings needs {needs})",
                         ("spec", "monitoring", "dcgmExporter"),
                         f"upgrade the operator to {needs} or newer, or set monitoring.dcgmExporter.enabled: false")
    if dcgm.per_pod_metrics and not release.crd_has_dcgm_exporter_host_pid:
        needs = operator.first_with(operator.DCGM_HOST_PID).version
        yield Diagnostic("version-unsupported-feature", f"per-pod DCGM metrics need dcgm-exporter in the host's PID "
                         f"namespace, which GPU Operator {release.version} cannot set (dcgmExporter.hostPID needs "
                         f"{needs})", ("spec", "monitoring", "dcgmExporter", "perPodMetrics"),
                         f"upgrade the operator to {needs} or newer, or set perPodMetrics: false")


def check_driver(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """A class's stated driver against what its MIG layouts and MPS need (policy/drivers.py)."""
    for i, rc in enumerate(resolved.classes):
        stated = rc.spec.gpu.driver_version
        if stated is None:
            continue
        driver = drivers.parse_driver(stated)  # the model's pattern admits only digits and dots
        for gate in rc.driver_gates:
            if gate.satisfied_by(driver) is False:
                yield Diagnostic("driver-too-old", f"{gate.what} needs NVIDIA driver {gate.release} or newer; class "
                                 f"{rc.name!r} states {stated}", _class_path(i, "gpu", "driverVersion"),
                                 f"upgrade the nodes' driver to {gate.release} or newer, or {gate.otherwise}")


CHECKS: tuple[Check, ...] = (
    check_operator_release,
    check_monitoring,
    check_driver,
    check_reserved_names,
    check_operator_settings,
    check_mps_flags,
    check_unique_names,
    check_gpu_models,
    check_overlapping_classes,
    check_mutable_selector_labels,
    check_replicas,
    check_mig,
    check_mps,
    check_plugin_version,
    check_mig_plugin_release,
    check_tenants,
    *HAMI_CHECKS,
)


def run(policy: ClusterGPUPolicy | ResolvedPolicy) -> tuple[Diagnostic, ...]:
    """Every finding of every check (checks never stop at the first), on a policy resolved once."""
    resolved = policy if isinstance(policy, ResolvedPolicy) else resolve(policy)
    return tuple(d for check in CHECKS for d in check(resolved))
