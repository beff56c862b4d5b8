"""`gpupolicy cluster audit` on 5,000 pods and `gpupolicy diff` of the mixed-fleet example: time and memory.

    .venv/bin/python bench/audit_bench.py            # 5,000 pods, about a minute
    .venv/bin/python bench/audit_bench.py --quick    # 200 pods (the smoke test)

The cluster is the mixed-fleet dump of tests/audit (research, dev and prod namespaces) scaled up: Deployments of
10 replicas each, with their ReplicaSet, in as many namespaces as it takes, half of them the research tenant's MPS
workloads that the spec change of tests/audit (research loses MPS) turns into violations. Two shapes:
``templates`` (every Deployment its own pod template: each judged afresh, the engine's memo never hits) and
``replicas`` (one template per namespace, as a few large services look); the dump as `kubectl get -o json` and
`-o yaml` write it. Each run is a child process of the
command as a user runs it (end to end: YAML parsing, the engine, the PolicyReports as YAML), its wall time and
peak RSS taken from the operating system; then the steps in this process: parsing, the audit, the reports.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "audit")]

import build_audit_dumps  # noqa: E402

MIXED = ROOT / "examples" / "clusters" / "mixed-fleet" / "cluster.yaml"
REPLICAS = 10


def head_spec(directory: Path) -> Path:
    path = directory / "head.yaml"
    path.write_text(MIXED.read_text(encoding="utf-8").replace("allow: [exclusive, mps, time-slicing]",
                                                              "allow: [exclusive, time-slicing]"), encoding="utf-8")
    return path


def cluster(pods: int, shape: str) -> list[dict[str, Any]]:
    """Namespaces alternately research (a100-mps) and dev (t4-dev), 50 Deployments each."""
    source = build_audit_dumps.manifest("nvidia-docs-time-slicing-verification-deployment.yaml")
    objects: list[dict[str, Any]] = []
    deployments = max(pods // REPLICAS, 1)
    for d in range(deployments):
        ns_index, research = d // 50, (d // 50) % 2 == 0
        ns = f"{'research' if research else 'dev'}-{ns_index}"
        if d % 50 == 0:
            objects.append(build_audit_dumps.namespace(ns, **{"gpu-tier": "research" if research else "dev"}))
        dep = copy.deepcopy(source)
        dep["metadata"]["name"] = f"svc-{d}"
        if shape == "templates":  # a distinct template: another image tag per Deployment
            dep["spec"]["template"]["spec"]["containers"][0]["image"] += f"-{d}"
        built = build_audit_dumps.deployment(dep, ns, {"node-pool": "a100-mps" if research else "t4-dev"},
                                             replicas=3, template_hash=f"{d:09x}"[-9:])
        deployment, replicaset, *three = built
        replicaset["spec"]["replicas"] = REPLICAS
        extra = [copy.deepcopy(three[0]) for _ in range(REPLICAS - 3)]
        for i, pod in enumerate(extra):
            pod["metadata"]["name"] = f"{replicaset['metadata']['name']}-p{i:04d}"
            pod["metadata"]["uid"] = build_audit_dumps.uid(ns, "Pod", pod["metadata"]["name"])
        objects.extend([deployment, replicaset, *three, *extra])
    return objects


#: Runs gpupolicy, then prints its own peak RSS: /proc/self/status VmHWM is this program's high-water mark alone,
#: where getrusage's ru_maxrss also keeps the forking parent's (Linux carries it across exec).
_WRAPPER = """
import sys
from cli.main import main
code = main(sys.argv[1:])
sys.stdout.flush()
status = open('/proc/self/status').read()
sys.stderr.write('\\nVmHWM ' + status.split('VmHWM:')[1].split()[0] + '\\n')
sys.exit(code)
"""


def child(args: list[str]) -> tuple[float, float, int]:
    """Wall seconds, peak RSS (MiB) and exit code of one gpupolicy run in its own process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"gpupolicy {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    peak_kib = int(done.stderr.rsplit("VmHWM ", 1)[1].split()[0])
    return wall, peak_kib / 1024, done.returncode


def steps(spec: Path, dump: Path) -> dict[str, float]:
    """Each step in this process: reading the dump as the command does (cli/recorded.py), the audit, the reports."""
    from policy.admission.engine import Engine
    from policy.audit import reports, scan
    from policy.load import load_policy
    from policy.resolved.offers import build_admission_policy

    out: dict[str, float] = {}
    from cli.recorded import read_objects

    start = time.perf_counter()
    objects = read_objects([str(dump)])
    assert objects is not None
    out["read"] = time.perf_counter() - start
    policy = build_admission_policy(load_policy(spec.read_text(encoding="utf-8"), filename="head.yaml").resolved)
    start = time.perf_counter()
    found = scan.audit(Engine(policy, memo_size=scan.MEMO_SIZE), objects, scan.namespace_labels(objects))
    out["audit"] = time.perf_counter() - start
    start = time.perf_counter()
    reports.build_reports(found, policy)
    out["reports"] = time.perf_counter() - start
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 pods")
    args = parser.parse_args()
    pods = 200 if args.quick else 5000
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        spec = head_spec(directory)
        print(f"## cluster audit, {pods:,} pods ({REPLICAS} per Deployment), mixed-fleet with research's MPS removed\n")
        print("| shape | input | objects | MiB | end to end (s) | peak RSS (MiB) | exit | read (s) | audit (s) | "
              "reports (s) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for shape, form in (("templates", "json"), ("replicas", "json"), ("templates", "yaml")):
            objects = cluster(pods, shape)
            dump = directory / f"{shape}.{form}"
            listed = {"apiVersion": "v1", "kind": "List", "items": objects}
            dump.write_text(json.dumps(listed, indent=4) if form == "json" else
                            yaml.dump(listed, Dumper=build_audit_dumps._Dumper), encoding="utf-8")
            wall, peak, code = child(["cluster", "audit", "-p", str(spec), "-f", str(dump), "-O", "policy-report"])
            timed = steps(spec, dump)
            print(f"| {shape} | {form} | {len(objects):,} | {dump.stat().st_size / 2**20:.1f} | {wall:.2f} | "
                  f"{peak:.0f} | {code} | {timed['read']:.2f} | {timed['audit']:.2f} | {timed['reports']:.3f} |")
        print("\n## diff of the mixed-fleet example (research loses MPS), with and without the 5,000-pod workloads\n")
        print("| run | end to end (s) | peak RSS (MiB) | exit |")
        print("|---|---|---|---|")
        for name, extra in (("specs only", []), ("--workloads", ["--workloads", str(directory / "templates.json")])):
            wall, peak, code = child(["diff", str(MIXED), str(spec), "-O", "json", *extra])
            print(f"| {name} | {wall:.2f} | {peak:.0f} | {code} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
