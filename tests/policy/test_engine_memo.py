"""The engine's memo: the objects of one template share a verdict, and sharing it changes no answer.

A controller's pods differ only in their instance fields (name, uid, resourceVersion, timestamps, managedFields),
so the engine judges an object without them and remembers the verdict by the rest of the object and the tenants.
Over a corpus (every example suite's cases, every workload fixture, the benchmark's reviews) this checks that
the rules read none of those fields, that a remembered verdict is what a fresh engine answers, and that anything
else in the object, or another tenant, is judged anew.
"""

from __future__ import annotations

import copy
import datetime
import sys
from pathlib import Path
from typing import Any

import pytest
import workload_fixtures
import yaml
from hypothesis import HealthCheck, given, settings
from test_engine import admission_policy
from test_fix_corpus import pods

from policy.admission import engine as engine_module
from policy.admission.engine import Decision, Engine

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import reviews  # noqa: E402  (bench/reviews.py: real-sized AdmissionReviews with managedFields)

Case = tuple[str, str, dict[str, Any], tuple[str, ...]]


def corpus() -> list[Case]:
    """(cluster, name, object, tenants) for every CREATE case of the example suites, fixture and benchmark body."""
    out: list[Case] = []
    for suite in sorted((ROOT / "examples" / "clusters").glob("*/admission-tests.yaml")):
        data = yaml.safe_load(suite.read_text(encoding="utf-8"))
        engine = Engine(admission_policy(suite.parent.name))
        for case in data["cases"]:
            if case.get("operation", "CREATE") != "CREATE":
                continue
            obj = case["object"]
            ns = case.get("namespace") or obj.get("metadata", {}).get("namespace") or "default"
            labels = {**data.get("namespaces", {}).get(ns, {}), **case.get("namespaceLabels", {})}
            out.append((suite.parent.name, case["name"], obj, engine.tenants_for(labels, namespace=ns)))
    for path in workload_fixtures.FILES:
        header = workload_fixtures.header(path)
        engine = Engine(admission_policy(header["cluster"]))
        tenants = engine.tenants_for(workload_fixtures.namespace_labels(header), namespace="apps")
        for i, obj in enumerate(workload_fixtures.documents(path)):
            out.append((header["cluster"], f"{path.parent.name}/{path.name}#{i}", obj, tenants))
    for body in reviews.bodies():
        tenant = body.path.partition("/tenant/")[2].partition("?")[0]
        out.append(("mixed-fleet", body.name, body.review["request"]["object"], (tenant,) if tenant else ()))
    return out


CORPUS = corpus()
IDS = [f"{cluster}: {name}" for cluster, name, *_ in CORPUS]


def another_instance(obj: dict[str, Any], n: int) -> dict[str, Any]:
    """The next object of the same template: other values in every instance field, and the rest unchanged."""
    other = copy.deepcopy(obj)
    metadata = other.setdefault("metadata", {})
    metadata.update(name=f"{metadata.get('name', 'pod')}-{n}x7k2q", uid=f"00000000-0000-4000-8000-{n:012d}",
                    resourceVersion=str(1000 + n), creationTimestamp=f"2026-12-01T06:{n % 60:02d}:00Z",
                    generation=n, managedFields=[{"manager": f"controller-{n}", "operation": "Update",
                                                  "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}])
    return other


def answer(decision: Decision) -> tuple[Any, ...]:
    """Everything a caller reads from a decision: verdict, findings with their fixes, subject and texts."""
    return (decision.allowed, decision.diagnostics, decision.subject, decision.message, decision.warnings,
            decision.audit_annotations,
            tuple(d.fix.to_dict() if d.fix is not None else None for d in decision.diagnostics))


def test_the_corpus_holds_suites_fixtures_and_benchmark_reviews() -> None:
    clusters = {cluster for cluster, *_ in CORPUS}
    assert clusters == {"h20-mig", "mixed-fleet", "tke-l20-t4", "vgpu-platform"}
    decisions = [Engine(admission_policy(c)).evaluate(o, tenants=t) for c, _, o, t in CORPUS]
    assert len(CORPUS) >= 90
    assert sum(not d.allowed for d in decisions) > 30 and sum(bool(d.diagnostics) for d in decisions) > 40


@pytest.mark.parametrize(("cluster", "name", "obj", "tenants"), CORPUS, ids=IDS)
def test_a_remembered_verdict_is_what_a_fresh_engine_answers(
        cluster: str, name: str, obj: dict[str, Any], tenants: tuple[str, ...]) -> None:
    warm = Engine(admission_policy(cluster))
    warm.evaluate(obj, tenants=tenants)
    for n in (1, 2):
        other = another_instance(obj, n)
        fresh = Engine(admission_policy(cluster)).evaluate(other, tenants=tenants)
        remembered = warm.evaluate(other, tenants=tenants)
        assert answer(remembered) == answer(fresh)
        if fresh.subject:
            assert fresh.subject.endswith(f"{obj.get('metadata', {}).get('name', 'pod')}-{n}x7k2q")


@pytest.mark.parametrize(("cluster", "name", "obj", "tenants"), CORPUS, ids=IDS)
def test_the_memo_answers_as_judging_whole_objects_did(
        cluster: str, name: str, obj: dict[str, Any], tenants: tuple[str, ...],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with_memo = Engine(admission_policy(cluster)).evaluate(obj, tenants=tenants)
    monkeypatch.setattr(engine_module, "without_instance_fields", lambda o: o)
    whole = Engine(admission_policy(cluster), memo_size=0).evaluate(obj, tenants=tenants)
    assert answer(with_memo) == answer(whole)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods())
def test_generated_pods_get_from_the_memo_what_judging_them_whole_gives(
        case: tuple[str, dict[str, Any], dict[str, str]]) -> None:
    cluster, obj, labels = case
    warm = Engine(admission_policy(cluster))
    tenants = warm.tenants_for(labels, namespace="apps")
    warm.evaluate(obj, tenants=tenants)
    other = another_instance(obj, 3)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_module, "without_instance_fields", lambda o: o)
        whole = Engine(admission_policy(cluster), memo_size=0).evaluate(other, tenants=tenants)
    assert answer(warm.evaluate(other, tenants=tenants)) == answer(whole)


DENIED_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "finetune", "namespace": "apps"},
              "spec": {"containers": [{"name": "train", "image": "t:1",
                                       "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}


def test_what_is_not_an_instance_field_is_judged_anew() -> None:
    engine = Engine(admission_policy("mixed-fleet"))
    denied = engine.evaluate(DENIED_POD, tenants=("research",))
    assert not denied.allowed
    pinned = copy.deepcopy(DENIED_POD)
    pinned["spec"]["nodeSelector"] = {"node-pool": "h100-train"}
    pinned["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "training",
                                      "effect": "NoSchedule"}]
    assert engine.evaluate(pinned, tenants=("research",)).allowed
    one_gpu = copy.deepcopy(DENIED_POD)
    one_gpu["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    assert engine.evaluate(one_gpu, tenants=("research",)).allowed
    # The same object for other tenants: prod may not use the shared classes at all.
    assert engine.evaluate(DENIED_POD, tenants=("prod",)).diagnostics != denied.diagnostics
    assert engine.evaluate(DENIED_POD, tenants=("research",)).diagnostics == denied.diagnostics


def test_values_json_writes_alike_do_not_share_a_verdict() -> None:
    # orjson writes NaN as null, and json.loads (the webhook's parse of a body orjson refuses) reads NaN; a YAML
    # date and the string of it are written alike too.
    null, nan = copy.deepcopy(DENIED_POD), copy.deepcopy(DENIED_POD)
    null["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = None
    nan["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = float("nan")
    text, date = copy.deepcopy(DENIED_POD), copy.deepcopy(DENIED_POD)
    text["metadata"]["annotations"] = {"nvidia.com/use-gputype": "2026-12-01"}
    date["metadata"]["annotations"] = {"nvidia.com/use-gputype": datetime.date(2026, 12, 1)}
    for first, second in ((null, nan), (nan, null), (text, date), (date, text)):
        warm = Engine(admission_policy("mixed-fleet"))
        warm.evaluate(first, tenants=("research",))
        fresh = Engine(admission_policy("mixed-fleet")).evaluate(second, tenants=("research",))
        assert answer(warm.evaluate(second, tenants=("research",))) == answer(fresh)
    engine = Engine(admission_policy("mixed-fleet"))
    assert engine.evaluate(nan, tenants=("research",)).render() != engine.evaluate(null, tenants=("research",)).render()


def test_the_memo_is_bounded_and_skips_what_it_cannot_key() -> None:
    engine = Engine(admission_policy("mixed-fleet"))
    for n in range(engine_module.MEMO_SIZE + 40):
        pod = copy.deepcopy(DENIED_POD)
        pod["spec"]["containers"][0]["image"] = f"t:{n}"
        engine.evaluate(pod, tenants=("research",))
        assert len(engine._memo) <= engine_module.MEMO_SIZE
    # Too large to be worth a key, and not JSON at all (a YAML date read by `gpupolicy admit`): judged each time.
    large = copy.deepcopy(DENIED_POD)
    large["metadata"]["annotations"] = {"note": "x" * engine_module._MEMO_MAX_KEY_BYTES}
    dated = copy.deepcopy(DENIED_POD)
    dated["metadata"]["annotations"] = {"since": datetime.date(2026, 12, 1)}
    engine._memo.clear()
    for obj in (large, dated):
        decision = engine.evaluate(obj, tenants=("research",))
        assert not decision.allowed and decision.subject == "Pod finetune"
    assert engine._memo == {}
    unremembering = Engine(admission_policy("mixed-fleet"), memo_size=0)
    unremembering.evaluate(DENIED_POD, tenants=("research",))
    assert unremembering._memo == {}


def test_an_object_is_judged_without_its_instance_fields_and_never_changed() -> None:
    # What a ReplicaSet's pods differ in when the validating webhook sees them: the API server has named them by
    # then (registry store Create: rest.BeforeCreate generates the name before createValidation runs).
    pod = {"kind": "Pod", "metadata": {"name": "a", "generateName": "a-", "namespace": "n", "labels": {"x": "1"},
                                       "uid": "u", "resourceVersion": "1", "creationTimestamp": "t", "generation": 1,
                                       "managedFields": [], "annotations": {"y": "2"}}}
    assert engine_module.without_instance_fields(pod) == {
        "kind": "Pod", "metadata": {"namespace": "n", "labels": {"x": "1"}, "annotations": {"y": "2"}}}
    assert pod["metadata"]["uid"] == "u" and "managedFields" in pod["metadata"]
    bare = {"kind": "Pod", "metadata": {"namespace": "n"}}
    assert engine_module.without_instance_fields(bare) is bare
