"""The mig-parted `version: v1` document: one named MIG layout per MIG class, plus all-disabled."""

from __future__ import annotations

from compiler import objects, serialize
from compiler.objects import Obj
from policy import catalog
from policy.model import ClusterGPUPolicy, NodeClass

CONFIG_LABEL = "nvidia.com/mig.config"
CONFIG_KEY = "config.yaml"  # the key mig-manager reads from a custom ConfigMap (mig.md §5)
CONFIG_MAP = "gpupolicy-mig-parted-config"
ALL_DISABLED = "all-disabled"  # the name the operator's own default config and its node labelling use


def mig_classes(policy: ClusterGPUPolicy) -> tuple[NodeClass, ...]:
    return tuple(sorted((nc for nc in policy.spec.node_classes if nc.sharing.mig is not None),
                        key=lambda nc: nc.name))


def has_mig(policy: ClusterGPUPolicy) -> bool:
    # Asked once per class while rendering: stop at the first MIG class instead of sorting them all.
    return any(nc.sharing.mig is not None for nc in policy.spec.node_classes)


def config_name(policy: ClusterGPUPolicy, node_class: NodeClass) -> str | None:
    """The mig-parted config a class's nodes must select with nvidia.com/mig.config, if any.

    MIG classes select their own layout.  Other classes on MIG-capable GPUs select all-disabled when a
    mig-manager reads our config (the operator always runs one): MPS fails on MIG-enabled GPUs and a
    left-over MIG mode would hide the whole GPU (device-plugin.md §3).
    """
    if node_class.sharing.mig is not None:
        return node_class.name
    model = catalog.lookup(node_class.gpu.model)
    managed = policy.spec.device_plugin.deploy == "gpu-operator" or has_mig(policy)
    if model is not None and model.mig_capable and managed:
        return ALL_DISABLED
    return None


def render_mig_parted(policy: ClusterGPUPolicy) -> Obj:
    """The mig-parted config: entries apply in order and a GPU matched twice ends with the last one
    (mig.md §4), so every group of a class names disjoint GPUs."""
    configs: dict[str, list[Obj]] = {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for node_class in mig_classes(policy):
        assert node_class.name != ALL_DISABLED, "a MIG class named all-disabled would replace the default"
        configs[node_class.name] = _entries(node_class)
    return {"version": "v1", "mig-configs": configs}


def _entries(node_class: NodeClass) -> list[Obj]:
    mig = node_class.sharing.mig
    assert mig is not None
    if mig.layout is not None:
        groups: list[tuple[object, dict[str, int]]] = [("all", dict(mig.layout))]
    else:
        assert mig.groups is not None
        groups = [(g.gpus if g.gpus == "all" else list(g.gpus), dict(g.layout)) for g in mig.groups]
    entries = []
    for devices, layout in groups:
        # No device-filter: a class's nodes hold one GPU model, and a filter naming the wrong board's PCI id
        # (an H100 PCIe node in a class written "H100") makes mig-parted skip every GPU silently (mig.md §4).
        # mig-manager's own generated configs filter only on mixed-model nodes, for the same reason.
        entries.append({"devices": devices, "mig-enabled": True, "mig-devices": dict(sorted(layout.items()))})
    return entries


def render_config_map(policy: ClusterGPUPolicy) -> Obj:
    """The content-named ConfigMap mig-manager mounts (key config.yaml), next to the plugin it serves."""
    plugin = policy.spec.device_plugin
    namespace = plugin.operator.namespace if plugin.deploy == "gpu-operator" else plugin.namespace
    text = serialize.dump_yaml(render_mig_parted(policy)).decode("utf-8")
    return objects.config_map(CONFIG_MAP, {CONFIG_KEY: text}, namespace=namespace,
                              labels=objects.labels(policy, "mig"))
