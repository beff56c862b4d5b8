"""The NVIDIA device-plugin releases gpupolicy knows, as data: what each reads from its config file and how it
names MIG devices, so the report, the admission policy and the compiled configs say what the targeted release
really does.

Every fact below was read from NVIDIA/k8s-device-plugin at the tag it describes (`dp@<tag>:<path>:<lines>`);
every tag from v0.12.0 on vendors its dependencies, so the go-nvml (`const.go` = vendor/github.com/NVIDIA/
go-nvml/pkg/nvml/const.go) and go-nvlib (`nvlib/` = vendor/<go-nvlib module>/pkg/nvlib/device/) code cited is
exactly what each release was built with.

How a release advertises MIG devices (dp@v0.17.4:internal/rm/rm.go:97-137, internal/rm/device_map.go:135-151):
at start the plugin builds a list of (pattern, resource) pairs. Under `single` one pattern `*` maps every MIG
device to nvidia.com/gpu. Under `mixed` it walks the GPU instance (GI) profiles the GPU reports, NVML profile
enum 0 upwards up to the vendored go-nvml's GPU_INSTANCE_PROFILE_COUNT, and adds one pattern per distinct
profile string (`mig-<profile>`, "+" spelt "."). Then each MIG device's profile string goes to the first pattern
that matches it; a device that matches none, or whose profile cannot be named, makes the plugin exit ("MIG profile
'X' does not match any resource patterns"), and the DaemonSet pod crash-loops. Before v0.20.0 the match is an
unanchored regular expression (dp@v0.19.3:api/config/v1/resources.go:163-180; anchored in
dp@v0.20.0:api/config/v1/resources.go:169-182), so `1g.10gb+me` matches the plain `1g.10gb` pattern, which the
walk always adds first.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Literal

from policy.hardware.catalog import MigGeometry, MigProfile

__all__ = ["GFD_REPOSITORY", "RELEASES", "Advertised", "FeatureDiscovery", "MigNaming", "Release", "advertise",
           "behaviour", "config_releases", "feature_discovery", "find", "mig_resource", "nearest",
           "oldest_advertising"]

GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
MigStrategy = Literal["single", "mixed"]


@dataclass(frozen=True)
class MigNaming:
    """How one generation of releases names a MIG device and builds the mixed strategy's patterns."""

    walked: int
    """GPU_INSTANCE_PROFILE_COUNT of the vendored go-nvml: mixed walks NVML GI profile enums 0 to walked - 1."""
    named: int | None
    """Enums below this the device-profile code can name (go-nvlib's NewMigProfile / GetProfile); an instance of
    a higher enum cannot be named and the plugin exits. None: v0.12's own code, which names any instance."""
    attributes: bool
    """Profile strings carry their attributes (+me, +gfx, -me, +me.all), as go-nvlib spells them; v0.12 names
    a profile <g>g.<gb>gb only."""
    ceil_gib: bool
    """v0.12 writes the memory as MemorySizeMB rounded up to whole GiB; go-nvlib (v0.13+) rounds the fraction of
    the GPU's memory as mig-parted and nvidia-smi do, which gives the catalog's names."""
    anchored: bool
    """Patterns match the whole profile string, not any substring of it."""
    source: str


@dataclass(frozen=True)
class Release:
    """One device-plugin release tag and what differs per release for gpupolicy."""

    tag: str
    date: str
    """The tag's date (annotated tags) or its commit's date (lightweight tags)."""
    config_file: bool
    """Whether it reads --config-file at all (api/config/v1 arrived in v0.12.0)."""
    mig: MigNaming | None
    list_format: Literal["string", "list", "either"] | None
    """What flags.plugin.deviceListStrategy parses as: a string only, a list only, or either."""
    strategies: tuple[str, ...]
    """Device list strategies it accepts."""
    mps: Literal["absent", "forced", "honoured"]
    """sharing.mps: ignored (absent), parsed with failRequestsGreaterThanOne forced true, or honoured as given."""

    @property
    def version(self) -> tuple[int, int, int]:
        return _version(self.tag)


# --- MIG naming generations -------------------------------------------------------------------------------

_V12 = MigNaming(
    walked=8, named=None, attributes=False, ceil_gib=True, anchored=False,
    source="dp@v0.12.0:internal/rm/nvml.go:160-199 (walk, GPU_INSTANCE_PROFILE_COUNT=8 at const.go:555) and "
           "309-335 (device name from GetAttributes: %dg.%dgb, GB = ceil(MemorySizeMB/1024))",
)
_V13 = MigNaming(
    walked=8, named=8, attributes=True, ceil_gib=False, anchored=False,
    source="dp@v0.13.0:nvlib/mig_device.go:102-147 (GetProfile loops enums 0-7, else 'no matching profile IDs "
           "found'), nvlib/device.go:121-163 (walk), const.go:555 (COUNT=8)",
)
_V14 = MigNaming(
    walked=10, named=10, attributes=True, ceil_gib=False, anchored=False,
    source="dp@v0.14.0:const.go:617 (COUNT=10: REV1 2-slice +me and REV2 double-memory 1-slice), "
           "nvlib/mig_profile.go:57-120",
)
_V17_3 = MigNaming(
    walked=17, named=10, attributes=True, ceil_gib=False, anchored=False,
    source="dp@v0.17.3:const.go:1058 (COUNT=17) with go-nvlib v0.7.2, whose NewMigProfile knows enums 0-9 only "
           "(nvlib/mig_profile.go:57-120: 'invalid GPU Instance Profile ID'), also during the walk "
           "(nvlib/device.go:298-357)",
)
_V17_4 = MigNaming(
    walked=17, named=17, attributes=True, ceil_gib=False, anchored=False,
    source="dp@v0.17.4:nvlib/mig_profile.go:60-144 (go-nvlib v0.7.4: +gfx for enums 10-12, -me for 13-14, "
           "+me.all for 15-16), const.go:1058",
)
_V20 = MigNaming(
    walked=18, named=17, attributes=True, ceil_gib=False, anchored=True,
    source="dp@v0.20.0:api/config/v1/resources.go:169-182 (anchored, commit 0dfdfb979), const.go:1222 (COUNT=18; "
           "enum 17 is Thor's 3-slice GFX, which go-nvlib v0.12.0 cannot name)",
)

# --- the release table ------------------------------------------------------------------------------------
# Parser facts: deviceListStrategy a string in v0.12-v0.13 (dp@v0.13.0:cmd/nvidia-device-plugin/main.go:109-118),
# a list only in v0.14.0 (dp@v0.14.0:api/config/v1/flags.go:63), either from v0.14.1 (flags.go:77-98);
# cdi-annotations from v0.14.0 and cdi-cri from v0.15.0 (api/config/v1/strategy.go); sharing.mps from v0.15.0
# with failRequestsGreaterThanOne forced true (dp@v0.15.0:api/config/v1/config.go:56-62), an explicit false kept
# from v0.20.0 (dp@v0.20.0:api/config/v1/config.go:72-76).

_BASE = ("envvar", "volume-mounts")
_CDI = (*_BASE, "cdi-annotations")
_CRI = (*_CDI, "cdi-cri")

_Format = Literal["string", "list", "either"] | None
_Mps = Literal["absent", "forced", "honoured"]

# tag, date, MIG naming, deviceListStrategy format, strategies, MPS
_ROWS: tuple[tuple[str, str, MigNaming | None, _Format, tuple[str, ...], _Mps], ...] = (
    ("v0.0.0", "2019-03-15", None, None, (), "absent"),
    ("v0.1.0", "2019-09-10", None, None, (), "absent"),
    ("v0.2.0", "2019-10-03", None, None, (), "absent"),
    ("v0.3.0", "2019-10-08", None, None, (), "absent"),
    ("v0.4.0", "2019-10-15", None, None, (), "absent"),
    ("v0.5.0", "2020-04-06", None, None, (), "absent"),
    ("v0.6.0", "2020-04-23", None, None, (), "absent"),
    ("v0.7.0", "2020-09-22", None, None, (), "absent"),
    ("v0.7.1", "2020-11-17", None, None, (), "absent"),
    ("v0.7.2", "2020-12-14", None, None, (), "absent"),
    ("v0.7.3", "2020-12-22", None, None, (), "absent"),
    ("v0.8.0", "2021-02-04", None, None, (), "absent"),
    ("v0.8.1", "2021-02-08", None, None, (), "absent"),
    ("v0.8.2", "2021-02-16", None, None, (), "absent"),
    ("v0.9.0", "2021-02-26", None, None, (), "absent"),
    ("v0.10.0", "2021-11-09", None, None, (), "absent"),
    ("v0.11.0", "2022-03-18", None, None, (), "absent"),
    ("v0.12.0", "2022-06-06", _V12, "string", _BASE, "absent"),
    ("v0.12.1", "2022-06-13", _V12, "string", _BASE, "absent"),
    ("v0.12.2", "2022-06-16", _V12, "string", _BASE, "absent"),
    ("v0.12.3", "2022-09-12", _V12, "string", _BASE, "absent"),
    ("v0.13.0", "2022-11-30", _V13, "string", _BASE, "absent"),
    ("v0.14.0", "2023-04-03", _V14, "list", _CDI, "absent"),
    ("v0.14.1", "2023-07-12", _V14, "either", _CDI, "absent"),
    ("v0.14.2", "2023-10-19", _V14, "either", _CDI, "absent"),
    ("v0.14.3", "2023-11-15", _V14, "either", _CDI, "absent"),
    ("v0.14.4", "2024-01-28", _V14, "either", _CDI, "absent"),
    ("v0.14.5", "2024-02-29", _V14, "either", _CDI, "absent"),
    ("v0.15.0", "2024-04-16", _V14, "either", _CRI, "forced"),
    ("v0.15.1", "2024-06-25", _V14, "either", _CRI, "forced"),
    ("v0.16.0", "2024-07-16", _V14, "either", _CRI, "forced"),
    ("v0.16.1", "2024-07-23", _V14, "either", _CRI, "forced"),
    ("v0.16.2", "2024-08-08", _V14, "either", _CRI, "forced"),
    ("v0.17.0", "2024-10-31", _V14, "either", _CRI, "forced"),
    ("v0.17.1", "2025-03-12", _V14, "either", _CRI, "forced"),
    ("v0.17.2", "2025-05-13", _V14, "either", _CRI, "forced"),
    ("v0.17.3", "2025-07-24", _V17_3, "either", _CRI, "forced"),
    ("v0.17.4", "2025-09-04", _V17_4, "either", _CRI, "forced"),
    ("v0.18.0", "2025-10-21", _V17_4, "either", _CRI, "forced"),
    ("v0.18.1", "2025-12-02", _V17_4, "either", _CRI, "forced"),
    ("v0.18.2", "2026-01-23", _V17_4, "either", _CRI, "forced"),
    ("v0.19.0", "2026-03-17", _V17_4, "either", _CRI, "forced"),
    ("v0.19.1", "2026-04-22", _V17_4, "either", _CRI, "forced"),
    ("v0.19.2", "2026-05-26", _V17_4, "either", _CRI, "forced"),
    ("v0.19.3", "2026-06-16", _V17_4, "either", _CRI, "forced"),
    ("v0.20.0", "2026-08-19", _V20, "either", _CRI, "honoured"),
)

RELEASES: tuple[Release, ...] = tuple(
    Release(tag, date, mig is not None, mig, fmt, strategies, mps)
    for tag, date, mig, fmt, strategies, mps in _ROWS
)
_BY_TAG = {r.tag: r for r in RELEASES}
_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)")


def _version(tag: str) -> tuple[int, int, int]:
    match = _TAG.match(tag)
    return (int(match[1]), int(match[2]), int(match[3])) if match else (0, 0, 0)


def find(tag: str) -> Release | None:
    """The release with exactly this tag; None for a tag NVIDIA never published (or a pre-release)."""
    return _BY_TAG.get(tag)


def config_releases() -> tuple[Release, ...]:
    """The releases that read a config file, oldest first: the ones gpupolicy can compile for."""
    return tuple(r for r in RELEASES if r.config_file)


def behaviour(tag: str) -> Release:
    """The release whose behaviour a tag gets: itself, else the newest known release at or below it (the
    oldest one that reads a config file for anything older). Only for resolving a spec whose unknown tag the
    checks already refuse."""
    known = find(tag)
    if known is not None:
        return known
    wanted = _version(tag)
    below = [r for r in config_releases() if r.version <= wanted]
    return below[-1] if below else config_releases()[0]


def nearest(tag: str) -> Release:
    """The known release closest to an unknown tag, for "did you mean"."""
    wanted = _ordinal(_version(tag))
    return min(config_releases(), key=lambda r: (abs(_ordinal(r.version) - wanted), -_ordinal(r.version)))


def _ordinal(version: tuple[int, int, int]) -> int:
    return version[0] * 1_000_000 + version[1] * 1_000 + version[2]


# --- the GPU Feature Discovery each release was shipped with --------------------------------------------------

GFD_REPOSITORY = "nvcr.io/nvidia/gpu-feature-discovery"
#: Before v0.15.0 GFD had its own repository and image, and each plugin release's Helm chart bundled the GFD it was
#: released with as a subchart, whose image tag is "v" + the subchart's appVersion (the chart's
#: templates/_helpers.tpl nvidia-device-plugin.fullimage). Read from the chart packages NVIDIA published
#: (dp@gh-pages bf584288: stable/nvidia-device-plugin-<release>.tgz, file
#: nvidia-device-plugin/charts/gpu-feature-discovery/Chart.yaml), which agree with each tag's tree
#: (dp@<tag>:deployments/helm/nvidia-device-plugin/charts/gpu-feature-discovery/Chart.yaml), and confirmed by
#: `helm template --set gfd.enabled=true` (Helm v3.9.0) of every package, which renders exactly these images. The
#: GPU Operator pairs them alike wherever it shipped the release (GO@v1.11.0, v22.9.0, v22.9.1:
#: deployments/gpu-operator/values.yaml: plugin v0.12.2 with GFD v0.6.1, v0.12.3 with v0.6.2, v0.13.0 with v0.7.0).
#: Each GFD also parses the plugin's config file with the plugin's own api/config/v1 as vendored at a plugin commit
#: (gfd@<tag>: go.mod and vendor/github.com/NVIDIA/k8s-device-plugin/api/config/v1/flags.go), so it reads
#: flags.plugin.deviceListStrategy as that commit does: one string up to GFD v0.8.0 (vendoring plugin v0.13.0,
#: `DeviceListStrategy *string`), a string or a list from v0.8.1 (a v0.14.1 pre-release commit, deviceListStrategyFlag
#: with its own UnmarshalJSON).
_CHART_GFD: dict[str, tuple[str, Literal["string", "either"]]] = {
    "v0.12.1": ("v0.6.0", "string"),  # gfd@v0.6.0 vendors dp@ea0a422e (v0.11.1-0.20220527)
    "v0.12.2": ("v0.6.1", "string"),  # gfd@v0.6.1 and v0.6.2 vendor dp@ff7dc6fa (v0.12.2-0.20220616)
    "v0.12.3": ("v0.6.2", "string"),
    "v0.13.0": ("v0.7.0", "string"),  # gfd@v0.7.0 vendors dp@abb7275d (v0.12.3-0.20221101)
    "v0.14.0": ("v0.8.0", "string"),  # gfd@v0.8.0 vendors dp@v0.13.0
    "v0.14.1": ("v0.8.1", "either"),  # gfd@v0.8.1 and v0.8.2 vendor dp@1f3dd064 (v0.14.1-0.20230711)
    "v0.14.2": ("v0.8.2", "either"),
    "v0.14.3": ("v0.8.2", "either"),
    "v0.14.4": ("v0.8.2", "either"),
    "v0.14.5": ("v0.8.2", "either"),
}
#: Releases whose chart deploys no GFD at all, and why.
_NO_GFD: dict[str, str] = {
    # dp@v0.12.0:deployments/helm/nvidia-device-plugin/Chart.yaml requires gpu-feature-discovery "0.6.0", but the
    # subchart it bundles (charts/gpu-feature-discovery/Chart.yaml, also in the published package) is 0.6.0-rc.1,
    # which that constraint does not admit: Helm drops the subchart (helm@v3.9.0:pkg/chartutil/dependencies.go
    # getAliasDependency, IsCompatibleRange) and `helm template --set gfd.enabled=true` renders no GFD DaemonSet.
    # No GPU Operator release shipped v0.12.0 either (the first with a config file, v1.11.0, ships v0.12.2).
    "v0.12.0": "its Helm chart bundles gpu-feature-discovery 0.6.0-rc.1 where its Chart.yaml requires 0.6.0, so "
               "Helm renders no GFD for it, and no GPU Operator release shipped v0.12.0",
}


@dataclass(frozen=True)
class FeatureDiscovery:
    """The GPU Feature Discovery a device-plugin release was shipped with."""

    image: str | None
    """Its own image (nvcr.io/nvidia/gpu-feature-discovery:<tag>) before v0.15.0; None from v0.15.0, where GFD
    is the gpu-feature-discovery command of the plugin's own image (dp@v0.15.0: deployments/helm/
    nvidia-device-plugin/templates/daemonset-gfd.yml), and None where no GFD shipped with the release."""
    in_plugin_image: bool
    missing: str = ""
    """Why no GFD shipped with the release, as a clause about it ("its Helm chart ..."); empty otherwise."""
    list_format: Literal["string", "list", "either"] | None = None
    """What it parses flags.plugin.deviceListStrategy as, in the config file it shares with the plugin (from
    v0.15.0 the plugin's own code, so the release's list_format)."""

    @property
    def tag(self) -> str | None:
        return self.image.rsplit(":", 1)[1] if self.image else None

    def reads_config_of(self, release: Release) -> bool:
        """Whether it parses the deviceListStrategy of the config written for `release`, which is a list where the
        release parses only a list (v0.14.0), one string where it parses only a string, and either where it reads
        either (from v0.14.1, where every GFD shipped reads either too)."""
        return self.list_format in (release.list_format, "either") or release.list_format == "string"


def feature_discovery(release: Release) -> FeatureDiscovery:
    """The GFD `release` was shipped with (for a release that reads a config file)."""
    if release.version >= (0, 15, 0):
        return FeatureDiscovery(None, in_plugin_image=True, list_format=release.list_format)
    shipped = _CHART_GFD.get(release.tag)
    if shipped is None:
        return FeatureDiscovery(None, in_plugin_image=False, missing=_NO_GFD.get(release.tag, (
            "gpupolicy knows no GPU Feature Discovery shipped with it")))
    tag, list_format = shipped
    return FeatureDiscovery(f"{GFD_REPOSITORY}:{tag}", in_plugin_image=False, list_format=list_format)


# --- what a release advertises ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Advertised:
    """What one release does with one MIG profile's instances on a node of one GPU model."""

    profile: str
    resource: str | None
    """The extended resource the instances are advertised as; None when the plugin exits at start instead."""
    reason: str = ""
    """Why the plugin exits at start, or why the resource is not the profile's own name, as a clause about the
    release ("it can name ..."); empty otherwise."""
    certain: bool = True
    """False when the outcome rests on memory the catalog only estimates (v0.12 names by memory)."""
    any_layout: bool = False
    """The exit comes from the GPU model, not from this profile: no layout on this GPU starts."""

    @property
    def starts(self) -> bool:
        return self.resource is not None


def mig_resource(profile: str, strategy: MigStrategy) -> str:
    """The resource a profile's instances get on a release that names them right: nvidia.com/gpu under single,
    nvidia.com/mig-<profile> ("+" spelt ".") under mixed (dp@v0.20.0:internal/rm/rm.go:145)."""
    return GPU if strategy == "single" else MIG_PREFIX + profile.replace("+", ".")


def advertise(release: Release, gpu: MigGeometry, profile: MigProfile, strategy: MigStrategy) -> Advertised:
    """What `release` advertises a `profile` instance of a `gpu` node as, under `strategy`."""
    naming = release.mig
    if naming is None:
        return Advertised(profile.name, None, "it reads no config file")
    name = _name(naming, gpu, profile)
    if name is None:
        return Advertised(profile.name, None, _unnamed(naming, profile))
    if strategy == "single":
        return Advertised(profile.name, GPU)
    named = naming.walked if naming.named is None else naming.named
    unwalkable = next((p for p in _by_enum(gpu) if named <= p.nvml_enum < naming.walked), None)
    if unwalkable is not None:
        return Advertised(profile.name, None, (
            f"its mixed strategy walks every GPU instance profile the GPU has up to NVML profile "
            f"{naming.walked - 1} but can name only 0-{named - 1}, so the GPU's {unwalkable.name} (NVML "
            f"profile {unwalkable.nvml_enum}) stops the walk, whatever the layout"), any_layout=True)
    patterns = _patterns(naming, gpu)
    hit = next((i for i, (p, _, _) in enumerate(patterns) if (p == name[0] if naming.anchored else p in name[0])),
               None)
    pattern = None if hit is None else patterns[hit][0]
    # An uncertain pattern can only change the outcome if it comes first and could match: patterns of another
    # slice count never do (each starts "<g>g.").
    considered = patterns if hit is None else patterns[: hit + 1]
    certain = name[1] and all(c for _, c, g in considered if g == profile.compute_slices)
    if pattern is None:
        return Advertised(profile.name, None, (
            f"its mixed strategy makes resource patterns only for NVML GPU instance profiles 0-{naming.walked - 1}, "
            f"and {profile.name} (NVML profile {profile.nvml_enum}) matches none ('MIG profile '{name[0]}' does not "
            f"match any resource patterns')"), certain)
    resource = MIG_PREFIX + pattern.replace("+", ".")
    return Advertised(profile.name, resource, _renamed(naming, profile, name[0], pattern, resource), certain)


@lru_cache(maxsize=1024)  # a fleet repeats a few layouts on hundreds of classes, and the report runs the checks again
def oldest_advertising(gpu: MigGeometry, profiles: tuple[MigProfile, ...], strategy: MigStrategy,
                       *, own_names: bool) -> Release | None:
    """The oldest release from which every later known release starts with all `profiles` (and, with
    `own_names`, advertises each under its own name) for certain; None if not even the newest does."""
    found = None
    for release in reversed(config_releases()):
        outcomes = [advertise(release, gpu, p, strategy) for p in profiles]
        if not all(o.starts and o.certain and (not own_names or o.resource == mig_resource(o.profile, strategy))
                   for o in outcomes):
            break
        found = release
    return found


def _by_enum(gpu: MigGeometry) -> tuple[MigProfile, ...]:
    return tuple(sorted(gpu.profiles, key=lambda p: p.nvml_enum))


@cache
def _patterns(naming: MigNaming, gpu: MigGeometry) -> tuple[tuple[str, bool, int], ...]:
    """The mixed strategy's patterns in list order, each with whether its spelling is certain and its slice
    count: the GPU's profiles by NVML enum, below `walked`, first spelling of each string kept (go-nvlib's
    VisitMigProfiles de-duplicates by string, dp@v0.17.4:nvlib/device.go:467-492; v0.12's walkMigProfiles
    likewise, dp@v0.12.0:internal/rm/nvml.go:160-199)."""
    seen: dict[str, tuple[str, bool, int]] = {}
    for p in _by_enum(gpu):
        if p.nvml_enum < naming.walked:
            name = _name(naming, gpu, p)
            if name is not None and name[0] not in seen:
                seen[name[0]] = (name[0], name[1], p.compute_slices)
    return tuple(seen.values())


def _name(naming: MigNaming, gpu: MigGeometry, profile: MigProfile) -> tuple[str, bool] | None:
    """The profile string a release gives an instance and whether it is certain; None if it cannot name it."""
    if naming.named is not None and profile.nvml_enum >= naming.named:
        return None
    if not naming.ceil_gib:
        return profile.name, True
    # v0.12: ceil(MemorySizeMB / 1024). The catalog's MiB come from nvidia-smi's GiB column (two decimals), so
    # the true figure may lie up to ~6 MiB either side: a name on a whole-GiB boundary, or from an estimated
    # figure, is not certain.
    low, high = math.ceil((profile.memory_mib - 6) / 1024), math.ceil((profile.memory_mib + 6) / 1024)
    certain = low == high and not profile.memory_estimated
    return f"{profile.compute_slices}g.{math.ceil(profile.memory_mib / 1024)}gb", certain


def _unnamed(naming: MigNaming, profile: MigProfile) -> str:
    return (f"it can name MIG instances of NVML GPU instance profiles 0-{(naming.named or 0) - 1} only, under "
            f"either strategy, and a {profile.name} instance is NVML profile {profile.nvml_enum}")


def _renamed(naming: MigNaming, profile: MigProfile, name: str, pattern: str, resource: str) -> str:
    if resource == mig_resource(profile.name, "mixed"):
        return ""
    if naming.ceil_gib:
        return (f"releases before v0.13.0 name MIG devices by their memory rounded up to whole GiB, without "
                f"attributes: {profile.name} is {name} there")
    return (f"before v0.20.0 the plugin matches MIG profiles with an unanchored pattern, and {profile.name} "
            f"matches {pattern} first")
