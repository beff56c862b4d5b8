"""A draft cluster spec from what a cluster's nodes say: one class per kind of GPU node, with disjoint selectors."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from cluster import ClusterError, dra_devices, facts
from cluster.resources import DaemonSet, Node, NodeTaint, Snapshot
from cluster.sharing import LiveSharing, read_sharing, settled
from compiler import serialize
from policy.hardware import catalog
from policy.kube import selectors
from policy.spec.model import API_VERSION, KIND, PluginFlags
from policy.vgpu import cloud_vgpu, hami

# No URL serves the schema (gpupolicy.dev is only the schemas' $id, and the project publishes no release files),
# so a draft names a schema only where one is known to exist: a file `gpupolicy schema --write DIR` wrote.
SCHEMA_FILE = "cluster-policy.schema.json"
_NO_SCHEMA = [
    "# No $schema line: no schemas/cluster-policy.schema.json was found beside this draft or above it. For",
    "# completion and checks in an editor, run `gpupolicy schema --write schemas` and draft again into that tree",
    "# (-o FILE, or > FILE), or with --schema PATH (the schema file, relative to the draft).",
]
# Labels a class must never be selected by: GFD and the operator rewrite nvidia.com/* (T4 -> T4-SHARED), NFD's
# describe hardware, and the rest name one node or its place rather than its kind.
_NEVER = ("nvidia.com/", "feature.node.kubernetes.io/", "kubernetes.io/hostname", "topology.kubernetes.io/",
          "failure-domain.beta.kubernetes.io/", "topology.", "node-role.kubernetes.io/", "kubernetes.io/arch",
          "kubernetes.io/os", "beta.kubernetes.io/arch", "beta.kubernetes.io/os", "node.kubernetes.io/exclude",
          "gpupolicy.dev/")
_INSTANCE_TYPES = (facts.INSTANCE_TYPE, "beta.kubernetes.io/instance-type")
_POOLS = ("karpenter.sh/nodepool", "eks.amazonaws.com/nodegroup", "cloud.google.com/gke-nodepool",
          "kubernetes.azure.com/agentpool", "agentpool", "alibabacloud.com/nodepool-id",
          "tke.cloud.tencent.com/nodepool-id", "node-pool", "nodepool", "gpu-pool")
_GPU_WORDS = re.compile(r"gpu|nvidia|accelerator", re.IGNORECASE)
_FALLBACK_KEY = "gpupolicy.dev/node-class"
#: What to do where no label of the nodes selects a group: the key then holds the class name as its value.
_LABEL_THEM = ("add this label to the node pool's labels (or replace it with a label the pool already gives only "
               "these nodes), so nodes that join later carry it too")
_VERSION = re.compile(r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")
_KUBELET = re.compile(r"^v?(\d+)\.(\d+)")


class DiscoverError(ClusterError):
    """The cluster gives nothing to draft from."""


@dataclass(frozen=True)
class VgpuSeen:
    """How HAMi's device plugin registered a node's GPUs (hami.io/node-nvidia-register)."""

    split_count: int
    memory_scaling: float
    """devmem / physical memory, to two decimals (1.0 when the physical memory is unknown)."""
    core_scaling: float


@dataclass(frozen=True)
class GroupKey:
    """What makes two GPU nodes the same kind: GPU model, count, memory, MIG capability, instance type, and how
    HAMi registered them, if it did."""

    model: str
    count: int
    memory_mib: int | None
    mig_capable: bool
    instance_type: str
    vgpu: VgpuSeen | None = None
    dra: tuple[tuple[str, int], ...] | None = None
    """For nodes whose GPUs NVIDIA's DRA driver publishes: the MIG devices per GPU by profile (empty for whole
    GPUs); None for device-plugin nodes."""


@dataclass(frozen=True)
class DraftClass:
    name: str
    key: GroupKey
    nodes: tuple[Node, ...]
    node_selector: Mapping[str, str]
    selector_notes: Mapping[str, str]
    """Label key -> why it is in the selector (a YAML comment)."""
    gpu: catalog.GpuModel | None
    sharing: LiveSharing = field(default_factory=lambda: LiveSharing("exclusive", "whole GPUs"))
    """What the nodes run now, read off their labels and capacity."""
    differing: tuple[tuple[str, str], ...] = ()
    """(node, what it shows) for the nodes of the group whose labels show other sharing (mid-change, or configured
    apart)."""
    taints: tuple[NodeTaint, ...] = ()
    """Taints every node of the group carries (but the transient ones Kubernetes sets)."""

    @property
    def stated_memory_mib(self) -> int | None:
        """Memory the spec must state: always for a model the catalog lacks, and when the nodes report less
        than the catalog (old drivers, ECC), so sizing starts from what the nodes have."""
        if self.key.memory_mib is None:
            return None
        if self.gpu is None or self.key.memory_mib < self.gpu.memory_mib:
            return self.key.memory_mib
        return None


@dataclass(frozen=True)
class DraftPlugin:
    deploy: str = "standalone"
    version: str | None = None
    image: str | None = None
    namespace: str | None = None
    flags: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    """Where the values come from, for the comment."""


@dataclass(frozen=True)
class DraftHami:
    """The HAMi install found: where its device plugin runs, and its release."""

    namespace: str
    version: str | None
    source: str


@dataclass(frozen=True)
class Draft:
    name: str
    context: str
    server: str
    nodes: int
    kubernetes_version: str | None
    plugin: DraftPlugin
    classes: tuple[DraftClass, ...]
    skipped: tuple[str, ...]
    """GPU nodes left out, with why."""
    hami: DraftHami | None = None


def discover(snapshot: Snapshot, *, name: str) -> Draft:
    """Group the GPU nodes and draft one class per group; raises DiscoverError when no node has GFD labels (or,
    on HAMi nodes, HAMi's registration, which names the GPUs as well)."""
    cloud = {n.name: p for n in snapshot.nodes if (p := cloud_vgpu.product_of_node(n.labels, n.capacity))}
    # A node whose GPUs NVIDIA's DRA driver publishes is drafted from its ResourceSlices (no GFD runs there).
    dra = {n.name: inv for n in snapshot.nodes if n.name not in cloud
           and (inv := dra_devices.inventory(snapshot, n)) is not None}
    gpu_nodes = [n for n in snapshot.nodes if (facts.is_gpu_node(n) or n.name in dra) and n.name not in cloud]
    labelled = [n for n in gpu_nodes
                if n.name in dra or facts.PRODUCT in n.labels or hami.registered_on(n.annotations)]
    if not labelled:
        raise DiscoverError(
            f"{'none of the ' + str(len(gpu_nodes)) if gpu_nodes else 'none of the'} GPU nodes carries GPU Feature "
            "Discovery labels (nvidia.com/gpu.product), so their GPU models are unknown",
            "deploy GPU Feature Discovery (device-plugin Helm chart: --set gfd.enabled=true) and run discover again")
    groups = _groups(labelled, dra)
    others = [n for n in snapshot.nodes if n not in labelled]
    selected = _selectors(groups, others)
    classes = tuple(DraftClass(name_, key, tuple(nodes), sel, notes, _lookup(key.model),
                               *(_dra_live(nodes, dra) if key.dra is not None else _live(nodes)))
                    for (name_, key, nodes), (sel, notes) in zip(_named(groups), selected, strict=True))
    skipped = tuple(f"{n.name}: GPUs without GFD labels" for n in gpu_nodes if n not in labelled)
    skipped += tuple(f"{node}: a {p.name} node, configured by {p.managed_by}; gpupolicy does not configure it"
                     for node, p in sorted(cloud.items()))
    return Draft(name, snapshot.context, snapshot.server, len(snapshot.nodes), _kubernetes_version(snapshot.nodes),
                 _plugin(snapshot.daemonsets), classes, skipped, _hami(snapshot.daemonsets))


def _lookup(model: str) -> catalog.GpuModel | None:
    return catalog.lookup(model) or catalog.lookup(f"NVIDIA-{model}")


def _live(nodes: list[Node]) -> tuple[LiveSharing, tuple[tuple[str, str], ...], tuple[NodeTaint, ...]]:
    """The group's sharing, read off its first node mig-manager has finished with, the nodes that show other
    sharing, and the taints all of them carry."""
    chosen = next((n for n in nodes if settled(n)), nodes[0])
    sharing = read_sharing(chosen)
    differing = []
    for node in nodes:
        if node is not chosen and (seen := read_sharing(node)).data != sharing.data:
            state = node.labels.get(facts.MIG_CONFIG_STATE)
            differing.append((node.name, seen.summary + (f" (mig.config.state {state})" if state else "")))
    return sharing, tuple(differing), _common_taints(nodes)


def _common_taints(nodes: list[Node]) -> tuple[NodeTaint, ...]:
    common = set(facts.lasting_taints(nodes[0]))
    for node in nodes[1:]:
        common &= set(facts.lasting_taints(node))
    return tuple(t for t in facts.lasting_taints(nodes[0]) if t in common)


def _dra_live(nodes: list[Node], dra: Mapping[str, dra_devices.Inventory]
              ) -> tuple[LiveSharing, tuple[tuple[str, str], ...], tuple[NodeTaint, ...]]:
    """A DRA group's sharing: whole GPUs, or the MIG layout its devices show (the driver publishes pre-created MIG
    devices only; how they were made is mig-parted's, which the tree drives)."""
    seen = dra[nodes[0].name]
    todo = ("the GPUs of " + nodes[0].name + " do not all hold the same MIG devices: the layout is the first "
            "partitioned GPU's",) if seen.layouts_differ else ()
    if seen.layout:
        layout = dict(seen.layout)
        summary = "MIG devices claimed through DRA, " + ", ".join(f"{n}x {p}" for p, n in seen.layout) + " per GPU"
        sharing = LiveSharing({"mig": {"strategy": "mixed", "layout": layout}}, summary, seen.gpus, todo)
    else:
        sharing = LiveSharing("exclusive", "whole GPUs claimed through DRA", seen.gpus, todo)
    return sharing, (), _common_taints(nodes)


# --- grouping ---------------------------------------------------------------------------------------------------


def group_key(node: Node) -> GroupKey:
    registered = hami.registered_on(node.annotations)
    if facts.PRODUCT not in node.labels:
        assert registered, "discover groups only nodes with GFD labels or HAMi's registration"
        return _hami_key(node, registered)
    product = facts.parse_product(node.labels[facts.PRODUCT])
    # Under MIG single, gpu.count counts MIG devices and gpu.memory is one device's: neither describes the GPU.
    mig_single = product.mig_profile is not None
    memory = None if mig_single else facts.memory_mib(node.labels)
    return GroupKey(
        model=product.model,
        count=facts.label_int(node.labels, facts.COUNT) or 1,
        memory_mib=memory,
        mig_capable=node.labels.get(facts.MIG_CAPABLE) == "true" or mig_single,
        instance_type=node.labels.get(facts.INSTANCE_TYPE, ""),
        vgpu=_vgpu_seen(registered, memory or _catalog_memory(product.model)) if registered else None,
    )


def _hami_key(node: Node, registered: tuple[hami.RegisteredGpu, ...]) -> GroupKey:
    """A HAMi node without GFD: its GPUs as HAMi registered them (type = NVML name, spaces where GFD has dashes)."""
    model = registered[0].type.replace(" ", "-")
    memory = _catalog_memory(model)
    return GroupKey(model=model, count=len(registered), memory_mib=None if memory else registered[0].devmem,
                    mig_capable=False, instance_type=node.labels.get(facts.INSTANCE_TYPE, ""),
                    vgpu=_vgpu_seen(registered, memory))


def _catalog_memory(model: str) -> int | None:
    found = _lookup(model)
    return found.memory_mib if found else None


def _vgpu_seen(registered: tuple[hami.RegisteredGpu, ...], physical: int | None) -> VgpuSeen:
    first = registered[0]
    scaling = round(first.devmem / physical, 2) if physical else 1.0
    return VgpuSeen(first.count, scaling, round(first.devcore / 100, 2))


def _dra_key(node: Node, seen: dra_devices.Inventory) -> GroupKey:
    return GroupKey(model=seen.product, count=seen.gpus, memory_mib=seen.memory_mib, mig_capable=bool(seen.layout),
                    instance_type=node.labels.get(facts.INSTANCE_TYPE, ""), dra=seen.layout)


def _groups(nodes: Iterable[Node], dra: Mapping[str, dra_devices.Inventory]) -> dict[GroupKey, list[Node]]:
    groups: dict[GroupKey, list[Node]] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        key = _dra_key(node, dra[node.name]) if node.name in dra else group_key(node)
        groups.setdefault(key, []).append(node)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0].model, kv[0].count, kv[0].instance_type)))


def _named(groups: Mapping[GroupKey, list[Node]]) -> list[tuple[str, GroupKey, list[Node]]]:
    names = [class_name(key.model) for key in groups]
    out, used = [], set()
    for base, (key, nodes) in zip(names, groups.items(), strict=True):
        name = base if names.count(base) == 1 else dns_label(f"{base}-{key.count}x-{key.instance_type}") or base
        while name in used:
            name = dns_label(f"{name[:36]}-{len(used) + 1}")
        used.add(name)
        out.append((name, key, nodes))
    return out


def class_name(model: str) -> str:
    """A class name from a GPU model: its shortest catalog alias (``NVIDIA-L20`` -> ``l20``), else the product."""
    found = _lookup(model)
    names = (*found.aliases, found.product) if found else (model.removeprefix("NVIDIA-"),)
    return dns_label(min(names, key=len)) or "gpu"


def dns_label(text: str) -> str:
    """``text`` as a lowercase DNS label of at most 40 characters (what class and cluster names must be)."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")[:40].strip("-")


# --- selectors --------------------------------------------------------------------------------------------------


def _constant_labels(nodes: Iterable[Node]) -> dict[str, str]:
    """Labels every node of the group carries with one value, minus those a class must never select by."""
    nodes = list(nodes)
    common = {k: v for k, v in nodes[0].labels.items() if not k.startswith(_NEVER)}
    for node in nodes[1:]:
        common = {k: v for k, v in common.items() if node.labels.get(k) == v}
    return common


def _preference(key: str) -> tuple[int, int, str]:
    """Instance type first (the GA label before the beta one), then node-pool labels, then anything else."""
    if key in _INSTANCE_TYPES:
        return (0, _INSTANCE_TYPES.index(key), key)
    if key in _POOLS:
        return (1, _POOLS.index(key), key)
    if "pool" in key.lower() or "nodegroup" in key.lower():
        return (1, len(_POOLS), key)
    return (2, 0, key)


Selector = tuple[dict[str, str], dict[str, str]]
"""A class's nodeSelector and, per key, the comment saying why it is there."""


def _selectors(groups: Mapping[GroupKey, list[Node]], others: list[Node]) -> list[Selector]:
    """Per group, a selector provably disjoint from every other group's: each pair shares a key with different
    values (what `overlapping-node-classes` checks), chosen instance type first, then pool labels."""
    constant = [_constant_labels(nodes) for nodes in groups.values()]
    chosen: list[dict[str, str]] = [{} for _ in constant]
    notes: list[dict[str, str]] = [{} for _ in constant]
    _gate(groups, others, constant, chosen, notes)
    for i in range(len(constant)):
        for j in range(i + 1, len(constant)):
            if not selectors.conflicting_key(chosen[i], chosen[j]):
                _separate(i, j, constant, chosen, notes)
    for i in range(len(constant)):
        _exclude_others(i, others, constant, chosen, notes)
    return list(zip(chosen, notes, strict=True))


def _gate(groups: Mapping[GroupKey, list[Node]], others: list[Node], constant: list[dict[str, str]],
          chosen: list[dict[str, str]], notes: list[dict[str, str]]) -> None:
    """A label that marks exactly the GPU nodes (TKE's nvidia-device-enable=enable) keeps every class off
    non-GPU nodes even if one of them shares an instance type later."""
    shared = {k: v for k, v in constant[0].items() if all(c.get(k) == v for c in constant[1:])}
    for key, value in sorted(shared.items()):
        if _GPU_WORDS.search(f"{key}={value}") and all(n.labels.get(key) != value for n in others
                                                         if not facts.is_gpu_node(n)):
            for i in range(len(chosen)):
                chosen[i][key] = value
                notes[i][key] = "marks exactly the GPU nodes"
            return


def _separate(i: int, j: int, constant: list[dict[str, str]], chosen: list[dict[str, str]],
              notes: list[dict[str, str]]) -> None:
    keys = sorted((k for k in constant[i].keys() & constant[j].keys() if constant[i][k] != constant[j][k]),
                  key=_preference)
    key = keys[0] if keys else _FALLBACK_KEY
    for side in (i, j):
        if key == _FALLBACK_KEY:
            chosen[side].setdefault(key, "")  # filled with the class name by the renderer
            notes[side][key] = f"TODO: no label tells these nodes apart; {_LABEL_THEM}"
        elif key not in chosen[side]:
            chosen[side][key] = constant[side][key]
            notes[side][key] = "differs between the classes"


def _exclude_others(i: int, others: list[Node], constant: list[dict[str, str]], chosen: list[dict[str, str]],
                    notes: list[dict[str, str]]) -> None:
    """Add keys until the selector selects no node outside the group (and is never empty)."""
    for key in sorted(constant[i], key=_preference):
        stray = _stray(chosen[i], others)
        if chosen[i] and not stray:
            return
        if key in chosen[i]:
            continue
        if not chosen[i] or any(n.labels.get(key) != constant[i][key] for n in stray):
            notes[i][key] = "keeps the class off other nodes" if chosen[i] else "names this kind of node"
            chosen[i][key] = constant[i][key]
    stray = _stray(chosen[i], others)
    if stray or not chosen[i]:
        names = ", ".join(n.name for n in stray[:3]) + (", ..." if len(stray) > 3 else "")
        why = f"no label tells these nodes from {names}" if stray else "these nodes share no usable label"
        chosen[i][_FALLBACK_KEY] = ""
        notes[i][_FALLBACK_KEY] = f"TODO: {why}; {_LABEL_THEM}"


def _stray(selector: Mapping[str, str], others: list[Node]) -> list[Node]:
    reqs = selectors.requirements_from(selector)
    return [n for n in others if selectors.matches(reqs, n.labels)] if selector else list(others)


# --- the device plugin that runs now ---------------------------------------------------------------------------


def _hami(daemonsets: Iterable[DaemonSet]) -> DraftHami | None:
    found = sorted((ds for ds in daemonsets if facts.is_hami_plugin(ds)), key=lambda ds: (-ds.desired, ds.key))
    if not found:
        return None
    ds = found[0]
    tag = next((facts.image_version(c.image) for c in ds.containers if facts.runs_device_plugin(c)), None)
    return DraftHami(ds.namespace, tag if tag and _VERSION.match(tag) else None, f"from DaemonSet {ds.key}")


def _plugin(daemonsets: Iterable[DaemonSet]) -> DraftPlugin:
    plugins = sorted((ds for ds in daemonsets if facts.is_device_plugin(ds) and not facts.is_hami_plugin(ds)),
                     key=lambda ds: (-ds.desired, ds.key))
    if not plugins:
        return DraftPlugin(source="no NVIDIA device plugin DaemonSet found: the spec's defaults apply")
    ds = plugins[0]
    container = next(c for c in ds.containers if facts.runs_device_plugin(c))
    tag = facts.image_version(container.image)
    version = tag if tag and _VERSION.match(tag) else None
    if any(o.kind == "ClusterPolicy" for o in ds.owners):
        return DraftPlugin("gpu-operator", version, None, ds.namespace, {}, f"from GPU Operator DaemonSet {ds.key}")
    return DraftPlugin("standalone", version, container.image, ds.namespace, _flags(container.args),
                       f"from DaemonSet {ds.key}")


_FLAG_ARGS = {
    "--fail-on-init-error": "failOnInitError",
    "--pass-device-specs": "passDeviceSpecs",
    "--device-list-strategy": "deviceListStrategy",
    "--device-id-strategy": "deviceIdStrategy",
    "--nvidia-driver-root": "nvidiaDriverRoot",
}


def _flags(args: Iterable[str]) -> dict[str, Any]:
    """The plugin's command-line flags that the spec carries, where they differ from the spec's defaults."""
    defaults = PluginFlags().model_dump(by_alias=True)
    out: dict[str, Any] = {}
    for arg in args:
        flag, _, raw = arg.partition("=")
        key = _FLAG_ARGS.get(flag)
        if key is None:
            continue
        value: Any = raw.lower() == "true" if isinstance(defaults[key], bool) else raw
        if value != defaults[key]:
            out[key] = value
    return out


def _kubernetes_version(nodes: Iterable[Node]) -> str | None:
    versions = sorted((int(m[1]), int(m[2])) for n in nodes if (m := _KUBELET.match(n.kubelet_version)))
    return f"{versions[0][0]}.{versions[0][1]}" if versions else None


# --- rendering: YAML with comments ------------------------------------------------------------------------------


def draft_data(draft: Draft) -> dict[str, Any]:
    """The draft as data: exactly what `render_draft`'s text loads as."""
    spec: dict[str, Any] = {}
    if draft.kubernetes_version:
        spec["kubernetesVersion"] = draft.kubernetes_version
    spec["devicePlugin"] = _plugin_data(draft.plugin)
    if draft.hami is not None:
        spec["hami"] = {"namespace": draft.hami.namespace, **({"version": draft.hami.version}
                                                               if draft.hami.version else {})}
    spec["nodeClasses"] = [_class_data(c) for c in draft.classes]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": draft.name}, "spec": spec}


def _plugin_data(plugin: DraftPlugin) -> dict[str, Any]:
    data: dict[str, Any] = {"deploy": plugin.deploy}
    if plugin.version:
        data["version"] = plugin.version
    if plugin.image:
        data["image"] = plugin.image
    if plugin.deploy == "gpu-operator":
        if plugin.namespace:
            data["operator"] = {"namespace": plugin.namespace}
    elif plugin.namespace:
        data["namespace"] = plugin.namespace
    if plugin.flags:
        data["flags"] = dict(plugin.flags)
    return data


def _class_data(draft: DraftClass) -> dict[str, Any]:
    count = draft.sharing.physical_gpus or draft.key.count
    gpu: dict[str, Any] = {"model": draft.gpu.product if draft.gpu else draft.key.model, "count": count}
    if draft.stated_memory_mib is not None:
        gpu["memory"] = f"{draft.stated_memory_mib}Mi"
    drivers = {facts.driver_version(n.labels) for n in draft.nodes}
    if len(drivers) == 1 and None not in drivers:
        gpu["driverVersion"] = drivers.pop()
    data = {
        "name": draft.name,
        "description": _description(draft),
        **({"allocation": "dra"} if draft.key.dra is not None else {}),
        "nodeSelector": {k: v or draft.name for k, v in draft.node_selector.items()},
        "nodes": len(draft.nodes),
        "gpu": gpu,
        "sharing": _sharing_data(draft),
    }
    if draft.taints:
        data["taints"] = [{"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
                          for t in draft.taints]
    return data


def _sharing_data(draft: DraftClass) -> Any:
    """What the nodes run now: HAMi's registration where HAMi runs, else what GFD's labels show (exclusive where
    they show no sharing)."""
    seen = draft.key.vgpu
    if seen is None:
        return draft.sharing.data
    vgpu: dict[str, Any] = {"splitCount": seen.split_count}
    if seen.memory_scaling != 1:
        vgpu["memoryScaling"] = seen.memory_scaling
    if seen.core_scaling != 1:
        vgpu["coreScaling"] = seen.core_scaling
    return {"vgpu": vgpu}


def _description(draft: DraftClass) -> str:
    model = draft.gpu.display_name if draft.gpu else draft.key.model
    where = f" on {draft.key.instance_type}" if draft.key.instance_type else ""
    return f"{draft.sharing.physical_gpus or draft.key.count}x {model}{where}"


def render_draft(draft: Draft, *, schema: str | None = None) -> str:
    """The draft spec as commented YAML; every value is written by the YAML dumper, so it loads as `draft_data`.
    ``schema``: where the spec's JSON Schema is, for the yaml-language-server line; None writes how to get one."""
    data = draft_data(draft)
    top = [f"# yaml-language-server: $schema={schema}", "#", *_header(draft)] if schema else [
        *_header(draft), "#", *_NO_SCHEMA]
    lines = [*top,
             f"apiVersion: {_scalar(data['apiVersion'])}", f"kind: {_scalar(data['kind'])}",
             "metadata:", f"  name: {_scalar(draft.name)}", "spec:"]
    spec = data["spec"]
    if "kubernetesVersion" in spec:
        lines.append(f"  kubernetesVersion: {_scalar(spec['kubernetesVersion'])}  # the oldest kubelet among the nodes")
    lines += _block("devicePlugin", spec["devicePlugin"], 1, draft.plugin.source)
    if draft.hami is not None:
        lines += _block("hami", spec["hami"], 1, f"HAMi {draft.hami.source}")
    lines.append("  nodeClasses:")
    for draft_class, class_data in zip(draft.classes, spec["nodeClasses"], strict=True):
        lines += _class_lines(draft_class, class_data)
    return "\n".join(lines) + "\n"


def _header(draft: Draft) -> list[str]:
    gpu_nodes = sum(len(c.nodes) for c in draft.classes)
    source, grouping = "GPU Feature Discovery labels", "GPU model, count, memory, MIG capability and instance type"
    if draft.hami is not None:
        source += " or HAMi's registration"
        grouping = "GPU model, count, memory, MIG capability, instance type and HAMi's split"
    if any(c.key.dra is not None for c in draft.classes):
        source += " or devices in NVIDIA's DRA driver's ResourceSlices"
    lines = [
        f"# Drafted by `gpupolicy cluster discover` from {_where(draft)}: {draft.nodes} "
        f"nodes, {gpu_nodes} with {source}, grouped by {grouping} into one class each.",
        "# TODO: check each class's sharing below (what the nodes' GPU Feature Discovery labels or HAMi's registration "
        "show they run now; exclusive where they show none) and change it where the nodes should run something else, "
        "then save this draft and run `gpupolicy validate` and `gpupolicy compile` on it.",
    ]
    lines += [f"# Not drafted: {s}." for s in draft.skipped]
    return _wrap(lines)


def _where(draft: Draft) -> str:
    return f"context {draft.context} ({draft.server})" if draft.server else draft.context


def _wrap(lines: list[str], width: int = 118) -> list[str]:
    out = []
    for line in lines:
        prefix = line[: len(line) - len(line.lstrip(" #"))]
        words, current = line[len(prefix):].split(" "), prefix
        for word in words:
            if len(current) + len(word) + 1 > width and current.strip(" #"):
                out.append(current.rstrip())
                current = prefix
            current += word + " "
        out.append(current.rstrip())
    return out


def _class_lines(draft: DraftClass, data: dict[str, Any]) -> list[str]:
    pad = "      "
    lines = _wrap([f"    # {c}" for c in _class_comments(draft)])
    lines.append(f"    - name: {_scalar(data['name'])}")
    lines.append(f"{pad}description: {_scalar(data['description'])}")
    if "allocation" in data:
        lines.append(f"{pad}allocation: {data['allocation']}  # NVIDIA's DRA driver publishes these GPUs")
    lines.append(f"{pad}nodeSelector:")
    for key, value in data["nodeSelector"].items():
        note = draft.selector_notes.get(key)
        lines.append(f"{pad}  {_scalar(key)}: {_scalar(value)}" + (f"  # {note}" if note else ""))
    lines.append(f"{pad}nodes: {data['nodes']}  # for the capacity report")
    lines.append(f"{pad}gpu:")
    lines.append(f"{pad}  model: {_scalar(data['gpu']['model'])}")
    lines.append(f"{pad}  count: {data['gpu']['count']}")
    if "memory" in data["gpu"]:
        lines.append(f"{pad}  memory: {_scalar(data['gpu']['memory'])}  # nvidia.com/gpu.memory as the nodes report it")
    if "driverVersion" in data["gpu"]:
        lines.append(f"{pad}  driverVersion: {_scalar(data['gpu']['driverVersion'])}  # GFD's cuda.driver labels")
    lines += _wrap([f"{pad}# {c}" for c in _sharing_comments(draft)])
    if isinstance(data["sharing"], Mapping):
        lines += _block("sharing", data["sharing"], 3)
    else:
        lines.append(f"{pad}sharing: {data['sharing']}")
    if "taints" in data:
        lines.append(f"{pad}taints: {_scalar(data['taints'])}  # every node of the class carries them")
    return lines


def _class_comments(draft: DraftClass) -> list[str]:
    names = ", ".join(n.name for n in draft.nodes[:5]) + (", ..." if len(draft.nodes) > 5 else "")
    memory = f", {draft.key.memory_mib} MiB each" if draft.key.memory_mib else ""
    # The GPUs the class's gpu.count says: under MIG single nvidia.com/gpu.count counts MIG devices, and a MIG mixed
    # node without the label gets the fewest GPUs that hold its devices (cluster.sharing).
    gpus = draft.sharing.physical_gpus or draft.key.count
    out = [f"{len(draft.nodes)} node(s) with {gpus}x {draft.key.model}{memory}: {names}"]
    if draft.key.dra is not None:
        out.append("NVIDIA's DRA driver publishes them (ResourceSlices of gpu.nvidia.com): the class is drafted from "
                   "those devices")
        return out
    seen = [text for key, name in _SEEN_LABELS if (text := _seen(draft.nodes, key, name))]
    out.append("GFD today: " + ", ".join(seen) if seen else "no GFD labels: the GPUs are as HAMi registered them")
    if draft.gpu is None:
        out.append("not in the catalog: gpu.memory is stated so sizing works; MIG and MPS limits are unknown")
    return out


_SEEN_LABELS = ((facts.PRODUCT, "product"), (facts.REPLICAS, "replicas"), (facts.SHARING_STRATEGY, "sharing"),
                (facts.MIG_STRATEGY, "MIG strategy"), ("nvidia.com/mig.config", "MIG config"))


def _seen(nodes: Iterable[Node], key: str, name: str) -> str:
    values = sorted({n.labels[key] for n in nodes if key in n.labels})
    return f"{name} {' / '.join(values)}" if values else ""


def _sharing_comments(draft: DraftClass) -> list[str]:
    if draft.key.dra is not None:
        return [f"The driver publishes {draft.sharing.summary}: compiling keeps that. MPS (mps: {{replicas: N}}) "
                "is a DeviceClass config the driver applies per claim; docs/dra.md says what DRA can share.",
                *(f"TODO: {t}." for t in draft.sharing.todo)]
    seen = draft.key.vgpu
    if seen is not None:
        return [f"HAMi runs here: its device plugin registers each GPU as {seen.split_count} vGPUs (memory x "
                f"{seen.memory_scaling:g}, cores x {seen.core_scaling:g}); kept as vgpu so compiling changes nothing "
                "but the owner of the DaemonSet."]
    choices = ["timeSlicing: {replicas: N} or {sizing: {memoryPerReplica: <measured memory of one process>, "
               "reserve: 10%}}", "mps: {replicas: N} (device plugin v0.15+, memory limit per client)"]
    model = draft.gpu
    if model is not None and model.mig is not None:
        profiles = ", ".join(f"{p.name} x{p.max_count}" for p in model.mig.profiles if "+" not in p.name)
        choices.append(f"mig: {{strategy: mixed, layout: {{...}}}} (profiles per GPU: {profiles})")
    choices.append("or keep exclusive")
    if draft.sharing.data == "exclusive":
        out = ["TODO: choose the sharing mode: " + "; ".join(choices) + "."]
    else:
        out = [f"The nodes run {draft.sharing.summary} now (GPU Feature Discovery labels and capacity): compiling "
               "this keeps what their workloads ask for. To change it: " + "; ".join(choices[:-1]) + "."]
    out += [f"TODO: {t}." for t in draft.sharing.todo]
    settled = _settled_node(draft)
    out += [f"TODO: {node} shows {shown}, unlike {settled}, which the class follows: compiling makes {node} run the "
            "same; give it a class of its own if it must keep what it runs." for node, shown in draft.differing]
    return out


def _settled_node(draft: DraftClass) -> str:
    return next((n.name for n in draft.nodes if settled(n)), draft.nodes[0].name)


def _block(key: str, value: Mapping[str, Any], depth: int, note: str = "") -> list[str]:
    pad = "  " * depth
    lines = [f"{pad}{key}:" + (f"  # {note}" if note else "")]
    for k, v in value.items():
        if isinstance(v, Mapping):
            lines += _block(k, v, depth + 1)
        else:
            lines.append(f"{pad}  {_scalar(k)}: {_scalar(v)}")
    return lines


def _scalar(value: Any) -> str:
    """One scalar as the project's YAML dumper writes it (quoted when a reader could take it for another type)."""
    text = yaml.dump(value, Dumper=serialize.Dumper, default_flow_style=True, width=10**6)
    return text.removesuffix("\n").removesuffix("\n...").strip()
