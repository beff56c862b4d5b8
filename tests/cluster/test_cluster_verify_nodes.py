"""cluster verify on what a node says about itself: the MIG manager's state and for how long, who set the labels the
tree's reconciler owns (metadata.managedFields), and its NVIDIA driver against the class (GFD's driver labels)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import build_recorded
from cluster_support import FLEET_SPEC, Result
from recorded_responses import load_scenario

Obj = dict[str, Any]
MIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"
DRIVER = "nvidia.com/cuda.driver-version.full"


def fleet_nodes(**edits: Callable[[Obj], None]) -> list[Obj]:
    nodes = load_scenario("fleet")["nodes"]
    for node in nodes:
        if node["metadata"]["name"] in edits:
            edits[node["metadata"]["name"]](node)
    return nodes


def state_changed(minutes: float, state: str = "pending") -> Callable[[Obj], None]:
    """The MIG manager set the node's state ``minutes`` before the recorded moment."""
    def edit(node: Obj) -> None:
        node["metadata"]["labels"][STATE] = state
        entry = next(e for e in node["metadata"]["managedFields"] if e["manager"] == "nvidia-mig-manager")
        entry["time"] = build_recorded.ago(minutes=minutes)
    return edit


def labelled(**labels: str) -> Callable[[Obj], None]:
    def edit(node: Obj) -> None:
        node["metadata"]["labels"].update(labels)
    return edit


def run(cluster: Callable[..., Any], gpupolicy: Callable[..., Result], spec: Path = FLEET_SPEC,
        nodes: list[Obj] | None = None) -> dict[str, Any]:
    fleet = cluster("fleet", replace={"nodes": nodes} if nodes is not None else None, context="fleet")
    result = gpupolicy("cluster", "verify", "-p", spec, "--kubeconfig", fleet.kubeconfig, "-O", "json")
    assert result.code in (0, 1), result.err
    report: dict[str, Any] = json.loads(result.out)
    return report


def on(report: dict[str, Any], node: str) -> list[tuple[str, str, str]]:
    return [(f["code"], f["severity"], f["message"]) for f in report["findings"] if f["subject"] == f"node/{node}"]


# --- MIG state per node -------------------------------------------------------------------------------------------


def test_every_node_of_a_class_that_selects_a_mig_config_shows_its_state_and_for_how_long(cluster, gpupolicy):
    report = run(cluster, gpupolicy)
    states = {c["name"]: c["migState"] for c in report["classes"]}
    assert states["h20"] == [
        {"node": "h20-node-1", "config": "h20", "state": "success", "forSeconds": 2 * 86400},
        {"node": "h20-node-2", "config": "h20", "state": "pending", "forSeconds": 47 * 60},
    ]
    # a MIG-capable class kept whole selects all-disabled, and a MIG manager reports on it too
    assert [(s["node"], s["config"], s["state"]) for s in states["a100-mps"]] == [
        ("a100-mps-1", "all-disabled", "success"), ("a100-mps-2", "all-disabled", "success")]
    assert states["a100-train"] == []  # no node: a100-spare is in two classes


def test_the_text_report_lists_the_mig_states_under_their_class(cluster, gpupolicy):
    fleet = cluster("fleet", context="fleet")
    out = gpupolicy("cluster", "verify", "-p", FLEET_SPEC, "--kubeconfig", fleet.kubeconfig).out
    assert "  MIG config state: h20-node-1 h20 success for 2d, h20-node-2 h20 pending for 47m" in out.splitlines()


def test_a_change_under_way_is_a_warning_and_one_that_outlasts_the_mig_managers_waits_an_error(cluster, gpupolicy):
    report = run(cluster, gpupolicy, nodes=fleet_nodes(**{"h20-node-2": state_changed(4, "rebooting")}))
    (found,) = [f for f in on(report, "h20-node-2") if f[0].startswith("mig-config")]
    assert found == ("mig-config-in-progress", "warning",
                     "nvidia.com/mig.config.state is rebooting on node h20-node-2 for 4m: the MIG manager is applying "
                     "h20; the class's GPU clients return once it reports success")
    report = run(cluster, gpupolicy, nodes=fleet_nodes(**{"h20-node-2": state_changed(31)}))
    assert [f[:2] for f in on(report, "h20-node-2") if f[0].startswith("mig-config")] == [
        ("mig-config-not-applied", "error")]


def test_a_failed_or_unreported_node_says_so_and_where_to_look(cluster, gpupolicy):
    def unreported(node: Obj) -> None:
        del node["metadata"]["labels"][STATE]

    report = run(cluster, gpupolicy, nodes=fleet_nodes(**{"h20-node-2": state_changed(600, "failed"),
                                                          "a100-mps-1": unreported}))
    failed = next(f for f in report["findings"] if f["subject"] == "node/h20-node-2" and f["code"].startswith("mig"))
    assert failed["message"] == ("nvidia.com/mig.config.state is failed on node h20-node-2 for 10h: the MIG manager "
                                 "could not apply h20")
    assert failed["hint"].startswith("read its log (kubectl -n nvidia-device-plugin logs -l app=nvidia-mig-manager")
    missing = next(f for f in report["findings"] if f["subject"] == "node/a100-mps-1" and f["code"].startswith("mig"))
    assert missing["message"] == ("nvidia.com/mig.config.state is missing on node a100-mps-1: no MIG manager has "
                                  "reported on it, so class a100-mps's config all-disabled is not applied")
    assert "the tree's nvidia-mig-manager DaemonSet" in missing["hint"]


def test_without_managed_fields_the_state_is_reported_for_an_unknown_time(cluster, gpupolicy):
    def bare(node: Obj) -> None:
        del node["metadata"]["managedFields"]

    report = run(cluster, gpupolicy, nodes=fleet_nodes(**{"h20-node-2": bare}))
    (state,) = [s for c in report["classes"] for s in c["migState"] if s["node"] == "h20-node-2"]
    assert state["forSeconds"] is None
    assert any("pending on node h20-node-2 for an unknown time (the objects carry no managedFields" in f[2]
               for f in on(report, "h20-node-2"))


# --- labels the reconciler owns ------------------------------------------------------------------------------------


# Who owns a label (a person's kubectl, the GPU Operator, the reconciler of another plan) is shown against the real
# API server, which records the ownership itself: tests/kube/test_kube_cluster_verify.py.


def test_a_missing_label_points_at_the_reconciler_that_sets_it(cluster, gpupolicy):
    def unlabelled(node: Obj) -> None:
        del node["metadata"]["labels"][MIG]

    report = run(cluster, gpupolicy, nodes=fleet_nodes(**{"h20-node-1": unlabelled}))
    missing = next(f for f in report["findings"] if f["code"] == "node-label-missing")
    assert missing["message"] == ("node h20-node-1 lacks nvidia.com/mig.config=h20: mig-manager applies the MIG "
                                  "layout this label names; gpupolicy's label reconciler sets it")
    assert missing["hint"] == ("check that the tree's node-labels/ is applied and its reconciler runs (kubectl -n "
                               "gpupolicy-system logs deployment/gpupolicy-node-labels)")


# --- the NVIDIA driver ---------------------------------------------------------------------------------------------


def test_a_node_whose_driver_is_older_than_the_class_needs_is_an_error(cluster, gpupolicy):
    nodes = fleet_nodes(**{"h20-node-1": labelled(**{DRIVER: "535.104.05"}),
                           "a100-mps-1": labelled(**{DRIVER: "470.82.01"})})
    report = run(cluster, gpupolicy, nodes=nodes)
    assert [f for f in on(report, "h20-node-1") if f[0] == "driver-too-old"] == [(
        "driver-too-old", "error", "node h20-node-1 runs NVIDIA driver 535.104.05 (nvidia.com/cuda.driver-version.full)"
        ": MIG on NVIDIA-H20 needs 535.161.07 or newer")]
    assert [f[2] for f in on(report, "a100-mps-1") if f[0] == "driver-too-old"] == [
        "node a100-mps-1 runs NVIDIA driver 470.82.01 (nvidia.com/cuda.driver-version.full): the MPS control daemon's "
        "per-client memory limit (set_default_device_pinned_mem_limit) needs R495 or newer"]
    assert not [f for f in report["findings"] if f["code"] == "driver-too-old" and f["subject"] not in (
        "node/h20-node-1", "node/a100-mps-1")]


def test_the_parts_labels_of_an_older_gfd_are_read_when_the_full_version_is_missing(cluster, gpupolicy):
    def old_gfd(node: Obj) -> None:
        labels = node["metadata"]["labels"]
        labels.pop(DRIVER)
        labels.update({"nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "104",
                       "nvidia.com/cuda.driver.rev": "05"})

    report = run(cluster, gpupolicy, nodes=fleet_nodes(**{"h20-node-1": old_gfd}))
    assert ("driver-too-old", "error", "node h20-node-1 runs NVIDIA driver 535.104.05 (nvidia.com/cuda.driver.major/"
            "nvidia.com/cuda.driver.minor/nvidia.com/cuda.driver.rev): MIG on NVIDIA-H20 needs 535.161.07 or newer") \
        in on(report, "h20-node-1")


def test_a_stated_driver_the_nodes_do_not_run_is_a_warning_and_a_matching_branch_is_not(
        cluster, gpupolicy, tmp_path):
    for stated, flagged in (("535", True), ("550", False), ("550.54.15", False), ("550.54.14", True)):
        spec = tmp_path / f"fleet-{stated}.yaml"
        stating = f'gpu: {{model: NVIDIA-H20, count: 8, driverVersion: "{stated}"}}'
        spec.write_text(FLEET_SPEC.read_text().replace("gpu: {model: NVIDIA-H20, count: 8}", stating))
        report = run(cluster, gpupolicy, spec=spec)
        found = [f for f in report["findings"] if f["code"] == "driver-version-mismatch"]
        assert bool(found) is flagged, stated
        if flagged:
            assert found[0]["message"] == (f"node h20-node-1 runs NVIDIA driver 550.54.15 (nvidia.com/cuda.driver-"
                                           f"version.full), class h20 states {stated}: the spec's driver checks were "
                                           f"made for {stated}")
            assert found[0]["severity"] == "warning"


def test_an_unreadable_driver_label_is_said_to_leave_the_gates_unchecked(cluster, gpupolicy):
    report = run(cluster, gpupolicy, nodes=fleet_nodes(**{"h20-node-1": labelled(**{DRIVER: "550.54.15-grid"})}))
    assert [f[:2] for f in on(report, "h20-node-1") if f[0].startswith("driver")] == [
        ("driver-version-unreadable", "warning")]
