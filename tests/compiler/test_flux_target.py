"""flux/: the tree's Helm values as objects Flux's helm-controller applies (compiler/targets/flux.py)."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from external_tools import require_tool

from compiler import compile_policy
from compiler.targets import flux, gpu_operator, hami
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
ROOT = Path(__file__).resolve().parents[2]

# The fields these objects may use, restated from the APIs they target (not copied): HelmRelease
# fluxcd/helm-controller@v1.6.3:api/v2/helmrelease_types.go (HelmReleaseSpec: interval required, chart,
# releaseName, targetNamespace, install, valuesFrom; HelmChartTemplateSpec: chart and sourceRef required, version;
# Install.CreateNamespace), ValuesReference from fluxcd/pkg apis/meta (kind ConfigMap|Secret, name, valuesKey,
# optional); HelmRepository source.toolkit.fluxcd.io/v1 (url, interval).
HELM_RELEASE_SPEC = {"interval", "chart", "releaseName", "targetNamespace", "install", "valuesFrom"}
CHART_SPEC = {"chart", "version", "sourceRef"}
VALUES_REFERENCE = {"kind", "name", "valuesKey", "optional"}


def docs(tree: Any, prefix: str) -> dict[str, dict[str, Any]]:
    return {p: yaml.safe_load(data) for p, data in tree.items()
            if p.startswith(prefix) and not p.endswith("kustomization.yaml")}


def test_hami_is_installed_by_a_helm_release_reading_the_tree_s_values(example_policy: Load) -> None:
    policy = example_policy("vgpu-platform")
    tree = compile_policy(policy)
    found = docs(tree, "flux/")
    kinds = {d["kind"]: d for d in found.values()}
    assert set(kinds) == {"ConfigMap", "HelmRelease", "HelmRepository"}
    release, repository, values = kinds["HelmRelease"], kinds["HelmRepository"], kinds["ConfigMap"]
    settings = policy.spec.hami
    assert set(release["spec"]) <= HELM_RELEASE_SPEC and set(release["spec"]["chart"]["spec"]) <= CHART_SPEC
    assert release["spec"]["chart"]["spec"] == {"chart": "hami", "version": settings.chart_version,
                                                "sourceRef": {"kind": "HelmRepository",
                                                              "name": repository["metadata"]["name"]}}
    assert (release["spec"]["releaseName"], release["spec"]["targetNamespace"]) == (settings.release_name,
                                                                                    settings.namespace)
    assert repository["spec"]["url"] == "https://project-hami.github.io/HAMi/"
    (reference,) = release["spec"]["valuesFrom"]
    assert set(reference) <= VALUES_REFERENCE
    assert reference == {"kind": "ConfigMap", "name": values["metadata"]["name"], "valuesKey": "values.yaml"}
    # valuesFrom reads the HelmRelease's own namespace
    assert {d["metadata"]["namespace"] for d in found.values()} == {flux.NAMESPACE}
    # The very values of hami-values.yaml, and nothing else.
    assert yaml.safe_load(values["data"]["values.yaml"]) == yaml.safe_load(tree[hami.VALUES_PATH])
    kubernetes_validate.validate(values, policy.spec.kubernetes_version, strict=True)


def test_changed_values_rename_the_configmap_and_so_change_the_release(example_policy: Load) -> None:
    def reference(policy: ClusterGPUPolicy) -> str:
        release = docs(compile_policy(policy), "flux/")["flux/helmrelease-hami.yaml"]
        return str(release["spec"]["valuesFrom"][0]["name"])

    before = reference(example_policy("vgpu-platform"))
    assert before == reference(example_policy("vgpu-platform"))  # deterministic
    text = (ROOT / "examples" / "clusters" / "vgpu-platform" / "cluster.yaml").read_text()
    assert "schedulerName: hami-scheduler" not in text
    after = reference(example_policy("vgpu-platform", ("  hami:\n", "  hami:\n    schedulerName: vgpu-scheduler\n")))
    assert after != before


def test_operator_values_are_a_fixed_name_configmap_flux_watches(example_policy: Load) -> None:
    policy = example_policy("h20-mig")
    tree = compile_policy(policy)
    (values,) = docs(tree, "flux/").values()
    assert values["metadata"]["name"] == flux.OPERATOR_VALUES  # the operator's HelmRelease names it once
    assert values["metadata"]["namespace"] == flux.NAMESPACE
    assert values["metadata"]["labels"]["reconcile.fluxcd.io/watch"] == "Enabled"
    assert yaml.safe_load(values["data"]["values.yaml"]) == yaml.safe_load(tree[gpu_operator.VALUES_FILE])
    kubernetes_validate.validate(values, policy.spec.kubernetes_version, strict=True)
    # olm: no Helm release to feed, so no flux/
    olm = compile_policy(example_policy("h20-mig", ("installer: helm ", "installer: olm ")))
    assert not [p for p in olm if p.startswith("flux/")]


def test_trees_without_helm_values_have_no_flux_directory(example_policy: Load) -> None:
    for name in ("tke-l20-t4", "mixed-fleet"):
        assert not resolve(example_policy(name)).vgpu_classes
        assert not [p for p in compile_policy(example_policy(name)) if p.startswith("flux/")]


@functools.cache
def _kustomize(directory: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_tool("kubectl"), "kustomize", directory], capture_output=True, text=True,
                          check=False, timeout=120)


@pytest.mark.parametrize("name", ["h20-mig", "vgpu-platform"])
def test_the_committed_flux_directory_builds_with_kubectl_kustomize(name: str) -> None:
    built = _kustomize(str(ROOT / "examples" / "clusters" / name / "out" / "flux"))
    assert built.returncode == 0 and built.stderr == "", built.stderr
    assert "ConfigMap" in {d["kind"] for d in yaml.safe_load_all(built.stdout)}
