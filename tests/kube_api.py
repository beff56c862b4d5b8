"""A real kube-apiserver with its etcd on loopback, for the tests that need the API server's own answers.

The `kube_api` fixture (session scope) starts etcd and kube-apiserver, built by scripts/kube_binaries.py (and
built on the spot when the cache has none, so plain `pytest` works), on free 127.0.0.1 ports, with a static
admin token (and one token per identity of IDENTITIES, for what a non-admin may do) and serving certificates
signed by a throwaway CA made here with `cryptography`; it waits for
/readyz, hands the tests a `KubeAPI` (URL, token, CA, a kubeconfig for kubectl, a Python client) and stops
both processes at the end.  A build or start that fails fails every test that asked for the server: these
tests never skip.  Tests using the fixture carry the `kube_api` marker, so `pytest -m kube_api` runs them alone.

Nothing but the API server runs: no scheduler, no controller manager, no kubelet.  Objects are stored,
validated, defaulted and admitted exactly as in a cluster; nothing reconciles them (a Deployment gets no
ReplicaSet, a Pod is never scheduled).  The ServiceAccount admission plugin is off because without the
controller manager no namespace gets its `default` ServiceAccount (controller-runtime's envtest does the same).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import kube_binaries
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

T = TypeVar("T")
MARKER = "kube_api"
#: The API server's first start on a cold 2-core machine: etcd's bootstrap, then every post-start hook
#: (RBAC bootstrap roles, priority classes, the CRD and aggregation controllers) before /readyz says ok.
READY_TIMEOUT_SECONDS = 180.0
LOOPBACK = "127.0.0.1"
#: ClusterIPs are only allocated from this range, never routed: nothing here runs kube-proxy.
SERVICE_CIDR = "10.0.0.0/24"


# --- certificates ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class TestCA:
    """A throwaway CA and the serving certificates it signs, all for 127.0.0.1/localhost."""

    __test__ = False  # not a test class despite the name

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpupolicy test CA")])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.path = directory / "ca.crt"
        self.path.write_bytes(self.pem)

    @property
    def pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, name: str, dns: Sequence[str] = ("localhost",),
              ips: Sequence[str] = (LOOPBACK,)) -> Issued:
        """A serving certificate for the given names, written as <name>.crt and <name>.key (0600)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        issued = Issued(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key.touch(mode=0o600)
        issued.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
        return issued


# --- the running pair ------------------------------------------------------------------------------------


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now, distinct: all bound at once, so the kernel cannot hand one out twice."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def _quiet_environment() -> dict[str, str]:
    # A proxy variable would send the API server's webhook calls (to 127.0.0.1) elsewhere: drop them all.
    environment = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    environment["NO_PROXY"] = environment["no_proxy"] = f"{LOOPBACK},localhost"
    return environment


@dataclass(frozen=True)
class Answer:
    """An API server's reply: status, decoded body, and the texts of its Warning headers (RFC 7234 form
    `299 - "text"`, as admission warnings arrive)."""

    status: int
    body: Any
    warnings: tuple[str, ...] = ()

    @classmethod
    def read(cls, status: int, raw: bytes, warning_headers: Sequence[str]) -> Answer:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        return cls(status, body, tuple(_warning_text(h) for h in warning_headers))

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else str(self.body)


def _warning_text(header: str) -> str:
    # 299 - "text with \"escapes\"": the API server quotes the text (k8s.io/apiserver pkg/warning)
    match = re.fullmatch(r'\s*299\s+\S+\s+"(?P<text>(?:[^"\\]|\\.)*)"(?:\s+.*)?', header)
    return re.sub(r"\\(.)", r"\1", match["text"]) if match else header


@dataclass(frozen=True)
class Identity:
    """Who a static token authenticates as (request.userInfo: the API server adds system:authenticated)."""

    username: str
    groups: tuple[str, ...] = ()


#: The identities the server knows besides the admin, each with a token of its own.  RBAC grants them nothing: a
#: test that needs one to act binds it a role first (as a cluster's platform would).
IDENTITIES: dict[str, Identity] = {
    # a person in a tenant's group, and a tenant's service account with update on namespaces (a self-service
    # platform's role, or a careless binding): who must not move a namespace between tenants
    "tenant-person": Identity("dana@example.com", ("sandbox-devs",)),
    "tenant-service-account": Identity("system:serviceaccount:team-a:builder",
                                       ("system:serviceaccounts", "system:serviceaccounts:team-a")),
    # the GitOps controllers that apply the tree (the tenancy managers the spec defaults to)
    "argocd": Identity("system:serviceaccount:argocd:argocd-application-controller",
                       ("system:serviceaccounts", "system:serviceaccounts:argocd")),
    "flux": Identity("system:serviceaccount:flux-system:kustomize-controller",
                     ("system:serviceaccounts", "system:serviceaccounts:flux-system")),
    # the compiled webhook's ServiceAccount (admission.namespace gpupolicy-system): its node cache's identity
    "gpupolicy-webhook": Identity("system:serviceaccount:gpupolicy-system:gpupolicy-webhook",
                                  ("system:serviceaccounts", "system:serviceaccounts:gpupolicy-system")),
}
#: group system:masters: what RBAC's bootstrap policy binds to cluster-admin
ADMIN = Identity("admin", ("system:masters",))


@dataclass
class KubeAPI:
    """What a test gets: where the API server is, how to authenticate, and clients for it."""

    url: str
    token: str
    ca: TestCA
    kubeconfig: Path
    version: str
    directory: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    #: identity name (IDENTITIES) -> its bearer token
    tokens: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def ca_path(self) -> Path:
        return self.ca.path

    def client(self) -> Any:
        """A `kubernetes.client.ApiClient` bound to this server (a new one per call: the tests may close it)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.ca_path)
        configuration.api_key = {"authorization": self.token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = "application/json", *, identity: str | None = None) -> Answer:
        """One raw call: for the answers the generated client turns into exceptions (denials, warnings); as the
        admin, or as one of IDENTITIES."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        token = self.token if identity is None else self.tokens[identity]
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {token}", "Accept": "application/json", "Content-Type": content_type})
        context = ssl.create_default_context(cafile=str(self.ca_path))
        try:
            with urllib.request.urlopen(request, context=context, timeout=60) as response:
                return Answer.read(response.status, response.read(), response.headers.get_all("Warning") or [])
        except urllib.error.HTTPError as error:
            return Answer.read(error.code, error.read(), error.headers.get_all("Warning") or [])

    def kubeconfig_of(self, identity: str) -> Path:
        """A kubeconfig like the admin's that authenticates as one of IDENTITIES."""
        path = self.directory / f"kubeconfig-{identity}"
        if not path.exists():
            write_kubeconfig(path, self.url, self.ca.pem, self.tokens[identity])
        return path

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """kubectl against this server (KUBECONFIG set; nothing read from ~/.kube)."""
        from external_tools import require_tool

        environment = {**_quiet_environment(), "KUBECONFIG": str(self.kubeconfig)}
        result = subprocess.run([require_tool("kubectl"), *args], input=input, capture_output=True, text=True,
                                env=environment, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
                                 f"{result.stdout[-2000:]}")
        return result

    def log_tail(self, name: str = "kube-apiserver", lines: int = 60) -> str:
        log = self.directory / f"{name}.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""


def _wait(probe: Callable[[], bool], *, timeout: float, what: str, processes: Mapping[str, subprocess.Popen[bytes]],
          logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for name, process in processes.items():
            if process.poll() is not None:
                tail = (logs / f"{name}.log").read_text(errors="replace")[-4000:]
                raise RuntimeError(f"{name} exited with {process.returncode} while waiting for {what}:\n{tail}")
        if probe():
            return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {n}.log\n" + (logs / f"{n}.log").read_text(errors="replace")[-3000:]
                              for n in processes)
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
        time.sleep(0.1)


def _http_ok(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), context=context,
                                    timeout=5) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _stop(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


def _service_account_keys(directory: Path) -> tuple[Path, Path]:
    """The key pair kube-apiserver signs and verifies ServiceAccount tokens with (flags it requires to start)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = directory / "sa.key", directory / "sa.pub"
    private.touch(mode=0o600)
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _token_line(token: str, identity: Identity) -> str:
    # --token-auth-file: token,user,uid,"group1,group2" (k8s.io/apiserver pkg/authentication/token/tokenfile)
    return f'{token},{identity.username},{identity.username},"{",".join(identity.groups)}"\n'


def write_kubeconfig(path: Path, url: str, ca: bytes, token: str) -> None:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "gpupolicy-test",
        "clusters": [{"name": "gpupolicy-test", "cluster": {
            "server": url, "certificate-authority-data": base64.b64encode(ca).decode()}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "gpupolicy-test", "context": {"cluster": "gpupolicy-test", "user": "admin"}}],
    }
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=True))


@contextlib.contextmanager
def running_api_server(directory: Path, release: str | None = None) -> Iterator[KubeAPI]:
    """etcd + kube-apiserver in `directory` (data, certificates, logs), stopped on exit whatever happened.

    The release is a directory under scripts/kube/: by default $GPUPOLICY_KUBE_RELEASE, else the oldest the
    examples need (kube_binaries.DEFAULT_RELEASE), so the whole selection can run against a newer one."""
    release = release or os.environ.get("GPUPOLICY_KUBE_RELEASE", kube_binaries.DEFAULT_RELEASE)
    bin_dir = kube_binaries.ensure(release)
    version = kube_binaries.pinned(release).kubernetes
    directory.mkdir(parents=True, exist_ok=True)
    ca = TestCA(directory / "pki")
    serving = ca.issue("kube-apiserver", dns=("localhost", "kubernetes", "kubernetes.default.svc"))
    sa_key, sa_pub = _service_account_keys(directory / "pki")
    token = secrets.token_hex(24)
    others = {name: secrets.token_hex(24) for name in IDENTITIES}
    tokens = directory / "tokens.csv"
    tokens.touch(mode=0o600)
    tokens.write_text("".join(_token_line(t, who) for t, who in [(token, ADMIN)] + [
        (others[name], identity) for name, identity in IDENTITIES.items()]))
    processes: dict[str, subprocess.Popen[bytes]] = {}
    environment = _quiet_environment()
    try:
        etcd_port, peer_port, port = free_ports(3)
        etcd_url = f"http://{LOOPBACK}:{etcd_port}"
        with (directory / "etcd.log").open("wb") as sink:
            processes["etcd"] = subprocess.Popen([
                str(bin_dir / "etcd"), "--name", "test", "--data-dir", str(directory / "etcd"),
                "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                "--listen-peer-urls", f"http://{LOOPBACK}:{peer_port}",
                "--initial-advertise-peer-urls", f"http://{LOOPBACK}:{peer_port}",
                "--initial-cluster", f"test=http://{LOOPBACK}:{peer_port}",
                # a test store is thrown away: fsync buys nothing and costs seconds on a busy disk
                "--unsafe-no-fsync", "--log-level", "warn",
            ], stdout=sink, stderr=subprocess.STDOUT, env=environment, start_new_session=True)
        _wait(lambda: _http_ok(f"{etcd_url}/health"), timeout=60, what="etcd /health", processes=processes,
              logs=directory)

        url = f"https://{LOOPBACK}:{port}"
        with (directory / "kube-apiserver.log").open("wb") as sink:
            processes["kube-apiserver"] = subprocess.Popen([
                str(bin_dir / "kube-apiserver"),
                "--etcd-servers", etcd_url,
                "--bind-address", LOOPBACK, "--advertise-address", LOOPBACK, "--secure-port", str(port),
                "--tls-cert-file", str(serving.cert), "--tls-private-key-file", str(serving.key),
                "--cert-dir", str(directory / "pki"),
                "--token-auth-file", str(tokens), "--authorization-mode", "RBAC", "--anonymous-auth=false",
                "--service-account-issuer", "https://kubernetes.default.svc",
                "--service-account-key-file", str(sa_pub), "--service-account-signing-key-file", str(sa_key),
                "--service-cluster-ip-range", SERVICE_CIDR,
                # the `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints may not hold (1.37
                # refuses to start with it): nothing here dials that Service, so nothing maintains it
                "--endpoint-reconciler-type", "none",
                "--disable-admission-plugins", "ServiceAccount",
                "--allow-privileged=true",  # the device plugin and MIG manager DaemonSets are privileged
                "--profiling=false", "--v=1",
            ], stdout=sink, stderr=subprocess.STDOUT, env=environment, start_new_session=True)
        context = ssl.create_default_context(cafile=str(ca.path))
        _wait(lambda: _http_ok(f"{url}/readyz", context=context, token=token), timeout=READY_TIMEOUT_SECONDS,
              what="kube-apiserver /readyz", processes=processes, logs=directory)
        kubeconfig = directory / "kubeconfig"
        write_kubeconfig(kubeconfig, url, ca.pem, token)
        yield KubeAPI(url, token, ca, kubeconfig, version, directory, processes, others)
    finally:
        # the API server first (it holds etcd connections and would log errors about them), then its store
        for name in ("kube-apiserver", "etcd"):
            if name in processes:
                _stop(processes[name])


class Environments(Generic[T]):
    """Environments keyed by name (an example's API server and what runs beside it), each started when a test
    first asks for it and all stopped together at the end.

    A module-scoped fixture cannot be parametrized by example here: pytest groups such a fixture by parameter
    index, and a list of (example, case) parameters gives each case an index of its own, so the server would
    restart for every case.  Keeping each example's server until the module ends costs memory (about 300 MiB
    each), not time."""

    def __init__(self, start: Callable[[str], contextlib.AbstractContextManager[T]]) -> None:
        self._start = start
        self._running: dict[str, T] = {}
        self._stack = contextlib.ExitStack()

    def get(self, name: str) -> T:
        if name not in self._running:
            self._running[name] = self._stack.enter_context(self._start(name))
        return self._running[name]

    def close(self) -> None:
        self._running.clear()
        self._stack.close()


# --- the pytest side -------------------------------------------------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Whatever asks for the server is selected by `-m kube_api`, marked in its module or not.
    for item in items:
        if "kube_api" in getattr(item, "fixturenames", ()):
            item.add_marker(MARKER)


@pytest.fixture(scope="session")
def kube_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    """The session's API server.  Tests share it: each works in namespaces (or names) of its own."""
    try:
        with running_api_server(tmp_path_factory.mktemp("kube-api")) as api:
            yield api
    except (kube_binaries.BuildError, RuntimeError, OSError, subprocess.SubprocessError) as error:
        pytest.fail(f"the real API server could not be built or started: {error}", pytrace=False)
