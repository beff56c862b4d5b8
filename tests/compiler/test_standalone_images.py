"""The GPU Feature Discovery and MIG manager a standalone tree runs: the ones the targeted device-plugin release was
shipped with, or a located refusal where it was shipped with none.

The facts are restated here from NVIDIA's sources, not imported from policy/, so a change on either side fails:

- GFD before v0.15.0 is its own image, nvcr.io/nvidia/gpu-feature-discovery:v<appVersion> of the subchart the
  release's Helm chart bundles: NVIDIA/k8s-device-plugin gh-pages (bf584288) stable/nvidia-device-plugin-<release>.tgz,
  nvidia-device-plugin/charts/gpu-feature-discovery/Chart.yaml (the tag's tree, deployments/helm/
  nvidia-device-plugin/charts/gpu-feature-discovery/Chart.yaml, says the same), and `helm template --set
  gfd.enabled=true` (Helm v3.9.0) of each package renders exactly that image. From v0.15.0 GFD is the
  gpu-feature-discovery command of the plugin's own image (dp@v0.15.0: templates/daemonset-gfd.yml).
- The 0.12.0 package bundles gpu-feature-discovery 0.6.0-rc.1 while its Chart.yaml requires 0.6.0; Helm drops a
  subchart whose version the requirement does not admit (helm@v3.9.0: pkg/chartutil/dependencies.go
  getAliasDependency), and `helm template --set gfd.enabled=true` of that package renders no GFD DaemonSet.
- GFD v0.8.0 (the v0.14.0 chart's) vendors k8s-device-plugin v0.13.0, whose flags.plugin.deviceListStrategy is a
  string (gfd@v0.8.0: vendor/github.com/NVIDIA/k8s-device-plugin/api/config/v1/flags.go:61), while plugin v0.14.0
  parses only a list (dp@v0.14.0: api/config/v1/flags.go:63).
- The MIG manager is the one the GPU Operator shipped beside the plugin release (GO@<tag>:
  deployments/gpu-operator/values.yaml devicePlugin.version / migManager.version): v1.11.0 and v1.11.1 ship plugin
  v0.12.2 with k8s-mig-manager v0.4.2-ubuntu20.04, v22.9.0 v0.12.3 with v0.5.0-ubuntu20.04, v22.9.1 and v22.9.2
  v0.13.0 with v0.5.0-ubuntu20.04, v23.3.0 v0.14.0 with v0.5.2-ubuntu20.04; v1.10.1 ships v0.11.0, which reads no
  config file, so no operator release shipped v0.12.0 or v0.12.1.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from compiler import compile_policy
from policy.hardware import operator, releases
from policy.load import load_policy

GFD = "nvcr.io/nvidia/gpu-feature-discovery"
MIG_MANAGER = "nvcr.io/nvidia/cloud-native/k8s-mig-manager"
SPEC = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {{name: old-plugin}}
spec:
  devicePlugin: {{version: {version}, gpuFeatureDiscovery: {gfd}{manager}}}
  nodeClasses:
  - name: a100
    nodeSelector: {{pool: a100}}
    gpu: {{model: NVIDIA-A100-SXM4-40GB, count: 1}}
    sharing: {{mig: {{strategy: mixed, layout: {{1g.5gb: 7}}}}}}
  - name: t4
    nodeSelector: {{pool: t4}}
    gpu: {{model: Tesla-T4, count: 1}}
    sharing: {{timeSlicing: {{replicas: 4}}}}
"""

#: Device-plugin release -> (GFD image its chart deploys, k8s-mig-manager the operator shipped beside it).
SHIPPED = {
    "v0.12.2": (f"{GFD}:v0.6.1", f"{MIG_MANAGER}:v0.4.2-ubuntu20.04"),  # chart GFD 0.6.1; GO v1.11.0, v1.11.1
    "v0.12.3": (f"{GFD}:v0.6.2", f"{MIG_MANAGER}:v0.5.0-ubuntu20.04"),  # chart GFD 0.6.2; GO v22.9.0
    "v0.13.0": (f"{GFD}:v0.7.0", f"{MIG_MANAGER}:v0.5.0-ubuntu20.04"),  # chart GFD 0.7.0; GO v22.9.1, v22.9.2
    "v0.14.1": (f"{GFD}:v0.8.1", f"{MIG_MANAGER}:v0.5.3-ubuntu20.04"),  # chart GFD 0.8.1; GO v23.6.0-v23.6.2
    "v0.14.5": (f"{GFD}:v0.8.2", f"{MIG_MANAGER}:v0.6.0-ubuntu20.04"),  # chart GFD 0.8.2; GO v23.9.2
}


def spec(version: str, *, gfd: bool = True, manager: str | None = None) -> str:
    image = f", migManager: {{image: {manager}}}" if manager else ""
    return SPEC.format(version=version, gfd="true" if gfd else "false", manager=image)


def images(text: str) -> dict[str, set[str]]:
    """Component directory -> the images its DaemonSets run."""
    result = load_policy(text, filename="old-plugin.yaml")
    assert result.ok and result.resolved is not None, [d.message for d in result.diagnostics]
    found: dict[str, set[str]] = {}
    for path, data in compile_policy(result.resolved).items():
        obj: Any = yaml.safe_load(data) if path.endswith(".yaml") else None
        if isinstance(obj, dict) and obj.get("kind") == "DaemonSet":
            containers = obj["spec"]["template"]["spec"]["containers"]
            found.setdefault(path.split("/")[0], set()).update(c["image"] for c in containers)
    return found


def errors(text: str) -> list[tuple[str, str, str]]:
    result = load_policy(text, filename="old-plugin.yaml")
    return [(d.code, f"{d.span.line}:{d.span.column}" if d.span else "", d.hint) for d in result.diagnostics
            if d.severity == "error"]


@pytest.mark.parametrize("version", sorted(SHIPPED))
def test_a_tree_for_an_old_plugin_runs_the_gfd_and_mig_manager_that_release_was_shipped_with(version: str) -> None:
    gfd, manager = SHIPPED[version]
    found = images(spec(version))
    assert found["feature-discovery"] == {gfd}
    assert found["mig-manager"] == {manager}
    assert found["device-plugin"] == {f"nvcr.io/nvidia/k8s-device-plugin:{version}"}


def test_from_v0_15_gfd_is_a_command_of_the_plugins_own_image() -> None:
    found = images(spec("v0.15.0"))
    assert found["feature-discovery"] == {"nvcr.io/nvidia/k8s-device-plugin:v0.15.0"}
    assert found["mig-manager"] == {f"{MIG_MANAGER}:v0.7.0-ubuntu20.04"}  # GO v24.3.0 ships plugin v0.15.0


def test_v0_12_0_with_gfd_is_refused_at_the_field_since_its_chart_renders_none() -> None:
    found = errors(spec("v0.12.0", manager=f"{MIG_MANAGER}:v0.4.2-ubuntu20.04"))
    assert found == [("version-unsupported-feature", "5:57",  # the value true
                      f"set devicePlugin.version: v0.12.1 (its chart ships {GFD}:v0.6.0), or "
                      "gpuFeatureDiscovery: false")]
    assert images(spec("v0.12.1", manager=f"{MIG_MANAGER}:v0.4.2-ubuntu20.04"))["feature-discovery"] == {
        f"{GFD}:v0.6.0"}


def test_v0_14_0_with_gfd_is_refused_since_its_gfd_cannot_parse_the_list_its_plugin_requires() -> None:
    result = load_policy(spec("v0.14.0"), filename="old-plugin.yaml")
    [found] = [d for d in result.diagnostics if d.severity == "error"]
    assert found.code == "version-unsupported-feature" and found.path == ("spec", "devicePlugin",
                                                                           "gpuFeatureDiscovery")
    assert f"({GFD}:v0.8.0) only as a string" in found.message and "only as a list" in found.message
    assert found.hint == f"set devicePlugin.version: v0.14.1 (its GFD, {GFD}:v0.8.1, reads either), or " \
                         "gpuFeatureDiscovery: false"
    assert "mig-manager" in images(spec("v0.14.0", gfd=False))


@pytest.mark.parametrize("version", ["v0.12.0", "v0.12.1"])
def test_a_mig_class_on_a_release_no_operator_shipped_needs_a_mig_manager_image(version: str) -> None:
    found = [e for e in errors(spec(version, gfd=False)) if e[0] == "version-unsupported-feature"]
    assert found == [("version-unsupported-feature", "5:27",  # the version
                      f"set devicePlugin.migManager.image to the MIG manager to run (e.g. "
                      f"{MIG_MANAGER}:v0.4.2-ubuntu20.04), or devicePlugin.version: v0.12.2")]
    named = f"{MIG_MANAGER}:v0.5.0-ubuntu20.04"
    assert images(spec(version, gfd=False, manager=named))["mig-manager"] == {named}


def test_the_operator_release_tables_pair_each_plugin_with_the_mig_manager_read_from_its_values() -> None:
    # Restated from GO@<tag>:deployments/gpu-operator/values.yaml (the commit each tag named is in the table).
    older = {r.version: (r.commit, r.device_plugin, r.gfd, r.mig_manager) for r in operator.COMPONENTS_ONLY}
    assert older == {
        "v1.11.0": ("09aa4c07205f058fa961a454994c31492f679053", "v0.12.2-ubi8", "v0.6.1-ubi8", "v0.4.2-ubuntu20.04"),
        "v1.11.1": ("44c198b4a555c5d3c2854c2233287309fdb39731", "v0.12.2-ubi8", "v0.6.1-ubi8", "v0.4.2-ubuntu20.04"),
        "v22.9.0": ("1d8f71f15759ebd3fc10207a76e69d9810fd5da7", "v0.12.3-ubi8", "v0.6.2-ubi8", "v0.5.0-ubuntu20.04"),
        "v22.9.1": ("1489c9cd408434b3c7eda9023ce0bb3d3cd6313e", "v0.13.0-ubi8", "v0.7.0-ubi8", "v0.5.0-ubuntu20.04"),
        "v22.9.2": ("94874934b4432cb8b6ea1f9cc5ac848eb93a9190", "v0.13.0-ubi8", "v0.7.0-ubi8", "v0.5.0-ubuntu20.04"),
    }
    # Where the operator shipped the plugin, its GFD is the one the plugin's chart bundles (tags less -ubi8).
    for release in operator.COMPONENTS_ONLY:
        plugin = releases.find(release.device_plugin.split("-")[0])
        assert plugin is not None
        assert releases.feature_discovery(plugin).tag == release.gfd.split("-")[0]


def test_from_v0_14_the_mig_manager_is_the_one_the_newest_operator_release_at_or_below_the_plugin_ships() -> None:
    # The pairing trees used before GFD and MIG manager images were read per release, unchanged from v0.14.0 on.
    for release in releases.config_releases():
        if release.version >= (0, 14, 0):
            chosen = operator.mig_manager_release(release.version)
            assert chosen is not None and chosen == operator.nearest(release.version), release.tag
