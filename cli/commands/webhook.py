"""gpupolicy webhook: serve the admission webhook over TLS, or make development certificates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from webhook.settings import Settings

# The one sanctioned compiler → webhook import happens inside run(), so `gpupolicy --help` stays instant
# and the compiler never loads flask, gunicorn or prometheus_client unless this command runs.

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="webhook_command", metavar="SUBCOMMAND", required=True)

    serve = sub.add_parser(
        "serve", help="serve /validate over TLS with gunicorn",
        description="Serve the admission webhook over TLS (gunicorn's master, one event loop per worker "
                    "process). Every option also reads a GPUPOLICY_* variable (GPUPOLICY_POLICY, "
                    "GPUPOLICY_CERT_DIR, GPUPOLICY_PORT, GPUPOLICY_METRICS_PORT, GPUPOLICY_WORKERS, "
                    "GPUPOLICY_MAX_CONNECTIONS, GPUPOLICY_HEADER_TIMEOUT_SECONDS, GPUPOLICY_REQUEST_TIMEOUT_SECONDS, "
                    "GPUPOLICY_DRAIN_SECONDS, GPUPOLICY_NODE_CACHE, GPUPOLICY_KUBECONFIG, "
                    "...); flags win. The policy and certificate files are re-read when they change.",
    )
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--policy", metavar="FILE", help="the compiled admission-policy.json (production)")
    source.add_argument("--spec", metavar="FILE", help="a ClusterGPUPolicy YAML, compiled in memory (local use)")
    serve.add_argument("--cert-dir", metavar="DIR", help="directory holding tls.crt and tls.key (a mounted "
                                                         "kubernetes.io/tls Secret)")
    serve.add_argument("--cert", metavar="FILE", help="serving certificate (PEM), instead of --cert-dir")
    serve.add_argument("--key", metavar="FILE", help="its private key (PEM)")
    serve.add_argument("--bind", metavar="ADDR", help="address to listen on (default 0.0.0.0)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8443)")
    serve.add_argument("--metrics-port", type=int, help="also serve /metrics and the probes over plain HTTP "
                                                        "on this port (default 0: not at all)")
    serve.add_argument("--workers", type=int, help="worker processes (default 2)")
    serve.add_argument("--threads", type=int, help="review threads per worker, beside its event loop (default 2)")
    serve.add_argument("--max-connections", type=int, help="open connections per worker (default 500); at the cap "
                                                           "the connection idle longest is closed for a new one")
    serve.add_argument("--review-budget", type=float, metavar="SECONDS",
                       help="how long one review may take before it is denied, never allowed (default 1; the "
                            "compiled Deployment sets a third of timeoutSeconds)")
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help="default info")
    serve.add_argument("--node-cache", action=argparse.BooleanOptionalAction, default=None,
                       help="keep the labels of every node (list and watch, get/list/watch on nodes), so a pod "
                            "naming its node is judged on exactly that node's classes (default off; the compiled "
                            "Deployment turns it on)")
    serve.add_argument("--kubeconfig", metavar="FILE", help="the node cache's API server and credentials (default: "
                                                          "the pod's ServiceAccount)")

    certs = sub.add_parser(
        "certs", help="write a development CA and serving certificate",
        description="Write ca.crt, tls.crt and tls.key (0600) for the webhook Service, for local runs and "
                    "tests. In a cluster, cert-manager issues and rotates the certificate. Refuses to write "
                    "into a compiled tree: private keys never go into Git.",
    )
    certs.add_argument("--out", metavar="DIR", required=True, type=Path, help="directory to write into")
    certs.add_argument("--service", default="gpupolicy-webhook", help="Service name (default %(default)s)")
    certs.add_argument("--namespace", default="gpupolicy-system", help="its namespace (default %(default)s)")
    certs.add_argument("--days", type=int, default=365,
                       help="serving certificate lifetime in days, 1 to 3650 (default 365)")
    certs.add_argument("--force", action="store_true", help="replace certificates already in DIR")


def run(args: argparse.Namespace) -> int:
    from cli.main import ExitCode

    try:
        if args.webhook_command == "serve":
            return _serve(args)
        return _certs(args)
    except _UsageError as err:
        print(f"gpupolicy webhook {args.webhook_command}: error: {err}", file=sys.stderr)
        return ExitCode.BAD_INPUT


class _UsageError(Exception):
    pass


def _serve(args: argparse.Namespace) -> int:
    from webhook import serve
    from webhook.settings import Settings, SettingsError

    try:
        settings = Settings.from_env(
            policy_file=args.policy, spec_file=args.spec, cert_dir=args.cert_dir, cert_file=args.cert,
            key_file=args.key, bind=args.bind, port=args.port, metrics_port=args.metrics_port,
            workers=args.workers, threads=args.threads,
            max_connections=args.max_connections, review_budget_seconds=args.review_budget,
            log_level=args.log_level, node_cache=args.node_cache, kubeconfig=args.kubeconfig,
        )
    except SettingsError as err:
        raise _UsageError(str(err)) from None
    if settings.policy_path is None:
        raise _UsageError("give the policy: --policy admission-policy.json or --spec cluster.yaml")
    if settings.cert_file is None or settings.key_file is None:
        raise _UsageError("the webhook serves TLS only: give --cert-dir, or --cert and --key "
                          "(gpupolicy webhook certs --out DIR makes a development pair)")
    for path in (settings.policy_path, settings.cert_file, settings.key_file):
        if not path.is_file():
            raise _UsageError(f"{path}: no such file")
    _check_policy(settings)
    nodes = None
    if settings.node_cache:
        # The one place the webhook meets the live-cluster code: each worker builds its cache from this after the
        # fork (pyproject.toml's contracts sanction this import and no other).
        from cluster import ClusterError
        from cluster.nodes import cache_factory

        try:
            nodes = cache_factory(str(settings.kubeconfig) if settings.kubeconfig else None,
                                  fetch_timeout_seconds=settings.node_fetch_timeout_seconds)
        except ClusterError as err:
            raise _UsageError(f"{err.message} ({err.hint})") from None
    try:
        return serve.run(settings, nodes=nodes)
    except SettingsError as err:
        raise _UsageError(str(err)) from None


def _check_policy(settings: Settings) -> None:
    """Fail at start, with the reason, when the first policy cannot load: a server that starts and stays
    unready says nothing to whoever started it. Later changes keep the last good policy instead."""
    import yaml
    from pydantic import ValidationError

    from policy.spec.diagnostics import PolicyError
    from webhook.store import parse_policy

    path = settings.policy_path
    assert path is not None
    data = path.read_bytes()
    try:
        parse_policy(data, fmt=settings.policy_format, filename=str(path))
    except PolicyError as err:
        raise _UsageError(f"{path} is not a valid spec: {err}; run gpupolicy validate {path}") from None
    except (ValidationError, ValueError, yaml.YAMLError) as err:
        if settings.policy_format == "admission-policy" and data.lstrip()[:1] not in (b"{", b"["):
            raise _UsageError(f"{path} is not a compiled admission-policy.json; for a ClusterGPUPolicy YAML use "
                              "--spec instead of --policy") from None
        first = str(err).splitlines()[0]
        raise _UsageError(f"{path} cannot be loaded as {settings.policy_format}: {first}") from None


def _certs(args: argparse.Namespace) -> int:
    import re

    from webhook import certs

    out: Path = args.out
    tree = _compiled_tree(out)
    if tree is not None:
        raise _UsageError(f"refusing to write private keys into {tree}: it holds a kustomization, so it is a "
                          "compiled tree that goes into Git; write them outside the repository instead")
    for name, value in (("--service", args.service), ("--namespace", args.namespace)):
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value):
            raise _UsageError(f"{name} {value!r} is not a DNS label")
    if not 1 <= args.days <= certs.CA_DAYS:
        raise _UsageError(f"--days must be between 1 and {certs.CA_DAYS} (got {args.days}): the development CA is "
                          f"valid for {certs.CA_DAYS} days, and no certificate it signs can outlive it")
    existing = [name for name in (certs.CA_FILE, certs.CERT_FILE, certs.KEY_FILE) if (out / name).exists()]
    if existing and not args.force:
        raise _UsageError(f"{out} already holds {', '.join(existing)}; pass --force to replace them")
    # localhost too, so `webhook serve` can be tried with curl --cacert on this machine
    names = (*certs.service_dns_names(args.service, args.namespace), "localhost")
    ca = certs.make_ca()
    serving = certs.make_serving_cert(ca, names, days=args.days)
    try:
        written = certs.write_bundle(out, ca, serving)
    except OSError as err:
        raise _UsageError(f"cannot write into {out}: {err.strerror or err}") from None
    print(f"wrote {', '.join(str(p) for p in written.values())}", file=sys.stderr)
    print(f"serving certificate for {', '.join(names)}, valid until "
          f"{certs.expiry(serving.cert_pem):%Y-%m-%d %H:%M} UTC", file=sys.stderr)
    return 0


def _compiled_tree(directory: Path) -> Path | None:
    """The directory, or its nearest ancestor, that holds a kustomization file; None if none does."""
    for candidate in (directory.resolve(), *directory.resolve().parents):
        if any((candidate / name).is_file() for name in KUSTOMIZATION_FILES):
            return candidate
    return None
