"""The ClusterPolicy fields gpupolicy owns: REPORT.md and docs/ci-and-gitops.md name exactly what the tree renders."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler import compile_policy
from compiler.tree import Tree
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
DOC = Path(__file__).resolve().parents[2] / "docs" / "ci-and-gitops.md"
OLM = ("installer: helm ", "installer: olm  ")
NO_MONITORING = ("  monitoring:\n    enabled: true\n", "  monitoring:\n    enabled: false\n")
PER_POD = ("  monitoring:\n    enabled: true\n",
           "  monitoring:\n    enabled: true\n    dcgmExporter: {perPodMetrics: true}\n")
V25_10 = ("      version: v25.3.0\n", "      version: v25.10.0\n")  # dcgmExporter.hostPID needs v25.10
VARIANTS = {"helm": (), "olm": (OLM,), "helm-no-monitoring": (NO_MONITORING,),
            "olm-per-pod": (OLM, PER_POD, V25_10)}


def rendered_spec(tree: Tree) -> Any:
    if "gpu-operator-values.yaml" in tree:
        return yaml.safe_load(tree["gpu-operator-values.yaml"])
    return yaml.safe_load(tree["gpu-operator/clusterpolicy.yaml"])["spec"]


def two_levels(spec: dict[str, Any]) -> set[str]:
    return {f"{top}.{key}" for top, value in spec.items() for key in value}


def reported(tree: Tree) -> set[str]:
    text = tree["REPORT.md"].decode("utf-8")
    match = re.search(r"(?:values of|clusterpolicy\.yaml sets) (.+?)(?:, pointing| of ClusterPolicy)", text)
    assert match, "REPORT.md names the operator fields"
    return set(match[1].split(", "))


@pytest.fixture(scope="module")
def trees(example_policy: Load) -> dict[str, Tree]:
    return {name: compile_policy(example_policy("h20-mig", *edits)) for name, edits in VARIANTS.items()}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_report_names_exactly_the_fields_the_tree_sets(trees: dict[str, Tree], variant: str) -> None:
    tree = trees[variant]
    assert reported(tree) == two_levels(rendered_spec(tree))
    assert ("dcgmExporter.serviceMonitor" in reported(tree)) == (variant != "helm-no-monitoring")


def test_the_docs_ignore_rules_cover_every_field_any_tree_sets_and_nothing_else(trees: dict[str, Tree]) -> None:
    text = DOC.read_text(encoding="utf-8")
    rendered = {"/spec/" + path.replace(".", "/")
                for tree in trees.values() for path in two_levels(rendered_spec(tree))}
    argo = re.search(r"jsonPointers: \[([^\]]+)\]", text)
    flux = re.search(r"- paths: \[([^\]]+)\]", text)
    assert argo and flux
    for found in (argo, flux):
        assert {p.strip() for p in found[1].split(",")} == rendered
