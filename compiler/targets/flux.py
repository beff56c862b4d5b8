"""Flux's helm-controller: the tree's Helm values as objects Flux applies, so no `helm upgrade` is left to a person.

``flux/`` holds, for HAMi (which gpupolicy installs from HAMi's chart), a HelmRepository, a HelmRelease of the
chart version the spec names and the values in a content-named ConfigMap the HelmRelease reads with ``valuesFrom``:
a change of the values renames the ConfigMap in the same compile, so the HelmRelease changes and helm-controller
upgrades the release at once, on every Flux version. For the GPU Operator (installer helm), whose release belongs to
whoever installed the operator, it holds the values alone, in a ConfigMap of fixed name that the operator's own
HelmRelease names once in its ``valuesFrom`` (last); it carries ``reconcile.fluxcd.io/watch: Enabled``, so
helm-controller upgrades that release as soon as the values change (fluxcd/helm-controller@v1.6.3:
docs/spec/v2/helmreleases.md, "Reacting immediately to configuration dependencies"; older ones at the
HelmRelease's next interval).

Everything lives in ``flux-system``, beside the HelmReleases that read it (``valuesFrom`` reads the HelmRelease's own
namespace). The root kustomization leaves ``flux/`` out, as it does monitoring/: a cluster without Flux's CRDs
must still apply the tree, and Argo CD reads the same values files from Git (a multi-source Application).
Field names: fluxcd/helm-controller@v1.6.3:api/v2/helmrelease_types.go (HelmReleaseSpec, HelmChartTemplateSpec,
Install.CreateNamespace) and fluxcd/pkg apis/meta ValuesReference (kind, name, valuesKey).
"""

from __future__ import annotations

from compiler import objects, serialize
from compiler.objects import Obj
from compiler.targets import hami, namespaces
from policy.resolved.resolve import ResolvedPolicy
from policy.vgpu import hami as hami_facts

COMPONENT = "flux"
NAMESPACE = "flux-system"
HELM_RELEASE_API = "helm.toolkit.fluxcd.io/v2"
HELM_REPOSITORY_API = "source.toolkit.fluxcd.io/v1"
VALUES_KEY = "values.yaml"
HAMI_REPOSITORY = "hami-charts"
HAMI_VALUES = "gpupolicy-hami-values"
#: The fixed name the GPU Operator's HelmRelease names in its valuesFrom (docs/ci-and-gitops.md).
OPERATOR_VALUES = "gpupolicy-gpu-operator-values"
WATCH_LABEL = "reconcile.fluxcd.io/watch"
INTERVAL = "10m"


def render_flux(resolved: ResolvedPolicy, operator_values: Obj | None) -> dict[str, Obj]:
    """File stem -> object; empty when the tree has no Helm values."""
    out: dict[str, Obj] = {}
    if resolved.vgpu_classes:
        out.update(_hami(resolved))
    if operator_values is not None:
        labels = {**objects.labels(resolved.policy, "gpu-operator"), WATCH_LABEL: "Enabled"}
        out["configmap-gpu-operator-values"] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": objects.metadata(OPERATOR_VALUES, namespace=NAMESPACE, labels=labels),
            "data": {VALUES_KEY: serialize.dump_yaml(operator_values).decode("utf-8")},
        }
    return out


def _hami(resolved: ResolvedPolicy) -> dict[str, Obj]:
    settings = resolved.spec.hami
    labels = objects.labels(resolved.policy, "hami")
    values = objects.config_map(HAMI_VALUES, {VALUES_KEY: serialize.dump_yaml(hami.render_values(resolved))
                                              .decode("utf-8")}, namespace=NAMESPACE, labels=labels)
    repository = {
        "apiVersion": HELM_REPOSITORY_API, "kind": "HelmRepository",
        "metadata": objects.metadata(HAMI_REPOSITORY, namespace=NAMESPACE, labels=labels),
        "spec": {"interval": "1h", "url": hami_facts.CHART_REPOSITORY},
    }
    release = {
        "apiVersion": HELM_RELEASE_API, "kind": "HelmRelease",
        "metadata": objects.metadata(settings.release_name, namespace=NAMESPACE, labels=labels),
        "spec": {
            "interval": INTERVAL,
            "releaseName": settings.release_name,
            "targetNamespace": settings.namespace,
            # As `helm upgrade --install --create-namespace`: the tree's Namespace adds its labels afterwards.
            **({} if settings.namespace in namespaces.BUILT_IN else {"install": {"createNamespace": True}}),
            "chart": {"spec": {"chart": "hami", "version": settings.chart_version,
                               "sourceRef": {"kind": "HelmRepository", "name": HAMI_REPOSITORY}}},
            "valuesFrom": [{"kind": "ConfigMap", "name": values["metadata"]["name"], "valuesKey": VALUES_KEY}],
        },
    }
    return {"configmap-hami-values": values, "helmrepository-hami-charts": repository, "helmrelease-hami": release}

