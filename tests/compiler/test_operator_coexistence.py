"""deploy gpu-operator beside the operator's own installer: the apply replayed against the managedFields of a
Helm-installed and a console-created ClusterPolicy (tests/server_side_apply.py computes ownership and conflicts),
and every emitted field checked against what the ClusterPolicy CRD of every supported operator release says of it
(policy/hardware/operator.py CRD_FIELDS, read from each release's CRD)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_crd import undeclared, validator
from server_side_apply import ManagedObject

from compiler import compile_policy
from compiler.targets import gpu_operator
from policy.hardware import operator
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "gpu-operator"
OLM = ("installer: helm ", "installer: olm ")
# The operator fields of the device plugin and MIG alone (monitoring's dcgmExporter fields: test_monitoring_objects.py).
NO_MONITORING = ("  monitoring:\n    enabled: true\n", "")

# What gpupolicy emitted before: the partial object with its own labels, applied over Helm's (the root
# kustomization's labels added managed-by and cluster again).
BEFORE = {
    "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
    "metadata": {"name": "cluster-policy", "labels": {
        "app.kubernetes.io/component": "gpu-operator", "app.kubernetes.io/managed-by": "gpupolicy",
        "app.kubernetes.io/part-of": "gpupolicy", "gpupolicy.dev/cluster": "h20-inference"}},
    "spec": {"devicePlugin": {"config": {"name": "gpupolicy-device-plugin-configs-5a6d07de77"}},
             "mig": {"strategy": "mixed"},
             "migManager": {"config": {"default": "all-disabled", "name": "gpupolicy-mig-parted-config-853ac4e886"}}},
}


def installed(name: str, manager: str) -> ManagedObject:
    live = ManagedObject({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                          "metadata": {"name": yaml.safe_load((FIXTURES / name).read_text())["metadata"]["name"]}})
    live.update(yaml.safe_load((FIXTURES / name).read_text()), manager)
    return live


def helm_rendered(values: dict[str, Any]) -> dict[str, Any]:
    """The chart's ClusterPolicy with gpupolicy's values last: templates/clusterpolicy.yaml copies
    devicePlugin.config, mig.strategy and migManager.config into the same paths under spec (v25.3.0: 131-134,
    454-458, 570-574)."""
    obj = yaml.safe_load((FIXTURES / "helm-v25.3.0.yaml").read_text())
    obj["spec"]["devicePlugin"]["config"] = dict(values["devicePlugin"]["config"])
    obj["spec"]["mig"] = dict(values["mig"])
    obj["spec"]["migManager"]["config"] = dict(values["migManager"]["config"])
    return obj


def paths(conflicts: list[Any]) -> list[str]:
    return sorted(".".join(c.path) for c in conflicts)


def test_before_plain_server_side_apply_conflicts_with_helm_on_three_fields() -> None:
    live = installed("helm-v25.3.0.yaml", "helm")
    conflicts = live.apply(copy.deepcopy(BEFORE), "kubectl")
    assert paths(conflicts) == ["metadata.labels.app.kubernetes.io/managed-by", "spec.mig.strategy",
                                "spec.migManager.config.name"]
    assert {c.manager for c in conflicts} == {"helm"}
    # Forced (Argo CD, Flux), the labels Helm owns are taken over: the Helm release no longer says it manages it.
    live.apply(copy.deepcopy(BEFORE), "argocd-controller", force=True)
    assert live.obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpupolicy"


def test_after_the_helm_release_renders_gpupolicy_values_and_nothing_else_writes_the_object(
        example_policy: Load) -> None:
    tree = compile_policy(example_policy("h20-mig"))
    assert not [p for p in tree if p.endswith(".yaml") and b"kind: ClusterPolicy" in tree[p]]
    values = yaml.safe_load(tree[gpu_operator.VALUES_FILE])
    live = installed("helm-v25.3.0.yaml", "helm")
    live.update(helm_rendered(values), "helm")  # helm upgrade ... -f gpu-operator-values.yaml
    assert live.obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert live.obj["spec"]["mig"] == {"strategy": "mixed"}
    configmaps = {yaml.safe_load(tree[p])["metadata"]["name"] for p in ("device-plugin/configmap.yaml",
                                                                        "mig/configmap.yaml")}
    assert {live.obj["spec"]["devicePlugin"]["config"]["name"], live.obj["spec"]["migManager"]["config"]["name"]} \
        == configmaps
    # Even a patch of the same fields on top (the OLM form) now conflicts with nothing: every value agrees.
    olm = compile_policy(example_policy("h20-mig", OLM))
    patch = yaml.safe_load(olm["gpu-operator/clusterpolicy.yaml"])
    patch["metadata"]["name"] = "cluster-policy"
    assert live.apply(patch, "gpupolicy") == []
    validator(operator.release("v25.3.0")).validate(live.obj)  # the whole object, required fields and all


def test_olm_the_reports_apply_advice_works_as_written(example_policy: Load) -> None:
    tree = compile_policy(example_policy("h20-mig", OLM, NO_MONITORING))
    advice = re.search(r"`(kubectl apply [^`]+)`", tree["REPORT.md"].decode())
    assert advice is not None
    words = advice.group(1).split()
    assert {"--server-side", "--force-conflicts", "--field-manager=gpupolicy"} <= set(words)
    patch = yaml.safe_load(tree["gpu-operator/clusterpolicy.yaml"])
    live = installed("olm-console.yaml", "console")
    assert paths(live.apply(copy.deepcopy(patch), "gpupolicy")) == [
        "spec.devicePlugin.config.default", "spec.devicePlugin.config.name", "spec.mig.strategy",
        "spec.migManager.config.name"]
    before = copy.deepcopy(live.obj)
    live.apply(copy.deepcopy(patch), "gpupolicy", force="--force-conflicts" in words)
    changed = sorted(p for p in _leaf_paths(live.obj) if _at(live.obj, p) != _at(before, p))
    assert changed == ["spec.devicePlugin.config.default", "spec.devicePlugin.config.name", "spec.mig.strategy",
                       "spec.migManager.config.name"]
    assert "labels" not in live.obj["metadata"]
    assert live.apply(copy.deepcopy(patch), "gpupolicy") == []  # the next sync: no conflict left


# ----------------------------------------------------------------------- the CRD of every release


def _leaf_paths(obj: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _leaf_paths(value, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix


def _at(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


@pytest.mark.parametrize("release", operator.RELEASES, ids=lambda r: r.version)
def test_every_field_gpupolicy_sets_is_valid_in_every_release(example_policy: Load, release: operator.Release) -> None:
    # Monitoring's dcgm-exporter fields need relabelings (check_monitoring refuses older releases), the rest any.
    edits = () if release.crd_relabels_dcgm_exporter else (NO_MONITORING,)
    patch = yaml.safe_load(compile_policy(example_policy("h20-mig", OLM, *edits))["gpu-operator/clusterpolicy.yaml"])
    validator(release, patch=True).validate(patch)
    assert undeclared(operator.crd_schema(release), patch) == []
    # The chart's templates/clusterpolicy.yaml copies each of these values to the same path under spec.
    values = yaml.safe_load(compile_policy(example_policy("h20-mig", TAINTED, *edits))[gpu_operator.VALUES_FILE])
    assert values["daemonsets"]["tolerations"]
    validator(release, patch=True).validate({"spec": values})
    assert undeclared(operator.crd_schema(release), {"spec": values}) == []


def test_the_patch_alone_cannot_create_a_cluster_policy(example_policy: Load) -> None:
    # The create-vs-patch case: applied where no ClusterPolicy of that name exists, the API server would create
    # it from these fields alone and refuse it for every required field it lacks.
    patch = yaml.safe_load(compile_policy(example_policy("h20-mig", OLM, NO_MONITORING))[
        "gpu-operator/clusterpolicy.yaml"])
    for release in operator.RELEASES:
        errors = sorted(e.message for e in validator(release).iter_errors(patch))
        missing = sorted(m.split("'")[1] for m in errors)
        assert missing == ["daemonsets", "dcgm", "dcgmExporter", "driver", "gfd", "nodeStatusExporter", "operator",
                           "toolkit"], errors


TAINTED = ("      nodes: 4\n", "      nodes: 4\n      taints:\n"
           "        - {key: dedicated, value: inference, effect: NoSchedule}\n"
           "        - {key: nvidia.com/gpu, effect: NoSchedule}\n")


def test_helm_values_carry_the_classes_taints_as_the_operands_tolerations(example_policy: Load) -> None:
    # The chart copies daemonsets.tolerations into ClusterPolicy spec.daemonsets.tolerations, which every operand
    # DaemonSet carries (NVIDIA/gpu-operator@v25.3.0:deployments/gpu-operator/templates/clusterpolicy.yaml:52-53).
    tree = compile_policy(example_policy("h20-mig", TAINTED))
    values = yaml.safe_load(tree[gpu_operator.VALUES_FILE])
    chart_default = installed("helm-v25.3.0.yaml", "helm").obj["spec"]["daemonsets"]["tolerations"]
    # Helm replaces a list: the chart's own toleration stays, the one it already covers is not added twice.
    assert values["daemonsets"] == {"tolerations": [
        *chart_default, {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}]}
    rendered = helm_rendered(values)
    rendered["spec"]["daemonsets"]["tolerations"] = values["daemonsets"]["tolerations"]
    validator(operator.release("v25.3.0")).validate(rendered)
    report = tree["REPORT.md"].decode()
    assert "sets daemonsets.tolerations" in report and "add the classes' taints" not in report
    assert "daemonsets" not in yaml.safe_load(compile_policy(example_policy("h20-mig"))[gpu_operator.VALUES_FILE])
