"""The CI, pre-commit, GitOps and monitoring examples: schema-checked, and their commands run against this repo."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from external_tools import require_tool

from compiler.targets import flux
from policy.load import load_policy_or_raise

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GITHUB = REPO / "examples" / "ci" / "github" / "gpupolicy.yaml"
GITLAB = REPO / "examples" / "ci" / "gitlab" / ".gitlab-ci.yml"
GITOPS = REPO / "examples" / "gitops"
OPERATIONS = REPO / "docs" / "operations.md"
RUNBOOKS = REPO / "docs" / "runbooks.md"
# The example clusters under the directory names the GitOps examples use.
CLUSTER_DIRS = {"tke-prod": "tke-l20-t4", "h20-inference": "h20-mig", "mixed-fleet": "mixed-fleet",
                "vgpu-platform": "vgpu-platform"}
TIMEOUT_SECONDS = 180


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT", "KUBE"))}
    env.update(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(home), NO_COLOR="1",
               GIT_AUTHOR_NAME="ci", GIT_AUTHOR_EMAIL="ci@example.com", GIT_COMMITTER_NAME="ci",
               GIT_COMMITTER_EMAIL="ci@example.com", GIT_CONFIG_NOSYSTEM="1", **extra)
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = TIMEOUT_SECONDS
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _kubectl() -> str:
    return require_tool("kubectl")


@pytest.fixture
def gitops_repo(tmp_path: Path) -> Path:
    """A scratch GitOps repository: clusters/<name>/{cluster.yaml,out/,admission-tests.yaml} and apps/<name>/."""
    root = tmp_path / "repo"
    env = _env(tmp_path)
    for name, example in CLUSTER_DIRS.items():
        target = root / "clusters" / name
        target.mkdir(parents=True)
        for file in ("cluster.yaml", "admission-tests.yaml"):
            if (REPO / "examples" / "clusters" / example / file).exists():
                shutil.copy(REPO / "examples" / "clusters" / example / file, target / file)
        done = _run(["gpupolicy", "compile", "clusters/" + name + "/cluster.yaml", "-o", f"clusters/{name}/out"],
                    root, env)
        assert done.returncode == 0, done.stderr
    for name, example in CLUSTER_DIRS.items():
        apps = REPO / "examples" / "ci" / "apps" / example
        if apps.is_dir():
            shutil.copytree(apps, root / "apps" / name)
    shutil.copytree(GITOPS / "monitoring", root / "monitoring")
    return root


# ------------------------------------------------------------------------------------------------ schemas


def _check_jsonschema(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("check-jsonschema", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if tool is None:
        pytest.skip("check-jsonschema is not installed (pip install -e '.[test]')")
    command = [tool, *args]
    # Prove the vendored schemas need no network where an unprivileged network namespace is available.
    if shutil.which("unshare") and subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0:
        command = ["unshare", "-rn", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("schema", "path"), [
    ("vendor.github-workflows", GITHUB),
    ("custom.github-workflows-require-timeout", GITHUB),
    ("vendor.gitlab-ci", GITLAB),
], ids=["github-workflows", "github-require-timeout", "gitlab-ci"])
def test_ci_example_matches_its_published_schema_offline(schema: str, path: Path) -> None:
    done = _check_jsonschema("--builtin-schema", schema, str(path))
    assert done.returncode == 0, done.stdout + done.stderr


# ------------------------------------------------------------------------------------------------ GitHub


def _github_steps() -> Iterator[tuple[str, str]]:
    workflow = yaml.safe_load(GITHUB.read_text(encoding="utf-8"))
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            # The install step fetches gpupolicy from GitHub; here the checkout's own gpupolicy is on PATH.
            if "run" in step and step.get("id") != "install":
                yield step["name"], step["run"]


def _run_github(root: Path, tmp_path: Path) -> dict[str, subprocess.CompletedProcess[str]]:
    workflow = yaml.safe_load(GITHUB.read_text(encoding="utf-8"))
    env = _env(tmp_path, **{k: str(v) for k, v in workflow.get("env", {}).items()})
    return {name: _run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], root, env)
            for name, script in _github_steps()}


def test_the_github_workflow_runs_every_check_and_installs_gpupolicy_first() -> None:
    names = [name for name, _ in _github_steps()]
    assert names == ["Validate cluster specs", "Compiled trees are up to date", "Admission test suites",
                     "Admit application manifests", "Impact of the change"]
    assert "--output github" in dict(_github_steps())["Admit application manifests"]


def test_every_github_step_passes_on_the_example_clusters_and_apps(gitops_repo: Path, tmp_path: Path) -> None:
    for name, done in _run_github(gitops_repo, tmp_path).items():
        assert done.returncode == 0, f"{name}:\n{done.stdout}{done.stderr}"


def test_github_steps_fail_with_inline_annotations_on_a_broken_spec_a_stale_tree_and_a_denied_app(
        gitops_repo: Path, tmp_path: Path) -> None:
    spec = gitops_repo / "clusters" / "tke-prod" / "cluster.yaml"
    spec.write_text(spec.read_text().replace("model: Tesla-T4", "model: Tesla-T5"))
    drifted = gitops_repo / "clusters" / "h20-inference" / "out" / "kustomization.yaml"
    drifted.write_text(drifted.read_text() + "# hand edit\n")
    bad = gitops_repo / "apps" / "mixed-fleet" / "bad.yaml"
    bad.write_text((REPO / "examples" / "ci" / "apps" / "tke-l20-t4" / "pii-detector.yaml").read_text()
                   .replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 64"))
    results = _run_github(gitops_repo, tmp_path)

    validate = results["Validate cluster specs"]
    assert validate.returncode == 1
    assert "::error file=clusters/tke-prod/cluster.yaml,line=" in validate.stdout
    assert "title=unknown-gpu-model::" in validate.stdout
    stale = results["Compiled trees are up to date"]
    assert stale.returncode == 1 and "clusters/h20-inference/out: stale" in stale.stdout + stale.stderr
    admit = results["Admit application manifests"]
    assert admit.returncode == 1
    assert re.search(r"^::error file=apps/mixed-fleet/bad\.yaml,line=\d+,col=\d+,title=gpu-request-unsatisfiable::",
                     admit.stdout, re.M), admit.stdout


def _impact_step(ci: Path) -> tuple[str, dict[str, Any]]:
    if ci == GITHUB:
        workflow = yaml.safe_load(ci.read_text(encoding="utf-8"))
        step = next(s for s in workflow["jobs"]["gpupolicy"]["steps"] if s.get("name") == "Impact of the change")
        return step["run"], workflow["env"]
    config = yaml.safe_load(ci.read_text(encoding="utf-8"))
    return "\n".join(config["gpupolicy-impact"]["script"]), config["variables"]


@pytest.mark.parametrize("ci", [GITHUB, GITLAB], ids=["github", "gitlab"])
def test_the_impact_step_writes_the_diff_of_each_changed_cluster_against_the_base_branch(
        ci: Path, gitops_repo: Path, tmp_path: Path) -> None:
    env = _env(tmp_path)
    for command in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "base"]):
        assert _run(["git", *command], gitops_repo, env).returncode == 0
    spec = gitops_repo / "clusters" / "tke-prod" / "cluster.yaml"
    spec.write_text(spec.read_text().replace("memoryPerReplica: 4621Mi", "memoryPerReplica: 9242Mi"))
    (gitops_repo / "clusters" / "new-cluster").mkdir()  # a spec the base branch does not have is skipped
    shutil.copy(spec, gitops_repo / "clusters" / "new-cluster" / "cluster.yaml")
    script, variables = _impact_step(ci)
    summary = tmp_path / "summary.md"
    names = {"BASE_REF": "main", "GITHUB_STEP_SUMMARY": str(summary)} if ci == GITHUB else \
        {"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main"}
    if ci == GITLAB:  # the job fetched the target branch as origin/<branch> in before_script
        assert _run(["git", "update-ref", "refs/remotes/origin/main", "main"], gitops_repo, env).returncode == 0
    done = _run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], gitops_repo,
                {**env, **{k: str(v) for k, v in variables.items()}, **names})
    assert done.returncode == 0, done.stdout + done.stderr
    impact = (gitops_repo / "impact.md").read_text()
    assert impact.count("## gpupolicy diff:") == 4 and "new-cluster" not in impact
    assert "| `l20` | changed | 1 × 1 | time-slicing | 8 × `nvidia.com/gpu`" in impact
    assert impact.count("No change: BASE and HEAD compile to the same tree") == 3
    if ci == GITHUB:
        assert summary.read_text() == impact


# ------------------------------------------------------------------------------------------------ GitLab


def _run_gitlab(root: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    config = yaml.safe_load(GITLAB.read_text(encoding="utf-8"))
    job = config["gpupolicy"]
    # before_script installs gpupolicy from GitHub; the checkout's own gpupolicy is on PATH instead. The
    # runner runs script lines in one bash session with errexit and pipefail.
    script = "\n".join(job["script"])
    env = _env(tmp_path, **{k: str(v) for k, v in config.get("variables", {}).items()})
    return _run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], root, env)


def test_the_gitlab_job_passes_and_reports_no_code_quality_issues(gitops_repo: Path, tmp_path: Path) -> None:
    done = _run_gitlab(gitops_repo, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    issues = json.loads((gitops_repo / "gl-code-quality-report.json").read_text())
    # validate's notes (who may set the tenants' labels) reach the report as infos for reviewers, never problems.
    assert [i for i in issues if i["severity"] != "info"] == []
    assert {i["check_name"] for i in issues} <= {"tenant-label-keys"}


def test_the_gitlab_job_fails_and_reports_a_denied_manifest_as_a_code_quality_issue(
        gitops_repo: Path, tmp_path: Path) -> None:
    bad = gitops_repo / "apps" / "tke-prod" / "two-gpus.yaml"
    bad.write_text((REPO / "examples" / "ci" / "apps" / "tke-l20-t4" / "nlp-inference.yaml").read_text()
                   .replace("name: nlp-inference", "name: two-gpus").replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2"))
    done = _run_gitlab(gitops_repo, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    issues = [i for i in json.loads((gitops_repo / "gl-code-quality-report.json").read_text())
              if i["check_name"] != "tenant-label-keys"]
    assert [(i["check_name"], i["severity"], i["location"]["path"]) for i in issues] == [
        ("shared-gpu-request-above-one", "major", "apps/tke-prod/two-gpus.yaml")]
    assert issues[0]["location"]["lines"]["begin"] > 1 and len(issues[0]["fingerprint"]) == 64


# ------------------------------------------------------------------------------------------------ pre-commit


def _pre_commit() -> list[str]:
    try:
        import pre_commit  # noqa: F401
    except ImportError:
        pytest.skip("pre-commit is not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", "pre_commit"]


def test_the_hook_manifest_is_valid_for_pre_commit() -> None:
    done = subprocess.run([*_pre_commit(), "validate-manifest", str(REPO / ".pre-commit-hooks.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _hook_repo(tmp_path: Path, env: dict[str, str]) -> Path:
    """A fresh clone of this repository at HEAD, plus the working tree's uncommitted and untracked files.

    `pre-commit try-repo` on a local path copies only tracked files with changes (pre-commit's try_repo.py
    stages `git add -u`), so new files (a hook manifest not yet committed, say) would be missing; a clone
    with the working tree committed on top is what a user cloning after the next commit would get.
    """
    clone = tmp_path / "gpupolicy"
    assert _run(["git", "clone", "-q", str(REPO), str(clone)], tmp_path, env).returncode == 0
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO, env)
    for name in filter(None, listed.stdout.split("\0")):
        source, target = REPO / name, clone / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif target.exists() and not source.exists():
            target.unlink()  # deleted in the working tree
    for args in (["add", "-A"], ["commit", "-q", "--allow-empty", "-m", "working tree"]):
        assert _run(["git", *args], clone, env).returncode == 0
    return clone


def _user_repo(tmp_path: Path, env: dict[str, str]) -> Path:
    user = tmp_path / "user"
    (user / "clusters" / "tke-prod").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml", user / "clusters" / "tke-prod")
    assert _run(["gpupolicy", "compile", "clusters/tke-prod/cluster.yaml", "-o", "clusters/tke-prod/out"],
                user, env).returncode == 0
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "tke-prod"]):
        assert _run(["git", *args], user, env).returncode == 0
    return user


def _skip_if_offline(done: subprocess.CompletedProcess[str]) -> None:
    text = done.stdout + done.stderr
    if re.search(r"Failed to establish a new connection|Temporary failure in name resolution|No matching "
                 r"distribution found", text):
        pytest.skip("pre-commit could not install the hook's dependencies from PyPI (offline?)")


@pytest.mark.slow
def test_both_hooks_pass_through_pre_commit_try_repo_from_a_fresh_clone(tmp_path: Path) -> None:
    command = _pre_commit()
    env = _env(tmp_path, PRE_COMMIT_HOME=str(tmp_path / "cache"))
    hooks = _hook_repo(tmp_path, env)
    user = _user_repo(tmp_path, env)
    done = _run([*command, "try-repo", str(hooks), "--all-files"], user, env, timeout=600)
    _skip_if_offline(done)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^gpupolicy validate\.+Passed$", done.stdout, re.M), done.stdout
    assert re.search(r"^gpupolicy compile --check\.+Passed$", done.stdout, re.M), done.stdout


@pytest.mark.slow
def test_the_hooks_catch_a_broken_spec_and_a_hand_edited_generated_file(tmp_path: Path) -> None:
    command = _pre_commit()
    env = _env(tmp_path, PRE_COMMIT_HOME=str(tmp_path / "cache"))
    hooks = _hook_repo(tmp_path, env)
    user = _user_repo(tmp_path, env)
    head = _run(["git", "rev-parse", "HEAD"], hooks, env).stdout.strip()
    config = tmp_path / "pre-commit-config.yaml"
    config.write_text(yaml.safe_dump({"repos": [{"repo": str(hooks), "rev": head, "hooks": [
        {"id": "gpupolicy-validate"}, {"id": "gpupolicy-check"}]}]}))
    generated = user / "clusters" / "tke-prod" / "out" / "device-plugin" / "configmap-l20.yaml"
    generated.write_text(generated.read_text().replace("replicas: 8", "replicas: 9"))

    drift = _run([*command, "run", "-c", str(config), "--files", str(generated.relative_to(user))], user, env,
                 timeout=600)
    _skip_if_offline(drift)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert re.search(r"^gpupolicy validate\.+\(no files to check\)Skipped$", drift.stdout, re.M), drift.stdout
    assert re.search(r"^gpupolicy compile --check\.+Failed$", drift.stdout, re.M), drift.stdout
    assert "clusters/tke-prod/out: stale" in drift.stdout

    spec = user / "clusters" / "tke-prod" / "cluster.yaml"
    spec.write_text(spec.read_text().replace("model: Tesla-T4", "model: Tesla-T5"))
    broken = _run([*command, "run", "-c", str(config), "--files", "clusters/tke-prod/cluster.yaml"], user, env,
                  timeout=600)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert re.search(r"^gpupolicy validate\.+Failed$", broken.stdout, re.M), broken.stdout
    assert "error[unknown-gpu-model]" in broken.stdout


# ------------------------------------------------------------------------------------------------ GitOps


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


GITOPS_YAML = sorted(p for p in GITOPS.rglob("*.yaml"))
FLUX_FILES = sorted((GITOPS / "flux").glob("*/gpupolicy.yaml"))
# The Kustomization that applies a tree's flux/ (its Helm values), where the tree has one.
HELM_KUSTOMIZATIONS = {"h20-inference": "gpupolicy-operator-values", "vgpu-platform": "gpupolicy-hami"}


@pytest.mark.parametrize("path", GITOPS_YAML, ids=[str(p.relative_to(GITOPS)) for p in GITOPS_YAML])
def test_every_gitops_example_is_yaml_with_kubernetes_shaped_documents(path: Path) -> None:
    for doc in _documents(path):
        assert {"apiVersion", "kind"} <= set(doc), path


def _kustomizations(path: Path) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _documents(path) if d["kind"] == "Kustomization"}


def _engine(flux_file: Path) -> str:
    """admission.engine of the example cluster a Flux file deploys."""
    spec = REPO / "examples" / "clusters" / CLUSTER_DIRS[flux_file.parent.name] / "cluster.yaml"
    return load_policy_or_raise(spec.read_text(encoding="utf-8"), filename=str(spec)).spec.admission_engine


@pytest.mark.parametrize("path", FLUX_FILES, ids=[p.parent.name for p in FLUX_FILES])
def test_flux_applies_device_plugin_policies_webhook_then_registration_with_prune_and_health_checks(
        path: Path) -> None:
    ks = _kustomizations(path)
    helm = HELM_KUSTOMIZATIONS.get(path.parent.name)
    webhook = _engine(path) != "vap"
    assert [k for k in ks if k != helm] == ["gpupolicy-device-plugin", "gpupolicy-admission-policy",
                                            *(["gpupolicy-webhook", "gpupolicy-webhook-registration"]
                                              if webhook else []),
                                            "gpupolicy-monitoring"]
    for k in ks.values():
        assert k["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1"
        assert k["spec"]["prune"] is True and k["spec"]["wait"] is True
        assert k["spec"]["path"].startswith(f"./clusters/{path.parent.name}/out")
    assert ks["gpupolicy-monitoring"]["spec"]["path"].endswith("/out/monitoring")
    assert [d["name"] for d in ks["gpupolicy-monitoring"]["spec"]["dependsOn"]] == ["kube-prometheus-stack"]
    deps = {name: [d["name"] for d in k["spec"].get("dependsOn", [])] for name, k in ks.items()}
    assert deps["gpupolicy-admission-policy"] == []  # the policies need nothing running
    if webhook:
        assert "gpupolicy-device-plugin" in deps["gpupolicy-webhook"]
        assert deps["gpupolicy-webhook-registration"] == ["gpupolicy-webhook"]
    if path.parent.name == "h20-inference":  # deploy: gpu-operator
        assert deps["gpupolicy-device-plugin"] == ["gpu-operator"]
        assert ks["gpupolicy-device-plugin"]["spec"]["healthCheckExprs"][0]["kind"] == "ClusterPolicy"


def _build(kubectl: str, directory: Path) -> set[tuple[str, str, str]]:
    done = subprocess.run([kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(directory)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
            for d in yaml.safe_load_all(done.stdout) if d}


@pytest.mark.parametrize("path", FLUX_FILES, ids=[p.parent.name for p in FLUX_FILES])
def test_the_flux_kustomizations_partition_the_compiled_tree_exactly(
        path: Path, gitops_repo: Path, tmp_path: Path) -> None:
    kubectl = _kubectl()
    built: dict[str, set[tuple[str, str, str]]] = {}
    # Flux builds spec.path and then applies spec.patches, which is what an overlay with the same patches does.
    for name, k in _kustomizations(path).items():
        overlay = tmp_path / name
        overlay.mkdir()
        source = gitops_repo / k["spec"]["path"]
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(source, overlay)], "patches": k["spec"].get("patches", [])}))
        built[name] = _build(kubectl, overlay)
    out = gitops_repo / "clusters" / path.parent.name / "out"
    whole = _build(kubectl, out) | _build(kubectl, out / "monitoring")
    if (out / "flux").is_dir():
        whole |= _build(kubectl, out / "flux")
    parts = list(built.values())
    assert set().union(*parts) == whole
    assert sum(len(p) for p in parts) == len(whole), "an object is applied by two Kustomizations"
    assert {kind for kind, _, _ in built["gpupolicy-admission-policy"]} == {
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    if _engine(path) == "vap":  # no webhook to scrape, nothing but the policies in admission/
        assert {kind for kind, _, _ in built["gpupolicy-monitoring"]} == {"PrometheusRule", "ConfigMap", "PodMonitor"}
    else:
        assert {kind for kind, _, _ in built["gpupolicy-monitoring"]} - {"PodMonitor"} == {
            "PrometheusRule", "ServiceMonitor", "ConfigMap"}
        assert {kind for kind, _, _ in built["gpupolicy-webhook-registration"]} == {"ValidatingWebhookConfiguration"}
        assert ("Deployment", "gpupolicy-system", "gpupolicy-webhook") in built["gpupolicy-webhook"]
    # Node-side objects: plugins (standalone), or the operator's ConfigMaps and the label reconciler.
    assert any(kind in {"DaemonSet", "ClusterPolicy", "Deployment"} for kind, _, _ in built["gpupolicy-device-plugin"])


def test_flux_installs_hami_before_the_tree_and_feeds_the_operator_release_after_it(gitops_repo: Path) -> None:
    hami_ks = _kustomizations(GITOPS / "flux" / "vgpu-platform" / "gpupolicy.yaml")
    assert hami_ks["gpupolicy-hami"]["spec"]["path"] == "./clusters/vgpu-platform/out/flux"
    assert [d["name"] for d in hami_ks["gpupolicy-device-plugin"]["spec"]["dependsOn"]] == ["gpupolicy-hami"]
    operator_ks = _kustomizations(GITOPS / "flux" / "h20-inference" / "gpupolicy.yaml")
    values_ks = operator_ks["gpupolicy-operator-values"]
    assert values_ks["spec"]["path"] == "./clusters/h20-inference/out/flux"
    assert [d["name"] for d in values_ks["spec"]["dependsOn"]] == ["gpupolicy-device-plugin"]
    # The operator's own HelmRelease reads the tree's ConfigMap last and optionally (it installs first).
    documents = {d["kind"]: d for d in _documents(GITOPS / "flux" / "h20-inference" / "gpu-operator.yaml")}
    release = documents["HelmRelease"]
    assert release["spec"]["valuesFrom"][-1] == {"kind": "ConfigMap", "name": flux.OPERATOR_VALUES,
                                                 "valuesKey": "values.yaml", "optional": True}
    spec = yaml.safe_load((gitops_repo / "clusters" / "h20-inference" / "cluster.yaml").read_text())
    assert release["spec"]["chart"]["spec"]["version"] == spec["spec"]["devicePlugin"]["operator"]["version"]
    (configmap,) = _documents(gitops_repo / "clusters" / "h20-inference" / "out" / "flux" /
                              "configmap-gpu-operator-values.yaml")
    assert configmap["metadata"]["name"] == flux.OPERATOR_VALUES
    assert configmap["metadata"]["namespace"] == release["metadata"]["namespace"]


@pytest.mark.parametrize(("file", "cluster", "values"), [
    ("application-hami.yaml", "vgpu-platform", "hami-values.yaml"),
    ("application-gpu-operator.yaml", "h20-inference", "gpu-operator-values.yaml"),
])
def test_argo_cd_renders_each_chart_with_the_tree_s_values_last(file: str, cluster: str, values: str,
                                                                gitops_repo: Path) -> None:
    (app,) = _documents(GITOPS / "argocd" / file)
    chart, ref = app["spec"]["sources"]
    assert ref["ref"] == "values" and ref["repoURL"] == chart_repo_of_the_tree_app()
    last = chart["helm"]["valueFiles"][-1]
    assert last == f"$values/clusters/{cluster}/out/{values}"
    assert (gitops_repo / last.removeprefix("$values/")).is_file()
    path = gitops_repo / "clusters" / cluster / "cluster.yaml"
    spec = load_policy_or_raise(path.read_text(), filename=str(path)).spec
    if values == "hami-values.yaml":
        assert chart["targetRevision"] == spec.hami.chart_version
        assert (chart["helm"]["releaseName"], app["spec"]["destination"]["namespace"]) == (
            spec.hami.release_name, spec.hami.namespace)
        assert int(app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]) < 0  # before the tree
    else:
        operator = spec.device_plugin.operator
        assert (chart["targetRevision"], app["spec"]["destination"]["namespace"]) == (operator.version,
                                                                                       operator.namespace)


def chart_repo_of_the_tree_app() -> str:
    (app,) = _documents(GITOPS / "argocd" / "application.yaml")
    return str(app["spec"]["source"]["repoURL"])


def test_argo_cd_applies_the_monitoring_of_a_tree_as_its_own_application(gitops_repo: Path) -> None:
    kubectl = _kubectl()
    (app,) = _documents(GITOPS / "argocd" / "application-monitoring.yaml")
    path = gitops_repo / app["spec"]["source"]["path"]
    assert path.name == "monitoring" and (path / "kustomization.yaml").is_file()
    assert {kind for kind, _, _ in _build(kubectl, path)} == {"PrometheusRule", "ServiceMonitor", "ConfigMap"}
    assert "SkipDryRunOnMissingResource=true" in app["spec"]["syncPolicy"]["syncOptions"]


def test_the_monitoring_kustomization_gathers_the_compiled_monitoring(gitops_repo: Path) -> None:
    kubectl = _kubectl()
    gathered = _build(kubectl, gitops_repo / "monitoring")
    assert gathered == _build(kubectl, gitops_repo / "clusters" / "tke-prod" / "out" / "monitoring")
    assert ("PrometheusRule", "gpupolicy-system", "gpupolicy") in gathered


def test_argo_cd_points_at_compiled_trees_and_leaves_the_injected_ca_bundle_alone(gitops_repo: Path) -> None:
    (app,) = _documents(GITOPS / "argocd" / "application.yaml")
    (appset,) = _documents(GITOPS / "argocd" / "applicationset.yaml")
    assert (gitops_repo / app["spec"]["source"]["path"] / "kustomization.yaml").is_file()
    assert re.fullmatch(r"clusters/\{\{.+\}\}/out", appset["spec"]["template"]["spec"]["source"]["path"])
    for spec in (app["spec"], appset["spec"]["template"]["spec"]):
        options = spec["syncPolicy"]["syncOptions"]
        assert {"ServerSideApply=true", "RespectIgnoreDifferences=true", "PruneLast=true"} <= set(options)
        assert spec["syncPolicy"]["automated"] == {"prune": True, "selfHeal": True}
        assert spec["ignoreDifferences"][0]["kind"] == "ValidatingWebhookConfiguration"


def test_the_tree_registers_the_webhook_in_a_later_sync_wave_than_its_deployment(gitops_repo: Path) -> None:
    admission = gitops_repo / "clusters" / "tke-prod" / "out" / "admission"
    waves = {d["kind"]: int(d["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
             for f in admission.glob("*.yaml") if f.name != "kustomization.yaml" for d in _documents(f)}
    assert waves["ValidatingWebhookConfiguration"] > waves["Deployment"]
    assert [k for k, w in waves.items() if w == waves["ValidatingWebhookConfiguration"]] == [
        "ValidatingWebhookConfiguration"]


OVERLAYS = sorted((GITOPS / "specs" / "overlays").iterdir())


@pytest.mark.parametrize("overlay", OVERLAYS, ids=[o.name for o in OVERLAYS])
def test_each_spec_overlay_renders_a_valid_spec_that_compiles(overlay: Path, tmp_path: Path) -> None:
    kubectl = _kubectl()
    rendered = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    spec = tmp_path / "cluster.yaml"
    spec.write_text(rendered.stdout)
    assert yaml.safe_load(rendered.stdout)["metadata"]["name"] == overlay.name
    env = _env(tmp_path)
    validate = _run(["gpupolicy", "validate", str(spec)], tmp_path, env)
    assert validate.returncode == 0, validate.stdout
    compiled = _run(["gpupolicy", "compile", str(spec), "-o", str(tmp_path / "out")], tmp_path, env)
    assert compiled.returncode == 0, compiled.stderr


# ------------------------------------------------------------------------------------------------ monitoring


def _catalogue() -> dict[str, str]:
    from compiler.targets.monitoring.rules import ALERTS

    return {a.name: a.severity for a in ALERTS}


def test_the_operations_guide_lists_every_alert_the_compiler_can_emit_with_its_severity() -> None:
    documented = dict(re.findall(r"^\| `(GPUPolicy\w+)` \| .* \| (\w+) \|$", OPERATIONS.read_text(), re.M))
    assert documented == _catalogue()


def test_every_alert_has_a_runbook_section_and_every_section_an_alert() -> None:
    text = RUNBOOKS.read_text()
    sections = re.findall(r"^## (\S+)$", text, re.M)
    assert sorted(sections) == sorted(_catalogue())
    for body in re.split(r"^## ", text, flags=re.M)[1:]:
        name, _, rest = body.partition("\n")
        severity = _catalogue()[name]
        assert rest.strip().startswith(f"**{severity.capitalize()}"), f"{name}: state its severity first"
        assert len(rest.split()) > 40, f"{name}: say what it means and what to do"


def _exported_metrics(*, reconciler: bool = False) -> set[str]:
    """The webhook's metric names (and with `reconciler`, the node-label reconciler's too)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from cluster.reconciler import Metrics as ReconcilerMetrics
    from webhook.metrics import Metrics

    registry = CollectorRegistry()
    Metrics(registry)
    text = generate_latest(registry).decode()
    if reconciler:
        text += generate_latest(ReconcilerMetrics().registry).decode()
    # prometheus_client adds a <name>_created gauge per counter and histogram: creation times, not metrics.
    names = set()
    for name, kind in re.findall(r"^# TYPE (gpupolicy_\w+) (\w+)", text, re.M):
        if name.endswith("_created"):
            continue
        names.add(name + ("_total" if kind == "counter" and not name.endswith("_total") else ""))
        if kind == "histogram":
            names.add(name + "_bucket")
    return names


def test_the_operations_guide_documents_exactly_the_metrics_the_webhook_exports() -> None:
    documented = set(re.findall(r"^\| `(gpupolicy_\w+)` \|", OPERATIONS.read_text(), re.M))
    assert documented == {n for n in _exported_metrics() if not n.endswith("_bucket")}


@pytest.mark.parametrize("example", sorted(CLUSTER_DIRS.values()))
def test_the_compiled_rules_and_dashboard_use_only_metrics_the_webhook_and_the_reconciler_export(example: str) -> None:
    out = REPO / "examples" / "clusters" / example / "out" / "monitoring"
    text = "".join(p.read_text() for p in out.glob("*.yaml"))
    used = set(re.findall(r"\bgpupolicy_[a-z_]+\b", text))
    exported = _exported_metrics(reconciler=True)
    assert used and used <= exported, used - exported


# ------------------------------------------------------------------------------------------------ troubleshooting


def test_the_operations_guide_troubleshoots_every_validation_code_and_admission_rule() -> None:
    from policy.spec.diagnostics import Code
    from policy.spec.model import RuleId

    text = OPERATIONS.read_text()
    missing = [c for c in get_args(Code) if f"| `{c}` |" not in text]
    missing += [r for r in get_args(RuleId) if f"#### {r}\n" not in text]
    assert not missing, f"add to docs/operations.md: {missing}"
