"""Reaching the cluster: every failure is one sentence and a fix on stderr, exit 2, no traceback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_support import TKE_SPEC
from recorded_responses import Fault

from cluster import snapshot

RBAC_FIX = ("  hint: grant get and list on nodes, pods, events, configmaps (core) and daemonsets, replicasets, "
            "deployments (apps), e.g. kubectl create clusterrole gpupolicy-reader --verb=get,list "
            "--resource=nodes,pods,events,configmaps,daemonsets.apps,replicasets.apps,deployments.apps && "
            "kubectl create clusterrolebinding gpupolicy-reader --clusterrole=gpupolicy-reader --user=<you>\n")


# A forbidden node list, and discover reading nodes and DaemonSets alone, are RBAC's own refusals on the real API
# server: tests/kube/test_kube_cluster_verify.py.  The recorded responses keep what it cannot be asked for here.


def test_a_forbidden_namespaced_list_says_which_namespace(cluster, gpupolicy):
    seed = cluster("seed-003-before", faults={"deployments": Fault(status=403)})
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig)
    assert result.code == 2
    assert result.err.startswith("gpupolicy cluster verify: error: the API server refused to list deployments in "
                                 "namespace nlp (403 Forbidden: deployments is forbidden:")
    assert result.err.endswith(RBAC_FIX)


def test_an_api_server_slower_than_the_request_timeout_is_reported_without_waiting_for_it(cluster, gpupolicy):
    seed = cluster("seed-003-before", faults={"nodes": Fault(sleep_seconds=3)})
    started = time.monotonic()
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig, "--request-timeout", "0.3")
    # The recorded responses come after 3 s; giving up at the 0.3 s timeout means returning well before that.
    assert time.monotonic() - started < 2.9
    assert (result.code, result.out) == (2, "")
    assert result.err == (
        f"gpupolicy cluster verify: error: the API server at {seed.server.url} did not answer list nodes within 0.3 s\n"
        "  hint: retry, or raise --request-timeout if the API server is known to be slow\n")


def test_a_refused_connection_names_the_server_and_how_to_check_it(gpupolicy, tmp_path: Path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
    }), encoding="utf-8")
    result = gpupolicy("cluster", "discover", "--kubeconfig", kubeconfig)
    assert (result.code, result.out) == (2, "")
    assert result.err == (
        f"gpupolicy cluster discover: error: cannot connect to the API server at http://127.0.0.1:{port} (connection "
        "refused or unreachable)\n"
        "  hint: check that the cluster is up and the kubeconfig's server address is right (kubectl cluster-info)\n")


def test_no_kubeconfig_anywhere_is_a_clear_error(gpupolicy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC)
    assert (result.code, result.out) == (2, "")
    assert result.err == (
        f"gpupolicy cluster verify: error: no kubeconfig found at {tmp_path}/.kube/config, so there is no cluster to "
        "read\n  hint: pass --kubeconfig FILE or set KUBECONFIG (kubectl config view shows what you use)\n")


def test_an_unknown_context_lists_the_ones_there_are(cluster, gpupolicy):
    seed = cluster("seed-003-before")
    result = gpupolicy("cluster", "discover", "--kubeconfig", seed.kubeconfig, "--context", "prod")
    assert result.code == 2
    assert result.err == (f"gpupolicy cluster discover: error: kubeconfig {seed.kubeconfig} has no context prod\n"
                          "  hint: pass --context with one of: tke-prod\n")
    assert seed.server.requests == []


@pytest.mark.parametrize(("status", "message"), [
    (401, "rejected the credentials of context tke-prod (401 Unauthorized)"),
    (500, "the API server failed to list nodes (500 etcdserver: request timed out)"),
])
def test_other_api_errors_are_one_sentence_too(cluster, gpupolicy, status: int, message: str):
    seed = cluster("seed-003-before", faults={"nodes": Fault(status=status)})
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig)
    assert result.code == 2
    assert message in result.err.splitlines()[0]
    assert "Traceback" not in result.err


def test_a_spec_with_errors_is_refused_before_the_cluster_is_read(cluster, gpupolicy, tmp_path: Path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(TKE_SPEC.read_text(encoding="utf-8").replace("model: Tesla-T4", "model: Tesla-T5"))
    seed = cluster("seed-003-before")
    result = gpupolicy("cluster", "verify", "-p", spec, "--kubeconfig", seed.kubeconfig)
    assert (result.code, result.out) == (2, "")
    assert "error[unknown-gpu-model]" in result.err
    assert result.err.endswith("  hint: fix what is reported above (gpupolicy validate checks the spec)\n")
    assert seed.server.requests == []


def test_lists_are_read_page_by_page(cluster, gpupolicy, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(snapshot, "PAGE_SIZE", 3)
    seed = cluster("seed-003-before")
    result = gpupolicy("cluster", "verify", "-p", TKE_SPEC, "--kubeconfig", seed.kubeconfig, "-O", "json")
    assert json.loads(result.out)["summary"]["nodes"] == 8
    assert [p for _, p in seed.server.requests if p.startswith("/api/v1/nodes")] == [
        "/api/v1/nodes?limit=3", "/api/v1/nodes?continue=3&limit=3", "/api/v1/nodes?continue=6&limit=3"]


def test_cluster_help_loads_neither_the_kubernetes_client_nor_yaml_nor_pydantic():
    probe = ("import sys, contextlib, io\nfrom cli.main import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    main(['cluster', 'verify', '--help'])\n"
             "print([m for m in ('kubernetes', 'yaml', 'pydantic', 'urllib3') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_default_request_timeout_of_the_cli_is_the_snapshot_default(gpupolicy):
    result = gpupolicy("cluster", "verify", "--help")
    assert f"(default: {snapshot.DEFAULT_TIMEOUT_SECONDS:g})" in " ".join(result.out.split())
