"""The workload inventory: what each workload needs from a GPU, from files a team can produce without gpupolicy.

Sources, merged per (namespace, name): application manifests (the parser `admit` uses) give names, namespaces,
replicas, whole-GPU counts and the node classes a pod's placement allows; Prometheus exports of dcgm-exporter
give peak memory and mean SM activity per pod; an inventory file (YAML or CSV) gives or overrides any field.
Parsing text is allowed here; reading files is the command line's job.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, ValidationError, field_validator

from policy.admission import workloads
from policy.hardware import catalog
from policy.spec.diagnostics import Diagnostic, Path, Span, from_validation_error
from policy.spec.model import MemoryMiB, Model
from policy.spec.source import parse_documents

__all__ = [
    "INVENTORY_KIND",
    "Inventory",
    "InventoryFile",
    "Measurements",
    "Workload",
    "from_manifests",
    "merge",
    "parse_csv",
    "parse_duration",
    "parse_prometheus",
    "parse_yaml",
    "pod_owner",
    "with_measurements",
]

INVENTORY_KIND = "WorkloadInventory"
MAX_REPLICAS = 10_000


@dataclass(frozen=True)
class Workload:
    """One workload as the planner sees it: identical processes, each needing one GPU slot."""

    name: str
    namespace: str
    replicas: int
    memory_mib: int
    """Peak GPU memory of one process (nvidia-smi, DCGM_FI_DEV_FB_USED)."""
    sm_activity: float
    """Mean fraction of a whole GPU's SMs one process keeps busy (DCGM_FI_PROF_SM_ACTIVE), 0-1."""
    tenant: str = ""
    latency_sensitive: bool = False
    production: bool = False
    runtime_s: float | None = None
    """Run time of one process on a whole GPU, for batch jobs (None for services)."""
    gpus: int = 1
    """Whole GPUs one process needs (training); more than 1 rules out every shared mode."""
    targets: tuple[str, ...] = ()
    """Node classes or GPU models the workload may run on; empty: any."""
    source: str = ""
    """Where the figures come from, for the reasons."""

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def batch(self) -> bool:
        return self.runtime_s is not None

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Inventory:
    workloads: tuple[Workload, ...]
    notes: tuple[str, ...] = ()
    """How derived figures were derived (shown under the plan)."""


# ---------------------------------------------------------------------------------------------------------------
# The file format (YAML, or CSV with the same column names)
# ---------------------------------------------------------------------------------------------------------------

_Name = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
_DURATION = re.compile(r"^(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds in ``90``, ``90s``, ``30m``, ``1.5h`` or ``500ms``; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"a run time is like 90s, 30m or 1.5h, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(value.strip())
        if match is None:
            raise ValueError(f"{value!r} is not a run time; write e.g. 90s, 30m or 1.5h")
        seconds = float(match["number"]) * _UNITS[match["unit"]]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a run time must be positive, got {value!r}")
    return seconds


class WorkloadEntry(Model):
    """One workload of an inventory file; every figure is optional so a file can override derived ones."""

    name: _Name
    """The workload's name (a Deployment, StatefulSet or Job name when it should match the manifests)."""
    namespace: _Name = "default"
    """Its namespace."""
    tenant: str | None = None
    """The tenant it belongs to (default: the spec's tenant for the namespace, else the namespace)."""
    replicas: StrictInt | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    """Processes (pods) that run at once, each needing one GPU slot."""
    memory: MemoryMiB | None = None
    """Peak GPU memory of one process, e.g. 4621Mi (nvidia-smi, or DCGM_FI_DEV_FB_USED)."""
    sm_activity: Annotated[float, Field(ge=0, le=1)] | None = None
    """Mean SM activity of one process on a whole GPU, 0-1 (DCGM_FI_PROF_SM_ACTIVE)."""
    latency_sensitive: StrictBool | None = None
    """Serves requests whose tail latency matters (worst-case contention is planned for)."""
    production: StrictBool | None = None
    """Production workload: must not share memory and faults with neighbours (the decision matrix)."""
    runtime: str | float | None = None
    """Run time of one process on a whole GPU, for batch jobs: 90s, 30m, 1.5h."""
    gpus: StrictInt | None = Field(default=None, ge=1, le=64)
    """Whole GPUs one process needs (default 1)."""
    gpu: str | None = None
    """Node class name or GPU model (L20, T4, H100) the workload runs on; default: any class."""

    @field_validator("runtime")
    @classmethod
    def _runtime(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            parse_duration(value)
        return value


class InventoryFile(Model):
    """A workload inventory: per workload its memory, compute demand, replicas and flags."""

    api_version: Literal["gpupolicy.dev/v1alpha1"] | None = None
    """Optional: gpupolicy.dev/v1alpha1."""
    kind: Literal["WorkloadInventory"] | None = None
    """Optional: WorkloadInventory."""
    workloads: tuple[WorkloadEntry, ...] = Field(min_length=1)
    """The workloads."""


@dataclass(frozen=True)
class Entry:
    """A parsed inventory entry: the fields it sets, and where it is written."""

    values: WorkloadEntry
    span: Span | None


def parse_yaml(text: str, *, filename: str) -> tuple[tuple[Entry, ...], tuple[Diagnostic, ...]]:
    """The entries of an inventory YAML file, or located diagnostics (file:line:column, field path, fix)."""
    found: list[Diagnostic] = []
    entries: list[Entry] = []
    for doc in parse_documents(text, filename=filename):
        found.extend(doc.diagnostics)
        if doc.data is None:
            continue
        data = {"workloads": doc.data} if isinstance(doc.data, list) else doc.data
        try:
            parsed = InventoryFile.model_validate(data)
        except ValidationError as err:
            for d in from_validation_error(err, data, InventoryFile):
                # A bare list was wrapped in {workloads: ...}: its positions have no "workloads" step.
                path = d.path if isinstance(doc.data, dict) else d.path[1:]
                found.append(d.at(doc.source.span(path, key=d.code == "unknown-field")))
            continue
        base: Path = ("workloads",) if isinstance(doc.data, dict) else ()
        entries += [Entry(w, doc.source.span((*base, i))) for i, w in enumerate(parsed.workloads)]
    if not entries and not found:  # an empty file, or one whose workloads list is empty, plans nothing: say so
        found.append(Diagnostic("empty-inventory", f"{filename} holds no workloads", ("workloads",),
                                "list them under workloads: (name, namespace, replicas, memory, smActivity)",
                                span=Span(filename, 1, 1)))
    return tuple(entries), tuple(found)


_BOOL = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_INT_COLUMNS = ("replicas", "gpus")
_FLOAT_COLUMNS = ("smActivity",)
_BOOL_COLUMNS = ("latencySensitive", "production")


def parse_csv(text: str, *, filename: str) -> tuple[tuple[Entry, ...], tuple[Diagnostic, ...]]:
    """The entries of an inventory CSV: a header row of the YAML keys (name, namespace, memory, ...)."""
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(cell.strip() for cell in r) and not r[0].lstrip().startswith("#")]
    if not rows:
        return (), (Diagnostic("empty-inventory", f"{filename} holds no rows", (), "start with a header row: "
                               "name,namespace,replicas,memory,smActivity", span=Span(filename, 1, 1)),)
    header = [h.strip() for h in rows[0]]
    known = set(WorkloadEntry.model_fields) | {f.alias for f in WorkloadEntry.model_fields.values() if f.alias}
    lines = _row_lines(text)
    found: list[Diagnostic] = []
    for column, name in enumerate(header):
        if name not in known:
            found.append(Diagnostic("unknown-field", f"unknown column {name!r}", (name,),
                                    f"columns are {', '.join(_columns())}", span=Span(filename, lines[0], column + 1)))
    if found:
        return (), tuple(found)
    entries: list[Entry] = []
    for row, line in zip(rows[1:], lines[1:], strict=False):
        record, problems = _csv_record(header, row, filename, line)
        found += problems
        if problems:
            continue
        try:
            entries.append(Entry(WorkloadEntry.model_validate(record), Span(filename, line, 1)))
        except ValidationError as err:
            for d in from_validation_error(err, record, WorkloadEntry):
                column = header.index(str(d.path[0])) + 1 if d.path and d.path[0] in header else 1
                found.append(d.at(Span(filename, line, column)))
    return tuple(entries), tuple(found)


def _columns() -> list[str]:
    return [f.alias or n for n, f in WorkloadEntry.model_fields.items()]


def _row_lines(text: str) -> list[int]:
    """1-based line numbers of the non-empty, non-comment rows (a quoted cell never spans lines here)."""
    return [i for i, line in enumerate(text.splitlines(), start=1)
            if line.strip().strip(",") and not line.lstrip().startswith("#")]


def _csv_record(header: list[str], row: list[str], filename: str, line: int
                ) -> tuple[dict[str, Any], list[Diagnostic]]:
    record: dict[str, Any] = {}
    problems: list[Diagnostic] = []
    for column, (key, raw) in enumerate(zip(header, row, strict=False), start=1):
        cell = raw.strip()
        if not cell:
            continue
        try:
            record[key] = _csv_value(key, cell)
        except ValueError as err:
            problems.append(Diagnostic("invalid-value", f"{key}: {err}", (key,), _csv_hint(key),
                                       span=Span(filename, line, column)))
    if len(row) > len(header):
        problems.append(Diagnostic("invalid-value", f"the row has {len(row)} cells, the header {len(header)}", (),
                                   "quote cells that contain commas", span=Span(filename, line, 1)))
    return record, problems


def _csv_value(key: str, cell: str) -> Any:
    if key in _INT_COLUMNS:
        if not re.fullmatch(r"\d+", cell):
            raise ValueError(f"{cell!r} is not a whole number")
        return int(cell)
    if key in _FLOAT_COLUMNS:
        try:
            return float(cell)
        except ValueError:
            raise ValueError(f"{cell!r} is not a number") from None
    if key in _BOOL_COLUMNS:
        if cell.lower() not in _BOOL:
            raise ValueError(f"{cell!r} is not true or false")
        return _BOOL[cell.lower()]
    return cell


def _csv_hint(key: str) -> str:
    if key in _BOOL_COLUMNS:
        return "write true or false"
    if key in _FLOAT_COLUMNS:
        return "write a fraction between 0 and 1, e.g. 0.35"
    return "write a whole number"


# ---------------------------------------------------------------------------------------------------------------
# Prometheus exports (the JSON of /api/v1/query)
# ---------------------------------------------------------------------------------------------------------------

Metric = Literal["memory", "sm-activity"]


@dataclass(frozen=True)
class Measurements:
    """Per pod (namespace, pod): peak memory in MiB and mean SM activity, from dcgm-exporter via Prometheus."""

    memory_mib: Mapping[tuple[str, str], float]
    sm_activity: Mapping[tuple[str, str], float]


_POD_LABELS = (("namespace", "pod"), ("exported_namespace", "exported_pod"))


def parse_prometheus(text: str, *, filename: str, metric: Metric
                     ) -> tuple[dict[tuple[str, str], float], tuple[Diagnostic, ...], tuple[str, ...]]:
    """Values per (namespace, pod) in an instant-query response (``resultType: vector``) of /api/v1/query.

    Accepts the pod labels dcgm-exporter sets (``namespace``/``pod``) or the ones Prometheus renames them to
    when the ServiceMonitor does not honour labels (``exported_namespace``/``exported_pod``).  Series without
    a pod are skipped with a note; an SM activity reported per MIG instance (``GPU_I_PROFILE``) is turned into
    a fraction of the whole GPU.  Returns the values, diagnostics, and notes.
    """
    span = Span(filename, 1, 1)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        return {}, (Diagnostic("invalid-export", f"{filename} is not JSON: {err.msg} (line {err.lineno}, column "
                               f"{err.colno})", (), _EXPORT_HINT, span=Span(filename, err.lineno, err.colno)),), ()
    result = _vector(document)
    if isinstance(result, str):
        return {}, (Diagnostic("invalid-export", f"{filename}: {result}", (), _EXPORT_HINT, span=span),), ()
    values: dict[tuple[str, str], float] = {}
    skipped = 0
    notes: list[str] = []
    for i, sample in enumerate(result):
        read = _sample(sample, metric)
        if isinstance(read, str):
            return {}, (Diagnostic("invalid-export", f"{filename}: data.result[{i}]: {read}", ("data", "result", i),
                                   _EXPORT_HINT, span=span),), ()
        if read is None:
            skipped += 1
            continue
        key, value, note = read
        if note:
            notes.append(note)
        values[key] = max(value, values.get(key, value)) if metric == "memory" else max(value, values.get(key, 0.0))
    if skipped:
        notes.append(f"{filename}: {skipped} series without a pod label or a finite value were skipped")
    return values, (), tuple(dict.fromkeys(notes))


_EXPORT_HINT = ("save the body of GET /api/v1/query?query=<the PromQL in docs/plan.md> as it is returned, e.g. with "
                "curl -s --data-urlencode 'query=...' http://prometheus:9090/api/v1/query > export.json")


def _vector(document: Any) -> list[Any] | str:
    if not isinstance(document, dict):
        return "expected a JSON object with status and data"
    if document.get("status") != "success":
        return f"the query did not succeed (status {document.get('status')!r}: {document.get('error', '')})"
    data = document.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        return "expected data.result to be a list"
    if data.get("resultType") != "vector":
        return (f"expected an instant query (resultType vector), got {data.get('resultType')!r}; use "
                "max_over_time/avg_over_time in the query instead of a range query")
    return data["result"]


def _sample(sample: Any, metric: Metric) -> tuple[tuple[str, str], float, str] | str | None:
    if not isinstance(sample, dict) or not isinstance(sample.get("metric"), dict):
        return "expected an object with metric and value"
    labels = sample["metric"]
    value = sample.get("value")
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str)):
        return 'expected value to be [timestamp, "number"]'
    try:
        number = float(value[1])
    except ValueError:
        return f"value {value[1]!r} is not a number"
    pod = next(((labels.get(ns), labels.get(p)) for ns, p in _POD_LABELS if labels.get(p)), None)
    if pod is None or not pod[0] or not math.isfinite(number):
        return None
    note = ""
    if metric == "sm-activity" and labels.get("GPU_I_PROFILE"):
        number, note = _whole_gpu_activity(number, labels)
    return (str(pod[0]), str(pod[1])), number, note


def _whole_gpu_activity(value: float, labels: Mapping[str, Any]) -> tuple[float, str]:
    """SM activity of a MIG instance is relative to the instance: scale it by the instance's share of the GPU."""
    match = re.match(r"^(\d+)g\.", str(labels["GPU_I_PROFILE"]))
    model = catalog.lookup(str(labels.get("modelName", "")).replace(" ", "-"))
    if match is None or model is None or model.mig is None:
        return value, (f"SM activity of MIG instance {labels['GPU_I_PROFILE']} kept as reported: the GPU model "
                       f"{labels.get('modelName')!r} is not in the catalog, so its share of the GPU is unknown")
    share = int(match[1]) / model.mig.compute_slices
    return value * share, ""


def pod_owner(pod: str, names: Iterable[str] = ()) -> str:
    """The workload a pod belongs to: the longest of ``names`` it extends with a generated suffix, else the pod
    name without the suffix its controller adds (Deployment ``-<hash>-<id>``, StatefulSet ``-<n>``, Job ``-<id>``)."""
    for name in sorted(names, key=len, reverse=True):
        if pod.startswith(name + "-") and _SUFFIX.fullmatch(pod[len(name) + 1:]):
            return name
    match = _GENERATED.match(pod)
    return match["base"] if match else pod


# pod-template-hash and pod-name suffixes use k8s.io/apimachinery's rand alphabet; [a-z0-9] is a superset.
_SUFFIX = re.compile(r"(?:[a-z0-9]{6,10}-)?[a-z0-9]{5}|\d+|\d{6,}-[a-z0-9]{5}")
_GENERATED = re.compile(r"^(?P<base>.+?)-(?:[a-z0-9]{6,10}-[a-z0-9]{5}|\d{6,}-[a-z0-9]{5}|[a-z0-9]{5}|\d+)$")


# ---------------------------------------------------------------------------------------------------------------
# Application manifests
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Derived:
    """What manifests and Prometheus say about one workload (None: they do not say)."""

    name: str
    namespace: str
    replicas: int | None = None
    gpus: int | None = None
    memory_mib: int | None = None
    sm_activity: float | None = None
    targets: tuple[str, ...] = ()
    source: str = ""
    span: Span | None = None


_REPLICA_PATHS: dict[str, Path] = {
    "Deployment": ("spec", "replicas"), "StatefulSet": ("spec", "replicas"), "ReplicaSet": ("spec", "replicas"),
    "ReplicationController": ("spec", "replicas"), "Job": ("spec", "parallelism"),
    "CronJob": ("spec", "jobTemplate", "spec", "parallelism"),
}


def from_manifests(objects: Iterable[tuple[Mapping[str, Any], Span | None]], *, default_namespace: str = "default",
                   classes_for: Any = None) -> tuple[Derived, ...]:
    """Every Pod or pod controller that requests nvidia.com/ resources, as a derived workload.

    ``classes_for(workload)`` may name the node classes the pod's placement allows (with a spec).
    """
    out: dict[tuple[str, str], Derived] = {}
    for obj, span in objects:
        workload = workloads.find_workload(obj)
        if workload is None:
            continue
        request = workloads.read_gpu_request(workload)
        if request.empty:
            continue
        namespace = workload.namespace or default_namespace
        whole = dict(request.totals).get("nvidia.com/gpu")
        targets = tuple(classes_for(workload)) if classes_for else ()
        derived = Derived(workload.name, namespace, _replicas(obj, workload.kind), whole or 1, None, None, targets,
                          f"{workload.kind} {namespace}/{workload.name}", span)
        out[derived.name, derived.namespace] = derived
    return tuple(out.values())


def _replicas(obj: Mapping[str, Any], kind: str) -> int:
    value: Any = obj
    for part in _REPLICA_PATHS.get(kind, ()):
        value = value.get(part) if isinstance(value, Mapping) else None
    if kind not in _REPLICA_PATHS:
        return 1  # a Pod; a DaemonSet runs one per node, which the inventory must say
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def with_measurements(derived: Sequence[Derived], measured: Measurements
                      ) -> tuple[tuple[Derived, ...], tuple[str, ...]]:
    """The derived workloads with their pods' peak memory (max over pods) and SM activity (max over pods' means),
    plus workloads seen only in Prometheus (replicas = pods seen), and notes on how they were matched."""
    by_namespace: dict[str, list[str]] = {}
    for d in derived:
        by_namespace.setdefault(d.namespace, []).append(d.name)
    memory: dict[tuple[str, str], float] = {}
    activity: dict[tuple[str, str], float] = {}
    pods: dict[tuple[str, str], set[str]] = {}
    for table, into in ((measured.memory_mib, memory), (measured.sm_activity, activity)):
        for (namespace, pod), value in table.items():
            key = (pod_owner(pod, by_namespace.get(namespace, ())), namespace)
            into[key] = max(value, into.get(key, value))
            pods.setdefault(key, set()).add(pod)
    out = []
    known = {(d.name, d.namespace) for d in derived}
    for d in derived:
        key = (d.name, d.namespace)
        out.append(replace(d, memory_mib=math.ceil(memory[key]) if key in memory else None,
                           sm_activity=round(min(activity[key], 1.0), 4) if key in activity else None))
    notes = []
    for key in sorted(set(memory) | set(activity)):
        if key in known:
            continue
        seen = len(pods[key])
        out.append(Derived(key[0], key[1], seen, 1, math.ceil(memory[key]) if key in memory else None,
                           round(min(activity[key], 1.0), 4) if key in activity else None, (),
                           f"Prometheus pods {key[1]}/{key[0]}-*"))
        notes.append(f"{key[1]}/{key[0]}: no manifest; {seen} pod(s) seen in the export taken as its replicas")
    return tuple(out), tuple(notes)


# ---------------------------------------------------------------------------------------------------------------
# Merging
# ---------------------------------------------------------------------------------------------------------------


def merge(derived: Sequence[Derived], entries: Sequence[Entry], *, tenant_of: Any = None
          ) -> tuple[Inventory, tuple[Diagnostic, ...]]:
    """Derived workloads overridden field by field by the inventory file's entries (matched on namespace and
    name); a workload still lacking memory or SM activity is an error naming where to get it.

    ``tenant_of(namespace)`` gives (tenant, production) from a spec's tenants, or None.
    """
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for d in derived:
        table[d.name, d.namespace] = {"name": d.name, "namespace": d.namespace, "replicas": d.replicas,
                                      "gpus": d.gpus, "memory_mib": d.memory_mib, "sm_activity": d.sm_activity,
                                      "targets": d.targets, "source": d.source, "span": d.span}
    for entry in entries:
        values = entry.values
        row = table.setdefault((values.name, values.namespace), {"name": values.name, "namespace": values.namespace,
                                                                 "source": "inventory", "span": entry.span})
        row["span"] = entry.span or row.get("span")
        row["source"] = "inventory" if row.get("source") in (None, "inventory") else row["source"] + " + inventory"
        for field_name in values.model_fields_set - {"name", "namespace"}:
            value = getattr(values, field_name)
            if field_name == "memory":
                row["memory_mib"] = int(value)
            elif field_name == "gpu":
                row["targets"] = (value,)
            elif field_name == "runtime":
                row["runtime_s"] = parse_duration(value)
            else:
                row[field_name] = value
    found: list[Diagnostic] = []
    out: list[Workload] = []
    for row in table.values():
        workload = _workload(row, tenant_of, found)
        if workload is not None:
            out.append(workload)
    out.sort(key=lambda w: w.key)
    return Inventory(tuple(out)), tuple(found)


def _workload(row: dict[str, Any], tenant_of: Any, found: list[Diagnostic]) -> Workload | None:
    label = f"{row['namespace']}/{row['name']}"
    missing = [what for what, key in (("memory", "memory_mib"), ("smActivity", "sm_activity")) if row.get(key) is None]
    if missing:
        found.append(Diagnostic(
            "incomplete-workload", f"{label} ({row.get('source')}): no {' and no '.join(missing)} figure",
            ("workloads", row["name"]),
            "give it in the inventory (memory: 4621Mi, smActivity: 0.3) or export DCGM_FI_DEV_FB_USED and "
            "DCGM_FI_PROF_SM_ACTIVE from Prometheus (docs/plan.md)", span=row.get("span")))
        return None
    tenant, production = row.get("tenant"), row.get("production")
    from_spec = tenant_of(row["namespace"]) if tenant_of else None
    if from_spec is not None:
        tenant = tenant or from_spec[0]
        production = from_spec[1] if production is None else production
    return Workload(
        name=row["name"], namespace=row["namespace"], replicas=row.get("replicas") or 1,
        memory_mib=int(row["memory_mib"]), sm_activity=float(row["sm_activity"]),
        tenant=tenant or row["namespace"], latency_sensitive=bool(row.get("latency_sensitive")),
        production=bool(production), runtime_s=row.get("runtime_s"), gpus=row.get("gpus") or 1,
        targets=tuple(row.get("targets") or ()), source=str(row.get("source") or ""))
