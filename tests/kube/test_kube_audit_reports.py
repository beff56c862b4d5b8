"""`gpupolicy cluster audit` against a real kube-apiserver: the mixed-fleet dump stored there (owners first, so
every ownerReference carries the uid the server gave), audited live through the kubeconfig, and its PolicyReports
and OpenReports created there once the pinned CRDs (tests/fixtures/policy-reports) are installed.

The server is this module's own: a live audit lists every namespace, so no other test's objects may be there.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_api import KubeAPI, running_api_server
from kube_cases import create, ensure_namespace

from cli.main import main

pytestmark = [pytest.mark.kube_api, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "audit"))
import build_audit_dumps  # noqa: E402
from test_audit_scan import head_text  # noqa: E402

CRDS = sorted((ROOT / "tests" / "fixtures" / "policy-reports").glob("*.yaml"))
INSTANCE = ("uid", "resourceVersion", "creationTimestamp")


@contextlib.contextmanager
def audited_server(directory: Path) -> Iterator[KubeAPI]:
    """A server of its own with the report CRDs installed and the mixed-fleet dump stored."""
    with running_api_server(directory) as server:
        for path in CRDS:
            server.kubectl("apply", "--server-side", "-f", str(path))
        server.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        store(server, build_audit_dumps.mixed_fleet())
        yield server


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    with audited_server(tmp_path_factory.mktemp("audit")) as server:
        yield server


def store(api: KubeAPI, objects: list[dict[str, Any]]) -> None:
    """Create the dump's objects in order, each ownerReference rewritten to the uid the server gave its owner (a
    forged reference keeps its foreign uid or name, as written)."""
    given: dict[str, str] = {}
    for obj in objects:
        if obj["kind"] == "Namespace":
            ensure_namespace(api, obj["metadata"]["name"], obj["metadata"]["labels"])
            continue
        sent = copy.deepcopy(obj)
        old_uid = sent["metadata"]["uid"]
        for field in INSTANCE:
            sent["metadata"].pop(field, None)
        sent.pop("status", None)
        for ref in sent["metadata"].get("ownerReferences", ()):
            ref["uid"] = given.get(ref["uid"], ref["uid"])
        given[old_uid] = create(api, sent)["metadata"]["uid"]


def test_a_live_audit_folds_pods_into_owners_and_reports_forged_pods_alone(
        api: KubeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(head_text(), encoding="utf-8")
    assert main(["cluster", "audit", "-p", str(spec), "--kubeconfig", str(api.kubeconfig), "-O", "json",
                 "--fail-only"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["name"], len(r["folded"])) for r in document["results"]] == [
        ("Deployment", "time-slicing-verification", 5), ("Job", "j-e2e-1", 1), ("Pod", "mps-borrower", 0),
        ("Pod", "mps-stowaway", 0)]
    assert document["summary"] == {"fail": 4, "pass": 2, "skip": 0, "warn": 0}


@pytest.mark.parametrize(("output", "resource"), [("policy-report", "policyreports.wgpolicyk8s.io"),
                                                   ("openreports", "reports.openreports.io")])
def test_the_reports_are_created_in_the_api_server_as_written(
        api: KubeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str, resource: str) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(head_text(), encoding="utf-8")
    assert main(["cluster", "audit", "-p", str(spec), "--kubeconfig", str(api.kubeconfig), "-O", output]) == 1
    written = capsys.readouterr().out
    # Strict field validation: a field the CRD's schema does not know is an error, not silently dropped.
    api.kubectl("create", "--validate=strict", "-f", "-", input=written)
    stored = json.loads(api.kubectl("get", resource, "-n", "research-nlp", "-o", "json").stdout)["items"]
    [report] = stored
    sent = next(d for d in yaml.safe_load_all(written) if d["metadata"].get("namespace") == "research-nlp")
    assert report["summary"] == sent["summary"] == {"pass": 0, "fail": 4, "warn": 0, "error": 0, "skip": 0}
    assert report["results"] == sent["results"]
    assert report["metadata"]["labels"] == sent["metadata"]["labels"]
