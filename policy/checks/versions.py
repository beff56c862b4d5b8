"""What the targeted releases can do: the device plugin, the GPU Operator, the driver, the monitoring stack."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from policy.checks.common import class_path, classes_of
from policy.hardware import catalog, drivers, operator, releases
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import VAP_MINOR, PluginFlags


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


def check_standalone_components(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """A standalone tree runs the GFD and the MIG manager its targeted plugin release was shipped with
    (releases.feature_discovery, operator.mig_manager_release): refused where the release was shipped with none, or
    with a GFD that cannot read the config written for the release."""
    plugin = resolved.spec.device_plugin
    if plugin.deploy != "standalone" or releases.find(plugin.version) is None:
        return  # the operator runs its own; unknown-plugin-version already says what to fix
    release = resolved.plugin_release
    if not release.config_file:
        return  # unsupported-plugin-version already says what to fix
    gfd = releases.feature_discovery(release)
    path = ("spec", "devicePlugin", "gpuFeatureDiscovery")
    if plugin.labels_nodes and gfd.image is None and not gfd.in_plugin_image:
        later = _first_later(release, lambda r: releases.feature_discovery(r).image is not None)
        yield Diagnostic("version-unsupported-feature", f"gpuFeatureDiscovery: true runs the GPU Feature Discovery "
                         f"that device plugin {release.tag} was shipped with, and none was: {gfd.missing}", path,
                         f"set devicePlugin.version: {later.tag} (its chart ships "
                         f"{releases.feature_discovery(later).image}), or gpuFeatureDiscovery: false")
    elif plugin.labels_nodes and not gfd.reads_config_of(release):
        later = _first_later(release, lambda r: releases.feature_discovery(r).reads_config_of(r))
        yield Diagnostic("version-unsupported-feature", f"device plugin {release.tag} parses "
                         f"flags.plugin.deviceListStrategy only as a {release.list_format}, and the GPU Feature "
                         f"Discovery its chart ships ({gfd.image}) only as a {gfd.list_format}: they read the class's "
                         # GFD returns "unable to load config" from its action (gfd@v0.8.0:
                         # cmd/gpu-feature-discovery/main.go:126-131) and the container exits.
                         "one config file, so GFD would exit at start on every node", path,
                         f"set devicePlugin.version: {later.tag} (its GFD, {releases.feature_discovery(later).image}, "
                         "reads either), or gpuFeatureDiscovery: false")
    managed = sorted(rc.name for rc in resolved.classes if rc.mig_manager)
    if managed and plugin.mig_manager.image is None and operator.mig_manager_release(release.version) is None:
        first = min((r for r in (*operator.COMPONENTS_ONLY, *operator.RELEASES)
                     if r.device_plugin_tuple >= release.version), key=lambda r: r.version_tuple)
        shipped = first.device_plugin.split("-")[0]
        yield Diagnostic("version-unsupported-feature", f"the MIG classes ({', '.join(managed)}) run NVIDIA's MIG "
                         f"manager, by default the one the GPU Operator shipped with device plugin {release.tag}, and "
                         f"no operator release shipped {release.tag} (the first whose plugin reads a config file, "
                         f"{first.version}, shipped {shipped} with {first.mig_manager_image})",
                         ("spec", "devicePlugin", "version"),
                         f"set devicePlugin.migManager.image to the MIG manager to run (e.g. "
                         f"{first.mig_manager_image}), or devicePlugin.version: {shipped}")


def _first_later(release: releases.Release, good: Callable[[releases.Release], bool]) -> releases.Release:
    """The oldest config-file release after `release` that is `good` (every table ends with one that is)."""
    return next(r for r in releases.config_releases() if r.version > release.version and good(r))


def _device_list_strategy(flags: PluginFlags, release: releases.Release) -> Iterator[Diagnostic]:
    """Each device list strategy the targeted release refuses ('invalid --device-list-strategy option'), located
    at the value itself (the list item when the spec gives a list), naming the first release accepting it; the
    same facts mark the values in schemas/device-plugin-config.schema.json (x-since-values), which the consumer
    harnesses hold against NVIDIA's own code (tests/consumers/test_consumer_schemas.py)."""
    path: tuple[str | int, ...] = ("spec", "devicePlugin", "flags", "deviceListStrategy")
    strategies = flags.device_list_strategies
    listed = not isinstance(flags.device_list_strategy, str)
    for index, value in enumerate(strategies):
        if value not in release.strategies and value not in strategies[:index]:
            since = next(r.tag for r in releases.config_releases() if value in r.strategies)
            yield Diagnostic("version-unsupported-feature", f"the {value} device list strategy needs device plugin "
                             f"{since} or newer (spec uses {release.tag}, which refuses it at start: 'invalid "
                             f"--device-list-strategy option')", (*path, index) if listed else path,
                             f"set devicePlugin.version: {since} or newer, or pick one of "
                             f"{', '.join(release.strategies)}")
    if release.list_format == "string" and len(set(strategies)) > 1:
        # v0.12 and v0.13 parse deviceListStrategy as one string (dp@v0.13.0:cmd/nvidia-device-plugin/main.go).
        yield Diagnostic("version-unsupported-feature", "a list of device list strategies needs device plugin "
                         f"v0.14.0 or newer; {release.tag} reads one string", path,
                         "give one strategy, or upgrade the plugin")


def check_mig_plugin_release(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """What the targeted release really does with each MIG class's profiles (policy/hardware/releases.py): refused where
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
        return class_path(i, "sharing", "mig", "layout", profile)
    assert mig_spec.groups is not None
    g = next((g for g, group in enumerate(mig_spec.groups) if profile in group.layout), 0)
    return class_path(i, "sharing", "mig", "groups", g, "layout", profile)


def check_operator_settings(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """Under the GPU Operator one ClusterPolicy drives every plugin: per-class settings it overrides are lost."""
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    if plugin.deploy != "gpu-operator":
        return
    chosen = policy.spec.operator_mig_strategy
    for i, nc in classes_of(policy):
        if nc.mig_strategy not in ("none", chosen):
            yield Diagnostic("operator-mig-strategy-conflict", f"class {nc.name!r} needs MIG strategy "
                             f"{nc.mig_strategy}, but other classes need {chosen} and the GPU Operator sets one "
                             "cluster-wide mig.strategy that overrides every class's config",
                             class_path(i, "sharing", "mig", "strategy"),
                             f"use strategy: {chosen} in every MIG class, or run this class in another cluster")
        if nc.sharing.mps is not None and chosen == "mixed":
            yield Diagnostic("operator-mig-strategy-conflict", f"class {nc.name!r} uses MPS, but the cluster-wide "
                             "mig.strategy is mixed and the device plugin refuses MPS with it ('using "
                             "--mig-strategy=mixed is not supported with MPS')", class_path(i, "sharing", "mps"),
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
    for i, nc in classes_of(policy):
        mps = nc.sharing.mps
        if mps is not None and not mps.fail_requests_greater_than_one and resolved.plugin_release.mps == "forced":
            # The plugin overwrites the field after parsing, silently (dp@v0.15.0:api/config/v1/config.go:56-62):
            # the config still loads, so this is a warning; the compiled config and the offer say true.
            yield Diagnostic("version-unsupported-feature", "MPS with failRequestsGreaterThanOne: false needs device "
                             f"plugin v0.20.0 or newer; {plugin.version} forces it to true, so a container asking "
                             "for more than one replica is still refused",
                             class_path(i, "sharing", "mps", "failRequestsGreaterThanOne"),
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
    """A class's stated driver against what its MIG layouts and MPS need (policy/hardware/drivers.py)."""
    for i, rc in enumerate(resolved.classes):
        stated = rc.spec.gpu.driver_version
        if stated is None:
            continue
        driver = drivers.parse_driver(stated)  # the model's pattern admits only digits and dots
        for gate in rc.driver_gates:
            if gate.satisfied_by(driver) is False:
                yield Diagnostic("driver-too-old", f"{gate.what} needs NVIDIA driver {gate.release} or newer; class "
                                 f"{rc.name!r} states {stated}", class_path(i, "gpu", "driverVersion"),
                                 f"upgrade the nodes' driver to {gate.release} or newer, or {gate.otherwise}")
