"""Dev certificates: the serving certificate chains to the CA, names the Service, and is written safely."""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import DNSName, PolicyBuilder, Store, VerificationError

from webhook import certs

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NAMES = certs.service_dns_names("gpupolicy-webhook", "gpupolicy-system")


@pytest.fixture(scope="module")
def ca() -> certs.KeyPair:
    return certs.make_ca(now=NOW)


@pytest.fixture(scope="module")
def serving(ca: certs.KeyPair) -> certs.KeyPair:
    return certs.make_serving_cert(ca, NAMES, now=NOW)


def verify(
    ca: certs.KeyPair, serving: certs.KeyPair, name: str, at: datetime = NOW
) -> list[x509.Certificate]:
    verifier = PolicyBuilder().store(Store([ca.certificate])).time(at).build_server_verifier(DNSName(name))
    return verifier.verify(serving.certificate, [])


def test_service_dns_names_cover_every_way_to_address_the_service() -> None:
    assert NAMES == (
        "gpupolicy-webhook",
        "gpupolicy-webhook.gpupolicy-system",
        "gpupolicy-webhook.gpupolicy-system.svc",
        "gpupolicy-webhook.gpupolicy-system.svc.cluster.local",
    )


@pytest.mark.parametrize("name", NAMES[1:])
def test_the_serving_certificate_verifies_against_the_ca_for_each_service_name(
    ca: certs.KeyPair, serving: certs.KeyPair, name: str
) -> None:
    chain = verify(ca, serving, name)
    assert [c.subject for c in chain] == [serving.certificate.subject, ca.certificate.subject]


def test_verification_fails_for_a_name_the_certificate_does_not_carry(
    ca: certs.KeyPair, serving: certs.KeyPair
) -> None:
    with pytest.raises(VerificationError):
        verify(ca, serving, "other.gpupolicy-system.svc")


def test_verification_fails_against_a_different_ca(serving: certs.KeyPair) -> None:
    with pytest.raises(VerificationError):
        verify(certs.make_ca(now=NOW), serving, NAMES[2])


def test_verification_fails_after_the_serving_certificate_expires(
    ca: certs.KeyPair, serving: certs.KeyPair
) -> None:
    with pytest.raises(VerificationError):
        verify(ca, serving, NAMES[2], at=NOW + timedelta(days=366))


def test_the_serving_certificate_carries_exactly_the_given_sans_and_server_auth(
    serving: certs.KeyPair,
) -> None:
    cert = serving.certificate
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert tuple(sans.get_values_for_type(x509.DNSName)) == NAMES
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and not constraints.value.ca
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature


def test_the_ca_may_sign_certificates_and_identifies_its_key(
    ca: certs.KeyPair, serving: certs.KeyPair
) -> None:
    cert = ca.certificate
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    ca_ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    aki = serving.certificate.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ca_ski
    assert cert.subject.rfc4514_string() == "CN=gpupolicy-webhook-ca"


def test_keys_are_ecdsa_p256_and_match_their_certificates(ca: certs.KeyPair, serving: certs.KeyPair) -> None:
    for pair in (ca, serving):
        key = serialization.load_pem_private_key(pair.key_pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert key.curve.name == "secp256r1"
        assert key.public_key() == pair.certificate.public_key()


def test_expiry_is_one_year_for_the_serving_certificate_and_ten_for_the_ca(
    ca: certs.KeyPair, serving: certs.KeyPair
) -> None:
    assert certs.expiry(serving.cert_pem) == NOW + timedelta(days=365)
    assert certs.expiry(ca.cert_pem) == NOW + timedelta(days=3650)
    assert serving.certificate.not_valid_before_utc <= NOW


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    short_ca = certs.make_ca(days=30, now=NOW)
    assert certs.expiry(certs.make_serving_cert(short_ca, NAMES, now=NOW).cert_pem) == certs.expiry(
        short_ca.cert_pem
    )


def test_a_serving_certificate_needs_a_name(ca: certs.KeyPair) -> None:
    with pytest.raises(ValueError, match="at least one DNS name"):
        certs.make_serving_cert(ca, ())


def test_write_bundle_writes_the_three_files_with_a_private_key_file(
    tmp_path: Path, ca: certs.KeyPair, serving: certs.KeyPair
) -> None:
    paths = certs.write_bundle(tmp_path / "tls", ca, serving)
    assert paths == {name: tmp_path / "tls" / name for name in ("ca.crt", "tls.crt", "tls.key")}
    assert paths["ca.crt"].read_bytes() == ca.cert_pem
    assert paths["tls.crt"].read_bytes() == serving.cert_pem
    assert paths["tls.key"].read_bytes() == serving.key_pem
    assert stat.S_IMODE(paths["tls.key"].stat().st_mode) == 0o600
    assert stat.S_IMODE(paths["tls.crt"].stat().st_mode) == 0o644


def test_rewriting_a_bundle_replaces_the_files_and_leaves_no_temporary_files(
    tmp_path: Path, ca: certs.KeyPair, serving: certs.KeyPair
) -> None:
    certs.write_bundle(tmp_path, ca, serving)
    renewed = certs.make_serving_cert(ca, NAMES, now=NOW + timedelta(days=300))
    paths = certs.write_bundle(tmp_path, ca, renewed)
    assert paths["tls.crt"].read_bytes() == renewed.cert_pem
    assert paths["tls.key"].read_bytes() == renewed.key_pem
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]


def test_a_tls_client_trusting_only_the_ca_completes_a_handshake_with_the_written_bundle(
    tmp_path: Path,
) -> None:
    ca = certs.make_ca()
    paths = certs.write_bundle(tmp_path, ca, certs.make_serving_cert(ca, NAMES))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(paths["tls.crt"], paths["tls.key"])
    client_ctx = ssl.create_default_context(cafile=str(paths["ca.crt"]))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        errors: list[BaseException] = []
        server = threading.Thread(target=_serve_one_handshake, args=(listener, server_ctx, errors))
        server.start()
        with (
            socket.create_connection(listener.getsockname(), timeout=10) as raw,
            client_ctx.wrap_socket(raw, server_hostname=NAMES[2]) as tls,
        ):
            assert tls.getpeercert()["subjectAltName"] == tuple(("DNS", n) for n in NAMES)
            assert tls.recv(2) == b"ok"
        server.join(timeout=10)
    assert errors == []


def _serve_one_handshake(listener: socket.socket, ctx: ssl.SSLContext, errors: list[BaseException]) -> None:
    try:
        conn, _ = listener.accept()
        with ctx.wrap_socket(conn, server_side=True) as tls:
            tls.sendall(b"ok")
    except (OSError, ssl.SSLError) as err:
        errors.append(err)


@pytest.mark.parametrize("days", [0, 3651, 100_000_000])
def test_a_lifetime_beyond_the_cas_is_a_value_error_not_an_overflow(ca: certs.KeyPair, days: int) -> None:
    with pytest.raises(ValueError, match="lives 1 to 3650 days"):
        certs.make_serving_cert(ca, NAMES, days=days)
