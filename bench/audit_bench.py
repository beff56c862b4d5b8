"""`gpupolicy cluster audit` on 5,000 pods, the in-cluster audit's run, and `gpupolicy diff` of the mixed-fleet
example: time and memory.

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

The in-cluster run is what the compiled CronJob's `cluster audit --write-reports` does, minus the network: the
objects decoded from JSON as the paged lists arrive (finished pods already left out by the API server), the spec
loaded, the audit, the reports, the write plan against the reports of an earlier run under the other policy, and
each report's request body; in a process of its own, whose peak RSS is what the CronJob's memory limit must hold.
Besides the benchmark's lean pods, ``full`` pods carry what a real API server returns (managedFields, status
conditions and container statuses, the defaulted spec, the ServiceAccount token volume): about 6 KiB each.
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


def full(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods as a live list returns them: the fields the API server, the scheduler and the kubelet add."""
    out = []
    for obj in objects:
        if obj["kind"] != "Pod":
            out.append(obj)
            continue
        pod = copy.deepcopy(obj)
        name, spec = pod["metadata"]["name"], pod["spec"]
        stamp = "2026-11-30T08:00:00Z"
        pod["metadata"]["generateName"] = name.rsplit("-", 1)[0] + "-"
        pod["metadata"]["managedFields"] = [
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": manager, "operation": "Update",
             "subresource": sub, "time": stamp, "fieldsV1": {f"f:{k}": {f"f:{x}": {} for x in range(12)}
                                                            for k in ("metadata", "spec", "status")}}
            for manager, sub in (("kube-controller-manager", ""), ("kubelet", "status"))]
        spec.update({"dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "nodeName": f"node-{hash(name) % 97}",
                     "preemptionPolicy": "PreemptLowerPriority", "priority": 0, "restartPolicy": "Always",
                     "schedulerName": "default-scheduler", "securityContext": {}, "serviceAccount": "default",
                     "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
                     "tolerations": [*spec.get("tolerations", []), *(
                         {"effect": "NoExecute", "key": f"node.kubernetes.io/{k}", "operator": "Exists",
                          "tolerationSeconds": 300} for k in ("not-ready", "unreachable"))],
                     "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                         {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                         {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                         {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath":
                                                                  "metadata.namespace"}, "path": "namespace"}]}}]}}]})
        for c in spec.get("containers", []):
            c.update({"imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log",
                      "terminationMessagePolicy": "File", "volumeMounts": [
                          {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                           "name": "kube-api-access-x7k2p", "readOnly": True}]})
        pod["status"] = {
            "phase": "Running", "hostIP": "10.0.3.17", "podIP": "10.244.7.31", "qosClass": "BestEffort",
            "hostIPs": [{"ip": "10.0.3.17"}], "podIPs": [{"ip": "10.244.7.31"}], "startTime": stamp,
            "conditions": [{"lastProbeTime": None, "lastTransitionTime": stamp, "status": "True", "type": t}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                     "PodScheduled")],
            "containerStatuses": [{"containerID": "containerd://" + "0f" * 32, "image": c["image"],
                                   "imageID": c["image"] + "@sha256:" + "ab" * 32, "lastState": {}, "name": c["name"],
                                   "ready": True, "restartCount": 0, "started": True,
                                   "state": {"running": {"startedAt": stamp}}} for c in spec.get("containers", [])],
        }
        out.append(pod)
    return out


#: The in-cluster run without the network, in a process of its own: argv is the spec, the dump (the list responses
#: of 500 objects each, one JSON document a line) and the reports of an earlier run; prints each step's seconds and
#: its VmHWM.
_IN_CLUSTER = """
import json, sys, time
import kubernetes.client, urllib3  # the live run's client: its imports are in the peak too
from cli.inputs import load_spec
from policy.admission.engine import Engine
from policy.audit import reports, scan
from policy.resolved.offers import build_admission_policy
spec, dump, earlier = sys.argv[1:4]
timed = {}
start = time.perf_counter()
resolved, _ = load_spec(spec)
policy = build_admission_policy(resolved)
timed['spec'] = time.perf_counter() - start
start = time.perf_counter()
objects = []
for page in open(dump):  # one list response body per line: decoded one at a time, as each arrives
    objects.extend(json.loads(page)['items'])
timed['decode'] = time.perf_counter() - start
start = time.perf_counter()
found = scan.audit(Engine(policy, memo_size=scan.MEMO_SIZE), objects, scan.namespace_labels(objects))
timed['audit'] = time.perf_counter() - start
start = time.perf_counter()
built = reports.build_reports(found, policy)
stored = [reports.StoredReport.from_object(r, r['kind']) for r in json.load(open(earlier))]
plan = reports.plan_writes(built, stored)
bodies = [json.dumps(r, sort_keys=True) for r in plan.apply]
timed['plan'] = time.perf_counter() - start
timed['applied'], timed['deleted'], timed['bytes'] = len(plan.apply), len(plan.delete), sum(map(len, bodies))
status = open('/proc/self/status').read()
timed['peak_mib'] = int(status.split('VmHWM:')[1].split()[0]) / 1024
print(json.dumps(timed))
"""


def in_cluster(spec: Path, dump: Path, earlier: Path) -> tuple[float, dict[str, float]]:
    """Wall seconds of the in-cluster run (start-up included) and its steps."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _IN_CLUSTER, str(spec), str(dump), str(earlier)], cwd=ROOT,
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          check=True)
    return time.perf_counter() - start, json.loads(done.stdout)


def earlier_reports(objects: list[dict[str, Any]], path: Path) -> None:
    """The reports a run under the base spec (research keeps MPS) left, as the cluster lists them."""
    from policy.admission.engine import Engine
    from policy.audit import reports, scan
    from policy.load import load_policy
    from policy.resolved.offers import build_admission_policy

    policy = build_admission_policy(load_policy(MIXED.read_text(encoding="utf-8"), filename="base").resolved)
    found = scan.audit(Engine(policy, memo_size=scan.MEMO_SIZE), objects, scan.namespace_labels(objects))
    path.write_text(json.dumps(reports.build_reports(found, policy)), encoding="utf-8")


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
        print(f"\n## in-cluster run (cluster audit --write-reports minus the network), {pods:,} pods\n")
        print("| pods as | JSON MiB | end to end (s) | peak RSS (MiB) | spec (s) | decode (s) | audit (s) | plan (s) | "
              "reports applied | deleted | request KiB |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for kind in ("lean", "full"):
            objects = cluster(pods, "templates")
            objects = full(objects) if kind == "full" else objects
            dump, earlier = directory / f"live-{kind}.json", directory / f"earlier-{kind}.json"
            dump.write_text("".join(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects[i:i + 500]}) + "\n"
                                    for i in range(0, len(objects), 500)), encoding="utf-8")
            earlier_reports(objects, earlier)
            wall, t = in_cluster(spec, dump, earlier)
            print(f"| {kind} | {dump.stat().st_size / 2**20:.1f} | {wall:.2f} | {t['peak_mib']:.0f} | "
                  f"{t['spec']:.2f} | {t['decode']:.2f} | {t['audit']:.2f} | {t['plan']:.3f} | {t['applied']:.0f} | "
                  f"{t['deleted']:.0f} | {t['bytes'] / 1024:.0f} |")
        print("\n## diff of the mixed-fleet example (research loses MPS), with and without the 5,000-pod workloads\n")
        print("| run | end to end (s) | peak RSS (MiB) | exit |")
        print("|---|---|---|---|")
        for name, extra in (("specs only", []), ("--workloads", ["--workloads", str(directory / "templates.json")])):
            wall, peak, code = child(["diff", str(MIXED), str(spec), "-O", "json", *extra])
            print(f"| {name} | {wall:.2f} | {peak:.0f} | {code} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
