"""gpupolicy cluster: compare a live cluster with a spec (verify), draft a spec from one (discover), or judge its
running workloads by a spec (audit)."""

from __future__ import annotations

import argparse
import io
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cluster.resources import Snapshot
    from cluster.snapshot import Access
    from policy.audit.reports import Options
    from policy.audit.scan import Audit
    from policy.resolved.offers import AdmissionPolicy
    from policy.spec.model import ClusterGPUPolicy

# A spec whose only errors are overlapping selectors can still be verified: the cluster then shows which nodes
# really are selected twice, which is more useful than refusing.
_VERIFIABLE_DESPITE = frozenset({"overlapping-node-classes"})
#: `cluster audit --output`: cli/audit_output.py renders each (defined here so `--help` imports nothing of it)
AUDIT_OUTPUTS = ("text", "json", "github", "policy-report", "openreports")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="SUBCOMMAND", parser_class=type(parser))
    verify = actions.add_parser(
        "verify", help="report where the live cluster differs from a spec (read-only)",
        description="Read nodes, device-plugin DaemonSets, Pending GPU pods and their events (from the cluster, or "
                    "from files with --from-file), and report per node class and per node where the cluster differs "
                    "from the spec. Exit 1 when it differs.")
    verify.add_argument("-p", "--policy", required=True, metavar="SPEC", help="the cluster spec to verify against")
    verify.add_argument("--output", "-O", choices=("text", "json"), default="text",
                        help="how to print the result (default: text)")
    _access_arguments(verify)
    discover = actions.add_parser(
        "discover", help="draft a spec from the cluster's GPU nodes (read-only)",
        description="Group the GPU nodes (of the cluster, or of files with --from-file) by GPU Feature Discovery and "
                    "instance-type labels and print a draft spec with one class per group, disjoint selectors, the "
                    "sharing the nodes run now (MIG layout, time-slicing, MPS) and their taints.")
    discover.add_argument("--name", help="metadata.name of the draft (default: derived from the context)")
    discover.add_argument("--schema", metavar="PATH",
                          help="JSON Schema location for the yaml-language-server line (default: the relative path "
                               "to schemas/cluster-policy.schema.json where the draft goes to a file, with -o or "
                               "> FILE, in a directory at or below one holding it, as gpupolicy schema --write "
                               "schemas writes it; otherwise no such line, and a comment saying how to get one)")
    discover.add_argument("-o", "--out", metavar="FILE",
                          help="write the draft to FILE instead of standard output (-: standard output)")
    _access_arguments(discover)
    audit = actions.add_parser(
        "audit", help="judge every running GPU workload by a spec's admission rules (read-only unless "
                      "--write-reports)",
        description="Read the Pods, pod controllers and Namespaces of the cluster (or of files with --from-file: "
                    "kubectl get -A -o yaml output) and judge each as the admission webhook would at its creation. "
                    "One result per owning workload: an object folds into its controller owner only when the "
                    "ownerReference resolves (uid, kind and name) to an object read with the same verdict. Exit 1 "
                    "when a workload breaks an enforced rule (0 with --write-reports once the reports are written).")
    audit.add_argument("-p", "--policy", required=True, metavar="SPEC", help="the cluster spec to judge by")

    audit.add_argument("--output", "-O", choices=AUDIT_OUTPUTS, default="text",
                       help="text, json, github annotations, or report objects: wgpolicyk8s.io/v1alpha2 PolicyReport "
                            "per namespace and a ClusterPolicyReport (policy-report), openreports.io/v1alpha1 Report "
                            "and ClusterReport (openreports) (default: text)")
    audit.add_argument("--fail-only", action="store_true",
                       help="leave passing (and unchecked) workloads out of the results; summaries still count them")
    audit.add_argument("--max-results", type=int, default=None, metavar="N",
                       help="keep at most N results (per report for report objects), counting the rest "
                            "(default: 500 per report, all otherwise)")
    audit.add_argument("--write-reports", action="store_true",
                       help="write the reports (-O policy-report, the default here, or openreports) to the cluster "
                            "by server-side apply (field manager gpupolicy-audit), one per namespace with results, "
                            "and delete this policy's stale ones; prints what it wrote and exits 0 once written, "
                            "violations or not (they are in the reports): what the compiled audit CronJob runs")
    _access_arguments(audit)
    reconcile = actions.add_parser(
        "reconcile-labels", help="keep the label plan's node labels on every node of its classes (in-cluster)",
        description="Apply the node labels of a compiled label plan (node-labels/ in the tree) to every node a class "
                    "selects, with server-side apply as field manager gpupolicy-node-labels, and keep them as nodes "
                    "join, change or leave. Labels another writer set are reported (events, metrics), never "
                    "overwritten. Runs until stopped; --once reconciles every node once and exits.")
    reconcile.add_argument("--plan", required=True, metavar="FILE", help="the plan.json of the node-labels ConfigMap")
    reconcile.add_argument("--once", action="store_true", help="reconcile every node once, then exit")
    reconcile.add_argument("--metrics-port", type=int, default=0, metavar="PORT",
                           help="serve Prometheus metrics (and /healthz) on this port (default: off)")
    reconcile.add_argument("--watch-timeout", type=int, default=300, metavar="SECONDS",
                           help="end each watch after this long and list again (default: %(default)s)")
    _access_arguments(reconcile)


def _access_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--from-file", action="append", default=[], metavar="FILE", dest="from_files",
                        help="read recorded objects instead of a cluster: kubectl get -o yaml (or json) output, a "
                             "List or several documents of Nodes, DaemonSets, Pods, ... (repeatable; - for stdin)")
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: its current-context)")
    parser.add_argument("--request-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="give up on an API request after this long (default: %(default)g)")


def run(args: argparse.Namespace) -> int:
    from cli.main import ExitCode
    from cluster import ClusterError

    if args.action is None:
        print("gpupolicy cluster: choose an action: verify, discover, audit or reconcile-labels (see gpupolicy "
              "cluster --help)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.from_files and (args.kubeconfig or args.context):
        print(f"gpupolicy cluster {args.action}: error: --from-file reads recorded objects, not a cluster: drop "
              "--kubeconfig and --context, or --from-file", file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        if args.action == "reconcile-labels":
            return _reconcile(args)
        if args.action == "audit":
            return _audit(args)
        return _verify(args) if args.action == "verify" else _discover(args)
    except ClusterError as err:
        print(f"gpupolicy cluster {args.action}: error: {err.message}\n  hint: {err.hint}", file=sys.stderr)
        return ExitCode.BAD_INPUT


def _access(args: argparse.Namespace) -> Access:
    from cluster.snapshot import Access

    return Access(args.kubeconfig, args.context, args.request_timeout)


def _verify(args: argparse.Namespace) -> int:
    from cli.main import ExitCode
    from cluster import expected, render, snapshot, verify
    from compiler import compile_policy

    policy = _load(args.policy)
    if policy is None:
        return ExitCode.BAD_INPUT
    wanted = expected.from_tree(compile_policy(policy))
    seen = _recorded(args) if args.from_files else snapshot.read_snapshot(
        _access(args), scope="verify", configmap_namespaces=wanted.namespaces,
        # A DRA class's GPUs are in ResourceSlices; without one, verify lists nothing it does not compare.
        resource_slices=any(nc.allocation == "dra" for nc in policy.spec.node_classes))
    if seen is None:
        return ExitCode.BAD_INPUT
    result = verify.verify(seen, policy, wanted)
    code = ExitCode.OK if result.agrees else ExitCode.FINDINGS
    sys.stdout.write(render.render_json(result, int(code)) if args.output == "json" else render.render_text(result))
    return code


def _recorded(args: argparse.Namespace) -> Snapshot | None:
    """The snapshot recorded in --from-file files, or None after printing what made them unreadable."""
    from cli.manifests import read_recorded
    from cluster.records import snapshot_from

    documents = read_recorded(args.from_files)
    if documents is None:
        return None
    seen, skipped = snapshot_from(documents, source=", ".join(args.from_files))
    if skipped:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(skipped.items()))
        print(f"gpupolicy cluster {args.action}: note: not read ({kinds}): only Nodes, DaemonSets, Pods, Events, "
              "ReplicaSets, Deployments, ConfigMaps and ResourceSlices matter here", file=sys.stderr)
    return seen


def _audit(args: argparse.Namespace) -> int:
    from cli.audit_output import render
    from cli.inputs import load_spec
    from cli.main import ExitCode
    from cli.reporters import Report, render_text
    from policy.admission.engine import Engine
    from policy.audit import reports, scan
    from policy.resolved.offers import build_admission_policy

    if args.max_results is not None and args.max_results < 0:
        print("gpupolicy cluster audit: error: --max-results must be 0 or more", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.write_reports:
        if args.from_files:
            print("gpupolicy cluster audit: error: --write-reports writes to the cluster it reads, not to files\n"
                  "  hint: drop --from-file (or --write-reports, and apply the -O policy-report output yourself)",
                  file=sys.stderr)
            return ExitCode.BAD_INPUT
        if args.output == "text":
            args.output = "policy-report"
        if args.output not in ("policy-report", "openreports"):
            print(f"gpupolicy cluster audit: error: --write-reports writes report objects, not {args.output}\n"
                  "  hint: pass -O policy-report (the default with --write-reports) or -O openreports",
                  file=sys.stderr)
            return ExitCode.BAD_INPUT
    report = Report()
    resolved, found = load_spec(args.policy)
    if resolved is None:
        report.files += 1
        report.extend(found)
        sys.stderr.write(render_text(report))
        return ExitCode.BAD_INPUT
    policy = build_admission_policy(resolved)
    if args.from_files:
        from cli.recorded import read_objects

        objects = read_objects(args.from_files)
    else:
        from cluster import snapshot

        objects, missing = snapshot.read_objects(_access(args), scan.watched_kinds(policy.workload_kinds))
        if missing:
            print(f"gpupolicy cluster audit: note: not served here, so not read: {', '.join(missing)}",
                  file=sys.stderr)
    if objects is None:
        return ExitCode.BAD_INPUT
    result = scan.audit(Engine(policy, memo_size=scan.MEMO_SIZE), objects, scan.namespace_labels(objects))
    default_cap = reports.DEFAULT_MAX_RESULTS if args.output in ("policy-report", "openreports") else len(objects)
    options = reports.Options(fail_only=args.fail_only,
                              max_results=default_cap if args.max_results is None else args.max_results)
    if not args.write_reports:
        sys.stdout.write(render(args.output, result, policy, options))
    counts = result.counts()
    print(f"gpupolicy cluster audit: {result.objects} object(s) read, {len(result.results)} GPU workload(s): "
          f"{counts['fail']} failing, {counts['warn']} with warnings, {counts['pass']} passing, "
          f"{counts['skip']} not checked", file=sys.stderr)
    if args.write_reports:
        _write_reports(args, result, policy, options)
        return ExitCode.OK
    return ExitCode.FINDINGS if result.failed else ExitCode.OK


def _write_reports(args: argparse.Namespace, result: Audit, policy: AdmissionPolicy, options: Options) -> None:
    """Apply the reports, delete the stale ones, and say on standard output what was done (one line each)."""
    from dataclasses import replace

    from cluster import audit_reports
    from policy.audit import reports

    flavor: reports.Flavor = "openreports" if args.output == "openreports" else "wgpolicy"
    built = reports.build_reports(result, policy, replace(options, flavor=flavor))
    done = audit_reports.write_reports(_access(args), flavor, policy.cluster, built)
    replaced = {(s.kind, s.namespace, s.name) for s in done.plan.replaced}
    for report in done.plan.apply:
        meta = report["metadata"]
        key = (report["kind"], meta.get("namespace", ""), meta["name"])
        how = "replaced (the policy changed)" if key in replaced else "applied"
        print(f"{how} {report['kind']} {meta.get('namespace', '') + '/' if meta.get('namespace') else ''}"
              f"{meta['name']}: {report['summary']['fail']} fail, {report['summary']['warn']} warn, "
              f"{report['summary']['pass']} pass")
    for stale in done.deleted:
        print(f"deleted {stale.kind} {stale.namespace + '/' if stale.namespace else ''}{stale.name}: stale "
              "(no result there any more)")


def _load(path: str) -> ClusterGPUPolicy | None:
    """The policy, or None after printing why it cannot be verified against."""
    from cli.inputs import read_text
    from cli.reporters import Report, render_text
    from policy.load import load_policy
    from policy.spec.diagnostics import Diagnostic

    # Not load_spec: verify can look past some errors, so it needs the policy even when they are found.
    text = read_text(path)
    if isinstance(text, Diagnostic):
        result, found = None, [text]
    else:
        result = load_policy(text, filename=path)
        found = [d for d in result.diagnostics if d.severity == "error"]
    blocking = [d for d in found if d.code not in _VERIFIABLE_DESPITE]
    if result is None or result.policy is None or blocking:
        sys.stderr.write(render_text(Report(diagnostics=blocking or found, files=1)))
        print("gpupolicy cluster verify: error: the spec cannot be used as it is, so there is nothing sound to verify "
              "against\n  hint: fix what is reported above (gpupolicy validate checks the spec)", file=sys.stderr)
        return None
    if found:
        print(f"gpupolicy cluster verify: note: the spec has {len(found)} error(s) verify can look past "
              f"({', '.join(sorted({d.code for d in found}))}); gpupolicy validate lists them", file=sys.stderr)
    return result.policy


def _discover(args: argparse.Namespace) -> int:
    from cli.main import ExitCode
    from cli.reporters import Report, render_text
    from cluster import discover, snapshot
    from policy.load import load_policy

    if args.out is not None and not args.out.strip():
        print("gpupolicy cluster discover: -o needs a file name (or - for standard output)", file=sys.stderr)
        return ExitCode.BAD_INPUT
    seen = _recorded(args) if args.from_files else snapshot.read_snapshot(_access(args), scope="discover",
                                                                                  resource_slices=True)
    if seen is None:
        return ExitCode.BAD_INPUT
    name = args.name or (discover.dns_label(seen.context) if not args.from_files else "") or "discovered"
    if args.out == "-":  # as everywhere in this command line, - is the standard stream
        args.out = None
    target = Path(args.out) if args.out else _stdout_file()
    text = discover.render_draft(discover.discover(seen, name=name), schema=args.schema or _schema_beside(target))
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as err:
            print(f"gpupolicy cluster discover: cannot write {args.out}: {err.strerror or err}", file=sys.stderr)
            return ExitCode.BAD_INPUT
    else:
        sys.stdout.write(text)
    errors = [d for d in load_policy(text, filename="<draft>").diagnostics if d.severity == "error"]
    if errors:
        sys.stderr.write(render_text(Report(diagnostics=errors, files=1)))
        print("gpupolicy cluster discover: the draft needs the edits above before it validates", file=sys.stderr)
        return ExitCode.FINDINGS
    return ExitCode.OK


def _stdout_file() -> Path | None:
    """The regular file standard output goes to (`discover > cluster.yaml`), where the system says (Linux's
    /proc/self/fd); None for a terminal, a pipe, or where it cannot be told."""
    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        found = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return found if found.is_absolute() and found.is_file() else None


def _schema_beside(target: Path | None) -> str | None:
    """The path from the draft's directory to schemas/cluster-policy.schema.json in it or the nearest directory above
    holding one (as the examples' specs name it); None where there is none, so no unresolvable reference is written."""
    from cluster.discover import SCHEMA_FILE

    if target is None:
        return None
    directory = target.resolve().parent
    for place in (directory, *directory.parents):
        schema = place / "schemas" / SCHEMA_FILE
        if schema.is_file():
            return Path(os.path.relpath(schema, directory)).as_posix()
    return None


def _reconcile(args: argparse.Namespace) -> int:
    import logging
    import signal
    from pathlib import Path

    from cli.main import ExitCode
    from cluster import reconciler, snapshot
    from policy.resolved.node_labels import plan_from_json

    try:
        plan = plan_from_json(Path(args.plan).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        print(f"gpupolicy cluster reconcile-labels: error: cannot read the label plan {args.plan}: {err}\n"
              "  hint: pass the plan.json of the compiled tree's node-labels ConfigMap", file=sys.stderr)
        return ExitCode.BAD_INPUT
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    api = snapshot.core_api(_access(args))
    metrics = reconciler.Metrics()
    worker = reconciler.Reconciler(api, plan, metrics, watch_timeout_seconds=args.watch_timeout,
                                   request_timeout_seconds=args.request_timeout)
    if args.once:
        worker.resync()
        return ExitCode.OK
    if args.metrics_port:
        reconciler.serve_metrics(worker, args.metrics_port)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop.set())
    signal.signal(signal.SIGINT, lambda *_: worker.stop.set())
    worker.run()
    return ExitCode.OK
