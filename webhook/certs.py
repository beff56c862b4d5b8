"""Development and test certificates for the webhook: a self-signed CA and a serving certificate it signs."""

# For production, cert-manager's CA injection is the default (reference webhook.md §1.11); these certificates
# serve `gpupolicy webhook certs`, local runs and tests. Lifetimes follow open-policy-agent/cert-controller
# (CA 10 years, serving certificate 1 year).

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["KeyPair", "expiry", "make_ca", "make_serving_cert", "service_dns_names", "write_bundle"]

# Certificates start slightly in the past so a node whose clock lags ours still accepts them.
_CLOCK_SKEW = timedelta(minutes=5)

#: The development CA's lifetime; a certificate it signs is clipped to it.
CA_DAYS = 3650

#: File names of a kubernetes.io/tls Secret plus the CA, as mounted into the webhook pod.
CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


def make_ca(
    common_name: str = "gpupolicy-webhook-ca", days: int = CA_DAYS, *, now: datetime | None = None
) -> KeyPair:
    """Create a self-signed CA that may sign end-entity certificates only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = (now or datetime.now(UTC)) - _CLOCK_SKEW
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    builder = (
        _base_builder(name, name, key.public_key(), start, start + _CLOCK_SKEW + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
    )
    return _sign(builder, signer=key, key=key)


def make_serving_cert(
    ca: KeyPair, dns_names: tuple[str, ...] | list[str], days: int = 365, *, now: datetime | None = None
) -> KeyPair:
    """Create a TLS server certificate for dns_names (the first is also the CN), signed by ca.

    Its validity is clipped to the CA's, since a chain is only valid while every certificate in it is.
    """
    names = tuple(dns_names)
    if not names:
        raise ValueError("a serving certificate needs at least one DNS name")
    ca_cert = ca.certificate
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key must be an ECDSA key made by make_ca")
    key = ec.generate_private_key(ec.SECP256R1())
    start = (now or datetime.now(UTC)) - _CLOCK_SKEW
    if not 1 <= days <= CA_DAYS:  # timedelta overflows near a million years, datetime at year 9999
        raise ValueError(f"a serving certificate lives 1 to {CA_DAYS} days, not {days}")
    end = min(start + _CLOCK_SKEW + timedelta(days=days), ca_cert.not_valid_after_utc)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    builder = (
        _base_builder(subject, ca_cert.subject, key.public_key(), start, end)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # ECDHE-ECDSA handshakes need only digitalSignature (RFC 5480 §3).
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
    )
    return _sign(builder, signer=ca_key, key=key)


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """Every name a client may use for a Service; the apiserver dials <svc>.<ns>.svc (webhook.md §1.10)."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


def write_bundle(directory: Path, ca: KeyPair, serving: KeyPair) -> dict[str, Path]:
    """Write ca.crt, tls.crt and tls.key (mode 0600) into directory, each atomically; return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        CA_FILE: (ca.cert_pem, 0o644),
        CERT_FILE: (serving.cert_pem, 0o644),
        KEY_FILE: (serving.key_pem, 0o600),
    }
    return {name: _write_atomically(directory / name, data, mode) for name, (data, mode) in files.items()}


def expiry(cert_pem: bytes) -> datetime:
    """The certificate's notAfter as an aware UTC datetime."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def _base_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    start: datetime,
    end: datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
    )


def _key_usage(
    *, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _sign(
    builder: x509.CertificateBuilder, *, signer: ec.EllipticCurvePrivateKey, key: ec.EllipticCurvePrivateKey
) -> KeyPair:
    cert = builder.sign(signer, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=key_pem)


def _write_atomically(path: Path, data: bytes, mode: int) -> Path:
    # mkstemp creates the file 0600, so the key is never readable by others, not even briefly; os.replace
    # then swaps it in whole, so a reader (the serving process reloading certificates) never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
