"""The hand-written consumer schemas (schemas/device-plugin-config.schema.json, mig-parted-config.schema.json)
against the harnesses, on every example config at every release and every mutation of the strictness tests:
where a schema and the consumer's own code (decoded strictly) disagree, the disagreement is listed here, so a
new one fails and a fixed one is noticed. The harness is the truth (issue 34); the schemas stay as editor aids."""

from __future__ import annotations

from pathlib import Path

import harnesses
import pytest
import trees
from harnesses import Consumers
from test_consumer_strictness import MIG, PARTED_MUTATIONS, PLUGIN_MUTATIONS, T4, mutated

pytestmark = pytest.mark.consumers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"

#: (harness, case): the schema accepts what the release's code, decoded strictly, refuses.
KNOWN = {
    # One schema for v0.12-v0.20 ("keys newer than a release are marked 'since vX'"): it cannot say that
    # v0.12-v0.14 ignore sharing.mps and flags.mpsRoot, so an MPS config there shares nothing, silently.
    ("device-plugin-v0.12.3", "mixed-fleet/a100-mps"), ("device-plugin-v0.13.0", "mixed-fleet/a100-mps"),
    ("device-plugin-v0.14.5", "mixed-fleet/a100-mps"),
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
            if trees.accepted_by_schema("device-plugin-config.schema.json", text) != (result.returncode == 0):
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
