"""The device-plugin schema as each release reads files (trees.schema_for_release), without Go: a value marked
newer than a release (x-since-values, a branch's x-since or x-except) is refused there and accepted from its
release on; the marks say what policy/hardware/releases.py says (the facts the spec checks use); and whatever
the compiler writes for a release is accepted by that release's view, while a spec choosing a value the view
refuses is refused by the spec check, naming the release the schema names. The harnesses prove the marks
against NVIDIA's own code (test_consumer_schemas.py)."""

from __future__ import annotations

import json
from functools import cache
from itertools import pairwise
from typing import Any

import pytest
import trees
import yaml
from jsonschema import Draft202012Validator

from compiler import compile_policy
from policy.hardware import releases
from policy.load import load_policy

SCHEMA: dict[str, Any] = json.loads((trees.SCHEMAS / "device-plugin-config.schema.json").read_text(encoding="utf-8"))
TAGS = [r.tag for r in releases.config_releases()]


def key(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.removeprefix("v").split("."))


@cache
def view(release: str) -> Draft202012Validator:
    return Draft202012Validator(trees.schema_for_release(SCHEMA, release))


def accepted(document: dict[str, Any], release: str) -> bool:
    """trees.accepted_by_schema on a document, the validator of each release's view built once."""
    return not any(view(release).iter_errors(document))


def strategy(value: Any) -> dict[str, Any]:
    return {"version": "v1", "flags": {"plugin": {"deviceListStrategy": value}}}


MPS_FALSE = {"version": "v1", "flags": {"mpsRoot": "/run/nvidia/mps"}, "sharing": {"mps": {
    "failRequestsGreaterThanOne": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}

#: (document, release -> whether it accepts the document, for releases on both sides of each mark, read at each tag:
#: NVIDIA/k8s-device-plugin@<tag>:api/config/v1/strategy.go NewDeviceListStrategies, flags.go's
#: deviceListStrategy type, duration.go, config.go NewConfig; cmd/nvidia-device-plugin/main.go validateFlags).
CASES: dict[str, tuple[dict[str, Any], dict[str, bool]]] = {
    "cdi-annotations": (strategy("cdi-annotations"), {"v0.13.0": False, "v0.14.0": False, "v0.14.1": True}),
    "[cdi-annotations]": (strategy(["cdi-annotations"]), {"v0.13.0": False, "v0.14.0": True}),
    "cdi-cri": (strategy("cdi-cri"), {"v0.13.0": False, "v0.14.5": False, "v0.15.0": True, "v0.20.0": True}),
    "[cdi-cri]": (strategy(["cdi-cri"]), {"v0.14.0": False, "v0.14.5": False, "v0.15.0": True}),
    "a list": (strategy(["envvar"]), {"v0.12.3": False, "v0.13.0": False, "v0.14.0": True, "v0.19.3": True}),
    "one string": (strategy("envvar"), {"v0.12.0": True, "v0.13.0": True, "v0.14.0": False, "v0.14.1": True}),
    "sleepInterval infinite": ({"version": "v1", "flags": {"gfd": {"sleepInterval": "infinite"}}},
                               {"v0.18.2": False, "v0.19.0": True}),
    "sleepInterval 60s": ({"version": "v1", "flags": {"gfd": {"sleepInterval": "60s"}}},
                          {"v0.12.0": True, "v0.18.2": True}),
    "MPS failRequestsGreaterThanOne false": (MPS_FALSE, {"v0.14.5": False, "v0.15.0": False, "v0.19.3": False,
                                                         "v0.20.0": True}),
    "MPS failRequestsGreaterThanOne true": (
        {**MPS_FALSE, "sharing": {"mps": {**MPS_FALSE["sharing"]["mps"], "failRequestsGreaterThanOne": True}}},
        {"v0.14.5": False, "v0.15.0": True, "v0.19.3": True}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_release_view_refuses_a_value_before_its_release_and_accepts_it_from_there(case: str) -> None:
    document, answers = CASES[case]
    assert {release: accepted(document, release) for release in answers} == answers
    assert all(trees.accepted_by_schema("device-plugin-config.schema.json", yaml.safe_dump(document), release) is ok
               for release, ok in answers.items())  # what the consumer tests call
    # Without a release the schema is the union every release's view is cut from: what an editor checks.
    assert trees.accepted_by_schema("device-plugin-config.schema.json", yaml.safe_dump(document))


def test_the_release_view_drops_the_enum_values_and_branches_newer_than_the_release() -> None:
    def plugin(release: str) -> Any:
        return trees.schema_for_release(SCHEMA, release)["$defs"]["flags"]["properties"]["plugin"]["properties"]

    assert trees.schema_for_release(SCHEMA, "v0.14.5")["$defs"]["deviceListStrategyName"]["enum"] == [
        "envvar", "volume-mounts", "cdi-annotations"]
    assert [b["title"] for b in plugin("v0.13.0")["deviceListStrategy"]["anyOf"]] == ["one string"]
    assert [b["title"] for b in plugin("v0.14.0")["deviceListStrategy"]["anyOf"]] == ["a list"]
    assert [b["title"] for b in plugin("v0.14.1")["deviceListStrategy"]["anyOf"]] == ["one string", "a list"]
    assert "sharedDevicesAllocationPolicy" not in plugin("v0.19.3")  # the key marks still work beside them


#: The case showing each value mark from both sides: (the property's dotted path, the value or branch title).
MARK_CASES = {
    ("flags.plugin.deviceListStrategy", "cdi-annotations"): "[cdi-annotations]",
    ("flags.plugin.deviceListStrategy", "cdi-cri"): "cdi-cri",
    ("flags.plugin.deviceListStrategy", "a list"): "a list",
    ("flags.plugin.deviceListStrategy", "one string"): "one string",
    ("flags.gfd.sleepInterval", "infinite"): "sleepInterval infinite",
    ("sharing.mps.failRequestsGreaterThanOne", "false"): "MPS failRequestsGreaterThanOne false",
}


def test_every_value_mark_has_a_case_refused_before_it_and_accepted_at_its_release() -> None:
    marks = trees.value_marks(SCHEMA)
    assert {(m.path, m.value) for m in marks} == set(MARK_CASES), "a new value mark needs a case"
    for mark in marks:
        answers = CASES[MARK_CASES[mark.path, mark.value]][1]
        assert answers[mark.since] is True, mark
        assert all(answers[release] is False for release in mark.excepted), mark
        before = [ok for release, ok in answers.items() if key(release) < key(mark.since)]
        assert before + [answers[e] for e in mark.excepted] and not any(before), mark


@pytest.mark.parametrize("tag", TAGS)
def test_the_schemas_value_marks_say_what_the_release_table_says(tag: str) -> None:
    """policy/hardware/releases.py (what the spec checks and the compiler read) and the schema's marks were read
    from the same tags; they must not drift apart."""
    release = releases.find(tag)
    assert release is not None
    view = trees.schema_for_release(SCHEMA, tag)
    assert tuple(view["$defs"]["deviceListStrategyName"]["enum"]) == release.strategies
    forms = {b["title"] for b in view["$defs"]["flags"]["properties"]["plugin"]["properties"]["deviceListStrategy"]
             ["anyOf"]}
    assert forms == {"string": {"one string"}, "list": {"a list"}, "either": {"one string", "a list"}}[
        release.list_format or "either"]
    mps = view["$defs"]["sharing"]["properties"].get("mps")
    assert (mps is None) == (release.mps == "absent")
    if mps is not None:
        kept = {b["title"] for b in mps["properties"]["failRequestsGreaterThanOne"]["anyOf"]}
        assert kept == ({"true", "false"} if release.mps == "honoured" else {"true"})


# ---- the compiler and the spec check answer as the schema's view of the targeted release ---------------------

SPEC = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {{name: demo}}
spec:
  devicePlugin: {{version: {version}, gpuFeatureDiscovery: false, flags: {{deviceListStrategy: {strategy}}}}}
  nodeClasses:
  - name: gpus
    nodeSelector: {{pool: gpus}}
    gpu: {{model: T4, count: 1}}
    sharing: {sharing}
"""
STRATEGIES = {"envvar": ["envvar"], "cdi-annotations": ["cdi-annotations"], "cdi-cri": ["cdi-cri"],
              "[envvar]": ["envvar"], "[envvar, volume-mounts]": ["envvar", "volume-mounts"],
              "[envvar, cdi-cri]": ["envvar", "cdi-cri"]}
SHARING = ["{timeSlicing: {replicas: 4, renameByDefault: true, failRequestsGreaterThanOne: false}}",
           "{mps: {replicas: 4, failRequestsGreaterThanOne: false}}"]


def facts(tag: str) -> tuple[Any, ...]:
    release = releases.behaviour(tag)
    return release.list_format, release.strategies, release.mps


def renderable(strategies: list[str], release: str) -> bool:
    """Whether some rendering of the strategies (one string, or a list) is accepted by the release's view."""
    forms: list[Any] = [strategies] + ([strategies[0]] if len(set(strategies)) == 1 else [])
    return any(accepted(strategy(form), release) for form in forms)


#: The compiler and the spec check read only the release table's facts (releases.behaviour: list_format,
#: strategies, mps), which the test above holds to the schema at every tag: so every tag where one changes and
#: the tag before it stand for the others.
BOUNDARIES = sorted({t for before, after in pairwise(TAGS)
                     for t in (before, after) if facts(before) != facts(after)} | {TAGS[0], TAGS[-1]}, key=key)


@pytest.mark.parametrize("tag", BOUNDARIES)
def test_what_the_compiler_writes_for_a_release_is_what_its_view_accepts_and_the_spec_check_refuses_the_rest(
        tag: str) -> None:
    for written, strategies in STRATEGIES.items():
        for sharing in SHARING:
            result = load_policy(SPEC.format(version=tag, strategy=written, sharing=sharing), filename="demo.yaml")
            refused = [d for d in result.diagnostics if d.severity == "error"
                       and d.path[:4] == ("spec", "devicePlugin", "flags", "deviceListStrategy")]
            where = f"{tag}, deviceListStrategy {written}, sharing {sharing}"
            assert bool(refused) is not renderable(strategies, tag), (where, result.diagnostics)
            for diagnostic in refused:
                value = next((s for s in strategies if s in diagnostic.message), None)
                if value is not None:  # names the first release the schema's view accepts the value at
                    first = next(t for t in TAGS if renderable([value], t))
                    assert f"needs device plugin {first} or newer" in diagnostic.message, (where, diagnostic)
            if not result.ok:
                continue
            tree = compile_policy(result.resolved)
            [key] = [k for k in tree if k.startswith("device-plugin/configmap-")]
            config = yaml.safe_load(yaml.safe_load(tree[key])["data"]["gpus"])
            assert accepted(config, tag), (where, config)
