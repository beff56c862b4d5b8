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
