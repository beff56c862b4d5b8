"""Every device-plugin config of every example tree, loaded by the plugin release its spec targets, means what
the tree's report.json and admission policy promise: the same shared resources, replicas, renames, sharing
strategy, MIG strategy and failRequestsGreaterThanOne."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trees
from harnesses import Consumers

pytestmark = pytest.mark.consumers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
CONFIGS = [config for tree in sorted(EXAMPLES.glob("*/out")) for config in trees.plugin_configs(tree)]


def test_the_examples_give_the_plugin_configs_of_every_deployment_and_sharing_mode() -> None:
    # The parametrized test below must not pass vacuously: these are the trees' configs as of this writing.
    seen = {(c.tree.parent.name, c.class_name) for c in CONFIGS}
    assert {("tke-l20-t4", "l20"), ("tke-l20-t4", "t4"), ("h20-mig", "h20"), ("mixed-fleet", "a100-mps"),
            ("mixed-fleet", "h100-mig"), ("mixed-fleet", "h100-train"), ("vgpu-platform", "prod-mig")} <= seen


@pytest.mark.parametrize("config", CONFIGS, ids=[f"{c.tree.parent.name}-{c.class_name}" for c in CONFIGS])
def test_every_emitted_plugin_config_loads_at_its_release_and_means_what_the_report_promises(
        consumers: Consumers, config: trees.PluginConfig, tmp_path: Path) -> None:
    trees.check_plugin_config(consumers, config, tmp_path)


def test_the_seed_cluster_gets_8_and_3_time_sliced_replicas_from_v0_14_5_itself(
        consumers: Consumers, tmp_path: Path) -> None:
    # design.md section 3: L20 replicas 8, T4 replicas 3, read by the release TKE runs.
    got = {}
    for config in (c for c in CONFIGS if c.tree.parent.name == "tke-l20-t4"):
        path = tmp_path / f"{config.class_name}.yaml"
        path.write_text(config.text, encoding="utf-8")
        result = consumers.device_plugin(config.release, path, config.env)
        assert result.returncode == 0, result.describe()
        got[config.class_name] = result.document["summary"]
        assert result.document["config"]["flags"]["failOnInitError"] is False  # the spec's flags reach the plugin
    assert {k: [(r["advertised"], r["replicas"]) for r in s["resources"]] for k, s in got.items()} == {
        "l20": [("nvidia.com/gpu", 8)], "t4": [("nvidia.com/gpu", 3)]}
    assert {s["sharingStrategy"] for s in got.values()} == {"time-slicing"}


def test_the_operator_trees_mig_strategy_reaches_the_plugin_through_its_env(
        consumers: Consumers, tmp_path: Path) -> None:
    # Under the GPU Operator the ClusterPolicy's mig.strategy is MIG_STRATEGY on the plugin, which beats the file
    # (NVIDIA/k8s-device-plugin api/config/v1/flags.go, updateFromCLIFlag: a set flag overwrites the file's value).
    [config] = [c for c in CONFIGS if c.tree.parent.name == "h20-mig"]
    path = tmp_path / "h20.yaml"
    path.write_text(config.text, encoding="utf-8")
    agreeing = consumers.device_plugin(config.release, path, config.env)
    assert agreeing.returncode == 0 and agreeing.document["summary"]["migStrategy"] == "mixed", agreeing.describe()
    overridden = consumers.device_plugin(config.release, path, {**config.env, "MIG_STRATEGY": "single"})
    assert overridden.document["summary"]["migStrategy"] == "single", overridden.describe()
    assert json.loads(overridden.stdout)["config"]["flags"]["migStrategy"] == "single"
