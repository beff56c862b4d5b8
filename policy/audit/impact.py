"""What a spec change does: capacity per node class and per tenant before and after, the compiled tree's changed
files, the disruption on nodes, and (with running workloads) the new and resolved violations.

Disruptions follow what the consumers do with a changed tree:
- **device-plugin restart**: the plugin reads its config at start, so a changed config (sharing mode, replicas,
  MIG strategy, resource names) or plugin release restarts it on every node of the class; its running pods keep
  their devices, but the node's allocatable changes under them (reference/device-plugin.md).
- **MIG re-partition**: on a changed nvidia.com/mig.config the MIG manager pauses the operator's own GPU clients
  (device plugin, GFD, DCGM: their gpu.deploy.* labels set to paused-for-mig-change) but not workload pods, and a
  GPU still in use cannot be re-partitioned (mig.config.state goes to failed), so every GPU pod on the GPUs whose
  layout changes must be drained first (NVIDIA mig-parted, gpu-operator pkg/mig/reconfigure; reference/mig.md §5).
  Counted per GPU index: a mixed layout whose second group alone changes re-partitions only that group's GPUs.
- **node-label change**: a changed nodeSelector or published label (GFD's product name, the label plan's
  mig.config) moves the workloads that select nodes by it, or strands them Pending.
Node and GPU counts come from the spec's ``nodes`` and ``gpu.count``; where a class gives no node count the figures
are per node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from policy.admission import workloads
from policy.audit.scan import Audit, ObjectRef, Result
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy

Change = Literal["added", "removed", "changed", "unchanged"]
DisruptionKind = Literal["device-plugin-restart", "mig-repartition", "node-label-change"]
DEFAULT_RULES = "(default rules)"


@dataclass(frozen=True)
class Capacity:
    """One resource a class offers, or a tenant can reach in a class."""

    node_class: str
    resource: str
    mode: str
    slots_per_node: int
    slots: int | None
    """All nodes together; None when the class gives no node count."""
    memory_per_slot_mib: int


@dataclass(frozen=True)
class ClassChange:
    name: str
    change: Change
    nodes: tuple[int | None, int | None]
    gpus_per_node: tuple[int, int]
    modes: tuple[str, str]
    """Before, after ("" where the class does not exist)."""
    mig_layouts: tuple[str, str]
    """Per-GPU MIG layouts in words ("" without MIG)."""
    capacity: tuple[tuple[Capacity, ...], tuple[Capacity, ...]]


@dataclass(frozen=True)
class TenantChange:
    name: str
    change: Change
    reach: tuple[tuple[Capacity, ...], tuple[Capacity, ...]]
    """What the tenant's pods may land on, before and after."""

    @property
    def slots(self) -> tuple[int | None, int | None]:
        return _total(self.reach[0]), _total(self.reach[1])


@dataclass(frozen=True)
class Disruption:
    node_class: str
    kind: DisruptionKind
    nodes: int | None
    gpus: int | None
    """GPUs affected: those re-partitioned, or every GPU of the class's nodes."""
    detail: str
    drain: tuple[ObjectRef, ...] = ()
    """Running pods (from the workloads given) that may sit on these GPUs and must leave first (a re-partition), or
    that select the class's nodes by a label that changes (a node-label change: they move or stay Pending)."""
    labels: tuple[str, ...] = ()
    """The label keys a node-label change changes."""


@dataclass(frozen=True)
class Overcommit:
    """Running pods that ask a class for more of a resource than the new spec offers."""

    node_class: str
    resource: str
    requested: int
    slots: tuple[int | None, int | None]


@dataclass(frozen=True)
class Impact:
    classes: tuple[ClassChange, ...]
    tenants: tuple[TenantChange, ...]
    tree: tuple[tuple[str, Change], ...]
    """Paths of the compiled tree that are added, changed or removed, sorted."""
    disruptions: tuple[Disruption, ...]
    new_violations: tuple[Result, ...] = ()
    resolved_violations: tuple[Result, ...] = ()
    overcommits: tuple[Overcommit, ...] = ()
    workloads: int | None = None
    """GPU workloads judged (None: no workloads given)."""

    @property
    def changed(self) -> bool:
        return bool(self.tree or self.disruptions or self.new_violations or self.resolved_violations
                    or any(c.change != "unchanged" for c in self.classes)
                    or any(t.change != "unchanged" for t in self.tenants))


def compare(base: ResolvedPolicy, head: ResolvedPolicy, base_tree: Mapping[str, bytes],
            head_tree: Mapping[str, bytes]) -> Impact:
    """The impact of going from ``base`` to ``head``; the trees are what each compiles to (path -> bytes)."""
    before, after = base.by_name(), head.by_name()
    names = [*before, *(n for n in after if n not in before)]
    classes = tuple(_class_change(n, before.get(n), after.get(n)) for n in names)
    plugin_moved = _plugin_release(base) != _plugin_release(head)
    disruptions = tuple(d for n in names for d in _disruptions(before.get(n), after.get(n), plugin_moved))
    return Impact(classes, _tenant_changes(base, head), _tree_changes(base_tree, head_tree), disruptions)


def with_workloads(impact: Impact, base: ResolvedPolicy, head: ResolvedPolicy, base_audit: Audit, head_audit: Audit,
                   objects: Sequence[Mapping[str, Any]]) -> Impact:
    """``impact`` with the running workloads' verdicts compared (new violations: a worse outcome under HEAD than
    under BASE, warn to fail included, or a rule BASE did not find; resolved: violations HEAD no longer finds), the
    pods each re-partition must drain (those BASE's class may hold now), and the classes whose running pods ask for
    more than HEAD offers."""
    old = {r.key: r for r in base_audit.violations}
    new = {r.key for r in head_audit.violations}
    pods = [_RunningPod.of(obj) for obj in objects]
    running = [p for p in pods if p is not None]
    now = base.by_name()
    drained = tuple(_with_drain(d, running, now.get(d.node_class)) for d in impact.disruptions)
    return Impact(
        impact.classes, impact.tenants, impact.tree, drained,
        new_violations=tuple(r for r in head_audit.violations if _worse(r, old.get(r.key))),
        resolved_violations=tuple(r for r in base_audit.violations if r.key not in new),
        overcommits=_overcommits(impact.classes, running, head), workloads=len(head_audit.results))


# --- classes -------------------------------------------------------------------------------------------------


def _class_change(name: str, before: ResolvedClass | None, after: ResolvedClass | None) -> ClassChange:
    capacity = (_capacity(before), _capacity(after))
    shape = (_nodes(before), _nodes(after)), (_gpus(before), _gpus(after)), (_mode(before), _mode(after)), \
        (_layout_words(before), _layout_words(after))
    if before is None or after is None:
        change: Change = "added" if before is None else "removed"
    else:
        same = capacity[0] == capacity[1] and all(a == b for a, b in shape) and _labels(before) == _labels(after)
        change = "unchanged" if same else "changed"
    return ClassChange(name, change, *shape, capacity)  # type: ignore[arg-type]


def _capacity(c: ResolvedClass | None) -> tuple[Capacity, ...]:
    if c is None:
        return ()
    return tuple(Capacity(c.name, o.resource, o.mode_name, o.per_node,
                          None if c.nodes is None else o.per_node * c.nodes, o.slot_memory_mib) for o in c.offers)


def _nodes(c: ResolvedClass | None) -> int | None:
    return None if c is None else c.nodes


def _gpus(c: ResolvedClass | None) -> int:
    return 0 if c is None else c.gpu_count


def _mode(c: ResolvedClass | None) -> str:
    return "" if c is None else c.mode_name


def _labels(c: ResolvedClass) -> tuple[dict[str, str], dict[str, str]]:
    return c.node_selector, {**c.node_labels, **c.reconciled_labels}


def _gpu_layouts(c: ResolvedClass | None) -> tuple[str, ...]:
    """Per GPU index, its MIG layout in words ("" for a GPU MIG leaves whole)."""
    if c is None:
        return ()
    mig = c.spec.sharing.mig
    if mig is None:
        return ("",) * c.gpu_count
    out = [_words(mig.layout) if mig.layout else ""] * c.gpu_count
    for group in mig.groups or ():
        indices = range(c.gpu_count) if group.gpus == "all" else group.gpus
        for i in indices:
            if 0 <= i < c.gpu_count:
                out[i] = _words(group.layout)
    return tuple(out)


def _words(layout: Mapping[str, int]) -> str:
    return " + ".join(f"{n}x {profile}" for profile, n in sorted(layout.items()))


def _layout_words(c: ResolvedClass | None) -> str:
    """``GPUs 0-3: 7x 1g.10gb; GPUs 4-7: ...``, or "" without MIG."""
    layouts = _gpu_layouts(c)
    if not any(layouts):
        return ""
    runs: list[tuple[int, int, str]] = []
    for i, layout in enumerate(layouts):
        if runs and runs[-1][2] == layout and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i, layout)
        else:
            runs.append((i, i, layout))
    return "; ".join(f"GPU{'s' if a != b else ''} {a}{f'-{b}' if a != b else ''}: {layout or 'MIG disabled'}"
                     for a, b, layout in runs)


# --- tenants -------------------------------------------------------------------------------------------------


def _tenant_changes(base: ResolvedPolicy, head: ResolvedPolicy) -> tuple[TenantChange, ...]:
    before, after = _reaches(base), _reaches(head)
    names = [*before, *(n for n in after if n not in before)]
    out = []
    for name in names:
        pair = before.get(name), after.get(name)
        change: Change = "added" if pair[0] is None else "removed" if pair[1] is None else \
            "unchanged" if pair[0] == pair[1] else "changed"
        out.append(TenantChange(name, change, (pair[0] or (), pair[1] or ())))
    return tuple(out)


def _reaches(policy: ResolvedPolicy) -> dict[str, tuple[Capacity, ...]]:
    spec = policy.spec
    out = {t.name: tuple(_reach(c, o) for _, c, o in policy.reachable(t)) for t in spec.tenants}
    out[DEFAULT_RULES] = tuple(_reach(c, o) for _, c, o in policy.reachable_with(spec.admission.default_allow))
    return out


def _reach(c: ResolvedClass, offer: Any) -> Capacity:
    return Capacity(c.name, offer.resource, offer.mode_name, offer.per_node,
                    None if c.nodes is None else offer.per_node * c.nodes, offer.slot_memory_mib)


def _total(reach: Iterable[Capacity]) -> int | None:
    slots = [c.slots for c in reach]
    return None if any(s is None for s in slots) else sum(s for s in slots if s is not None)


# --- disruption ----------------------------------------------------------------------------------------------


def _plugin_release(policy: ResolvedPolicy) -> str:
    return policy.spec.device_plugin.model_dump_json()


def _plugin_config(c: ResolvedClass) -> tuple[Any, ...]:
    """What the class's device-plugin config says: a change of any of it restarts the plugin."""
    return c.mode, c.mig_strategy, tuple((o.resource, o.devices_per_node, o.replicas, o.modes,
                                          o.fail_requests_greater_than_one) for o in c.offers)


def _disruptions(before: ResolvedClass | None, after: ResolvedClass | None,
                 plugin_moved: bool) -> Iterable[Disruption]:
    c = after or before
    assert c is not None
    nodes = c.nodes
    all_gpus = None if nodes is None else nodes * c.gpu_count
    if before is None or after is None:
        yield Disruption(c.name, "device-plugin-restart", nodes, all_gpus,
                         "class added: its nodes get the class's device-plugin config" if before is None else
                         "class removed: its nodes lose the class's device-plugin config and its admission rules")
        return
    old, new = _gpu_layouts(before), _gpu_layouts(after)
    changed = [i for i in range(max(len(old), len(new))) if (old[i:i + 1] or ("",)) != (new[i:i + 1] or ("",))]
    if changed:
        yield Disruption(c.name, "mig-repartition", nodes, None if nodes is None else nodes * len(changed),
                         f"{len(changed)} GPU(s) per node re-partitioned (GPU index {_ranges(changed)}): "
                         f"{_layout_words(before) or 'MIG disabled'} -> {_layout_words(after) or 'MIG disabled'}; "
                         "a GPU in use cannot be re-partitioned, so drain their GPU pods first")
    if plugin_moved or _plugin_config(before) != _plugin_config(after):
        why = "the device-plugin release or flags changed" if plugin_moved and \
            _plugin_config(before) == _plugin_config(after) else "the class's device-plugin config changed"
        yield Disruption(c.name, "device-plugin-restart", nodes, all_gpus,
                         f"{why}: the plugin restarts on every node of the class and re-advertises "
                         f"{', '.join(sorted({o.resource for o in after.offers}))}")
    moved, keys = _label_moves(before, after)
    if moved:
        yield Disruption(c.name, "node-label-change", nodes, all_gpus,
                         f"{moved}: workloads that select nodes by these labels move or stay Pending", labels=keys)


def _label_moves(before: ResolvedClass, after: ResolvedClass) -> tuple[str, tuple[str, ...]]:
    """The label changes in words, and the keys changed."""
    parts, changed = [], set()
    for what, old, new in (("nodeSelector", *(_labels(before)[0], _labels(after)[0])),
                           ("node labels", *(_labels(before)[1], _labels(after)[1]))):
        keys = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
        changed.update(keys)
        if keys:
            parts.append(f"{what} " + ", ".join(f"{k}: {old.get(k, '(none)')} -> {new.get(k, '(none)')}"
                                                for k in keys))
    return "; ".join(parts), tuple(sorted(changed))


def _ranges(indices: Sequence[int]) -> str:
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# --- the tree ------------------------------------------------------------------------------------------------


def _tree_changes(base: Mapping[str, bytes], head: Mapping[str, bytes]) -> tuple[tuple[str, Change], ...]:
    out: list[tuple[str, Change]] = []
    for path in sorted({*base, *head}):
        if path not in base:
            out.append((path, "added"))
        elif path not in head:
            out.append((path, "removed"))
        elif base[path] != head[path]:
            out.append((path, "changed"))
    return tuple(out)


# --- running workloads ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RunningPod:
    ref: ObjectRef
    totals: tuple[tuple[str, int], ...]
    node_selector: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> _RunningPod | None:
        """A Pod that holds GPUs now (not Succeeded or Failed), or None."""
        if obj.get("kind") != "Pod" or (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        workload = workloads.find_workload(obj)
        if workload is None:
            return None
        totals = workloads.read_gpu_request(workload).totals
        if not totals:
            return None
        selector = workload.pod_spec.get("nodeSelector")
        pairs = tuple(sorted((k, v) for k, v in selector.items() if isinstance(k, str) and isinstance(v, str))) \
            if isinstance(selector, Mapping) else ()
        metadata = obj.get("metadata") or {}
        return cls(ObjectRef(str(metadata.get("namespace") or ""), "Pod", workload.name, "v1",
                             str(metadata.get("uid") or "")), totals, pairs)

    def may_run_on(self, c: ResolvedClass) -> bool:
        """Whether its nodeSelector lets it onto the class's nodes and the class offers what it asks for."""
        labels = {**c.node_selector, **c.node_labels, **c.reconciled_labels}
        offered = {o.resource for o in c.offers}
        return all(labels.get(k) == v for k, v in self.node_selector) and any(r in offered for r, _ in self.totals)


def _with_drain(d: Disruption, pods: Sequence[_RunningPod], c: ResolvedClass | None) -> Disruption:
    """The disruption with the running pods it touches: for a re-partition, those BASE's class may hold; for a
    label change, those of them that select nodes by a changed label."""
    if d.kind == "device-plugin-restart" or c is None:
        return d
    touched = (p for p in pods if p.may_run_on(c)
               and (d.kind == "mig-repartition" or any(k in d.labels for k, _ in p.node_selector)))
    return replace(d, drain=tuple(sorted(p.ref for p in touched)))


def _overcommits(classes: Sequence[ClassChange], pods: Sequence[_RunningPod],
                 head: ResolvedPolicy) -> tuple[Overcommit, ...]:
    """Per class and resource, the running pods that can only be on that class, against HEAD's slots."""
    by_name = head.by_name()
    demand: dict[tuple[str, str], int] = {}
    for pod in pods:
        homes = [c for c in by_name.values() if pod.may_run_on(c)]
        if len(homes) != 1:
            continue  # several classes could hold it: where it runs is not known from the pod alone
        for resource, count in pod.totals:
            demand[(homes[0].name, resource)] = demand.get((homes[0].name, resource), 0) + count
    out = []
    for change in classes:
        old = {c.resource: c.slots for c in change.capacity[0]}
        for cap in change.capacity[1]:
            asked = demand.get((change.name, cap.resource), 0)
            if cap.slots is not None and asked > cap.slots:
                out.append(Overcommit(change.name, cap.resource, asked, (old.get(cap.resource), cap.slots)))
    return tuple(out)


_SEVERITY = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}


def _worse(r: Result, other: Result | None) -> bool:
    """Whether ``r`` is a violation ``other`` (the same workload under the other spec; None: no violation there)
    is not: a worse outcome, or a rule ``other`` did not find. Losing one of two rules is no new violation."""
    if other is None:
        return True
    return _SEVERITY[r.outcome] > _SEVERITY[other.outcome] or not set(_rules(r)) <= set(_rules(other))


def _rules(r: Result) -> tuple[str, ...]:
    return tuple(sorted({d.code for d in r.diagnostics}))
