"""The JSON Schemas of the device-plugin and mig-parted config files accept what the tools parse, strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
GPU_UUID = "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"


def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


DEVICE_PLUGIN = validator("device-plugin-config.schema.json")
MIG_PARTED = validator("mig-parted-config.schema.json")


def error_paths(v: Draft202012Validator, document: Any) -> set[str]:
    return {error.json_path for error in v.iter_errors(document)}


def test_both_schemas_are_valid_draft_2020_12_schemas() -> None:
    for name in ("device-plugin-config.schema.json", "mig-parted-config.schema.json"):
        schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        Draft202012Validator.check_schema(schema)


def test_every_object_in_both_schemas_forbids_unknown_keys() -> None:
    def objects(node: Any) -> list[dict[str, Any]]:
        if isinstance(node, list):
            return [o for item in node for o in objects(item)]
        if not isinstance(node, dict):
            return []
        found = [node] if "properties" in node and node.get("type") == "object" else []
        return found + [o for key, value in node.items() if key != "properties" for o in objects(value)] + [
            o for value in node.get("properties", {}).values() for o in objects(value)
        ]

    for v in (DEVICE_PLUGIN, MIG_PARTED):
        found = objects(v.schema)
        assert found
        assert all(o.get("additionalProperties") is False for o in found)


# ---------------------------------------------------------------- device plugin: accepted

SEED_TIME_SLICING = """
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: {replicas}
"""

MPS = """
version: v1
flags:
  migStrategy: none
  mpsRoot: /run/nvidia/mps
sharing:
  mps:
    renameByDefault: true
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""

MIXED_MIG_TIME_SLICING = """
version: v1
flags:
  migStrategy: mixed
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/mig-1g.12gb
      replicas: 2
    - name: mig-7g.96gb
      replicas: 4
"""

EVERY_FLAG = """
version: v1
flags:
  migStrategy: single
  failOnInitError: true
  nvidiaDriverRoot: /run/nvidia/driver
  nvidiaDevRoot: /
  mpsRoot: /run/nvidia/mps
  gdsEnabled: false
  mofedEnabled: false
  gdrcopyEnabled: false
  useNodeFeatureAPI: true
  deviceDiscoveryStrategy: auto
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-cri]
    deviceIDStrategy: uuid
    cdiAnnotationPrefix: cdi.k8s.io/
    nvidiaCTKPath: /usr/bin/nvidia-ctk
    containerDriverRoot: /driver-root
    sharedDevicesAllocationPolicy: packed
  gfd:
    oneshot: false
    noTimestamp: true
    sleepInterval: 1m30s
    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd
    machineTypeFile: /sys/class/dmi/id/product_name
resources:
  gpus:
  - {pattern: "*", name: nvidia.com/gpu}
  mig:
  - {pattern: "1g.12gb", name: nvidia.com/mig-1g.12gb}
imex:
  channelIDs: [0]
  required: true
"""


@pytest.mark.parametrize(
    "text",
    [SEED_TIME_SLICING.format(replicas=8), SEED_TIME_SLICING.format(replicas=3), MPS, MIXED_MIG_TIME_SLICING,
     EVERY_FLAG],
    ids=["seed l20", "seed t4", "mps", "mixed-strategy MIG time-slicing", "every flag of v0.12 to v0.20"],
)
def test_device_plugin_configs_the_plugin_loads_are_accepted(text: str) -> None:
    assert error_paths(DEVICE_PLUGIN, yaml.safe_load(text)) == set()


def test_an_empty_device_plugin_config_means_all_defaults_and_is_accepted() -> None:
    assert error_paths(DEVICE_PLUGIN, {}) == set()


@pytest.mark.parametrize(
    "devices",
    ["all", 2, [0, "1", "0:1", GPU_UUID, "MIG-" + GPU_UUID[4:], f"MIG-{GPU_UUID}/3/0",
                "GPU-B1028956CFA20990BF4A5DA9ABB51763"]],
    ids=["all", "count", "list of every reference form"],
)
def test_every_devices_form_the_plugin_parses_is_accepted(devices: Any) -> None:
    document = yaml.safe_load(SEED_TIME_SLICING.format(replicas=2))
    document["sharing"]["timeSlicing"]["resources"][0]["devices"] = devices
    assert error_paths(DEVICE_PLUGIN, document) == set()


@pytest.mark.parametrize("strategy", ["envvar", ["volume-mounts"], ["envvar", "cdi-annotations"]])
def test_device_list_strategy_may_be_a_string_or_a_list(strategy: Any) -> None:
    assert error_paths(DEVICE_PLUGIN, {"flags": {"plugin": {"deviceListStrategy": strategy}}}) == set()


@pytest.mark.parametrize("interval", ["60s", "0", "1h2m3.5s", "infinite", 60_000_000_000])
def test_gfd_sleep_interval_takes_go_durations_infinite_or_nanoseconds(interval: Any) -> None:
    assert error_paths(DEVICE_PLUGIN, {"flags": {"gfd": {"sleepInterval": interval}}}) == set()


def test_a_resource_name_of_exactly_63_characters_is_accepted() -> None:
    name = "nvidia.com/" + "a" * 52
    document = {"sharing": {"timeSlicing": {"resources": [{"name": name, "replicas": 2}]}}}
    assert len(name) == 63
    assert error_paths(DEVICE_PLUGIN, document) == set()


# ---------------------------------------------------------------- device plugin: rejected

RESOURCE_0 = "$.sharing.timeSlicing.resources[0]"


def seed_with(**resource: Any) -> dict[str, Any]:
    document = yaml.safe_load(SEED_TIME_SLICING.format(replicas=8))
    document["sharing"]["timeSlicing"]["resources"][0].update(resource)
    return document


@pytest.mark.parametrize(
    ("document", "path"),
    [
        (seed_with(replicas=1), f"{RESOURCE_0}.replicas"),
        (seed_with(replicas="3"), f"{RESOURCE_0}.replicas"),
        (seed_with(replicas=2.5), f"{RESOURCE_0}.replicas"),
        (seed_with(name="nvidia.com/" + "a" * 53), f"{RESOURCE_0}.name"),
        (seed_with(name="a" * 53), f"{RESOURCE_0}.name"),
        (seed_with(name="nvidia.com/GPU"), f"{RESOURCE_0}.name"),
        (seed_with(name="nvidia.com/gpu_shared"), f"{RESOURCE_0}.name"),
        (seed_with(name="example.com/gpu"), f"{RESOURCE_0}.name"),
        (seed_with(rename="nvidia.com/Gpu"), f"{RESOURCE_0}.rename"),
        (seed_with(devices="some"), f"{RESOURCE_0}.devices"),
        (seed_with(devices=0), f"{RESOURCE_0}.devices"),
        (seed_with(devices=["gpu0"]), f"{RESOURCE_0}.devices"),
        (seed_with(devices=[f"MIG-{GPU_UUID}"]), f"{RESOURCE_0}.devices"),
        (seed_with(replica=2), RESOURCE_0),
        ({"sharing": {"timeSlicing": {"resources": [{"replicas": 2}]}}}, RESOURCE_0),
        ({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu"}]}}}, RESOURCE_0),
        ({"sharing": {"timeSlicing": {"resources": []}}}, "$.sharing.timeSlicing.resources"),
        ({"sharing": {"timeSlicing": {"renameByDefault": True}}}, "$.sharing.timeSlicing"),
        ({"sharing": {"timeSlicing": None}}, "$.sharing.timeSlicing"),
        ({"flags": {"migStrategy": "none", "renameByDefault": False}}, "$.flags"),
        ({"version": "v1", "sharng": {}}, "$"),
        ({"flags": {"migStrategy": "Mixed"}}, "$.flags.migStrategy"),
        ({"flags": {"MIGSTRATEGY": "single"}}, "$.flags"),
        ({"version": "v2"}, "$.version"),
        ({"flags": {"plugin": {"deviceListStrategy": "cdi"}}}, "$.flags.plugin.deviceListStrategy"),
        ({"flags": {"plugin": {"deviceIDStrategy": "serial"}}}, "$.flags.plugin.deviceIDStrategy"),
        ({"flags": {"gfd": {"sleepInterval": "60 seconds"}}}, "$.flags.gfd.sleepInterval"),
        ({"flags": {"failOnInitError": "false"}}, "$.flags.failOnInitError"),
        ({"imex": {"channelIDs": [1]}}, "$.imex.channelIDs[0]"),
        ({"imex": {"channelIDs": [0, 0]}}, "$.imex.channelIDs"),
    ],
    ids=[
        "replicas 1", "replicas as a string", "fractional replicas", "full name over 63 characters",
        "bare name over 63 once prefixed", "upper-case name", "underscore in name", "foreign domain",
        "invalid rename", "devices string other than all", "devices count 0", "unknown device reference",
        "MIG UUID of a GPU without gi and ci", "typo replica", "resource without name",
        "resource without replicas", "empty resources", "missing resources", "null timeSlicing",
        "renameByDefault under flags",
        "unknown top-level key", "Mixed in the wrong case", "flag key in the wrong case", "unknown version",
        "unknown device list strategy", "unknown device id strategy", "unparseable duration",
        "boolean flag as a string", "imex channel other than 0", "two imex channels",
    ],
)
def test_device_plugin_configs_the_plugin_rejects_or_would_ignore_are_rejected(
    document: Any, path: str
) -> None:
    assert path in error_paths(DEVICE_PLUGIN, document)


def test_mps_together_with_the_mixed_mig_strategy_is_rejected() -> None:
    document = yaml.safe_load(MPS)
    document["flags"]["migStrategy"] = "mixed"
    assert error_paths(DEVICE_PLUGIN, document) == {"$.flags.migStrategy"}


def test_time_slicing_with_the_mixed_mig_strategy_stays_valid() -> None:
    assert error_paths(DEVICE_PLUGIN, yaml.safe_load(MIXED_MIG_TIME_SLICING)) == set()


# ---------------------------------------------------------------- mig-parted: accepted

MIG_PARTED_EXAMPLES = """
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
  all-1g.5gb:
    - device-filter: ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
  all-1g.5gb.me:
    - device-filter: "0x20B010DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb+me": 1
  all-balanced:
    - device-filter: ["0x233010DE", "0x233110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
    - device-filter: "0x2BB510DE:0x204E10DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb+me.all": 1
        "1g.24gb-me": 3
  custom:
    - devices: [0, 1, 2, 3]
      mig-enabled: false
      mig-devices: {}
    - devices: [4, 5, 6, 7]
      mig-enabled: true
      mig-devices:
        "1c.3g.20gb": 2
        "4g.96gb+gfx": 1
        "1g.5gb": 0
"""


def test_the_mig_parted_examples_are_accepted() -> None:
    assert error_paths(MIG_PARTED, yaml.safe_load(MIG_PARTED_EXAMPLES)) == set()


@pytest.mark.parametrize("profile", ["1g.5gb+foo,bar", "9g.999gb", "01g.05gb", "1g.24gb+me..all"])
def test_profile_names_are_checked_for_format_only_like_mig_parted(profile: str) -> None:
    document = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                                       "mig-devices": {profile: 1}}]}}
    assert error_paths(MIG_PARTED, document) == set()


# ---------------------------------------------------------------- mig-parted: rejected

ENTRY = "$['mig-configs'].x[0]"
DISABLED = {"x": [{"devices": "all", "mig-enabled": False}]}


def mig_entry(**fields: Any) -> dict[str, Any]:
    entry = {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}} | fields
    return {"version": "v1", "mig-configs": {"x": [{k: v for k, v in entry.items() if v is not ...}]}}


@pytest.mark.parametrize(
    ("document", "path"),
    [
        (mig_entry(**{"mig-enabled": "yes"}), f"{ENTRY}['mig-enabled']"),
        (mig_entry(**{"mig-devices": {"1g.5gb": -1}}), f"{ENTRY}['mig-devices']['1g.5gb']"),
        (mig_entry(**{"mig-devices": {"1g.5gb": 1.5}}), f"{ENTRY}['mig-devices']['1g.5gb']"),
        (mig_entry(**{"mig-devices": {"1g.5gb": "2"}}), f"{ENTRY}['mig-devices']['1g.5gb']"),
        (mig_entry(**{"mig-devices": {"1G.5GB": 1}}), f"{ENTRY}['mig-devices']"),
        (mig_entry(**{"mig-devices": {" 1g.5gb": 1}}), f"{ENTRY}['mig-devices']"),
        (mig_entry(**{"mig-devices": {"1g.5gb+me-gfx": 1}}), f"{ENTRY}['mig-devices']"),
        (mig_entry(**{"mig-devices": {"1g.5gb+me,me": 1}}), f"{ENTRY}['mig-devices']"),
        (mig_entry(**{"mig-devices": {"1g.5gb+1me": 1}}), f"{ENTRY}['mig-devices']"),
        (mig_entry(**{"mig-devices": {"1g.5gb+me.": 1}}), f"{ENTRY}['mig-devices']"),
        (mig_entry(**{"mig-devices": {"1g.5gb": 0, "2g.10gb": 0}}), f"{ENTRY}['mig-devices']"),
        (mig_entry(**{"mig-devices": ...}), ENTRY),
        (mig_entry(**{"mig-enabled": False}), f"{ENTRY}['mig-devices']"),
        (mig_entry(**{"mig-enabled": ...}), ENTRY),
        (mig_entry(devices=...), ENTRY),
        (mig_entry(devices="some"), f"{ENTRY}.devices"),
        (mig_entry(devices=2), f"{ENTRY}.devices"),
        (mig_entry(devices=["0"]), f"{ENTRY}.devices"),
        (mig_entry(**{"device-filter": 0x20B010DE}), f"{ENTRY}['device-filter']"),
        (mig_entry(**{"device-filter": "0x20B0"}), f"{ENTRY}['device-filter']"),
        (mig_entry(**{"device-filter": ["A100"]}), f"{ENTRY}['device-filter']"),
        (mig_entry(devcies="all"), ENTRY),
        ({"version": "v1", "mig-configs": {}}, "$['mig-configs']"),
        ({"version": "v1", "mig-configs": {"x": []}}, "$['mig-configs'].x"),
        ({"mig-configs": DISABLED}, "$"),
        ({"version": "v2", "mig-configs": DISABLED}, "$.version"),
        ({"version": "v1", "mig-configs": DISABLED, "extra": 1}, "$"),
    ],
    ids=[
        "mig-enabled yes", "negative count", "fractional count", "count as a string", "upper-case profile",
        "profile with a leading space", "both + and - attributes", "duplicate attribute",
        "attribute starting with a digit", "attribute ending with a dot", "all counts zero",
        "enabled without mig-devices", "disabled with mig-devices", "missing mig-enabled", "missing devices",
        "devices string other than all", "devices as a number", "device index as a string",
        "device-filter as a number", "truncated device id", "device-filter by product name", "typo devcies",
        "no configs", "config with no entries", "missing version", "unknown version", "unknown top-level key",
    ],
)
def test_mig_parted_configs_that_mig_parted_rejects_are_rejected(document: Any, path: str) -> None:
    assert path in error_paths(MIG_PARTED, document)
