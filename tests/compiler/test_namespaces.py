"""The tree provides every namespace its objects live in, at the Pod Security level their pods meet, and no GitOps
tool ever prunes or deletes one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_admission_manifests import restricted_violations

from compiler import compile_policy
from compiler.targets import dra, flux, gpu_operator, hami, namespaces
from compiler.tree import Tree
from policy.resolved import dra as dra_model
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent.name for p in (ROOT / "examples" / "clusters").glob("*/cluster.yaml"))
WAVE = "argocd.argoproj.io/sync-wave"
PSA = "pod-security.kubernetes.io/enforce"


def objects(tree: Tree) -> Iterator[dict[str, Any]]:
    for path, data in tree.items():
        if path.endswith(".yaml") and not path.endswith("kustomization.yaml") and \
                path not in (gpu_operator.VALUES_FILE, hami.VALUES_PATH, dra.VALUES_PATH):
            yield yaml.safe_load(data)


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    template = obj.get("spec", {}).get("template")
    return template["spec"] if obj["kind"] in ("DaemonSet", "Deployment") and template else None


def created_and_used(policy: ClusterGPUPolicy) -> tuple[set[str], set[str]]:
    """The namespaces the tree creates, and those its objects live in but the cluster's own and the operator's."""
    found = list(objects(compile_policy(policy)))
    created = {o["metadata"]["name"] for o in found if o["kind"] == "Namespace"}
    foreign = set(namespaces.BUILT_IN)
    if policy.spec.device_plugin.deploy == "gpu-operator":
        foreign.add(policy.spec.device_plugin.operator.namespace)  # the operator's install creates it
    foreign.add(flux.NAMESPACE)  # flux/ lives beside Flux's HelmReleases; Flux's install creates it
    # The tenants' own namespaces, which hold their claim templates and quotas (docs/dra.md): the teams make them.
    foreign.update(ns for t in policy.spec.tenants for ns in dra_model.named_namespaces(t))
    used = {o["metadata"]["namespace"] for o in found if "namespace" in o["metadata"]}
    assert not created & foreign
    return created, used - foreign


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_namespace_an_object_names_is_created_by_the_tree_or_exists_in_every_cluster(
        example_policy: Load, name: str) -> None:
    created, used = created_and_used(example_policy(name))
    assert used == created, name
    assert created, "every example places something outside kube-system"


#: tke-l20-t4 runs no label reconciler and its device plugins in kube-system: gpupolicy-system holds only what
#: the webhook and monitoring put there.
WEBHOOK_NAMESPACE_USERS = {
    "engine vap, no monitoring": ([("timeoutSeconds: 3", "timeoutSeconds: 3\n    engine: vap"),
                                   ("monitoring:\n    enabled: true", "monitoring:\n    enabled: false")], set()),
    "engine vap, monitoring": ([("timeoutSeconds: 3", "timeoutSeconds: 3\n    engine: vap")], {"gpupolicy-system"}),
    "no admission, monitoring": ([("admission:\n", "admission:\n    enabled: false\n")], {"gpupolicy-system"}),
}


@pytest.mark.parametrize("case", WEBHOOK_NAMESPACE_USERS, ids=str)
def test_the_webhooks_namespace_is_created_only_when_something_lives_there(example_policy: Load, case: str) -> None:
    edits, expected = WEBHOOK_NAMESPACE_USERS[case]
    created, used = created_and_used(example_policy("tke-l20-t4", *edits))
    assert used == created == expected


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_namespace_admits_exactly_what_runs_there_and_restricted_wherever_it_can(
        example_policy: Load, name: str) -> None:
    found = list(objects(compile_policy(example_policy(name))))
    levels = {o["metadata"]["name"]: o["metadata"]["labels"][PSA] for o in found if o["kind"] == "Namespace"}
    for namespace, level in levels.items():
        pods = [spec for o in found if o["metadata"].get("namespace") == namespace and (spec := pod_spec(o))]
        meets_restricted = all(restricted_violations(spec) == [] for spec in pods)
        assert level == (namespaces.RESTRICTED if meets_restricted else namespaces.PRIVILEGED), namespace


@pytest.mark.parametrize("name", EXAMPLES)
def test_namespaces_come_first_and_are_never_pruned_or_deleted(example_policy: Load, name: str) -> None:
    found = list(objects(compile_policy(example_policy(name))))
    created = [o for o in found if o["kind"] == "Namespace"]
    others = [int(o["metadata"].get("annotations", {}).get(WAVE, "0")) for o in found if o["kind"] != "Namespace"]
    for namespace in created:
        annotations = namespace["metadata"]["annotations"]
        assert int(annotations[WAVE]) < min(others)
        assert set(annotations["argocd.argoproj.io/sync-options"].split(",")) == {"Prune=false", "Delete=false"}
        assert annotations["kustomize.toolkit.fluxcd.io/prune"] == "disabled"
        labels = namespace["metadata"]["labels"]
        assert {labels[f"pod-security.kubernetes.io/{m}"] for m in ("audit", "enforce", "warn")} == {labels[PSA]}


def test_with_create_namespaces_off_the_tree_has_none_and_the_report_says_which_must_exist(
        example_policy: Load) -> None:
    policy = example_policy("mixed-fleet", ("kubernetesVersion:", "createNamespaces: false\n  kubernetesVersion:"))
    tree = compile_policy(policy)
    assert not [p for p in tree if p.startswith("namespaces/")]
    assert not [o for o in objects(tree) if o["kind"] == "Namespace"]
    report = tree["REPORT.md"].decode()
    assert ("spec.createNamespaces is false: these namespaces must exist before the tree is applied, labelled "
            "pod-security.kubernetes.io/enforce with the level in brackets: gpupolicy-system (restricted), "
            "nvidia-device-plugin (privileged).") in report


def test_one_namespace_for_the_webhook_and_the_node_agents_is_privileged(example_policy: Load) -> None:
    policy = example_policy("mixed-fleet", ("namespace: nvidia-device-plugin", "namespace: gpupolicy-system"))
    assert namespaces.needed(resolve(policy)) == {"gpupolicy-system": namespaces.PRIVILEGED}


def test_hamis_own_namespace_is_created_privileged_and_its_install_command_creates_it_first(
        example_policy: Load) -> None:
    hami_namespace = ("version: v2.10.0\n    namespace: kube-system", "version: v2.10.0\n    namespace: hami-system")
    policy = example_policy("vgpu-platform", hami_namespace)
    assert namespaces.needed(resolve(policy))["hami-system"] == namespaces.PRIVILEGED
    tree = compile_policy(policy)
    assert "--namespace hami-system --create-namespace -f hami-values.yaml" in tree[hami.VALUES_PATH].decode()
    assert "--create-namespace" not in hami.install_command(example_policy("vgpu-platform").spec.hami)
