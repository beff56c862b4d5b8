"""Tests for `gpupolicy admit`: offline admission of manifests, located findings, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from json_patch import apply_patch

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
TKE = str(ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml")
MIXED = str(ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml")

SEED = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nlp-inference
  namespace: nlp
spec:
  replicas: 2
  template:
    spec:
      containers:
        - name: server
          image: inference:1
          resources:
            limits:
              cpu: "4"
              nvidia.com/gpu: 2
"""
ONE_GPU = SEED.replace("nvidia.com/gpu: 2", 'nvidia.com/gpu: "1"')


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_seeds_deployment_is_denied_at_the_line_and_column_of_its_gpu_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path, "deploy.yaml", SEED)
    assert main(["admit", "-p", TKE, manifest]) == 1
    out = capsys.readouterr()
    first, hint = out.out.splitlines()[:2]
    assert first.startswith(f"{manifest}:16:15: error[shared-gpu-request-above-one]: Deployment nlp-inference "
                            '(namespace nlp): container "server" requests 2 nvidia.com/gpu;')
    assert first.endswith('(at spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"])')
    assert hint == ('  hint: request nvidia.com/gpu: 1 in container "server" (more shared replicas of one device add '
                    "no compute; 2 whole GPUs need a class with sharing: exclusive)")
    assert out.out.splitlines()[-1] == "1 file(s) checked: 1 error(s), 0 warning(s)"
    assert "1 workload(s) checked: 1 denied" in out.err


def test_github_output_annotates_the_offending_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path, "deploy.yaml", SEED)
    assert main(["admit", "-p", TKE, manifest, "--output", "github"]) == 1
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(f"::error file={manifest},line=16,col=15,title=shared-gpu-request-above-one::"
                           "Deployment nlp-inference (namespace nlp)")


def test_json_output_carries_code_path_and_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path, "deploy.yaml", SEED)
    assert main(["admit", "-p", TKE, manifest, "-O", "json"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert {k: finding[k] for k in ("code", "severity", "file", "line", "column", "path")} == {
        "code": "shared-gpu-request-above-one", "severity": "error", "file": manifest, "line": 16, "column": 15,
        "path": 'spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]'}


def test_allowed_manifests_exit_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admit", "-p", TKE, write(tmp_path, "ok.yaml", ONE_GPU)]) == 0
    assert capsys.readouterr().out == "1 file(s) checked: 0 error(s), 0 warning(s)\n"


def test_directories_are_searched_for_yaml_and_yml_files_only(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "apps/a/deploy.yml", SEED)
    write(tmp_path, "apps/b/ok.yaml", ONE_GPU)
    write(tmp_path, "apps/README.md", SEED)
    assert main(["admit", "-p", TKE, str(tmp_path / "apps")]) == 1
    out = capsys.readouterr().out
    assert out.count("error[shared-gpu-request-above-one]") == 1 and "deploy.yml:16:15" in out
    assert out.endswith("2 file(s) checked: 1 error(s), 0 warning(s)\n")


def test_list_items_and_multi_document_files_are_all_checked(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 3}}}]}}
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": [{"kind": "ConfigMap"}, pod]})
    manifest = write(tmp_path, "all.yaml", f"{ONE_GPU}---\n{listed}\n")
    assert main(["admit", "-p", TKE, manifest, "-O", "json"]) == 1
    (finding,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert finding["path"] == 'items[1].spec.containers[0].resources.limits["nvidia.com/gpu"]'
    assert finding["line"] == 18


def test_namespace_objects_in_the_input_route_workloads_to_their_tenant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: nlp\n  labels: {gpu-tier: prod}\n---\n"
    manifest = write(tmp_path, "app.yaml", namespace + ONE_GPU)
    assert main(["admit", "-p", MIXED, manifest]) == 1
    assert "error[tenant-sharing-mode-denied]: Deployment nlp-inference (namespace nlp): tenant prod may not use" \
        in capsys.readouterr().out


def test_namespace_labels_from_the_flag_route_workloads_to_their_tenant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path, "app.yaml", ONE_GPU)
    assert main(["admit", "-p", MIXED, manifest, "--namespace-labels", "nlp=gpu-tier=research,team=nlp"]) == 0
    assert main(["admit", "-p", MIXED, manifest, "--namespace-labels", "nlp=gpu-tier=prod"]) == 1
    capsys.readouterr()


def test_objects_without_a_namespace_go_to_the_namespace_flag(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # Tolerating every taint, the pod may reach the whole-GPU class, which only some tenants may use.
    manifest = write(tmp_path, "app.yaml", ONE_GPU.replace("  namespace: nlp\n", "").replace(
        "      containers:\n", "      tolerations: [{operator: Exists}]\n      containers:\n"))
    args = ["admit", "-p", MIXED, manifest, "--namespace-labels", "lab=gpu-tier=research"]
    assert main(args) == 1  # namespace default: no tenant, whole GPUs are not among the default modes
    assert main([*args, "-n", "lab"]) == 0
    capsys.readouterr()


def test_warn_mode_findings_are_printed_but_do_not_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = Path(TKE).read_text(encoding="utf-8").replace(
        "    enforcement: enforce\n", "    enforcement: enforce\n    rules: {shared-gpu-request-above-one: warn}\n")
    assert main(["admit", "-p", write(tmp_path, "cluster.yaml", spec), write(tmp_path, "d.yaml", SEED)]) == 0
    assert "warning[shared-gpu-request-above-one]" in capsys.readouterr().out


RAY = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: ray}
spec:
  workerGroupSpecs:
    - template:
        spec:
          containers:
            - {name: w, resources: {limits: {nvidia.com/gpu: 2}}}
"""


def test_custom_resources_that_wrap_gpu_pod_templates_are_judged_template_by_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path, "ray.yaml", RAY)
    assert main(["admit", "-p", TKE, manifest]) == 1
    out = capsys.readouterr()
    assert out.out.startswith(f"{manifest}:9:46: error[shared-gpu-request-above-one]: RayCluster ray (namespace "
                              "default): pod template spec.workerGroupSpecs[0].template.spec: container \"w\" "
                              "requests 2")
    assert "1 workload(s) checked: 1 denied, 0 with warnings; 0 object(s) asking for GPUs not checked" in out.err


def test_the_json_summary_counts_workloads_checked_and_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unknown = RAY.replace("ray.io/v1", "example.com/v1").replace("RayCluster", "Trainer")
    manifests = [write(tmp_path, "ray.yaml", RAY), write(tmp_path, "other.yaml", unknown),
                 write(tmp_path, "seed.yaml", SEED)]
    assert main(["admit", "-p", TKE, "--output", "json", *manifests]) == 1
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["workloads"] == {"checked": 2, "notChecked": 1, "denied": 2, "warned": 0}


# A ResourceClaim as the resource-claim controller makes it from gpu-test1.yaml's template (its spec is the
# template's spec.spec): claims count as workloads checked too.
CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: pod1-gpu, namespace: gpu-test1}
spec:
  devices:
    requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
"""
# A claim for another vendor's device is not this policy's business: not counted.
OTHER_CLAIM = CLAIM.replace("pod1-gpu", "nic").replace("gpu.nvidia.com", "rdma.example.com")


def test_claims_and_claim_templates_count_as_workloads_checked(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    dra = str(ROOT / "examples" / "clusters" / "dra-mixed" / "cluster.yaml")
    # NVIDIA's kubernetes-sigs/dra-driver-nvidia-gpu demo (tests/fixtures/dra/README.md): a ResourceClaimTemplate
    # and two pods naming it
    manifests = [str(ROOT / "tests" / "fixtures" / "dra" / "gpu-test1.yaml"), write(tmp_path, "claim.yaml", CLAIM),
                 write(tmp_path, "other.yaml", OTHER_CLAIM)]
    assert main(["admit", "-p", dra, "--output", "json", *manifests]) == 1
    out = capsys.readouterr()
    summary = json.loads(out.out)["summary"]
    # the template, its two pods and the claim; each NVIDIA class the policy does not compile is denied
    assert summary["workloads"] == {"checked": 4, "notChecked": 0, "denied": 2, "warned": 0}
    assert "4 workload(s) checked: 2 denied" in out.err


@pytest.mark.parametrize(("limits", "product"), [
    ("{tke.cloud.tencent.com/qgpu-core: 50, tke.cloud.tencent.com/qgpu-memory: 8}", "Tencent TKE qGPU"),
    ("{aliyun.com/gpu-mem: 8}", "Alibaba ACK cGPU"),
])
def test_cloud_vgpu_requests_get_a_notice_that_gpupolicy_does_not_check_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limits: str, product: str
) -> None:
    manifest = write(tmp_path, "cloud.yaml", f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: cloud}}
spec:
  template:
    spec:
      containers:
        - {{name: app, image: app:1, resources: {{limits: {limits}}}}}
""")
    assert main(["admit", "-p", TKE, manifest]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{manifest}:6:5: info[cloud-vgpu-not-checked]: Deployment cloud asks for {product}")
    assert "gpupolicy does not check them" in out


def test_a_spec_with_errors_is_reported_like_validate_and_nothing_is_admitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(tmp_path, "cluster.yaml", Path(TKE).read_text(encoding="utf-8").replace("model: Tesla-T4",
                                                                                           "model: Tesla-T5"))
    # exit 2, not 1: a broken policy is bad input, and CI must tell it apart from a denied workload
    assert main(["admit", "-p", spec, write(tmp_path, "d.yaml", SEED)]) == 2
    out = capsys.readouterr().out
    assert "error[unknown-gpu-model]" in out and "shared-gpu-request-above-one" not in out


@pytest.mark.parametrize(("files", "code"), [
    (["missing.yaml"], "unreadable-file"),
    (["broken.yaml"], "yaml-syntax"),
])  # fmt: skip
def test_unreadable_manifests_exit_two(tmp_path: Path, capsys: pytest.CaptureFixture[str], files: list[str],
                                       code: str) -> None:
    write(tmp_path, "broken.yaml", "kind: Pod\nspec: {containers: [\n")
    assert main(["admit", "-p", TKE, *(str(tmp_path / f) for f in files)]) == 2
    assert f"error[{code}]" in capsys.readouterr().out


def test_a_malformed_namespace_labels_flag_is_a_usage_error(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admit", "-p", TKE, write(tmp_path, "d.yaml", SEED), "--namespace-labels", "nlp"]) == 2
    assert "--namespace-labels 'nlp': write NS=key=value" in capsys.readouterr().err


def test_the_allowed_tke_fixtures_admit_cleanly_and_a_denied_one_fails(capsys: pytest.CaptureFixture[str]) -> None:
    fixtures = ROOT / "tests" / "fixtures" / "workloads"
    tke = [str(p) for p in sorted((fixtures / "allow").glob("*.yaml"))
           if "# cluster: tke-l20-t4" in p.read_text(encoding="utf-8")]
    assert len(tke) > 10
    assert main(["admit", "-p", TKE, *tke]) == 0
    assert main(["admit", "-p", TKE, str(fixtures / "deny" / "hami-mig-3g20gb-pod.yaml")]) == 1
    assert "error[mig-strategy-mismatch]" in capsys.readouterr().out


# --- answers that are true, complete and actionable ------------------------------------------------------------

H20 = str(ROOT / "examples" / "clusters" / "h20-mig" / "cluster.yaml")
JOB_8 = """\
apiVersion: batch/v1
kind: Job
metadata: {name: big}
spec:
  template:
    spec:
      restartPolicy: Never
      tolerations: [{operator: Exists}]
      containers:
        - {name: train, image: train:1, resources: {limits: {nvidia.com/gpu: 8}}}
"""


def test_the_json_fix_applied_to_the_file_admits_the_workload_in_its_own_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    listed = {"apiVersion": "v1", "kind": "List", "items": [{"kind": "ConfigMap"}, yaml.safe_load(JOB_8)]}
    manifest = write(tmp_path, "job.yaml", json.dumps(listed))
    research = ["--namespace-labels", "default=gpu-tier=research"]
    assert main(["admit", "-p", MIXED, manifest, "-O", "json", *research]) == 1
    first = json.loads(capsys.readouterr().out)["diagnostics"][0]
    # research may use whole GPUs, and h100-train holds 8: the pod goes there, with all 8 it asked for.
    assert first["hint"] == "pin the pod to class h100-train with nodeSelector {node-pool: h100-train}"
    fix = first["fix"]
    assert fix["jsonPatch"] == [{"op": "add", "path": "/items/1/spec/template/spec/nodeSelector",
                                 "value": {"node-pool": "h100-train"}}]
    assert set(fix) == {"edits", "jsonPatch"}  # no namespace to move to: a fix stays inside the tenant
    fixed = write(tmp_path, "fixed.yaml", json.dumps(apply_patch(listed, fix["jsonPatch"])))
    assert main(["admit", "-p", MIXED, fixed, *research]) == 0
    capsys.readouterr()


def test_every_violation_is_reported_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path, "hami.yaml", SEED.replace("nvidia.com/gpu: 2", "nvidia.com/gpu: 2\n"
                                                         "              nvidia.com/gpumem: 3000"))
    assert main(["admit", "-p", TKE, manifest]) == 1
    out = capsys.readouterr().out
    assert "error[gpu-request-unsatisfiable]" in out and "error[shared-gpu-request-above-one]" in out
    hints = [line for line in out.splitlines() if line.startswith("  hint: ")]
    assert len(hints) == 2 and hints[0] == hints[1]  # one fix admits it, and every finding offers it
    assert "remove nvidia.com/gpumem" in hints[0] and 'request nvidia.com/gpu: 1 in container "server"' in hints[0]


def test_every_object_asking_for_gpus_is_checked_or_said_to_be_unchecked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = """\
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {generateName: train-}
spec:
  templates:
    - {name: t, script: {image: python:3, source: print(1), resources: {limits: {nvidia.com/gpu: 1}}}}
---
apiVersion: serving.kserve.io/v1alpha1
kind: LLMInferenceService
metadata: {name: llama}
spec: {template: {containers: [{name: main, resources: {limits: {nvidia.com/gpu: "2"}}}]}}
---
apiVersion: machinelearning.seldon.io/v1
kind: SeldonDeployment
metadata: {name: sd}
spec: {predictors: [{componentSpecs: [{spec: {containers: [{resources: {limits: {nvidia.com/gpu: 1}}}]}}]}]}
"""
    # The Workflow (1 GPU in a script template) fits a time-sliced class; the LLMInferenceService asks for 2 shared
    # replicas in one container; the SeldonDeployment is no kind of the table.
    assert main(["admit", "-p", TKE, write(tmp_path, "crs.yaml", objects)]) == 1
    out = capsys.readouterr()
    assert out.out.count("info[workload-not-checked]") == 1
    assert "SeldonDeployment sd (machinelearning.seldon.io API group) asks for nvidia.com/gpu" in out.out
    assert "LLMInferenceService llama (namespace default): pod template spec.template: container \"main\"" in out.out
    assert "2 workload(s) checked: 1 denied, 0 with warnings; 1 object(s) asking for GPUs not checked" in out.err


@pytest.mark.parametrize(("limits", "said"), [
    ('nvidia.com/gpu: "0.5"', "must be an integer"),
    ('nvidia.com/gpu: "\u0662"', "quantities must match the regular expression"),
    ('nvidia.com/gpu: "1e31"', "more than any node it may run on offers"),
])  # fmt: skip
def test_ci_refuses_what_the_api_server_refuses_and_never_reads_an_amount_as_no_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limits: str, said: str
) -> None:
    manifest = write(tmp_path, "d.yaml", SEED.replace("nvidia.com/gpu: 2", limits))
    assert main(["admit", "-p", TKE, manifest]) == 1
    assert said in capsys.readouterr().out


def test_a_request_without_a_limit_is_refused_at_the_request(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path, "d.yaml", SEED.replace("limits:", "requests:"))
    assert main(["admit", "-p", TKE, manifest]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"{manifest}:16:15: error[gpu-request-invalid]: Deployment nlp-inference (namespace nlp): "
                            'container "server" requests nvidia.com/gpu: 2 without a limit')
    assert "Limit must be set for non overcommitable resources" in first


def test_a_pod_naming_its_node_and_a_plain_pod_beside_the_tainted_pool(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    plain = ONE_GPU.replace("  namespace: nlp\n", "")
    assert main(["admit", "-p", MIXED, write(tmp_path, "plain.yaml", plain)]) == 0  # h100-train is tainted
    named = plain.replace("      containers:\n", "      nodeName: gpu-node-1\n      containers:\n")
    assert main(["admit", "-p", MIXED, write(tmp_path, "named.yaml", named)]) == 1
    out = capsys.readouterr().out
    assert "the pod names node gpu-node-1 (spec.nodeName bypasses the scheduler)" in out
    assert "scheduler may" not in out


def test_a_namespace_outside_the_h20_tenant_is_told_what_to_ask_the_platform_team_for_not_to_move(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = write(tmp_path, "d.yaml", ONE_GPU.replace("nvidia.com/gpu", "nvidia.com/mig-1g.12gb"))
    assert main(["admit", "-p", H20, manifest]) == 1
    out = capsys.readouterr().out
    assert "namespaces outside every tenant may not use mig+time-slicing GPUs" in out
    assert ("hint: no change to this object within the policy admits it: ask the platform team to allow mig and "
            "time-slicing (spec.admission.defaultAllow) for namespaces outside every tenant in ClusterGPUPolicy "
            "h20-inference") in out
    assert "tenant inference" not in out


HUGE = f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {"n" * 300_000}
spec:
  containers:
    - name: {"c" * 1_000_000}
      image: app:1
      resources:
        limits:
          ? nvidia.com/{"k" * 200_000}
          : 1
          nvidia.com/gpu: 2
"""


@pytest.mark.parametrize("output", ["text", "json", "github"])
def test_a_megabyte_name_and_resource_key_are_quoted_shortened_in_every_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    manifest = write(tmp_path, "huge.yaml", HUGE)
    assert main(["admit", "-p", TKE, "-O", output, manifest]) == 1
    out = capsys.readouterr().out
    assert len(out) < 20_000 and "more characters]" in out  # unbounded, this printed 7.2 MB
    assert "c" * 400 not in out and "k" * 400 not in out and "n" * 400 not in out
    if output == "json":
        found = json.loads(out)["diagnostics"]
        assert [d["code"] for d in found] == ["gpu-request-unsatisfiable", "shared-gpu-request-above-one"]
        # A patch with a value cut short would edit another path: the hint says what to do, no fix data is given.
        assert [d["fix"] for d in found] == [None, None]


def test_a_gpu_pod_with_a_gpu_annotation_nothing_reads_gets_a_warning(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write(tmp_path, "kai.yaml", """\
apiVersion: v1
kind: Pod
metadata:
  name: kai
  annotations: {gpu-fraction: "0.5", gpu_fractions: "2"}
spec:
  containers: [{name: app, image: app:1}]
""")
    assert main(["admit", "-p", TKE, manifest]) == 0  # tke's default rules allow time-slicing
    out = capsys.readouterr()
    assert out.out.startswith(f"{manifest}:5:38: warning[unknown-gpu-annotation]: Pod kai carries the annotation "
                              "'gpu_fractions', which names a GPU")
    assert "1 workload(s) checked: 0 denied" in out.err


def test_nodes_from_a_node_list_decide_the_class_of_a_pinned_pod(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    fleet = str(Path(TKE).parents[1] / "mixed-fleet" / "cluster.yaml")
    nodes = str(Path(__file__).resolve().parents[1] / "fixtures" / "nodes"
                / "mixed-fleet-t4-dev-and-h100-train-nodes.yaml")
    manifest = write(tmp_path, "pinned.yaml", """\
apiVersion: v1
kind: Pod
metadata: {name: notebook, namespace: sandbox}
spec:
  nodeName: t4-dev-1
  containers: [{name: lab, image: lab:1, resources: {limits: {nvidia.com/gpu: 1}}}]
""")
    labels = ["--namespace-labels", "sandbox=gpu-tier=sandbox"]
    assert main(["admit", "-p", fleet, *labels, manifest]) == 1
    assert main(["admit", "-p", fleet, *labels, "--nodes", nodes, manifest]) == 0
    capsys.readouterr()
    assert main(["admit", "-p", fleet, "--nodes", manifest, manifest]) == 2
    assert "no Node object in it" in capsys.readouterr().err
