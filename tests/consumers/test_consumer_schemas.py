"""The hand-written consumer schemas (schemas/device-plugin-config.schema.json, mig-parted-config.schema.json)
against the harnesses, on every example config at every release and every mutation of the strictness tests:
where a schema and the consumer's own code (decoded strictly) disagree, the disagreement is listed here, so a
new one fails and a fixed one is noticed. The harness is the truth (issue 34); the schemas stay as editor aids."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import harnesses
import pytest
import trees
import yaml
from harnesses import Consumers
from test_consumer_strictness import A100_MPS, MIG, PARTED_MUTATIONS, PLUGIN_MUTATIONS, T4, mutated

pytestmark = pytest.mark.consumers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
PLUGIN_SCHEMA = "device-plugin-config.schema.json"

#: (harness, case): the schema, as the harness's release reads files (trees.schema_for_release), accepts what
#: the release's code, decoded strictly, refuses.
KNOWN = {
    # A JSON Schema sees the document after the YAML loader kept one of two equal keys; mig-parted keeps the
    # later one too (sigs.k8s.io/yaml Unmarshal), only a strict decode refuses the file.
    ("mig-parted-v0.12.1", "duplicate profile key"), ("mig-parted-v0.13.1", "duplicate profile key"),
}


def plugin_cases() -> dict[str, tuple[str, dict[str, str]]]:
    cases = {f"{c.tree.parent.name}/{c.class_name}": (c.text, c.env)
             for tree in sorted(EXAMPLES.glob("*/out")) for c in trees.plugin_configs(tree)}
    for name, (old, new, _, _) in PLUGIN_MUTATIONS.items():
        cases[name] = (mutated(T4.text, old, new), T4.env)
    return cases


def test_where_the_schemas_and_the_consumers_own_code_disagree_is_exactly_the_known_list(
        consumers: Consumers, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    found: dict[tuple[str, str], str] = {}
    for harness in harnesses.DEVICE_PLUGIN:
        for case, (text, env) in plugin_cases().items():
            path.write_text(text, encoding="utf-8")
            result = consumers.load(harness, [f"--config-file={path}"], env)
            if trees.accepted_by_schema(PLUGIN_SCHEMA, text, harness.version) != (result.returncode == 0):
                found[(harness.name, case)] = result.describe()
    assert MIG is not None
    parted = {"mixed-fleet": MIG.text} | {n: mutated(MIG.text, o, w) for n, (o, w, _, _) in PARTED_MUTATIONS.items()}
    for harness in harnesses.MIG_PARTED:
        for case, text in parted.items():
            path.write_text(text, encoding="utf-8")
            result = consumers.load(harness, ["-f", str(path)])
            if trees.accepted_by_schema("mig-parted-config.schema.json", text) != (result.returncode == 0):
                found[(harness.name, case)] = result.describe()
    assert set(found) == KNOWN, "\n".join(f"{k}: {v}" for k, v in sorted(found.items()) if k not in KNOWN)


#: A value the plugin accepts for every key the device-plugin schema marks `x-since`, to probe each release.
#: sharing.mps carries the mps-root that validateFlags asks MPS for from v0.15.0 ("using MPS requires --mps-root").
PROBES: dict[str, Any] = {
    "flags.nvidiaDevRoot": "/", "flags.mpsRoot": "/run/nvidia/mps", "flags.gdsEnabled": False,
    "flags.mofedEnabled": False, "flags.gdrcopyEnabled": False, "flags.useNodeFeatureAPI": False,
    "flags.deviceDiscoveryStrategy": "auto", "flags.plugin.cdiAnnotationPrefix": "cdi.k8s.io/",
    "flags.plugin.nvidiaCTKPath": "/usr/bin/nvidia-ctk", "flags.plugin.containerDriverRoot": "/driver-root",
    "flags.plugin.sharedDevicesAllocationPolicy": "distributed",
    "flags.gfd.machineTypeFile": "/sys/class/dmi/id/product_name",
    "sharing.mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}, "imex": {"channelIDs": [0]},
}


def probe(path: str) -> dict[str, Any]:
    """A v1 config setting only `path` (and, for sharing.mps, the mps-root MPS needs)."""
    config: dict[str, Any] = {"version": "v1"}
    *parents, leaf = path.split(".")
    node = config
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = PROBES[path]
    if path == "sharing.mps":
        config["flags"] = {"mpsRoot": PROBES["flags.mpsRoot"]}
    return config


def _version(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.removeprefix("v").split("."))


def test_every_release_mark_of_the_device_plugin_schema_is_the_harnesses_answer(
        consumers: Consumers, tmp_path: Path) -> None:
    marks = trees.since_marks(json.loads((trees.SCHEMAS / PLUGIN_SCHEMA).read_text(encoding="utf-8")))
    assert set(marks) == set(PROBES), "every x-since mark needs a probe"
    path = tmp_path / "config.yaml"
    for key, since in sorted(marks.items()):
        text = yaml.safe_dump(probe(key), sort_keys=True)
        path.write_text(text, encoding="utf-8")
        for harness in harnesses.DEVICE_PLUGIN:
            result = consumers.load(harness, [f"--config-file={path}"])
            newer = _version(since) > _version(harness.version)
            # A release older than the mark ignores the key: its code loads the file, the strict decode names it.
            ignored = re.search(r"ignores: \[([^\]]*)\]", result.stderr)
            assert (result.returncode, key in (ignored[1].split() if ignored else [])) == (
                (2, True) if newer else (0, False)), f"{key} (x-since {since}) at {harness.name}:\n{result.describe()}"
            assert trees.accepted_by_schema(PLUGIN_SCHEMA, text, harness.version) is not newer, (key, harness.name)


def test_an_mps_config_is_refused_by_the_schema_as_v0_12_to_v0_14_read_it_and_accepted_from_v0_15() -> None:
    # api/config/v1/sharing.go declares Sharing.MPS from v0.15.0 (v0.14.5 has timeSlicing only): the releases
    # before load sharing.mps as nothing (the harnesses' strict decode: "keys v0.14.5 ignores").
    text = A100_MPS.text
    assert [r for r in ("v0.12.3", "v0.13.0", "v0.14.5", "v0.15.0", "v0.19.3")
            if trees.accepted_by_schema(PLUGIN_SCHEMA, text, r)] == ["v0.15.0", "v0.19.3"]
    assert trees.accepted_by_schema(PLUGIN_SCHEMA, text)  # the union: what an editor checks


# ---- values: what each release accepts of a key it reads --------------------------------------------------------

#: Every choice of every enum-like key the schema describes (enums, boolean switches, the forms of
#: deviceListStrategy and gfd.sleepInterval), each written alone into a v1 config and loaded at every release.
VALUE_PROBES: dict[str, list[Any]] = {
    "flags.migStrategy": ["none", "single", "mixed"],
    "flags.plugin.deviceIDStrategy": ["uuid", "index"],
    "flags.plugin.deviceListStrategy": ["envvar", "volume-mounts", "cdi-annotations", "cdi-cri", ["envvar"],
                                        ["volume-mounts", "cdi-annotations"], ["envvar", "cdi-cri"]],
    "flags.deviceDiscoveryStrategy": ["auto", "nvml", "tegra"],
    "flags.plugin.sharedDevicesAllocationPolicy": ["distributed", "packed"],
    "flags.gfd.sleepInterval": ["60s", "infinite", 30_000_000_000],
    "sharing.timeSlicing.renameByDefault": [False, True],
    "sharing.timeSlicing.failRequestsGreaterThanOne": [False, True],
    "sharing.mps.renameByDefault": [False, True],
    "sharing.mps.failRequestsGreaterThanOne": [False, True],
}


def value_probe(path: str, value: Any) -> dict[str, Any]:
    """A v1 config setting `path` to `value`; a sharing block gets the one resource it needs (and MPS its root)."""
    config: dict[str, Any] = {"version": "v1"}
    *parents, leaf = path.split(".")
    node = config
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value
    if parents[0] == "sharing":
        node["resources"] = [{"name": "nvidia.com/gpu", "replicas": 2}]
        if parents[1] == "mps":
            config["flags"] = {"mpsRoot": PROBES["flags.mpsRoot"]}
    return config


def loaded_as_written(path: str, value: Any, result: harnesses.Result) -> bool:
    """Whether the release loaded the probe and keeps the value as written (where its effective config shows it:
    the plugin drops flags.gfd after loading, so a GFD value only has to load)."""
    if result.returncode != 0:
        return False
    leaf = path.rsplit(".", 1)[-1]
    if path.startswith("flags.gfd."):
        return True
    if path.startswith("sharing."):  # the summary reads the block the plugin replicates from
        return bool(result.document["summary"][leaf] == value)
    node = result.document["config"]
    for name in path.split("."):
        node = node[name]
    as_list = (lambda v: v if isinstance(v, list) else [v]) if leaf == "deviceListStrategy" else (lambda v: v)
    return bool(as_list(node) == as_list(value))


def enum_paths(schema: dict[str, Any]) -> dict[str, set[Any]]:
    """The dotted path of every property whose schema (through $refs, branches and items) is an enum, with its
    values."""
    found: dict[str, set[Any]] = {}
    for node, at in trees.walk(schema):
        if at and "enum" in node:
            found.setdefault(at, set()).update(node["enum"])
    return found


def test_every_enum_value_and_value_mark_of_the_schema_is_probed() -> None:
    schema = json.loads((trees.SCHEMAS / PLUGIN_SCHEMA).read_text(encoding="utf-8"))
    probed = {path: {json.dumps(v) for v in values} for path, values in VALUE_PROBES.items()}
    for path, values in enum_paths(schema).items():
        assert {json.dumps(v) for v in values} <= probed.get(path, set()), f"{path}: probe each of {values}"
    assert {m.path for m in trees.value_marks(schema)} <= set(VALUE_PROBES)


def test_each_value_is_accepted_by_the_schema_as_a_release_reads_files_exactly_where_the_release_keeps_it(
        consumers: Consumers, tmp_path: Path) -> None:
    """The schema's release view (x-since on keys, x-since-values and branch marks on values) against the
    release's own code, value by value: accepted where the release loads the value and keeps it as written;
    refused where it refuses it (exit 1), ignores the key (exit 2) or loads something else (MPS
    failRequestsGreaterThanOne: false before v0.20.0 is loaded as true)."""
    path = tmp_path / "config.yaml"
    disagree: dict[tuple[str, str, str], str] = {}
    for key, values in VALUE_PROBES.items():
        for value in values:
            text = yaml.safe_dump(value_probe(key, value), sort_keys=True)
            path.write_text(text, encoding="utf-8")
            for harness in harnesses.DEVICE_PLUGIN:
                result = consumers.load(harness, [f"--config-file={path}"])
                if trees.accepted_by_schema(PLUGIN_SCHEMA, text, harness.version) != loaded_as_written(
                        key, value, result):
                    disagree[(harness.name, key, json.dumps(value))] = result.describe()
    assert not disagree, "\n".join(f"{k}: {v}" for k, v in sorted(disagree.items()))


def _harness_around(since: str) -> tuple[str, str | None]:
    """The newest harness release older than `since` and the oldest at or after it (None: none builds)."""
    versions = [h.version for h in harnesses.DEVICE_PLUGIN]
    older = [v for v in versions if _version(v) < _version(since)]
    newer = [v for v in versions if _version(v) >= _version(since)]
    return older[-1], (newer[0] if newer else None)


#: (value mark, probe, the refusal NVIDIA's own code gives the release before the mark: exit status and message;
#: exit 0 with None is a value loaded as something else). Each refusal is the release's own api/config/v1 code,
#: which the harness imports, not a restatement: NVIDIA/k8s-device-plugin@v0.14.5:api/config/v1/strategy.go
#: NewDeviceListStrategies knows no cdi-cri; @v0.13.0:api/config/v1/flags.go declares deviceListStrategy *string;
#: @v0.18.2:api/config/v1/duration.go hands "infinite" to time.ParseDuration; @v0.19.3:api/config/v1/config.go
#: NewConfig overwrites sharing.mps.failRequestsGreaterThanOne with true.
OWN_CODE = {
    ("flags.plugin.deviceListStrategy", "cdi-cri"): (
        "cdi-cri", 1, "unable to validate flags: invalid --device-list-strategy option: invalid strategy: cdi-cri"),
    ("flags.plugin.deviceListStrategy", "a list"): (
        ["envvar"], 1, "json: cannot unmarshal array into Go struct field PluginCommandLineFlags.flags.CommandLineFlags"
                       ".plugin.deviceListStrategy of type string"),
    ("flags.gfd.sleepInterval", "infinite"): ("infinite", 1, 'time: invalid duration "infinite"'),
    ("sharing.mps.failRequestsGreaterThanOne", "false"): (False, 0, None),
}


@pytest.mark.parametrize("mark", sorted(OWN_CODE))
def test_the_release_before_a_value_mark_refuses_the_value_with_its_own_code_and_the_marked_release_keeps_it(
        consumers: Consumers, mark: tuple[str, str], tmp_path: Path) -> None:
    schema = json.loads((trees.SCHEMAS / PLUGIN_SCHEMA).read_text(encoding="utf-8"))
    [found] = [m for m in trees.value_marks(schema) if (m.path, m.value) == mark]
    value, status, message = OWN_CODE[mark]
    key = found.path
    text = yaml.safe_dump(value_probe(key, value), sort_keys=True)
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    before, at = _harness_around(found.since)
    result = consumers.device_plugin(before, path)
    assert result.returncode == status, result.describe()
    if message is not None:
        assert message in result.stderr, result.describe()
    else:  # loaded, but not as written
        assert not loaded_as_written(key, value, result), result.describe()
    assert not trees.accepted_by_schema(PLUGIN_SCHEMA, text, before)
    if at is None:  # the marked release is one the module proxy refuses (v0.20.0: docs/testing.md)
        assert found.since == "v0.20.0", found
        return
    accepted = consumers.device_plugin(at, path)
    assert loaded_as_written(key, value, accepted), f"{found} at {at}:\n{accepted.describe()}"
    assert trees.accepted_by_schema(PLUGIN_SCHEMA, text, at)
