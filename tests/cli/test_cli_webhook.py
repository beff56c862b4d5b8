"""gpupolicy webhook serve refuses, at start and with the reason, a policy it could never load."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "examples" / "clusters" / "tke-l20-t4" / "cluster.yaml"
BROKEN_SPEC = ROOT / "tests" / "fixtures" / "specs" / "bad" / "unknown-gpu-model" / "l20-typo.yaml"


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    assert main(["webhook", "certs", "--out", str(out)]) == 0
    return out


def serve(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["webhook", "serve", *args])
    return code, capsys.readouterr().err


def test_a_spec_given_as_the_compiled_policy_points_at_spec(cert_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = serve(capsys, "--policy", str(SPEC), "--cert-dir", str(cert_dir))
    assert code == 2
    assert "is not a compiled admission-policy.json; for a ClusterGPUPolicy YAML use --spec" in err


def test_a_spec_with_errors_is_refused_with_the_first_error_and_the_command_to_see_all(
    cert_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = serve(capsys, "--spec", str(BROKEN_SPEC), "--cert-dir", str(cert_dir))
    assert code == 2
    assert "GPU model 'NVIDIA-L2O' is not in the catalog" in err and f"gpupolicy validate {BROKEN_SPEC}" in err


def test_json_that_is_not_an_admission_policy_is_refused(
    cert_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "admission-policy.json"
    policy.write_text('{"version": 1}')
    code, err = serve(capsys, "--policy", str(policy), "--cert-dir", str(cert_dir))
    assert code == 2 and "cannot be loaded as admission-policy" in err


def test_the_development_certificate_names_localhost_too(cert_dir: Path) -> None:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((cert_dir / "tls.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "localhost" in names and "gpupolicy-webhook.gpupolicy-system.svc" in names


@pytest.mark.parametrize("days", ["0", "-5", "3651", "100000000", "99999999999999999999"])
def test_a_certificate_lifetime_outside_the_cas_is_a_usage_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], days: str
) -> None:
    code = main(["webhook", "certs", "--out", str(tmp_path / "certs"), "--days", days])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"--days must be between 1 and 3650 (got {int(days)})" in err
    assert not (tmp_path / "certs").exists()


def test_the_longest_lifetime_is_the_cas(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhook", "certs", "--out", str(tmp_path), "--days", "3650"]) == 0
    assert "valid until" in capsys.readouterr().err


def test_a_node_cache_with_no_credentials_to_read_is_refused_at_start(
    cert_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Outside a pod: no KUBERNETES_SERVICE_HOST and no ServiceAccount token, so in-cluster config cannot load.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, err = serve(capsys, "--spec", str(SPEC), "--cert-dir", str(cert_dir), "--node-cache")
    assert code == 2 and "Traceback" not in err
    assert "the node cache cannot read the pod's ServiceAccount (in-cluster config)" in err and "--no-node-cache" in err
    code, err = serve(capsys, "--spec", str(SPEC), "--cert-dir", str(cert_dir), "--node-cache",
                      "--kubeconfig", str(tmp_path / "missing"))
    assert code == 2 and f"the node cache cannot read the kubeconfig {tmp_path / 'missing'}" in err
