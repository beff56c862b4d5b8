"""`cluster verify` and `cluster discover` against the real API server, where what they read is the API server's
own doing: who owns a node's labels (managedFields written by real Updates and Applies, tests/kube/kube_nodes.py),
the nodes' capacity and labels as the list returns them, the client's decoding, and RBAC's refusals (the
fixture's identities, granted nothing or only what a test binds).

The recorded `fleet` (tests/cluster/recorded/fleet) is replayed here write by write, and the node-label findings
must be the ones the recorded responses give (so the constructed managedFields of the recording are what an API
server makes of those writes); the real-world nodes of tests/cluster/recorded/nodes (copied from
/work/shared/fixtures/nodes, sources in their first lines) are created and discovered live, and the draft must
be the one `--from-file` reads from the same files."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_api import KubeAPI
from kube_nodes import Nodes

from cli.main import main

pytestmark = pytest.mark.kube_api

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "cluster" / "recorded"
FLEET_SPEC = RECORDED / "fleet" / "cluster.yaml"
OPERATOR_SPEC = ROOT / "examples" / "clusters" / "h20-mig" / "cluster.yaml"
TKE_SPEC = ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml"
MIG = "nvidia.com/mig.config"
RECONCILER = "gpupolicy-node-labels"
Obj = dict[str, Any]


def recorded_fleet() -> list[Obj]:
    items: list[Obj] = json.loads((RECORDED / "fleet" / "nodes.json").read_text(encoding="utf-8"))["items"]
    return items


@pytest.fixture
def fleet(kube_api: KubeAPI) -> Iterator[Nodes]:
    nodes = Nodes(kube_api)
    nodes.clear()
    for node in recorded_fleet():
        nodes.write_recorded(node)
    yield nodes
    nodes.clear()


def gpupolicy(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def verify(capsys: pytest.CaptureFixture[str], api: KubeAPI, spec: Path = FLEET_SPEC) -> dict[str, Any]:
    code, out, err = gpupolicy(capsys, "cluster", "verify", "-p", spec, "--kubeconfig", api.kubeconfig, "-O", "json")
    assert code in (0, 1), err
    report: dict[str, Any] = json.loads(out)
    return report


def label_findings(report: dict[str, Any]) -> dict[tuple[str, str], Obj]:
    return {(f["code"], f["subject"]): f for f in report["findings"] if f["code"].startswith("node-label-")}


def owned_labels(node: Obj) -> dict[str, list[str]]:
    """manager -> the label keys it owns.  The creator of an object also owns the labels map itself (`.`), which
    the recording leaves out and verify does not read."""
    found: dict[str, set[str]] = {}
    for entry in node["metadata"]["managedFields"]:  # a manager's status writes are an entry of their own
        labels = entry["fieldsV1"].get("f:metadata", {}).get("f:labels", {})
        found.setdefault(entry["manager"], set()).update(k for k in labels if k.startswith("f:"))
    return {manager: sorted(keys) for manager, keys in found.items() if keys}


def test_the_replayed_fleet_owns_its_labels_as_recorded(fleet: Nodes) -> None:
    for recorded in recorded_fleet():
        name = recorded["metadata"]["name"]
        live = fleet.get(name)
        assert live["metadata"]["labels"] == recorded["metadata"]["labels"], name
        assert owned_labels(live) == owned_labels(recorded), name


def test_the_replayed_fleet_gives_the_node_label_findings_of_the_recording(
        fleet: Nodes, capsys: pytest.CaptureFixture[str]) -> None:
    live = label_findings(verify(capsys, fleet.api))
    code, out, err = gpupolicy(capsys, "cluster", "verify", "-p", FLEET_SPEC, "--from-file",
                               RECORDED / "fleet" / "nodes.json", "-O", "json")
    assert code in (0, 1), err
    recorded = label_findings(json.loads(out))
    assert live and {k: f["message"] for k, f in live.items()} == {k: f["message"] for k, f in recorded.items()}


def test_a_label_someone_else_changed_names_its_writer_and_one_the_reconciler_owns_alone_is_not_a_conflict(
        fleet: Nodes, capsys: pytest.CaptureFixture[str]) -> None:
    fleet.change("h20-node-1", {MIG: "all-1g.12gb"}, manager="kubectl-label")
    findings = label_findings(verify(capsys, fleet.api))
    conflict = findings[("node-label-conflict", "node/h20-node-1")]
    assert conflict["message"].startswith("nvidia.com/mig.config is 'all-1g.12gb' on node h20-node-1, set by "
                                          "kubectl-label; class h20's label plan wants 'h20'.")
    assert conflict["hint"].startswith("if 'h20' is right, stop the other writer (node pool labels, provisioning) and "
                                       "remove its value (kubectl label node h20-node-1 nvidia.com/mig.config-)")
    assert ("node-label-conflict", "node/h20-node-2") not in findings  # the reconciler's own value


def test_under_the_operator_its_default_is_a_label_the_reconciler_replaces_not_a_conflict(
        fleet: Nodes, capsys: pytest.CaptureFixture[str]) -> None:
    # The fleet's h20 nodes (gpu-pool: h20) verified against the operator example, whose reconciler owns
    # nvidia.com/mig.config there. The operator labelled h20-node-1 with its default before the reconciler came;
    # on h20-node-2 a person set the same value.
    fleet.change("h20-node-1", {MIG: "all-disabled"}, manager="gpu-operator")
    fleet.change("h20-node-2", {MIG: "all-disabled"}, manager="kubectl-label")
    findings = label_findings(verify(capsys, fleet.api, OPERATOR_SPEC))
    assert set(findings) == {("node-label-missing", "node/h20-node-1"), ("node-label-conflict", "node/h20-node-2")}
    missing = findings[("node-label-missing", "node/h20-node-1")]
    assert missing["message"].startswith("node h20-node-1 carries the GPU Operator's default "
                                         "nvidia.com/mig.config=all-disabled, not h20: ")
    assert "its reconciler runs" in missing["hint"]
    assert "set by kubectl-label" in findings[("node-label-conflict", "node/h20-node-2")]["message"]


def test_a_value_only_the_reconciler_owns_but_another_plan_gave_is_stale(
        fleet: Nodes, capsys: pytest.CaptureFixture[str]) -> None:
    # the reconciler of another plan applied its value: it owns the label alone, as the API server records
    fleet.apply("h20-node-1", {MIG: "h20-old"}, RECONCILER)
    findings = label_findings(verify(capsys, fleet.api))
    (stale,) = [f for (code, _), f in findings.items() if code == "node-label-stale"]
    assert stale["message"] == ("nvidia.com/mig.config is 'h20-old' on node h20-node-1, set by gpupolicy's label "
                                "reconciler from another label plan; class h20's plan wants 'h20'")


# --- discover: the real-world nodes, live and from their files ---------------------------------------------------

NODE_FILES = sorted((RECORDED / "nodes").glob("*.yaml"))


@pytest.fixture
def recorded_nodes(kube_api: KubeAPI) -> Iterator[Nodes]:
    nodes = Nodes(kube_api)
    nodes.clear()
    yield nodes
    nodes.clear()


#: NVIDIA's docs print the machine label of a DGX as "NVIDIA DGX"; the API server refuses that value (a label value
#: holds no space), so no cluster shows it: GFD's machine-type labeller writes dashes for spaces (as the other
#: fixtures show: PowerEdge-R7525, OpenStack-Nova).  The live node and its file both get the storable value.
STORABLE = {"nvidia.com/gpu.machine": {"NVIDIA DGX": "NVIDIA-DGX"}}


def storable(node: Obj, name: str) -> Obj:
    """The node as an API server can hold it: the docs' copies carry no name, or a placeholder one, which their
    hostname label repeats."""
    labels = node["metadata"].get("labels") or {}
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", node["metadata"].get("name") or ""):
        node["metadata"]["name"] = name
        if "kubernetes.io/hostname" in labels:
            labels["kubernetes.io/hostname"] = name
    for key, values in STORABLE.items():
        if labels.get(key) in values:
            labels[key] = values[labels[key]]
    return node


@pytest.mark.parametrize("path", NODE_FILES, ids=[p.stem for p in NODE_FILES])
def test_discover_drafts_from_the_live_node_what_it_drafts_from_its_file(
        path: Path, recorded_nodes: Nodes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = storable(yaml.safe_load(path.read_text(encoding="utf-8")), path.stem[:63].strip("-"))
    recorded_nodes.write_recorded(node)
    stored = tmp_path / path.name
    stored.write_text(yaml.safe_dump(node), encoding="utf-8")
    name = "discovered"
    code, live, err = gpupolicy(capsys, "cluster", "discover", "--kubeconfig", recorded_nodes.api.kubeconfig,
                                "--name", name, "-o", "-")
    assert code == 0, err
    code, from_file, err = gpupolicy(capsys, "cluster", "discover", "--from-file", stored, "--name", name, "-o", "-")
    assert code == 0, err
    # the same draft, line for line, under a header that names where it was read from
    assert drafted(live) == drafted(from_file)
    assert live.startswith("# Drafted by") and "from context gpupolicy-test" in live.splitlines()[0]
    assert yaml.safe_load(live)["kind"] == "ClusterGPUPolicy"


def drafted(text: str) -> list[str]:
    """The draft below its header comment (which names the source: a context or the files)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    return lines[start:]


# --- what the commands may read: RBAC's own refusals --------------------------------------------------------------

RBAC_FIX = ("  hint: grant get and list on nodes, pods, events, configmaps (core) and daemonsets, replicasets, "
            "deployments (apps), e.g. kubectl create clusterrole gpupolicy-reader --verb=get,list "
            "--resource=nodes,pods,events,configmaps,daemonsets.apps,replicasets.apps,deployments.apps && "
            "kubectl create clusterrolebinding gpupolicy-reader --clusterrole=gpupolicy-reader --user=<you>\n")
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def test_a_forbidden_node_list_names_the_verb_the_resource_and_the_rbac_fix(
        kube_api: KubeAPI, capsys: pytest.CaptureFixture[str]) -> None:
    # tenant-person: authenticated, granted nothing (tests/kube_api.py IDENTITIES)
    code, out, err = gpupolicy(capsys, "cluster", "verify", "-p", TKE_SPEC, "--kubeconfig",
                               kube_api.kubeconfig_of("tenant-person"))
    assert (code, out) == (2, "")
    assert err == (
        "gpupolicy cluster verify: error: the API server refused to list nodes (403 Forbidden: nodes is forbidden: "
        'User "dana@example.com" cannot list resource "nodes" in API group "" at the cluster scope)\n' + RBAC_FIX)


@pytest.fixture
def discoverer(kube_api: KubeAPI, recorded_nodes: Nodes) -> Iterator[Path]:
    """A kubeconfig whose identity may list nodes and DaemonSets, and nothing else."""
    name = "gpupolicy-test-discover"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},
                      {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "ServiceAccount", "namespace": "team-a", "name": "builder"}]}
    for path, obj in ((f"{RBAC}/clusterroles", role), (f"{RBAC}/clusterrolebindings", binding)):
        assert kube_api.request("POST", path, obj).status == 201
    yield kube_api.kubeconfig_of("tenant-service-account")
    for path in (f"{RBAC}/clusterrolebindings/{name}", f"{RBAC}/clusterroles/{name}"):
        assert kube_api.request("DELETE", path).status == 200


def test_discover_needs_only_nodes_and_daemonsets(discoverer: Path, recorded_nodes: Nodes,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    recorded_nodes.write_recorded(storable(yaml.safe_load(NODE_FILES[0].read_text(encoding="utf-8")), "gpu-1"))
    # RBAC grants the identity those two lists alone: any other read would be refused, and discover would say so;
    # the ResourceSlices it also lists (DRA nodes are drafted from them) are refused and read as none
    code, out, err = gpupolicy(capsys, "cluster", "discover", "--kubeconfig", discoverer, "-o", "-")
    assert code == 0, err
    assert yaml.safe_load(out)["kind"] == "ClusterGPUPolicy"
    # and verify, which reads more, is refused at its first read past them (RBAC's own message)
    code, _, err = gpupolicy(capsys, "cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", discoverer)
    assert code == 2 and "403 Forbidden" in err and 'User "system:serviceaccount:team-a:builder" cannot list' in err
