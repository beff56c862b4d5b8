"""`gpupolicy cluster discover|verify --from-file`: recorded objects instead of a cluster; the sharing and taints
a draft reads off real nodes; taints verified against the classes that declare them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_support import TKE_SPEC, applied, compiled_objects
from recorded_responses import RECORDED, load_scenario

from cluster.records import RecordsError, snapshot_from
from cluster.resources import node_from
from cluster.sharing import read_sharing

NODES = RECORDED / "nodes"
A100_PCIE = {  # constructed (see recorded/README.md): the shape of the fixtures' MIG mixed nodes, on two A100-PCIE GPUs
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "a100-pcie-1", "labels": {
        "node.kubernetes.io/instance-type": "a2-highgpu-2g", "nvidia.com/gpu.product": "NVIDIA-A100-PCIE-40GB",
        "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "40960", "nvidia.com/gpu.replicas": "0",
        "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig-1g.5gb.count": "4", "nvidia.com/mig-1g.5gb.replicas": "1",
        "nvidia.com/mig-2g.10gb.count": "2", "nvidia.com/mig-2g.10gb.replicas": "1"}},
    "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]},
    "status": {"capacity": {"nvidia.com/mig-1g.5gb": "4", "nvidia.com/mig-2g.10gb": "2"},
               "allocatable": {"nvidia.com/mig-1g.5gb": "4", "nvidia.com/mig-2g.10gb": "2"}},
}


def fixture(name: str) -> dict[str, Any]:
    return yaml.safe_load((NODES / name).read_text(encoding="utf-8"))


# --- the sharing real nodes run, as a spec writes it -------------------------------------------------------------


@pytest.mark.parametrize(("name", "sharing", "gpus"), [
    # The capacity names the profile as the plugin advertises it (3g.20gb), though this old GFD labels 3g.21gb.
    ("nvidia-docs-a100-sxm4-40gb-mig-mixed-label-resource-mismatch.yaml",
     {"mig": {"strategy": "mixed", "layout": {"1g.5gb": 1, "2g.10gb": 1, "3g.20gb": 1}}}, None),
    # MIG single: gpu.count counts the 7 MIG devices of one GPU.
    ("nvidia-docs-a100-sxm4-40gb-mig-single-1g5gb.yaml",
     {"mig": {"strategy": "single", "layout": {"1g.5gb": 7}}}, 1),
    # Labels only (no capacity in the source): the per-profile counts.
    ("nvidia-docs-h100-mig-mixed-all-balanced.yaml",
     {"mig": {"strategy": "mixed", "layout": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}}, None),
    ("nvidia-docs-openshift-t4-time-sliced-g4dn.yaml", {"timeSlicing": {"replicas": 8}}, None),
    ("nvidia-docs-t4-time-sliced-renamebydefault-partial.yaml",
     {"timeSlicing": {"replicas": 4, "renameByDefault": True}}, None),
    ("k8s-device-plugin-pr503-kind-v100x8-no-sharing-labels.yaml", "exclusive", None),
])  # fmt: skip
def test_the_sharing_of_real_nodes_is_read_off_their_labels_and_capacity(name: str, sharing: Any,
                                                                        gpus: int | None) -> None:
    found = read_sharing(node_from(fixture(name)))
    assert (found.data, found.physical_gpus) == (sharing, gpus)


def test_mig_devices_per_node_are_split_into_groups_when_no_even_layout_fits() -> None:
    node = json.loads(json.dumps(A100_PCIE))
    labels = node["metadata"]["labels"]
    labels.update({"nvidia.com/mig-1g.5gb.count": "5", "nvidia.com/mig-3g.20gb.count": "1"})
    del labels["nvidia.com/mig-2g.10gb.count"]
    node["status"]["capacity"] = {"nvidia.com/mig-1g.5gb": "5", "nvidia.com/mig-3g.20gb": "1"}
    found = read_sharing(node_from(node))
    # Largest first, each instance on the first GPU it still fits: one arrangement mig-parted can apply.
    assert found.data == {"mig": {"strategy": "mixed", "groups": [
        {"gpus": [0], "layout": {"1g.5gb": 4, "3g.20gb": 1}}, {"gpus": [1], "layout": {"1g.5gb": 1}}]}}
    assert found.todo and "nvidia-smi mig -lgi" in found.todo[0]


def partial_a100_pcie(**capacity: str) -> dict[str, Any]:
    """The issue's partial dump: an A100-PCIE-40GB MIG mixed node whose labels lack nvidia.com/gpu.count (and the
    per-profile labels), its product without the NVIDIA- prefix as old GFDs wrote it (fixtures/README.md)."""
    node = json.loads(json.dumps(A100_PCIE))
    labels = node["metadata"]["labels"]
    for key in [k for k in labels if k.startswith("nvidia.com/mig-") or k == "nvidia.com/gpu.count"]:
        del labels[key]
    labels["nvidia.com/gpu.product"] = "A100-PCIE-40GB"
    node["status"] = {"capacity": dict(capacity), "allocatable": dict(capacity)}
    return node


def test_a_mig_mixed_node_without_a_gpu_count_gets_the_fewest_gpus_that_hold_its_devices() -> None:
    # A100-40GB (NVIDIA's MIG user guide, mig.md §1): 7 compute slices; 1g.5gb takes 1, 2g.10gb 2, so 4x 1g.5gb and
    # 2x 2g.10gb (8 slices) need two GPUs, each 2x 1g.5gb + 1x 2g.10gb.
    found = read_sharing(node_from(partial_a100_pcie(**{"nvidia.com/mig-1g.5gb": "4", "nvidia.com/mig-2g.10gb": "2"})))
    assert found.data == {"mig": {"strategy": "mixed", "layout": {"1g.5gb": 2, "2g.10gb": 1}}}
    assert found.physical_gpus == 2
    assert len(found.todo) == 1 and "no nvidia.com/gpu.count label: 2 GPU(s) is the fewest" in found.todo[0]
    # 5x 1g.5gb + 3g.20gb: 8 compute slices again, and no even split of them fits, so two groups.
    uneven = read_sharing(node_from(partial_a100_pcie(**{"nvidia.com/mig-1g.5gb": "5",
                                                         "nvidia.com/mig-3g.20gb": "1"})))
    assert uneven.data == {"mig": {"strategy": "mixed", "groups": [
        {"gpus": [0], "layout": {"1g.5gb": 4, "3g.20gb": 1}}, {"gpus": [1], "layout": {"1g.5gb": 1}}]}}
    assert uneven.physical_gpus == 2


def test_the_partial_dump_drafts_a_spec_that_validates_and_says_what_to_check(tmp_path: Path, gpupolicy) -> None:
    node = partial_a100_pcie(**{"nvidia.com/mig-1g.5gb": "4", "nvidia.com/mig-2g.10gb": "2"})
    listed = write(tmp_path, "nodes.yaml", [node])
    result = gpupolicy("cluster", "discover", "-f", listed)
    assert (result.code, result.err) == (0, "")
    (drafted,) = yaml.safe_load(result.out)["spec"]["nodeClasses"]
    assert drafted["gpu"] == {"model": "NVIDIA-A100-PCIE-40GB", "count": 2}
    assert drafted["sharing"] == {"mig": {"strategy": "mixed", "layout": {"1g.5gb": 2, "2g.10gb": 1}}}
    text = " ".join(line.strip().lstrip("#").strip() for line in result.out.splitlines())
    assert "TODO: the node has no nvidia.com/gpu.count label: 2 GPU(s) is the fewest that can hold its MIG " \
           "devices (4x 1g.5gb, 2x 2g.10gb)" in text
    assert "1 node(s) with 2x A100-PCIE-40GB" in text
    spec = tmp_path / "draft.yaml"
    spec.write_text(result.out, encoding="utf-8")
    validated = gpupolicy("validate", spec)
    assert validated.code == 0, validated.out


def test_a_labelled_gpu_count_is_kept_and_its_devices_split_over_exactly_those_gpus() -> None:
    node = json.loads(json.dumps(A100_PCIE))
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = "3"
    found = read_sharing(node_from(node))
    # 4x 1g.5gb + 2x 2g.10gb on three GPUs: no even split, so groups, the labelled count stays the count, and every
    # GPU holds some (an idle one would be a whole GPU advertised as nvidia.com/gpu, which the node does not show).
    assert found.physical_gpus is None
    assert found.data["mig"]["groups"] == [{"gpus": [0], "layout": {"1g.5gb": 2, "2g.10gb": 2}},
                                           {"gpus": [1, 2], "layout": {"1g.5gb": 1}}]


# --- discover --from-file ------------------------------------------------------------------------------------------


KINDS = {"nodes": "NodeList", "daemonsets": "DaemonSetList", "pods": "PodList", "events": "EventList",
         "replicasets": "ReplicaSetList", "deployments": "DeploymentList", "configmaps": "ConfigMapList"}


def recorded(tmp_path: Path, scenario: dict[str, list[Any]]) -> list[str]:
    """--from-file arguments for a scenario saved as typed lists, as the API lists them (items carry no kind)."""
    paths = [write(tmp_path, f"{r}.yaml", [{"apiVersion": "v1", "kind": KINDS[r], "items": items}])
             for r, items in scenario.items()]
    return [a for p in paths for a in ("-f", str(p))]


def write(tmp_path: Path, name: str, documents: list[Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
    return path


def test_a_mig_node_is_drafted_with_its_live_layout_and_taints_so_its_workloads_stay_admitted(tmp_path: Path,
                                                                                                gpupolicy) -> None:
    listed = write(tmp_path, "nodes.yaml", [{"apiVersion": "v1", "kind": "List", "items": [A100_PCIE]}])
    result = gpupolicy("cluster", "discover", "--from-file", listed)
    assert (result.code, result.err) == (0, "")
    (drafted,) = yaml.safe_load(result.out)["spec"]["nodeClasses"]
    assert drafted["sharing"] == {"mig": {"strategy": "mixed", "layout": {"1g.5gb": 2, "2g.10gb": 1}}}
    # node.kubernetes.io/unschedulable is the node lifecycle's, not the pool's.
    assert drafted["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert "# Drafted by `gpupolicy cluster discover` from recorded objects in " in result.out.replace("\n# ", " ")
    spec = tmp_path / "draft.yaml"
    spec.write_text(result.out, encoding="utf-8")
    pod = write(tmp_path, "pod.yaml", [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
                                        "spec": {"containers": [{"name": "c", "resources": {"limits": {
                                            "nvidia.com/mig-1g.5gb": 1}}}]}}])
    # The taint's key is not the resource the pod asks for: it must tolerate it, as on the node.
    denied = gpupolicy("admit", "-p", spec, pod)
    assert denied.code == 1 and "hint: tolerate the taint nvidia.com/gpu=present:NoSchedule" in denied.out
    tolerant = yaml.safe_load(pod.read_text(encoding="utf-8"))
    tolerant["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert gpupolicy("admit", "-p", spec, write(tmp_path, "ok.yaml", [tolerant])).code == 0


def test_every_real_node_fixture_drafts_a_spec_that_validates(tmp_path: Path, gpupolicy) -> None:
    paths = sorted(NODES.glob("*.yaml"))
    result = gpupolicy("cluster", "discover", *(a for p in paths for a in ("-f", p)), "--name", "fixtures")
    assert result.code == 0, result.err
    spec = tmp_path / "draft.yaml"
    spec.write_text(result.out, encoding="utf-8")
    assert gpupolicy("validate", spec).code == 0
    modes = {c["gpu"]["model"]: c["sharing"] for c in yaml.safe_load(result.out)["spec"]["nodeClasses"]}
    assert modes["Tesla-V100-SXM2-16GB-N"] == "exclusive"
    assert modes["NVIDIA-H100-80GB-HBM3"]["mig"]["strategy"] == "mixed"


def test_a_recorded_cluster_drafts_what_the_live_one_does(cluster, gpupolicy, tmp_path: Path) -> None:
    from_files = gpupolicy("cluster", "discover", *recorded(tmp_path, load_scenario("fleet")), "--name", "fleet")
    live = gpupolicy("cluster", "discover", "--kubeconfig", cluster("fleet", context="fleet").kubeconfig,
                     "--name", "fleet")
    assert from_files.code == live.code == 0
    assert yaml.safe_load(from_files.out) == yaml.safe_load(live.out)
    assert "not read (" not in from_files.err  # Events, ReplicaSets... are kinds verify reads


def test_kinds_nothing_reads_are_named_and_typed_lists_lend_their_items_a_kind(tmp_path: Path, gpupolicy) -> None:
    item = {k: v for k, v in A100_PCIE.items() if k != "kind"}
    path = write(tmp_path, "mixed.yaml", [{"kind": "NodeList", "items": [item]},
                                          {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}])
    result = gpupolicy("cluster", "discover", "-f", path)
    assert result.code == 0
    assert result.err == ("gpupolicy cluster discover: note: not read (1 Service): only Nodes, DaemonSets, Pods, "
                          "Events, ReplicaSets, Deployments, ConfigMaps and ResourceSlices matter here\n")


@pytest.mark.parametrize(("text", "said"), [
    ("kind: List\nitems: [\n", "error[yaml-syntax]"),
    ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "holds no Node, DaemonSet, Pod"),
])  # fmt: skip
def test_files_without_a_cluster_in_them_are_bad_input(tmp_path: Path, gpupolicy, text: str, said: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    result = gpupolicy("cluster", "discover", "-f", path)
    assert result.code == 2 and said in result.err and "Traceback" not in result.err


def test_from_file_with_a_kubeconfig_is_a_usage_error(tmp_path: Path, gpupolicy) -> None:
    result = gpupolicy("cluster", "discover", "-f", tmp_path / "x.yaml", "--kubeconfig", tmp_path / "kc")
    assert result.code == 2 and "--from-file reads recorded objects, not a cluster" in result.err


def test_records_without_timestamps_are_read_as_of_the_epoch() -> None:
    snapshot, skipped = snapshot_from([A100_PCIE], source="x")
    assert (snapshot.taken_at.year, skipped, len(snapshot.nodes)) == (1970, {}, 1)
    with pytest.raises(RecordsError):
        snapshot_from([{"kind": "Secret"}], source="x")


def test_a_draft_written_inside_a_tree_with_the_schema_names_it_by_its_relative_path(tmp_path: Path,
                                                                                    gpupolicy) -> None:
    assert gpupolicy("schema", "--write", tmp_path / "schemas").code == 0
    out = tmp_path / "clusters" / "prod" / "cluster.yaml"
    out.parent.mkdir(parents=True)
    result = gpupolicy("cluster", "discover", "--from-file", NODES / "nvidia-docs-h100-mig-mixed-all-balanced.yaml",
                       "-o", out)
    assert result.code == 0 and result.out == "", result.err
    first = out.read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=../../schemas/cluster-policy.schema.json"
    assert (out.parent / first.split("$schema=", 1)[1]).resolve().is_file()  # the reference resolves
    assert gpupolicy("validate", out).code == 0


def test_a_draft_redirected_into_a_file_finds_the_schema_as_with_o(tmp_path: Path) -> None:
    # The documented `gpupolicy cluster discover > cluster.yaml`: the shell, not gpupolicy, opens the file.
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "cluster-policy.schema.json").write_text("{}", encoding="utf-8")
    out = tmp_path / "draft.yaml"
    with out.open("w", encoding="utf-8") as stdout:
        done = subprocess.run([sys.executable, "-m", "cli", "cluster", "discover", "--from-file",
                               str(NODES / "nvidia-docs-h100-mig-mixed-all-balanced.yaml")],
                              stdout=stdout, stderr=subprocess.PIPE, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8").startswith(
        "# yaml-language-server: $schema=schemas/cluster-policy.schema.json\n")


@pytest.mark.parametrize("where", ["stdout", "file"])
def test_without_a_schema_file_in_reach_the_draft_names_none_and_says_how_to_get_one(tmp_path: Path, gpupolicy,
                                                                                   where: str) -> None:
    out = tmp_path / "draft.yaml"
    args = ["-o", out] if where == "file" else []
    result = gpupolicy("cluster", "discover", "--from-file", NODES / "nvidia-docs-h100-mig-mixed-all-balanced.yaml",
                       *args)
    assert result.code == 0, result.err
    text = out.read_text(encoding="utf-8") if where == "file" else result.out
    assert "$schema" not in text.replace("No $schema line", "")  # never a reference that does not resolve
    assert text.startswith("# Drafted by `gpupolicy cluster discover`")
    assert "\n# No $schema line: no schemas/cluster-policy.schema.json was found" in text
    assert "`gpupolicy schema --write schemas`" in text and "--schema PATH" in text


def test_an_explicit_schema_is_written_as_given(tmp_path: Path, gpupolicy) -> None:
    result = gpupolicy("cluster", "discover", "--from-file", NODES / "nvidia-docs-h100-mig-mixed-all-balanced.yaml",
                       "--schema", "../schemas/cluster-policy.schema.json")
    assert result.out.startswith("# yaml-language-server: $schema=../schemas/cluster-policy.schema.json\n")


def test_a_draft_that_cannot_be_written_is_bad_input(tmp_path: Path, gpupolicy) -> None:
    result = gpupolicy("cluster", "discover", "--from-file", NODES / "nvidia-docs-h100-mig-mixed-all-balanced.yaml",
                       "-o", tmp_path / "missing" / "draft.yaml")
    assert result.code == 2 and "cannot write" in result.err and "Traceback" not in result.err


def test_dash_is_standard_output_and_an_empty_name_is_a_usage_error(tmp_path: Path, gpupolicy,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    source = NODES / "nvidia-docs-h100-mig-mixed-all-balanced.yaml"
    result = gpupolicy("cluster", "discover", "--from-file", source, "-o", "-")
    assert result.code == 0 and result.out.startswith("# Drafted by `gpupolicy cluster discover`")
    assert list(tmp_path.iterdir()) == []  # no file named "-"
    empty = gpupolicy("cluster", "discover", "--from-file", source, "-o", "")
    assert empty.code == 2 and "-o needs a file name" in empty.err and empty.out == ""


# --- verify --from-file, and taints ---------------------------------------------------------------------------


def findings(out: str) -> list[tuple[str, str, str, str]]:
    return [(f["code"], f["severity"], f["class"] or "", f["subject"] or "") for f in json.loads(out)["findings"]]


def test_verify_from_recorded_objects_finds_what_the_live_read_finds(cluster, gpupolicy, tmp_path: Path) -> None:
    from_files = gpupolicy("cluster", "verify", "-p", TKE_SPEC, *recorded(tmp_path, load_scenario("seed-003-before")),
                           "-O", "json")
    live = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", cluster("seed-003-before").kubeconfig,
                     "-O", "json")
    assert from_files.code == live.code == 1
    assert findings(from_files.out) == findings(live.out)


def seed_after_files(tmp_path: Path, spec: Path, edit_nodes: Any = None) -> list[str]:
    scenario = load_scenario("seed-003-after")
    extra = applied(compiled_objects(spec), {"nvidia-device-plugin-l20": ["10.0.1.12"],
                                             "nvidia-device-plugin-t4": ["10.0.2.7"]})
    for kind, items in extra.items():
        scenario[kind] = [*scenario.get(kind, []), *items]
    if edit_nodes:
        edit_nodes({n["metadata"]["name"]: n for n in scenario["nodes"]})
    return recorded(tmp_path, scenario)


def tainted_t4_spec(tmp_path: Path) -> Path:
    """The seed's spec with its T4 class's nodes tainted dedicated=inference:NoSchedule."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(TKE_SPEC.read_text(encoding="utf-8").replace(
        "      nodes: 1\n      gpu:\n        model: Tesla-T4",
        "      nodes: 1\n      taints: [{key: dedicated, value: inference, effect: NoSchedule}]\n      gpu:\n"
        "        model: Tesla-T4"), encoding="utf-8")
    return spec


def test_verify_reports_a_declared_taint_a_node_lacks_and_an_undeclared_one_it_carries(gpupolicy,
                                                                                       tmp_path: Path) -> None:
    spec = tainted_t4_spec(tmp_path)

    def taint_the_l20(nodes: dict[str, Any]) -> None:
        nodes["10.0.1.12"].setdefault("spec", {})["taints"] = [
            {"key": "gpu", "value": "l20", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]

    result = gpupolicy("cluster", "verify", "-p", spec, *seed_after_files(tmp_path, spec, taint_the_l20), "-O", "json")
    assert result.code == 1, result.out
    assert findings(result.out) == [
        ("node-taint-undeclared", "warning", "l20", "node/10.0.1.12"),
        ("node-taint-missing", "error", "t4", "node/10.0.2.7"),
    ]
    missing = next(f for f in json.loads(result.out)["findings"] if f["code"] == "node-taint-missing")
    assert missing["hint"] == "kubectl taint nodes 10.0.2.7 dedicated=inference:NoSchedule (or set it in the node " \
                              "pool's taints)"


def test_a_tainted_class_whose_nodes_carry_the_taint_agrees(gpupolicy, tmp_path: Path) -> None:
    spec = tainted_t4_spec(tmp_path)

    def taint_the_t4(nodes: dict[str, Any]) -> None:
        nodes["10.0.2.7"].setdefault("spec", {})["taints"] = [
            {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]

    result = gpupolicy("cluster", "verify", "-p", spec, *seed_after_files(tmp_path, spec, taint_the_t4))
    assert result.code == 0, result.out
