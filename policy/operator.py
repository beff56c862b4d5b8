"""GPU Operator releases: what each ships and what its ClusterPolicy CRD and Helm chart do.

Read from NVIDIA/gpu-operator at every tag v23.3.0 ... v26.7.0 (`deployments/gpu-operator/values.yaml` keys
devicePlugin.version, gfd.version, migManager.version; the chart's CRD and `templates/clusterpolicy.yaml`).
The CRD schemas themselves are vendored under schemas/gpu-operator/ (scripts/vendor_operator_crds.py, with
the commit of each tag in its index.json).
"""

from __future__ import annotations

from dataclasses import dataclass

Version = tuple[int, int, int]

MIG_MANAGER_REPOSITORY = "nvcr.io/nvidia/cloud-native/k8s-mig-manager"


def parse_version(text: str) -> Version:
    """``v0.17.1-ubi9`` -> (0, 17, 1): the release, without a distribution suffix."""
    major, minor, patch = text.lstrip("v").split("-")[0].split(".")
    return int(major), int(minor), int(patch)


@dataclass(frozen=True)
class Release:
    """One GPU Operator release and the component tags its Helm chart deploys by default."""

    version: str
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
    def crd_defaults_mig_config_name(self) -> bool:
        """Whether the CRD defaults spec.migManager.config.name to default-mig-parted-config (up to v25.10; from
        v26.3 an empty name means a config generated from the hardware)."""
        return self.version_tuple < (26, 3, 0)

    @property
    def crd_relabels_dcgm_exporter(self) -> bool:
        """Whether the CRD has dcgmExporter.serviceMonitor.relabelings (from v23.9; an older API server prunes it)."""
        return self.version_tuple >= (23, 9, 0)

    @property
    def crd_has_dcgm_exporter_host_pid(self) -> bool:
        """Whether the CRD has dcgmExporter.hostPID (from v25.10)."""
        return self.version_tuple >= (25, 10, 0)

    @property
    def chart_sets_mig_config_name(self) -> bool:
        """Whether the chart's ClusterPolicy carries migManager.config.name with default values: rendered empty and
        defaulted by the API server up to v25.10 (so the chart's field manager owns it), omitted from v26.3."""
        return self.version_tuple < (26, 3, 0)


def _r(version: str, plugin: str, gfd: str, mig_manager: str) -> Release:
    return Release(version, plugin, gfd, mig_manager)


#: Oldest first.  GO@<tag>:deployments/gpu-operator/values.yaml.
RELEASES: tuple[Release, ...] = (
    _r("v23.3.0", "v0.14.0-ubi8", "v0.8.0-ubi8", "v0.5.2-ubuntu20.04"),
    _r("v23.3.1", "v0.14.0-ubi8", "v0.8.0-ubi8", "v0.5.2-ubuntu20.04"),
    _r("v23.3.2", "v0.14.0-ubi8", "v0.8.0-ubi8", "v0.5.2-ubuntu20.04"),
    _r("v23.6.0", "v0.14.1-ubi8", "v0.8.1-ubi8", "v0.5.3-ubuntu20.04"),
    _r("v23.6.1", "v0.14.1-ubi8", "v0.8.1-ubi8", "v0.5.3-ubuntu20.04"),
    _r("v23.6.2", "v0.14.1-ubi8", "v0.8.1-ubi8", "v0.5.3-ubuntu20.04"),
    _r("v23.9.0", "v0.14.2-ubi8", "v0.8.2-ubi8", "v0.5.5-ubuntu20.04"),
    _r("v23.9.1", "v0.14.3-ubi8", "v0.8.2-ubi8", "v0.5.5-ubuntu20.04"),
    _r("v23.9.2", "v0.14.5-ubi8", "v0.8.2-ubi8", "v0.6.0-ubuntu20.04"),
    _r("v24.3.0", "v0.15.0-ubi8", "v0.15.0-ubi8", "v0.7.0-ubuntu20.04"),
    _r("v24.6.0", "v0.16.1-ubi8", "v0.16.1-ubi8", "v0.8.0-ubuntu20.04"),
    _r("v24.6.1", "v0.16.2-ubi8", "v0.16.2-ubi8", "v0.8.0-ubuntu20.04"),
    _r("v24.6.2", "v0.16.2-ubi8", "v0.16.2-ubi8", "v0.8.0-ubuntu20.04"),
    _r("v24.9.0", "v0.17.0-ubi9", "v0.17.0-ubi9", "v0.10.0-ubuntu20.04"),
    _r("v24.9.1", "v0.17.0", "v0.17.0", "v0.10.0-ubuntu20.04"),
    _r("v24.9.2", "v0.17.0", "v0.17.0", "v0.10.0-ubuntu20.04"),
    _r("v25.3.0", "v0.17.1", "v0.17.1", "v0.12.1-ubuntu20.04"),
    _r("v25.3.1", "v0.17.2", "v0.17.2", "v0.12.1-ubuntu20.04"),
    _r("v25.3.2", "v0.17.3", "v0.17.3", "v0.12.2-ubuntu20.04"),
    _r("v25.3.3", "v0.17.4", "v0.17.4", "v0.12.3-ubuntu20.04"),
    _r("v25.3.4", "v0.17.4", "v0.17.4", "v0.12.3-ubuntu20.04"),
    _r("v25.10.0", "v0.18.0", "v0.18.0", "v0.13.0"),
    _r("v25.10.1", "v0.18.1", "v0.18.1", "v0.13.1"),
    _r("v26.3.0", "v0.19.0", "v0.19.0", "v0.14.0"),
    _r("v26.3.1", "v0.19.0", "v0.19.0", "v0.14.0"),
    _r("v26.3.2", "v0.19.2", "v0.19.2", "v0.14.2"),
    _r("v26.3.3", "v0.19.3", "v0.19.3", "v0.14.2"),
    _r("v26.7.0", "v0.20.0", "v0.20.0", "v0.15.0"),
)
_BY_VERSION = {r.version: r for r in RELEASES}


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
