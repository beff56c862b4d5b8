"""GPU Operator releases: what each ships and what its ClusterPolicy CRD and Helm chart do.

Read from NVIDIA/gpu-operator at every tag v23.3.0 ... v26.7.0 (the commit each tag named is in the table):
`deployments/gpu-operator/values.yaml` keys devicePlugin.version, gfd.version, migManager.version; the chart's
`templates/clusterpolicy.yaml`; and the chart's ClusterPolicy CRD (`crd_path`), whose schema for the fields
gpupolicy writes is restated in CRD_FIELDS, release by release, and rendered as a JSON Schema by `crd_schema`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Version = tuple[int, int, int]
JsonType = Literal["object", "array", "string", "boolean"]

MIG_MANAGER_REPOSITORY = "nvcr.io/nvidia/cloud-native/k8s-mig-manager"
REPOSITORY = "NVIDIA/gpu-operator"
# The ClusterPolicy fields whose presence or default the compiler and its checks depend on.
MIG_CONFIG_NAME = "spec.migManager.config.name"
DCGM_RELABELINGS = "spec.dcgmExporter.serviceMonitor.relabelings"
DCGM_HOST_PID = "spec.dcgmExporter.hostPID"


def parse_version(text: str) -> Version:
    """``v0.17.1-ubi9`` -> (0, 17, 1): the release, without a distribution suffix."""
    major, minor, patch = text.lstrip("v").split("-")[0].split(".")
    return int(major), int(minor), int(patch)


def crd_path(version: Version) -> str:
    """Where the chart keeps the ClusterPolicy CRD (the file lost its _crd suffix in v24.9.0)."""
    name = "nvidia.com_clusterpolicies_crd.yaml" if version < (24, 9, 0) else "nvidia.com_clusterpolicies.yaml"
    return f"deployments/gpu-operator/crds/{name}"


@dataclass(frozen=True)
class CrdField:
    """What the ClusterPolicy CRD says of one field gpupolicy writes, in the schema of nvidia.com/v1 (its only
    served version), true from release `since` through `until` (None: through the newest release of the table).

    The path is dotted from the object's root; `[]` stands for the items of an array. Each fact was read from
    NVIDIA/gpu-operator@<tag>:<crd_path> at every tag of its range.
    """

    path: str
    type: JsonType
    since: str = "v23.3.0"
    until: str | None = None
    enum: tuple[str, ...] = ()
    default: str | None = None
    pattern: str | None = None
    required: tuple[str, ...] = ()
    values: JsonType | None = None
    """For a map (an object of free keys): the type of its values."""

    def holds_in(self, version: Version) -> bool:
        return parse_version(self.since) <= version and (self.until is None or version <= parse_version(self.until))


@dataclass(frozen=True)
class Release:
    """One GPU Operator release and the component tags its Helm chart deploys by default."""

    version: str
    commit: str
    """The commit the tag named when the table was read."""
    device_plugin: str
    gfd: str
    mig_manager: str

    @property
    def version_tuple(self) -> Version:
        return parse_version(self.version)

    @property
    def device_plugin_tuple(self) -> Version:
        return parse_version(self.device_plugin)

    @property
    def mig_manager_tuple(self) -> Version:
        return parse_version(self.mig_manager)

    @property
    def mig_manager_image(self) -> str:
        return f"{MIG_MANAGER_REPOSITORY}:{self.mig_manager}"

    @property
    def crd_source(self) -> str:
        """Where this release's CRD facts come from: repo@tag:path (commit)."""
        return f"{REPOSITORY}@{self.version}:{crd_path(self.version_tuple)} ({self.commit})"

    @property
    def crd_fields(self) -> tuple[CrdField, ...]:
        """What this release's CRD says of every field gpupolicy writes that it has."""
        return tuple(f for f in CRD_FIELDS if f.holds_in(self.version_tuple))

    def crd_field(self, path: str) -> CrdField | None:
        return next((f for f in self.crd_fields if f.path == path), None)

    @property
    def crd_defaults_mig_config_name(self) -> bool:
        """Whether the CRD defaults spec.migManager.config.name to default-mig-parted-config (up to v25.10; from
        v26.3 an empty name means a config generated from the hardware)."""
        name = self.crd_field(MIG_CONFIG_NAME)
        return name is not None and name.default is not None

    @property
    def crd_relabels_dcgm_exporter(self) -> bool:
        """Whether the CRD has dcgmExporter.serviceMonitor.relabelings (an older API server prunes it)."""
        return self.crd_field(DCGM_RELABELINGS) is not None

    @property
    def crd_has_dcgm_exporter_host_pid(self) -> bool:
        """Whether the CRD has dcgmExporter.hostPID."""
        return self.crd_field(DCGM_HOST_PID) is not None

    @property
    def chart_sets_mig_config_name(self) -> bool:
        """Whether the chart's ClusterPolicy carries migManager.config.name with default values: rendered empty and
        defaulted by the API server up to v25.10 (so the chart's field manager owns it), omitted from v26.3."""
        return self.version_tuple < (26, 3, 0)


def _r(version: str, commit: str, plugin: str, gfd: str, mig_manager: str) -> Release:
    return Release(version, commit, plugin, gfd, mig_manager)


#: Oldest first: tag, its commit, and the chart's component tags (GO@<tag>:deployments/gpu-operator/values.yaml).
RELEASES: tuple[Release, ...] = (
    _r("v23.3.0", "62eef3b09e4c2b160e67b84ef76f03fa3bc8c053", "v0.14.0-ubi8", "v0.8.0-ubi8", "v0.5.2-ubuntu20.04"),
    _r("v23.3.1", "2f8651b077d6c36d590b40afd2e75491759fec9f", "v0.14.0-ubi8", "v0.8.0-ubi8", "v0.5.2-ubuntu20.04"),
    _r("v23.3.2", "c1cc4ecdd93309ed3becabb31e68df2e98e2958e", "v0.14.0-ubi8", "v0.8.0-ubi8", "v0.5.2-ubuntu20.04"),
    _r("v23.6.0", "25d6f8d0a6f12b020b0bbc4d60ab95ccab77f5d0", "v0.14.1-ubi8", "v0.8.1-ubi8", "v0.5.3-ubuntu20.04"),
    _r("v23.6.1", "dd2fe9c9be315f61ab7012041d44b7a571a2bd4c", "v0.14.1-ubi8", "v0.8.1-ubi8", "v0.5.3-ubuntu20.04"),
    _r("v23.6.2", "5eb847eaeae9b250249f4f05b2bcfcb2117e3028", "v0.14.1-ubi8", "v0.8.1-ubi8", "v0.5.3-ubuntu20.04"),
    _r("v23.9.0", "762213f236cf6884b1ec29561b3db39ebe300625", "v0.14.2-ubi8", "v0.8.2-ubi8", "v0.5.5-ubuntu20.04"),
    _r("v23.9.1", "8072420d259446f5fd24e407f33129258172bebe", "v0.14.3-ubi8", "v0.8.2-ubi8", "v0.5.5-ubuntu20.04"),
    _r("v23.9.2", "5a94df5b8c8ec9d3a19212869cab726a3c5910b3", "v0.14.5-ubi8", "v0.8.2-ubi8", "v0.6.0-ubuntu20.04"),
    _r("v24.3.0", "0fe1e8db32b05ddab8bbd4d5bcc3f492b75cfee4", "v0.15.0-ubi8", "v0.15.0-ubi8", "v0.7.0-ubuntu20.04"),
    _r("v24.6.0", "4d9a188702a20c9c670d0bb409bc0c49723c0360", "v0.16.1-ubi8", "v0.16.1-ubi8", "v0.8.0-ubuntu20.04"),
    _r("v24.6.1", "dacb1f4f16ce521e06a45c7d2e793e7f667cd075", "v0.16.2-ubi8", "v0.16.2-ubi8", "v0.8.0-ubuntu20.04"),
    _r("v24.6.2", "e4f1f5d26c11608379dc234e1e9a316837ce1535", "v0.16.2-ubi8", "v0.16.2-ubi8", "v0.8.0-ubuntu20.04"),
    _r("v24.9.0", "b96b4d08f39a332907b6304ce8c3b96ea1c75a12", "v0.17.0-ubi9", "v0.17.0-ubi9", "v0.10.0-ubuntu20.04"),
    _r("v24.9.1", "65c864c16c8f65c06a6d9d678e3deaa667e3fa3f", "v0.17.0", "v0.17.0", "v0.10.0-ubuntu20.04"),
    _r("v24.9.2", "a7551902048c92e8f8166cf2dd27c7ac22a073bc", "v0.17.0", "v0.17.0", "v0.10.0-ubuntu20.04"),
    _r("v25.3.0", "b5479aaa85c72a3f67090e9cb205dfefd6c7b010", "v0.17.1", "v0.17.1", "v0.12.1-ubuntu20.04"),
    _r("v25.3.1", "a1da4772ae73020aea2b829449b2b07e48c75fb8", "v0.17.2", "v0.17.2", "v0.12.1-ubuntu20.04"),
    _r("v25.3.2", "616690d88d86bb4e88897b6775dfe76a6c15c741", "v0.17.3", "v0.17.3", "v0.12.2-ubuntu20.04"),
    _r("v25.3.3", "1f1f9cda3340d30558dbfa3926e689b83bee8665", "v0.17.4", "v0.17.4", "v0.12.3-ubuntu20.04"),
    _r("v25.3.4", "d73a0086a6ba41c5972a704f8d36e3a162ee656f", "v0.17.4", "v0.17.4", "v0.12.3-ubuntu20.04"),
    _r("v25.10.0", "6f3d599dfe65b7d4247a90ca2ab27b32a6d6ed98", "v0.18.0", "v0.18.0", "v0.13.0"),
    _r("v25.10.1", "846018752b8a34d4039feb6f18629b4c64210e32", "v0.18.1", "v0.18.1", "v0.13.1"),
    _r("v26.3.0", "30a8bbd2d04ab9fafa9da637b98b0d23b0316367", "v0.19.0", "v0.19.0", "v0.14.0"),
    _r("v26.3.1", "5a25fef4572b2b36e32ebcacd482b586e467dc2d", "v0.19.0", "v0.19.0", "v0.14.0"),
    _r("v26.3.2", "2369b0586cbd033132f44529ed0fe18256fae001", "v0.19.2", "v0.19.2", "v0.14.2"),
    _r("v26.3.3", "b0a49c0e7b2e061dcd83f2bb2fe4fe960c5d0338", "v0.19.3", "v0.19.3", "v0.14.2"),
    _r("v26.7.0", "10ee5b3638b89e11e949412aafa5ba99279c3721", "v0.20.0", "v0.20.0", "v0.15.0"),
)
_BY_VERSION = {r.version: r for r in RELEASES}

#: Releases older than the table above, read for the component tags their chart deploys only
#: (GO@<tag>:deployments/gpu-operator/values.yaml devicePlugin.version, gfd.version, migManager.version), not for
#: their CRD: a spec cannot name them as devicePlugin.operator.version (their CRDs were never read), but a standalone
#: tree targeting the device plugin they shipped runs the MIG manager they shipped beside it. v1.11.0 is the first
#: release whose plugin reads a config file (v0.12.2; v1.10.1 ships v0.11.0).
COMPONENTS_ONLY: tuple[Release, ...] = (
    _r("v1.11.0", "09aa4c07205f058fa961a454994c31492f679053", "v0.12.2-ubi8", "v0.6.1-ubi8", "v0.4.2-ubuntu20.04"),
    _r("v1.11.1", "44c198b4a555c5d3c2854c2233287309fdb39731", "v0.12.2-ubi8", "v0.6.1-ubi8", "v0.4.2-ubuntu20.04"),
    _r("v22.9.0", "1d8f71f15759ebd3fc10207a76e69d9810fd5da7", "v0.12.3-ubi8", "v0.6.2-ubi8", "v0.5.0-ubuntu20.04"),
    _r("v22.9.1", "1489c9cd408434b3c7eda9023ce0bb3d3cd6313e", "v0.13.0-ubi8", "v0.7.0-ubi8", "v0.5.0-ubuntu20.04"),
    _r("v22.9.2", "94874934b4432cb8b6ea1f9cc5ac848eb93a9190", "v0.13.0-ubi8", "v0.7.0-ubi8", "v0.5.0-ubuntu20.04"),
)
#: The first device-plugin release that reads a config file (dp@v0.12.0: api/config/v1): no standalone tree
#: targets an older one, so no older plugin's operator release lends a tree its MIG manager.
_FIRST_CONFIG_PLUGIN: Version = (0, 12, 0)

# prometheus-operator's relabel actions, each in lower case and in its Go spelling (its RelabelConfig, which
# gpu-operator's go.mod pins: pkg/apis/monitoring v0.65.2 at v23.6.0 ... v0.89.0 at v26.3.0).
_RELABEL_ACTIONS = ("replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap",
                    "LabelMap", "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase", "Lowercase",
                    "uppercase", "Uppercase", "keepequal", "KeepEqual", "dropequal", "DropEqual")

#: The ClusterPolicy fields gpupolicy writes (a partial ClusterPolicy for OLM, Helm values the chart's
#: templates/clusterpolicy.yaml copies to the same paths) and the fields on the way to them, as each release's CRD
#: declares them. Read at every tag v23.3.0 ... v26.7.0 from NVIDIA/gpu-operator@<tag>:<crd_path>, whose
#: openAPIV3Schema these entries restate; where a fact changes, the comment says at which tag and why.
CRD_FIELDS: tuple[CrdField, ...] = (
    CrdField("apiVersion", "string"),
    CrdField("kind", "string"),
    CrdField("metadata", "object"),
    # The same nine required blocks in every release: an object lacking any of them cannot be created.
    CrdField("spec", "object", required=("daemonsets", "dcgm", "dcgmExporter", "devicePlugin", "driver", "gfd",
                                         "nodeStatusExporter", "operator", "toolkit")),
    # The operands' tolerations (Helm values daemonsets.tolerations, copied here by templates/clusterpolicy.yaml),
    # core/v1 Tolerations restated as free strings in every release.
    CrdField("spec.daemonsets", "object"),
    CrdField("spec.daemonsets.tolerations", "array"),
    CrdField("spec.daemonsets.tolerations[]", "object"),
    CrdField("spec.daemonsets.tolerations[].key", "string"),
    CrdField("spec.daemonsets.tolerations[].operator", "string"),
    CrdField("spec.daemonsets.tolerations[].value", "string"),
    CrdField("spec.daemonsets.tolerations[].effect", "string"),
    CrdField("spec.mig", "object"),
    CrdField("spec.mig.strategy", "string", enum=("none", "single", "mixed")),
    CrdField("spec.devicePlugin", "object"),
    CrdField("spec.devicePlugin.config", "object"),
    CrdField("spec.devicePlugin.config.name", "string"),
    CrdField("spec.devicePlugin.config.default", "string"),
    CrdField("spec.migManager", "object"),
    CrdField("spec.migManager.config", "object"),
    # v26.3.0 drops the default: an empty name then makes the MIG manager generate a config from the hardware.
    CrdField(MIG_CONFIG_NAME, "string", until="v25.10.1", default="default-mig-parted-config"),
    CrdField(MIG_CONFIG_NAME, "string", since="v26.3.0"),
    CrdField("spec.migManager.config.default", "string", enum=("all-disabled", ""), default="all-disabled"),
    CrdField("spec.dcgmExporter", "object"),
    CrdField("spec.dcgmExporter.config", "object"),
    CrdField("spec.dcgmExporter.config.name", "string"),
    CrdField("spec.dcgmExporter.env", "array"),
    CrdField("spec.dcgmExporter.env[]", "object", required=("name",)),
    CrdField("spec.dcgmExporter.env[].name", "string"),
    CrdField("spec.dcgmExporter.env[].value", "string"),
    # hostPID arrived in v25.10.0 (api/nvidia/v1/clusterpolicy_types.go DCGMExporterSpec.HostPID).
    CrdField(DCGM_HOST_PID, "boolean", since="v25.10.0"),
    CrdField("spec.dcgmExporter.serviceMonitor", "object"),
    CrdField("spec.dcgmExporter.serviceMonitor.enabled", "boolean"),
    CrdField("spec.dcgmExporter.serviceMonitor.honorLabels", "boolean"),
    CrdField("spec.dcgmExporter.serviceMonitor.additionalLabels", "object", values="string"),
    # relabelings arrived in v23.6.0 (api/v1/clusterpolicy_types.go DCGMExporterServiceMonitorConfig.Relabelings,
    # copied into the ServiceMonitor's endpoint by controllers/object_controls.go).
    CrdField(DCGM_RELABELINGS, "array", since="v23.6.0"),
    CrdField(f"{DCGM_RELABELINGS}[]", "object", since="v23.6.0"),
    CrdField(f"{DCGM_RELABELINGS}[].action", "string", since="v23.6.0", enum=_RELABEL_ACTIONS, default="replace"),
    CrdField(f"{DCGM_RELABELINGS}[].sourceLabels", "array", since="v23.6.0"),
    # A Prometheus label name, up to v25.10.1; the prometheus-operator types of v26.3.0 drop the pattern.
    CrdField(f"{DCGM_RELABELINGS}[].sourceLabels[]", "string", since="v23.6.0", until="v25.10.1",
             pattern="^[a-zA-Z_][a-zA-Z0-9_]*$"),
    CrdField(f"{DCGM_RELABELINGS}[].sourceLabels[]", "string", since="v26.3.0"),
    CrdField(f"{DCGM_RELABELINGS}[].targetLabel", "string", since="v23.6.0"),
)


def release(version: str) -> Release | None:
    """The release of that exact tag, or None for a tag the table does not know."""
    return _BY_VERSION.get(version)


def shipping(plugin: Version) -> Release | None:
    """The newest release whose chart deploys exactly this device-plugin release."""
    found = [r for r in RELEASES if r.device_plugin_tuple == plugin]
    return found[-1] if found else None


def nearest(plugin: Version) -> Release:
    """The newest release shipping this device-plugin release or an older one (the oldest release if none):
    where a standalone tree takes its MIG manager from, so the two were released together."""
    older = [r for r in RELEASES if r.device_plugin_tuple <= plugin]
    return older[-1] if older else RELEASES[0]


def mig_manager_release(plugin: Version) -> Release | None:
    """The release whose MIG manager a standalone tree runs beside device plugin `plugin`: the newest release
    (of either table) shipping exactly that plugin, else the newest shipping an older config-file release, so the
    two were released together (v0.14.4, which no release shipped, gets v23.9.1's, shipped with v0.14.3). None
    when no release shipped `plugin` or an older config-file release: v0.12.0 and v0.12.1 (the first operator
    release with a config-file plugin, v1.11.0, ships v0.12.2)."""
    shipped = sorted((r for r in (*COMPONENTS_ONLY, *RELEASES)
                      if _FIRST_CONFIG_PLUGIN <= r.device_plugin_tuple <= plugin),
                     key=lambda r: (r.device_plugin_tuple, r.version_tuple))
    return shipped[-1] if shipped else None


def first_with(path: str) -> Release:
    """The oldest release whose CRD has the field."""
    return next(r for r in RELEASES if r.crd_field(path) is not None)


def crd_schema(release: Release) -> dict[str, object]:
    """A JSON Schema of what the release's CRD says of the fields gpupolicy writes: their types, enums, patterns
    and required fields, as the API server checks them. It declares no other field and forbids none, as the CRD has
    many more: whether an object carries only declared fields is a question apart (the API server would prune
    an undeclared one without a word)."""
    schema: dict[str, object] = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                 "$comment": f"gpupolicy's fields of ClusterPolicy nvidia.com/v1: {release.crd_source}",
                                 "type": "object"}
    for fact in release.crd_fields:
        node = _schema_node(schema, fact.path)
        node["type"] = fact.type
        if fact.enum:
            node["enum"] = list(fact.enum)
        if fact.default is not None:
            node["default"] = fact.default
        if fact.pattern is not None:
            node["pattern"] = fact.pattern
        if fact.required:
            node["required"] = list(fact.required)
        if fact.values is not None:
            node["additionalProperties"] = {"type": fact.values}
    return schema


def _schema_node(schema: dict[str, object], path: str) -> dict[str, object]:
    node = schema
    for part in path.split("."):
        properties = node.setdefault("properties", {})
        assert isinstance(properties, dict)
        node = properties.setdefault(part.removesuffix("[]"), {})
        if part.endswith("[]"):
            node = node.setdefault("items", {})
    return node
