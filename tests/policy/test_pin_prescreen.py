"""The fix search leaves out pins it can tell will fail: a pin to a class whose device plugin refuses a container
of the pod (more than one replica of a strictly shared resource), and tolerations that keep such a class among the
candidates, would leave shared-gpu-request-above-one (remedies._refused_anywhere). Leaving them out must change no
answer, only the work: on generated pods every finding, hint and fix is the same as the search that tries them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine import engine_for
from test_fix_corpus import LABELS, NAMESPACES

from policy.admission import engine as engine_module
from policy.admission import remedies
from policy.admission.engine import Engine
from policy.admission.rules import Facts


def answer(engine: Engine, obj: dict[str, Any], labels: dict[str, str]) -> tuple[Any, ...]:
    decision = engine.evaluate(obj, tenants=engine.tenants_for(labels, namespace="apps"))
    return decision.allowed, [(d.code, d.severity, d.message, d.path, d.hint, d.fix.to_dict() if d.fix else None)
                              for d in decision.diagnostics]


def trying_every_pin(facts: Facts) -> Any:
    return lambda view: False


@st.composite
def pods(draw: st.DrawFn) -> tuple[str, dict[str, Any], dict[str, str]]:
    """Valid requests of one to four devices where pins decide: placement from the cluster's own labels, taints
    tolerated or not, in each of its tenants' namespaces."""
    cluster = draw(st.sampled_from(sorted(LABELS)))
    resource = st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"])
    containers = [{"name": f"c{i}", "image": "app:1",
                   "resources": {"limits": {draw(resource): draw(st.integers(1, 4))}}}
                  for i in range(draw(st.integers(1, 2)))]
    spec: dict[str, Any] = {"containers": containers}
    for entry in draw(st.lists(st.sampled_from(LABELS[cluster]), max_size=1)):
        key, value = entry.split("=", 1)
        spec["nodeSelector"] = {key: value}
    if draw(st.booleans()):
        spec["tolerations"] = [draw(st.sampled_from([{"operator": "Exists"}, {"key": "dedicated", "operator": "Exists"},
                                                     {"key": "nvidia.com/gpu", "operator": "Exists"}]))]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "generated", "namespace": "apps"}, "spec": spec}
    return cluster, obj, draw(st.sampled_from(NAMESPACES[cluster]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods())
def test_leaving_out_the_pins_that_fail_changes_no_answer(case: tuple[str, dict[str, Any], dict[str, str]]) -> None:
    cluster, obj, labels = case
    screened = answer(Engine(engine_for(cluster).policy, memo_size=0), obj, labels)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(remedies, "_refused_anywhere", trying_every_pin)
        tried = answer(Engine(engine_for(cluster).policy, memo_size=0), obj, labels)
    assert screened == tried


TWO_GPUS = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "finetune", "namespace": "research-ml"},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "train", "image": "trainer:2", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}


def evaluations(monkeypatch: pytest.MonkeyPatch, obj: dict[str, Any], tenant: str) -> tuple[int, str]:
    """How many edited objects the search evaluates, and the hint it gives."""
    count = 0
    original = engine_module.Engine._reassess

    def counted(self: Engine, *args: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(engine_module.Engine, "_reassess", counted)
    decision = Engine(engine_for("mixed-fleet").policy, memo_size=0).evaluate(obj, tenants=(tenant,))
    (finding,) = decision.diagnostics
    return count, finding.hint


def test_two_gpus_on_a_fleet_that_time_slices_and_shares_by_mps_try_only_the_exclusive_class(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # mixed-fleet: t4-dev time-slices and a100-mps shares by MPS, both with failRequestsGreaterThanOne; h100-train
    # (tainted dedicated=training) gives whole GPUs. A pin to either shared class, or tolerating h100-train's taint
    # while both stay candidates, leaves the finding: only the pin to h100-train is worth evaluating.
    count, hint = evaluations(monkeypatch, TWO_GPUS, "research")
    assert hint == ("pin the pod to class h100-train with nodeSelector {node-pool: h100-train}, tolerate the taint "
                    "dedicated=training:NoSchedule")
    assert count == 1
    monkeypatch.setattr(remedies, "_refused_anywhere", trying_every_pin)
    assert evaluations(monkeypatch, TWO_GPUS, "research") == (4, hint)  # both pins, the tolerations, the fix
