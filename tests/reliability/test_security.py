"""Security: a restricted non-root pod without a token, TLS 1.2+ only, and no private key in trees or logs."""

from __future__ import annotations

import re
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import ROOT, Figures, helpers, https, log_problems, manifests

from cli.main import main as gpupolicy
from policy.load import load_policy_or_raise

OUT_TREES = sorted((ROOT / "examples" / "clusters").glob("*/out"))


def runs_the_webhook(tree: Path) -> bool:
    """Whether the tree's spec runs the webhook (admission.engine vap enforces with the API server alone); read
    from the spec, not the tree, so a tree that lost its Deployment fails below instead of dropping out."""
    return load_policy_or_raise((tree.parent / "cluster.yaml").read_text(encoding="utf-8"),
                                filename=str(tree.parent / "cluster.yaml")).spec.runs_webhook


WEBHOOK_TREES = [tree for tree in OUT_TREES if runs_the_webhook(tree)]


def committed(tree: Path, kind: str) -> list[dict[str, Any]]:
    return [doc for path in sorted(tree.rglob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
            if isinstance(doc, dict) and doc.get("kind") == kind]


# --- the pod ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tree", WEBHOOK_TREES, ids=lambda tree: tree.parent.name)
def test_the_committed_webhook_deployment_is_restricted_non_root_read_only_and_tokenless(tree: Path) -> None:
    # Tokenless but for its node cache (admission.nodeCache): then its pod's token reads Nodes and nothing else.
    (deployment,) = [d for d in committed(tree, "Deployment") if d["metadata"]["name"] == "gpupolicy-webhook"]
    (account,) = [a for a in committed(tree, "ServiceAccount") if a["metadata"]["name"] == "gpupolicy-webhook"]
    spec = deployment["spec"]["template"]["spec"]
    assert manifests.baseline_violations(spec) == manifests.restricted_violations(spec) == []
    (container,) = spec["containers"]
    security = container["securityContext"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    node_cache = {"name": "GPUPOLICY_NODE_CACHE", "value": "true"} in container.get("env", [])
    assert spec["automountServiceAccountToken"] is node_cache and account["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    bound = {b["roleRef"]["name"] for b in committed(tree, "ClusterRoleBinding") + committed(tree, "RoleBinding")
             if any(s.get("kind") == "ServiceAccount" and s.get("name") == account["metadata"]["name"]
                    for s in b.get("subjects", []))}
    rules = [r for role in committed(tree, "ClusterRole") if role["metadata"]["name"] in bound for r in role["rules"]]
    assert rules == ([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
                     if node_cache else [])
    assert not [volume for volume in spec["volumes"] if "projected" in volume or "hostPath" in volume]


def test_the_image_runs_as_the_same_non_root_user_the_deployment_asks_for() -> None:
    users = re.findall(r"^USER (\d+):(\d+)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE)
    spec = manifests.pod_template_spec(manifests.policy_with())
    assert users == [(str(spec["securityContext"]["runAsUser"]), str(spec["securityContext"]["runAsGroup"]))]
    assert users[0][0] != "0"


# --- TLS --------------------------------------------------------------------------------------------------


def handshake(server: https.Server, version: ssl.TLSVersion, ciphers: str | None = None) -> tuple[str, str]:
    context = server.context(minimum_version=version, maximum_version=version)
    if ciphers:
        context.set_ciphers(ciphers)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=https.SERVICE_HOST) as tls:
        version_name, cipher = tls.version(), tls.cipher()[0]
        assert version_name is not None
        return version_name, cipher


def refused_by_the_server(reason: str | None, alert: str) -> bool:
    """The server ended the handshake: with its alert, or with a close. asyncio's TLS layer drops the alert
    OpenSSL wrote when a handshake fails (Python 3.11 asyncio/sslproto.py `_on_handshake_complete` closes
    the transport without flushing it), so the client may only see the connection end."""
    return reason in (alert, "UNEXPECTED_EOF_WHILE_READING")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["TLS 1.0", "TLS 1.1"])
def test_a_tls_1_0_or_1_1_handshake_fails(server: https.Server, version: ssl.TLSVersion) -> None:
    # The client would settle for anything; the refusal is the server's.
    with pytest.raises(ssl.SSLError) as refused:
        handshake(server, version, "DEFAULT:@SECLEVEL=0")
    assert refused_by_the_server(refused.value.reason, "TLSV1_ALERT_PROTOCOL_VERSION"), refused.value
    assert handshake(server, ssl.TLSVersion.TLSv1_2)[0] == "TLSv1.2"  # the server itself is fine


@pytest.mark.parametrize(("version", "name"),
                         [(ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")])
def test_tls_1_2_and_1_3_handshakes_succeed(server: https.Server, version: ssl.TLSVersion, name: str,
                                            figures: Figures) -> None:
    negotiated, cipher = handshake(server, version)
    assert negotiated == name
    if name == "TLSv1.2":
        assert cipher.startswith("ECDHE-") and ("GCM" in cipher or "CHACHA20" in cipher)
    figures.record("TLS", **{name: cipher})


def test_a_tls_1_2_client_offering_only_non_forward_secret_or_cbc_ciphers_is_refused(server: https.Server) -> None:
    with pytest.raises(ssl.SSLError) as refused:
        handshake(server, ssl.TLSVersion.TLSv1_2, "AES128-SHA:AES256-GCM-SHA384:ECDHE-ECDSA-AES128-SHA")
    assert refused_by_the_server(refused.value.reason, "SSLV3_ALERT_HANDSHAKE_FAILURE"), refused.value


# --- no private key, anywhere it could leak ---------------------------------------------------------------


def test_no_committed_tree_and_no_freshly_compiled_tree_holds_a_private_key(tmp_path: Path,
                                                                             figures: Figures) -> None:
    scanned = 0
    fresh = []
    for tree in OUT_TREES:
        out = tmp_path / tree.parent.name
        assert gpupolicy(["compile", str(tree.parent / "cluster.yaml"), "-o", str(out)]) == 0
        fresh.append(out)
    for root in (*OUT_TREES, *fresh):
        for path in root.rglob("*"):
            if path.is_file():
                scanned += 1
                text = path.read_bytes()
                assert b"PRIVATE KEY" not in text and b"tls.key:" not in text, path
    figures.record("no private key", files_scanned=scanned, trees=len(OUT_TREES) + len(fresh))


def test_the_server_log_holds_no_key_no_certificate_and_no_object_contents(server: https.Server) -> None:
    # What the shared server logged so far; the `server` fixture checks the whole log again at the end.
    secret = {"name": "HF_TOKEN", "value": "hf_security_SECRET_value"}
    obj = helpers.workload("Deployment", helpers.container(gpus=2, env=[secret]))
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/security-image:secret-tag"
    assert server.review(helpers.admission_review(obj, uid="security-log-check"))["allowed"] is False
    text = server.log.read_text(errors="replace")
    assert "uid=security-log-check" in text
    assert log_problems(text) == []
