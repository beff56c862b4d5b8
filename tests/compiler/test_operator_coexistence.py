"""deploy gpu-operator beside the operator's own installer: every emitted field checked against what the
ClusterPolicy CRD of every supported operator release says of it (policy/hardware/operator.py CRD_FIELDS, read from
each release's CRD).  The apply over a Helm-installed and a console-created ClusterPolicy, with the API server's
own ownership and conflicts, is tests/kube/test_kube_operator_coexistence.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from gpu_operator_fixtures import cluster_policy, helm_rendered
from operator_crd import undeclared, validator

from compiler import compile_policy
from compiler.targets import gpu_operator
from policy.hardware import operator
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
ROOT = Path(__file__).resolve().parents[2]
OLM = ("installer: helm ", "installer: olm ")
# The operator fields of the device plugin and MIG alone (monitoring's dcgmExporter fields: test_monitoring_objects.py).
NO_MONITORING = ("  monitoring:\n    enabled: true\n", "")

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
    chart_default = cluster_policy("helm-v25.3.0.yaml")["spec"]["daemonsets"]["tolerations"]
    # Helm replaces a list: the chart's own toleration stays, the one it already covers is not added twice.
    assert values["daemonsets"] == {"tolerations": [
        *chart_default, {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}]}
    rendered = helm_rendered(values)
    rendered["spec"]["daemonsets"]["tolerations"] = values["daemonsets"]["tolerations"]
    validator(operator.release("v25.3.0")).validate(rendered)
    report = tree["REPORT.md"].decode()
    assert "sets daemonsets.tolerations" in report and "add the classes' taints" not in report
    assert "daemonsets" not in yaml.safe_load(compile_policy(example_policy("h20-mig"))[gpu_operator.VALUES_FILE])
