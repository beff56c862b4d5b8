"""Every hint is a fix: over a corpus of denials (every example suite's denied cases, the denied workload fixtures,
and generated pods), each finding's fix is applied mechanically (its JSON Patch, by an RFC 6902 applier written
here) in the object's own namespace and the result re-evaluated: it is admitted with no finding left. No fix moves
the object to another namespace (so to another tenant). A finding without a fix must say that no change within
the policy admits it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import workload_fixtures
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_patch import apply_patch
from test_engine import engine_for

from policy.admission.engine import Decision, Engine

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "examples" / "clusters"
NO_CHANGE = "no change to this object within the policy admits it"


# --- applying a fix as a client would ------------------------------------------------------------------------------


RESOURCE = re.compile(r"nvidia\.com/[A-Za-z0-9.-]*[A-Za-z0-9]")
#: How a hint would send the object elsewhere: another namespace, another tenant's.
MOVES = re.compile(r"run it in|(move|another|other) namespace|namespace of tenant|no tenant selects")


def check_every_fix_admits(engine: Engine, obj: dict[str, Any], labels: dict[str, str], namespace: str) -> Decision:
    """Every finding's fix, and every alternative its hint names, applied and re-evaluated: each admits."""
    decision = engine.evaluate(obj, tenants=engine.tenants_for(labels, namespace=namespace))
    for finding in decision.diagnostics:
        if finding.fix is None:
            # A custom resource's template that is not its own plain pod spec (containers outside it, GPU keys, a
            # podSpecPatch) was judged as a Pod built from it: the fix was checked on that Pod, and is given in
            # words, as no JSON Patch of the custom resource writes it (policy/admission/templates.py).
            rebuilt = next((t for t in engine.kinds.templates(obj) or () if not t.direct
                            and finding.message.startswith(f"pod template {t.label}: ")), None)
            # KAI refuses the annotation's value, and the value meant is the user's to say (the hint says how KAI
            # reads each annotation)
            refused = finding.code == "kai-annotation-invalid" and finding.hint.startswith("write gpu-fraction")
            assert NO_CHANGE in finding.hint or finding.hint.startswith("compile the policy") or rebuilt or refused, \
                finding
            assert not MOVES.search(finding.hint), finding.hint
            continue
        fix = finding.fix.to_dict()
        for each in (fix, *fix.get("alternatives", ())):
            check_admits(engine, obj, labels, namespace, each, finding.hint)
        assert finding.hint.startswith(finding.fix.describe())
        # A resource the hint names is one the object asks for, or one a checked fix or alternative writes.
        written = {e.get("instead") or e.get("resource") for f in (fix, *fix.get("alternatives", ()))
                   for e in f["edits"]}
        assert set(RESOURCE.findall(finding.hint)) <= set(RESOURCE.findall(json.dumps(obj))) | written, finding.hint
    return decision


def check_admits(engine: Engine, obj: dict[str, Any], labels: dict[str, str], namespace: str, fix: dict[str, Any],
                 hint: str) -> None:
    assert set(fix) <= {"edits", "jsonPatch", "alternatives"}, fix  # nothing but edits of the object itself
    assert not MOVES.search(hint), hint
    fixed = apply_patch(obj, fix["jsonPatch"])
    again = engine.evaluate(fixed, tenants=engine.tenants_for(labels, namespace=namespace))
    assert again.allowed and again.diagnostics == (), (hint, fix, again.render())


# --- the corpus: example suites and fixtures ------------------------------------------------------------------------


def suite_denials() -> list[tuple[str, str, dict[str, Any], dict[str, str], str]]:
    out = []
    for suite in sorted(CLUSTERS.glob("*/admission-tests.yaml")):
        data = yaml.safe_load(suite.read_text(encoding="utf-8"))
        for case in data["cases"]:
            if case["expect"]["allowed"] or case.get("operation", "CREATE") != "CREATE":
                continue
            obj = case["object"]
            ns = case.get("namespace") or obj.get("metadata", {}).get("namespace") or "default"
            labels = {**data.get("namespaces", {}).get(ns, {}), **case.get("namespaceLabels", {})}
            out.append((suite.parent.name, case["name"], obj, labels, ns))
    return out


SUITE_DENIALS = suite_denials()


def test_the_corpus_holds_every_suites_denials() -> None:
    assert len(SUITE_DENIALS) >= 20 and {c for c, *_ in SUITE_DENIALS} == {"h20-mig", "mixed-fleet", "tke-l20-t4",
                                                                     "vgpu-platform"}


@pytest.mark.parametrize(("cluster", "name", "obj", "labels", "namespace"), SUITE_DENIALS,
                         ids=[f"{c}: {n}" for c, n, *_ in SUITE_DENIALS])
def test_each_finding_of_each_suite_denial_has_a_fix_that_admits_the_object(
        cluster: str, name: str, obj: dict[str, Any], labels: dict[str, str], namespace: str) -> None:
    decision = check_every_fix_admits(engine_for(cluster), obj, labels, namespace)
    assert not decision.allowed
    # Every suite denial can be fixed within its policy, except where only the platform team can help the tenant,
    # or where KAI refuses an annotation's value: which value was meant is the user's to say.
    first = decision.diagnostics[0]
    assert first.fix is not None or " ask the platform team to allow " in first.hint \
        or first.code == "kai-annotation-invalid", first


DENY_FIXTURES = [path for path in workload_fixtures.FILES if path.parent.name == "deny"]


@pytest.mark.parametrize("path", DENY_FIXTURES, ids=lambda p: p.name)
def test_each_denied_workload_fixture_has_fixes_that_admit_it(path: Path) -> None:
    header = workload_fixtures.header(path)
    labels = workload_fixtures.namespace_labels(header)
    for obj in workload_fixtures.documents(path):
        check_every_fix_admits(engine_for(header["cluster"]), obj, labels, "apps")


# --- generated pods ----------------------------------------------------------------------------------------------

RESOURCES = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-1g.12gb",
             "nvidia.com/mig-3g.20gb", "nvidia.com/gpumem", "nvidia.com/gpu.shared", "nvidia.com/gpucores",
             "nvidia.com/gpumem-percentage", "nvidia.com/priority"]
AMOUNTS = st.sampled_from([1, 1, 1, 2, 3, 4, 8, 9, 16, "1", "2", "0.5", "1500m", "\u0662", "1e31", True, -1, 0, 150,
                           8000, 60000, "8Gi"])
LABELS = {"mixed-fleet": ["node-pool=t4-dev", "node-pool=a100-mps", "node-pool=h100-mig", "node-pool=h100-train",
                          "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.product=Tesla-T4"],
          "tke-l20-t4": ["node.kubernetes.io/instance-type=GN7.2XLARGE32", "nvidia.com/gpu.product=Tesla-T4",
                         "node.kubernetes.io/instance-type=PNV5b.8XLARGE96"],
          "h20-mig": ["gpu-pool=h20", "nvidia.com/gpu.product=NVIDIA-H20"],
          "vgpu-platform": ["node-pool=prod-mig", "node-pool=platform-vgpu", "node-pool=dev-ts",
                            "nvidia.com/gpu.product=NVIDIA-L40S"]}
NAMESPACES = {"mixed-fleet": [{}, {"gpu-tier": "prod"}, {"gpu-tier": "research"}, {"gpu-tier": "sandbox"}],
              "tke-l20-t4": [{}], "h20-mig": [{}, {"gpu-tier": "inference"}],
              "vgpu-platform": [{}, {"gpu-tier": "prod"}, {"gpu-tier": "platform"}, {"gpu-tier": "dev"}]}
# What HAMi's rules read besides resources (policy.admission.vgpu): the scheduler, annotations, privileged containers.
SCHEDULERS = st.sampled_from([None, None, None, "hami-scheduler", "default-scheduler", "volcano"])
ANNOTATIONS = st.sampled_from([{}, {}, {"nvidia.com/use-gputype": "H100"}, {"nvidia.com/vgpu-mode": "mig"},
                               {"hami.io/gpu-scheduler-policy": "binpack,topology"}])


@st.composite
def container(draw: st.DrawFn, name: str) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    for resource in draw(st.lists(st.sampled_from(RESOURCES), max_size=2, unique=True)):
        amount = draw(AMOUNTS)
        field = draw(st.sampled_from(["limits", "limits", "limits", "requests", "both", "differ"]))
        if field in ("limits", "both", "differ"):
            resources.setdefault("limits", {})[resource] = amount
        if field in ("requests", "both"):
            resources.setdefault("requests", {})[resource] = amount
        if field == "differ":
            resources.setdefault("requests", {})[resource] = 2
    found: dict[str, Any] = {"name": name, "image": "app:1", "resources": resources}
    if draw(st.integers(0, 7)) == 0:
        found["securityContext"] = {"privileged": True}
    return found


@st.composite
def pods(draw: st.DrawFn) -> tuple[str, dict[str, Any], dict[str, str]]:
    cluster = draw(st.sampled_from(sorted(LABELS)))
    spec: dict[str, Any] = {"containers": [draw(container(f"c{i}")) for i in range(draw(st.integers(1, 2)))]}
    if draw(st.booleans()):
        spec["initContainers"] = [{**draw(container("init")),
                                   **({"restartPolicy": "Always"} if draw(st.booleans()) else {})}]
    for entry in draw(st.lists(st.sampled_from(LABELS[cluster]), max_size=2, unique=True)):
        key, value = entry.split("=", 1)
        spec.setdefault("nodeSelector", {})[key] = value
    if draw(st.booleans()):
        key, value = draw(st.sampled_from(LABELS[cluster])).split("=", 1)
        operator = draw(st.sampled_from(["In", "NotIn"]))
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": operator, "values": [value]}]}]}}}
    if draw(st.booleans()):
        spec["tolerations"] = [draw(st.sampled_from([{"operator": "Exists"}, {"key": "dedicated", "operator": "Exists"},
                                                     {"key": "other", "operator": "Exists"}]))]
    if draw(st.integers(0, 5)) == 0:
        spec["nodeName"] = "gpu-node-7"
    scheduler = draw(SCHEDULERS)
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    kind = draw(st.sampled_from(["Pod", "Deployment"]))
    obj: dict[str, Any] = {"apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind,
                           "metadata": {"name": "generated", "namespace": "apps"}}
    annotations = draw(ANNOTATIONS)
    template: dict[str, Any] = {"metadata": {"annotations": annotations}} if annotations else {}
    if kind == "Pod":
        obj["metadata"].update(template.get("metadata", {}))
        obj["spec"] = spec
    else:
        obj["spec"] = {"template": {**template, "spec": spec}}
    return cluster, obj, draw(st.sampled_from(NAMESPACES[cluster]))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods())
def test_every_fix_of_a_generated_pod_admits_it(case: tuple[str, dict[str, Any], dict[str, str]]) -> None:
    cluster, obj, labels = case
    check_every_fix_admits(engine_for(cluster), obj, labels, "apps")


# --- hints that name a limit or alternatives -----------------------------------------------------------------------

JOB9 = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train9"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "t", "image": "app:1", "resources": {"limits": {"nvidia.com/gpu": 9}}}]}}}}


def test_nine_gpus_in_a_prod_namespace_are_told_only_of_mig_profiles_that_hold_nine() -> None:
    # h100-mig offers 36 mig-1g.10gb per node but only 4 mig-2g.20gb and 4 mig-3g.40gb (cluster.yaml groups).
    decision = check_every_fix_admits(engine_for("mixed-fleet"), JOB9, {"gpu-tier": "prod"}, "p")
    hints = {d.hint for d in decision.diagnostics}
    assert hints == {'request nvidia.com/mig-1g.10gb: 9 instead of nvidia.com/gpu in container "t"'}


def test_nine_gpus_outside_every_tenant_are_told_the_real_limit_of_the_exclusive_class() -> None:
    decision = check_every_fix_admits(engine_for("mixed-fleet"), JOB9, {}, "default")
    assert decision.diagnostics[0].hint == (
        'request nvidia.com/gpu: 1 in container "t" (more shared replicas of one device add no compute; no node '
        "holds 9 whole GPUs: at most 8 per node, on class h100-train)")


def test_a_hint_names_each_mig_profile_that_admits_the_pod_as_a_checked_alternative() -> None:
    one = yaml.safe_load(yaml.safe_dump(JOB9).replace("nvidia.com/gpu: 9", "nvidia.com/gpu: 1"))
    one["spec"]["template"]["spec"]["nodeSelector"] = {"node-pool": "h100-mig"}
    decision = check_every_fix_admits(engine_for("mixed-fleet"), one, {"gpu-tier": "prod"}, "p")
    (finding,) = decision.diagnostics
    assert finding.fix is not None
    assert [a.to_dict()["edits"][0]["instead"] for a in finding.fix.alternatives] == [
        "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"]
    assert finding.hint.endswith("(or, also admitted, nvidia.com/mig-2g.20gb: 1 or nvidia.com/mig-3g.40gb: 1)")
