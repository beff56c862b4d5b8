"""What a class needs from the NVIDIA driver (policy/hardware/drivers.py), resolved once per class and checked
against the driver a spec states."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from policy.hardware import drivers
from policy.load import LoadResult, load_policy
from policy.resolved.resolve import resolve
from policy.spec.model import ClusterGPUPolicy

Load = Callable[..., ClusterGPUPolicy]
ROOT = Path(__file__).resolve().parents[2]


def needs(gates: tuple[drivers.Gate, ...] | list[drivers.Gate]) -> list[tuple[str, str]]:
    return [(g.needs, g.what) for g in gates]


def test_a_gpus_first_mig_driver_and_profiles_and_combinations_that_came_later() -> None:
    assert needs(drivers.mig_gates("NVIDIA-A100-SXM4-40GB", [{"1g.10gb": 4}, {"4g.20gb": 1, "3g.20gb": 1}])) == [
        ("450.80.02", "MIG on NVIDIA-A100-SXM4-40GB"),
        ("525", "MIG profile 1g.10gb on NVIDIA-A100-SXM4-40GB"),
        ("510", "a 4g and a 3g instance on one NVIDIA-A100-SXM4-40GB"),
    ]
    assert needs(drivers.mig_gates("NVIDIA-H20", [{"1g.12gb": 7}])) == [("535.161.07", "MIG on NVIDIA-H20")]
    assert needs(drivers.mig_gates("NVIDIA-H200", [{"1g.18gb": 7}])) == [("550.90.07", "MIG on NVIDIA-H200")]


def test_a_class_needs_mig_gates_only_with_a_layout_and_the_mps_gate_only_where_the_daemon_runs() -> None:
    assert drivers.class_gates("NVIDIA-A100-SXM4-80GB", [], mps_memory_limit=False) == ()
    assert drivers.class_gates("NVIDIA-A100-SXM4-80GB", [], mps_memory_limit=True) == (drivers.MPS_MEMORY_LIMIT,)
    assert drivers.MPS_MEMORY_LIMIT.release == "R495"


@pytest.mark.parametrize(("driver", "verdict"), [
    ("525.60.13", True), ("525", True), ("470.82.01", False), ("470", False), ("530", True)])
def test_a_branch_gate_against_versions_and_branches(driver: str, verdict: bool) -> None:
    assert drivers.Gate("525", "x").satisfied_by(drivers.parse_driver(driver)) is verdict


@pytest.mark.parametrize(("driver", "verdict"), [
    ("535.161.07", True), ("535.161.8", True), ("535.104.05", False), ("550", True), ("535", None)])
def test_a_full_version_gate_cannot_judge_its_own_branch(driver: str, verdict: bool | None) -> None:
    assert drivers.Gate("535.161.07", "x").satisfied_by(drivers.parse_driver(driver)) is verdict


@pytest.mark.parametrize("text", ["550.54.15-grid", "", "v550", "550..1"])
def test_a_driver_string_that_is_not_a_version_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a driver version"):
        drivers.parse_driver(text)


def test_resolve_gives_each_class_its_gates(example_policy: Load) -> None:
    gates = {rc.name: needs(rc.driver_gates) for rc in resolve(example_policy("mixed-fleet")).classes}
    assert gates["a100-mps"] == [("495", drivers.MPS_MEMORY_LIMIT.what)]
    assert gates["h100-mig"] == [("525.85.12", "MIG on NVIDIA-H100-80GB-HBM3")]
    assert gates["t4-dev"] == gates["h100-train"] == []


def edited(*edits: tuple[str, str]) -> LoadResult:
    text = (ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml").read_text()
    for old, new in edits:
        text = text.replace(old, new)
    return load_policy(text, filename="mixed-fleet.yaml")


def test_mps_on_a_release_without_the_control_daemon_needs_no_driver_gate() -> None:
    policy = edited(("version: v0.17.1", "version: v0.14.5")).policy
    assert policy is not None
    assert {rc.name: rc.driver_gates for rc in resolve(policy).classes}["a100-mps"] == ()


@pytest.mark.parametrize(("stated", "found"), [("470", True), ("495", False), ("550.54.15", False)])
def test_a_stated_driver_older_than_mps_memory_limits_is_refused_where_it_is_stated(stated: str, found: bool) -> None:
    result = edited(("gpu: {model: A100-SXM4-80GB, count: 4}",
                     f'gpu: {{model: A100-SXM4-80GB, count: 4, driverVersion: "{stated}"}}'))
    too_old = [d for d in result.diagnostics if d.code == "driver-too-old"]
    assert bool(too_old) is found
    if found:
        assert too_old[0].severity == "error" and too_old[0].span is not None and too_old[0].span.line == 37
        assert too_old[0].hint == ("upgrade the nodes' driver to R495 or newer, or share the GPUs with time-slicing "
                                   "instead (no memory limit)")
