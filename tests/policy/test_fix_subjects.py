"""Rule ids, messages and hints agree: every rule the engine can emit is walked, each with real denials (the example
suites' cases that name it, and the cases of issue 28 below), and each finding's hint speaks of its rule's subject
(policy.admission.rules.SUBJECTS). Messages name the first real reason per class: it does not offer the resource,
then it holds too few, then the pod's selector or affinity excludes it, then its taints."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest
import workload_fixtures
import yaml
from test_engine import engine_for

from policy.admission.engine import NOT_CHECKED, Engine
from policy.admission.rules import PLACEMENT_EDITS, RULES, SUBJECTS
from policy.load import load_policy_or_raise
from policy.resolved.offers import build_admission_policy
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import RuleId

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "examples" / "clusters"
MIXED = CLUSTERS / "mixed-fleet" / "cluster.yaml"
#: What a hint without a fix may say, per rule: what the platform team would have to allow for a tenant's rule,
#: else that no change within the policy admits the object (or, for a pod of more GPU containers than any node
#: holds, how to split it).
NO_FIX = {"tenant-sharing-mode-denied": re.compile(r"ask the platform team to allow |^compile the policy"),
          # the value a refused KAI annotation meant is the user's to say: the hint says how KAI reads each
          "kai-annotation-invalid": re.compile(r"^write gpu-fraction as a portion of one GPU")}
NO_FIX_DEFAULT = re.compile(r"^no change to this object within the policy admits it|^split the work|^compile the")
PLACEMENT_PATHS = ("tolerations", "nodeSelector", "affinity")


def without_mps_for_research() -> Engine:
    """mixed-fleet with MPS taken from tenant research (issue 28's case)."""
    text = MIXED.read_text(encoding="utf-8")
    edited = text.replace("      allow: [exclusive, mps, time-slicing]", "      allow: [exclusive, time-slicing]")
    assert edited != text
    return Engine(build_admission_policy(load_policy_or_raise(edited, filename=str(MIXED))))


def limits(**amounts: Any) -> dict[str, Any]:
    return {"limits": {f"nvidia.com/{k.replace('_', '-').replace('mig-1g-5gb', 'mig-1g.5gb')}": v
                       for k, v in amounts.items()}}


def deployment(resources: dict[str, Any], **spec: Any) -> dict[str, Any]:
    container = {"name": "app", "image": "app:1", "resources": resources}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "lab"},
            "spec": {"selector": {"matchLabels": {"app": "d"}},
                     "template": {"metadata": {"labels": {"app": "d"}}, "spec": {**spec, "containers": [container]}}}}


NOT_IN_SHARED = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "node-pool", "operator": "NotIn", "values": ["t4-dev", "a100-mps"]}]}]}}}
RESEARCH = {"gpu-tier": "research"}
#: (name, engine, object, namespace labels): the misleading answers issue 28 lists, beside the suites' cases.
ISSUE_CASES: list[tuple[str, Any, dict[str, Any], dict[str, str]]] = [
    ("gpucores, which h100-train never offers", lambda: engine_for("mixed-fleet"),
     deployment(limits(gpu=1, gpucores=30)), RESEARCH),
    ("mig-1g.5gb, which no class offers", lambda: engine_for("mixed-fleet"),
     deployment(limits(mig_1g_5gb=1)), RESEARCH),
    ("a NotIn that leaves the MIG class and the tainted whole-GPU class", lambda: engine_for("mixed-fleet"),
     deployment(limits(gpu=1), affinity=NOT_IN_SHARED), RESEARCH),
    ("a vLLM pod asking for 2 GPUs with HAMi's resources", lambda: engine_for("mixed-fleet"),
     deployment(limits(gpu=2, gpumem=20000, gpucores=50)), RESEARCH),
    ("research pinned to MPS without MPS", without_mps_for_research,
     deployment(limits(gpu=1), nodeSelector={"node-pool": "a100-mps"}), RESEARCH),
    ("a sandbox notebook on whole GPUs", lambda: engine_for("mixed-fleet"),
     deployment(limits(gpu=1), nodeSelector={"node-pool": "h100-train"},
                tolerations=[{"key": "dedicated", "operator": "Exists"}]), {"gpu-tier": "sandbox"}),
    # NVIDIA/KAI-Scheduler @72de64fc pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator_test.go, case
    # "forbid fraction limit (1500 milli)", as a Pod of the tenant
    ("a KAI gpu-fraction KAI refuses", lambda: engine_for("mixed-fleet"),
     {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kai", "annotations": {"gpu-fraction": "1.5"}},
      "spec": {"containers": [{"name": "c", "resources": {}}]}}, RESEARCH),
]


def suite_cases() -> list[tuple[str, Any, dict[str, Any], dict[str, str]]]:
    out = []
    for suite in sorted(CLUSTERS.glob("*/admission-tests.yaml")):
        data = yaml.safe_load(suite.read_text(encoding="utf-8"))
        for case in data["cases"]:
            if case.get("operation", "CREATE") != "CREATE" or not case["expect"].get("rules"):
                continue
            ns = case.get("namespace") or case["object"].get("metadata", {}).get("namespace") or "default"
            labels = {**data.get("namespaces", {}).get(ns, {}), **case.get("namespaceLabels", {})}
            cluster = suite.parent.name
            out.append((f"{cluster}: {case['name']}", lambda c=cluster: engine_for(c), case["object"], labels))
    return out


CASES = suite_cases() + ISSUE_CASES


def findings(case: tuple[str, Any, dict[str, Any], dict[str, str]]) -> tuple[Diagnostic, ...]:
    _, make, obj, labels = case
    engine = make()
    return engine.evaluate(obj, tenants=engine.tenants_for(labels, namespace="lab")).diagnostics


def test_every_rule_id_the_engine_can_emit_is_enumerable_and_has_a_subject() -> None:
    ids = [rule.id for rule in RULES]
    assert len(ids) == len(set(ids))
    assert set(ids) == set(get_args(RuleId)) == set(SUBJECTS)  # a rule the spec can name is a rule the engine runs
    assert NOT_CHECKED not in ids  # a notice, not a rule: it carries no fix, only what to run instead


def test_every_rule_is_walked_by_a_real_denial() -> None:
    fired = {d.code for case in CASES for d in findings(case)}
    missing = {rule.id for rule in RULES} - fired
    assert not missing, f"add a case that fires {sorted(missing)} to an example suite or to ISSUE_CASES"


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_hint_speaks_of_its_rules_subject(case: tuple[str, Any, dict[str, Any], dict[str, str]]) -> None:
    for finding in findings(case):
        if finding.code == NOT_CHECKED:
            continue
        if finding.fix is None:
            assert NO_FIX.get(finding.code, NO_FIX_DEFAULT).search(finding.hint), finding
            continue
        kinds = {edit.kind for edit in finding.fix.edits}
        assert kinds & SUBJECTS[finding.code], (finding.code, finding.hint)  # type: ignore[index]
        if any(part in PLACEMENT_PATHS for part in finding.path):
            # The message is about where the pod may run (a selector, an affinity, a taint): so is its fix.
            assert kinds & PLACEMENT_EDITS, (finding.message, finding.hint)


def test_a_class_that_does_not_offer_the_resource_is_never_said_to_be_untolerated() -> None:
    for resource in ("gpucores", "mig_1g_5gb"):
        decision = engine_for("mixed-fleet").evaluate(deployment(limits(**{resource: 1})), tenants=("research",))
        name = "nvidia.com/" + resource.replace("_", "-").replace("mig-1g-5gb", "mig-1g.5gb")
        messages = [d.message for d in decision.diagnostics if d.code == "gpu-request-unsatisfiable"]
        assert messages and all(f"h100-train: offers nvidia.com/gpu, not {name}" in m for m in messages)
        assert not any("taint" in m for m in messages)


def test_a_not_in_that_leaves_a_tainted_whole_gpu_class_is_denied_for_the_taint_and_fixed_by_the_toleration() -> None:
    (finding,) = findings(ISSUE_CASES[2])
    assert finding.code == "gpu-request-unsatisfiable"
    assert finding.message.startswith("the pod does not tolerate the taints of class h100-train, and its required "
                                      "node affinity excludes every other node class that offers 1 nvidia.com/gpu")
    assert finding.path[-1] == "tolerations"
    assert finding.hint == "tolerate the taint dedicated=training:NoSchedule (class h100-train)"


def test_a_not_in_that_excludes_every_whole_gpu_class_is_still_a_strategy_mismatch_fixed_by_the_mig_name() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "node-pool", "operator": "NotIn",
                               "values": ["h100-train", "t4-dev", "a100-mps"]}]}]}}}
    decision = engine_for("mixed-fleet").evaluate(deployment(limits(gpu=1), affinity=affinity), tenants=("prod",))
    (finding,) = decision.diagnostics
    assert finding.code == "mig-strategy-mismatch"
    assert finding.hint.startswith('request nvidia.com/mig-1g.10gb: 1 instead of nvidia.com/gpu in container "app"')


def test_two_gpus_a_class_of_the_tenant_holds_are_placed_there_not_halved() -> None:
    hints = {d.hint for d in findings(ISSUE_CASES[3])}
    assert hints == {'remove nvidia.com/gpucores from container "app", remove nvidia.com/gpumem from container "app" '
                     "and pin the pod to class h100-train with nodeSelector {node-pool: h100-train}, tolerate the "
                     "taint dedicated=training:NoSchedule"}
    assert not any("nvidia.com/gpu: 1" in h for h in hints)


def test_where_no_class_of_the_tenant_holds_the_amount_fewer_is_the_fix() -> None:
    # dev may time-slice t4-dev only: one shared replica per container is all it can have.
    engine = engine_for("mixed-fleet")
    obj = deployment({"limits": {"nvidia.com/gpu": 2}}, nodeSelector={"node-pool": "t4-dev"})
    decision = engine.evaluate(obj, tenants=("dev",))
    assert {d.hint for d in decision.diagnostics} == {'request nvidia.com/gpu: 1 in container "app" (more shared '
                                                      "replicas of one device add no compute)"}


def test_a_sandbox_pod_pinned_to_whole_gpus_is_re_pinned_to_its_tenants_class_not_sent_to_prod() -> None:
    (finding,) = findings(ISSUE_CASES[5])
    assert finding.code == "tenant-sharing-mode-denied"
    assert finding.hint == "pin the pod to class t4-dev with nodeSelector {node-pool: t4-dev}"


def test_a_tenant_rule_with_no_fix_inside_the_tenant_names_the_spec_field_to_change() -> None:
    # vgpu-platform's dev may only time-slice; HAMi's memory asks for a vGPU, which only platform and batch may use.
    obj = deployment({"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}})
    (finding,) = engine_for("vgpu-platform").evaluate(obj, tenants=("dev",)).diagnostics
    assert finding.code == "tenant-sharing-mode-denied" and finding.fix is None
    assert finding.hint == ("no change to this object within the policy admits it: ask the platform team to allow "
                            "vgpu (spec.tenants[3].allow) for tenant dev in ClusterGPUPolicy vgpu-platform")


# --- no fix anywhere moves a workload to another tenant's namespace ---------------------------------------------

MOVES = re.compile(r"run it in|(move|another|other) namespace|namespace of tenant|no tenant selects")


def every_bundled_workload() -> list[tuple[str, Any, dict[str, Any], dict[str, str]]]:
    """Every case of every example suite (allowed ones too: warnings carry fixes) and every workload fixture."""
    out = []
    for suite in sorted(CLUSTERS.glob("*/admission-tests.yaml")):
        data = yaml.safe_load(suite.read_text(encoding="utf-8"))
        for case in data["cases"]:
            ns = case.get("namespace") or case["object"].get("metadata", {}).get("namespace") or "default"
            labels = {**data.get("namespaces", {}).get(ns, {}), **case.get("namespaceLabels", {})}
            cluster = suite.parent.name
            out.append((f"{cluster}: {case['name']}", lambda c=cluster: engine_for(c), case["object"], labels))
    for path in workload_fixtures.FILES:
        header = workload_fixtures.header(path)
        for i, obj in enumerate(workload_fixtures.documents(path)):
            out.append((f"{path.parent.name}/{path.name}#{i}", lambda c=header["cluster"]: engine_for(c), obj,
                        workload_fixtures.namespace_labels(header)))
    return out


BUNDLED = every_bundled_workload()


def test_the_bundled_workloads_include_every_suite_and_fixture() -> None:
    assert len(BUNDLED) >= 80 and any(name.startswith("deny/") for name, *_ in BUNDLED)


@pytest.mark.parametrize("case", BUNDLED, ids=[c[0] for c in BUNDLED])
def test_no_fix_moves_a_bundled_workload_to_another_namespace(
        case: tuple[str, Any, dict[str, Any], dict[str, str]]) -> None:
    for tenants in (None, ("prod",), ("research",), ("dev",)):  # its own namespace's tenant, and others'
        _, make, obj, labels = case
        engine = make()
        chosen = engine.tenants_for(labels, namespace="lab") if tenants is None else tenants
        if not set(chosen) <= {t.name for t in engine.policy.tenants}:
            continue
        for finding in engine.evaluate(obj, tenants=chosen).diagnostics:
            assert not MOVES.search(finding.hint), finding.hint
            if finding.fix is not None:
                as_data = finding.fix.to_dict()
                assert set(as_data) <= {"edits", "jsonPatch", "alternatives"}, as_data
                kinds = {e["kind"] for f in (as_data, *as_data.get("alternatives", ())) for e in f["edits"]}
                assert "move-namespace" not in kinds
