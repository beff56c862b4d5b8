"""Every mig-parted config of every example tree, parsed by the mig-parted release its MIG manager runs, selects
for each class the layout report.json promises: the same MIG devices per node, per profile."""

from __future__ import annotations

from pathlib import Path

import pytest
import trees
from harnesses import Consumers

pytestmark = pytest.mark.consumers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
CONFIGS = [c for tree in sorted(EXAMPLES.glob("*/out")) if (c := trees.mig_config(tree)) is not None]


def test_the_examples_give_mig_configs_for_both_deployments() -> None:
    # Standalone trees run their own k8s-mig-manager; the operator tree gets the operator's (v25.3.0: v0.12.1).
    assert {(c.tree.parent.name, c.release) for c in CONFIGS} >= {
        ("h20-mig", "v0.12.1"), ("mixed-fleet", "v0.12.1"), ("vgpu-platform", "v0.12.1")}


@pytest.mark.parametrize("config", CONFIGS, ids=[c.tree.parent.name for c in CONFIGS])
def test_every_emitted_mig_config_parses_at_its_release_and_lays_out_what_the_report_promises(
        consumers: Consumers, config: trees.MigConfig, tmp_path: Path) -> None:
    trees.check_mig_config(consumers, config, tmp_path)


def test_a_class_with_two_gpu_groups_gets_both_layouts_from_mig_parted_itself(
        consumers: Consumers, tmp_path: Path) -> None:
    # mixed-fleet's h100-mig: GPUs 0-3 all-1g.10gb, GPUs 4-7 balanced; 2 nodes (report.json).
    [config] = [c for c in CONFIGS if c.tree.parent.name == "mixed-fleet"]
    path = tmp_path / "config.yaml"
    path.write_text(config.text, encoding="utf-8")
    result = consumers.mig_parted(config.release, path, "h100-mig", "all-disabled")
    assert result.returncode == 0, result.describe()
    assert trees.mig_devices_per_node(result.document["selected"]["h100-mig"], 8) == {
        "1g.10gb": 4 * 7 + 4 * 2, "2g.20gb": 4, "3g.40gb": 4}
    assert trees.mig_devices_per_node(result.document["selected"]["all-disabled"], 8) == {}
